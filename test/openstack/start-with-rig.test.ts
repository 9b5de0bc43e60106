/**
 * `npm start` with no cloud in the environment serves the loopback OpenStack: here the rig the
 * test run brought up, which the stack reuses, enrols, books, and leaves running when stopped.
 * (A rig the stack starts itself it also stops: measured by hand, see docs/production.md.)
 */
import { launchChromium } from '../../dev-stack/fixtures/browser';
import { startDevStack } from '../../dev-stack/npm-start';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { apiClient, eventually, inSeconds } from '../../dev-stack/stack';
import { KeystoneSession, serverHost } from '../../src/openstack';
import { bootServer, deleteAggregateNamed, deleteServers, rigClients, rigCredentials, uniqueName } from './support';

describe('npm start with the loopback OpenStack', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const servers: string[] = [];
  const hostsIn = async (aggregate: string) => ((await admin.nova.listAggregates()).find((a) => a.name === aggregate)?.hosts ?? []).sort();

  it('reuses the running rig, enrols its hosts, carries a host lease out on it, and leaves the rig running when stopped', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, LK_FREEPOOL_AGGREGATE: freepool };
    for (const name of ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'OS_CLOUD', 'OS_AUTH_URL', 'OS_CLIENT_CONFIG_FILE', 'LK_OPENSTACK']) delete env[name];
    const stack = await startDevStack(env);
    try {
      await stack.expectOutput('healthy after', 150_000);
      expect(stack.output()).toContain('OpenStack (loopback rig, already running) ready');
      expect(stack.output()).toContain('hosts in the pool: fake-1 (enrolled now), fake-2 (enrolled now), fake-3 (enrolled now)');
      const api = apiClient(stack.apiUrl);
      const hosts = (await api('GET', '/v1/os-hosts')).body.hosts as Array<{ id: string; hypervisor_hostname: string }>;
      expect(hosts.map((h) => h.hypervisor_hostname).sort()).toEqual(['fake-1', 'fake-2', 'fake-3']);
      expect(await hostsIn(freepool)).toEqual(['fake-1', 'fake-2', 'fake-3']);

      // The README's try-it: a host for the next minutes moves into the lease's aggregate, and back.
      const created = await api('POST', '/v1/leases', { name: uniqueName('try-it'), start_date: 'now', end_date: inSeconds(600), reservations: [blazarHostReservation()] });
      expect(created.status).toBe(201);
      const { id, reservations } = created.body.lease;
      await eventually(async () => ((await api('GET', `/v1/leases/${id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 60_000);
      const [host] = (await api('GET', `/v1/leases/${id}`)).body.lease.reservations[0].hosts as string[];
      expect(await hostsIn(reservations[0].aggregate)).toEqual([host]);
      expect(await hostsIn(freepool)).not.toContain(host);
      // A caller without identity headers books for the rig admin's project: its server lands on the leased host.
      const { projectId } = await new KeystoneSession({ credentials: rigCredentials('leasekeeper-admin') }).authenticate();
      expect(created.body.lease.project_id).toBe(projectId);
      const server = await bootServer(admin, { zone: reservations[0].availability_zone }, (serverId) => servers.push(serverId));
      expect(server.status).toBe('ACTIVE');
      expect(serverHost(await admin.nova.getServer(server.id))).toBe(host);
      // The same in the calendar page, signed in as the form offers (the rig admin's project, as the CLI acts).
      const browser = await launchChromium();
      try {
        const page = await browser.newPage();
        page.setDefaultTimeout(20_000);
        await page.goto(`${stack.apiUrl}/calendar/`);
        await expect(page.getByLabel('Project').inputValue()).resolves.toBe(projectId);
        await page.getByRole('button', { name: 'Sign in' }).click();
        const listed = page.getByRole('region', { name: 'Your leases in view' }).getByRole('listitem').filter({ hasText: created.body.lease.name });
        await expect(listed.textContent()).resolves.toContain('ACTIVE');
        await listed.getByRole('link').click();
        await page.locator('dl.facts').getByText(host, { exact: true }).waitFor(); // the lease's hosts, read after the lease
      } finally {
        await browser.close();
      }
      expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
      await eventually(async () => ((await hostsIn(freepool)).includes(host) ? true : undefined), 60_000);
      await admin.nova.waitForServerDeleted(server.id, { timeoutMs: 60_000 }); // the lease's end deleted it

      for (const h of hosts) expect((await api('DELETE', `/v1/os-hosts/${h.id}`)).status).toBe(204);
      stack.child.kill('SIGTERM');
      expect(await stack.exited).toBe(0);
      expect(stack.output()).toContain('the loopback OpenStack was running before this start: left running');
      expect((await admin.nova.listHypervisors()).map((h) => h.state)).toEqual(['up', 'up', 'up']);
    } finally {
      stack.cleanUp();
      await deleteServers(servers.map((id) => ({ clients: admin, id })));
      await deleteAggregateNamed(admin, freepool);
    }
  }, 300_000);
});
