/**
 * Recurring leases: the subset of RFC 5545's RRULE a series takes (`FREQ=DAILY|WEEKLY`, `BYDAY`
 * (weekly), `INTERVAL`, and `COUNT` or `UNTIL`), and the occurrences it gives from a lease's start
 * and end, in UTC as the API's dates are. Pure; every part bounded. A small parser rather than a
 * library: the subset is five parts, and each needs bounds a general RRULE library would not set.
 */

export const WEEKDAYS = ['MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

export interface Recurrence {
  freq: 'DAILY' | 'WEEKLY';
  interval: number;
  /** Weekly only: the days of each week (Monday first), in week order. */
  byDay?: Weekday[];
  count?: number;
  /** The last instant an occurrence may start at (inclusive), epoch ms. */
  untilMs?: number;
}

export interface RecurrenceLimits {
  /** At most this many occurrences (LK_MAX_OCCURRENCES). */
  maxOccurrences: number;
  /** UNTIL at most this long after the first start. */
  horizonMs: number;
}

/** A rule refused: `part` names what is wrong (FREQ, BYDAY, …, or `rule` for the whole). */
export class RecurrenceError extends Error {
  constructor(
    readonly part: string,
    message: string,
  ) {
    super(message);
    this.name = 'RecurrenceError';
  }
}

export const MAX_RULE_LENGTH = 200;
export const MAX_INTERVAL = 52;
export const RECURRENCE_HORIZON_MS = 731 * 86_400_000; // two years (one a leap year)
const DAY_MS = 86_400_000;
const WEEK_MS = 7 * DAY_MS;
const KNOWN_PARTS = ['FREQ', 'INTERVAL', 'BYDAY', 'COUNT', 'UNTIL'];

/** UNTIL as RFC 5545 writes it: a date (`20261231`, the whole day) or a UTC date-time (`20261231T235959Z`). */
function parseUntil(value: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})Z)?$/.exec(value);
  if (!m) throw new RecurrenceError('UNTIL', 'expected a UTC date YYYYMMDD or date-time YYYYMMDDTHHMMSSZ');
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const [hour, minute, second] = m[4] === undefined ? [23, 59, 59] : [Number(m[4]), Number(m[5]), Number(m[6])];
  const ms = Date.UTC(year, month - 1, day, hour, minute, second);
  const back = new Date(ms);
  if (back.getUTCFullYear() !== year || back.getUTCMonth() !== month - 1 || back.getUTCDate() !== day || hour > 23 || minute > 59 || second > 59) {
    throw new RecurrenceError('UNTIL', `${value} is not a real date`);
  }
  return ms;
}

function wholeNumber(part: string, value: string, min: number, max: number): number {
  if (!/^\d{1,6}$/.test(value) || Number(value) < min || Number(value) > max) throw new RecurrenceError(part, `expected a whole number from ${min} to ${max}`);
  return Number(value);
}

/** Parses a rule (`FREQ=WEEKLY;BYDAY=MO,WE;COUNT=10`, an `RRULE:` prefix allowed), or throws RecurrenceError naming the part. */
export function parseRecurrence(text: string, limits: RecurrenceLimits): Recurrence {
  if (text.length > MAX_RULE_LENGTH) throw new RecurrenceError('rule', `at most ${MAX_RULE_LENGTH} characters`);
  const body = text.trim().replace(/^RRULE:/i, '');
  if (body === '') throw new RecurrenceError('rule', 'expected a rule such as FREQ=WEEKLY;BYDAY=MO;COUNT=10');
  const parts = new Map<string, string>();
  for (const piece of body.split(';')) {
    const eq = piece.indexOf('=');
    const name = (eq < 0 ? piece : piece.slice(0, eq)).trim().toUpperCase();
    if (eq < 0 || name === '') throw new RecurrenceError('rule', `expected NAME=VALUE parts separated by ";", not ${JSON.stringify(piece.slice(0, 40))}`);
    if (!KNOWN_PARTS.includes(name)) throw new RecurrenceError(name.slice(0, 20), `not supported: a rule takes ${KNOWN_PARTS.join(', ')}`);
    if (parts.has(name)) throw new RecurrenceError(name, 'given twice');
    parts.set(name, piece.slice(eq + 1).trim().toUpperCase());
  }
  const freq = parts.get('FREQ');
  if (freq === undefined) throw new RecurrenceError('FREQ', 'missing: expected DAILY or WEEKLY');
  if (freq !== 'DAILY' && freq !== 'WEEKLY') throw new RecurrenceError('FREQ', 'expected DAILY or WEEKLY');
  const rule: Recurrence = { freq, interval: parts.has('INTERVAL') ? wholeNumber('INTERVAL', parts.get('INTERVAL')!, 1, MAX_INTERVAL) : 1 };
  const byDay = parts.get('BYDAY');
  if (byDay !== undefined) {
    if (freq !== 'WEEKLY') throw new RecurrenceError('BYDAY', 'only with FREQ=WEEKLY');
    const days = byDay.split(',').map((d) => d.trim());
    for (const day of days) if (!(WEEKDAYS as readonly string[]).includes(day)) throw new RecurrenceError('BYDAY', `expected days among ${WEEKDAYS.join(',')}, not ${JSON.stringify(day.slice(0, 10))}`);
    if (new Set(days).size !== days.length) throw new RecurrenceError('BYDAY', 'a day is given twice');
    rule.byDay = WEEKDAYS.filter((d) => days.includes(d));
  }
  const count = parts.get('COUNT');
  const until = parts.get('UNTIL');
  if ((count === undefined) === (until === undefined)) throw new RecurrenceError(count === undefined ? 'COUNT' : 'UNTIL', 'give exactly one of COUNT and UNTIL');
  if (count !== undefined) rule.count = wholeNumber('COUNT', count, 1, limits.maxOccurrences);
  if (until !== undefined) rule.untilMs = parseUntil(until);
  return rule;
}

