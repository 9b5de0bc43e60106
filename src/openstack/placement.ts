/**
 * Placement: resource providers, inventories, traits, provider aggregates, allocation candidates,
 * allocations and usages. Requests carry `OpenStack-API-Version: placement <microversion>`
 * (default 1.39: consumer generations ≥ 1.28, `consumer_type` required on allocation writes ≥ 1.38).
 *
 * Generations: every write to a provider (inventories, traits, aggregates) and to a consumer's
 * allocations names the generation it read; a stale one fails with ConflictError whose code is
 * `placement.concurrent_update` (retryable: read again, write again).
 */
import { type CallOptions, type QueryParams, ServiceHttp, type Session, seg } from './http';

export const DEFAULT_PLACEMENT_MICROVERSION = '1.39';

/** Resource class → amount, e.g. `{ VCPU: 1, MEMORY_MB: 512 }`. */
export type Resources = Record<string, number>;

export interface ResourceProvider {
  uuid: string;
  name: string;
  generation: number;
  parent_provider_uuid: string | null;
  root_provider_uuid: string;
  links?: Array<{ href: string; rel: string }>;
}

export interface ListResourceProvidersFilters {
  name?: string;
  uuid?: string;
  /** Providers in the tree of this provider. */
  in_tree?: string;
  /** Aggregate UUID(s): one string (`in:a,b` allowed) or several (each must match). */
  member_of?: string | string[];
  /** Providers with capacity for these resources. */
  resources?: Resources;
  /** Traits the provider must have (`!TRAIT` forbids one). */
  required?: string[];
}

export interface Inventory {
  total: number;
  reserved?: number;
  min_unit?: number;
  max_unit?: number;
  step_size?: number;
  allocation_ratio?: number;
}

export interface Inventories {
  resource_provider_generation: number;
  inventories: Record<string, Required<Inventory>>;
}

export interface ProviderTraits {
  resource_provider_generation: number;
  traits: string[];
}

export interface ProviderAggregates {
  resource_provider_generation: number;
  aggregates: string[];
}

/** What a consumer holds: provider UUID → resources. */
export type AllocationsByProvider = Record<string, { resources: Resources }>;

export interface ConsumerAllocations {
  /** Empty when the consumer holds nothing (or does not exist). */
  allocations: Record<string, { generation: number; resources: Resources }>;
  /** Absent when the consumer does not exist. */
  consumer_generation?: number;
  project_id?: string;
  user_id?: string;
  consumer_type?: string;
}

export interface PutAllocationsRequest {
  allocations: AllocationsByProvider;
  project_id: string;
  user_id: string;
  /** `null` for a new consumer; otherwise the generation read last. */
  consumer_generation: number | null;
  /** Required from 1.38, e.g. `INSTANCE`, `MIGRATION` or our own (`LEASE`). */
  consumer_type: string;
}

export interface AllocationCandidatesGroup {
  resources: Resources;
  required?: string[];
  member_of?: string | string[];
  in_tree?: string;
}

export interface AllocationCandidatesQuery extends Partial<AllocationCandidatesGroup> {
  /** Granular request groups by suffix, e.g. `{ '1': { resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 } } }`. */
  groups?: Record<string, AllocationCandidatesGroup>;
  group_policy?: 'none' | 'isolate';
  limit?: number;
  /** 1.36+: request groups (suffixes, `_`-prefixed) that must come from the same subtree. */
  same_subtree?: string[];
  root_required?: string[];
}

export interface AllocationCandidates {
  allocation_requests: Array<{
    allocations: AllocationsByProvider;
    /** Request group suffix → provider UUIDs that satisfy it (1.34+). */
    mappings?: Record<string, string[]>;
  }>;
  provider_summaries: Record<
    string,
    {
      resources: Record<string, { capacity: number; used: number }>;
      traits?: string[];
      parent_provider_uuid?: string | null;
      root_provider_uuid?: string;
    }
  >;
}

