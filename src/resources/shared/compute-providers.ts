/**
 * The compute hosts' capacities as the quantity calendar keeps them (kind `compute`): read from Nova
 * (hosts up and enabled) and Placement (inventories, allocation ratios and reserved amounts applied;
 * traits). Server reservations book them off the enrolled hosts, instance slots on the enrolled ones.
 */
import type { NovaClient, PlacementClient } from '../../openstack';
import { placementCapacity, type CapacityProvider } from './quantity-bookings';

export const COMPUTE_KIND = 'compute';

/** A compute host's usable capacity in every class it has (VCPU, PCPU, MEMORY_MB, DISK_GB, custom ones a flavor may ask for). */
export const capacityOf = (inventories: Parameters<typeof placementCapacity>[0]) => placementCapacity(inventories, Object.keys(inventories));

/** The compute hosts that are up and enabled, with their capacities and traits from Placement. */
export async function readComputeProviders({ nova, placement }: { nova: NovaClient; placement: PlacementClient }): Promise<CapacityProvider[]> {
  const hypervisors = (await nova.listHypervisors()).filter((h) => h.state === 'up' && h.status === 'enabled');
  return Promise.all(
    hypervisors.map(async (h): Promise<CapacityProvider> => {
      // Since compute microversion 2.53 a hypervisor's id is its compute node's UUID, which is its Placement provider's.
      const [{ inventories }, { traits }] = await Promise.all([placement.getInventories(h.id), placement.getProviderTraits(h.id)]);
      return { uuid: h.id, name: h.hypervisor_hostname, host: h.service.host, capacity: capacityOf(inventories), traits };
    }),
  );
}

