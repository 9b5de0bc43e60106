/**
 * The reservable network segments (issue 45, Chameleon's `/v1/networks`). Enrolling a segment asks
 * Neutron whether it could ever make the lessee's network on it: the physical network must be one
 * of its segment ranges' (`network-segment-range` extension), the tag outside every range it hands
 * to tenant networks (else an ordinary project network could take the tag before a lease starts),
 * and no network may be on it already. LK_NEUTRON_TENANT_VLAN_RANGES (ML2's network_vlan_ranges),
 * when set, says it for the physical networks it names; without it and without the extension,
 * enrolment is refused (nothing could tell whether Neutron would ever make the network).
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { invalidLease, isUuid, leaseConflict } from '../../domain/lease';
import { deleteNetworkSegment, getNetworkSegment, insertNetworkSegment, listNetworkSegments, lockNetworkSegment, setNetworkSegmentCapabilities, type NetworkSegmentRecord, type NetworkType } from '../../db/network-segments';
import { networkSegmentBookings } from '../../db/network-segment-allocations';
import { describeHolder } from '../../db/range-bookings';
import type { Pool } from '../../db/pool';
import { inTransaction } from '../../db/transaction';
import type { TenantVlanRanges } from '../../config';
import type { NetworkSegmentRange, NeutronClient } from '../../openstack';
import { checkCapabilities } from '../physical-host/inventory';
import { segmentName } from './calendar';
import { MAX_SEGMENT_ID, NETWORK_TYPES, SEGMENT_FIELDS } from './params';

/** Names a capability may not take: the segment's own fields and those the API shows beside them. */
const RESERVED_NAMES = new Set<string>([...SEGMENT_FIELDS, 'id', 'created_at', 'updated_at']);
/** Neutron's limit on a physical network's name. */
const MAX_PHYSNET = 64;
/** A capability's value, as Neutron bounds a description. */
const MAX_CAPABILITY_VALUE = 255;
/** Capabilities one segment may carry. */
export const MAX_SEGMENT_CAPABILITIES = 64;

function notFound(id: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'LeaseNotFound', message: `Network segment ${id.slice(0, 80)} not found.`, nonRetryable: true });
}

/** An enrolment's fields as checked: the type, its physical network (none for VXLAN), and the tag as decimal text. */
export interface SegmentFields {
  networkType: NetworkType;
  physicalNetwork: string | null;
  segmentId: string;
}

/** Checks an enrolment's raw fields (400 naming the one that is wrong). */
export function checkSegmentFields(raw: { network_type?: unknown; physical_network?: unknown; segment_id?: unknown }): SegmentFields {
  const type = raw.network_type;
  if (type === undefined) throw invalidLease('Missing parameter network_type');
  if (typeof type !== 'string' || !(NETWORK_TYPES as readonly string[]).includes(type)) throw invalidLease(`network_type: expected one of ${NETWORK_TYPES.join(', ')}`);
  const networkType = type as NetworkType;
  const physnet = raw.physical_network;
  let physicalNetwork: string | null = null;
  if (networkType === 'vlan') {
    if (physnet === undefined || physnet === null) throw invalidLease('Missing parameter physical_network (a vlan segment needs its physical network)');
    if (typeof physnet !== 'string' || physnet.length === 0 || physnet.length > MAX_PHYSNET) throw invalidLease(`physical_network: expected the name of a physical network (1 to ${MAX_PHYSNET} characters)`);
    physicalNetwork = physnet;
  } else if (physnet !== undefined && physnet !== null) {
    throw invalidLease('physical_network: a vxlan segment has none (leave it out or null)');
  }
  const tag = raw.segment_id;
  if (tag === undefined) throw invalidLease('Missing parameter segment_id');
  const max = MAX_SEGMENT_ID[networkType];
  const value = typeof tag === 'number' ? tag : typeof tag === 'string' && /^\s*\d{1,9}\s*$/.test(tag) ? Number(tag) : NaN;
  if (!Number.isInteger(value) || value < 1 || value > max) throw invalidLease(`Malformed parameter segment_id: a ${networkType} tag is a whole number from 1 to ${max}`);
  return { networkType, physicalNetwork, segmentId: String(value) };
}

