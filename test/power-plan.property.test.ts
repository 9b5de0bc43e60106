/**
 * The power planner's rules (src/domain/power-plan.ts) on random hosts, bookings, boot times and
 * settings: no host is powered off when its next booking starts within the idle threshold plus its
 * boot time (nor while booked), and a sleeping host, followed look after look as the planner asks,
 * is woken at least its boot time plus the margin before its next booking (at once when that is
 * already too late). Every look is in the future and at most the recheck period away. The awake
 * reserve: per capability set, the reserve's awake hosts free for long are never powered off, a
 * shortfall is refilled from sleeping managed hosts free for long, and nothing else changes.
 */
import fc from 'fast-check';
import { freeForLong, hostNeeds, learnedBootMs, planPower, type PlannedHost, type PowerPlan, type PowerPlanSettings } from '../src/domain/power-plan';

const MIN = 60_000;
const H = 60 * MIN;
const T0 = Date.UTC(2099, 0, 1);

const settingsArb = fc
  .record({
    offAfterIdleMin: fc.integer({ min: 1, max: 600 }),
    marginFraction: fc.double({ min: 0, max: 1, noNaN: true }),
    recheckMin: fc.integer({ min: 1, max: 120 }),
    awakeReserve: fc.integer({ min: 0, max: 4 }),
  })
  .map(({ offAfterIdleMin, marginFraction, recheckMin, awakeReserve }): PowerPlanSettings => ({
    offAfterIdleMs: offAfterIdleMin * MIN,
    // The margin is at most the threshold, as the configuration requires.
    marginMs: Math.floor(marginFraction * offAfterIdleMin) * MIN,
    recheckMs: recheckMin * MIN,
    awakeReserve,
  }));

const hostArb = (index: number) =>
  fc.record({
    power: fc.constantFrom('on' as const, 'off' as const, 'unknown' as const),
    manage: fc.boolean(),
    // Minutes from now to the next booking's start (negative: booked now), or none.
    nextNeededMin: fc.option(fc.integer({ min: -600, max: 3 * 24 * 60 }), { nil: null }),
    busyForMin: fc.integer({ min: 1, max: 600 }),
    bootMin: fc.integer({ min: 0, max: 60 }),
    // Two capability sets, or none (a failed host: no part of the reserve).
    reserveClass: fc.constantFrom('gpu', 'cpu', null),
  }).map((h): PlannedHost => ({
    id: String(index + 1),
    power: h.power,
    manage: h.manage,
    nextNeededMs: h.nextNeededMin === null ? null : T0 + h.nextNeededMin * MIN,
    busyUntilMs: h.nextNeededMin !== null && h.nextNeededMin <= 0 ? T0 + (h.nextNeededMin + h.busyForMin) * MIN : null,
    bootMs: h.bootMin * MIN,
    reserveClass: h.reserveClass,
  }));

const hostsArb = fc.integer({ min: 1, max: 8 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => hostArb(i))));

