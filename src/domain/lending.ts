/**
 * Lending a running lease's idle hosts or instance slots to preemptible leases (issue 43): which lent hosts a reclaim
 * takes back first, which reservations may lend, and how the lease records its lendings. Pure: the
 * calendar reads the lendings and their borrowers, and cuts; the workflow and the API use the rest.
 */
import type { Lease, Reservation, ReservationLending } from './lease';
import { isPreemptibleReservation } from './preemption';
import type { ReclaimedHosts } from './resource-plugin';

/** A host's open lending, and the borrowers' bookings inside it (their lease, and whether it began). */
export interface LentHost {
  lendingRowId: string;
  hostId: string;
  borrowers: Array<{ leaseId: string; begun: boolean }>;
}

/**
 * The lent hosts a reclaim of `count` (all when undefined) takes back, in the order it prefers:
 * hosts nobody borrows first (nobody to warn), then those borrowed by leases not begun (nobody to
 * evict), then those running borrowers use; among equals, the fewest borrower leases cut, then host id.
 */
export function chooseReclaimedHosts(lent: LentHost[], count?: number): LentHost[] {
  const ordered = [...lent].sort((a, b) => reclaimPreference(a, b) || Number(a.hostId) - Number(b.hostId));
  return count === undefined ? ordered : ordered.slice(0, Math.max(0, count));
}

/** A reclaim's order between two lendings: nobody borrowing first, then borrowers not begun, then the fewest borrower leases. */
function reclaimPreference(a: Pick<LentHost, 'borrowers'>, b: Pick<LentHost, 'borrowers'>): number {
  const rank = (lent: Pick<LentHost, 'borrowers'>) => (lent.borrowers.length === 0 ? 0 : lent.borrowers.some((x) => x.begun) ? 2 : 1);
  const leases = (lent: Pick<LentHost, 'borrowers'>) => new Set(lent.borrowers.map((x) => x.leaseId)).size;
  return rank(a) - rank(b) || leases(a) - leases(b);
}

/** One provider's lending of instance slots (a lending row lends `slots` there), and its borrowers. */
export interface LentSlots {
  lendingRowId: string;
  slots: number;
  borrowers: LentHost['borrowers'];
}

/**
 * The slot lendings a reclaim of `count` slots (all when undefined) takes back, whole, in the
 * order chooseReclaimedHosts prefers (then the oldest lending): as many as cover `count`, so it may
 * take back more slots than asked (a lending is lent and taken back as one).
 */
export function chooseReclaimedSlots(lent: LentSlots[], count?: number): LentSlots[] {
  const ordered = [...lent].sort((a, b) => reclaimPreference(a, b) || Number(a.lendingRowId) - Number(b.lendingRowId));
  if (count === undefined) return ordered;
  const chosen: LentSlots[] = [];
  let covered = 0;
  for (const lending of ordered) {
    if (covered >= count) break;
    chosen.push(lending);
    covered += lending.slots;
  }
  return chosen;
}

/** Most open lend requests a reservation may have at once (each a workflow event and a JSON entry). */
export const MAX_OPEN_LENDINGS = 20;

/** The resource types whose reservations may lend (the calendars that keep borrowers inside a lending). */
const LENDING_TYPES: ReadonlySet<string> = new Set(['physical:host', 'virtual:instance']);

/**
 * Why a lease's reservation cannot lend (a 400's message), or undefined when it may: it must be the
 * lease's, of a type that lends, regular (a preemptible booking is not the owner's to lend), and not
 * `on_end: release` (its hosts must be in its aggregate at its end, handed to the shared cloud).
 */
export function lendRefusal(lease: Pick<Lease, 'id' | 'name' | 'reservations'>, reservationId: string): string | undefined {
  const reservation = lease.reservations.find((r) => r.id === reservationId);
  if (!reservation) return `reservation_id: lease ${lease.name} has no reservation ${reservationId}`;
  if (!LENDING_TYPES.has(reservation.resource_type)) return `reservation ${reservationId} is ${reservation.resource_type}: only physical:host and virtual:instance reservations lend`;
  if (isPreemptibleReservation(reservation)) return `reservation ${reservationId} is preemptible: only a regular reservation lends its hosts`;
  if (reservation.allocation?.on_end === 'release' || (reservation.params as { on_end?: unknown }).on_end === 'release') {
    return `reservation ${reservationId} has on_end: release: its hosts must be in its aggregate at its end, so it cannot lend them`;
  }
  return undefined;
}

