/**
 * Adopting a network Blazar made (Chameleon's network reservations, brought over by the Blazar
 * import): tagged as the start tags the networks it makes (`blazar`, `reservation:<id>`), so that
 * the drift check and the end know it as the reservation's (the end also finds it on the booked
 * segment in the lessee's project, tags or not).
 */
import { ignoreNotFound, type NeutronClient } from '../../openstack';
import { reservationTags } from './networks';

/** Tags the network with the reservation; false when Neutron has it no more (the drift check makes it again). */
export async function adoptBlazarNetwork(neutron: NeutronClient, reservationId: string, networkId: string): Promise<boolean> {
  return (await ignoreNotFound(neutron.replaceTags('networks', networkId, reservationTags(reservationId)).then(() => true))) ?? false;
}
