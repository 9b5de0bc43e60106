/**
 * Neutron actions for a network reservation (issue 45): at the start, a network in the lessee's
 * project on exactly the booked segment; at the end, its ports gone (servers detached, routers'
 * interfaces removed), then the network (its subnets go with it).
 *
 * Which networks are the reservation's is decided by what the lessee cannot change: the network's
 * provider attributes (admin-only, and only an admin can make a network on a provider segment) and
 * its project. The end takes the network recorded in the allocation and every network of the
 * lessee's project on the booked segment; the tag `reservation:<id>` is only one more way to find
 * it (the lessee may edit tags and description). The start adopts a network on the booked segment
 * in the lessee's project only when it was made by us: its tag or its description (both set by our
 * create, in the same request for the description) names the reservation, or its id is the one
 * recorded; any other network on the segment makes the segment taken.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ConflictError, ignoreNotFound, type Network, type NeutronClient } from '../../openstack';
import type { ReportProgress } from '../../domain/resource-plugin';
import type { NetworkSegmentRecord } from '../../db/network-segments';
import { segmentName } from './calendar';

export const reservationTag = (reservationId: string) => `reservation:${reservationId}`;
/** The tags every network of a reservation carries (the start's, and the Blazar import's adoption). */
export const reservationTags = (reservationId: string) => ['blazar', reservationTag(reservationId)];

/** The description the network is made with: the lessee's, then the reservation it belongs to. */
function descriptionOf(reservationId: string, lesseeDescription: string): string {
  const ours = `leasekeeper: reservation ${reservationId}`;
  return (lesseeDescription ? `${lesseeDescription.slice(0, 255 - ours.length - 3)} (${ours})` : ours).slice(0, 255);
}

/** Which reservation's networks, and what pins them: the lessee's project, the booked segment, the recorded network. */
export interface ReservationNetworkKey {
  reservationId: string;
  projectId: string;
  segment: NetworkSegmentRecord | undefined;
  /** The network_id the allocation records (null or undefined before the start). */
  networkId?: string | null;
}

/** Made by us for this reservation: in the lessee's project, and recorded, tagged or described (at its create) as the reservation's. */
function madeByUs(network: Network, key: ReservationNetworkKey): boolean {
  if (network.project_id !== key.projectId) return false;
  return network.id === key.networkId || (network.tags ?? []).includes(reservationTag(key.reservationId)) || (network.description ?? '').includes(`reservation ${key.reservationId}`);
}

/** A router interface is a port no port delete may remove: its router lets go of it. */
const ROUTER_INTERFACE = /^network:(router_interface|ha_router_replicated_interface)/;
/** Ports Neutron deletes itself with the network (DHCP, OVN's metadata port). */
const NETWORK_OWNED = /^network:(dhcp|distributed)$/;
/** A router's own ports, which go with its interface (DVR's SNAT port) or are not on the lessee's to delete (gateway, floating IP). */
const ROUTER_OWNED = /^network:(router_centralized_snat|router_gateway|floatingip)$/;

export interface NetworkSpec extends ReservationNetworkKey {
  segment: NetworkSegmentRecord;
  name: string;
  description: string;
  progress?: ReportProgress;
}

const onSegment = (segment: NetworkSegmentRecord) => ({ network_type: segment.network_type, physical_network: segment.physical_network, segmentation_id: Number(segment.segment_id) });

/** Where operators read what the lessee may not: the worker's log (the activity's logger when in one). */
function operatorWarning(message: string, fields: Record<string, unknown>): void {
  try {
    Context.current().log.warn(message, fields);
  } catch {
    process.stderr.write(`${JSON.stringify({ level: 'warn', msg: message, ...fields })}\n`);
  }
}

/**
 * The reservation's networks in Neutron: the recorded one, every network of the lessee's project on
 * the booked segment (however its tags or description were edited), and any of that project's
 * tagged with it. `madeByUsOnly` (a start undone: the segment may have been taken in the lessee's
 * project by an operator, which is why the start failed): only those we made.
 */
export async function reservedNetworks(neutron: NeutronClient, key: ReservationNetworkKey, madeByUsOnly = false): Promise<Network[]> {
  const found = new Map<string, Network>();
  const ofLessee = (n: Network) => (madeByUsOnly ? madeByUs(n, key) : n.project_id === key.projectId);
  if (key.networkId) {
    const recorded = await ignoreNotFound(neutron.getNetwork(key.networkId));
    if (recorded && ofLessee(recorded)) found.set(recorded.id, recorded);
  }
  if (key.segment) for (const network of await neutron.findNetworksBySegment(onSegment(key.segment))) if (ofLessee(network)) found.set(network.id, network);
  for (const network of await neutron.listNetworks({ tags: reservationTag(key.reservationId), project_id: key.projectId })) if (ofLessee(network)) found.set(network.id, network);
  return [...found.values()];
}