/** Extra capabilities as hosts take them, none named as a segment field, and not too many. */
function checkSegmentCapabilities(raw: Record<string, unknown>): Record<string, string> {
  const reserved = Object.keys(raw).filter((name) => RESERVED_NAMES.has(name));
  if (reserved.length > 0) throw invalidLease(`${reserved.join(', ')}: not a capability (the segment's own field${reserved.length > 1 ? 's' : ''})`);
  if (Object.keys(raw).length > MAX_SEGMENT_CAPABILITIES) throw invalidLease(`at most ${MAX_SEGMENT_CAPABILITIES} extra capabilities per segment`);
  const checked = checkCapabilities(raw);
  const long = Object.keys(checked).find((name) => checked[name].length > MAX_CAPABILITY_VALUE);
  if (long !== undefined) throw invalidLease(`capability ${long}: at most ${MAX_CAPABILITY_VALUE} characters`);
  return checked;
}

export class NetworkSegmentInventory {
  constructor(
    private readonly pool: Pool,
    /** Neutron, on first use: reading and updating segments needs no cloud; enrolling one does. */
    private readonly neutron: () => NeutronClient,
    /** ML2's network_vlan_ranges as the deployment configures them (LK_NEUTRON_TENANT_VLAN_RANGES), when it does. */
    private readonly tenantVlanRanges?: TenantVlanRanges,
  ) {}

  list(): Promise<NetworkSegmentRecord[]> {
    return listNetworkSegments(this.pool);
  }

  async get(id: string): Promise<NetworkSegmentRecord> {
    const found = isUuid(id) ? await getNetworkSegment(this.pool, id) : undefined;
    if (!found) throw notFound(id);
    return found;
  }

  /** Enrols a segment with its extra capabilities (`body` less the segment's fields), once Neutron agrees it is free. */
  async enrol(body: Record<string, unknown>): Promise<NetworkSegmentRecord> {
    const { network_type, physical_network, segment_id, ...extra } = body;
    const fields = checkSegmentFields({ network_type, physical_network, segment_id });
    const capabilities = checkSegmentCapabilities(extra);
    const name = segmentName({ network_type: fields.networkType, physical_network: fields.physicalNetwork, segment_id: fields.segmentId });
    await this.checkNeutron(fields, name);
    const enrolled = await insertNetworkSegment(this.pool, { id: randomUUID(), ...fields, capabilities });
    if (!enrolled) throw leaseConflict(`network segment ${name} is already enrolled`);
    return enrolled;
  }

  private async checkNeutron(fields: SegmentFields, name: string): Promise<void> {
    const neutron = this.neutron();
    this.checkRanges(fields, name, await neutron.listNetworkSegmentRanges());
    const [taken] = await neutron.findNetworksBySegment({ network_type: fields.networkType, physical_network: fields.physicalNetwork, segmentation_id: Number(fields.segmentId) });
    if (taken) throw leaseConflict(`segment ${name} is in use in Neutron (network ${taken.id} of project ${taken.project_id}): only a free segment can be made reservable`);
  }

