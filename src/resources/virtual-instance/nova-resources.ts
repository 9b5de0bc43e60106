/**
 * What an instance reservation is in Nova and Placement, laid out as Blazar lays it (so that its
 * users' scripts and a deployment's Nova settings work unchanged):
 * - a private flavor `reservation:<id>` whose id is the reservation id, with the extra specs
 *   `aggregate_instance_extra_specs:reservation=<id>` (AggregateInstanceExtraSpecsFilter sends it
 *   to the reservation's hosts only) and `resources:CUSTOM_RESERVATION_<ID>=1` (each server takes
 *   one slot in Placement), `affinity_id` naming the server group when there is one;
 * - an aggregate named after the reservation, metadata `reservation=<id>` and
 *   `filter_tenant_id=<project>`; the hosts join it at the start and stay in their other aggregates;
 * - the resource class `CUSTOM_RESERVATION_<ID>`, whose inventory on each host is its slot count,
 *   on a provider `blazar_<hypervisor>` nested under the compute node (Blazar's choice, kept: the
 *   compute node's own inventories stay Nova's to write, and Blazar's tools find the slots where
 *   they look); made with the first slots on the host and kept, empty, after the last (a compute
 *   that cached it fails its builds for minutes once it is gone: see writeSlotInventory);
 * - with `affinity` set, a server group `reservation:<id>` (affinity or anti-affinity) in the
 *   lessee's project;
 * - beyond Blazar (whose BlazarFilter keeps ordinary servers off pool hosts), slot hosts take only
 *   servers of a reservation flavor with Nova's own isolated aggregates: see SLOT_HOST_TRAIT.
 * Every step is idempotent: a retried activity finds what an earlier try made.
 */
import { ConflictError, NotFoundError, type Aggregate, type NovaClient, type PlacementClient, type ServerGroup } from '../../openstack';
import type { ReportProgress } from '../../domain/resource-plugin';
import { addHost, ensureAggregate, findAggregate, removeHost, withMetadata } from '../shared/aggregates';
import type { Affinity } from '../../domain/instance-slots';

export const reservationFlavorName = (reservationId: string) => `reservation:${reservationId}`;
/** Placement takes upper case, digits and `_` only. */
export const reservationResourceClass = (reservationId: string) => `CUSTOM_RESERVATION_${reservationId.toUpperCase().replace(/-/g, '_')}`;
export const reservationProviderName = (hypervisorHostname: string) => `blazar_${hypervisorHostname}`;
export const FLAVOR_AGGREGATE_SPEC = 'aggregate_instance_extra_specs:reservation';

/**
 * The trait of hosts carrying slots, on their `blazar_<hypervisor>` provider while it has slots.
 * Every reservation flavor and every reservation aggregate require it (`trait:<it>=required`), so
 * Nova's isolated-aggregate pre-filter (`[scheduler] enable_isolated_aggregate_filtering`) keeps
 * every server of another flavor off a host while it is in a reservation's aggregate, the
 * lessee's included (its `filter_tenant_id` lets the lessee's project in). One trait for all
 * reservations, not one each: that pre-filter forbids a host when any of its aggregates requires a
 * trait the request lacks, so a host with slots of two reservations would take neither flavor.
 * Which slots a server takes stays its flavor's resource class. On the slot provider, not the
 * compute node: Placement looks for an unsuffixed group's traits on the providers the server
 * draws from, so an ordinary flavor with an image asking for the trait still finds no host.
 */
export const SLOT_HOST_TRAIT = 'CUSTOM_RESERVATION_SLOTS';
export const SLOT_TRAIT_SPEC = `trait:${SLOT_HOST_TRAIT}`;

export interface InstanceCloud {
  nova: NovaClient;
  placement: PlacementClient;
}

/** The reservation flavor's shape: its sizes and the extra specs it carries besides the reservation's own. */
export interface FlavorShape {
  vcpus: number;
  ram: number;
  disk: number;
  ephemeral: number;
  swap: number;
  extraSpecs: Record<string, string>;
}

export interface InstanceSpec {
  reservationId: string;
  projectId: string;
  affinity: Affinity;
  flavor: FlavorShape;
}

export interface ReservationResources {
  flavor_id: string;
  aggregate_id: number;
  server_group_id: string | null;
}

/** One host's slots: where it is in Nova (compute host) and Placement (compute node provider). */
export interface HostSlots {
  computeHost: string;
  hypervisorHostname: string;
  computeNodeUuid: string;
  slots: number;
}

const ignore = async (call: Promise<unknown>, ...errors: Array<new (...args: never[]) => Error>) => {
  try {
    await call;
  } catch (err) {
    if (!errors.some((type) => err instanceof type)) throw err;
  }
};

