/**
 * The reservable floating IP addresses (Blazar's floatingips). Enrolling an address asks Neutron
 * for the network and its subnets: the address must lie in one of the network's subnets, outside
 * its allocation pools and not be its gateway (Neutron hands out pool addresses to anyone; only an
 * address outside them stays free until a lease creates it), and nothing in Neutron may hold it.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { invalidLease, isUuid, leaseConflict } from '../../domain/lease';
import { deleteFloatingIpUnlessBooked, getFloatingIp, insertFloatingIp, listFloatingIps, type FloatingIpRecord } from '../../db/floating-ips';
import type { Pool } from '../../db/pool';
import { describeHolder } from '../../db/range-bookings';
import { inTransaction } from '../../db/transaction';
import { ignoreNotFound, type NeutronClient } from '../../openstack';
import { canonicalAddress, inCidr, inRange } from './params';

function notFound(id: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'LeaseNotFound', message: `Floating IP ${id} not found.`, nonRetryable: true });
}

export class FloatingIpInventory {
  constructor(
    private readonly pool: Pool,
    private readonly neutron: () => NeutronClient,
  ) {}

  list(): Promise<FloatingIpRecord[]> {
    return listFloatingIps(this.pool);
  }

  async get(id: string): Promise<FloatingIpRecord> {
    const found = isUuid(id) ? await getFloatingIp(this.pool, id) : undefined;
    if (!found) throw notFound(id);
    return found;
  }

  async enrol(networkId: string, addressText: string): Promise<FloatingIpRecord> {
    const address = canonicalAddress(addressText);
    if (address === undefined) throw invalidLease(`IP address ${addressText} is invalid form.`);
    const neutron = this.neutron();
    const network = isUuid(networkId) ? await ignoreNotFound(neutron.getNetwork(networkId)) : undefined;
    if (!network) throw invalidLease(`Failed to find network ${networkId}`);
    if (!network['router:external']) throw invalidLease(`network ${networkId} is not external (router:external): floating IPs cannot be made on it`);
    let subnetId: string | undefined;
    for (const id of network.subnets) {
      const subnet = await neutron.getSubnet(id);
      if (!inCidr(address, subnet.cidr)) continue;
      const gateway = subnet.gateway_ip !== null && canonicalAddress(subnet.gateway_ip) === address;
      if (gateway || subnet.allocation_pools.some((pool) => inRange(address, pool.start, pool.end))) {
        throw invalidLease(`The floating IP ${address} is used in allocation_pools or gateway_ip in subnet ${subnet.id} .`);
      }
      subnetId = subnet.id;
      break;
    }
    if (subnetId === undefined) throw invalidLease(`Valid subnet for the floating IP ${address} is not found.`);
    const [taken] = await neutron.listFloatingIps({ floating_ip_address: address, floating_network_id: networkId });
    if (taken) throw leaseConflict(`floating IP ${address} is in use in Neutron (floating IP ${taken.id} of project ${taken.project_id}): only a free address can be made reservable`);
    const [port] = await neutron.listPorts({ network_id: networkId, fixed_ips: `ip_address=${address}` });
    if (port) throw leaseConflict(`floating IP ${address} is in use in Neutron (port ${port.id}, ${port.device_owner || 'no owner'}): only a free address can be made reservable`);
    const enrolled = await insertFloatingIp(this.pool, { id: randomUUID(), networkId, subnetId, address });
    if (!enrolled) throw leaseConflict(`floating IP ${address} of network ${networkId} is already reservable`);
    return enrolled;
  }

  /** Removes an address from the reservable ones; 409 while a lease holds it now or later. */
  async remove(id: string): Promise<void> {
    await this.get(id);
    const outcome = await inTransaction(this.pool, (client) => deleteFloatingIpUnlessBooked(client, id));
    if (outcome.heldBy.length > 0) {
      throw leaseConflict(`Can't delete floating IP ${id}. Floating IP id ${id} is allocated by reservations of lease(s) ${outcome.heldBy.map(describeHolder).join(', ')}.`);
    }
    if (!outcome.deleted) throw notFound(id);
  }
}
