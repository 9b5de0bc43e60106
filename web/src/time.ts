/** Zoom levels, the time axis' ticks and date labels. Everything in UTC, as Blazar's dates are. */

export type Zoom = 'day' | 'week' | 'month';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export const ZOOM_SPAN: Record<Zoom, number> = { day: DAY, week: 7 * DAY, month: 31 * DAY };

/** Where a view of this zoom starts when it shows `atMs`: a little before it, on a whole hour or day. */
export function viewStartAround(atMs: number, zoom: Zoom): number {
  if (zoom === 'day') return Math.floor((atMs - 2 * HOUR) / HOUR) * HOUR;
  return Math.floor((atMs - DAY) / DAY) * DAY;
}

/** Ticks for the axis: major (labelled) and minor, chosen so that labels stay ~90 px apart. */
export function ticks(startMs: number, endMs: number, widthPx: number): { major: number[]; minor: number[]; step: number } {
  const span = endMs - startMs;
  const steps = [HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY];
  const step = steps.find((s) => (widthPx / span) * s >= 90) ?? 7 * DAY;
  const minorStep = step >= DAY ? (step === DAY ? 6 * HOUR : DAY) : step / 2 >= HOUR ? HOUR : step / 2;
  const major: number[] = [];
  const minor: number[] = [];
  // Weeks tick on Mondays (1970-01-05 was one); the rest on multiples of their step from the epoch (UTC).
  const origin = step === 7 * DAY ? 4 * DAY : 0;
  for (let t = Math.ceil((startMs - origin) / step) * step + origin; t <= endMs; t += step) major.push(t);
  for (let t = Math.ceil(startMs / minorStep) * minorStep; t <= endMs; t += minorStep) minor.push(t);
  return { major, minor, step };
}

const pad = (n: number) => String(n).padStart(2, '0');
const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

export function tickLabel(ms: number, step: number): string {
  const d = new Date(ms);
  if (step < DAY && (d.getUTCHours() !== 0 || d.getUTCMinutes() !== 0)) return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
  return `${WEEKDAYS[d.getUTCDay()]} ${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]}`;
}

/** "2026-11-24 09:30 UTC" */
export function formatWhen(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())} UTC`;
}

export function formatRange(startMs: number, endMs: number): string {
  return `${formatWhen(startMs)} → ${formatWhen(endMs)}`;
}

export function formatDuration(ms: number): string {
  const minutes = Math.round(ms / 60_000);
  if (minutes < 60) return `${minutes} min`;
  const hours = minutes / 60;
  if (hours < 48) return `${Number.isInteger(hours) ? hours : hours.toFixed(1)} h`;
  return `${(hours / 24).toFixed(hours % 24 === 0 ? 0 : 1)} days`;
}

/** "09:41": minutes and seconds left, the seconds rounded up (it shows 00:00 only once the time is over). */
export function formatCountdown(leftMs: number): string {
  const seconds = Math.max(0, Math.ceil(leftMs / 1000));
  return `${pad(Math.floor(seconds / 60))}:${pad(seconds % 60)}`;
}