/**
 * Made at admission (the user sees the flavor at once): the server group, the flavor and its extra
 * specs, the aggregate, the resource class. A pending reservation whose size changed gets its flavor
 * made again (no server can use it before the start: nobody has access yet).
 */
export async function ensureReservationResources(cloud: InstanceCloud, lessee: NovaClient, spec: InstanceSpec): Promise<ReservationResources> {
  const { nova, placement } = cloud;
  const resourceClass = reservationResourceClass(spec.reservationId);
  await placement.createResourceClass(resourceClass);
  await placement.createTrait(SLOT_HOST_TRAIT);
  const group = spec.affinity === null ? undefined : await ensureServerGroup(nova, lessee, spec);
  await ensureFlavor(nova, spec, {
    ...spec.flavor.extraSpecs,
    [FLAVOR_AGGREGATE_SPEC]: spec.reservationId,
    [`resources:${resourceClass}`]: '1',
    [SLOT_TRAIT_SPEC]: 'required',
    ...(group ? { affinity_id: group.id } : {}),
  });
  const aggregate = await ensureAggregate(nova, spec.reservationId, {
    reservation: spec.reservationId,
    filter_tenant_id: spec.projectId,
    [SLOT_TRAIT_SPEC]: 'required',
    ...(group ? { affinity_id: group.id } : {}),
  });
  return { flavor_id: spec.reservationId, aggregate_id: aggregate.id, server_group_id: group?.id ?? null };
}

async function ensureServerGroup(admin: NovaClient, lessee: NovaClient, spec: InstanceSpec): Promise<ServerGroup> {
  const name = reservationFlavorName(spec.reservationId);
  const policy = spec.affinity ? 'affinity' : 'anti-affinity';
  const existing = (await admin.listServerGroups({ all_projects: true })).find((g) => g.name === name);
  if (existing && existing.policy === policy) return existing;
  if (existing) await ignore(admin.deleteServerGroup(existing.id), NotFoundError);
  return lessee.createServerGroup({ name, policy });
}

async function ensureFlavor(nova: NovaClient, spec: InstanceSpec, extraSpecs: Record<string, string>): Promise<void> {
  const { reservationId, flavor: shape } = spec;
  let flavor = await nova.getFlavor(reservationId).catch((err: unknown) => {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  });
  const ephemeralOf = (f: NonNullable<typeof flavor>) => f['OS-FLV-EXT-DATA:ephemeral'] ?? 0;
  const swapOf = (f: NonNullable<typeof flavor>) => (typeof f.swap === 'number' ? f.swap : 0);
  if (flavor && (flavor.vcpus !== shape.vcpus || flavor.ram !== shape.ram || flavor.disk !== shape.disk || ephemeralOf(flavor) !== shape.ephemeral || swapOf(flavor) !== shape.swap)) {
    await ignore(nova.deleteFlavor(reservationId), NotFoundError);
    flavor = undefined;
  }
  if (!flavor) {
    try {
      await nova.createFlavor({
        id: reservationId,
        name: reservationFlavorName(reservationId),
        vcpus: shape.vcpus,
        ram: shape.ram,
        disk: shape.disk,
        ephemeral: shape.ephemeral,
        swap: shape.swap,
        is_public: false,
      });
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err; // an earlier try made it
    }
  }
  const current = await nova.getFlavorExtraSpecs(reservationId);
  if (Object.entries(extraSpecs).some(([key, value]) => current[key] !== value)) await nova.setFlavorExtraSpecs(reservationId, extraSpecs);
  for (const key of Object.keys(current)) if (!(key in extraSpecs)) await ignore(nova.deleteFlavorExtraSpec(reservationId, key), NotFoundError);
}

/**
 * At start (and after an active reservation changed), once ensureReservationResources has made
 * what admission makes: the lessee may use the flavor; each host of the placement is in the
 * aggregate with its slot count as inventory; hosts it no longer has are out of both.
 */
