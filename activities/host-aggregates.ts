/**
 * What a host lease does in Nova, step by step, each step idempotent (keyed by the reservation id):
 * the lease's aggregate (named after the reservation, with an availability zone of its own and
 * the lessee's filter_tenant_id), hosts moved from the reservable pool into it and back, and the
 * servers on them deleted at the end. A host is always added to its new aggregate before it leaves
 * the old one, so it is never in no aggregate (a Blazar bug).
 */
import { Context } from '@temporalio/activity';
import { ConflictError, ignoreNotFound, type Aggregate, type NovaClient } from '../src/openstack';

export interface LeaseAggregate {
  name: string;
  availabilityZone: string;
}

/** The names leasekeeper gives a reservation's aggregate and zone (shown in the lease JSON). */
export function leaseAggregateFor(reservationId: string): LeaseAggregate {
  return { name: `reservation-${reservationId}`, availabilityZone: `lease-${reservationId}` };
}

async function findAggregate(nova: NovaClient, name: string): Promise<Aggregate | undefined> {
  return (await nova.listAggregates()).find((a) => a.name === name);
}

async function addHost(nova: NovaClient, aggregate: Aggregate, host: string): Promise<void> {
  if (aggregate.hosts.includes(host)) return;
  try {
    await nova.addHostToAggregate(aggregate.id, host);
  } catch (err) {
    // 409 is fine only when the host is already a member (a retried step); Nova also answers 409
    // when the host sits in an aggregate of another availability zone, which must not be hidden.
    if (!(err instanceof ConflictError) || !(await nova.getAggregate(aggregate.id)).hosts.includes(host)) throw err;
  }
}

async function removeHost(nova: NovaClient, aggregate: Aggregate | undefined, host: string): Promise<void> {
  if (!aggregate?.hosts.includes(host)) return;
  await ignoreNotFound(nova.removeHostFromAggregate(aggregate.id, host));
}

export interface HostMove {
  reservationId: string;
  leaseId: string;
  projectId: string;
  /** Compute host names (Nova's service host). */
  hosts: string[];
  freepool: string;
}

/** At start: the lease aggregate (created if missing), hosts in, then out of the pool. */
export async function moveHostsIntoLease(nova: NovaClient, move: HostMove): Promise<LeaseAggregate> {
  const names = leaseAggregateFor(move.reservationId);
  let aggregate = await findAggregate(nova, names.name);
  if (!aggregate) {
    try {
      aggregate = await nova.createAggregate({ name: names.name, availability_zone: names.availabilityZone });
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
      aggregate = await findAggregate(nova, names.name); // created by an earlier attempt
      if (!aggregate) throw err;
    }
  }
  aggregate = await nova.setAggregateMetadata(aggregate.id, {
    filter_tenant_id: move.projectId,
    'blazar:owner': move.projectId,
    'leasekeeper:reservation': move.reservationId,
    'leasekeeper:lease': move.leaseId,
  });
  const pool = await findAggregate(nova, move.freepool);
  for (const host of move.hosts) {
    await addHost(nova, aggregate, host);
    await removeHost(nova, pool, host);
    Context.current().heartbeat({ moved: host });
  }
  return names;
}

/** At the end (or after a start that failed half way): hosts back into the pool, then the lease aggregate removed. */
export async function returnHostsToPool(nova: NovaClient, move: HostMove): Promise<void> {
  const aggregate = await findAggregate(nova, leaseAggregateFor(move.reservationId).name);
  // No lease aggregate: nothing of this reservation ever moved (e.g. deleted before its start), and
  // its hosts may be serving another lease right now: leave them alone.
  if (!aggregate) return;
  const pool = await findAggregate(nova, move.freepool);
  if (!pool) throw new Error(`the reservable pool aggregate ${move.freepool} is missing`);
  for (const host of move.hosts) {
    await addHost(nova, pool, host);
    await removeHost(nova, aggregate, host);
    Context.current().heartbeat({ returned: host });
  }
  await ignoreNotFound(nova.deleteAggregate(aggregate.id));
}

/** The `delete` end policy: every server on the hosts, of any project, deleted and waited for. */
export async function deleteServersOnHosts(nova: NovaClient, hosts: string[], timeoutMs: number): Promise<number> {
  const servers = (await Promise.all(hosts.map((host) => nova.listServers({ all_tenants: true, host })))).flat();
  for (const server of servers) await ignoreNotFound(nova.deleteServer(server.id));
  const deadline = Date.now() + timeoutMs;
  let left = servers.length;
  while (left > 0) {
    if (Date.now() > deadline) throw new Error(`${left} server(s) still on ${hosts.join(', ')} after ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    left = (await Promise.all(hosts.map((host) => nova.listServers({ all_tenants: true, host })))).flat().length;
    Context.current().heartbeat({ serversLeft: left }); // progress shows in the workflow's pending activity
  }
  return servers.length;
}
