/**
 * Blazar's Nova scheduler filter (`BlazarFilter.host_passes` in openstack/blazar-nova,
 * blazarnova/scheduler/filters/blazar_filter.py), restated as a pure function so tests can hold
 * leasekeeper's aggregate layout to the rules a deployment running that filter applies. Written
 * from reading the Python, quirks kept: the first requested pool found decides; the legacy
 * `blazar:` zone prefix counts whatever `blazar_az_prefix` is; an aggregate that is both in a
 * blazar zone and named like the pool is counted twice (which matters to preemptibles).
 */

/** What the filter reads of one of the host's aggregates (Nova's Aggregate object). */
export interface FilterAggregate {
  name: string;
  availability_zone: string | null;
  metadata: Record<string, string>;
}

/** What the filter reads of the request (Nova's RequestSpec). */
export interface FilterRequest {
  projectId: string;
  /** Scheduler hints as Nova keeps them: each a list of strings (`--hint reservation=<id>` gives `{reservation: ['<id>']}`). */
  hints?: Record<string, string[]>;
  flavorExtraSpecs?: Record<string, string>;
}

/** The filter's options, section `[blazar:physical:host]` of nova.conf. */
export interface BlazarFilterOptions {
  aggregate_freepool_name: string;
  allow_preemptibles: boolean;
  preemptible_aggregate: string;
  blazar_owner: string;
  blazar_az_prefix: string;
}

/** The options' defaults (those of blazar-nova). */
export const BLAZAR_FILTER_DEFAULTS: BlazarFilterOptions = {
  aggregate_freepool_name: 'freepool',
  allow_preemptibles: false,
  preemptible_aggregate: 'freepool',
  blazar_owner: 'blazar:owner',
  blazar_az_prefix: 'blazar_',
};

/** The flavor extra spec of Blazar's instance reservations: such requests are left to other filters. */
export const INSTANCE_RESERVATION_SPEC = 'aggregate_instance_extra_specs:reservation';
const PREEMPTIBLE_SPEC = 'blazar:preemptible';

/** `RequestSpec.get_scheduler_hint`: a one-element list is unwrapped, anything else returned as is. */
function schedulerHint(request: FilterRequest, name: string): string | string[] | undefined {
  const value = request.hints?.[name];
  return value?.length === 1 ? value[0] : value;
}

/** oslo's `bool_from_string` (not strict). */
function boolFromString(value: string | undefined): boolean {
  return ['1', 't', 'true', 'on', 'y', 'yes'].includes((value ?? '').trim().toLowerCase());
}

/** `fetch_blazar_pools`: the host's aggregates in a blazar zone, and those named like the pool or the preemptible aggregate (an aggregate may appear twice). */
export function blazarPools(aggregates: FilterAggregate[], options: BlazarFilterOptions = BLAZAR_FILTER_DEFAULTS): FilterAggregate[] {
  const pools: FilterAggregate[] = [];
  for (const aggregate of aggregates) {
    const zone = aggregate.availability_zone ?? '';
    if (zone.startsWith(options.blazar_az_prefix) || zone.startsWith('blazar:')) pools.push(aggregate);
    if ([options.aggregate_freepool_name, options.preemptible_aggregate].includes(aggregate.name)) pools.push(aggregate);
  }
  return pools;
}

/** `host_reservation_request`: the first of the host's pools named in the hint decides, by the project's key or `blazar:owner`. */
function reservationRequestPasses(aggregates: FilterAggregate[], request: FilterRequest, requestedPools: string[], options: BlazarFilterOptions): boolean {
  const pool = blazarPools(aggregates, options).find((p) => requestedPools.includes(p.name));
  if (!pool) return false;
  if (pool.metadata[request.projectId]) return true; // a non-empty value is truthy in Python
  return pool.metadata[options.blazar_owner] === request.projectId;
}

/** `BlazarFilter.host_passes`: whether a host, member of `aggregates`, may take the request. */
export function blazarHostPasses(aggregates: FilterAggregate[], request: FilterRequest, options: BlazarFilterOptions = BLAZAR_FILTER_DEFAULTS): boolean {
  const hint = schedulerHint(request, 'reservation');
  const requestedPools = typeof hint === 'string' ? [hint] : hint;
  // Python's truthiness: an empty list is no hint (an empty string is, once wrapped in a list).
  if (requestedPools && requestedPools.length > 0) {
    return reservationRequestPasses(aggregates, request, requestedPools, options);
  }
  const extraSpecs = request.flavorExtraSpecs ?? {};
  if (INSTANCE_RESERVATION_SPEC in extraSpecs) return true;
  const pools = blazarPools(aggregates, options);
  if (options.allow_preemptibles && boolFromString(extraSpecs[PREEMPTIBLE_SPEC])) {
    return pools.length === 1 && pools[0].name === options.preemptible_aggregate;
  }
  return pools.length === 0;
}
