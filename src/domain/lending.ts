/**
 * Lending a running lease's idle hosts to preemptible leases (issue 43): which lent hosts a reclaim
 * takes back first. Pure: the calendar reads the lendings and their borrowers, and cuts.
 */

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
  const rank = (host: LentHost) => (host.borrowers.length === 0 ? 0 : host.borrowers.some((b) => b.begun) ? 2 : 1);
  const leases = (host: LentHost) => new Set(host.borrowers.map((b) => b.leaseId)).size;
  const ordered = [...lent].sort((a, b) => rank(a) - rank(b) || leases(a) - leases(b) || Number(a.hostId) - Number(b.hostId));
  return count === undefined ? ordered : ordered.slice(0, Math.max(0, count));
}
