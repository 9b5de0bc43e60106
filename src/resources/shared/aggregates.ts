/**
 * Nova host aggregates as the resource types use them (a host lease's aggregate, an instance
 * reservation's): found by name, made with their metadata, hosts in and out; every step safe to run
 * twice (a retried activity finds what an earlier try made).
 */
import { ConflictError, ignoreNotFound, type Aggregate, type NovaClient } from '../../openstack';

export async function findAggregate(nova: NovaClient, name: string): Promise<Aggregate | undefined> {
  return (await nova.listAggregates()).find((a) => a.name === name);
}

/** The named aggregate with (at least) this metadata, created if missing; safe to run twice at once. */
export async function ensureAggregate(nova: NovaClient, name: string, metadata: Record<string, string>, availabilityZone?: string): Promise<Aggregate> {
  let aggregate = await findAggregate(nova, name);
  if (!aggregate) {
    try {
      aggregate = await nova.createAggregate({ name, ...(availabilityZone ? { availability_zone: availabilityZone } : {}) });
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
      aggregate = await findAggregate(nova, name); // created by an earlier attempt or a concurrent one
      if (!aggregate) throw err;
    }
  }
  return withMetadata(nova, aggregate, metadata);
}

/** The aggregate with (at least) this metadata: set only when some of it differs. */
export async function withMetadata(nova: NovaClient, aggregate: Aggregate, metadata: Record<string, string>): Promise<Aggregate> {
  const stale = Object.entries(metadata).some(([key, value]) => aggregate.metadata?.[key] !== value);
  return stale ? nova.setAggregateMetadata(aggregate.id, metadata) : aggregate;
}

/** Puts the compute host into the aggregate, unless it is there already; safe to run twice. */
export async function addHost(nova: NovaClient, aggregate: Aggregate, host: string): Promise<void> {
  if (aggregate.hosts.includes(host)) return;
  try {
    await nova.addHostToAggregate(aggregate.id, host);
  } catch (err) {
    // 409 is fine only when the host is already a member (a retried step); Nova also answers 409
    // when the host sits in an aggregate of another availability zone, which must not be hidden.
    if (!(err instanceof ConflictError) || !(await nova.getAggregate(aggregate.id)).hosts.includes(host)) throw err;
  }
}

/** Takes the compute host out of the aggregate (if there is one and the host is in it); safe to run twice. */
export async function removeHost(nova: NovaClient, aggregate: Aggregate | undefined, host: string): Promise<void> {
  if (!aggregate?.hosts.includes(host)) return;
  await ignoreNotFound(nova.removeHostFromAggregate(aggregate.id, host));
}

