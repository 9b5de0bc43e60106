/**
 * Series of recurring leases on the calendar: which bars belong to one series, and where its gaps
 * (occurrences a partial create refused) are drawn: on the rows of the hosts its other occurrences
 * hold in the window, as missing bars. Pure: no DOM.
 */
import type { CalendarWindow } from './api';

/** An occurrence refused: drawn as a missing bar. */
export interface SeriesGap {
  seriesId: string;
  seriesName: string;
  name: string;
  startMs: number;
  endMs: number;
  reason: string;
}

/** Per host id, the gaps to draw on its row: each series's gaps on every host its loaded occurrences hold. */
export function seriesGapsByHost(window: Pick<CalendarWindow, 'bookings' | 'series'>): Map<string, SeriesGap[]> {
  const hostsOf = new Map<string, Set<string>>();
  for (const b of window.bookings) {
    if (!b.series_id) continue;
    const hosts = hostsOf.get(b.series_id) ?? new Set<string>();
    hosts.add(b.host_id);
    hostsOf.set(b.series_id, hosts);
  }
  const byHost = new Map<string, SeriesGap[]>();
  for (const series of window.series ?? []) {
    for (const host of hostsOf.get(series.id) ?? []) {
      const gaps = series.gaps.map((g) => ({ seriesId: series.id, seriesName: series.name, name: g.name, startMs: g.start_ms, endMs: g.end_ms, reason: g.reason }));
      byHost.set(host, [...(byHost.get(host) ?? []), ...gaps]);
    }
  }
  return byHost;
}

/** What the status line says of a gap. */
export const describeGap = (gap: SeriesGap) => `${gap.name}: not booked (${gap.reason}), a gap in series ${gap.seriesName}`;
