/** What the two timelines show: host rows with lease bars, and provider rows with their booked share over time. */
import type { CalendarBooking, CalendarHost, CalendarLending, CalendarNetworkSegment, CalendarPoweredOff, CalendarProvider, CalendarUsage, CalendarWindow } from './api';
import { fit, type Row, type RowGeometry } from './timeline';
import { formatRange, formatWhen } from './time';
import type { SeriesGap } from './series';

/** Colours by lease status; text on them is dark or white by contrast. */
export const STATUS_COLORS: Record<string, { fill: string; text: string }> = {
  PENDING: { fill: '#3d6fc4', text: '#ffffff' },
  // Waiting for an admin's approval: booked, not granted (issue 42).
  PENDING_APPROVAL: { fill: '#b3467a', text: '#ffffff' },
  STARTING: { fill: '#c98a12', text: '#1d1d1d' },
  ACTIVE: { fill: '#1f8a4c', text: '#ffffff' },
  TERMINATING: { fill: '#c98a12', text: '#1d1d1d' },
  DELETING: { fill: '#c98a12', text: '#1d1d1d' },
  TERMINATED: { fill: '#8a96a3', text: '#ffffff' },
  ERROR: { fill: '#c62828', text: '#ffffff' },
};
export const RESERVED_COLOR = { fill: '#b4bcc6', text: '#1d2733' };
export const GHOST_COLOR = '#7b3fc4';
/** A series of recurring leases: a strip along the foot of each occurrence's bar; its gaps outlined, dashed, with the strip on top. */
export const SERIES_COLOR = '#d9730d';
const SERIES_STRIP = 3;
/** The caller's offer holds: pending's blue, hatched (booked, but no lease yet). */
export const HELD_COLOR = { fill: '#dbe5f6', stripe: STATUS_COLORS.PENDING.fill, text: '#0b1f3a' };
/** Preemptible time: its status's (or reserved's) fill hatched with white the other way from a hold. */
export const PREEMPTIBLE_STRIPE = '#ffffff';
/** A preempted lease: a dark mark at the end it was cut to. */
export const PREEMPTED_COLOR = '#7a1414';
const PREEMPTED_MARK = 4;
/** Lent time (issue 43): amber stripes rising to the right over its lender's bar, under the bookings of those who borrow it. */
export const LENT_STRIPE = '#f0b429';
/** A host powered off (issue 48, admins only): the row shaded behind its bookings until now, then hatched until its planned wake. */
export const SLEEP_SHADE = '#d3cfe6';

/**
 * How a booking holds its time, each kind drawn its own way over its bar (paintKind). Lent time is
 * not a booking but a span of its lender's: drawn over the lender's bar (paintHostRow).
 */
export type BookingKind = 'regular' | 'preemptible';
export const bookingKind = (b: Pick<CalendarBooking, 'preemptible'>): BookingKind => (b.preemptible ? 'preemptible' : 'regular');

export interface HostRow extends Row {
  host?: CalendarHost;
}

export interface NetworkRow extends Row {
  segment?: CalendarNetworkSegment;
}

export interface ProviderRow extends Row {
  provider?: CalendarProvider;
}

/** A proposed window (find a slot) drawn as a ghost bar on these hosts (none: across every row). */
export interface Ghost {
  startMs: number;
  endMs: number;
  hostIds: Set<string> | null;
  label: string;
}

export const bookingLabel = (b: Pick<CalendarBooking, 'reserved' | 'lease_name' | 'status' | 'held'>) => (b.reserved ? 'reserved' : b.held ? 'held' : (b.lease_name ?? 'lease'));

export function describeBooking(b: CalendarBooking): string {
  const who = b.reserved
    ? 'reserved by another project'
    : b.held
      ? `held by you until ${b.expires_at_ms ? new Date(b.expires_at_ms).toISOString().slice(11, 19) : '?'} UTC (no lease yet: Book it under Find a slot)`
      : `${b.lease_name ?? 'lease'} (${b.status ?? 'unknown'})`;
  const preempted = b.preempted && b.cut_ms !== undefined ? `, preempted: cut to end ${formatWhen(b.cut_ms)}` : '';
  return `${who}${b.shared ? ', instance slots' : ''}${b.preemptible ? ', preemptible' : ''}${b.borrowed ? ', borrowed (inside a lending)' : ''}${preempted}${b.series_id ? ', recurring (one of a series)' : ''}: ${formatRange(b.start_ms, b.end_ms)}`;
}

/** The window's bookings per host, by start. */
export function bookingsByHost(window: CalendarWindow): Map<string, CalendarBooking[]> {
  const byHost = new Map<string, CalendarBooking[]>();
  for (const b of window.bookings) {
    const list = byHost.get(b.host_id);
    if (list) list.push(b);
    else byHost.set(b.host_id, [b]);
  }
  return byHost;
}