/** The reservations of the lease that may lend (lendRefusal). */
export const lendingReservations = (lease: Pick<Lease, 'id' | 'name' | 'reservations'>): Reservation[] => lease.reservations.filter((r) => lendRefusal(lease, r.id) === undefined);

/** A lending still out (lent, or reclaimed and not back yet). */
export const isOpenLending = (lending: ReservationLending): boolean => lending.state !== 'returned';

/** When an open lending's hosts are due back: its reclaim's return, else its end. */
export const lendingDueMs = (lending: ReservationLending): number => (lending.state === 'reclaiming' && lending.returnsAtMs !== undefined ? lending.returnsAtMs : lending.untilMs);

/** At the lease's end: its lendings closed (the end's release took every lent host back). */
export const withLendingsReturned = <R extends Pick<Reservation, 'lendings'>>(reservation: R): R =>
  reservation.lendings?.some(isOpenLending) ? { ...reservation, lendings: reservation.lendings.map((g) => (isOpenLending(g) ? { ...g, state: 'returned' as const } : g)) } : reservation;

/** The hosts a reservation lends now and a reclaim may take (not being reclaimed already); a slot lending's rows. */
export const lentHostIds = (reservation: Pick<Reservation, 'lendings'>): string[] => (reservation.lendings ?? []).filter((g) => g.state === 'lent').flatMap((g) => g.hostIds);

/** What a reservation lends now and a reclaim may take, counted as a lend's and a reclaim's `count` counts: slots, or hosts. */
export function lentCount(reservation: Pick<Reservation, 'lendings' | 'resource_type'>): { count: number; unit: 'host' | 'slot' } {
  const lent = (reservation.lendings ?? []).filter((g) => g.state === 'lent');
  return { count: lent.reduce((n, g) => n + (g.slots ? g.slots.reduce((a, b) => a + b, 0) : g.hostIds.length), 0), unit: reservation.resource_type === 'physical:host' ? 'host' : 'slot' };
}

/**
 * Of the reservation's hosts being reclaimed as the calendar holds them (`reclaiming`: read after a
 * reclaim whose answer was lost), those this reclaim took: hosts it found lent (`lentHostIds`), and
 * hosts being reclaimed already whose return it brought sooner, to its need at most. None: it took
 * nothing, and its failure is the answer. Other lendings' differences are not this reclaim's.
 */
export function reclaimedBy(recorded: ReservationLending[], reclaiming: ReclaimedHosts['hosts'], lentHostIds: string[], neededFromMs?: number): ReclaimedHosts['hosts'] {
  const recordedReturn = (hostId: string) => recorded.find((g) => g.state === 'reclaiming' && g.hostIds.includes(hostId))?.returnsAtMs;
  return reclaiming.filter((h) => {
    if (lentHostIds.includes(h.hostId)) return true;
    const was = recordedReturn(h.hostId);
    return neededFromMs !== undefined && was !== undefined && h.returnsAtMs < was && h.returnsAtMs <= neededFromMs;
  });
}

/**
 * The reservation's lendings after a reclaim took `returned` hosts back (each due at its time; borrowed
 * or not): a lending whose hosts were all taken is `reclaiming`; one partly taken is split in two, the
 * taken hosts' part `reclaiming` (one entry per return time), the rest still `lent`.
 */
