/**
 * Neutron actions for a network reservation (issue 45): at the start, a network in the lessee's
 * project on exactly the booked segment; at the end, its ports gone (servers detached, routers'
 * interfaces removed), then the network (its subnets go with it). The network carries Blazar's
 * tags (`blazar`, `reservation:<id>`) and, in its description, the reservation id, which is what a
 * retry trusts when a create went through but the tagging did not.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ConflictError, ignoreNotFound, type Network, type NeutronClient } from '../../openstack';
import type { ReportProgress } from '../../domain/resource-plugin';
import type { NetworkSegmentRecord } from '../../db/network-segments';
import { segmentName } from './calendar';

export const reservationTag = (reservationId: string) => `reservation:${reservationId}`;
const tagsOf = (reservationId: string) => ['blazar', reservationTag(reservationId)];

/** The description the network is made with: the lessee's, then the reservation it belongs to. */
function descriptionOf(reservationId: string, lesseeDescription: string): string {
  const ours = `leasekeeper: reservation ${reservationId}`;
  return (lesseeDescription ? `${lesseeDescription.slice(0, 255 - ours.length - 3)} (${ours})` : ours).slice(0, 255);
}

const isOurs = (network: Network, reservationId: string) => (network.tags ?? []).includes(reservationTag(reservationId)) || (network.description ?? '').includes(reservationId);

/** A router interface is a port no port delete may remove: its router lets go of it. */
const ROUTER_INTERFACE = /^network:(router_interface|ha_router_replicated_interface)/;
/** Ports Neutron deletes itself with the network (DHCP) or that are not a lessee's to take (a router's gateway is not on this network). */
const NETWORK_OWNED = /^network:(dhcp|distributed)$/;

export interface NetworkSpec {
  reservationId: string;
  projectId: string;
  name: string;
  description: string;
  segment: NetworkSegmentRecord;
  progress?: ReportProgress;
}

const onSegment = (segment: NetworkSegmentRecord) => ({ network_type: segment.network_type, physical_network: segment.physical_network, segmentation_id: Number(segment.segment_id) });

/** The reservation's networks in Neutron: those it tagged, and one on its segment it made but did not tag yet. */
export async function reservedNetworks(neutron: NeutronClient, reservationId: string, segment: NetworkSegmentRecord | undefined): Promise<Network[]> {
  const found = new Map((await neutron.listNetworks({ tags: reservationTag(reservationId) })).map((n) => [n.id, n]));
  if (segment) for (const network of await neutron.findNetworksBySegment(onSegment(segment))) if (isOurs(network, reservationId)) found.set(network.id, network);
  return [...found.values()];
}

/**
 * Makes Neutron hold the reservation's network on its segment, in the lessee's project: the one a
 * previous try made, else a new one. A network of anyone else on the segment is an operator's to
 * remove (non-retryable: the segment is not the lessee's to take over).
 */
export async function ensureNetwork(neutron: NeutronClient, spec: NetworkSpec): Promise<Network> {
  const onIt = await neutron.findNetworksBySegment(onSegment(spec.segment));
  const foreign = onIt.find((n) => !isOurs(n, spec.reservationId));
  if (foreign) {
    throw ApplicationFailure.nonRetryable(
      `network segment ${segmentName(spec.segment)} is taken in Neutron by network ${foreign.id} of project ${foreign.project_id} outside this lease: an operator must delete it or remove the segment from the reservable ones`,
      'SegmentTaken',
    );
  }
  let network = onIt[0];
  if (!network) {
    network = await neutron.createNetwork({
      name: spec.name,
      description: descriptionOf(spec.reservationId, spec.description),
      project_id: spec.projectId,
      'provider:network_type': spec.segment.network_type,
      ...(spec.segment.physical_network !== null ? { 'provider:physical_network': spec.segment.physical_network } : {}),
      'provider:segmentation_id': Number(spec.segment.segment_id),
    });
    spec.progress?.({ created: network.id });
  }
  if (!(network.tags ?? []).includes(reservationTag(spec.reservationId))) await neutron.replaceTags('networks', network.id, tagsOf(spec.reservationId));
  return network;
}

/** What is left on networks the end could not delete yet: `port <id> (<owner>)` each. */
export interface NetworkLeftovers {
  networks: string[];
  ports: string[];
}

/**
 * Takes the reservation's networks away: each port deleted (a server's detaches it), each router
 * interface removed through its router, then the network. What could not go yet is answered (a
 * port Neutron still holds, a network it still calls in use), for the caller to try again.
 */
export async function deleteReservedNetworks(neutron: NeutronClient, reservationId: string, segment: NetworkSegmentRecord | undefined, progress?: ReportProgress): Promise<NetworkLeftovers> {
  const left: NetworkLeftovers = { networks: [], ports: [] };
  for (const network of await reservedNetworks(neutron, reservationId, segment)) {
    for (const port of await neutron.listPorts({ network_id: network.id })) {
      if (NETWORK_OWNED.test(port.device_owner)) continue;
      if (ROUTER_INTERFACE.test(port.device_owner) && port.device_id) await ignoreNotFound(neutron.removeRouterInterface(port.device_id, { port_id: port.id }));
      else await ignoreNotFound(neutron.deletePort(port.id));
      progress?.({ deletedPort: port.id });
    }
    try {
      await ignoreNotFound(neutron.deleteNetwork(network.id));
      progress?.({ deletedNetwork: network.id });
    } catch (err) {
      // NetworkInUse: a port came back or is still going; said, and tried again.
      if (!(err instanceof ConflictError)) throw err;
      left.networks.push(network.id);
      const ports = await neutron.listPorts({ network_id: network.id });
      left.ports.push(...ports.filter((p) => !NETWORK_OWNED.test(p.device_owner)).map((p) => `port ${p.id} (${p.device_owner || 'no owner'})`));
    }
  }
  return left;
}
