/**
 * What a host lease does in Nova, step by step, each step idempotent (keyed by the reservation id):
 * the lease's aggregate (named after the reservation, with an availability zone of its own and
 * the lessee's filter_tenant_id), hosts moved from the reservable pool into it, and at the end one
 * of three policies: `delete` the servers and return the hosts; `recycle` (hosts wait in the lease's
 * aggregate, closed, until their last server is gone); `release` (hosts and servers handed to the shared
 * cloud, flagged). A host is always added to its new aggregate before it leaves the old one, so it
 * is never in no aggregate (a Blazar bug).
 */
import type { ReportProgress } from '../../domain/resource-plugin';
import { ignoreNotFound, type Aggregate, type NovaClient } from '../../openstack';
import { addHost, ensureAggregate, findAggregate, removeHost, withMetadata } from '../shared/aggregates';

export interface LeaseAggregate {
  name: string;
  availabilityZone: string;
}

/**
 * A reservation's aggregate and zone (shown in the lease JSON), named as Blazar names them: the
 * aggregate after the reservation id (the value of the `reservation` scheduler hint BlazarFilter
 * matches) and the zone with BlazarFilter's prefix `blazar_` (a host in such a zone takes no server
 * without the hint). So a deployment that runs BlazarFilter works unchanged, and leases imported
 * from Blazar are adopted as they are.
 */
export function leaseAggregateFor(reservationId: string): LeaseAggregate {
  return { name: reservationId, availabilityZone: `${BLAZAR_ZONE_PREFIX}${reservationId}` };
}

/** BlazarFilter's `blazar_az_prefix` (its default): hosts in a zone so named are reserved. */
export const BLAZAR_ZONE_PREFIX = 'blazar_';

/** The name leasekeeper gave a reservation's aggregate before it took Blazar's layout (leases started then still end in it). */
const legacyLeaseAggregateName = (reservationId: string) => `reservation-${reservationId}`;

/** The reservation's aggregate, under its name or the legacy one. */
export async function findLeaseAggregate(nova: NovaClient, reservationId: string): Promise<Aggregate | undefined> {
  const names = [leaseAggregateFor(reservationId).name, legacyLeaseAggregateName(reservationId)];
  return (await nova.listAggregates()).find((a) => names.includes(a.name));
}

export interface HostMove {
  reservationId: string;
  leaseId: string;
  projectId: string;
  /** Compute host names (Nova's service host). */
  hosts: string[];
  freepool: string;
  /** Called after each host: a move of many hosts is long. */
  progress: ReportProgress;
  /** Aborted when the attempt was given up on: a lend stops fencing (lendHostsOut). */
  signal?: AbortSignal;
  /**
   * At start only: of the leases whose `blazar_` zones still hold some of the hosts, those the start
   * may take them from (preempted leases past the eviction bound); none unless given.
   */
  takeFromLeases?: (leaseIds: string[]) => Promise<string[]>;
}

/**
 * At start: the lease aggregate (created if missing), hosts in, then out of the pool. A host still in
 * a preempted lease's zone (`takeFromLeases`) is taken from it through the pool first (Nova keeps a
 * host in one zone): a start goes ahead so only past a preempted lease whose end outlasted the
 * eviction bound (docs/api.md, "Preemptible leases"); that end then leaves the host alone but for its own servers.
 */
