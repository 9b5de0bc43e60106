/** The page's calls to leasekeeper's API (same origin), with the user's own identity. */
import { parseRequestDate } from '../../src/domain/dates';

/** Who the user is: noauth identity headers (development) or their Keystone token. */
export type Credentials =
  | { kind: 'noauth'; projectId: string; admin: boolean }
  | { kind: 'token'; token: string };

export interface CalendarBooking {
  host_id: string;
  start_ms: number;
  end_ms: number;
  shared?: boolean;
  /** Another project's booking: nothing else is known. */
  reserved?: boolean;
  mine?: boolean;
  lease_id?: string;
  reservation_id?: string;
  lease_name?: string | null;
  status?: string | null;
  project_id?: string;
  /** The caller's own offer hold (no lease yet): booked until `expires_at_ms`, its `lease_id` is the hold's id. */
  held?: boolean;
  hold_id?: string;
  expires_at_ms?: number;
  /** One of the caller's recurring leases: its series. */
  series_id?: string;
  /** Preemptible time (anyone's): a regular lease may take it back. */
  preemptible?: boolean;
  /** A lease the caller may know was preempted: `cut_ms` is the end it was cut to. */
  preempted?: boolean;
  cut_ms?: number;
  /** Booked inside another lease's lending (issue 43). */
  borrowed?: boolean;
}

/** A host's lent span (anyone's): time its lease lends to preemptible leases; the lending lease only to whoever may know it. */
export interface CalendarLending {
  host_id: string;
  start_ms: number;
  end_ms: number;
  state: 'lent' | 'reclaiming' | 'returned';
  lease_id?: string;
}

/** A host powered off now (admins only, issue 48): since when, and when the planner will wake it (null: not planned). */
export interface CalendarPoweredOff {
  host_id: string;
  since_ms: number;
  wake_ms: number | null;
}

export interface CalendarHost {
  id: string;
  hypervisor_hostname: string;
  vcpus: number;
  memory_mb: number;
  local_gb: number;
  properties: Record<string, string>;
}

export interface CalendarProvider {
  uuid: string;
  name: string;
  host: string;
  kind: string;
  capacity: Record<string, number>;
  usable: boolean;
}

export interface CalendarUsage extends Omit<CalendarBooking, 'host_id' | 'shared'> {
  provider_uuid: string;
  amounts: Record<string, number>;
}

/** A booking of a network segment: what a host booking says of its lease (`reserved` only, when the caller may not know it). */
export type CalendarNetworkBooking = Omit<CalendarBooking, 'host_id' | 'shared'>;

/** An enrolled network segment (issue 45) and its bookings in the window. */
export interface CalendarNetworkSegment {
  id: string;
  network_type: string;
  physical_network: string | null;
  segment_id: string;
  bookings: CalendarNetworkBooking[];
}

export interface CalendarWindow {
  start_ms: number;
  end_ms: number;
  now_ms: number;
  hosts: CalendarHost[];
  bookings: CalendarBooking[];
  /** Lent spans of the hosts (issue 43). */
  lent?: CalendarLending[];
  /** Hosts powered off now (issue 48): in admins' answers only. */
  powered_off?: CalendarPoweredOff[];
  /** Network segments and their bookings (issue 45); absent from an API without them. */
  networks?: CalendarNetworkSegment[];
  providers: CalendarProvider[];
  usage: CalendarUsage[];
  /** The caller's project's own leases overlapping the window (booked or not). */
  leases: Array<{ id: string; name: string; status: string; start_ms: number; end_ms: number; series_id?: string; preemptible?: boolean }>;
  /** The caller's series with occurrences refused in the window: their gaps. */
  series?: Array<{ id: string; name: string; gaps: Array<{ name: string; start_ms: number; end_ms: number; reason: string }> }>;
  truncated?: boolean;
  note?: string;
}

export interface LeaseEvent {
  event_type: string;
  time: string;
  status: string;
}

export interface LeaseReservation {
  id: string;
  resource_type: string;
  status: string;
  [param: string]: unknown;
}