/** The window's lent spans per host. */
export function lentByHost(window: CalendarWindow): Map<string, CalendarLending[]> {
  const byHost = new Map<string, CalendarLending[]>();
  for (const l of window.lent ?? []) byHost.set(l.host_id, [...(byHost.get(l.host_id) ?? []), l]);
  return byHost;
}

/** What a lent span says on hover. */
export const describeLending = (l: CalendarLending): string => `lent to preemptible leases${l.state === 'lent' ? '' : ` (${l.state})`}: ${formatRange(l.start_ms, l.end_ms)}`;

/** The hosts powered off now, by host. */
export function poweredOffByHost(window: CalendarWindow): Map<string, CalendarPoweredOff> {
  return new Map((window.powered_off ?? []).map((p) => [p.host_id, p]));
}

/** Whether the host sleeps at `at` (since it was powered off, until its planned wake or, none planned, for as long as shown). */
export const asleepAt = (p: CalendarPoweredOff | undefined, at: number): boolean => p !== undefined && p.since_ms <= at && (p.wake_ms === null || at < p.wake_ms);

/** What a powered-off host's shading says on hover. */
export const describeSleep = (p: CalendarPoweredOff, at: number, now: number): string =>
  `${at < now ? 'powered off' : 'asleep (planned)'} since ${formatWhen(p.since_ms)}${p.wake_ms === null ? ', no wake planned' : `, woken at ${formatWhen(p.wake_ms)} for its next booking`}`;

/**
 * A powered-off host's row: shaded from its power-off to now, hatched from now to its planned wake
 * (the view's end when none is planned), behind its bookings.
 */
function paintSleep(ctx: CanvasRenderingContext2D, p: CalendarPoweredOff, g: RowGeometry, viewStart: number, viewEnd: number, now: number): void {
  const until = p.wake_ms ?? viewEnd;
  if (until <= viewStart || p.since_ms >= viewEnd) return;
  const x0 = Math.max(g.left, g.x(p.since_ms));
  const xNow = Math.min(g.right, Math.max(x0, g.x(now)));
  const x1 = Math.min(g.right, g.x(until));
  ctx.fillStyle = SLEEP_SHADE;
  ctx.fillRect(x0, g.top, xNow - x0, g.height);
  if (x1 > xNow) hatch(ctx, xNow, g.top, x1 - xNow, g.height, SLEEP_SHADE);
}

/** One row per network segment, named by its type, physical network and tag ("vlan physnet1:250"). */
export function networkRows(networks: CalendarNetworkSegment[]): NetworkRow[] {
  return networks.map((n) => ({ key: n.id, label: `${n.network_type} ${n.physical_network ? `${n.physical_network}:` : ''}${n.segment_id}`, segment: n }));
}

/**
 * The window's bookings per network segment, as host bookings of a row keyed by the segment: its
 * bars are painted, described and opened as a host's are.
 */
export function bookingsByNetwork(window: CalendarWindow): Map<string, CalendarBooking[]> {
  return new Map((window.networks ?? []).map((n) => [n.id, n.bookings.map((b) => ({ ...b, host_id: n.id }))]));
}

/** Host rows, optionally grouped under a header per value of one property. */
export function hostRows(hosts: CalendarHost[], groupBy: string): HostRow[] {
  const row = (h: CalendarHost): HostRow => ({ key: h.id, label: h.hypervisor_hostname, host: h });
  if (!groupBy) return hosts.map(row);
  const groups = new Map<string, CalendarHost[]>();
  for (const h of hosts) {
    const value = h.properties[groupBy] ?? (groupBy in h ? String((h as unknown as Record<string, unknown>)[groupBy]) : '(none)');
    const members = groups.get(value);
    if (members) members.push(h);
    else groups.set(value, [h]);
  }
  return [...groups.entries()]
    .sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }))
    .flatMap(([value, members]) => [{ key: `group:${value}`, label: `${groupBy} = ${value} (${members.length})`, header: true }, ...members.map(row)]);
}

