/**
 * Neutron actions for a bandwidth reservation (`network:bandwidth`): its QoS policy with minimum
 * bandwidth rules, its ports, their binding to a host and the allocation recorded on the binding.
 * Everything is named after the reservation (`lk-<reservation id>`, ports `…-<n>`), so each action
 * finds what an earlier try made instead of making it twice.
 */
import { NotFoundError, type NeutronClient, type Port, type VnicType } from '../../openstack';

export interface PortSpec {
  reservationId: string;
  projectId: string;
  networkId: string;
  amount: number;
  egressKbps: number;
  ingressKbps?: number | null;
  vnicType: VnicType;
}

export const policyName = (reservationId: string) => `lk-${reservationId}`;
export const portName = (reservationId: string, index: number) => `lk-${reservationId}-${index}`;

/** The reservation's QoS policy (with its rules) and ports, made where missing. */
export async function ensurePorts(neutron: NeutronClient, spec: PortSpec): Promise<{ policyId: string; portIds: string[] }> {
  const name = policyName(spec.reservationId);
  let [policy] = await neutron.listQosPolicies({ name, project_id: spec.projectId });
  policy ??= await neutron.createQosPolicy({ name, project_id: spec.projectId, description: 'leasekeeper bandwidth reservation' });
  const rules = await neutron.listMinimumBandwidthRules(policy.id);
  const wanted: Array<{ direction: 'egress' | 'ingress'; min_kbps: number }> = [{ direction: 'egress', min_kbps: spec.egressKbps }];
  if (spec.ingressKbps) wanted.push({ direction: 'ingress', min_kbps: spec.ingressKbps });
  for (const rule of wanted) {
    if (!rules.some((r) => r.direction === rule.direction)) await neutron.createMinimumBandwidthRule(policy.id, rule);
  }
  const portIds: string[] = [];
  for (let index = 0; index < spec.amount; index++) {
    const [existing] = await neutron.listPorts({ name: portName(spec.reservationId, index), network_id: spec.networkId, project_id: spec.projectId });
    const port =
      existing ??
      (await neutron.createPort({
        network_id: spec.networkId,
        name: portName(spec.reservationId, index),
        project_id: spec.projectId,
        qos_policy_id: policy.id,
        'binding:vnic_type': spec.vnicType,
        description: 'leasekeeper bandwidth reservation',
      }));
    portIds.push(port.id);
  }
  return { policyId: policy.id, portIds };
}

/** Binds every port to `host`; false (and every port unbound again) when Neutron could not bind one. */
export async function bindPorts(neutron: NeutronClient, portIds: string[], host: string): Promise<{ bound: boolean; reason?: string }> {
  for (const id of portIds) {
    const port = await neutron.updatePort(id, { 'binding:host_id': host });
    if (port['binding:vif_type'] === 'binding_failed' || port['binding:vif_type'] === 'unbound') {
      await unbindPorts(neutron, portIds);
      return { bound: false, reason: `port ${id} on ${host}: vif_type ${port['binding:vif_type']}` };
    }
  }
  return { bound: true };
}

export async function unbindPorts(neutron: NeutronClient, portIds: string[]): Promise<void> {
  for (const id of portIds) {
    const port = await findPort(neutron, id);
    if (port && (port['binding:host_id'] || Object.keys(port['binding:profile'] ?? {}).length > 0)) {
      await neutron.updatePort(id, { 'binding:host_id': '', 'binding:profile': {} });
    }
  }
}

/** Records on each port's binding which provider its request groups are allocated from, as Nova does for Neutron. */
export async function recordAllocation(neutron: NeutronClient, allocations: Array<{ portId: string; groupProviders: Record<string, string> }>): Promise<void> {
  for (const { portId, groupProviders } of allocations) {
    const port = await neutron.getPort(portId);
    await neutron.updatePort(portId, { 'binding:profile': { ...port['binding:profile'], allocation: groupProviders } });
  }
}

/** Unbinds and deletes the reservation's ports, then its QoS policy, whatever of them exists. */
export async function deletePorts(neutron: NeutronClient, spec: Pick<PortSpec, 'reservationId' | 'projectId' | 'networkId' | 'amount'>): Promise<void> {
  for (let index = 0; index < spec.amount; index++) {
    for (const port of await neutron.listPorts({ name: portName(spec.reservationId, index), network_id: spec.networkId })) {
      await unbindPorts(neutron, [port.id]);
      await neutron.deletePort(port.id).catch(ignoreGone);
    }
  }
  for (const policy of await neutron.listQosPolicies({ name: policyName(spec.reservationId) })) {
    await neutron.deleteQosPolicy(policy.id).catch(ignoreGone);
  }
}

async function findPort(neutron: NeutronClient, id: string): Promise<Port | undefined> {
  try {
    return await neutron.getPort(id);
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

function ignoreGone(err: unknown): void {
  if (!(err instanceof NotFoundError)) throw err;
}
