/**
 * `npm run histories:record`: runs the lease scenarios that guard workflow changes on a real
 * Temporal server and writes their histories to test/histories/<scenario>.json. Run it after a
 * deliberate, patched change to the lease workflow, and commit the new files beside the old ones.
 * With scenario names as arguments, only those are recorded.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { temporalBinary } from '../../dev-stack/temporal-dev-server';
import { startServers, stopServers } from '../../dev-stack/servers';
import { randomUUID } from 'node:crypto';
import { insertFloatingIp } from '../../src/db/floating-ips';
import { insertNetworkSegment } from '../../src/db/network-segments';
import { networkSegmentPlugin } from '../../src/resources/network-segment';
import type { NeutronClient } from '../../src/openstack';
import { FakeNeutron } from '../support/fake-neutron';
import { floatingIpPlugin } from '../../src/resources/floating-ip';
import { syncCapacityProviders } from '../../src/db/quantity-allocations';
import { COMPUTE_KIND } from '../../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { RecordingPlugin } from '../support/recording-plugin';
import { apiClient, eventually, inSeconds, startTestStack, type TestStack } from '../../dev-stack/stack';
import { leaseWorkflowId } from '../../workflows/lease/messages';
import { hostMonitorWorkflowId } from '../../workflows/host-monitor/messages';
import { noticeWorkflowId } from '../../workflows/notices/messages';
import { offerHoldWorkflowId } from '../../workflows/offer-hold/messages';
import { placedHoldId } from '../../src/api/offer-holds';
import { startWebhookReceiver } from '../support/notice-receiver';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { physicalHostWatch } from '../../src/resources/physical-host/health';
import { insertHost } from '../../dev-stack/fixtures/hosts';
import { recordPowerState } from '../../src/db/host-power';
import type { IronicClient } from '../../src/openstack/ironic';
import type { NovaClient } from '../../src/openstack/nova';
import { deploymentHostPower } from '../../src/resources/physical-host/power';
import { planNow, powerPlannerWorkflowId } from '../../workflows/power-planner/messages';
import { FakeNova } from '../support/fake-nova';
import { startSimulatedBmc } from '../support/ipmi-sim';

type Api = ReturnType<typeof apiClient>;
const HISTORY_DIR = path.join(__dirname, '..', '..', '..', 'test', 'histories');

async function waitFor(api: Api, id: string, status: string): Promise<void> {
  await eventually(async () => {
    const res = await api('GET', `/v1/leases/${id}`);
    const current = res.status === 404 ? 'GONE' : res.body.lease.status;
    return current === status ? true : undefined;
  }, 60_000);
}

const reservation = { resource_type: 'test:recording', keys: ['recorded-thing'] };

/** Hosts the recorder's host watch reports as failed (by hypervisor name): the healing scenarios set them. */
const hostsDown = new Set<string>();

/** Two hosts of a scenario's own (a capability names the scenario): the first is booked, the second replaces it. */
async function scenarioHosts(stack: TestStack, scenario: string): Promise<void> {
  for (const n of [1, 2]) await insertHost(stack.db.pool, { name: `${scenario}-${n}-${randomUUID().slice(0, 8)}`, capabilities: { scenario } });
}

