/** The `network:bandwidth` reservation's parameters, as blazarclient sends them (numbers may come as strings). */
import { z } from 'zod';
import { propertyQueryParam, whole } from '../shared/params';

const VNIC_TYPES = ['normal', 'direct', 'macvtap', 'direct-physical', 'virtio-forwarder', 'smart-nic', 'remote-managed'] as const;
const MAX_KBPS = 1_000_000_000; // 1 Tbit/s


export const bandwidthParams = z.strictObject({
  /** The network the ports are made on (the lessee's or a shared one). */
  network_id: z.uuid({ error: 'expected the id (a UUID) of a network' }),
  /** Guaranteed bandwidth per port (Neutron QoS minimum_bandwidth rules). */
  egress_kbps: whole('kbps', 1, MAX_KBPS),
  ingress_kbps: whole('kbps', 1, MAX_KBPS).nullish(),
  /** How many ports. */
  amount: whole('ports', 1, 64).nullish().transform((v) => v ?? 1),
  vnic_type: z
    .enum(VNIC_TYPES, { error: `expected one of ${VNIC_TYPES.join(', ')}` })
    .nullish()
    .transform((v) => v ?? 'normal'),
  /** Put the ports on the host of another reservation of the lease (a host or server one): its position in the lease's reservations (from 0), or its id. */
  on_host_of: z.union([z.uuid(), whole('positions', 0, 100)], { error: 'expected the position (from 0) or the id of another reservation of the lease' }).nullish(),
  /** A property query over the bandwidth provider: `$host`, `$name`, and its Placement traits. */
  resource_properties: propertyQueryParam('["=", "$host", "compute-3"]'),
});

export type BandwidthParams = z.output<typeof bandwidthParams>;

/** Placement's trait for a physical network or a vnic type, as Neutron names it. */
export function customTrait(prefix: 'PHYSNET' | 'VNIC_TYPE', value: string): string {
  return `CUSTOM_${prefix}_${value.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}
