/**
 * How a lease records its lendings (issue 43, src/domain/lending.ts), pure: which reservations may
 * lend, a partial reclaim splitting a lending, when lent hosts are due back, and the end closing them.
 */
import type { Lease, ReservationLending } from '../src/domain/lease';
import { afterReclaim, asReclaimedLendings, borrowedMsInside, lendCandidateCount, lendingDueMs, lendRefusal, lentCount, lentHostIds, reclaimedBy, withLendingsReturned } from '../src/domain/lending';
import { defaultReclaimNeed } from '../src/domain/preemption';
import { pendingReservation } from '../dev-stack/fixtures/builders';
import { lendTimeoutMs, lendTotalMs } from '../workflows/lease/activity-options';

const lending = (fields: Partial<ReservationLending> = {}): ReservationLending => ({
  id: 'lend-1', hosts: ['h-1', 'h-2', 'h-3'], hostIds: ['1', '2', '3'], lentAtMs: 1_000, untilMs: 9_000, state: 'lent', borrowed: false, ...fields,
});

describe('a lease\'s lendings', () => {
  it('lets only a regular physical:host or virtual:instance reservation of the lease lend, and not one that releases its hosts', () => {
    const regular = pendingReservation('physical:host', { min: 1, max: 1 });
    const preemptible = pendingReservation('physical:host', { min: 1, max: 1, preemptible: true });
    const released = { ...pendingReservation('physical:host', { min: 1, max: 1 }), allocation: { on_end: 'release' } };
    const instance = pendingReservation('virtual:instance', { amount: 1 });
    const preemptibleInstance = pendingReservation('virtual:instance', { amount: 1, preemptible: true });
    const flavor = pendingReservation('flavor:instance', { amount: 1 });
    const lease = { id: 'l', name: 'lender', reservations: [regular, preemptible, released, instance, preemptibleInstance, flavor] } as Pick<Lease, 'id' | 'name' | 'reservations'>;
    expect(lendRefusal(lease, regular.id)).toBeUndefined();
    expect(lendRefusal(lease, instance.id)).toBeUndefined();
    expect(lendRefusal(lease, preemptible.id)).toMatch(/is preemptible/);
    expect(lendRefusal(lease, preemptibleInstance.id)).toMatch(/is preemptible/);
    expect(lendRefusal(lease, released.id)).toMatch(/on_end: release/);
    expect(lendRefusal(lease, flavor.id)).toMatch(/only physical:host and virtual:instance reservations lend/);
    expect(lendRefusal(lease, 'other')).toMatch(/has no reservation other/);
  });

  it('splits a partly reclaimed lending: the taken hosts reclaiming, one entry per return, the rest still lent', () => {
    const after = afterReclaim([lending(), lending({ id: 'lend-0', state: 'returned', hosts: ['h-9'], hostIds: ['9'] })], [
      { hostId: '3', returnsAtMs: 5_000, borrowed: true },
      { hostId: '1', returnsAtMs: 2_000, borrowed: false },
    ]);
    expect(after).toEqual([
      lending({ hosts: ['h-2'], hostIds: ['2'] }),
      lending({ hosts: ['h-1'], hostIds: ['1'], state: 'reclaiming', returnsAtMs: 2_000 }),
      lending({ hosts: ['h-3'], hostIds: ['3'], state: 'reclaiming', returnsAtMs: 5_000, borrowed: true }),
      lending({ id: 'lend-0', state: 'returned', hosts: ['h-9'], hostIds: ['9'] }),
    ]);
    expect(lentHostIds({ lendings: after })).toEqual(['2']);
    expect(after.map(lendingDueMs)).toEqual([9_000, 2_000, 5_000, 9_000]);
    // A reclaim of everything, with a sooner need, takes the one still lent and the one coming back at 5 000 sooner.
    const sooner = afterReclaim(after, [
      { hostId: '2', returnsAtMs: 3_000, borrowed: false },
      { hostId: '3', returnsAtMs: 3_000, borrowed: false },
    ]);
    expect(sooner.map((l) => [l.hostIds, l.state, lendingDueMs(l), l.borrowed])).toEqual([
      [['2'], 'reclaiming', 3_000, false],
      [['1'], 'reclaiming', 2_000, false],
      [['3'], 'reclaiming', 3_000, true],
      [['9'], 'returned', 9_000, false],
    ]);
  });

  it('splits a slot lending with its slots, and counts what a reservation lends as its count counts: slots, or hosts', () => {
    const slots = lending({ hosts: ['h-1', 'h-2'], hostIds: ['11', '12'], slots: [2, 1] });
    const after = afterReclaim([slots], [{ hostId: '12', returnsAtMs: 4_000, borrowed: true }]);
    expect(after).toEqual([
      lending({ hosts: ['h-1'], hostIds: ['11'], slots: [2] }),
      lending({ hosts: ['h-2'], hostIds: ['12'], slots: [1], state: 'reclaiming', returnsAtMs: 4_000, borrowed: true }),
    ]);
    expect(lentCount({ resource_type: 'virtual:instance', lendings: [slots] })).toEqual({ count: 3, unit: 'slot' });
    expect(lentCount({ resource_type: 'virtual:instance', lendings: after })).toEqual({ count: 2, unit: 'slot' });
    expect(lentCount({ resource_type: 'virtual:instance' })).toEqual({ count: 0, unit: 'slot' });
    expect(lentCount({ resource_type: 'physical:host', lendings: [lending()] })).toEqual({ count: 3, unit: 'host' });
  });

  it('closes every open lending at the lease\'s end, and leaves a reservation that lent nothing as it is', () => {
    const reservation = { ...pendingReservation('physical:host', {}), lendings: [lending(), lending({ id: 'lend-2', state: 'reclaiming', returnsAtMs: 3_000 })] };
    expect(withLendingsReturned(reservation).lendings.map((g) => g.state)).toEqual(['returned', 'returned']);
    const none = pendingReservation('physical:host', {});
    expect(withLendingsReturned(none)).toBe(none);
  });

  it('needs reclaimed hosts, when no need is given, the whole warning after the borrower is told: a tenth of it (at most 5 s) for the telling, to the next second', () => {
    const now = Date.UTC(2026, 10, 28, 12, 0, 0, 700);
    expect(defaultReclaimNeed(now, 60_000)).toBe(Date.UTC(2026, 10, 28, 12, 1, 6));
    expect(defaultReclaimNeed(now, 15_000)).toBe(Date.UTC(2026, 10, 28, 12, 0, 18));
    expect(defaultReclaimNeed(now, 10 * 60_000)).toBe(Date.UTC(2026, 10, 28, 12, 10, 6));
    expect(defaultReclaimNeed(Date.UTC(2026, 10, 28, 12), 60_000)).toBe(Date.UTC(2026, 10, 28, 12, 1, 5));
  });
});

