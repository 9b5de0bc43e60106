/**
 * Host inventory and host leases end to end with the OpenStack rig: enrol fake-1..3 through the
 * API with the real Blazar client, lease them, see the bookings, and get a 409 with the earliest
 * start when all three are taken.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { apiClient, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, FLAVOR, IMAGE, rigClients, uniqueName } from './support';

const run = promisify(execFile);
const HOSTS = ['fake-1', 'fake-2', 'fake-3'];

function day(offsetDays: number, hour: number): string {
  const d = new Date(Date.now() + offsetDays * 86_400_000);
  d.setUTCHours(hour, 0, 0, 0);
  return d.toISOString().slice(0, 16).replace('T', ' ');
}

describe('hosts and host leases with the OpenStack rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
      openstack: () => admin,
    },
    {
      // Leave the rig as we found it: hosts out of our pool aggregate, the aggregate gone.
      beforeStop: async () => {
        const hosts = (await api('GET', '/v1/os-hosts')).body?.hosts ?? [];
        for (const lease of (await api('GET', '/v1/leases')).body?.leases ?? []) await api('DELETE', `/v1/leases/${lease.id}`);
        for (const host of hosts) await api('DELETE', `/v1/os-hosts/${host.id}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );
  const api = apiClient(() => stack().url);
  const blazar = (...args: string[]) => run('/usr/bin/blazar', ['--os-auth-type', 'none', '--os-endpoint', `${stack().url}/v1`, ...args], { timeout: 60_000 });

  it('refuses an unknown hypervisor (404) and a host that runs servers (409)', async () => {
    const unknown = await api('POST', '/v1/os-hosts', { name: 'no-such-host' });
    expect(unknown).toMatchObject({ status: 404, body: { error_message: "Host 'no-such-host' not found! Nova has no hypervisor of that name." } });
    // Nova refuses such a pattern (400): the name is looked for in the whole list (the fuzzer found a 502 here).
    const oddName = await api('POST', '/v1/os-hosts', { name: 'Q7w>pt' });
    expect(oddName).toMatchObject({ status: 404, body: { error_code: 404, error_message: "Host 'Q7w>pt' not found! Nova has no hypervisor of that name." } });

    const flavor = (await admin.nova.listFlavors()).find((f) => f.name === FLAVOR)!;
    const image = (await admin.glance.listImages({ name: IMAGE }))[0];
    const server = await admin.nova.createServer({ name: uniqueName('busy'), flavorRef: flavor.id, imageRef: image.id, networks: 'none', host: 'fake-3' });
    try {
      await admin.nova.waitForServer(server.id, (s) => s.status === 'ACTIVE', { timeoutMs: 60_000 });
      const busy = await api('POST', '/v1/os-hosts', { name: 'fake-3' });
      expect(busy.status).toBe(409);
      expect(busy.body.error_message).toMatch(/^Servers \[[0-9a-f-]{36}\] found for host fake-3\. Only an empty host can be made reservable\.$/);
    } finally {
      await admin.nova.deleteServer(server.id);
      await admin.nova.waitForServerDeleted(server.id, { timeoutMs: 60_000 });
    }
  }, 120_000);

  it('enrols fake-1..3 with blazarclient into the pool aggregate, with capabilities', async () => {
    for (const host of HOSTS) {
      const { stdout } = await blazar('host-create', host, '--extra', `rack=${host === 'fake-1' ? '10' : '9'}`);
      expect(stdout).toMatch(new RegExp(`\\|\\s+hypervisor_hostname\\s+\\|\\s+${host}\\s+\\|`));
    }
    const list = (await blazar('host-list')).stdout;
    for (const host of HOSTS) expect(list).toMatch(new RegExp(`\\|\\s+\\d+\\s+\\|\\s+${host}\\s+\\|\\s+10\\s+\\|\\s+8192\\s+\\|\\s+1028\\s+\\|`));
    const aggregate = (await admin.nova.listAggregates()).find((a) => a.name === freepool)!;
    expect([...aggregate.hosts].sort()).toEqual(HOSTS);
    expect(aggregate.metadata.filter_tenant_id).toBe('leasekeeper-freepool');
    expect((await api('POST', '/v1/os-hosts', { name: 'fake-1' })).status).toBe(409); // already enrolled
    expect((await api('POST', '/v1/os-hosts', { name: 'fake-1', ['x'.repeat(65)]: 'v' })).status).toBe(400);
    const properties = await api('GET', '/v1/os-hosts/properties?detail=True');
    expect(properties.body.resource_properties).toEqual([{ property: 'rack', private: false, values: ['10', '9'] }]);
    // Blazar's host JSON: Nova's hypervisor_version, an integer, and `status` (null: Blazar never sets it).
    const versions = new Map((await admin.nova.listHypervisors()).map((h) => [h.hypervisor_hostname, h.hypervisor_version]));
    const hosts = (await api('GET', '/v1/os-hosts')).body.hosts as Array<{ hypervisor_hostname: string; hypervisor_version: unknown; status: unknown }>;
    expect(hosts.map((h) => [h.hypervisor_hostname, h.hypervisor_version, h.status])).toEqual(HOSTS.map((name) => [name, versions.get(name), null]));
    expect(typeof hosts[0].hypervisor_version).toBe('number');
  });

  it('leases hosts with blazarclient, shows the bookings, and answers 409 with the earliest start when all are taken', async () => {
    const start = day(30, 9);
    const end = day(30, 17);
    for (const name of ['h1', 'h2', 'h3']) {
      const { stdout } = await blazar(
        'lease-create', '--physical-reservation', 'min=1,max=1,hypervisor_properties=[">=", "$vcpus", "2"],resource_properties=',
        '--start-date', start, '--end-date', end, name,
      );
      expect(stdout).toMatch(/Created a new lease/);
    }
    const allocations = await api('GET', '/v1/os-hosts/allocations');
    expect(allocations.body.allocations.map((a: { hypervisor_hostname: string; reservations: unknown[] }) => [a.hypervisor_hostname, a.reservations.length]).sort()).toEqual(HOSTS.map((h) => [h, 1]));

    const fourth = await blazar(
      'lease-create', '--physical-reservation', 'min=1,max=1,hypervisor_properties=[">=", "$vcpus", "2"],resource_properties=',
      '--start-date', start, '--end-date', end, 'h4',
    ).catch((err: { stderr: string; code: number }) => err);
    expect((fourth as { code: number }).code).not.toBe(0);
    expect((fourth as { stderr: string }).stderr).toContain(`the same lease fits from ${end} to ${day(31, 1)}`);

    // numeric comparison: rack 10 >= 9 (Blazar would compare "10" and "9" as text)
    const res = await api('POST', '/v1/leases', {
      name: 'rack', start_date: day(40, 9), end_date: day(40, 10),
      reservations: [blazarHostReservation({ max: 3, resource_properties: '[">=", "$rack", "10"]' })],
    });
    expect(res.body.lease.reservations[0].hosts).toEqual(['fake-1']);

    // a capability a future booking relies on cannot change; the host cannot leave the pool
    const fake1 = (await api('GET', '/v1/os-hosts')).body.hosts.find((h: { hypervisor_hostname: string }) => h.hypervisor_hostname === 'fake-1');
    const change = await api('PUT', `/v1/os-hosts/${fake1.id}`, { rack: '1' });
    expect(change.status).toBe(409);
    expect(change.body.error_message).toMatch(/^capability rack of host fake-1 is used by lease rack/);
    expect((await api('DELETE', `/v1/os-hosts/${fake1.id}`)).status).toBe(409);

    // As Blazar's own API tests do: delete the host's leases, then the host at once (a lease delete is synchronous).
    const held = (await api('GET', `/v1/os-hosts/${fake1.id}/allocation`)).body.allocation.reservations as Array<{ lease_id: string }>;
    expect(held.length).toBeGreaterThan(0);
    for (const { lease_id } of held) expect((await api('DELETE', `/v1/leases/${lease_id}`)).status).toBe(204);
    expect((await api('DELETE', `/v1/os-hosts/${fake1.id}`)).status).toBe(204);
  }, 120_000);
});