export async function moveHostsIntoLease(nova: NovaClient, move: HostMove): Promise<LeaseAggregate> {
  // A start begun under the legacy names carries on in the aggregate it made.
  const existing = await findLeaseAggregate(nova, move.reservationId);
  const names = existing?.availability_zone ? { name: existing.name, availabilityZone: existing.availability_zone } : leaseAggregateFor(move.reservationId);
  const aggregate = await ensureAggregate(
    nova,
    names.name,
    { filter_tenant_id: move.projectId, 'blazar:owner': move.projectId, 'leasekeeper:reservation': move.reservationId, 'leasekeeper:lease': move.leaseId },
    names.availabilityZone,
  );
  let pool = await findAggregate(nova, move.freepool);
  // Only a preempted lease's zone gives a host up: any other (a lease whose end failed, an operator's) keeps it, and Nova refuses the move as before.
  const zoned = (await nova.listAggregates()).filter((a) => a.id !== aggregate.id && a.availability_zone?.startsWith(BLAZAR_ZONE_PREFIX) && a.hosts.some((h) => move.hosts.includes(h)));
  const leaseOf = (a: (typeof zoned)[number]) => a.metadata?.['leasekeeper:lease'];
  const takeable = new Set(zoned.length > 0 && move.takeFromLeases ? await move.takeFromLeases([...new Set(zoned.map(leaseOf).filter((id): id is string => typeof id === 'string'))]) : []);
  const otherZones = zoned.filter((a) => takeable.has(leaseOf(a) ?? ''));
  for (const host of move.hosts) {
    for (const other of otherZones.filter((a) => a.hosts.includes(host))) {
      if (!pool) throw new Error(`the reservable pool aggregate ${move.freepool} is missing`);
      await addHost(nova, pool, host);
      await removeHost(nova, other, host);
      pool = await nova.getAggregate(pool.id);
      move.progress({ taken: host, from: other.name });
    }
    await addHost(nova, aggregate, host);
    await removeHost(nova, pool, host);
    move.progress({ moved: host });
  }
  return names;
}

/**
 * Lending (issue 43): of `candidates` (compute hosts of the lease, in order), up to `count` fenced
 * and found idle. Each is fenced first — into the free pool, then out of the lease's aggregate (never
 * in no aggregate; the pool has no `blazar_` zone, so Nova takes both) — so that no new server of
 * the lessee lands there, then checked: any server Nova lists on it (BUILD included: one scheduled
 * before the fence) puts it back into the lease's aggregate. Three calls per idle host. The caller
 * puts the answered hosts back (moveHostsIntoLease) if it does not lend them after all.
 *
 * An attempt given up on (`move.signal`: its heartbeats stopped, or it outlasted its time) stops
 * before its next host and leaves what it fenced fenced: its retry, reading the aggregates anew,
 * finds those hosts in the pool already and only looks at their servers (one call each), so it
 * carries on from there instead of moving them back and forth beside a put-back.
 */
export async function lendHostsOut(nova: NovaClient, move: HostMove, candidates: string[], count: number): Promise<string[]> {
  const aggregate = await findLeaseAggregate(nova, move.reservationId);
  const pool = await findAggregate(nova, move.freepool);
  if (!pool) throw new Error(`the reservable pool aggregate ${move.freepool} is missing`);
  const idle: string[] = [];
  let fencing: string | undefined;
  try {
    for (const host of candidates) {
      if (idle.length === count) break;
      move.signal?.throwIfAborted();
      fencing = host;
      await addHost(nova, pool, host);
      await removeHost(nova, aggregate, host);
      const servers = (await nova.listServers({ all_tenants: true, host })).filter((s) => s.status !== 'DELETED' && s.status !== 'SOFT_DELETED');
      if (servers.length === 0) {
        idle.push(host);
        move.progress({ fenced: host, idle: idle.length });
      } else {
        await moveHostsIntoLease(nova, { ...move, hosts: [host] });
        move.progress({ busy: host, servers: servers.length });
      }
      fencing = undefined;
    }
  } catch (err) {
    // Given up on: the retry carries on from the hosts fenced (above); a put-back now would race it.
    if (move.signal?.aborted) throw err;
    // Nothing is lent yet: every host fenced so far (and the one being fenced) goes back into the lease before the error
    // is answered, so that a failed lend leaves no host in the pool unrecorded; should that fail too, the lend's error stands.
    const fenced = [...idle, ...(fencing !== undefined ? [fencing] : [])];
    if (fenced.length > 0) await moveHostsIntoLease(nova, { ...move, hosts: fenced }).catch((undo: unknown) => move.progress({ putBackFailed: (undo as Error).message }));
    throw err;
  }
  return idle;
}

/**
 * After a lend that lent nothing, its every try given up on (issue 43): a try given up on leaves
 * what it fenced fenced for its retry (lendHostsOut), so with no retry left those hosts would stay
 * in the pool, recorded nowhere. Of `move.hosts` (the reservation's booked hosts not lent), those in
 * the pool and out of the lease's aggregate go back into it; answers them.
 */
