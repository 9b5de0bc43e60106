/**
 * Where the calendar page draws a series's gaps (web/src/series.ts): on the rows of the hosts its
 * loaded occurrences hold, and nowhere when none of them is loaded.
 */
import { describeGap, seriesGapsByHost } from '../web/src/series';

const booking = (host: string, seriesId?: string) => ({ host_id: host, start_ms: 0, end_ms: 1, ...(seriesId ? { series_id: seriesId } : {}) });

describe("a series's gaps on the calendar", () => {
  it('draws each gap on every host its occurrences hold, not on other hosts, and not at all with no occurrence loaded', () => {
    const gap = { name: 'weekly-4', start_ms: 100, end_ms: 200, reason: 'capacity' };
    const byHost = seriesGapsByHost({
      bookings: [booking('h1', 's1'), booking('h2', 's1'), booking('h1', 's1'), booking('h3'), booking('h4', 's2')],
      series: [
        { id: 's1', name: 'weekly', gaps: [gap] },
        { id: 's3', name: 'unseen', gaps: [{ ...gap, name: 'unseen-2' }] },
      ],
    });
    expect([...byHost.keys()].sort()).toEqual(['h1', 'h2']);
    expect(byHost.get('h1')).toEqual([{ seriesId: 's1', seriesName: 'weekly', name: 'weekly-4', startMs: 100, endMs: 200, reason: 'capacity' }]);
    expect(describeGap(byHost.get('h2')![0])).toBe('weekly-4: not booked (capacity), a gap in series weekly');
    expect(seriesGapsByHost({ bookings: [booking('h1', 's1')], series: undefined }).size).toBe(0);
  });
});