/** The segment is someone else's in Neutron: the lessee is told only that; which network and project go to the worker's log. */
function segmentTaken(spec: NetworkSpec, foreign: Network): ApplicationFailure {
  operatorWarning('a network segment booked to a reservation is taken in Neutron by a network outside its lease', {
    reservationId: spec.reservationId,
    segment: segmentName(spec.segment),
    networkId: foreign.id,
    projectId: foreign.project_id,
  });
  return ApplicationFailure.nonRetryable(
    `network segment ${segmentName(spec.segment)} is taken in Neutron by a network outside this lease: an operator must act (delete that network or remove the segment from the reservable ones)`,
    'SegmentTaken',
  );
}

/**
 * Makes Neutron hold the reservation's network on its segment, in the lessee's project: the one a
 * previous try made (or an overlapping try is making), else a new one. A network of anyone else on
 * the segment is an operator's to remove (non-retryable: the segment is not the lessee's to take over).
 */
export async function ensureNetwork(neutron: NeutronClient, spec: NetworkSpec): Promise<Network> {
  const adoptOrRefuse = (onIt: Network[]): Network | undefined => {
    const foreign = onIt.find((n) => !madeByUs(n, spec));
    if (foreign) throw segmentTaken(spec, foreign);
    return onIt[0];
  };
  let network = adoptOrRefuse(await neutron.findNetworksBySegment(onSegment(spec.segment)));
  if (!network) {
    try {
      network = await neutron.createNetwork({
        name: spec.name,
        description: descriptionOf(spec.reservationId, spec.description),
        project_id: spec.projectId,
        'provider:network_type': spec.segment.network_type,
        ...(spec.segment.physical_network !== null ? { 'provider:physical_network': spec.segment.physical_network } : {}),
        'provider:segmentation_id': Number(spec.segment.segment_id),
      });
      spec.progress?.({ created: network.id });
    } catch (err) {
      // "VLAN in use": an overlapping try of this start (its create slow, this one its retry) made it first, or someone else took the tag.
      if (!(err instanceof ConflictError)) throw err;
      network = adoptOrRefuse(await neutron.findNetworksBySegment(onSegment(spec.segment)));
      if (!network) throw err;
    }
  }
  if (!(network.tags ?? []).includes(reservationTag(spec.reservationId))) await neutron.replaceTags('networks', network.id, reservationTags(spec.reservationId));
  return network;
}

/** What is left on networks the end could not delete yet: `port <id> (<owner>)` each. */
export interface NetworkLeftovers {
  networks: string[];
  ports: string[];
}

const portName = (port: { id: string; device_owner: string }) => `port ${port.id} (${port.device_owner || 'no owner'})`;

/**
 * Takes the reservation's networks away: the ordinary ports first (a server's detaches it, and a
 * floating IP on it no longer holds its router's interface), then each router interface through its
 * router (a router's own ports on the network go with it), then the network. A port or interface
 * Neutron refuses (409: a trunk's parent, an interface still in use) is left for the next try, as
 * is a network Neutron still calls in use: all answered, for the caller's bounded wait.
 */
export async function deleteReservedNetworks(neutron: NeutronClient, key: ReservationNetworkKey, options: { started: boolean; progress?: ReportProgress }): Promise<NetworkLeftovers> {
  const { progress } = options;
  const left: NetworkLeftovers = { networks: [], ports: [] };
  const refusing = async (action: () => Promise<unknown>): Promise<boolean> => {
    try {
      await ignoreNotFound(action());
      return false;
    } catch (err) {
      if (err instanceof ConflictError) return true;
      throw err;
    }
  };
  for (const network of await reservedNetworks(neutron, key, !options.started)) {
    const ports = await neutron.listPorts({ network_id: network.id });
    const interfaces = ports.filter((p) => ROUTER_INTERFACE.test(p.device_owner) && p.device_id);
    const ordinary = ports.filter((p) => !NETWORK_OWNED.test(p.device_owner) && !ROUTER_OWNED.test(p.device_owner) && !interfaces.includes(p));
    for (const port of ordinary) if (!(await refusing(() => neutron.deletePort(port.id)))) progress?.({ deletedPort: port.id });
    for (const port of interfaces) if (!(await refusing(() => neutron.removeRouterInterface(port.device_id, { port_id: port.id })))) progress?.({ deletedPort: port.id });
    if (!(await refusing(() => neutron.deleteNetwork(network.id)))) {
      progress?.({ deletedNetwork: network.id });
      continue;
    }
    // NetworkInUse: a port Neutron refused, came back or is still going; said, and tried again.
    left.networks.push(network.id);
    left.ports.push(...(await neutron.listPorts({ network_id: network.id })).filter((p) => !NETWORK_OWNED.test(p.device_owner)).map(portName));
  }
  return left;
}