export async function putFencedHostsBack(nova: NovaClient, move: HostMove): Promise<string[]> {
  const aggregate = await findLeaseAggregate(nova, move.reservationId);
  const pool = await findAggregate(nova, move.freepool);
  if (!aggregate || !pool) return [];
  const fenced = move.hosts.filter((host) => pool.hosts.includes(host) && !aggregate.hosts.includes(host));
  if (fenced.length > 0) await moveHostsIntoLease(nova, { ...move, hosts: fenced });
  return fenced;
}

/**
 * The hosts of `move` no longer in the lease's aggregate: another lease's start took them
 * (moveHostsIntoLease), or a retried end already returned them. When the aggregate is gone: all of
 * them (`ifGone: 'all'`), or none (`'none'`: hosts recycling in a shared aggregate of old are still the lease's).
 */
export async function hostsOutOfLease(nova: NovaClient, move: HostMove, ifGone: 'all' | 'none' = 'all'): Promise<Set<string>> {
  const aggregate = await findLeaseAggregate(nova, move.reservationId);
  if (!aggregate && ifGone === 'none') return new Set();
  return new Set(move.hosts.filter((host) => !aggregate?.hosts.includes(host)));
}

/** At the end (or after a start that failed half way): hosts back into the pool, then the lease aggregate removed. */
export async function returnHostsToPool(nova: NovaClient, move: HostMove): Promise<void> {
  const aggregate = await findLeaseAggregate(nova, move.reservationId);
  // No lease aggregate: nothing of this reservation ever moved (e.g. deleted before its start), and
  // its hosts may be serving another lease right now: leave them alone.
  if (!aggregate) return;
  const pool = await findAggregate(nova, move.freepool);
  if (!pool) throw new Error(`the reservable pool aggregate ${move.freepool} is missing`);
  // A host no longer in it is another lease's now (or back already): left where it is.
  for (const host of move.hosts.filter((h) => aggregate.hosts.includes(h))) {
    await addHost(nova, pool, host);
    await removeHost(nova, aggregate, host);
    move.progress({ returned: host });
  }
  await ignoreNotFound(nova.deleteAggregate(aggregate.id));
}

/**
 * The `delete` end policy, one pass: every server on the hosts (of any project; on a host in
 * `onlyProject.hosts`, only that project's) is asked to go, then up to `waitMs` passes for them to be
 * gone. Returns how many are still there (the caller polls again later, showing the progress,
 * instead of holding one activity for minutes).
 */
export async function deleteServersOnHosts(nova: NovaClient, hosts: string[], waitMs: number, progress: ReportProgress, onlyProject?: { projectId: string; hosts: Set<string> }): Promise<number> {
  const filterOf = (host: string) => (onlyProject?.hosts.has(host) ? { all_tenants: true, host, project_id: onlyProject.projectId } : { all_tenants: true, host });
  const list = async () => (await Promise.all(hosts.map((host) => nova.listServers(filterOf(host))))).flat();
  let servers = await list();
  for (const server of servers) {
    if (server['OS-EXT-STS:task_state'] !== 'deleting') await ignoreNotFound(nova.deleteServer(server.id));
  }
  const deadline = Date.now() + waitMs;
  while (servers.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    servers = await list();
    progress({ serversLeft: servers.length });
  }
  return servers.length;
}

/** How long one pass of an end waits for deleted servers before reporting progress and polling again. */
export const SERVER_DELETE_PASS_MS = 10_000;

/** Where hosts go at the end under `recycle` and `release`. */
export interface EndAggregates {
  /** Open to every project: the shared cloud. Its hosts are no longer reservable. */
  released: string;
  /** The project named in closed aggregates' filter_tenant_id (the pool's). */
  closedProjectId: string;
}

/** Moves every host still in the lease aggregate to `target`, then removes the lease aggregate. */
async function moveOutOfLease(nova: NovaClient, move: HostMove, target: Aggregate): Promise<void> {
  const aggregate = await findLeaseAggregate(nova, move.reservationId);
  if (!aggregate) return;
  for (const host of move.hosts.filter((h) => aggregate.hosts.includes(h))) {
    await addHost(nova, target, host);
    await removeHost(nova, aggregate, host);
    move.progress({ moved: host, to: target.name });
  }
  await ignoreNotFound(nova.deleteAggregate(aggregate.id));
}

