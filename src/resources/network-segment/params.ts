/**
 * The `network` reservation's parameters (issue 45), as Chameleon's blazarclient sends them, and the
 * segment fields enrolment checks: a VLAN tag is 1..4094, a VXLAN one 1..16777215.
 */
import { z } from 'zod';
import { propertyQueryParam } from '../shared/params';

export const NETWORK = 'network';

export const NETWORK_TYPES = ['vlan', 'vxlan'] as const;
/** The largest tag of each type (802.1Q's 12 bits less the reserved 4095; VXLAN's 24-bit VNI). */
export const MAX_SEGMENT_ID = { vlan: 4094, vxlan: 16_777_215 } as const;

/** The segment fields a property query may name, besides the capabilities. */
export const SEGMENT_FIELDS = ['network_type', 'physical_network', 'segment_id'] as const;

const query = propertyQueryParam('["==", "$physical_network", "physnet1"]');

export const networkSegmentParams = z.strictObject({
  /** The Neutron network made at the start. */
  network_name: z.string({ error: 'expected the name of the network to create' }).trim().min(1, 'must not be empty').max(255, 'at most 255 characters'),
  network_description: z
    .string({ error: 'expected text' })
    .max(255, 'at most 255 characters')
    .nullish()
    .transform((v) => v ?? ''),
  /** Property queries over the segment's fields and capabilities (both apply). */
  network_properties: query,
  resource_properties: query,
});

export type NetworkSegmentParams = z.output<typeof networkSegmentParams>;
