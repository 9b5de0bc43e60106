/**
 * Every way leasekeeper writes or reads a date, all in UTC (pure; the workflows use it too):
 *
 * | function                | example                      | where                                                                 |
 * |-------------------------|------------------------------|-----------------------------------------------------------------------|
 * | formatBlazarDate        | `2026-11-21T09:15:07.042000` | Blazar's API dates (lease start/end, events): python-blazarclient parses exactly this |
 * | formatBlazarTimestamp   | `2026-11-21 09:15:07`        | Blazar's `created_at`/`updated_at`, and a request date to the second   |
 * | formatRequestDate       | `2026-11-21 09:15`           | a request date as Blazar takes it (the minute the instant falls in)    |
 * | reuseStart / reuseEnd   | `2026-11-21 09:16`           | a request date handed back for reuse, rounded to stay valid           |
 * | formatMessageDate       | `2026-11-21 09:15:07`        | an instant in a message: the request form, with seconds when they matter |
 * | pythonIsoformat         | `2026-11-21 09:15:07.042000` | Python's `datetime.isoformat(sep)` (Blazar's external filter; oslo's timestamps with sep ' ') |
 * | formatMonth             | `2026-11`                    | a month of the usage reports                                           |
 * | parseRequestDate        | `"2026-11-21 09:15"` → ms    | the request dates Blazar accepts (and seconds, ISO's `T`/`Z`)          |
 */

const iso = (ms: number): string => new Date(ms).toISOString();

/** Blazar's API date: `2026-11-21T09:15:07.042000` (microseconds always; ours are whole milliseconds). */
export function formatBlazarDate(ms: number): string {
  return `${iso(ms).slice(0, 23)}000`;
}

/** Blazar's record timestamp (`created_at`, `updated_at`): `2026-11-21 09:15:07`. */
export function formatBlazarTimestamp(ms: number): string {
  return iso(ms).slice(0, 19).replace('T', ' ');
}

/** A request date as Blazar takes it: `2026-11-21 09:15`, the minute the instant falls in (seconds dropped). */
export function formatRequestDate(ms: number): string {
  return iso(ms).slice(0, 16).replace('T', ' ');
}

/** An instant in a message (errors, refusals, reports): the request form, with seconds when it is not a whole minute. */
export function formatMessageDate(ms: number): string {
  return ms % 60_000 === 0 ? formatRequestDate(ms) : formatBlazarTimestamp(ms);
}

export const wholeMinuteUp = (ms: number): number => Math.ceil(ms / 60_000) * 60_000;
export const wholeMinuteDown = (ms: number): number => Math.floor(ms / 60_000) * 60_000;

/**
 * Dates handed back for reuse (`earliest_start`, `latest_end`, availability windows…): a request
 * date a client can send back, rounded to the whole minute in the direction that keeps it valid:
 * a start later (up), an end earlier (down).
 */
export const reuseStart = (ms: number): string => formatRequestDate(wholeMinuteUp(ms));
export const reuseEnd = (ms: number): string => formatRequestDate(wholeMinuteDown(ms));

/**
 * Python's `datetime.isoformat(sep)` of a naive UTC datetime: `2026-11-21T09:15:07.042000`, the
 * fraction only when it is not zero (`2026-11-21T09:15:07`). Blazar's external filter sends its
 * dates so; oslo.messaging's timestamp is `str(utcnow())`, the same with sep ' '.
 */
export function pythonIsoformat(ms: number, sep: 'T' | ' ' = 'T'): string {
  const text = iso(ms);
  const millis = text.slice(20, 23);
  return `${text.slice(0, 10)}${sep}${text.slice(11, 19)}${millis === '000' ? '' : `.${millis}000`}`;
}

/** The UTC month an instant falls in: `2026-11`. */
export function formatMonth(ms: number): string {
  return iso(ms).slice(0, 7);
}

const REQUEST_DATE = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?Z?$/;

/** Parses Blazar's request date (also accepting seconds and ISO's `T`/`Z`); undefined when malformed or impossible. */
export function parseRequestDate(text: string): number | undefined {
  const m = REQUEST_DATE.exec(text.trim());
  if (!m) return undefined;
  const [year, month, day, hour, minute] = m.slice(1, 6).map(Number);
  const second = m[6] ? Number(m[6]) : 0;
  const fraction = m[7] ? Number(m[7].padEnd(3, '0').slice(0, 3)) : 0;
  const ms = Date.UTC(year, month - 1, day, hour, minute, second, fraction);
  const back = new Date(ms);
  // Reject dates that Date.UTC silently rolls over (2026-02-30, 24:61).
  if (back.getUTCFullYear() !== year || back.getUTCMonth() !== month - 1 || back.getUTCDate() !== day || back.getUTCHours() !== hour || back.getUTCMinutes() !== minute || second > 59) {
    return undefined;
  }
  return ms;
}
