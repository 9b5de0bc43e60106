/** The calendar: hosts × time, network segments × time, servers' and bandwidth's booked share, and "find a slot". */
import type { RefObject } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiFailure, fetchCalendar, type CalendarBooking, type CalendarLending, type CalendarPoweredOff, type CalendarWindow, type Credentials } from './api';
import { asleepAt, bookingsByHost, bookingsByNetwork, describeBooking, describeLending, describeSleep, describeUsage, hostRows, lentByHost, poweredOffByHost, networkRows, paintHostRow, paintProviderRow, providerRows, STATUS_COLORS, RESERVED_COLOR, usageStepsByProvider, type Ghost, type HostRow, type NetworkRow, type ProviderRow, type UsageSteps } from './paint';
import { FindSlot } from './find-slot';
import { describeGap, seriesGapsByHost, type SeriesGap } from './series';
import { AXIS_HEIGHT, LABEL_WIDTH, ROW_HEIGHT, Timeline } from './timeline';
import { formatRange, formatWhen, viewStartAround, ZOOM_SPAN, type Zoom } from './time';

/** How far around the view a load reaches, so that scrolling a little needs no new load. */
const LOAD_MARGIN = 0.5;
const MAX_LOAD_MS = 93 * 86_400_000;
const REFRESH_MS = 15_000;

/** The booking drawn on top at that time: a borrower's over its lender's. */
function bookingAt(list: CalendarBooking[] | undefined, atMs: number): CalendarBooking | undefined {
  const holding = list?.filter((b) => b.start_ms <= atMs && atMs < b.end_ms);
  return holding?.find((b) => b.borrowed) ?? holding?.[0];
}

/** A click on a bar opens its lease, when the caller may know it (an offer hold has no lease page yet). */
function openLease(b: CalendarBooking | undefined): void {
  if (b?.lease_id && !b.held) location.hash = `#/leases/${b.lease_id}`;
}

