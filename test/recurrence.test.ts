/**
 * The recurrence rules of a series (src/domain/recurrence.ts): examples of each part, the bounds,
 * and properties over random rules (every occurrence as long as the lease, in order, on the rule's
 * days, within COUNT, UNTIL and LK_MAX_OCCURRENCES).
 */
import fc from 'fast-check';
import { expandRecurrence, formatRecurrence, parseRecurrence, RecurrenceError, WEEKDAYS, type Recurrence } from '../src/domain/recurrence';

const limits = { maxOccurrences: 100, horizonMs: 731 * 86_400_000 };
const DAY = 86_400_000;
const HOUR = 3_600_000;
/** Tuesday 1 December 2026, 09:00 UTC. */
const START = Date.UTC(2026, 11, 1, 9);
const iso = (ms: number) => new Date(ms).toISOString().slice(0, 16);
const expand = (text: string, start = START, end = START + HOUR, lim = limits) => expandRecurrence(parseRecurrence(text, lim), start, end, lim);

function refusal(fn: () => unknown): { part: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof RecurrenceError) return { part: err.part, message: err.message };
    throw err;
  }
  throw new Error('not refused');
}

describe('recurrence rules', () => {
  it('expands DAILY with COUNT and with UNTIL (inclusive), INTERVAL, and WEEKLY on the given days', () => {
    expect(expand('FREQ=DAILY;COUNT=3').map((o) => iso(o.startMs))).toEqual(['2026-12-01T09:00', '2026-12-02T09:00', '2026-12-03T09:00']);
    expect(expand('RRULE:FREQ=DAILY;UNTIL=20261203T090000Z').map((o) => iso(o.startMs))).toEqual(['2026-12-01T09:00', '2026-12-02T09:00', '2026-12-03T09:00']);
    expect(expand('FREQ=DAILY;UNTIL=20261202').map((o) => iso(o.startMs))).toEqual(['2026-12-01T09:00', '2026-12-02T09:00']); // a date: the whole day
    expect(expand('FREQ=DAILY;INTERVAL=3;COUNT=3').map((o) => iso(o.startMs))).toEqual(['2026-12-01T09:00', '2026-12-04T09:00', '2026-12-07T09:00']);
    // Tuesday's start is not a Monday: the first occurrence is Thursday, then Monday and Thursday of the weeks after.
    expect(expand('freq=weekly;byday=TH,MO;count=4').map((o) => iso(o.startMs))).toEqual(['2026-12-03T09:00', '2026-12-07T09:00', '2026-12-10T09:00', '2026-12-14T09:00']);
    expect(expand('FREQ=WEEKLY;INTERVAL=2;BYDAY=TU;COUNT=3').map((o) => iso(o.startMs))).toEqual(['2026-12-01T09:00', '2026-12-15T09:00', '2026-12-29T09:00']);
    expect(expand('FREQ=WEEKLY;COUNT=2', START, START + 2 * HOUR)).toEqual([
      { startMs: START, endMs: START + 2 * HOUR },
      { startMs: START + 7 * DAY, endMs: START + 7 * DAY + 2 * HOUR },
    ]);
  });

  it('refuses a bad rule naming the part', () => {
    const cases: Array<[string, string]> = [
      ['', 'rule'],
      ['COUNT=3', 'FREQ'],
      ['FREQ=MONTHLY;COUNT=3', 'FREQ'],
      ['FREQ=DAILY', 'COUNT'],
      ['FREQ=DAILY;COUNT=2;UNTIL=20261210', 'UNTIL'],
      ['FREQ=DAILY;COUNT=0', 'COUNT'],
      ['FREQ=DAILY;COUNT=101', 'COUNT'],
      ['FREQ=DAILY;COUNT=-1', 'COUNT'],
      ['FREQ=DAILY;INTERVAL=53;COUNT=2', 'INTERVAL'],
      ['FREQ=DAILY;INTERVAL=1.5;COUNT=2', 'INTERVAL'],
      ['FREQ=DAILY;BYDAY=MO;COUNT=2', 'BYDAY'],
      ['FREQ=WEEKLY;BYDAY=XX;COUNT=2', 'BYDAY'],
      ['FREQ=WEEKLY;BYDAY=MO,MO;COUNT=2', 'BYDAY'],
      ['FREQ=WEEKLY;BYDAY=2MO;COUNT=2', 'BYDAY'],
      ['FREQ=WEEKLY;WKST=SU;COUNT=2', 'WKST'],
      ['FREQ=DAILY;FREQ=DAILY;COUNT=2', 'FREQ'],
      ['FREQ=DAILY;UNTIL=20261302', 'UNTIL'],
      ['FREQ=DAILY;UNTIL=tomorrow', 'UNTIL'],
      ['FREQ=DAILY;COUNT', 'rule'],
      [`FREQ=DAILY;COUNT=2;${'X'.repeat(200)}`, 'rule'],
    ];
    for (const [text, part] of cases) expect([text, refusal(() => parseRecurrence(text, limits)).part]).toEqual([text, part]);
    // What only the lease's dates can tell.
    expect(refusal(() => expand('FREQ=DAILY;UNTIL=20261130')).part).toBe('UNTIL'); // before the start
    expect(refusal(() => expand('FREQ=WEEKLY;UNTIL=20290101')).message).toMatch(/at most 731 days/);
    expect(refusal(() => expand('FREQ=DAILY;COUNT=2', START, START + 25 * HOUR)).message).toMatch(/overlap/);
  });

  it('writes a rule back as it reads (a series whose count or end changed stores it so)', () => {
    for (const text of ['FREQ=DAILY;COUNT=3', 'FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR;COUNT=4', 'FREQ=DAILY;UNTIL=20261208T090000Z']) {
      expect(formatRecurrence(parseRecurrence(text, limits))).toBe(text);
    }
    // A whole-day UNTIL becomes its last second; days in week order.
    expect(formatRecurrence(parseRecurrence('freq=weekly;byday=fr,mo;until=20261231', limits))).toBe('FREQ=WEEKLY;BYDAY=MO,FR;UNTIL=20261231T235959Z');
  });

  it('allows LK_MAX_OCCURRENCES occurrences and refuses one more, by COUNT and by UNTIL', () => {
    const small = { ...limits, maxOccurrences: 5 };
    expect(expand('FREQ=DAILY;COUNT=5', START, START + HOUR, small)).toHaveLength(5);
    expect(refusal(() => expand('FREQ=DAILY;COUNT=6', START, START + HOUR, small)).part).toBe('COUNT');
    expect(expand('FREQ=DAILY;UNTIL=20261205T090000Z', START, START + HOUR, small)).toHaveLength(5);
    expect(refusal(() => expand('FREQ=DAILY;UNTIL=20261206T090000Z', START, START + HOUR, small)).message).toMatch(/more than 5 occurrences/);
  });

  it('gives occurrences in order, each as long as the lease, on the rule\'s days, within its bounds (property)', () => {
    const ruleArb = fc.record({
      weekly: fc.boolean(),
      interval: fc.integer({ min: 1, max: 52 }),
      days: fc.subarray([...WEEKDAYS], { minLength: 1 }),
      useDays: fc.boolean(),
      count: fc.option(fc.integer({ min: 1, max: 100 }), { nil: undefined }),
      untilDays: fc.integer({ min: 0, max: 731 }),
    });
    fc.assert(
      fc.property(ruleArb, fc.integer({ min: 0, max: 400 * DAY }), fc.integer({ min: 1, max: 24 * 60 }), (r, offset, minutes) => {
        const start = Date.UTC(2026, 0, 1) + Math.floor(offset / 60_000) * 60_000;
        const text = [`FREQ=${r.weekly ? 'WEEKLY' : 'DAILY'}`, `INTERVAL=${r.interval}`, ...(r.weekly && r.useDays ? [`BYDAY=${r.days.join(',')}`] : []), r.count !== undefined ? `COUNT=${r.count}` : `UNTIL=${new Date(start + r.untilDays * DAY).toISOString().slice(0, 10).replace(/-/g, '')}`].join(';');
        const rule: Recurrence = parseRecurrence(text, limits);
        let occurrences;
        try {
          occurrences = expandRecurrence(rule, start, start + minutes * 60_000, limits);
        } catch (err) {
          if (err instanceof RecurrenceError) return; // a refusal is fine: UNTIL too far, too many, overlapping, none
          throw err;
        }
        expect(occurrences.length).toBeGreaterThan(0);
        expect(occurrences.length).toBeLessThanOrEqual(rule.count ?? limits.maxOccurrences);
        occurrences.forEach((o, i) => {
          expect(o.endMs - o.startMs).toBe(minutes * 60_000);
          expect(o.startMs).toBeGreaterThanOrEqual(start);
          expect(o.startMs % DAY).toBe(start % DAY); // the same time of day
          if (rule.untilMs !== undefined) expect(o.startMs).toBeLessThanOrEqual(rule.untilMs);
          if (i > 0) expect(o.startMs).toBeGreaterThanOrEqual(occurrences[i - 1].endMs);
          if (rule.byDay) expect(rule.byDay).toContain(WEEKDAYS[(new Date(o.startMs).getUTCDay() + 6) % 7]);
          else expect((o.startMs - start) % ((rule.freq === 'DAILY' ? 1 : 7) * rule.interval * DAY)).toBe(0);
        });
      }),
      { numRuns: 100 },
    );
  });
});