export function paintHostRow(
  ctx: CanvasRenderingContext2D, bookings: CalendarBooking[] | undefined, ghosts: Ghost[], row: HostRow, g: RowGeometry, viewStart: number, viewEnd: number,
  gaps: SeriesGap[] = [], lent: CalendarLending[] = [], sleep?: { poweredOff: CalendarPoweredOff; now: number },
): void {
  const pad = 3;
  if (sleep) paintSleep(ctx, sleep.poweredOff, g, viewStart, viewEnd, sleep.now);
  // The lenders' bars, then their lent spans hatched over them, then the borrowers' bookings on top.
  const ordered = [...(bookings ?? []).filter((b) => !b.borrowed), undefined, ...(bookings ?? []).filter((b) => b.borrowed)];
  for (const b of ordered) {
    if (!b) {
      for (const l of lent) {
        if (l.end_ms <= viewStart || l.start_ms >= viewEnd) continue;
        const x0 = Math.max(g.left - 2, g.x(l.start_ms));
        hatch(ctx, x0, g.top + pad, Math.max(2, Math.min(g.right + 2, g.x(l.end_ms)) - x0), g.height - 2 * pad, LENT_STRIPE);
      }
      continue;
    }
    if (b.end_ms <= viewStart || b.start_ms >= viewEnd) continue;
    const x0 = Math.max(g.left - 2, g.x(b.start_ms));
    const x1 = Math.min(g.right + 2, g.x(b.end_ms));
    const width = Math.max(2, x1 - x0);
    const colors = b.reserved ? RESERVED_COLOR : b.held ? HELD_COLOR : (STATUS_COLORS[b.status ?? ''] ?? RESERVED_COLOR);
    const height = b.shared ? (g.height - 2 * pad) / 2 : g.height - 2 * pad;
    const top = g.top + pad + (b.shared ? height : 0);
    ctx.fillStyle = colors.fill;
    ctx.fillRect(x0, top, width, height);
    if (b.held && !b.reserved) hatch(ctx, x0, top, width, height, HELD_COLOR.stripe);
    paintKind(ctx, bookingKind(b), x0, top, width, height);
    // Only on its bar: a lease whose end came after its cut (a late eviction) ends past the mark.
    if (b.preempted && b.cut_ms !== undefined && b.cut_ms > Math.max(viewStart, b.start_ms) && b.cut_ms <= Math.min(viewEnd, b.end_ms)) {
      ctx.fillStyle = PREEMPTED_COLOR;
      ctx.fillRect(g.x(b.cut_ms) - PREEMPTED_MARK, top, PREEMPTED_MARK, height);
    }
    if (b.mine) {
      ctx.strokeStyle = '#0b1f3a';
      ctx.strokeRect(x0 + 0.5, top + 0.5, width - 1, height - 1);
    }
    if (b.series_id) {
      ctx.fillStyle = SERIES_COLOR;
      ctx.fillRect(x0, top + height - SERIES_STRIP, width, SERIES_STRIP);
    }
    if (width > 28 && !b.shared) {
      ctx.fillStyle = colors.text;
      ctx.fillText(fit(ctx, bookingLabel(b), width - 8), Math.max(x0, g.left) + 4, g.top + g.height / 2);
    }
  }
  // A series's gaps: where an occurrence is missing, over whatever holds the hosts then.
  for (const gap of gaps) {
    if (gap.endMs <= viewStart || gap.startMs >= viewEnd) continue;
    const x0 = g.x(gap.startMs);
    const width = Math.max(2, g.x(gap.endMs) - x0);
    ctx.fillStyle = SERIES_COLOR;
    ctx.fillRect(x0, g.top + pad, width, SERIES_STRIP);
    ctx.setLineDash([4, 3]);
    ctx.strokeStyle = SERIES_COLOR;
    ctx.strokeRect(x0 + 0.5, g.top + pad + 0.5, width - 1, g.height - 2 * pad - 1);
    ctx.setLineDash([]);
  }
  for (const ghost of ghosts) {
    if (ghost.hostIds && !ghost.hostIds.has(row.key)) continue;
    const x0 = g.x(ghost.startMs);
    const x1 = g.x(ghost.endMs);
    ctx.fillStyle = 'rgba(123, 63, 196, 0.18)';
    ctx.fillRect(x0, g.top + pad, x1 - x0, g.height - 2 * pad);
    ctx.setLineDash([4, 3]);
    ctx.strokeStyle = GHOST_COLOR;
    ctx.strokeRect(x0 + 0.5, g.top + pad + 0.5, x1 - x0 - 1, g.height - 2 * pad - 1);
    ctx.setLineDash([]);
  }
}

/** What a booking's kind adds to its bar (a regular booking: nothing). */
function paintKind(ctx: CanvasRenderingContext2D, kind: BookingKind, x: number, y: number, width: number, height: number): void {
  switch (kind) {
    case 'preemptible':
      hatch(ctx, x, y, width, height, PREEMPTIBLE_STRIPE, 'down');
      return;
    case 'regular':
      return;
  }
}

/** Diagonal stripes over a bar, 8 px apart (a bounded number: one per 8 px of its width and height), rising to the right or falling. */
function hatch(ctx: CanvasRenderingContext2D, x: number, y: number, width: number, height: number, color: string, slope: 'up' | 'down' = 'up'): void {
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, width, height);
  ctx.clip();
  ctx.strokeStyle = color;
  ctx.lineWidth = 2;
  ctx.beginPath();
  for (let d = -height; d < width; d += 8) {
    ctx.moveTo(x + d, slope === 'up' ? y + height : y);
    ctx.lineTo(x + d + height, slope === 'up' ? y : y + height);
  }
  ctx.stroke();
  ctx.restore();
}