export interface PlacementClientOptions {
  microversion?: string;
}

function resourcesParam(resources: Resources | undefined): string | undefined {
  if (resources === undefined) return undefined;
  return Object.entries(resources)
    .map(([rc, amount]) => `${rc}:${amount}`)
    .join(',');
}

function listParam(values: string[] | undefined): string | undefined {
  return values === undefined || values.length === 0 ? undefined : values.join(',');
}

function groupQuery(group: Partial<AllocationCandidatesGroup>, suffix: string): Record<string, string | string[] | undefined> {
  return {
    [`resources${suffix}`]: resourcesParam(group.resources),
    [`required${suffix}`]: listParam(group.required),
    [`member_of${suffix}`]: group.member_of,
    [`in_tree${suffix}`]: group.in_tree,
  };
}

export class PlacementClient {
  readonly http: ServiceHttp;

  constructor(session: Session, options: PlacementClientOptions = {}) {
    this.http = new ServiceHttp('placement', session, {
      microversion: options.microversion ?? DEFAULT_PLACEMENT_MICROVERSION,
      microversionName: 'placement',
    });
  }

  // --- resource providers ------------------------------------------------------------------------

  async listResourceProviders(filters: ListResourceProvidersFilters = {}, options: CallOptions = {}): Promise<ResourceProvider[]> {
    const query: QueryParams = {
      name: filters.name,
      uuid: filters.uuid,
      in_tree: filters.in_tree,
      member_of: filters.member_of,
      resources: resourcesParam(filters.resources),
      required: listParam(filters.required),
    };
    return (await this.http.get<{ resource_providers: ResourceProvider[] }>('/resource_providers', query, options)).resource_providers;
  }

  async getResourceProvider(uuid: string, options: CallOptions = {}): Promise<ResourceProvider> {
    return this.http.get<ResourceProvider>(`/resource_providers/${seg(uuid)}`, undefined, options);
  }

  /** Creates a provider (1.20+ returns it). */
  async createResourceProvider(request: { name: string; uuid?: string; parent_provider_uuid?: string }, options: CallOptions = {}): Promise<ResourceProvider> {
    return this.http.post<ResourceProvider>('/resource_providers', request, options);
  }

