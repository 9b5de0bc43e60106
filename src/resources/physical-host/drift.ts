/**
 * Drift repair: every enrolled host should be in exactly the aggregate the calendar says — the
 * lease's while an ACTIVE lease's booking holds it now, otherwise the reservable pool (a failed
 * host may also wait in the failed aggregate) — and a host-lease aggregate whose lease has ended
 * should be gone. People and scripts move hosts by hand; this finds it and puts them back.
 *
 * A host its lease lends (issue 43) belongs to its borrower's booking, or to the pool while none
 * holds it now, never to the lender's aggregate.
 *
 * Only what is settled is touched: a host with a booking of a lease in flight (starting, ending,
 * recycling, in ERROR), a lent host on its way back to its lender, or with instance slots is left alone, aggregates of leases this deployment
 * does not know are not ours, and a drift is repaired only when the previous check saw the same
 * one (a move in progress is over by then). With LK_DRIFT_REPAIR=report it is only reported.
 */
import type { CurrentBooking } from '../../db/host-allocations';
import { computeHostName, type MonitoredHost } from '../../db/hosts';
import type { Aggregate } from '../../openstack';

export interface DriftInput {
  hosts: MonitoredHost[];
  bookings: CurrentBooking[];
  aggregates: Aggregate[];
  /** The leases named by host-lease aggregates that this deployment has (deleted ones too). */
  leases: Map<string, { status: string; deleted: boolean }>;
  freepool: string;
  failed: string;
}

/** One host not where it belongs: where it is (of our aggregates) and where it should be. */
export interface HostDrift {
  hostId: string;
  host: string;
  /** Identifies the drift across checks: the same key twice in a row is repaired. */
  key: string;
  found: string[];
  target: { name: string; leaseAggregate?: { reservationId: string; leaseId: string; projectId: string; availabilityZone: string | null } };
}

export interface DriftPlan {
  drifts: HostDrift[];
  /** Host-lease aggregates of ended leases, to remove once their hosts are out. */
  staleAggregates: Aggregate[];
}

/** Lease statuses whose aggregates may hold hosts on purpose (or need a person): never touched. */
const UNSETTLED = new Set(['PENDING', 'PENDING_APPROVAL', 'STARTING', 'TERMINATING', 'DELETING', 'ERROR']);

const isLeaseAggregate = (a: Aggregate) => typeof a.metadata?.['leasekeeper:reservation'] === 'string' && typeof a.metadata?.['leasekeeper:lease'] === 'string';

/** What is out of place now (pure). */
export function planDrift(input: DriftInput): DriftPlan {
  const leaseOf = (a: Aggregate) => input.leases.get(a.metadata['leasekeeper:lease']);
  // Ours: the pool, the failed aggregate, and host-lease aggregates of leases we know.
  const ours = input.aggregates.filter((a) => a.name === input.freepool || a.name === input.failed || (isLeaseAggregate(a) && leaseOf(a) !== undefined));
  const unsettledAggregates = new Set(ours.filter((a) => isLeaseAggregate(a) && !leaseOf(a)!.deleted && UNSETTLED.has(leaseOf(a)!.status)).map((a) => a.name));
  const drifts: HostDrift[] = [];
  for (const host of input.hosts) {
    const name = computeHostName(host);
    const held = input.bookings.filter((b) => b.host_id === host.id);
    const found = ours.filter((a) => a.hosts.includes(name)).map((a) => a.name).sort();
    // A lent host whose lending ended is on its way back to its lender: a take-back in flight, left alone like a lease's.
    if (held.some((b) => b.shared || b.lease_status !== 'ACTIVE' || b.lent === 'returning') || found.some((a) => unsettledAggregates.has(a))) continue;
    // A lender's booking of a host it lends now does not place it: its borrower's booking does, or the pool.
    const bookings = held.filter((b) => b.lent !== 'now');
    const active = bookings[0];
    let target: HostDrift['target'];
    if (active) {
      if (!active.aggregate) continue;
      target = {
        name: active.aggregate,
        leaseAggregate: { reservationId: active.reservation_id, leaseId: active.lease_id, projectId: active.project_id, availabilityZone: active.availability_zone },
      };
    } else {
      // A failed host, or one in maintenance, may wait in the failed aggregate (replaced in its lease) or sit in the pool.
      if ((host.state === 'failed' || host.in_maintenance) && found.length === 1 && found[0] === input.failed) continue;
      target = { name: input.freepool };
    }
    if (found.length === 1 && found[0] === target.name) continue;
    drifts.push({ hostId: host.id, host: name, key: `${found.join('+') || 'none'}>${target.name}`, found, target });
  }
  const staleAggregates = ours.filter((a) => isLeaseAggregate(a) && (leaseOf(a)!.deleted || leaseOf(a)!.status === 'TERMINATED'));
  return { drifts, staleAggregates };
}

/** How a drift reads in the log and in os-hosts' `last_repair`. */
export function describeDrift(drift: HostDrift): { found: string; action: string } {
  return {
    found: drift.found.length ? `in ${drift.found.join(' and ')}` : 'in none of its aggregates',
    action: `belongs in ${drift.target.name}`,
  };
}