describe('the power planner', () => {
  it('never powers off a host booked now, or whose next booking starts within the idle threshold plus its boot time', () => {
    fc.assert(
      fc.property(hostsArb, settingsArb, (hosts, settings) => {
        const plan = planPower(hosts, T0, settings);
        for (const id of plan.powerOff) {
          const host = hosts.find((h) => h.id === id)!;
          expect(host.power).toBe('on');
          expect(host.manage).toBe(true);
          if (host.nextNeededMs !== null) expect(host.nextNeededMs - T0).toBeGreaterThan(settings.offAfterIdleMs + host.bootMs);
        }
        expect(plan.nextLookMs).toBeGreaterThan(T0);
        expect(plan.nextLookMs).toBeLessThanOrEqual(T0 + settings.recheckMs);
        expect(plan.powerOn.filter((id) => plan.powerOff.includes(id))).toEqual([]);
      }),
      { numRuns: 500 },
    );
  });

  it('wakes every sleeping host its boot time plus the margin before its next booking, following the looks it asks for', () => {
    fc.assert(
      fc.property(hostsArb, settingsArb, (hosts, withReserve) => {
        // Booking wakes alone (the hosts woken leave the plan's view: a reserve would refill them).
        const settings = { ...withReserve, awakeReserve: 0 };
        const sleeping = hosts.map((h) => ({ ...h, power: 'off' as const }));
        const wokenAt = new Map<string, number>();
        let now = T0;
        // Bounded: each look moves forward by at least a minute's part, and the bookings are at most 3 days out.
        for (let look = 0; look < 10_000 && wokenAt.size < sleeping.length; look++) {
          const plan = planPower(sleeping.filter((h) => !wokenAt.has(h.id)), now, settings);
          for (const id of plan.powerOn) wokenAt.set(id, now);
          expect(plan.nextLookMs).toBeGreaterThan(now);
          if (sleeping.every((h) => wokenAt.has(h.id) || h.nextNeededMs === null)) break;
          now = plan.nextLookMs;
        }
        for (const host of sleeping) {
          if (host.nextNeededMs === null) {
            expect(wokenAt.has(host.id)).toBe(false);
            continue;
          }
          const dueAt = Math.max(T0, host.nextNeededMs - host.bootMs - settings.marginMs);
          expect(wokenAt.get(host.id)).toBeDefined();
          expect(wokenAt.get(host.id)!).toBeLessThanOrEqual(dueAt);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('does not put a host just woken back to sleep before its booking', () => {
    fc.assert(
      fc.property(hostsArb, settingsArb, (hosts, settings) => {
        for (const host of hosts) {
          if (host.nextNeededMs === null) continue;
          const wokenAt = host.nextNeededMs - host.bootMs - settings.marginMs;
          // From its wake to its booking, on, it is never planned off.
          for (const at of [wokenAt, Math.floor((wokenAt + host.nextNeededMs) / 2), host.nextNeededMs]) {
            expect(planPower([{ ...host, power: 'on', busyUntilMs: at >= host.nextNeededMs ? host.nextNeededMs + H : null }], at, settings).powerOff).toEqual([]);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('powers off an idle managed host whose next booking is far, and looks again when a booking ends', () => {
    const settings = { offAfterIdleMs: 2 * H, marginMs: 5 * MIN, recheckMs: H };
    const host = (patch: Partial<PlannedHost>): PlannedHost => ({ id: '1', power: 'on', manage: true, nextNeededMs: null, busyUntilMs: null, bootMs: 10 * MIN, ...patch });
    expect(planPower([host({})], T0, settings).powerOff).toEqual(['1']);
    expect(planPower([host({ nextNeededMs: T0 + 2 * H + 10 * MIN + 1 })], T0, settings).powerOff).toEqual(['1']);
    expect(planPower([host({ nextNeededMs: T0 + 2 * H + 10 * MIN })], T0, settings).powerOff).toEqual([]);
    expect(planPower([host({ manage: false })], T0, settings).powerOff).toEqual([]);
    const busy = planPower([host({ nextNeededMs: T0 - H, busyUntilMs: T0 + 20 * MIN })], T0, settings);
    expect(busy).toEqual({ powerOff: [], powerOn: [], nextLookMs: T0 + 20 * MIN });
    const asleep = planPower([host({ power: 'off', nextNeededMs: T0 + 30 * MIN })], T0, settings);
    expect(asleep).toEqual({ powerOff: [], powerOn: [], nextLookMs: T0 + 15 * MIN });
    expect(planPower([host({ power: 'unknown', manage: false, nextNeededMs: T0 + 15 * MIN })], T0, settings).powerOn).toEqual(['1']);
  });
});

describe('the awake reserve', () => {
  const byClass = (hosts: readonly PlannedHost[], now: number, settings: PowerPlanSettings) => {
    const classes = new Map<string, PlannedHost[]>();
    for (const host of hosts) if (host.reserveClass != null && freeForLong(host, now, settings)) classes.set(host.reserveClass, [...(classes.get(host.reserveClass) ?? []), host]);
    return classes;
  };
  const awakeAfter = (free: readonly PlannedHost[], plan: PowerPlan) =>
    free.filter((h) => (h.power === 'on' && !plan.powerOff.includes(h.id)) || plan.powerOn.includes(h.id)).length;

  it('never powers off the reserve, and refills it from sleeping hosts free for long when there are enough', () => {
    fc.assert(
      fc.property(hostsArb, settingsArb, (hosts, settings) => {
        const plan = planPower(hosts, T0, settings);
        const reserve = settings.awakeReserve ?? 0;
        for (const free of byClass(hosts, T0, settings).values()) {
          const awakeBefore = free.filter((h) => h.power === 'on').length;
          // The awake ones stay up to the reserve; with the sleeping ones, the reserve is reached when the set has enough hosts.
          expect(free.filter((h) => h.power === 'on' && !plan.powerOff.includes(h.id)).length).toBeGreaterThanOrEqual(Math.min(reserve, awakeBefore));
          expect(awakeAfter(free, plan)).toBeGreaterThanOrEqual(Math.min(reserve, free.filter((h) => h.power === 'on' || h.manage).length));
          // And no more than needed: every host beyond the reserve that may sleep does, no wake beyond the shortfall.
          expect(awakeAfter(free, plan)).toBeLessThanOrEqual(Math.max(reserve, free.filter((h) => h.power === 'on' && !h.manage).length));
        }
        // No host is both powered off and woken, none woken twice, none without a set woken for the reserve.
        expect(plan.powerOn.filter((id) => plan.powerOff.includes(id))).toEqual([]);
        expect(new Set(plan.powerOn).size).toBe(plan.powerOn.length);
        const alone = planPower(hosts, T0, { ...settings, awakeReserve: 0 });
        // …and none with manage: false (woken for its bookings alone: the planner would never put it back to sleep).
        for (const id of plan.powerOn.filter((id) => !alone.powerOn.includes(id))) expect(hosts.find((h) => h.id === id)).toMatchObject({ reserveClass: expect.any(String), manage: true });
        expect(plan.powerOff.every((id) => alone.powerOff.includes(id))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('keeps the hosts free the longest, wakes the longest free to refill, and looks again when a kept host’s booking comes near', () => {
    const settings: PowerPlanSettings = { offAfterIdleMs: 2 * H, marginMs: 5 * MIN, recheckMs: 6 * H, awakeReserve: 1 };
    const host = (id: string, patch: Partial<PlannedHost>): PlannedHost => ({ id, power: 'on', manage: true, nextNeededMs: null, busyUntilMs: null, bootMs: 10 * MIN, reserveClass: 'cpu', ...patch });
    const soon = host('1', { nextNeededMs: T0 + 5 * H });
    const never = host('2', {});
    expect(planPower([soon, never], T0, settings)).toEqual({ powerOff: ['1'], powerOn: [], nextLookMs: T0 + 6 * H });
    const kept = planPower([soon, host('2', { nextNeededMs: T0 + 3 * H })], T0, settings);
    expect(kept).toEqual({ powerOff: ['2'], powerOn: [], nextLookMs: T0 + 2 * H + 50 * MIN });
    // A host the planner may not power off counts first.
    expect(planPower([never, host('3', { manage: false, nextNeededMs: T0 + 4 * H })], T0, settings).powerOff).toEqual(['2']);
    // Another capability set keeps its own; a host booked now is no part of it.
    expect(planPower([never, host('4', { reserveClass: 'gpu' })], T0, settings).powerOff).toEqual([]);
    expect(planPower([never, host('5', { nextNeededMs: T0 - H, busyUntilMs: T0 + H })], T0, settings).powerOff).toEqual([]);
    const asleep = [host('6', { power: 'off', nextNeededMs: T0 + 3 * H }), host('7', { power: 'off' }), host('8', { power: 'unknown', reserveClass: null })];
    expect(planPower(asleep, T0, settings).powerOn).toEqual(['7']);
    expect(planPower(asleep, T0, { ...settings, awakeReserve: 3 }).powerOn).toEqual(['7', '6']);
    expect(planPower(asleep, T0, { ...settings, awakeReserve: 0 }).powerOn).toEqual([]);
    // A sleeping host with manage: false never refills it; a managed one does.
    expect(planPower([host('9', { power: 'off', manage: false }), host('10', { power: 'off', nextNeededMs: T0 + 3 * H })], T0, settings).powerOn).toEqual(['10']);
  });
});

describe('a host’s next need from its bookings and maintenance windows', () => {
  it('is the earliest start among them, busy until the latest end of those begun', () => {
    const needs = hostNeeds([
      { host_id: '1', start_ms: T0 + H, busy_until_ms: null },
      { host_id: '1', start_ms: T0 + 3 * H, busy_until_ms: null },
      { host_id: '2', start_ms: T0 - H, busy_until_ms: T0 + H },
      { host_id: '2', start_ms: T0 - 2 * H, busy_until_ms: T0 + 2 * H },
      { host_id: '3', start_ms: T0 - H, busy_until_ms: T0 + H },
      { host_id: '3', start_ms: T0 + 5 * H, busy_until_ms: null },
    ]);
    expect(needs.get('1')).toEqual({ nextNeededMs: T0 + H, busyUntilMs: null });
    expect(needs.get('2')).toEqual({ nextNeededMs: T0 - 2 * H, busyUntilMs: T0 + 2 * H });
    expect(needs.get('3')).toEqual({ nextNeededMs: T0 - H, busyUntilMs: T0 + H });
    expect(needs.has('4')).toBe(false);
  });
});

describe('a host’s boot time', () => {
  const settings = { defaultBootMs: 600_000, minSamples: 5 };

  it('is the default until enough boots are known, then their 95th percentile', () => {
    expect(learnedBootMs([], settings)).toBe(600_000);
    expect(learnedBootMs([1, 2, 3, 4], settings)).toBe(600_000);
    expect(learnedBootMs([50, 10, 40, 20, 30], settings)).toBe(50);
    expect(learnedBootMs(Array.from({ length: 20 }, (_, i) => (i + 1) * 1000), settings)).toBe(19_000);
  });

  it('is one of the boots, at least 95 % of them no longer', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 3_600_000 }), { minLength: 5, maxLength: 100 }), (boots) => {
        const p95 = learnedBootMs(boots, settings);
        expect(boots).toContain(p95);
        expect(boots.filter((b) => b <= p95).length).toBeGreaterThanOrEqual(Math.ceil(0.95 * boots.length));
      }),
    );
  });
});
