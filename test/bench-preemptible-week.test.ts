/** bench:preemptible's simulated week without a database (bench/preemptible-week.ts): the arrivals it draws and how it judges a cut's warning. */
import { arrivalsPerHour, judgeWarnings, preemptibleAsk, regularArrivals, REGULAR_SIZES } from '../bench/preemptible-week';
import { randomFrom } from '../bench/random';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

describe('bench:preemptible week model', () => {
  it('draws the same arrivals from the same seed, in order, within the window and the declared mix', () => {
    const week = [Date.UTC(2099, 0, 5), Date.UTC(2099, 0, 12)] as const;
    const first = regularArrivals(randomFrom(7), 2, ...week);
    expect(regularArrivals(randomFrom(7), 2, ...week)).toEqual(first);
    expect(regularArrivals(randomFrom(8), 2, ...week)).not.toEqual(first);
    // 2 an hour over 168 h: a Poisson count of mean 336 (sd ≈ 18).
    expect(first.length).toBeGreaterThan(250);
    expect(first.length).toBeLessThan(420);
    for (const [i, a] of first.entries()) {
      expect(a.atMs).toBeGreaterThanOrEqual(i === 0 ? week[0] : first[i - 1].atMs);
      expect(a.atMs).toBeLessThan(week[1]);
      expect(REGULAR_SIZES).toContain(a.hosts);
      expect(a.durationMs % HOUR).toBe(0);
      expect(a.durationMs).toBeGreaterThanOrEqual(HOUR);
      expect(a.durationMs).toBeLessThanOrEqual(24 * HOUR);
      expect(a.leadMs % MINUTE).toBe(0);
      expect(a.leadMs).toBeLessThan(48 * HOUR);
    }
    // Some leads are shorter than a 10-minute warning, most are not.
    const short = first.filter((a) => a.leadMs < 10 * MINUTE).length;
    expect(short).toBeGreaterThan(0);
    expect(short).toBeLessThan(first.length / 4);
    expect(regularArrivals(randomFrom(7), 2, ...week, 5)).toHaveLength(5);
  });

  it('chooses the arrival rate that books the asked share of the hosts on average', () => {
    // 2.6 hosts × 12.5 h a lease: 60 % of 100 hosts is 60 host-hours an hour.
    expect(arrivalsPerHour(100, 0.6)).toBeCloseTo(60 / 32.5, 6);
  });

  it('draws preemptible asks of 1–4 hosts for 2–12 whole hours', () => {
    const random = randomFrom(1);
    for (let i = 0; i < 200; i++) {
      const ask = preemptibleAsk(random);
      expect([1, 2, 3, 4]).toContain(ask.hosts);
      expect(ask.durationMs % HOUR).toBe(0);
      expect(ask.durationMs).toBeGreaterThanOrEqual(2 * HOUR);
      expect(ask.durationMs).toBeLessThanOrEqual(12 * HOUR);
    }
  });

  it('counts a warning met at the configured minutes, and a short one as explained only by a regular lead shorter than the warning', () => {
    const warning = 10 * MINUTE;
    expect(
      judgeWarnings(
        [
          { warningMs: 10 * MINUTE, regularLeadMs: 10 * MINUTE },
          { warningMs: 3 * HOUR, regularLeadMs: 3 * HOUR },
          { warningMs: 4 * MINUTE, regularLeadMs: 4 * MINUTE },
          { warningMs: 9 * MINUTE, regularLeadMs: 20 * MINUTE },
        ],
        warning,
      ),
    ).toEqual({ met: 2, short: 2, shortExplained: 1, shortUnexplained: 1, shortestMs: 4 * MINUTE });
    expect(judgeWarnings([], warning)).toEqual({ met: 0, short: 0, shortExplained: 0, shortUnexplained: 0, shortestMs: null });
  });
});
