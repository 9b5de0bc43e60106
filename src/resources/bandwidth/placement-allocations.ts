/**
 * Placement actions for a bandwidth reservation (`network:bandwidth`): allocation candidates for its
 * ports' request groups, and their allocations written into a consumer against every provider in
 * one PUT, then taken out at the end. The consumer is the server the ports are for (a linked server
 * reservation's), as Nova does it, or else the reservation itself (consumer type LEASE).
 */
import { ConflictError, NotFoundError, type AllocationsByProvider, type PlacementClient } from '../../openstack';

export const LEASE_CONSUMER_TYPE = 'LEASE';
export const SERVER_CONSUMER_TYPE = 'INSTANCE';
const GENERATION_CONFLICT_TRIES = 5;

export interface RequestGroup {
  /** The port and its request group (Neutron's group id), e.g. for the binding profile. */
  portId: string;
  groupId: string;
  resources: Record<string, number>;
  required: string[];
}

export interface Candidate {
  /** The root provider (the compute node) the groups come from. */
  rootUuid: string;
  /** Request group id → the provider that satisfies it. */
  groupProviders: Record<string, string>;
  allocations: AllocationsByProvider;
  /** Per provider of the candidate, what Placement has left of each resource class (capacity − used). */
  free: Record<string, Record<string, number>>;
}

/** Placement's candidates for all groups at once (each its own granular group), optionally within one tree. */
export async function allocationCandidates(placement: PlacementClient, groups: RequestGroup[], inTree?: string): Promise<Candidate[]> {
  const suffix = (index: number) => `_g${index}`;
  const answer = await placement.getAllocationCandidates({
    groups: Object.fromEntries(groups.map((g, i) => [suffix(i), { resources: g.resources, required: g.required, ...(inTree ? { in_tree: inTree } : {}) }])),
    group_policy: 'none',
    limit: 50,
  });
  return answer.allocation_requests.map((request) => {
    const groupProviders = Object.fromEntries(groups.map((g, i) => [g.groupId, request.mappings?.[suffix(i)]?.[0] ?? '']));
    const anyProvider = Object.keys(request.allocations)[0];
    const free = Object.fromEntries(
      Object.keys(request.allocations).map((rp) => [
        rp,
        Object.fromEntries(Object.entries(answer.provider_summaries[rp]?.resources ?? {}).map(([rc, { capacity, used }]) => [rc, capacity - used])),
      ]),
    );
    return { rootUuid: answer.provider_summaries[anyProvider]?.root_provider_uuid ?? anyProvider, groupProviders, allocations: request.allocations, free };
  });
}

/**
 * Writes `ours` into the consumer's allocations: against every provider in one PUT, keeping what
 * the consumer holds elsewhere (a server's VCPU and memory when the ports are for a server), with
 * the consumer generation read just before. A concurrent writer makes that generation stale (409
 * placement.concurrent_update): read again and write again. Returns how many writes it took
 * (0: already as wanted).
 */
export async function writeAllocations(
  placement: PlacementClient,
  consumer: string,
  ours: AllocationsByProvider,
  owner: { projectId: string; userId: string; consumerType: string },
): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const current = await placement.getAllocations(consumer);
    const wanted = merged(current.allocations, ours);
    if (sameAllocations(current.allocations, wanted)) return attempt - 1;
    try {
      await placement.putAllocations(consumer, {
        allocations: wanted,
        project_id: current.project_id ?? owner.projectId,
        user_id: current.user_id ?? owner.userId,
        consumer_generation: current.consumer_generation ?? null,
        consumer_type: knownType(current.consumer_type) ?? owner.consumerType,
      });
      return attempt;
    } catch (err) {
      if (err instanceof ConflictError && err.retryable && attempt < GENERATION_CONFLICT_TRIES) continue;
      throw err;
    }
  }
}

/** Takes `ours` out of the consumer's allocations (all of them when nothing else is left), with the same generation handling. */
export async function removeAllocations(placement: PlacementClient, consumer: string, ours: AllocationsByProvider, consumerType: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const current = await placement.getAllocations(consumer);
    if (Object.keys(current.allocations).length === 0) return; // nothing held (or the consumer is gone)
    const left = without(current.allocations, ours);
    try {
      if (Object.keys(left).length === 0) {
        await placement.deleteAllocations(consumer);
      } else {
        if (sameAllocations(current.allocations, left)) return;
        await placement.putAllocations(consumer, {
          allocations: left,
          project_id: current.project_id!,
          user_id: current.user_id!,
          consumer_generation: current.consumer_generation ?? null,
          consumer_type: knownType(current.consumer_type) ?? consumerType,
        });
      }
      return;
    } catch (err) {
      if (err instanceof NotFoundError) return;
      if (err instanceof ConflictError && err.retryable && attempt < GENERATION_CONFLICT_TRIES) continue;
      throw err;
    }
  }
}

/** Placement reports `unknown` for a consumer written without a type (Nova's servers), and refuses it back. */
const knownType = (type: string | undefined) => (type && type !== 'unknown' ? type : undefined);

type Held = Record<string, { resources: Record<string, number> }>;

/** The consumer's allocations with ours set on top (ours replace the same classes on the same providers). */
function merged(current: Held, ours: AllocationsByProvider): AllocationsByProvider {
  const result: AllocationsByProvider = Object.fromEntries(Object.entries(current).map(([rp, { resources }]) => [rp, { resources: { ...resources } }]));
  for (const [rp, { resources }] of Object.entries(ours)) result[rp] = { resources: { ...result[rp]?.resources, ...resources } };
  return result;
}

/** The consumer's allocations without our classes on our providers. */
function without(current: Held, ours: AllocationsByProvider): AllocationsByProvider {
  const result: AllocationsByProvider = {};
  for (const [rp, { resources }] of Object.entries(current)) {
    const left = Object.fromEntries(Object.entries(resources).filter(([rc]) => ours[rp]?.resources[rc] === undefined));
    if (Object.keys(left).length > 0) result[rp] = { resources: left };
  }
  return result;
}

function sameAllocations(current: Record<string, { resources: Record<string, number> }>, wanted: AllocationsByProvider): boolean {
  const norm = (a: Record<string, { resources: Record<string, number> }>) =>
    JSON.stringify(
      Object.entries(a)
        .map(([rp, { resources }]) => [rp, Object.entries(resources).sort()])
        .sort(),
    );
  return norm(current) === norm(wanted);
}