export function CalendarView(props: { credentials: Credentials }) {
  const [zoom, setZoom] = useState<Zoom>('week');
  const [viewStart, setViewStart] = useState(() => viewStartAround(Date.now(), 'week'));
  const [query, setQuery] = useState('');
  const [queryDraft, setQueryDraft] = useState('');
  const [groupBy, setGroupBy] = useState('');
  const [data, setData] = useState<CalendarWindow>();
  const [loadError, setLoadError] = useState<string>();
  const [reloads, setReloads] = useState(0);
  const [status, setStatus] = useState('');
  const [ghosts, setGhosts] = useState<Ghost[]>([]);
  const ganttCanvas = useRef<HTMLCanvasElement>(null);
  const capacityCanvas = useRef<HTMLCanvasElement>(null);
  const networkCanvas = useRef<HTMLCanvasElement>(null);
  const gantt = useRef<Timeline<HostRow>>();
  const networkGantt = useRef<Timeline<NetworkRow>>();
  const capacity = useRef<Timeline<ProviderRow>>();
  const loading = useRef<{ start: number; end: number; key: string }>();
  const drawnData = useRef<CalendarWindow>();
  const span = ZOOM_SPAN[zoom];
  const viewEnd = viewStart + span;

  const byHost = useMemo(() => (data ? bookingsByHost(data) : new Map<string, CalendarBooking[]>()), [data]);
  const gapsByHost = useMemo(() => (data ? seriesGapsByHost(data) : new Map<string, SeriesGap[]>()), [data]);
  const lentOfHost = useMemo(() => (data ? lentByHost(data) : new Map<string, CalendarLending[]>()), [data]);
  const poweredOff = useMemo(() => (data ? poweredOffByHost(data) : new Map<string, CalendarPoweredOff>()), [data]);
  const answeredAt = data?.now_ms ?? 0;
  const byProvider = useMemo(() => (data ? usageStepsByProvider(data) : new Map<string, UsageSteps>()), [data]);
  const byNetwork = useMemo(() => (data ? bookingsByNetwork(data) : new Map<string, CalendarBooking[]>()), [data]);
  const rows = useMemo(() => hostRows(data?.hosts ?? [], groupBy), [data, groupBy]);
  const segments = useMemo(() => networkRows(data?.networks ?? []), [data]);
  const providers = useMemo(() => providerRows(data?.providers ?? []), [data]);
  const propertyNames = useMemo(() => [...new Set((data?.hosts ?? []).flatMap((h) => Object.keys(h.properties)))].sort(), [data]);

  // Loads the window around the view when the view leaves what was loaded (or the filter changed).
  useEffect(() => {
    const key = `${query}|${reloads}`;
    const have = loading.current;
    if (have && have.key === key && have.start <= viewStart && have.end >= viewEnd) return;
    const start = viewStart - span * LOAD_MARGIN;
    const end = Math.min(start + MAX_LOAD_MS, viewEnd + span * LOAD_MARGIN);
    loading.current = { start, end, key };
    performance.mark('calendar-fetch');
    fetchCalendar(props.credentials, start, end, query).then(
      (window) => {
        if (loading.current?.key !== key || loading.current.start !== start) return; // a later load replaced this one
        performance.mark('calendar-data');
        setLoadError(undefined);
        setData(window);
      },
      (err: unknown) => {
        loading.current = undefined;
        setLoadError(err instanceof ApiFailure ? err.message : String(err));
      },
    );
  }, [viewStart, viewEnd, span, query, reloads, props.credentials]);

  // What others book and how leases move shows without a reload: the window is asked again every
  // REFRESH_MS while the tab is visible (one answer of ~100 KiB per 1,000 bookings).
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') setReloads((n) => n + 1);
    }, REFRESH_MS);
    return () => clearInterval(timer);
  }, []);

  // The timelines are made once; their handlers read the latest state through this ref.
  const latest = useRef({ byHost, byProvider, byNetwork, ghosts, span, gapsByHost, lentOfHost, poweredOff, answeredAt });
  latest.current = { byHost, byProvider, byNetwork, ghosts, span, gapsByHost, lentOfHost, poweredOff, answeredAt };
  useEffect(() => {
    const pan = (delta: number) => setViewStart((s) => s + delta);
    const zoomBy = (direction: 1 | -1) => setZoom((z) => (['day', 'week', 'month'] as Zoom[])[Math.max(0, Math.min(2, ['day', 'week', 'month'].indexOf(z) + direction))]);
    gantt.current = new Timeline<HostRow>(ganttCanvas.current!, {
      paintRow: (ctx, row, g, from, to) => {
        const off = latest.current.poweredOff.get(row.key);
        paintHostRow(ctx, latest.current.byHost.get(row.key), latest.current.ghosts, row, g, from, to, latest.current.gapsByHost.get(row.key), latest.current.lentOfHost.get(row.key), off && { poweredOff: off, now: latest.current.answeredAt });
      },
      onPan: pan,
      onZoom: zoomBy,
      describe: (row, at) => {
        const b = bookingAt(latest.current.byHost.get(row.key), at);
        const gap = latest.current.gapsByHost.get(row.key)?.find((one) => one.startMs <= at && at < one.endMs);
        const lent = latest.current.lentOfHost.get(row.key)?.find((one) => one.start_ms <= at && at < one.end_ms);
        const off = latest.current.poweredOff.get(row.key);
        const sleep = asleepAt(off, at) ? ` · ${describeSleep(off!, at, latest.current.answeredAt)}` : '';
        return `${row.label} · ${formatWhen(at)}${gap ? ` · ${describeGap(gap)}` : ''}${b ? ` · ${describeBooking(b)}` : ' · free'}${lent ? ` · ${describeLending(lent)}` : ''}${sleep}`;
      },
      onDescribe: setStatus,
      onPick: (row, at) => openLease(bookingAt(latest.current.byHost.get(row.key), at)),
    });
    // Segments' bookings are drawn as hosts' are (no offers, lendings or series gaps on them).
    networkGantt.current = new Timeline<NetworkRow>(networkCanvas.current!, {
      paintRow: (ctx, row, g, from, to) => paintHostRow(ctx, latest.current.byNetwork.get(row.key), [], row, g, from, to),
      onPan: pan,
      onZoom: zoomBy,
      describe: (row, at) => {
        const b = bookingAt(latest.current.byNetwork.get(row.key), at);
        return `${row.label} · ${formatWhen(at)}${b ? ` · ${describeBooking(b)}` : ' · free'}`;
      },
      onDescribe: setStatus,
      onPick: (row, at) => openLease(bookingAt(latest.current.byNetwork.get(row.key), at)),
    });
    capacity.current = new Timeline<ProviderRow>(
      capacityCanvas.current!,
      {
        paintRow: (ctx, row, g, from, to) => paintProviderRow(ctx, latest.current.byProvider.get(row.key), row, g, from, to),
        onPan: pan,
        onZoom: zoomBy,
        describe: (row, at) => `${formatWhen(at)} · ${describeUsage(latest.current.byProvider.get(row.key), row.provider!, at)}`,
        onDescribe: setStatus,
      },
      ROW_HEIGHT,
      () => Math.max(120, Math.round(window.innerHeight * 0.3)),
    );
    return () => {
      gantt.current?.destroy();
      networkGantt.current?.destroy();
      capacity.current?.destroy();
    };
  }, []);

  // Redraw on every change of what is shown; the first draw after new data is measured.
  useEffect(() => {
    const now = data ? data.now_ms + (performance.now() - (performance.getEntriesByName('calendar-data').at(-1)?.startTime ?? performance.now())) : Date.now();
    const show = <R extends HostRow | NetworkRow | ProviderRow>(timeline: Timeline<R> | undefined, timelineRows: R[]) => {
      if (!timeline) return;
      timeline.rows = timelineRows;
      timeline.viewStart = viewStart;
      timeline.viewEnd = viewEnd;
      timeline.nowMs = now;
    };
    show(gantt.current, rows);
    show(networkGantt.current, segments);
    show(capacity.current, providers);
    gantt.current?.draw();
    networkGantt.current?.draw();
    capacity.current?.draw();
    // The first paint of each answer, for the browser test and bench:calendar-page.
    if (data && drawnData.current !== data) {
      drawnData.current = data;
      performance.mark('calendar-drawn');
    }
  }, [data, rows, segments, providers, viewStart, viewEnd, ghosts]);

  const myGaps = useMemo(() => (data?.series ?? []).flatMap((one) => one.gaps.map((gap) => ({ ...gap, series: one.name }))).filter((gap) => gap.end_ms > viewStart && gap.start_ms < viewEnd), [data, viewStart, viewEnd]);
  const myLeases = useMemo(() => (data?.leases ?? []).filter((l) => l.end_ms > viewStart && l.start_ms < viewEnd).sort((a, b) => a.start_ms - b.start_ms), [data, viewStart, viewEnd]);
  // The end each preempted lease of the caller's was cut to, from its bookings.
  const cuts = useMemo(() => new Map((data?.bookings ?? []).filter((b) => b.preempted && b.lease_id && b.cut_ms !== undefined).map((b) => [b.lease_id!, b.cut_ms!])), [data]);

  const go = (to: number) => setViewStart(to);
  return (
    <div class="calendar">
      <section class="toolbar" aria-label="View">
        <div class="group" role="group" aria-label="Move in time">
          <button type="button" onClick={() => go(viewStart - span / 2)} aria-label="Earlier">
            ◀
          </button>
          <button type="button" onClick={() => go(viewStartAround(Date.now(), zoom))}>
            Now
          </button>
          <button type="button" onClick={() => go(viewStart + span / 2)} aria-label="Later">
            ▶
          </button>
        </div>
        <div class="group" role="group" aria-label="Zoom">
          {(['day', 'week', 'month'] as Zoom[]).map((z) => (
            <button
              type="button"
              key={z}
              aria-pressed={z === zoom}
              onClick={() => {
                setZoom(z);
                setViewStart(viewStartAround(viewStart + span / 2, z));
              }}
            >
              {z[0].toUpperCase() + z.slice(1)}
            </button>
          ))}
        </div>
        <form
          class="group"
          aria-label="Filter hosts"
          onSubmit={(e) => {
            e.preventDefault();
            setQuery(queryDraft.trim());
          }}
        >
          <label>
            Hosts where <input name="resource_properties" value={queryDraft} maxLength={1000} placeholder='["==", "$gpu", "a100"]' onInput={(e) => setQueryDraft(e.currentTarget.value)} />
          </label>
          <button type="submit">Filter</button>
        </form>
        <label class="group">
          Group by{' '}
          <select name="group" value={groupBy} onChange={(e) => setGroupBy(e.currentTarget.value)}>
            <option value="">nothing</option>
            {propertyNames.map((name) => (
              <option value={name} key={name}>
                {name}
              </option>
            ))}
          </select>
        </label>
        <span class="range">{formatRange(viewStart, viewEnd)}</span>
      </section>
      {loadError && (
        <p role="alert" class="error">
          {loadError}
        </p>
      )}
      {data?.note && <p class="note">{data.note}</p>}
      <section aria-label="Hosts over time" class="timeline">
        <h2>
          Hosts <span class="count">{data ? `${data.hosts.length} hosts, ${data.bookings.length} bookings loaded` : 'loading…'}</span>
        </h2>
        <Legend sleeping={poweredOff.size > 0} />
        {data && data.hosts.length === 0 && <p class="note">{query ? 'No reservable host matches the filter.' : 'No reservable host yet: an admin enrols hosts with `blazar host-create`.'}</p>}
        <TimelineCanvas
          canvasRef={ganttCanvas}
          testId="gantt"
          viewStart={viewStart}
          viewEnd={viewEnd}
          label={`Hosts over time, ${formatRange(viewStart, viewEnd)}. Arrow keys move in time and through hosts; + and - zoom. Your leases in view are listed below.`}
        />
        <p class="status" aria-live="polite">
          {status || '\u00a0'}
        </p>
      </section>
      <section aria-label="Network segments over time" class="timeline" hidden={segments.length === 0}>
        <h2>
          Network calendar <span class="count">{`${segments.length} segments, ${(data?.networks ?? []).reduce((n, s) => n + s.bookings.length, 0)} bookings loaded`}</span>
        </h2>
        <TimelineCanvas
          canvasRef={networkCanvas}
          testId="network-gantt"
          viewStart={viewStart}
          viewEnd={viewEnd}
          label={`Network segments (VLANs) over time, ${formatRange(viewStart, viewEnd)}. Arrow keys move in time and through segments; + and - zoom. Your leases in view are listed below.`}
        />
      </section>
      <section aria-label="Your leases in view" class="my-leases">
        <h2>Your leases in view</h2>
        {myLeases.length === 0 && myGaps.length === 0 ? (
          <p>None.</p>
        ) : (
          <ul>
            {myLeases.map((l) => (
              <li key={l.id}>
                <a href={`#/leases/${l.id}`}>{l.name}</a> <span class={`badge status-${l.status}`}>{l.status}</span> {formatRange(l.start_ms, l.end_ms)}
                {l.series_id ? ' (recurring)' : ''}
                {l.preemptible && (
                  <>
                    {' '}
                    <span class="badge preemptible" title="preemptible: a regular lease may take its hosts back">
                      preemptible
                    </span>
                  </>
                )}
                {cuts.has(l.id) && ` preempted: cut to end ${formatWhen(cuts.get(l.id)!)}`}
              </li>
            ))}
            {myGaps.map((gap) => (
              <li key={`${gap.name}-${gap.start_ms}`} class="gap">
                {gap.name} <span class="badge">not booked</span> {formatRange(gap.start_ms, gap.end_ms)} ({gap.reason}; a gap in series {gap.series})
              </li>
            ))}
          </ul>
        )}
      </section>
      <FindSlot
        credentials={props.credentials}
        calendar={data}
        byHost={byHost}
        onGhosts={(g) => {
          setGhosts(g);
          if (g[0] && (g[0].startMs < viewStart || g[0].startMs > viewEnd)) setViewStart(viewStartAround(g[0].startMs, zoom));
        }}
        onCalendarChanged={() => setReloads((n) => n + 1)}
      />
      <section aria-label="Servers and bandwidth over time" class="timeline">
        <h2>
          Servers and bandwidth <span class="count">booked share of each provider's capacity (yours in green)</span>
        </h2>
        {data && providers.length === 0 && <p>No compute or bandwidth provider is known yet (they are read from Placement when a server or bandwidth reservation is first made).</p>}
        <TimelineCanvas
          canvasRef={capacityCanvas}
          testId="capacity"
          viewStart={viewStart}
          viewEnd={viewEnd}
          hidden={providers.length === 0}
          label="Booked share of each compute and bandwidth provider over time"
        />
      </section>
    </div>
  );
}

