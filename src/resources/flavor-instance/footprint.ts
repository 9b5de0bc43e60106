/**
 * What a server of a flavor takes in Placement, as Nova asks for it: VCPU (or PCPU with
 * `hw:cpu_policy=dedicated`), MEMORY_MB, DISK_GB (root, ephemeral and swap, as Nova counts it; Blazar
 * leaves swap out), overridden by `resources:<CLASS>=<n>` extra specs; and the traits its
 * `trait:<NAME>=required|forbidden` extra specs ask of the host. Granular groups (`resources1:…`)
 * are not booked: a flavor with them is refused rather than booked for less than it takes.
 */
import type { Flavor } from '../../openstack';

export interface FlavorFootprint {
  amounts: Record<string, number>;
  requiredTraits: string[];
  forbiddenTraits: string[];
}

/** A flavor the slot calendar cannot book as it stands: why (a 400). */
export class UnsupportedFlavorError extends Error {}

export function flavorFootprint(flavor: Pick<Flavor, 'vcpus' | 'ram' | 'disk' | 'swap' | 'OS-FLV-EXT-DATA:ephemeral' | 'extra_specs'>): FlavorFootprint {
  const specs = flavor.extra_specs ?? {};
  const swapMb = typeof flavor.swap === 'number' ? flavor.swap : 0;
  const dedicated = specs['hw:cpu_policy'] === 'dedicated';
  const amounts: Record<string, number> = {
    [dedicated ? 'PCPU' : 'VCPU']: flavor.vcpus,
    MEMORY_MB: flavor.ram,
    DISK_GB: flavor.disk + (flavor['OS-FLV-EXT-DATA:ephemeral'] ?? 0) + Math.ceil(swapMb / 1024),
  };
  const requiredTraits: string[] = [];
  const forbiddenTraits: string[] = [];
  for (const [key, value] of Object.entries(specs)) {
    if (/^(resources|trait)\d+:/.test(key) || /^(resources|trait)_/.test(key)) throw new UnsupportedFlavorError(`extra spec ${key}: request groups are not supported by flavor:instance`);
    const resource = /^resources:([A-Z0-9_]{1,255})$/.exec(key);
    if (resource) {
      if (!/^\d{1,10}$/.test(value)) throw new UnsupportedFlavorError(`extra spec ${key}=${value}: expected a whole number`);
      amounts[resource[1]] = Number(value);
      continue;
    }
    const trait = /^trait:([A-Z0-9_]{1,255})$/.exec(key);
    if (trait) {
      if (value === 'required') requiredTraits.push(trait[1]);
      else if (value === 'forbidden') forbiddenTraits.push(trait[1]);
      else throw new UnsupportedFlavorError(`Invalid value for trait ${trait[1]}`);
    }
  }
  for (const [resourceClass, amount] of Object.entries(amounts)) if (amount === 0) delete amounts[resourceClass];
  return { amounts, requiredTraits: requiredTraits.sort(), forbiddenTraits: forbiddenTraits.sort() };
}
