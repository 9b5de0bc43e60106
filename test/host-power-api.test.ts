/**
 * Hosts' power through os-hosts (issue 48): `power` settings on PUT (checked, stored, the password
 * never shown again), the host's `power_state`, `powered_off_since` and `next_needed` (its next
 * booking of any kind: a host lease, a maintenance window), and `POST /v1/os-hosts/{id}/power`
 * waking or putting to sleep an ipmi_sim BMC by hand, refused while the host is booked now or within
 * its boot time.
 */
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, inSeconds, useTestStack } from '../dev-stack/stack';
import { formatBlazarTimestamp } from '../src/domain/dates';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { HostPower } from '../src/resources/physical-host/power';
import { hostProblem } from '../src/resources/physical-host/health';
import { monitoredHosts, type MonitoredHost } from '../src/db/hosts';
import { recordPowerState } from '../src/db/host-power';
import type { ComputeService, Hypervisor } from '../src/openstack';
import { IronicClient } from '../src/openstack/ironic';
import { createSession } from '../src/openstack';
import { startSimulatedBmc, type SimulatedBmc } from './support/ipmi-sim';

describe('hosts’ power through os-hosts', () => {
  let bmc: SimulatedBmc | undefined;
  beforeAll(async () => {
    bmc = await startSimulatedBmc({ power: 'on' });
  });
  afterAll(() => bmc?.stop());
  const stack = useTestStack({
    // ipmi_sim speaks cipher suite 3 and does not say so when asked; a boot time of 10 minutes.
    env: { LK_POWER_IPMI_CIPHER_SUITE: '3', LK_POWER_BOOT_SECONDS: '600' },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  });
  const admin = apiClient(() => stack().url);
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' });
  const ipmi = () => ({ driver: 'ipmi', address: bmc!.address, port: bmc!.port, username: bmc!.username, password: bmc!.password });
  let hostId: string;
  let otherId: string;

  beforeAll(async () => {
    hostId = await insertHost(stack().db.pool, { name: 'power-1' });
    otherId = await insertHost(stack().db.pool, { name: 'power-2' });
  });

  it('stores the settings and shows them without the password, ever', async () => {
    const before = await admin('GET', `/v1/os-hosts/${hostId}`);
    expect(before.body.host).toMatchObject({ power: null, power_state: 'unknown', powered_off_since: null, next_needed: null });
    const put = await admin('PUT', `/v1/os-hosts/${hostId}`, { power: { ...ipmi(), boot_seconds: 300 } });
    expect(put.status).toBe(200);
    const shown = { driver: 'ipmi', address: '127.0.0.1', port: bmc!.port, username: bmc!.username, password_set: true, node: null, manage: true, boot_seconds: 300 };
    expect(put.body.host.power).toEqual(shown);
    // A later change keeps what it does not name, the password included.
    const changed = await admin('PUT', `/v1/os-hosts/${hostId}`, { power: { manage: false } });
    expect(changed.body.host.power).toEqual({ ...shown, manage: false });
    for (const answer of [put, changed, await admin('GET', `/v1/os-hosts/${hostId}`), await admin('GET', '/v1/os-hosts')]) {
      expect(JSON.stringify(answer.body)).not.toContain(bmc!.password);
    }
    // Not a capability: the property list does not name it.
    expect((await admin('GET', '/v1/os-hosts/properties?all=1')).body.resource_properties.map((p: { property: string }) => p.property)).not.toContain('power');
    await admin('PUT', `/v1/os-hosts/${hostId}`, { power: { manage: true, boot_seconds: null } });
  });

  it('refuses bad settings with a 400 naming the field, and changes nothing', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ driver: 'wol' }, /power\.driver: expected one of ipmi, ironic, command, none/],
      [{ address: '-oProxyCommand=x' }, /power\.address: expected an IP address or a host name/],
      [{ address: 'a'.repeat(256) }, /power\.address/],
      [{ port: 0 }, /power\.port/],
      [{ port: '623' }, /power\.port/],
      [{ username: 'x'.repeat(17) }, /power\.username/],
      [{ password: 'p'.repeat(21) }, /power\.password/],
      [{ password: 'tab\there' }, /power\.password: must not contain control characters/],
      [{ node: '../../etc' }, /power\.node/],
      [{ boot_seconds: 86_401 }, /power\.boot_seconds/],
      [{ manage: 'yes' }, /power\.manage/],
      [{ surprise: true }, /surprise/],
      ['not json', /power: expected an object/],
      [{ driver: 'ironic' }, /power: the ironic driver needs node/],
      [{ driver: 'command' }, /power: the command driver runs the deployment’s programs, and none are configured/],
    ];
    const before = (await admin('GET', `/v1/os-hosts/${otherId}`)).body;
    for (const [power, message] of cases) {
      const answer = await admin('PUT', `/v1/os-hosts/${otherId}`, { power, rack: 'r9' });
      expect({ power, status: answer.status }).toEqual({ power, status: 400 });
      expect(answer.body.error_message).toMatch(message);
    }
    // Nor half of it: the capability given beside a bad power setting was not set either.
    expect((await admin('GET', `/v1/os-hosts/${otherId}`)).body).toEqual(before);
    const incomplete = await admin('PUT', `/v1/os-hosts/${otherId}`, { power: { driver: 'ipmi', address: '10.0.0.9', username: 'admin' } });
    expect(incomplete).toMatchObject({ status: 400, body: { error_message: expect.stringMatching(/the ipmi driver needs password/) } });
  });

  it('powers the host off and on by hand through its BMC, and says since when it is off', async () => {
    const off = await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' });
    expect(off.status).toBe(200);
    expect(bmc!.power()).toBe('off');
    expect(off.body.host).toMatchObject({ power_state: 'off', powered_off_since: expect.any(String) });
    const since = off.body.host.powered_off_since;
    // Off again: still off since the first time.
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' })).body.host.powered_off_since).toBe(since);
    expect((await admin('GET', `/v1/os-hosts/${hostId}`)).body.host).toMatchObject({ power_state: 'off', powered_off_since: since });
    const on = await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'on' });
    expect(on.body.host).toMatchObject({ power_state: 'on', powered_off_since: null });
    expect(bmc!.power()).toBe('on');
  });

  it('tells the host monitor that a host put to sleep, or woken within its boot time and the resume time-out, is down on purpose', async () => {
    const expected = async () => (await monitoredHosts(stack().db.pool)).find((h) => h.id === hostId)!.power_down_expected;
    // Woken by the test before (booting still), then as if long ago: its boot deadline passed, its service must be up.
    const wokenLongAgo = () => stack().db.pool.query("UPDATE host_power SET wake_requested_at = now() - interval '21 minutes', boot_deadline_at = now() - interval '1 minute' WHERE host_id = $1", [hostId]);
    expect(await expected()).toBe(true);
    await wokenLongAgo();
    expect(await expected()).toBe(false);
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' })).status).toBe(200);
    expect(await expected()).toBe(true);
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'on' })).status).toBe(200);
    // Booting: not yet a failure.
    expect(await expected()).toBe(true);
    // Woken longer ago than its boot time and the resume time-out: its service must be up by now.
    await wokenLongAgo();
    expect(await expected()).toBe(false);
  });

  it('shows the next booking of any kind as next_needed, and refuses off within the boot time (409)', async () => {
    // A maintenance window 5 minutes ahead: within the 10-minute boot time.
    const window = await admin('POST', `/v1/os-hosts/${hostId}/maintenance`, { start_date: inSeconds(300), end_date: inSeconds(3600), reason: 'firmware' });
    expect(window.status).toBe(201);
    const host = (await admin('GET', `/v1/os-hosts/${hostId}`)).body.host;
    expect(host.next_needed).toBe(window.body.maintenance.start_date.replace('T', ' ').slice(0, 19));
    const refused = await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' });
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toMatch(/within its boot time \(600 s\): it cannot be powered off/);
    expect(bmc!.power()).toBe('on');
    await admin('DELETE', `/v1/maintenance/${window.body.maintenance.id}`);

    // A host lease a day ahead: next_needed is its start; off is allowed then.
    const lease = await admin('POST', '/v1/leases', {
      name: 'power-next',
      start_date: inSeconds(86_400),
      end_date: inSeconds(90_000),
      reservations: [hostReservation({ hypervisor_properties: '["==", "$hypervisor_hostname", "power-1"]' })],
    });
    expect(lease.status).toBe(201);
    const needed = (await admin('GET', `/v1/os-hosts/${hostId}`)).body.host.next_needed;
    expect(needed).toBe(formatBlazarTimestamp(Date.parse(`${lease.body.lease.start_date}Z`)));
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' })).status).toBe(200);
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'on' })).status).toBe(200);
  });

  it("gives the planner every host with a driver: its power, its next need, its boot time and its capability set", async () => {
    const power = new HostPower(stack().db.pool, {
      drivers: { timeoutMs: 1_000, ironic: () => new IronicClient(createSession({ type: 'static', endpoints: { baremetal: 'http://127.0.0.1:1' } })) },
      defaultBootMs: 600_000,
    });
    const window = await admin('POST', `/v1/os-hosts/${hostId}/maintenance`, { start_date: inSeconds(7200), end_date: inSeconds(9000), reason: 'planned' });
    const now = Date.now();
    // power-2 has no settings yet (the none driver): not the planner's.
    const planned = await power.plannedHosts(now);
    expect(planned).toEqual([{ id: hostId, power: 'on', manage: true, nextNeededMs: Date.parse(`${window.body.maintenance.start_date}Z`), busyUntilMs: null, bootMs: 600_000, reserveClass: expect.any(String) }]);
    // For the awake reserve, power-2 counts too (on, never the planner's to power off): the same capability set as power-1 (they differ only in name).
    const withUnpowered = (await power.plannedHosts(now, { withUnpowered: true })).filter((host) => [hostId, otherId].includes(host.id));
    expect(withUnpowered).toEqual([planned[0], { id: otherId, power: 'on', manage: false, nextNeededMs: null, busyUntilMs: null, bootMs: 600_000, reserveClass: planned[0].reserveClass }]);
    await admin('DELETE', `/v1/maintenance/${window.body.maintenance.id}`);
  });

  it('answers a host without a driver, a bad action and a BMC refusing the password with clear errors', async () => {
    expect(await admin('POST', `/v1/os-hosts/${otherId}/power`, { action: 'on' })).toMatchObject({ status: 409, body: { error_message: expect.stringMatching(/has no power driver/) } });
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, { action: 'reboot' })).status).toBe(400);
    expect((await admin('POST', `/v1/os-hosts/${hostId}/power`, {})).status).toBe(400);
    expect((await admin('POST', '/v1/os-hosts/999999/power', { action: 'on' })).status).toBe(404);
    await admin('PUT', `/v1/os-hosts/${otherId}`, { power: { ...ipmi(), password: 'wrong-password' } });
    const refused = await admin('POST', `/v1/os-hosts/${otherId}/power`, { action: 'off' });
    expect(refused).toMatchObject({ status: 502, body: { error_name: 'PowerAuthError', error_message: expect.stringMatching(/refused user/) } });
    expect(JSON.stringify(refused.body)).not.toContain('wrong-password');
    expect(bmc!.power()).toBe('on');
  });

  it('shows members nothing of it', async () => {
    expect((await member('GET', `/v1/os-hosts/${hostId}`)).status).toBe(403);
    expect((await member('POST', `/v1/os-hosts/${hostId}/power`, { action: 'off' })).status).toBe(403);
    expect(bmc!.power()).toBe('on');
  });
  it('gives a lease starting now an awake host before a sleeping one (a lower id), the sleeping one only when needed', async () => {
    const asleep = await insertHost(stack().db.pool, { name: 'prefer-asleep', capabilities: { scenario: 'prefer-awake' } });
    await insertHost(stack().db.pool, { name: 'prefer-awake', capabilities: { scenario: 'prefer-awake' } });
    expect((await admin('PUT', `/v1/os-hosts/${asleep}`, { power: ipmi() })).status).toBe(200);
    await recordPowerState(stack().db.pool, asleep, 'off', Date.now());
    const wanted = (min: number) => ({ name: `prefer-${min}`, start_date: 'now', end_date: inSeconds(3600), reservations: [hostReservation({ min, max: min, resource_properties: JSON.stringify(['==', '$scenario', 'prefer-awake']) })] });
    const one = await admin('POST', '/v1/leases', wanted(1));
    expect(one.status).toBe(201);
    expect(one.body.lease.reservations[0].hosts).toEqual(['prefer-awake']);
    await admin('DELETE', `/v1/leases/${one.body.lease.id}`);
    // Both needed: the sleeping one too.
    const two = await admin('POST', '/v1/leases', wanted(2));
    expect(two.status).toBe(201);
    expect([...two.body.lease.reservations[0].hosts].sort()).toEqual(['prefer-asleep', 'prefer-awake']);
    await admin('DELETE', `/v1/leases/${two.body.lease.id}`);
  });
});

describe('the host monitor and a host powered off on purpose', () => {
  const host = (powerDownExpected: boolean): MonitoredHost => ({
    id: '1', hypervisor_hostname: 'node-1', service_name: 'node-1', state: 'up', in_maintenance: false, compute_disabled_for_maintenance: false, power_down_expected: powerDownExpected,
  });
  const down = [{ id: 's1', binary: 'nova-compute', host: 'node-1', zone: 'nova', status: 'enabled', state: 'down', updated_at: '2026-11-28T00:00:00Z', disabled_reason: null }] as ComputeService[];
  const hypervisors = [{ hypervisor_hostname: 'node-1', service: { host: 'node-1' } }] as Hypervisor[];

  it('sees no failure in its compute service down, only when the power-down is expected', () => {
    expect(hostProblem(host(true), down, hypervisors)).toBeUndefined();
    expect(hostProblem(host(false), down, hypervisors)).toMatch(/its compute service is down/);
    // A hypervisor gone from Nova is a failure whatever the power.
    expect(hostProblem(host(true), down, [])).toMatch(/hypervisor is gone/);
  });
});