describe('what a reclaim whose answer was lost took (reclaimedBy)', () => {
  // Host 1 is being reclaimed (back at 5 000), hosts 2 and 3 are lent.
  const recorded = [lending({ id: 'early', hosts: ['h-1'], hostIds: ['1'], state: 'reclaiming', returnsAtMs: 5_000 }), lending({ id: 'later', hosts: ['h-2', 'h-3'], hostIds: ['2', '3'] })];
  const earlier = { hostId: '1', returnsAtMs: 5_000, borrowed: true }; // the record says unborrowed: not this reclaim's difference

  it('is the hosts it found lent and now being reclaimed', () => {
    expect(reclaimedBy(recorded, [earlier, { hostId: '2', returnsAtMs: 6_000, borrowed: false }], ['2', '3'])).toEqual([{ hostId: '2', returnsAtMs: 6_000, borrowed: false }]);
  });

  it('is nothing when it took nothing, whatever else the calendar and the record disagree on', () => {
    expect(reclaimedBy(recorded, [earlier], ['2', '3'])).toEqual([]);
    expect(reclaimedBy(recorded, [earlier], ['2', '3'], 4_000)).toEqual([]);
  });

  it('is a host being reclaimed already whose return it brought sooner, to its need at most', () => {
    const sooner = { ...earlier, returnsAtMs: 4_000 };
    expect(reclaimedBy(recorded, [sooner], [], 4_000)).toEqual([sooner]);
    expect(reclaimedBy(recorded, [sooner], [])).toEqual([]); // no need given: no sooner reclaim
    expect(reclaimedBy(recorded, [sooner], [], 3_000)).toEqual([]); // not this reclaim's need
  });
});

describe('what a lending held, for hosts and slots alike', () => {
  it('counts a borrower\'s time inside its lending only, clipped to the lending\'s window', () => {
    const lent = { id: '7', start_ms: 1_000, end_ms: 9_000 };
    const inside = [
      { lending_row_id: '7', start_ms: 500, end_ms: 3_000 }, // began before the lending (a lead): 2 000 inside
      { lending_row_id: '7', start_ms: 4_000, end_ms: 12_000 }, // past its end: 5 000 inside
      { lending_row_id: '8', start_ms: 1_000, end_ms: 9_000 }, // another lending's
      { lending_row_id: '7', start_ms: 9_500, end_ms: 10_000 }, // wholly after it
    ];
    expect(borrowedMsInside(lent, inside)).toBe(7_000);
  });

  it('answers reclaimed lendings by their host (or row), back at their end, borrowed when someone is inside', () => {
    const lendings = [{ id: '7', host_id: '3', end_ms: 5_000 }, { id: '8', host_id: '4', end_ms: 6_000 }];
    expect(asReclaimedLendings(lendings, [{ lending_row_id: '8' }], (g) => g.host_id)).toEqual([
      { hostId: '3', returnsAtMs: 5_000, borrowed: false },
      { hostId: '4', returnsAtMs: 6_000, borrowed: true },
    ]);
  });
});