export async function openSlots(cloud: InstanceCloud, spec: Pick<InstanceSpec, 'reservationId' | 'projectId'>, hosts: HostSlots[], formerHosts: HostSlots[], progress: ReportProgress): Promise<void> {
  const { nova, placement } = cloud;
  await ignore(nova.addFlavorAccess(spec.reservationId, spec.projectId), ConflictError);
  let aggregate = await requireSlotTrait(cloud, spec.reservationId, await aggregateOf(nova, spec.reservationId));
  for (const host of hosts) {
    await addHost(nova, aggregate, host.computeHost);
    await setSlotInventory(placement, host, reservationResourceClass(spec.reservationId), host.slots);
    progress({ host: host.computeHost });
  }
  const kept = new Set(hosts.map((h) => h.computeHost));
  aggregate = await aggregateOf(nova, spec.reservationId);
  const resourceClass = reservationResourceClass(spec.reservationId);
  for (const host of formerHosts.filter((h) => !kept.has(h.computeHost))) {
    // Servers of the flavor still there (on a failed host) keep their slots, so the class cannot go: no room beyond them.
    // A host already down to none (no inventory, so no server holds any) has nothing to write: only the aggregate is
    // made sure of, which a heal cut short after the write may have left it in.
    const slots = await slotsOnHost(placement, host, resourceClass);
    if (slots.total > 0) await setSlotInventory(placement, host, resourceClass, await slots.inUse());
    await removeHost(nova, aggregate, host.computeHost);
  }
}

/**
 * The flavor and the aggregate require the slot hosts' trait (made at admission; a reservation
 * made before they did gets it here, at its next heal or drift repair), flavor first so the
 * aggregate never shuts out its own flavor.
 */
async function requireSlotTrait(cloud: InstanceCloud, reservationId: string, aggregate: Aggregate): Promise<Aggregate> {
  await cloud.placement.createTrait(SLOT_HOST_TRAIT);
  const specs = await cloud.nova.getFlavorExtraSpecs(reservationId).catch((err: unknown) => {
    if (err instanceof NotFoundError) return undefined; // an operator deleted it: nothing can boot with it anyway
    throw err;
  });
  if (specs && specs[SLOT_TRAIT_SPEC] !== 'required') await cloud.nova.setFlavorExtraSpecs(reservationId, { [SLOT_TRAIT_SPEC]: 'required' });
  return withMetadata(cloud.nova, aggregate, { [SLOT_TRAIT_SPEC]: 'required' });
}

/**
 * The reservation's slots on the host's slot provider, from one lookup of it: `total` as inventory,
 * `inUse()` held by servers and `hasTrait()` (the slot hosts' trait), read when asked. A host with
 * no slot provider has 0 of both and no trait.
 */
async function slotsOnHost(
  placement: PlacementClient,
  host: HostSlots,
  resourceClass: string,
): Promise<{ total: number; inUse: () => Promise<number>; hasTrait: () => Promise<boolean> }> {
  const provider = (await placement.listResourceProviders({ name: reservationProviderName(host.hypervisorHostname) }))[0];
  if (!provider) return { total: 0, inUse: () => Promise.resolve(0), hasTrait: () => Promise.resolve(false) };
  const total = (await placement.getInventories(provider.uuid)).inventories[resourceClass]?.total ?? 0;
  return {
    total,
    inUse: async () => (await placement.getProviderUsages(provider.uuid)).usages[resourceClass] ?? 0,
    hasTrait: async () => (await placement.getProviderTraits(provider.uuid)).traits.includes(SLOT_HOST_TRAIT),
  };
}

/**
 * How Nova and Placement differ from an active reservation's booking (what openSlots would put
 * right): each booked host in the aggregate with its slots as inventory, each host it left out of
 * the aggregate with no more inventory than its servers hold. Undefined: they agree.
 */
export async function slotDrift(cloud: InstanceCloud, reservationId: string, hosts: HostSlots[], formerHosts: HostSlots[]): Promise<string | undefined> {
  const resourceClass = reservationResourceClass(reservationId);
  const aggregate = await findAggregate(cloud.nova, reservationId);
  if (!aggregate) return 'its aggregate is gone';
  const found: string[] = [];
  if (aggregate.metadata?.[SLOT_TRAIT_SPEC] !== 'required') found.push(`its aggregate does not require ${SLOT_HOST_TRAIT} (other flavors may land on its hosts)`);
  for (const host of hosts) {
    const slots = await slotsOnHost(cloud.placement, host, resourceClass);
    const { total } = slots;
    if (total !== host.slots) found.push(`${host.hypervisorHostname} has ${total} slot(s) in Placement, ${host.slots} booked`);
    if (total > 0 && !(await slots.hasTrait())) found.push(`${host.hypervisorHostname} lacks the trait ${SLOT_HOST_TRAIT}`);
    if (!aggregate.hosts.includes(host.computeHost)) found.push(`${host.hypervisorHostname} is out of its aggregate`);
  }
  const kept = new Set(hosts.map((h) => h.computeHost));
  for (const host of formerHosts.filter((h) => !kept.has(h.computeHost))) {
    const slots = await slotsOnHost(cloud.placement, host, resourceClass);
    // No inventory left: none beyond what servers hold (they hold none), so no usages to read.
    const [total, inUse] = [slots.total, slots.total > 0 ? await slots.inUse() : 0];
    if (total > inUse) found.push(`${host.hypervisorHostname} has ${total} slot(s) in Placement after it left (servers hold ${inUse})`);
    if (aggregate.hosts.includes(host.computeHost)) found.push(`${host.hypervisorHostname} is still in its aggregate after it left`);
  }
  return found.length > 0 ? found.join('; ') : undefined;
}