export interface Lease {
  id: string;
  name: string;
  project_id: string;
  start_date: string;
  end_date: string;
  status: string;
  status_reason?: string;
  degraded: boolean;
  reservations: LeaseReservation[];
  events: LeaseEvent[];
  /** Why the lease waits (or waited) for approval, and the answer (issue 42). */
  approval?: LeaseApproval;
  /** An active lease's change waiting for an admin's answer: booked, not in effect (issue 42). */
  pending_change?: LeaseApproval & { end_date: string };
}

/** Why a lease (or its change) waits or waited for approval, and the answer. */
export interface LeaseApproval {
  kind: 'rule' | 'exception';
  rule: string;
  reason: string;
  justification: string | null;
  timeout_at: string;
  on_timeout: string;
  outcome: string | null;
  answer_reason: string | null;
}

/** What would work (POST /v1/offers, GET /v1/leases/{id}/extension-offers, a refusal's `offers`). */
export interface Offer {
  id: string;
  kind: 'exact' | 'later' | 'shorter' | 'fewer' | 'extension';
  start_date: string;
  end_date: string;
  /** What each reservation would book, as counts ({"resource_type": "physical:host", "hosts": 2}). */
  reservations: Array<{ resource_type: string; [count: string]: unknown }>;
  reason: string;
  expires_at: string;
  /** Listed only because nothing else exists: the usage policy rule that refuses it. */
  refused_by?: string;
}

export interface OfferHold {
  id: string;
  offer_id: string;
  status: 'held' | 'accepted' | 'ended';
  expires_at: string;
}

/** The offers a refusal (409, 403) carries, if any. */
export function offersOf(err: unknown): Offer[] | undefined {
  return err instanceof ApiFailure && Array.isArray(err.body.offers) ? (err.body.offers as Offer[]) : undefined;
}

/** An answer other than 2xx, with Blazar's error body's message. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The error body: a 409 says what would fit (`latest_end`, `longest_end`, `earliest_start`…). */
    readonly body: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export function authHeaders(credentials: Credentials): Record<string, string> {
  if (credentials.kind === 'token') return credentials.token ? { 'X-Auth-Token': credentials.token } : {};
  if (credentials.admin) return { 'X-Auth-Token': 'admin', 'X-Project-Id': credentials.projectId };
  return { 'X-Project-Id': credentials.projectId, 'X-User-Id': `${credentials.projectId}-user`, 'X-Roles': 'member' };
}

export async function call<T>(credentials: Credentials, method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(path, {
    method,
    headers: { ...authHeaders(credentials), Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const parsed = text ? (JSON.parse(text) as unknown) : undefined;
  if (!response.ok) {
    const message = (parsed as { error_message?: unknown } | undefined)?.error_message;
    throw new ApiFailure(response.status, typeof message === 'string' ? message : `${response.status} ${response.statusText}`, (parsed ?? {}) as Record<string, unknown>);
  }
  return parsed as T;
}

/** Blazar's dates: "YYYY-MM-DD HH:MM" (a request date) or "YYYY-MM-DDTHH:MM:SS.ffffff" (a response date), UTC; NaN when malformed. */
export function parseDate(text: string): number {
  return parseRequestDate(text) ?? NaN;
}

export const fetchCalendar = (credentials: Credentials, startMs: number, endMs: number, resourceProperties: string) =>
  call<CalendarWindow>(
    credentials,
    'GET',
    `/v1/calendar?${new URLSearchParams({ start: new Date(startMs).toISOString(), end: new Date(endMs).toISOString(), ...(resourceProperties ? { resource_properties: resourceProperties } : {}) })}`,
  );

export const fetchLease = async (credentials: Credentials, id: string) => (await call<{ lease: Lease }>(credentials, 'GET', `/v1/leases/${encodeURIComponent(id)}`)).lease;

export async function hostsOfLease(credentials: Credentials, leaseId: string): Promise<string[]> {
  const answer = await call<{ allocations: Array<{ hypervisor_hostname: string; reservations: unknown[] }> }>(credentials, 'GET', `/v1/os-hosts/allocations?lease_id=${encodeURIComponent(leaseId)}`);
  return answer.allocations.filter((a) => a.reservations.length > 0).map((a) => a.hypervisor_hostname);
}
