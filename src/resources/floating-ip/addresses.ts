/**
 * Neutron actions for a floating IP reservation: its booked addresses made real as floating IPs in
 * the lessee's project, each with exactly its address, and taken back at the end. Each carries
 * Blazar's tags (`blazar`, `reservation:<id>`) and, in its description, the reservation id, which
 * is what a retry trusts when a create went through but the tagging did not.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ignoreNotFound, type FloatingIp, type NeutronClient } from '../../openstack';
import type { ReportProgress } from '../../domain/resource-plugin';
import type { FloatingIpRecord } from '../../db/floating-ips';
import { canonicalAddress } from './params';

export const reservationTag = (reservationId: string) => `reservation:${reservationId}`;
const tagsOf = (reservationId: string) => ['blazar', reservationTag(reservationId)];
const descriptionOf = (reservationId: string, leaseName: string) => `leasekeeper: reservation ${reservationId} of lease ${leaseName}`.slice(0, 255);

/** Whether a floating IP in Neutron is this reservation's. */
const isOurs = (fip: FloatingIp, reservationId: string) => (fip.tags ?? []).includes(reservationTag(reservationId)) || (fip.description ?? '').includes(reservationId);

const sameAddress = (a: string, b: string) => canonicalAddress(a) === canonicalAddress(b);

export interface AddressSpec {
  reservationId: string;
  leaseName: string;
  projectId: string;
  /** The addresses the calendar holds for the reservation now. */
  addresses: FloatingIpRecord[];
  progress?: ReportProgress;
}

/** The reservation's floating IPs in Neutron (those it tagged). */
export function reservedFloatingIps(neutron: NeutronClient, reservationId: string): Promise<FloatingIp[]> {
  return neutron.listFloatingIps({ tags: reservationTag(reservationId) });
}

/**
 * Makes Neutron hold exactly the booked addresses for the reservation: creates the missing ones in
 * the lessee's project, and deletes those it made for addresses no longer booked (an active
 * reservation shrunk). Returns the floating IPs, in the order of the addresses.
 */
export async function syncFloatingIps(neutron: NeutronClient, spec: AddressSpec): Promise<FloatingIp[]> {
  const tagged = await reservedFloatingIps(neutron, spec.reservationId);
  const result: FloatingIp[] = [];
  for (const booked of spec.addresses) {
    const address = booked.floating_ip_address;
    let fip = tagged.find((f) => sameAddress(f.floating_ip_address, address));
    if (!fip) {
      const [found] = await neutron.listFloatingIps({ floating_ip_address: address, floating_network_id: booked.floating_network_id });
      if (found && !isOurs(found, spec.reservationId)) {
        throw ApplicationFailure.nonRetryable(
          `floating IP ${address} is taken in Neutron (by project ${found.project_id}, floating IP ${found.id}) outside this lease: an operator must free it or remove it from the reservable addresses`,
          'FloatingIpTaken',
        );
      }
      fip =
        found ??
        (await neutron.createFloatingIp({
          floating_network_id: booked.floating_network_id,
          subnet_id: booked.subnet_id,
          floating_ip_address: address,
          project_id: spec.projectId,
          description: descriptionOf(spec.reservationId, spec.leaseName),
        }));
      await neutron.replaceTags('floatingips', fip.id, tagsOf(spec.reservationId));
      spec.progress?.({ created: address });
    }
    result.push(fip);
  }
  for (const fip of tagged) {
    if (!spec.addresses.some((booked) => sameAddress(booked.floating_ip_address, fip.floating_ip_address))) await deleteFloatingIp(neutron, fip);
  }
  return result;
}

/** Takes the reservation's floating IPs back: off their ports first (deleting a floating IP takes nothing else with it, but says so), then deleted. */
export async function deleteReservedFloatingIps(neutron: NeutronClient, spec: AddressSpec): Promise<number> {
  const found = new Map((await reservedFloatingIps(neutron, spec.reservationId)).map((f) => [f.id, f]));
  // A create whose tagging never happened is found by its address and description.
  for (const booked of spec.addresses) {
    const [fip] = await neutron.listFloatingIps({ floating_ip_address: booked.floating_ip_address, floating_network_id: booked.floating_network_id });
    if (fip && isOurs(fip, spec.reservationId)) found.set(fip.id, fip);
  }
  for (const fip of found.values()) {
    await deleteFloatingIp(neutron, fip);
    spec.progress?.({ deleted: fip.floating_ip_address });
  }
  return found.size;
}

async function deleteFloatingIp(neutron: NeutronClient, fip: FloatingIp): Promise<void> {
  if (fip.port_id) await ignoreNotFound(neutron.setFloatingIpPort(fip.id, null));
  await ignoreNotFound(neutron.deleteFloatingIp(fip.id));
}