/** Tries of a lend's guarded inventory write when a server is scheduled on the host meanwhile (Placement's generation moved). */
const LEND_WRITE_TRIES = 3;

/**
 * Lending slots (issue 43): the reservation's inventory on the host, which should be `expected`
 * (its booked slots less those it lends already), is written as `expected` less up to `wanted`
 * slots its servers do not use. Placement itself only warns when a total goes below its usage, so
 * the usage is read after the inventory and the write names the generation read with the
 * inventory, which every allocation on the provider moves: a server scheduled meanwhile fails the
 * write (409) and it is all read again. Absolute, so a retried lend writes the same total.
 * Answers the idle slots (`expected` less the servers' use) and how many were taken out.
 */
export async function lendSlotsOnHost(placement: PlacementClient, host: HostSlots & { expected: number }, reservationId: string, wanted: number): Promise<{ idle: number; lent: number }> {
  const resourceClass = reservationResourceClass(reservationId);
  const provider = (await placement.listResourceProviders({ name: reservationProviderName(host.hypervisorHostname) }))[0];
  if (!provider) return { idle: 0, lent: 0 }; // no slots were ever written there: none to lend
  for (let attempt = 1; ; attempt++) {
    const current = await placement.getInventories(provider.uuid);
    const inUse = (await placement.getProviderUsages(provider.uuid)).usages[resourceClass] ?? 0;
    const idle = Math.max(0, host.expected - inUse);
    const lent = Math.min(wanted, idle);
    const mine = current.inventories[resourceClass];
    if (lent === 0) return { idle, lent: 0 };
    // The class gone and every slot lent (a retry after it wrote so): no server can land there, nothing to write.
    // Otherwise the write is made even when the total is right already: its generation confirms the usage read.
    if (!mine) return { idle, lent: host.expected - lent === 0 ? lent : 0 };
    try {
      // Every slot lent: the class goes (Placement takes no total of 0), as openSlots writes none; the provider and its trait stay.
      const total = host.expected - lent;
      const others = Object.fromEntries(Object.entries(current.inventories).filter(([rc]) => rc !== resourceClass));
      await placement.putInventories(provider.uuid, current.resource_provider_generation, total > 0 ? { ...others, [resourceClass]: { ...mine, total } } : others);
      return { idle, lent };
    } catch (err) {
      if (!(err instanceof ConflictError) || attempt >= LEND_WRITE_TRIES) throw err;
    }
  }
}

/** The reservation's inventory on the host set to `host.slots` (a lend put back, lent slots returned): the write openSlots makes. */
export async function setReservationSlots(placement: PlacementClient, host: HostSlots, reservationId: string): Promise<void> {
  await setSlotInventory(placement, host, reservationResourceClass(reservationId), host.slots);
}

async function aggregateOf(nova: NovaClient, reservationId: string): Promise<Aggregate> {
  const aggregate = await findAggregate(nova, reservationId);
  if (!aggregate) throw new Error(`the aggregate of reservation ${reservationId} is gone (made at admission)`);
  return aggregate;
}

/**
 * The reservation's inventory on the host's `blazar_<hypervisor>` provider (made under the compute
 * node if missing): `slots` of the class, or none (0). Placement's generation guards the write; a
 * concurrent writer makes it fail with 409, and the activity's retry reads again.
 */
async function setSlotInventory(placement: PlacementClient, host: HostSlots, resourceClass: string, slots: number, attempt = 1): Promise<void> {
  try {
    await writeSlotInventory(placement, host, resourceClass, slots);
  } catch (err) {
    // The provider was deleted (by an operator) between our read and write: again, from the top.
    if (!(err instanceof NotFoundError) || attempt >= 3) throw err;
    await setSlotInventory(placement, host, resourceClass, slots, attempt + 1);
  }
}