export interface RecycleRequest extends HostMove {
  aggregates: EndAggregates;
  /** Per host, when to stop waiting and delete what still runs there (grace end, or the host's next booking). */
  deleteServersAt: Map<string, number>;
  /** Delete what runs now, whatever the deadlines (the lease is being deleted). */
  force: boolean;
  /** On these hosts only this project's servers are waited for and deleted (a borrowed host's, issue 43: its lender's stray server comes back with it). */
  onlyProject?: { projectId: string; hosts: Set<string> };
}

export interface RecycleProgress {
  /** Hosts still waiting in the closed aggregate, with how many servers each still runs (`deleting`: being deleted). */
  waiting: Array<{ host: string; servers: number; deleteAt?: number; deleting?: boolean }>;
}

/** The `leasekeeper:pool` metadata value of an aggregate whose hosts wait for their last servers. */
const RECYCLING = 'recycling';

/**
 * The aggregates where this reservation's hosts wait: its own, closed, and — for a recycle begun
 * before hosts waited in their lease's aggregate — the shared recycling aggregate of old (found by
 * its metadata, as it may have any name).
 */
function recyclingAggregatesOf(aggregates: Aggregate[], own: Aggregate | undefined): Aggregate[] {
  const legacyShared = aggregates.filter((a) => a.metadata?.['leasekeeper:pool'] === RECYCLING && !a.metadata['leasekeeper:reservation']);
  return own ? [own, ...legacyShared] : legacyShared;
}

/**
 * The `recycle` end policy, one pass. The lease's aggregate is closed where it is (the lessee's
 * servers keep running and keep their zone, but its filter_tenant_id and `blazar:owner` name no
 * project, so nobody starts a new server there, by zone or by BlazarFilter's `reservation` hint);
 * each of its hosts with no server left, or whose deadline has come (then its servers are deleted),
 * returns to the pool; the aggregate is removed once empty. (The hosts cannot move to a shared
 * closed aggregate instead: with no `blazar_` zone it would be no pool for BlazarFilter, so hint-less
 * servers could land there, and a host cannot be in two aggregates of different zones.)
 */
export async function recycleHosts(nova: NovaClient, request: RecycleRequest): Promise<RecycleProgress> {
  const own = await findLeaseAggregate(nova, request.reservationId);
  if (own) {
    // (Gone meanwhile: a retried pass that already emptied and removed it.)
    await ignoreNotFound(withMetadata(nova, own, { filter_tenant_id: request.aggregates.closedProjectId, 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': RECYCLING }));
  }
  const pool = await findAggregate(nova, request.freepool);
  if (!pool) throw new Error(`the reservable pool aggregate ${request.freepool} is missing`);
  const waiting: RecycleProgress['waiting'] = [];
  for (const recycling of recyclingAggregatesOf(await nova.listAggregates(), own)) {
    for (const host of request.hosts.filter((h) => recycling.hosts.includes(h))) {
      const servers = await nova.listServers(request.onlyProject?.hosts.has(host) ? { all_tenants: true, host, project_id: request.onlyProject.projectId } : { all_tenants: true, host });
      const deleteAt = request.deleteServersAt.get(host);
      if (servers.length > 0 && !request.force && (deleteAt === undefined || Date.now() < deleteAt)) {
        waiting.push({ host, servers: servers.length, deleteAt });
        continue;
      }
      const left = servers.length > 0 ? await deleteServersOnHosts(nova, [host], SERVER_DELETE_PASS_MS, request.progress, request.onlyProject) : 0;
      if (left > 0) {
        waiting.push({ host, servers: left, deleting: true });
        continue;
      }
      await addHost(nova, pool, host);
      await removeHost(nova, recycling, host);
      request.progress({ returned: host });
    }
  }
  if (own && waiting.length === 0) await ignoreNotFound(nova.deleteAggregate(own.id));
  return { waiting };
}

/**
 * The `release` end policy: hosts, with their servers, go from the lease aggregate to the open
 * `released` aggregate (the shared cloud; the aggregate's name flags them for the operator).
 */
export async function releaseHosts(nova: NovaClient, move: HostMove, aggregates: EndAggregates): Promise<void> {
  const released = await ensureAggregate(nova, aggregates.released, { 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': 'released' });
  await moveOutOfLease(nova, move, released);
}
