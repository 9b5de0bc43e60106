/**
 * The usage policy through the API, on the real stack (Temporal, PostgreSQL): rules from
 * LK_POLICY_FILE and from `PUT /v1/projects/{id}/policy`, refusals as 403 with Blazar's error body,
 * nothing left booked by a refused lease or update, no over-admission under concurrent creates,
 * extension rules on a running lease, and admins' exemption.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig } from '../src/config';
import { usagePolicy } from '../src/policy';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const POLICY = `
defaults:
  max_hosts: 2
  extension: { within_last: 1h, max_each: 2h, max_count: 1 }
projects:
  project-b: { max_hosts: null, max_leases: 1 }
`;
const policyFile = path.join(mkdtempSync(path.join(tmpdir(), 'lk-policy-api-')), 'policy.yaml');
writeFileSync(policyFile, POLICY);

const ALICE = { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' };
const BOB = { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' };
const ADMIN = { 'x-auth-token': 'admin' };

describe('usage policy through the API', () => {
  const stack = useTestStack({ env: { LK_POLICY_FILE: policyFile }, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const asAlice = apiClient(() => stack().url, ALICE);
  const asBob = apiClient(() => stack().url, BOB);
  const asAdmin = apiClient(() => stack().url, ADMIN);
  /** A window of its own per test, hours ahead, so that tests do not meet. */
  const window = (hoursAhead: number, hours = 2) => ({ start_date: inSeconds(hoursAhead * 3600), end_date: inSeconds((hoursAhead + hours) * 3600) });
  const liveLeases = async (headers: typeof ALICE) => (await apiClient(() => stack().url, headers)('GET', '/v1/leases')).body.leases as Array<{ id: string; name: string }>;

  beforeAll(async () => {
    for (let i = 1; i <= 6; i++) await insertHost(stack().db.pool, { name: `policy-api-host-${i}` });
  });

  it('refuses a lease over the project\'s hosts at once with 403 and Blazar\'s error body, and leaves nothing booked', async () => {
    const first = await asAlice('POST', '/v1/leases', { name: 'two-hosts', ...window(10), reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(first.status).toBe(201);
    const over = await asAlice('POST', '/v1/leases', { name: 'one-more', ...window(11), reservations: [hostReservation()] });
    expect(over.status).toBe(403);
    expect(over.body).toMatchObject({ error_code: 403, error_name: 403, rule: 'max_hosts', limit: 2, held: 2, wanted: 1, room: 0 });
    expect(over.body.error_message).toMatch(/^Usage policy: max_hosts: project project-a may hold at most 2 hosts at once; its other leases hold up to 2 hosts between .*; this lease needs 1 host; nothing more fits in this window\.$/);
    expect((await liveLeases(ALICE)).map((l) => l.name)).toEqual(['two-hosts']);
    // Not overlapping: allowed. The refused lease booked nothing: another project takes 4 hosts in its window.
    expect((await asAlice('POST', '/v1/leases', { name: 'later', ...window(13), reservations: [hostReservation()] })).status).toBe(201);
    expect((await asBob('POST', '/v1/leases', { name: 'the-rest', ...window(11), reservations: [hostReservation({ min: 4, max: 4 })] })).status).toBe(201);
  });

  it('never admits past a limit under concurrent creates', async () => {
    const creates = await Promise.all(
      Array.from({ length: 6 }, (_, i) => asAlice('POST', '/v1/leases', { name: `race-${i}`, ...window(30), reservations: [hostReservation()] })),
    );
    const statuses = creates.map((c) => c.status).sort();
    expect(statuses).toEqual([201, 201, 403, 403, 403, 403]);
    expect((await liveLeases(ALICE)).filter((l) => l.name.startsWith('race-'))).toHaveLength(2);
  });

  it('refuses an update that would exceed a limit, and keeps the lease as it was', async () => {
    const lease = (await asAlice('POST', '/v1/leases', { name: 'grows', ...window(40), reservations: [hostReservation()] })).body.lease;
    expect((await asAlice('POST', '/v1/leases', { name: 'neighbour', ...window(43), reservations: [hostReservation()] })).status).toBe(201);
    const grown = await asAlice('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, min: 2, max: 2 }] });
    expect(grown.status).toBe(200);
    // Moving it onto the neighbour's window with 2 hosts: 3 at once.
    const moved = await asAlice('PUT', `/v1/leases/${lease.id}`, { end_date: inSeconds(44 * 3600) });
    expect(moved.status).toBe(403);
    expect(moved.body.rule).toBe('max_hosts');
    const now = (await asAlice('GET', `/v1/leases/${lease.id}`)).body.lease;
    expect(now.end_date).toBe(grown.body.lease.end_date);
    // Renaming is never refused, even over a limit tightened since.
    expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { max_hosts: 1 })).status).toBe(200);
    expect((await asAlice('PUT', `/v1/leases/${lease.id}`, { name: 'renamed' })).status).toBe(200);
    expect((await asAdmin('DELETE', '/v1/projects/project-a/policy')).status).toBe(204);
  });

  it('lets admins set a project\'s rules over the file\'s, and shows every layer; members may only read their own', async () => {
    const shown = await asAlice('GET', '/v1/projects/project-a/policy');
    expect(shown.status).toBe(200);
    expect(shown.body.policy).toMatchObject({ project_id: 'project-a', project: null, project_file: null, effective: { max_hosts: 2, max_lease_duration: '8760h' } });
    expect((await asAlice('GET', '/v1/projects/project-b/policy')).status).toBe(403);
    expect((await asAlice('PUT', '/v1/projects/project-a/policy', { max_hosts: 10 })).body).toMatchObject({ error_code: 403 });
    const bad = await asAdmin('PUT', '/v1/projects/project-a/policy', { max_host: 3 });
    expect(bad.status).toBe(400);
    expect(bad.body.error_message).toBe('unknown field(s) "max_host"');
    const badDuration = await asAdmin('PUT', '/v1/projects/project-a/policy', { extension: { within_last: '2 days' } });
    expect(badDuration.body.error_message).toMatch(/^extension\.within_last: expected a duration such as "48h"/);

    const set = await asAdmin('PUT', '/v1/projects/project-a/policy', { max_hosts: 3, budget: { period: 'month', host_hours: 1000 } });
    expect(set.status).toBe(200);
    expect(set.body.policy).toMatchObject({ project: { max_hosts: 3 }, effective: { max_hosts: 3, budget: { period: 'month', host_hours: 1000 } }, updated_by: 'admin' });
    const third = await asAlice('POST', '/v1/leases', { name: 'third-host', ...window(31), reservations: [hostReservation()] });
    expect(third.status).toBe(201);
    expect((await asAdmin('DELETE', '/v1/projects/project-a/policy')).status).toBe(204);
    expect((await asAdmin('DELETE', '/v1/projects/project-a/policy')).status).toBe(404);
    expect((await asAlice('GET', '/v1/projects/project-b/policy', undefined, BOB)).status).toBe(200);
    expect((await asBob('GET', '/v1/projects/project-b/policy')).body.policy.project_file).toEqual({ max_hosts: null, max_leases: 1 });
  });

  it('applies per-project file entries (a lifted limit, a lease cap), and exempts admins', async () => {
    // project-b has no host limit but one live lease at most (it holds one from the first test).
    const second = await asBob('POST', '/v1/leases', { name: 'second', ...window(60) });
    expect(second.status).toBe(403);
    expect(second.body.error_message).toBe('Usage policy: max_leases: project project-b may have at most 1 lease(s) not yet ended, and has 1; delete or end one first.');
    const byAdmin = await asAdmin('POST', '/v1/leases', { name: 'admin-many', ...window(70), reservations: [hostReservation({ min: 5, max: 5 })] });
    expect(byAdmin.status).toBe(201);
  });

  it('holds a running lease to the extension rules: within the last hour, at most 2 h, once', async () => {
    const running = await asAlice('POST', '/v1/leases', { name: 'running', start_date: 'now', end_date: inSeconds(30 * 60) });
    expect(running.status).toBe(201);
    const id = running.body.lease.id;
    await eventually(async () => ((await asAlice('GET', `/v1/leases/${id}`)).body.lease.status === 'ACTIVE' ? true : undefined));
    const end = Date.parse(`${running.body.lease.end_date}Z`);
    const tooMuch = await asAlice('PUT', `/v1/leases/${id}`, { end_date: inSeconds(2 * 3600 + 60, end) });
    expect(tooMuch.status).toBe(403);
    expect(tooMuch.body.error_message).toMatch(/^Usage policy: extension: at most 2 h per extension; this one adds 2\.02 h; it fits with end_date /);
    const extended = await asAlice('PUT', `/v1/leases/${id}`, { end_date: inSeconds(3600, end) });
    expect(extended.status).toBe(200);
    const again = await asAlice('PUT', `/v1/leases/${id}`, { end_date: inSeconds(3600 + 60, Date.parse(`${extended.body.lease.end_date}Z`)) });
    expect(again.status).toBe(403);
    expect(again.body.error_message).toMatch(/^Usage policy: extension: (a lease may be extended only within the last 1 h before its end|a lease may be extended at most 1 time)/);
    // Ending it early is a shortening: always allowed.
    expect((await asAlice('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
  });

  it('refuses a bad policy file or external filter setting at start, in one line naming it', () => {
    const bad = path.join(path.dirname(policyFile), 'bad.yaml');
    writeFileSync(bad, 'defaults:\n  budget: { period: month, host_hour: 5 }\n');
    const start = (env: Record<string, string>) => () => usagePolicy(stack().db.pool, loadConfig(env));
    expect(start({ LK_POLICY_FILE: bad })).toThrow(ConfigError);
    expect(start({ LK_POLICY_FILE: bad })).toThrow(/^invalid configuration: LK_POLICY_FILE .*bad\.yaml: defaults\.budget: unknown key\(s\) host_hour$/);
    expect(start({ LK_POLICY_EXTERNAL_URL: 'ftp://policy.example' })).toThrow(/^invalid configuration: LK_POLICY_EXTERNAL_URL=/);
    expect(start({ LK_POLICY_FILE: policyFile })).not.toThrow();
  });
});
