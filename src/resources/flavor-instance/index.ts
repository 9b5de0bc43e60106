/**
 * `flavor:instance` (newer Blazar's flavor-based reservation): `amount` slots of an existing
 * flavor's footprint (./footprint.ts: PCPU for dedicated CPUs, `resources:*` overrides, required
 * and forbidden traits). Its life is `virtual:instance`'s (the slot calendar, the reservation
 * flavor derived from the source flavor with its extra specs, aggregate, nested inventory), with
 * affinity and updates supported (Blazar refuses both for this type).
 *
 * blazarclient's 3.5 CLI does not know the type (its `--reservation` parser has no key for
 * `flavor_id`); its Python library sends it unchanged: `client.lease.create(name, start, end,
 * reservations=[{"resource_type": "flavor:instance", "flavor_id": …, "amount": 2}], events=[])`.
 */
import { invalidLease } from '../../domain/lease';
import type { ResourcePlugin, ResourceType } from '../../domain/resource-plugin';
import { flavorVisibleTo } from '../shared/visibility';
import { slotReservationPlugin, slotReservationType, type SlotType, type VirtualInstanceDeps } from '../virtual-instance';
import { flavorFootprint, UnsupportedFlavorError } from './footprint';
import { flavorInstanceParams, type FlavorInstanceParams } from './params';

export const FLAVOR_INSTANCE = 'flavor:instance';

export const flavorInstance: SlotType<FlavorInstanceParams> = {
  resourceType: FLAVOR_INSTANCE,
  paramsSchema: flavorInstanceParams,
  async describe(reservation, projectId, nova) {
    const { params } = reservation;
    if (!nova) throw invalidLease('flavor:instance reservations need Nova to read the flavor: this deployment has no OpenStack settings');
    // Read as the service, checked as the lessee would see it: public, or shared with the project.
    const flavor = await flavorVisibleTo(nova.admin, params.flavor_id, projectId);
    if (!flavor) throw invalidLease(`Flavor ${params.flavor_id} could not be found (or the project may not use it).`);
    const specs = flavor.extra_specs ?? (await nova.admin.getFlavorExtraSpecs(flavor.id));
    let footprint;
    try {
      footprint = flavorFootprint({ ...flavor, extra_specs: specs });
    } catch (err) {
      if (err instanceof UnsupportedFlavorError) throw invalidLease(`flavor ${params.flavor_id}: ${err.message}`);
      throw err;
    }
    return {
      spec: {
        slot: footprint.amounts,
        amount: params.amount,
        affinity: params.affinity,
        resourceProperties: params.resource_properties,
        requiredTraits: footprint.requiredTraits,
        forbiddenTraits: footprint.forbiddenTraits,
      },
      flavor: {
        vcpus: flavor.vcpus,
        ram: flavor.ram,
        disk: flavor.disk,
        ephemeral: flavor['OS-FLV-EXT-DATA:ephemeral'] ?? 0,
        swap: typeof flavor.swap === 'number' ? flavor.swap : 0,
        extraSpecs: specs,
      },
      // `flavor_id` in the lease JSON is the reservation's flavor, as Blazar shows it: the one asked for is kept beside it.
      shown: { source_flavor_id: params.flavor_id },
    };
  },
};

export const flavorInstanceType = (deps: VirtualInstanceDeps): ResourceType<FlavorInstanceParams> => slotReservationType(flavorInstance, deps);
export const flavorInstancePlugin = (deps: VirtualInstanceDeps): ResourcePlugin<FlavorInstanceParams> => slotReservationPlugin(flavorInstance, deps);
