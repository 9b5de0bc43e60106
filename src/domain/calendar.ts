/**
 * What every calendar of bookable capacity does, whatever it books: whole hosts, floating IP
 * addresses, instance slots on hosts, or quantities on Placement providers. Each is generic over
 * what differs between them (`CalendarTypes`); the four implementations are in src/resources.
 */
import type { FitSearch, ReservationContext } from './resource-plugin';

/** The types one calendar fills in. */
export interface CalendarTypes {
  /** What its reads run on: the pool, or the client of the transaction that books. */
  db: unknown;
  /** One bookable thing as the calendar lists it (a host, an address, a provider, a candidate host). */
  resource: unknown;
  /** What a booking takes besides the reservation's context (its request, options). */
  bookArgs: unknown[];
  /** What a booking answers: where the reservation was booked. */
  booked: unknown;
  /** What a search looks for (the lease's reservations, or one request). */
  searchFor: unknown;
  /** The bookings over a window, as its pure calendar functions read them. */
  snapshot: unknown;
  /** What a snapshot takes after its window (the lead, a reservation to leave out…). */
  snapshotArgs: unknown[];
  /** What explaining a shortage takes after the resources (the requests that did not fit…). */
  shortageArgs: unknown[];
}

export interface Calendar<T extends CalendarTypes> {
  /** Books the reservation over [ctx.startMs, ctx.endMs) (from its lead before); idempotent per request; 409 when it does not fit. */
  book(ctx: ReservationContext, ...args: T['bookArgs']): Promise<T['booked']>;
  /** Frees the reservation's booking: all of it if its lease never started, from `nowMs` on if it ends early. */
  release(reservationId: string, started: boolean, nowMs?: number): Promise<void>;
  /** Where a lease from `start` for `durationMs`, made ready `leadMs` before, fits: the earliest start and the longest from `start`. */
  search(what: T['searchFor'], start: number, durationMs: number, leadMs: number): Promise<FitSearch>;
  /** The bookings of `resources` that matter over [from, to) (to null: from `from` on). */
  snapshot(db: T['db'], resources: T['resource'][], from: number, to: number | null, ...more: T['snapshotArgs']): Promise<T['snapshot']>;
  /** The 409 for a booking that does not fit: what was short, when the same lease fits, and how long from its start. */
  explainShortage(db: T['db'], ctx: ReservationContext, resources: T['resource'][], ...more: T['shortageArgs']): Promise<Error>;
}
