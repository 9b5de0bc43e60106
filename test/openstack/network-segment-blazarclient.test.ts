/**
 * Debian's python3-blazarclient (3.5.0) and network reservations (issue 45), with a project
 * member's Keystone token: the library's `lease.create`, which Chameleon's python-chi calls with
 * `{"resource_type": "network", "network_name", "network_description", "network_properties",
 * "resource_properties"}`, reaches the API unchanged and creates the lease on a segment; the
 * shell's `--reservation resource_type=network,network_name=…` does not get that far in this
 * client version: its parser knows the keys of physical:host, virtual:instance and
 * virtual:floatingip only and stops on any other text value (a KeyError naming the key) before
 * sending anything (Chameleon's own blazarclient fork adds the network keys). Books no compute host
 * and makes nothing in Neutron (the segment's lease stays pending).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { keystoneAuthenticator } from '../../src/api/keystone-auth';
import { insertNetworkSegment } from '../../src/db/network-segments';
import { KeystoneSession } from '../../src/openstack';
import { networkSegmentPlugin } from '../../src/resources/network-segment';
import { apiClient, deleteAllLeases, useTestStack } from '../../dev-stack/stack';
import { rigClients, rigCredentials, uniqueName } from './support';

const run = promisify(execFile);
/** Blazar's request dates, whole minutes: a day from now, for an hour. */
const minute = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');

/** blazarclient's library, as python-chi calls it: `Client(blazar_url, auth_token).lease.create(...)`, the lease answered printed as JSON. */
const LIBRARY_CREATE = `
import json, sys
from blazarclient import client
args = json.loads(sys.argv[1])
blazar = client.Client(blazar_url=args["url"], auth_token=args["token"])
print(json.dumps(blazar.lease.create(args["name"], args["start"], args["end"], args["reservations"], [])))
`;

describe('python3-blazarclient and network reservations', () => {
  const admin = rigClients('leasekeeper-admin');
  let token: string;
  let projectAId: string;
  const stack = useTestStack(
    {
      withPool: (pool) => [networkSegmentPlugin({ pool, cloud: 'calendar-only' })],
      openstack: () => admin,
      authenticator: keystoneAuthenticator({ validateToken: (t) => admin.keystone.validateToken(t) }),
    },
    { beforeStop: () => deleteAllLeases(apiClient(stack().url, { 'x-auth-token': token })) },
  );
  const asA = () => apiClient(stack().url, { 'x-auth-token': token });
  const start = Date.now() + 86_400_000;
  const window = { start: minute(start), end: minute(start + 3_600_000) };
  const reservation = (name: string) => ({ resource_type: 'network', network_name: name, network_description: 'stitched to the exchange', network_properties: '["==", "$physical_network", "physnet1"]', resource_properties: '["==", "$stitch_provider", "fabric"]' });

  beforeAll(async () => {
    const session = await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate();
    token = session.token;
    projectAId = session.projectId;
    // Enrolled in the test's own database: the lease stays pending, so Neutron never sees the tag.
    await insertNetworkSegment(stack().db.pool, { id: randomUUID(), networkType: 'vlan', physicalNetwork: 'physnet1', segmentId: '250', capabilities: { stitch_provider: 'fabric' } });
  });

  it("the library's lease.create reaches the API unchanged and books the segment", async () => {
    const name = uniqueName('chi-net');
    const networkName = uniqueName('exchange-net');
    const { stdout } = await run('/usr/bin/python3', ['-c', LIBRARY_CREATE, JSON.stringify({ url: `${stack().url}/v1`, token, name, ...window, reservations: [reservation(networkName)] })], { timeout: 60_000 });
    const created = JSON.parse(stdout) as { id: string; project_id: string; reservations: Array<Record<string, unknown>> };
    expect(created.project_id).toBe(projectAId);
    const shown = (await asA()('GET', `/v1/leases/${created.id}`)).body.lease;
    expect(shown).toMatchObject({ name, status: 'PENDING', start_date: `${window.start.replace(' ', 'T')}:00.000000` });
    expect(shown.reservations).toEqual([
      expect.objectContaining({
        ...reservation(networkName),
        network_id: null,
        segment: { network_type: 'vlan', physical_network: 'physnet1', segment_id: '250' },
      }),
    ]);
  });

  it('the shell stops on --reservation resource_type=network in its own parser, and nothing reaches the API', async () => {
    const before = (await asA()('GET', '/v1/leases')).body.leases.length;
    const failed = await run(
      '/usr/bin/blazar',
      ['--os-auth-type', 'admin_token', '--os-endpoint', `${stack().url}/v1`, '--os-token', token, 'lease-create', '--reservation', `resource_type=network,network_name=${uniqueName('shell-net')}`, '--start-date', window.start, '--end-date', window.end, uniqueName('shell')],
      { timeout: 60_000 },
    ).then(
      () => undefined,
      (err: { stderr: string }) => err.stderr,
    );
    expect(failed).toMatch(/^'network_name'$/m); // blazarclient's KeyError, printed as it is
    expect((await asA()('GET', '/v1/leases')).body.leases).toHaveLength(before);
  });
});