const hostReservationOf = (scenario: string) => ({ resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$scenario', scenario]) });

/** Fails the lease's host in the host watch's eyes, and waits until healing moved the lease off it. */
async function failHostOf(api: Api, leaseId: string): Promise<string> {
  const booked: string = (await api('GET', `/v1/leases/${leaseId}`)).body.lease.reservations[0].hosts[0];
  hostsDown.add(booked);
  await eventually(async () => ((await api('GET', `/v1/leases/${leaseId}`)).body.lease.reservations[0].hosts[0] !== booked ? true : undefined), 30_000);
  return booked;
}

/** Holds an offer for a host of the scenario's own, an hour ahead; the hold's workflow id. */
async function holdScenarioOffer(api: Api, stack: TestStack, scenario: string): Promise<{ offerId: string; workflowId: string }> {
  await scenarioHosts(stack, scenario);
  const offers = await api('POST', '/v1/offers', { reservations: [hostReservationOf(scenario)], duration: 60, start_after: new Date(Date.now() + 3_600_000).toISOString().slice(0, 16).replace('T', ' '), limit: 1 });
  if (offers.status !== 200 || offers.body.offers.length === 0) throw new Error(`offers: ${offers.status} ${JSON.stringify(offers.body)}`);
  const offerId: string = offers.body.offers[0].id;
  const held = await api('POST', `/v1/offers/${offerId}/hold`, {});
  if (held.status !== 201) throw new Error(`hold: ${held.status} ${JSON.stringify(held.body)}`);
  return { offerId, workflowId: offerHoldWorkflowId(held.body.hold.id) };
}

/** An offer for one address of the network, an hour ahead. */
async function addressOffer(api: Api, network: string): Promise<{ id: string; start_date: string; end_date: string }> {
  const offers = await api('POST', '/v1/offers', { reservations: [{ resource_type: 'virtual:floatingip', network_id: network, amount: 1 }], duration: 60, start_after: new Date(Date.now() + 3_600_000).toISOString().slice(0, 16).replace('T', ' '), limit: 1 });
  if (offers.status !== 200 || offers.body.offers.length === 0) throw new Error(`offers: ${offers.status} ${JSON.stringify(offers.body)}`);
  return offers.body.offers[0];
}

/** Holds an offer for one address of the network (placed by the hold's workflow); the hold's workflow id. */
async function holdAddressOffer(api: Api, network: string): Promise<{ offerId: string; workflowId: string }> {
  const offer = await addressOffer(api, network);
  const held = await api('POST', `/v1/offers/${offer.id}/hold`, {});
  if (held.status !== 201) throw new Error(`hold: ${held.status} ${JSON.stringify(held.body)}`);
  return { offerId: offer.id, workflowId: offerHoldWorkflowId(held.body.hold.id) };
}

/** How long the recorder's approval minute lasts: the timed-out scenario's timeout (1 minute) fires within the recording. */
const RECORDED_APPROVAL_MINUTE_MS = 2_000;

/**
 * A member's lease that needs approval (its project's rule: always, a minute's timeout), answered
 * by an admin (`approve`, `deny`) or by nobody; then lived out (approved) and deleted.
 */
async function approvalScenario(stack: TestStack, scenario: string, answer: 'approve' | 'deny' | 'none'): Promise<string> {
  const admin = apiClient(stack.url, { 'x-auth-token': 'admin' });
  const lessee = apiClient(stack.url, { 'x-project-id': scenario, 'x-user-id': 'recorded', 'x-roles': 'member' });
  await admin('PUT', `/v1/projects/${scenario}/policy`, { approval: [{ always: true, timeout: 1 }] });
  const { status, body } = await lessee('POST', '/v1/leases', { name: scenario, start_date: inSeconds(3), end_date: inSeconds(6), reservations: [reservation] });
  if (status !== 201 || body.lease.status !== 'PENDING_APPROVAL') throw new Error(`create: ${status} ${JSON.stringify(body)}`);
  if (answer !== 'none') await admin('POST', `/v1/leases/${body.lease.id}/${answer}`, { reason: `recorded ${answer}` });
  await waitFor(lessee, body.lease.id, 'TERMINATED');
  await lessee('DELETE', `/v1/leases/${body.lease.id}`);
  return body.lease.id;
}

/**
 * An active lease's change waiting for approval (issue 42): a member's extension past its project's
 * rule (no extensions), sent with a justification, booked while the lease goes on; answered by an
 * admin (`approve`: the end moves; `deny`) or by nobody (its timeout, a recorded minute); then
 * lived out and deleted.
 */
async function changeApprovalScenario(stack: TestStack, scenario: string, answer: 'approve' | 'deny' | 'none'): Promise<string> {
  const admin = apiClient(stack.url, { 'x-auth-token': 'admin' });
  const lessee = apiClient(stack.url, { 'x-project-id': scenario, 'x-user-id': 'recorded', 'x-roles': 'member' });
  await admin('PUT', `/v1/projects/${scenario}/policy`, { extension: { max_count: 0 }, exception_timeout: 1 });
  const { status, body } = await lessee('POST', '/v1/leases', { name: scenario, start_date: inSeconds(2), end_date: inSeconds(8), reservations: [reservation] });
  if (status !== 201) throw new Error(`create: ${status} ${JSON.stringify(body)}`);
  await waitFor(lessee, body.lease.id, 'ACTIVE');
  const asked = await lessee('PUT', `/v1/leases/${body.lease.id}`, { end_date: inSeconds(10), justification: `recorded ${scenario}` });
  if (asked.status !== 200 || !asked.body.lease.pending_change) throw new Error(`change: ${asked.status} ${JSON.stringify(asked.body)}`);
  if (answer !== 'none') await admin('POST', `/v1/leases/${body.lease.id}/${answer}`, { reason: `recorded ${answer}` });
  await waitFor(lessee, body.lease.id, 'TERMINATED');
  await lessee('DELETE', `/v1/leases/${body.lease.id}`);
  return body.lease.id;
}

/** Each scenario returns the lease id once its workflow has closed, or the id of another workflow (still running). */
export const SCENARIOS: Record<string, (api: Api, stack: TestStack) => Promise<string | { workflowId: string }>> = {
  'whole-life': async (api) => {
    const { body } = await api('POST', '/v1/leases', { name: 'whole-life', start_date: inSeconds(2), end_date: inSeconds(5), reservations: [reservation] });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'admission-after-database-outage': async (api) => {
    // The first admission attempt fails (three tries) as if PostgreSQL were down; the second books.
    const { body } = await api('POST', '/v1/leases', {
      name: 'after-outage',
      start_date: inSeconds(2),
      end_date: inSeconds(4),
      reservations: [{ ...reservation, unavailable_reserves: 3 }],
    });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'update-while-pending': async (api) => {
    const { body } = await api('POST', '/v1/leases', { name: 'update-pending', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [reservation] });
    await api('PUT', `/v1/leases/${body.lease.id}`, { name: 'updated-pending', start_date: inSeconds(2), end_date: inSeconds(4) });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'idle-end': async (api) => {
    // Nobody uses it: warned (lease.idle), then ended early by the recorder's idle limits.
    const { body } = await api('POST', '/v1/leases', { name: 'idle-end', start_date: 'now', end_date: inSeconds(3600), reservations: [{ ...reservation, idle_check: true }] });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'extend-while-active': async (api) => {
    const { body } = await api('POST', '/v1/leases', { name: 'extend-active', start_date: 'now', end_date: inSeconds(3), reservations: [reservation] });
    await waitFor(api, body.lease.id, 'ACTIVE');
    await api('PUT', `/v1/leases/${body.lease.id}`, { end_date: inSeconds(5) });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'delete-while-pending': async (api) => {
    const { body } = await api('POST', '/v1/leases', { name: 'delete-pending', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [reservation] });
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'delete-while-active': async (api) => {
    const { body } = await api('POST', '/v1/leases', { name: 'delete-active', start_date: 'now', end_date: inSeconds(3600), reservations: [reservation] });
    await waitFor(api, body.lease.id, 'ACTIVE');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'failed-start': async (api) => {
    const { body } = await api('POST', '/v1/leases', {
      name: 'failed-start',
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [reservation, { resource_type: 'test:recording', fail_start: true }],
    });
    await waitFor(api, body.lease.id, 'ERROR');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'end-waits-for-resources': async (api) => {
    // Like hosts recycling until their last server is gone: the end hook reports twice that it waits.
    const { body } = await api('POST', '/v1/leases', {
      name: 'end-waits',
      start_date: 'now',
      end_date: inSeconds(3),
      reservations: [{ ...reservation, end_waits: 2 }],
    });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'delete-while-end-waits': async (api) => {
    const { body } = await api('POST', '/v1/leases', {
      name: 'delete-end-waits',
      start_date: 'now',
      end_date: inSeconds(2),
      reservations: [{ ...reservation, end_waits: 100 }],
    });
    await waitFor(api, body.lease.id, 'TERMINATING');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'hold-until-start': async (api) => {
    // Like a server shelved after admission and unshelved at start: hold, then start and end report details.
    const { body } = await api('POST', '/v1/leases', {
      name: 'hold-until-start',
      start_date: inSeconds(3),
      end_date: inSeconds(5),
      reservations: [{ ...reservation, hold: true, report: true }],
    });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'start-in-steps': async (api) => {
    // Like a bandwidth reservation: the start runs as three activities, each handing its state on.
    const { body } = await api('POST', '/v1/leases', {
      name: 'start-in-steps',
      start_date: inSeconds(2),
      end_date: inSeconds(4),
      reservations: [{ ...reservation, steps: ['make', 'choose', 'bind'] }],
    });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  'delete-while-waiting-for-predecessor': async (api) => {
    // Back to back on the same resource: the later lease waits in STARTING, and is deleted there.
    const earlier = await api('POST', '/v1/leases', { name: 'earlier', start_date: 'now', end_date: inSeconds(3600), reservations: [reservation] });
    const { body } = await api('POST', '/v1/leases', { name: 'waits-then-deleted', start_date: inSeconds(1), end_date: inSeconds(7200), reservations: [reservation] });
    await waitFor(api, body.lease.id, 'STARTING');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    await waitFor(api, body.lease.id, 'GONE');
    await api('DELETE', `/v1/leases/${earlier.body.lease.id}`);
    await waitFor(api, earlier.body.lease.id, 'GONE');
    return body.lease.id;
  },
  'predecessor-tells-waiting-successor': async (api) => {
    // The earlier lease's end outlasts the later lease's start (its end hook waits twice): the later
    // lease waits in STARTING and is told when the earlier one has recorded its end.
    const earlier = await api('POST', '/v1/leases', { name: 'slow-end', start_date: 'now', end_date: inSeconds(2), reservations: [{ ...reservation, end_waits: 2 }] });
    const later = await api('POST', '/v1/leases', { name: 'waits-for-slow-end', start_date: inSeconds(3), end_date: inSeconds(5), reservations: [reservation] });
    await waitFor(api, earlier.body.lease.id, 'TERMINATED');
    await waitFor(api, later.body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${later.body.lease.id}`);
    await api('DELETE', `/v1/leases/${earlier.body.lease.id}`);
    return earlier.body.lease.id;
  },
  'failed-hold': async (api) => {
    const { body } = await api('POST', '/v1/leases', {
      name: 'failed-hold',
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [reservation, { resource_type: 'test:recording', hold: true, fail_hold: true }],
    });
    await waitFor(api, body.lease.id, 'ERROR');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // A real resource type (floating IPs, calendar only): booked, grown while active, freed.
  'floating-ip-life': async (api, stack) => {
    const network = randomUUID();
    for (const address of ['203.0.113.200', '203.0.113.201']) await insertFloatingIp(stack.db.pool, { id: randomUUID(), networkId: network, subnetId: 'subnet', address });
    const { body } = await api('POST', '/v1/leases', {
      name: 'floating-ip-life',
      start_date: 'now',
      end_date: inSeconds(4),
      reservations: [{ resource_type: 'virtual:floatingip', network_id: network, amount: 1 }],
    });
    await waitFor(api, body.lease.id, 'ACTIVE');
    const grown = await api('PUT', `/v1/leases/${body.lease.id}`, { reservations: [{ id: body.lease.reservations[0].id, amount: 2 }] });
    if (grown.status !== 200) throw new Error(`growing the active lease: ${grown.status} ${JSON.stringify(grown.body)}`);
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // A real resource type with its cloud (network segments, Neutron in memory): the lessee's network
  // made at the start, the lease extended while active, ports and network taken away at the end.
  'network-segment-life': async (api, stack) => {
    const tag = String(3000 + Math.floor(Math.random() * 1000));
    await insertNetworkSegment(stack.db.pool, { id: randomUUID(), networkType: 'vlan', physicalNetwork: 'physnet-recorded', segmentId: tag, capabilities: { scenario: 'network-segment-life' } });
    const { body } = await api('POST', '/v1/leases', {
      name: 'network-segment-life',
      start_date: 'now',
      end_date: inSeconds(4),
      reservations: [{ resource_type: 'network', network_name: 'recorded-net', network_description: '', network_properties: '', resource_properties: JSON.stringify(['==', '$scenario', 'network-segment-life']) }],
    });
    await waitFor(api, body.lease.id, 'ACTIVE');
    const extended = await api('PUT', `/v1/leases/${body.lease.id}`, { end_date: inSeconds(6) });
    if (extended.status !== 200) throw new Error(`extending the active lease: ${extended.status} ${JSON.stringify(extended.body)}`);
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // A real resource type (instance slots, calendar only): booked on an enrolled host, grown while active, freed.
  'instance-life': async (api, stack) => {
    const name = `recorded-${randomUUID().slice(0, 8)}`;
    await stack.db.pool.query(`INSERT INTO hosts (hypervisor_hostname, nova_hypervisor_id, vcpus, memory_mb, local_gb) VALUES ($1, $1, 8, 16384, 100)`, [name]);
    await syncCapacityProviders(stack.db.pool, COMPUTE_KIND, [{ uuid: randomUUID(), name, host: name, capacity: { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 }, traits: [] }]);
    const { body } = await api('POST', '/v1/leases', {
      name: 'instance-life',
      start_date: 'now',
      end_date: inSeconds(4),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 2, affinity: 'None' }],
    });
    await waitFor(api, body.lease.id, 'ACTIVE');
    const grown = await api('PUT', `/v1/leases/${body.lease.id}`, { reservations: [{ id: body.lease.reservations[0].id, amount: 3 }] });
    if (grown.status !== 200) throw new Error(`growing the active lease: ${grown.status} ${JSON.stringify(grown.body)}`);
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // A pending lease whose host fails: booked again on the other host (the host monitor tells it).
  'heal-pending': async (api, stack) => {
    await scenarioHosts(stack, 'heal-pending');
    const { body } = await api('POST', '/v1/leases', { name: 'heal-pending', start_date: inSeconds(4), end_date: inSeconds(6), reservations: [hostReservationOf('heal-pending')] });
    const failed = await failHostOf(api, body.lease.id);
    await waitFor(api, body.lease.id, 'TERMINATED');
    hostsDown.delete(failed);
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // An active lease whose host fails: the other host replaces it until the end.
  'heal-active': async (api, stack) => {
    await scenarioHosts(stack, 'heal-active');
    const { body } = await api('POST', '/v1/leases', { name: 'heal-active', start_date: 'now', end_date: inSeconds(5), reservations: [hostReservationOf('heal-active')] });
    await waitFor(api, body.lease.id, 'ACTIVE');
    const failed = await failHostOf(api, body.lease.id);
    await waitFor(api, body.lease.id, 'TERMINATED');
    hostsDown.delete(failed);
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // A maintenance window over a pending lease's host: the lease moves to the other host; the window's workflow begins and ends on time.
  'maintenance-window': async (api, stack) => {
    await scenarioHosts(stack, 'maintenance-window');
    const { body } = await api('POST', '/v1/leases', { name: 'maintenance-window', start_date: inSeconds(6), end_date: inSeconds(8), reservations: [hostReservationOf('maintenance-window')] });
    const hostId = body.lease.reservations[0].host_ids[0];
    const window = await api('POST', `/v1/os-hosts/${hostId}/maintenance`, { start_date: inSeconds(2), end_date: inSeconds(9), reason: 'recorded scenario' });
    if (window.status !== 201) throw new Error(`booking the window: ${window.status} ${JSON.stringify(window.body)}`);
    const workflowId = `maintenance-${window.body.maintenance.id}`;
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return { workflowId };
  },
  // A host lease the API admitted itself (LK_ADMISSION=api): its workflow starts admitted, is renamed, lives, and is deleted.
  'admitted-by-api': async (api, stack) => {
    await scenarioHosts(stack, 'admitted-by-api');
    const { body } = await api('POST', '/v1/leases', { name: 'admitted-by-api', start_date: inSeconds(3), end_date: inSeconds(5), reservations: [hostReservationOf('admitted-by-api')] });
    await api('PUT', `/v1/leases/${body.lease.id}`, { name: 'admitted-by-api-renamed' });
    await waitFor(api, body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${body.lease.id}`);
    return body.lease.id;
  },
  // An occurrence of a series of recurring leases (admitted by the API with the others, in one transaction), deleted through the series.
  'series-occurrence': async (api, stack) => {
    await scenarioHosts(stack, 'series-occurrence');
    const created = await api('POST', '/v1/leases', { name: 'series-occurrence', start_date: inSeconds(3600), end_date: inSeconds(3660), reservations: [hostReservationOf('series-occurrence')], recurrence: 'FREQ=DAILY;COUNT=2' });
    if (created.status !== 201) throw new Error(`series: ${created.status} ${JSON.stringify(created.body)}`);
    const deleted = await api('DELETE', `/v1/series/${created.body.series.id}`);
    if (deleted.status !== 204) throw new Error(`series delete: ${deleted.status} ${JSON.stringify(deleted.body)}`);
    return created.body.leases[0].id;
  },
  // One notice's delivery: a project's webhook refuses it once (503), then takes it.
  'notice-delivery': async (api) => {
    const hook = await startWebhookReceiver({ path: '/recorded', failFirst: 1 });
    try {
      const project = { 'x-project-id': 'recorded-notices', 'x-user-id': 'recorder', 'x-roles': 'member' };
      const put = await api('PUT', '/v1/projects/recorded-notices/webhooks', { webhooks: [{ url: hook.url, events: ['lease.create'] }] }, project);
      if (put.status !== 200) throw new Error(`webhook: ${put.status} ${JSON.stringify(put.body)}`);
      const { body } = await api('POST', '/v1/leases', { name: 'notice-delivery', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [reservation] }, project);
      const delivered = await eventually(() => Promise.resolve(hook.received[0]), 60_000);
      await api('DELETE', `/v1/leases/${body.lease.id}`, undefined, project);
      return { workflowId: noticeWorkflowId(String(delivered.headers['idempotency-key'])) };
    } finally {
      await hook.close();
    }
  },
  // An offer hold that runs its course: its timer fires and it ends itself.
  'offer-hold-expires': async (api, stack) => {
    const { workflowId } = await holdScenarioOffer(api, stack, 'offer-hold-expires');
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    return { workflowId };
  },
  // An offer hold released (DELETE) before its expiry: the API tells its workflow, which ends.
  'offer-hold-released': async (api, stack) => {
    const { offerId, workflowId } = await holdScenarioOffer(api, stack, 'offer-hold-released');
    await api('DELETE', `/v1/offers/${offerId}/hold`);
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    return { workflowId };
  },
  // An offer hold accepted: it becomes a lease; the API tells its workflow, which ends.
  'offer-hold-accepted': async (api, stack) => {
    const { offerId, workflowId } = await holdScenarioOffer(api, stack, 'offer-hold-accepted');
    const accepted = await api('POST', `/v1/offers/${offerId}/accept`, { name: 'offer-hold-accepted' });
    if (accepted.status !== 201) throw new Error(`accept: ${accepted.status} ${JSON.stringify(accepted.body)}`);
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    await api('DELETE', `/v1/leases/${accepted.body.lease.id}`);
    return { workflowId };
  },
  // A hold its workflow places (a floating IP: its reserve runs in the worker), then released: the
  // workflow ends it and runs the type's end hook.
  'offer-hold-placed': async (api, stack) => {
    const network = randomUUID();
    await insertFloatingIp(stack.db.pool, { id: randomUUID(), networkId: network, subnetId: 'subnet', address: '203.0.113.210' });
    const { offerId, workflowId } = await holdAddressOffer(api, network);
    const released = await api('DELETE', `/v1/offers/${offerId}/hold`);
    if (released.status !== 204) throw new Error(`release: ${released.status} ${JSON.stringify(released.body)}`);
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    return { workflowId };
  },
  // A hold its workflow was to place, refused (the address was taken after the offer was made):
  // what it booked is ended and the update fails with the calendar's 409.
  'offer-hold-placement-refused': async (api, stack) => {
    const network = randomUUID();
    await insertFloatingIp(stack.db.pool, { id: randomUUID(), networkId: network, subnetId: 'subnet', address: '203.0.113.211' });
    const offer = await addressOffer(api, network);
    const taken = await api('POST', '/v1/leases', { name: 'offer-hold-placement-refused', start_date: offer.start_date, end_date: offer.end_date, reservations: [{ resource_type: 'virtual:floatingip', network_id: network, amount: 1 }] });
    if (taken.status !== 201) throw new Error(`create: ${taken.status} ${JSON.stringify(taken.body)}`);
    const refused = await api('POST', `/v1/offers/${offer.id}/hold`, {});
    if (refused.status !== 409) throw new Error(`hold: ${refused.status} ${JSON.stringify(refused.body)}`);
    const workflowId = offerHoldWorkflowId(placedHoldId(offer.id));
    await stack.temporal.client.workflow.getHandle(workflowId).result();
    await api('DELETE', `/v1/leases/${taken.body.lease.id}`);
    return { workflowId };
  },
  // The host monitor itself: a host fails and recovers (recorded while it runs on).
  // Approval (issue 42): a member's lease an approval rule holds PENDING_APPROVAL, approved, denied, or timed out (denied by its rule).
  'approval-approved': async (_api, stack) => approvalScenario(stack, 'approval-approved', 'approve'),
  'approval-denied': async (_api, stack) => approvalScenario(stack, 'approval-denied', 'deny'),
  'approval-timed-out': async (_api, stack) => approvalScenario(stack, 'approval-timed-out', 'none'),
  // An active lease's change waiting for approval (issue 42): approved (the end moves), denied, or timed out.
  'change-approval-approved': async (_api, stack) => changeApprovalScenario(stack, 'change-approval-approved', 'approve'),
  'change-approval-denied': async (_api, stack) => changeApprovalScenario(stack, 'change-approval-denied', 'deny'),
  'change-approval-timed-out': async (_api, stack) => changeApprovalScenario(stack, 'change-approval-timed-out', 'none'),
  // A running preemptible host lease a regular lease needs (issue 43): told after the admission, it takes the new end, warns, ends with the reason.
  preempted: async (api, stack) => {
    await scenarioHosts(stack, 'preempted');
    const lent = await api('POST', '/v1/leases', { name: 'preempted', start_date: inSeconds(2), end_date: inSeconds(3600), reservations: [{ ...hostReservationOf('preempted'), preemptible: true }] });
    await waitFor(api, lent.body.lease.id, 'ACTIVE');
    const needing = await api('POST', '/v1/leases', { name: 'preempting', start_date: inSeconds(6), end_date: inSeconds(8), reservations: [{ ...hostReservationOf('preempted'), min: 2, max: 2 }] });
    if (needing.status !== 201) throw new Error(`preempting: ${needing.status} ${JSON.stringify(needing.body)}`);
    await waitFor(api, lent.body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${lent.body.lease.id}`);
    await waitFor(api, needing.body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${needing.body.lease.id}`);
    return lent.body.lease.id;
  },
  // A preemptible host lease not started yet whose whole window a regular lease takes: it ends at once.
  'preempted-before-start': async (api, stack) => {
    await scenarioHosts(stack, 'preempted-before-start');
    const lent = await api('POST', '/v1/leases', { name: 'preempted-before-start', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [{ ...hostReservationOf('preempted-before-start'), preemptible: true }] });
    const needing = await api('POST', '/v1/leases', { name: 'preempting-early', start_date: inSeconds(1800), end_date: inSeconds(9000), reservations: [{ ...hostReservationOf('preempted-before-start'), min: 2, max: 2 }] });
    if (needing.status !== 201) throw new Error(`preempting-early: ${needing.status} ${JSON.stringify(needing.body)}`);
    await waitFor(api, lent.body.lease.id, 'TERMINATED');
    await api('DELETE', `/v1/leases/${lent.body.lease.id}`);
    await api('DELETE', `/v1/leases/${needing.body.lease.id}`);
    return lent.body.lease.id;
  },
  // A host lease lends one of its two hosts, a preemptible lease borrows it, the lender reclaims it: the borrower is cut
  // and ends, the lender takes the host back at the need (after the borrower's end), then is deleted.
  'lent-and-reclaimed': async (api, stack) => {
    await scenarioHosts(stack, 'lent-and-reclaimed');
    const lender = await api('POST', '/v1/leases', { name: 'lender', start_date: 'now', end_date: inSeconds(3600), reservations: [{ ...hostReservationOf('lent-and-reclaimed'), min: 2, max: 2 }] });
    const lenderId = lender.body.lease.id as string;
    await waitFor(api, lenderId, 'ACTIVE');
    const lent = await api('POST', `/v1/leases/${lenderId}/lend`, { count: 1, until: inSeconds(1800) });
    if (lent.status !== 200) throw new Error(`lend: ${lent.status} ${JSON.stringify(lent.body)}`);
    const borrower = await api('POST', '/v1/leases', { name: 'borrower', start_date: inSeconds(2), end_date: inSeconds(1200), reservations: [{ ...hostReservationOf('lent-and-reclaimed'), preemptible: true }] });
    if (borrower.status !== 201) throw new Error(`borrower: ${borrower.status} ${JSON.stringify(borrower.body)}`);
    await waitFor(api, borrower.body.lease.id, 'ACTIVE');
    const reclaimed = await api('POST', `/v1/leases/${lenderId}/reclaim`, {});
    if (reclaimed.status !== 200) throw new Error(`reclaim: ${reclaimed.status} ${JSON.stringify(reclaimed.body)}`);
    await waitFor(api, borrower.body.lease.id, 'TERMINATED');
    await eventually(async () => ((await api('GET', `/v1/leases/${lenderId}`)).body.lease.reservations[0].lendings?.[0]?.state === 'returned' ? true : undefined), 60_000);
    await api('DELETE', `/v1/leases/${borrower.body.lease.id}`);
    await api('DELETE', `/v1/leases/${lenderId}`);
    return lenderId;
  },
  'host-monitor': async (_api, stack) => {
    const name = `monitored-${randomUUID().slice(0, 8)}`;
    const hostId = await insertHost(stack.db.pool, { name });
    const state = async () => (await stack.db.pool.query<{ state: string }>('SELECT state FROM hosts WHERE id = $1', [hostId])).rows[0].state;
    hostsDown.add(name);
    await eventually(async () => ((await state()) === 'failed' ? true : undefined), 30_000);
    hostsDown.delete(name);
    await eventually(async () => ((await state()) === 'up' ? true : undefined), 30_000);
    return { workflowId: hostMonitorWorkflowId(stack.config.temporal.taskQueue) };
  },
  // The power planner over an ipmi_sim BMC: an idle host is powered off (its service disabled first), a lease 30 minutes
  // ahead wakes it (boot 2 s, margin 1795 s: due seconds later), its service is enabled once up, the boot recorded.
  'power-planner': async (api, stack) => {
    const bmc = await startSimulatedBmc({ power: 'on' });
    try {
      const name = `powered-${randomUUID().slice(0, 8)}`;
      plannerNova.serviceState = (host) => (host === name && bmc.power() === 'on' ? 'up' : 'down');
      plannerNova.service(name);
      const hostId = await insertHost(stack.db.pool, { name, capabilities: { scenario: 'power-planner' } });
      const put = await api('PUT', `/v1/os-hosts/${hostId}`, { power: { driver: 'ipmi', address: bmc.address, port: bmc.port, username: bmc.username, password: bmc.password } });
      if (put.status !== 200) throw new Error(`power settings: ${put.status} ${JSON.stringify(put.body)}`);
      await recordPowerState(stack.db.pool, hostId, 'on', Date.now());
      const planner = stack.temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack.config.temporal.taskQueue));
      await planner.signal(planNow);
      await eventually(() => Promise.resolve(bmc.power() === 'off' ? true : undefined), 30_000);
      const lease = await api('POST', '/v1/leases', { name: 'power-planner', start_date: inSeconds(1800), end_date: inSeconds(5400), reservations: [hostReservationOf('power-planner')] });
      if (lease.status !== 201) throw new Error(`lease: ${lease.status} ${JSON.stringify(lease.body)}`);
      await eventually(() => Promise.resolve(plannerNova.services.find((s) => s.host === name)?.status === 'enabled' && bmc.power() === 'on' ? true : undefined), 30_000);
      await api('DELETE', `/v1/leases/${lease.body.lease.id}`);
      return { workflowId: powerPlannerWorkflowId(stack.config.temporal.taskQueue) };
    } finally {
      await bmc.stop();
    }
  },
};

/** The power planner's Nova: a compute service is up while its BMC says on. */
const plannerNova = new FakeNova();

/** The recorder's deployment starts leases this long before their start (so every scenario covers it). */
export const RECORDED_LEAD_SECONDS = 1;

async function record(stack: TestStack): Promise<void> {
  const api = apiClient(stack.url);
  fs.mkdirSync(HISTORY_DIR, { recursive: true });
  // `npm run histories:record -- <scenario> …` records only those (the others keep their files).
  const only = process.argv.slice(2);
  for (const [name, scenario] of Object.entries(SCENARIOS)) {
    if (only.length > 0 && !only.includes(name)) continue;
    const outcome = await scenario(api, stack);
    const handle = stack.temporal.client.workflow.getHandle(typeof outcome === 'string' ? leaseWorkflowId(outcome) : outcome.workflowId);
    if (typeof outcome === 'string' || outcome.workflowId.startsWith('notice-')) await handle.result();
    // The CLI writes the proto3 JSON that replay reads (historyFromJSON).
    const json = execFileSync(temporalBinary(stack.config.cacheDir), [
      'workflow', 'show', '--workflow-id', handle.workflowId, '--address', stack.config.temporal.address,
      '--namespace', stack.config.temporal.namespace, '--output', 'json',
    ], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    const history = JSON.parse(json) as { events: unknown[] };
    const file = path.join(HISTORY_DIR, `${name}.json`);
    fs.writeFileSync(file, `${JSON.stringify(history, null, 1)}\n`);
    console.log(`${name}: ${history.events.length} events → ${path.relative(process.cwd(), file)}`);
  }
}

/** The network segment scenario's Neutron. */
const recordedNeutron = new FakeNeutron();

async function main(): Promise<void> {
  await startServers();
  const stack = await startTestStack({
    plugins: [new RecordingPlugin()],
    withPool: (pool) => [
      floatingIpPlugin({ pool, cloud: 'calendar-only' }),
      virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }),
      physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }),
      networkSegmentPlugin({ pool, cloud: () => ({ neutron: recordedNeutron as unknown as NeutronClient }) }),
    ],
    hostWatch: (pool) =>
      physicalHostWatch({ pool, source: { calendarOnly: (host) => (hostsDown.has(host.hypervisor_hostname) ? 'down in the recorded scenario' : undefined) }, freepool: 'freepool', failed: { name: 'failed', closedProjectId: 'nobody' } }),
    hostPower: (pool, config) =>
      deploymentHostPower(pool, config.power, {
        ironic: (): IronicClient => {
          throw new Error('no Ironic in the recording');
        },
        nova: () => plannerNova as unknown as NovaClient,
      }),
    // Offer holds of seconds: the expiry scenario's timer fires within the recording; the power planner's woken hosts looked at every 300 ms.
    config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 300 }, offerHolds: { ...config.offerHolds, holdMs: 3_000 }, approvalMinuteMs: RECORDED_APPROVAL_MINUTE_MS }),
    // Idle limits of seconds: every active lease is looked at; only idle-end's reservation tells it is idle.
    env: { LK_PREEMPT_WARNING_MINUTES: '0.05', LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_IDLE_LEASE_WARN_HOURS: '0.0005', LK_IDLE_LEASE_END_HOURS: '0.001', LK_PROVISIONING_LEAD_TIME_SECONDS: String(RECORDED_LEAD_SECONDS), LK_HOST_MONITOR_INTERVAL_SECONDS: '0.2', LK_HOST_FAIL_GRACE_SECONDS: '0', LK_HEALING_RETRY_MINUTES: '60',
      // The power planner (power-planner scenario): boots of 2 s woken 1795 s early; ipmi_sim speaks cipher suite 3.
      LK_POWER_PLANNER: 'on', LK_POWER_IPMI_CIPHER_SUITE: '3', LK_POWER_BOOT_SECONDS: '2', LK_POWER_WAKE_MARGIN_SECONDS: '1795', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '3600' },
  });
  try {
    await record(stack);
  } finally {
    await stack.stop();
    await stopServers();
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