describe('a lend\'s time (workflows/lease/activity-options.ts)', () => {
  it('grows by the same step for each host asked, and is bounded however many are asked', () => {
    const step = lendTimeoutMs(2) - lendTimeoutMs(1);
    expect(step).toBeGreaterThan(0);
    expect(lendTimeoutMs(50) - lendTimeoutMs(49)).toBe(step);
    expect(lendTimeoutMs(1)).toBeGreaterThan(step); // room for the lend's own reads and writes besides its hosts
    expect(lendTimeoutMs(1_000)).toBe(lendTimeoutMs(1_000_000));
    expect(lendTimeoutMs(1_000)).toBeLessThanOrEqual(3_600_000);
  });

  it('ends, its tries included, well before its lease\'s end, so that the end (and the next lease on its hosts) does not wait on it', () => {
    const M = 60_000;
    expect(lendTotalMs(1, 24 * 60 * M)).toBe(3 * lendTimeoutMs(1)); // far from its end: three tries' worth
    expect(lendTotalMs(1_000, 24 * 60 * M)).toBe(3 * lendTimeoutMs(1_000));
    for (const minutesToEnd of [5, 15, 30, 60, 120]) {
      const total = lendTotalMs(1_000, minutesToEnd * M);
      expect(total).toBeGreaterThan(0);
      // At least ten minutes left after it (half the time left, for a lend asked a few minutes before the end).
      expect(minutesToEnd * M - total).toBeGreaterThanOrEqual(Math.min(10 * M, (minutesToEnd * M) / 2));
    }
    expect(lendTotalMs(1_000, 30 * M)).toBeGreaterThanOrEqual(lendTimeoutMs(1)); // still one try's room for a small lend
  });

  it('is sized to the hosts the lend may look at, not to the hosts asked: busy ones before the idle cost time too', () => {
    const keys = [...Array.from({ length: 40 }, (_, i) => `host:${i + 1}`), 'preemption-wait:x']; // a wait key is no host
    const lendings = [lending({ hostIds: ['1', '2', '3'] }), lending({ id: 'back', hostIds: ['4'], state: 'returned' })];
    const hosts = { resource_type: 'physical:host' };
    expect(lendCandidateCount({ ...hosts, resourceKeys: keys, lendings }, 1)).toBe(37); // its 40 booked, 3 lent
    expect(lendCandidateCount({ ...hosts, resourceKeys: keys.slice(0, 2) }, 5)).toBe(5); // never fewer than asked
    expect(lendTimeoutMs(lendCandidateCount({ ...hosts, resourceKeys: keys, lendings }, 1))).toBeGreaterThan(lendTimeoutMs(1) + 30 * (lendTimeoutMs(2) - lendTimeoutMs(1)));
  });

  it('sizes a slot lend to the hosts its reservation holds slots on, not to the slots asked nor to its lending rows', () => {
    const names = Array.from({ length: 30 }, (_, i) => `node-${i + 1}`);
    // A wait key is no host; the lending rows (hostIds) are lendings, not hosts: neither counts.
    const slots = { resource_type: 'virtual:instance', resourceKeys: ['preemption-wait:x'], allocation: { hosts: names, slots_per_host: Object.fromEntries(names.map((n) => [n, 4])) } };
    const lendings = [lending({ hosts: ['node-1', 'node-2'], hostIds: ['7', '8'], slots: [4, 4] })];
    expect(lendCandidateCount({ ...slots, lendings }, 1)).toBe(30); // one slot asked, 30 hosts read and written
    expect(lendCandidateCount(slots, 100)).toBe(30); // 100 slots asked, on those 30 hosts
    expect(lendTimeoutMs(lendCandidateCount(slots, 1))).toBeGreaterThan(lendTimeoutMs(1) + 25 * (lendTimeoutMs(2) - lendTimeoutMs(1)));
    expect(lendCandidateCount({ resource_type: 'virtual:instance' }, 3)).toBe(3); // no placement shown: one host per slot
  });
});