export function afterReclaim(lendings: ReservationLending[], returned: ReclaimedHosts['hosts']): ReservationLending[] {
  const byHost = new Map(returned.map((h) => [h.hostId, h]));
  return lendings.flatMap((lending) => {
    // A lending already being reclaimed is taken again by a reclaim of everything (a sooner need): its hosts come back at the sooner time.
    if (lending.state === 'returned' || !lending.hostIds.some((id) => byHost.has(id))) return [lending];
    const kept = lending.hostIds.map((id, i) => ({ id, host: lending.hosts[i], slots: lending.slots?.[i] })).filter((h) => !byHost.has(h.id));
    const taken = lending.hostIds.map((id, i) => ({ id, host: lending.hosts[i], slots: lending.slots?.[i], back: byHost.get(id) })).filter((h) => h.back !== undefined);
    // A slot lending's part keeps the slots of its hosts.
    const parted = (part: typeof kept) => ({ hosts: part.map((h) => h.host), hostIds: part.map((h) => h.id), ...(lending.slots ? { slots: part.map((h) => h.slots!) } : {}) });
    const times = [...new Set(taken.map((h) => h.back!.returnsAtMs))].sort((a, b) => a - b);
    const reclaiming = times.map((returnsAtMs): ReservationLending => {
      const part = taken.filter((h) => h.back!.returnsAtMs === returnsAtMs);
      const sooner = lending.state === 'reclaiming' && lending.returnsAtMs !== undefined ? Math.min(lending.returnsAtMs, returnsAtMs) : returnsAtMs;
      return { ...lending, ...parted(part), state: 'reclaiming', returnsAtMs: sooner, borrowed: lending.borrowed || part.some((h) => h.back!.borrowed) };
    });
    return [...(kept.length ? [{ ...lending, ...parted(kept) }] : []), ...reclaiming];
  });
}

/**
 * The provisioning lead of an ask that may book inside lendings (a preemptible one, issue 43): its
 * lead before now is moot (nothing is provisioned in the past), so it blocks from now at the
 * earliest and one starting now fits a lending that began a moment ago; the lead still ahead must
 * lie inside the lending, as its window does. A regular ask keeps its whole lead. Admission, the
 * offers' search and an offer's hosts all use it, so that they agree.
 */
export function askedLeadMs(lentAsFree: boolean, leadMs: number, startMs: number, nowMs: number): number {
  return lentAsFree ? Math.min(leadMs, Math.max(0, startMs - nowMs)) : leadMs;
}

/**
 * How many hosts a lend of `count` may look at: the reservation's booked hosts (its `host:` resource
 * keys) not lent, at least `count`. Its time is sized to them, not to the hosts asked: a busy host costs a
 * fence, a look and a move back, and many busy ones may come before the idle ones. A slot lend
 * (`count` slots) reads and writes Placement on every host the reservation holds slots on (its
 * allocation's `hosts`), whatever the slots asked or lent there; without them, one host per slot.
 */
export function lendCandidateCount(reservation: Pick<Reservation, 'resource_type' | 'resourceKeys' | 'allocation' | 'lendings'>, count: number): number {
  if (reservation.resource_type !== 'physical:host') {
    const hosts = reservation.allocation?.hosts;
    return Array.isArray(hosts) && hosts.length > 0 ? hosts.length : count;
  }
  const booked = (reservation.resourceKeys ?? []).filter((key) => key.startsWith('host:')).length;
  return Math.max(count, booked - lentHostIds(reservation).length);
}

/** A lending row's window and a borrower's booking inside one (by the lending row's id). */
type LendingWindow = { id: string; start_ms: number; end_ms: number };
type BorrowedWindow = { lending_row_id: string; start_ms: number; end_ms: number };

/** The borrowed milliseconds inside a lending (accounting): each borrower's booking clipped to the lending's window, summed. */
export function borrowedMsInside(lending: LendingWindow, inside: BorrowedWindow[]): number {
  return inside.filter((b) => b.lending_row_id === lending.id).reduce((sum, b) => sum + Math.max(0, Math.min(b.end_ms, lending.end_ms) - Math.max(b.start_ms, lending.start_ms)), 0);
}

/**
 * Lendings being reclaimed as a reclaim answers them (hosts and slots alike): each by `idOf` (a host,
 * or the lending row standing for its host), back at its end, and whether anyone borrowed inside it.
 */
export function asReclaimedLendings<L extends { id: string; end_ms: number }>(lendings: L[], inside: Array<{ lending_row_id: string }>, idOf: (lending: L) => string): Array<{ hostId: string; returnsAtMs: number; borrowed: boolean }> {
  return lendings.map((g) => ({ hostId: idOf(g), returnsAtMs: g.end_ms, borrowed: inside.some((b) => b.lending_row_id === g.id) }));
}