  async deleteResourceProvider(uuid: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/resource_providers/${seg(uuid)}`, options);
  }

  // --- inventories ----------------------------------------------------------------------------------

  async getInventories(uuid: string, options: CallOptions = {}): Promise<Inventories> {
    return this.http.get<Inventories>(`/resource_providers/${seg(uuid)}/inventories`, undefined, options);
  }

  /** Replaces all inventories of the provider; `generation` is the provider generation read last. */
  async putInventories(uuid: string, generation: number, inventories: Record<string, Inventory>, options: CallOptions = {}): Promise<Inventories> {
    return this.http.put<Inventories>(
      `/resource_providers/${seg(uuid)}/inventories`,
      { resource_provider_generation: generation, inventories },
      options,
    );
  }

  // --- traits -----------------------------------------------------------------------------------------

  /** All traits, optionally filtered: `name: 'startswith:CUSTOM_'` or `'in:A,B'`. */
  async listTraits(filters: { name?: string; associated?: boolean } = {}, options: CallOptions = {}): Promise<string[]> {
    return (await this.http.get<{ traits: string[] }>('/traits', filters, options)).traits;
  }

  /** Creates a custom trait (`CUSTOM_…`); succeeds when it exists already. */
  async createTrait(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.request<unknown>({ method: 'PUT', path: `/traits/${seg(name)}`, ...options });
  }

  async deleteTrait(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/traits/${seg(name)}`, options);
  }

  // --- resource classes -----------------------------------------------------------------------------

  /** Creates a custom resource class (`CUSTOM_…`); succeeds when it exists already (1.7+). */
  async createResourceClass(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.request<unknown>({ method: 'PUT', path: `/resource_classes/${seg(name)}`, ...options });
  }

  /** Deletes a custom resource class; Placement refuses (409) while an inventory has it. */
  async deleteResourceClass(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/resource_classes/${seg(name)}`, options);
  }

  async getProviderTraits(uuid: string, options: CallOptions = {}): Promise<ProviderTraits> {
    return this.http.get<ProviderTraits>(`/resource_providers/${seg(uuid)}/traits`, undefined, options);
  }

  /** Replaces the provider's traits (pass the ones to keep too). */
  async putProviderTraits(uuid: string, generation: number, traits: string[], options: CallOptions = {}): Promise<ProviderTraits> {
    return this.http.put<ProviderTraits>(`/resource_providers/${seg(uuid)}/traits`, { resource_provider_generation: generation, traits }, options);
  }

  // --- provider aggregates -------------------------------------------------------------------------

  async getProviderAggregates(uuid: string, options: CallOptions = {}): Promise<ProviderAggregates> {
    return this.http.get<ProviderAggregates>(`/resource_providers/${seg(uuid)}/aggregates`, undefined, options);
  }

  /** Replaces the provider's aggregates (UUIDs). */
  async putProviderAggregates(uuid: string, generation: number, aggregates: string[], options: CallOptions = {}): Promise<ProviderAggregates> {
    return this.http.put<ProviderAggregates>(
      `/resource_providers/${seg(uuid)}/aggregates`,
      { resource_provider_generation: generation, aggregates },
      options,
    );
  }

  // --- allocation candidates ------------------------------------------------------------------------

  async getAllocationCandidates(request: AllocationCandidatesQuery, options: CallOptions = {}): Promise<AllocationCandidates> {
    const query: Record<string, string | string[] | number | undefined> = {
      ...groupQuery(request, ''),
      group_policy: request.group_policy,
      limit: request.limit,
      same_subtree: request.same_subtree === undefined ? undefined : listParam(request.same_subtree),
      root_required: listParam(request.root_required),
    };
    for (const [suffix, group] of Object.entries(request.groups ?? {})) Object.assign(query, groupQuery(group, suffix));
    return this.http.get<AllocationCandidates>('/allocation_candidates', query, options);
  }

  // --- allocations --------------------------------------------------------------------------------------

  async getAllocations(consumerUuid: string, options: CallOptions = {}): Promise<ConsumerAllocations> {
    return this.http.get<ConsumerAllocations>(`/allocations/${seg(consumerUuid)}`, undefined, options);
  }

  /** Replaces the consumer's allocations (all providers at once). */
  async putAllocations(consumerUuid: string, request: PutAllocationsRequest, options: CallOptions = {}): Promise<void> {
    await this.http.request<unknown>({ method: 'PUT', path: `/allocations/${seg(consumerUuid)}`, body: request, ...options });
  }

  /** Removes all of the consumer's allocations (404 when it has none). */
  async deleteAllocations(consumerUuid: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/allocations/${seg(consumerUuid)}`, options);
  }

  // --- usages ------------------------------------------------------------------------------------------

  async getProviderUsages(uuid: string, options: CallOptions = {}): Promise<{ resource_provider_generation: number; usages: Resources }> {
    return this.http.get<{ resource_provider_generation: number; usages: Resources }>(`/resource_providers/${seg(uuid)}/usages`, undefined, options);
  }

  /**
   * A project's (and optionally a user's) usages. From 1.38 the answer is grouped by consumer type:
   * `{ INSTANCE: { consumer_count, VCPU, … }, all: { … } }`.
   */
  async getProjectUsages(
    filters: { project_id: string; user_id?: string; consumer_type?: string },
    options: CallOptions = {},
  ): Promise<Record<string, Record<string, number>>> {
    return (await this.http.get<{ usages: Record<string, Record<string, number>> }>('/usages', filters, options)).usages;
  }
}
