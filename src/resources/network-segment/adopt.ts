/**
 * Adopting a network Blazar made (Chameleon's network reservations, brought over by the Blazar
 * import): tagged as the start tags the networks it makes (`blazar`, `reservation:<id>`), so that
 * the end deletes it and the drift check knows it as the reservation's.
 */
import { ignoreNotFound, type NeutronClient } from '../../openstack';
import { reservationTag } from './networks';

/** Tags the network with the reservation; false when Neutron has it no more (the drift check makes it again). */
export async function adoptBlazarNetwork(neutron: NeutronClient, reservationId: string, networkId: string): Promise<boolean> {
  return (await ignoreNotFound(neutron.replaceTags('networks', networkId, ['blazar', reservationTag(reservationId)]).then(() => true))) ?? false;
}