/** The resource class a provider row shows: a compute node's vCPUs, a network device's egress bandwidth, or its first class. */
export function mainClass(provider: CalendarProvider): string | undefined {
  const classes = Object.keys(provider.capacity);
  return ['VCPU', 'NET_BW_EGR_KILOBIT_PER_SEC'].find((c) => classes.includes(c)) ?? classes[0];
}

const UNITS: Record<string, string> = { VCPU: 'vCPUs', MEMORY_MB: 'MiB', DISK_GB: 'GiB', NET_BW_EGR_KILOBIT_PER_SEC: 'kbps out', NET_BW_IGR_KILOBIT_PER_SEC: 'kbps in' };
export const unitOf = (resourceClass: string) => UNITS[resourceClass] ?? resourceClass;

export function providerRows(providers: CalendarProvider[]): ProviderRow[] {
  return providers
    .filter((p) => mainClass(p) !== undefined)
    .map((p) => ({ key: p.uuid, label: `${p.kind === 'compute' ? 'servers' : p.kind} · ${p.name}`, provider: p }));
}

/** A provider's booked amount of one class over time: the steps (from each instant on, how much is booked, and how much of it is the caller's). */
export type UsageSteps = Array<{ at: number; total: number; mine: number }>;

/** Per provider, the steps of its main class: computed once per answer, not at every paint. */
export function usageStepsByProvider(window: CalendarWindow): Map<string, UsageSteps> {
  const usage = new Map<string, CalendarUsage[]>();
  for (const u of window.usage) {
    const list = usage.get(u.provider_uuid);
    if (list) list.push(u);
    else usage.set(u.provider_uuid, [u]);
  }
  const steps = new Map<string, UsageSteps>();
  for (const p of window.providers) {
    const resourceClass = mainClass(p);
    if (resourceClass) steps.set(p.uuid, usageSteps(usage.get(p.uuid) ?? [], resourceClass));
  }
  return steps;
}

export function usageSteps(usage: CalendarUsage[], resourceClass: string): UsageSteps {
  const changes = new Map<number, { total: number; mine: number }>();
  const add = (at: number, total: number, mine: number) => {
    const c = changes.get(at) ?? { total: 0, mine: 0 };
    c.total += total;
    c.mine += mine;
    changes.set(at, c);
  };
  for (const u of usage) {
    const amount = u.amounts[resourceClass] ?? 0;
    if (!amount) continue;
    add(u.start_ms, amount, u.mine ? amount : 0);
    add(u.end_ms, -amount, u.mine ? -amount : 0);
  }
  let total = 0;
  let mine = 0;
  return [...changes.entries()]
    .sort(([a], [b]) => a - b)
    .map(([at, c]) => {
      total += c.total;
      mine += c.mine;
      return { at, total, mine };
    });
}

export function paintProviderRow(ctx: CanvasRenderingContext2D, steps: UsageSteps | undefined = [], row: ProviderRow, g: RowGeometry, viewStart: number, viewEnd: number): void {
  const provider = row.provider!;
  const resourceClass = mainClass(provider)!;
  const capacity = provider.capacity[resourceClass] || 1;
  const pad = 3;
  const inner = g.height - 2 * pad;
  ctx.fillStyle = provider.usable ? '#e6f2ec' : '#f1e3e3';
  ctx.fillRect(g.left, g.top + pad, g.right - g.left, inner);
  for (let i = 0; i < steps.length; i++) {
    const from = Math.max(viewStart, steps[i].at);
    const to = Math.min(viewEnd, steps[i + 1]?.at ?? viewEnd);
    if (to <= from || steps[i].total <= 0) continue;
    const x0 = g.x(from);
    const width = g.x(to) - x0;
    const totalHeight = Math.min(1, steps[i].total / capacity) * inner;
    const mineHeight = Math.min(1, steps[i].mine / capacity) * inner;
    ctx.fillStyle = RESERVED_COLOR.fill;
    ctx.fillRect(x0, g.top + pad + inner - totalHeight, width, totalHeight);
    ctx.fillStyle = STATUS_COLORS.ACTIVE.fill;
    ctx.fillRect(x0, g.top + pad + inner - mineHeight, width, mineHeight);
  }
}

/** "12 of 16 vCPUs booked" at an instant. */
export function describeUsage(steps: UsageSteps | undefined = [], provider: CalendarProvider, atMs: number): string {
  const resourceClass = mainClass(provider)!;
  let booked = 0;
  for (const s of steps) if (s.at <= atMs) booked = s.total;
  return `${provider.name}: ${booked} of ${provider.capacity[resourceClass]} ${unitOf(resourceClass)} booked${provider.usable ? '' : ' (not usable now)'}`;
}