/**
 * A timeline's canvas, focusable, described for screen readers, and carrying its geometry (the
 * view, the label column, the axis, the row height) for tests and tools that locate a row and an instant.
 */
function TimelineCanvas(props: { canvasRef: RefObject<HTMLCanvasElement>; testId: string; viewStart: number; viewEnd: number; label: string; hidden?: boolean }) {
  return (
    <div class="canvas-holder" hidden={props.hidden}>
      <canvas
        ref={props.canvasRef}
        tabIndex={0}
        role="img"
        data-testid={props.testId}
        data-view-start={props.viewStart}
        data-view-end={props.viewEnd}
        data-label-width={LABEL_WIDTH}
        data-axis-height={AXIS_HEIGHT}
        data-row-height={ROW_HEIGHT}
        aria-label={props.label}
      />
    </div>
  );
}

/** `sleeping`: some host is powered off (admins' answers only): its shading is explained. */
function Legend(props: { sleeping: boolean }) {
  return (
    <ul class="legend" aria-label="Legend">
      {['PENDING', 'PENDING_APPROVAL', 'ACTIVE', 'STARTING', 'ERROR', 'TERMINATED'].map((s) => (
        <li key={s}>
          <span class="swatch" style={{ background: STATUS_COLORS[s].fill }} /> {s === 'PENDING_APPROVAL' ? 'waiting for approval' : s.toLowerCase()}
        </li>
      ))}
      <li>
        <span class="swatch" style={{ background: RESERVED_COLOR.fill }} /> reserved by another project
      </li>
      <li>
        <span class="swatch held" /> held by you (no lease yet)
      </li>
      <li>
        <span class="swatch preemptible" /> preemptible (a regular lease may take it back)
      </li>
      <li>
        <span class="swatch preempted" /> preempted: cut to end at the dark mark
      </li>
      <li>
        <span class="swatch lent" /> lent: a lease's idle hosts, open to preemptible leases
      </li>
      {props.sleeping ? (
        <li>
          <span class="swatch sleep" /> powered off (hatched: asleep until its planned wake)
        </li>
      ) : null}
      <li>
        <span class="swatch ghost" /> an offer that fits
      </li>
      <li>
        <span class="swatch series" /> recurring (a series; dashed: an occurrence not booked)
      </li>
    </ul>
  );
}