/** A rule as parseRecurrence reads it back (UNTIL as a UTC date-time): how a series stores a changed count or end. */
export function formatRecurrence(rule: Recurrence): string {
  const parts = [`FREQ=${rule.freq}`];
  if (rule.interval !== 1) parts.push(`INTERVAL=${rule.interval}`);
  if (rule.byDay) parts.push(`BYDAY=${rule.byDay.join(',')}`);
  if (rule.count !== undefined) parts.push(`COUNT=${rule.count}`);
  if (rule.untilMs !== undefined) parts.push(`UNTIL=${new Date(rule.untilMs).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '')}`);
  return parts.join(';');
}

/** Monday 00:00 UTC of the week holding `ms`. */
function weekStart(ms: number): number {
  const day = Math.floor(ms / DAY_MS) * DAY_MS;
  const weekday = (new Date(day).getUTCDay() + 6) % 7; // Monday 0
  return day - weekday * DAY_MS;
}

export interface Occurrence {
  startMs: number;
  endMs: number;
}

/**
 * The occurrences of `rule` from the lease [startMs, endMs): each starts at the rule's instants at
 * or after `startMs` (the same time of day), and lasts as long as the lease. Throws RecurrenceError
 * when UNTIL reaches past the horizon or gives more than maxOccurrences, when none results, or when
 * one would still run as the next starts. Work is bounded by maxOccurrences and the horizon.
 */
export function expandRecurrence(rule: Recurrence, startMs: number, endMs: number, limits: RecurrenceLimits): Occurrence[] {
  if (rule.untilMs !== undefined) {
    if (rule.untilMs < startMs) throw new RecurrenceError('UNTIL', 'is before the lease\'s start');
    if (rule.untilMs > startMs + limits.horizonMs) throw new RecurrenceError('UNTIL', `at most ${Math.round(limits.horizonMs / DAY_MS)} days after the lease's start`);
  }
  const last = rule.untilMs ?? startMs + limits.horizonMs;
  const wanted = rule.count ?? limits.maxOccurrences + 1;
  const starts: number[] = [];
  const timeOfDay = startMs - Math.floor(startMs / DAY_MS) * DAY_MS;
  const step = rule.freq === 'DAILY' ? rule.interval * DAY_MS : rule.interval * WEEK_MS;
  const firstPeriod = rule.byDay ? weekStart(startMs) : startMs;
  const offsets = rule.byDay ? rule.byDay.map((d) => WEEKDAYS.indexOf(d) * DAY_MS + timeOfDay) : [0];
  // Bounded: the periods end at the horizon (two years of days at most), and starts at `wanted`.
  for (let period = firstPeriod; period <= last && starts.length < wanted; period += step) {
    for (const offset of offsets) {
      const at = period + offset;
      if (at >= startMs && at <= last && starts.length < wanted) starts.push(at);
    }
  }
  if (starts.length === 0) throw new RecurrenceError('rule', 'gives no occurrence from the lease\'s start');
  if (starts.length > limits.maxOccurrences) throw new RecurrenceError('UNTIL', `gives more than ${limits.maxOccurrences} occurrences (LK_MAX_OCCURRENCES): bring it earlier or use COUNT`);
  const durationMs = endMs - startMs;
  for (let i = 1; i < starts.length; i++) {
    if (starts[i] < starts[i - 1] + durationMs) throw new RecurrenceError('rule', 'the lease is longer than the time between two occurrences: they would overlap');
  }
  return starts.map((s) => ({ startMs: s, endMs: s + durationMs }));
}
