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