async function writeSlotInventory(placement: PlacementClient, host: HostSlots, resourceClass: string, slots: number): Promise<void> {
  const name = reservationProviderName(host.hypervisorHostname);
  let provider = (await placement.listResourceProviders({ name }))[0];
  if (!provider) {
    if (slots === 0) return;
    try {
      provider = await placement.createResourceProvider({ name, parent_provider_uuid: host.computeNodeUuid });
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
      provider = (await placement.listResourceProviders({ name }))[0];
      if (!provider) throw err;
    }
  }
  const current = await placement.getInventories(provider.uuid);
  const { [resourceClass]: mine, ...others } = current.inventories;
  const inventories = slots === 0 ? others : { ...others, [resourceClass]: { total: slots, reserved: 0, min_unit: 1, max_unit: 1, step_size: 1, allocation_ratio: 1 } };
  const carriesSlots = Object.keys(inventories).length > 0;
  // The trait comes before the first slots and goes after the last, each write naming the
  // generation the one before left: a concurrent writer makes one of them fail (409), and the
  // retry reads again, so the trait never goes while another reservation's slots are there.
  let generation = current.resource_provider_generation;
  if (carriesSlots) generation = await setSlotTrait(placement, provider.uuid, generation, true);
  // The provider stays when its last slots go. Nova's compute caches its host's provider tree with
  // the children, and its report client does not drop a cached child that is gone: it fails on the
  // 404 in every resource update, builds' claims included (RescheduledException: "Exhausted all
  // hosts"), until its cache is refreshed minutes later. Blazar keeps these providers too.
  if (slots === 0 ? mine !== undefined : mine?.total !== slots) {
    generation = (await placement.putInventories(provider.uuid, generation, inventories)).resource_provider_generation;
  }
  if (!carriesSlots) await setSlotTrait(placement, provider.uuid, generation, false);
}

/** The slot hosts' trait on (or off) the slot provider, at `generation` (read with its inventories); the generation after. */
async function setSlotTrait(placement: PlacementClient, providerUuid: string, generation: number, present: boolean): Promise<number> {
  const { traits } = await placement.getProviderTraits(providerUuid);
  if (traits.includes(SLOT_HOST_TRAIT) === present) return generation;
  const others = traits.filter((t) => t !== SLOT_HOST_TRAIT);
  return (await placement.putProviderTraits(providerUuid, generation, present ? [...others, SLOT_HOST_TRAIT] : others)).resource_provider_generation;
}

/** The servers using the reservation's flavor, in every project (not deleted yet). */
export async function serversOfFlavor(nova: NovaClient, reservationId: string) {
  return nova.listServers({ all_tenants: true, flavor: reservationId });
}

/**
 * At the end: the lessee loses the flavor, and every server of the flavor is deleted. Returns how
 * many are still there (the end looks again later until none is left).
 */
export async function closeSlots(nova: NovaClient, spec: Pick<InstanceSpec, 'reservationId' | 'projectId'>): Promise<number> {
  await ignore(nova.removeFlavorAccess(spec.reservationId, spec.projectId), NotFoundError, ConflictError);
  const servers = await serversOfFlavor(nova, spec.reservationId).catch((err: unknown) => {
    if (err instanceof NotFoundError) return []; // the flavor is gone: so are its servers
    throw err;
  });
  for (const server of servers) {
    if (server['OS-EXT-STS:task_state'] !== 'deleting') await ignore(nova.deleteServer(server.id), NotFoundError);
  }
  return servers.length;
}

/**
 * Once no server uses the slots: inventories, aggregate, server group, flavor and resource class go.
 * False, with the rest left for a later call, while Placement still counts allocations on the slots
 * (its 409 `placement.inventory.inuse`).
 */
export async function removeReservationResources(cloud: InstanceCloud, spec: Pick<InstanceSpec, 'reservationId'>, hosts: HostSlots[]): Promise<boolean> {
  const { nova, placement } = cloud;
  const resourceClass = reservationResourceClass(spec.reservationId);
  for (const host of hosts) {
    try {
      await setSlotInventory(placement, host, resourceClass, 0);
    } catch (err) {
      if (err instanceof ConflictError && err.code === 'placement.inventory.inuse') return false;
      throw err;
    }
  }
  const aggregate = await findAggregate(nova, spec.reservationId);
  if (aggregate) {
    for (const host of aggregate.hosts) await removeHost(nova, aggregate, host);
    await ignore(nova.deleteAggregate(aggregate.id), NotFoundError);
  }
  const group = (await nova.listServerGroups({ all_projects: true })).find((g) => g.name === reservationFlavorName(spec.reservationId));
  if (group) await ignore(nova.deleteServerGroup(group.id), NotFoundError);
  await ignore(nova.deleteFlavor(spec.reservationId), NotFoundError);
  await ignore(placement.deleteResourceClass(resourceClass), NotFoundError);
  return true;
}