  /**
   * The physical network must be one Neutron knows and the tag outside the ranges it hands to
   * tenant networks: as LK_NEUTRON_TENANT_VLAN_RANGES says for the physical networks it names (a
   * physnet listed without a range is known, with no tenant range), else as Neutron's segment
   * ranges say; neither known (the extension off, the setting silent): refused, saying how to fix it.
   */
  private checkRanges(fields: SegmentFields, name: string, neutronRanges: NetworkSegmentRange[] | undefined): void {
    const tag = Number(fields.segmentId);
    const configured = fields.networkType === 'vlan' && fields.physicalNetwork !== null ? this.tenantVlanRanges?.get(fields.physicalNetwork) : undefined;
    let tenantRanges: Array<{ minimum: number; maximum: number; name: string }>;
    if (configured) {
      tenantRanges = configured.map((r) => ({ ...r, name: `LK_NEUTRON_TENANT_VLAN_RANGES ${fields.physicalNetwork}:${r.minimum}:${r.maximum}` }));
    } else if (neutronRanges !== undefined) {
      const ofType = neutronRanges.filter((r) => r.network_type === fields.networkType && (fields.networkType !== 'vlan' || r.physical_network === fields.physicalNetwork));
      if (fields.networkType === 'vlan' && ofType.length === 0) {
        throw leaseConflict(
          `physical network ${fields.physicalNetwork} is not in Neutron's network segment ranges: Neutron could not make a network on it (a physical network ML2 lists without a range: name it in LK_NEUTRON_TENANT_VLAN_RANGES)`,
        );
      }
      tenantRanges = ofType.map((r) => ({ minimum: r.minimum, maximum: r.maximum, name: `Neutron's segment range ${r.name || r.id}` }));
    } else {
      const known = fields.networkType === 'vlan' && this.tenantVlanRanges ? ` (LK_NEUTRON_TENANT_VLAN_RANGES does not name physical network ${fields.physicalNetwork})` : '';
      throw leaseConflict(
        `segment ${name} cannot be checked: Neutron's network segment ranges cannot be read (its network-segment-range extension is off)${known}. Enable the extension (service_plugins = network_segment_range in neutron.conf)` +
          (fields.networkType === 'vlan' ? ", or set LK_NEUTRON_TENANT_VLAN_RANGES to ML2's network_vlan_ranges" : ''),
      );
    }
    const inRange = tenantRanges.find((r) => r.minimum <= tag && tag <= r.maximum);
    if (inRange) {
      throw leaseConflict(
        `segment ${name} lies in ${inRange.name} (${inRange.minimum}-${inRange.maximum}), which Neutron hands to tenant networks: an ordinary project network could take the tag before a lease starts; enrol tags outside the ranges`,
      );
    }
  }

  /** Changes extra capabilities; the segment's own fields never change (400). */
  async update(id: string, values: Record<string, unknown>): Promise<NetworkSegmentRecord> {
    const segment = await this.get(id);
    const fields = SEGMENT_FIELDS.filter((field) => field in values);
    if (fields.length > 0) throw invalidLease(`${fields.join(', ')}: a segment's fields cannot change; enrol another segment instead`);
    const capabilities = checkSegmentCapabilities(values);
    if (Object.keys({ ...segment.capabilities, ...capabilities }).length > MAX_SEGMENT_CAPABILITIES) throw invalidLease(`at most ${MAX_SEGMENT_CAPABILITIES} extra capabilities per segment`);
    const updated = await setNetworkSegmentCapabilities(this.pool, segment.id, capabilities);
    if (!updated) throw notFound(id);
    return updated;
  }

  /** Removes a segment from the reservable ones; 409 naming the holders while any booking of it ends in the future (a lease's, an offer hold's, or one whose lease is not recorded yet). */
  async remove(id: string): Promise<void> {
    await this.get(id);
    const heldBy = await inTransaction(this.pool, async (client) => {
      if (!(await lockNetworkSegment(client, id))) throw notFound(id);
      const holders = await networkSegmentBookings.holdersOf(client, id);
      if (holders.length > 0) return holders;
      await networkSegmentBookings.deleteResource(client, id);
      await deleteNetworkSegment(client, id);
      return [];
    });
    if (heldBy.length > 0) {
      throw leaseConflict(`Can't delete network segment ${id}. It is allocated by reservations of lease(s) ${heldBy.map(describeHolder).join(', ')}.`);
    }
  }
}
