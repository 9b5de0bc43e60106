/**
 * The Blazar import and hostile rows (issue 39, point 6): Blazar kept what its API let through, and
 * one lease named with a NUL aborted the whole import, dry run included, with no report. Each lease
 * and host is held to the API's own rules before anything reaches PostgreSQL: one that breaks them
 * is reported as not importable, with the field and why, and the rest comes over. Blazar's rows
 * are given as readBlazar answers them (the module boundary): no MariaDB needed
 * (test/openstack/import-blazar.test.ts reads a real one on the rig).
 */
import { randomUUID } from 'node:crypto';
import { findLease } from '../src/db/leases';
import { formatReport, importFromBlazar, type ImportReport } from '../src/import/blazar-import';
import { BLAZAR_SCHEMA_REVISION, type BlazarData, type BlazarHost, type BlazarLease } from '../src/import/blazar-source';
import { apiClient, eventually, useTestStack } from '../dev-stack/stack';

const NOW = Date.now();
/** Blazar's DATETIME: naive UTC, whole seconds. */
const blazarDate = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
const DAY = 86_400_000;

const ids = {
  live: randomUUID(), spaced: randomUUID(), history: randomUUID(), historyRes: randomUUID(),
  nul: randomUUID(), esc: randomUUID(), bel: randomUUID(), surrogate: randomUUID(), long: randomUUID(), project: randomUUID(), user: randomUUID(),
  params: randomUUID(), paramsRes: randomUUID(), badHost: randomUUID(), badHostRes: randomUUID(),
};

function lease(id: string, name: string, extra: Partial<BlazarLease> = {}): BlazarLease {
  return { id, name, user_id: 'blazar-user', project_id: 'blazar-project', start_date: blazarDate(NOW + DAY), end_date: blazarDate(NOW + 2 * DAY), status: 'PENDING', degraded: 0, created_at: blazarDate(NOW - DAY), updated_at: null, ...extra };
}
function host(id: string, name: string): BlazarHost {
  return { id, vcpus: 8, cpu_info: '{}', hypervisor_type: 'fake', hypervisor_version: 1, hypervisor_hostname: name, service_name: name, memory_mb: 8192, local_gb: 100, availability_zone: 'nova', reservable: 1 };
}
const hostReservation = (reservationId: string, extra: { resource_properties?: string } = {}) => ({ reservation_id: reservationId, count_range: '1-1', hypervisor_properties: '', resource_properties: '', before_end: 'default', ...extra });
const reservation = (id: string, leaseId: string) => ({ id, lease_id: leaseId, resource_type: 'physical:host', status: 'pending', missing_resources: 0, resources_changed: 0 });

/** What the API refuses, each in one lease (or host), beside leases and a host it takes. */
const DATA: BlazarData = {
  revision: BLAZAR_SCHEMA_REVISION,
  leases: [
    lease(ids.live, 'good-live'),
    lease(ids.spaced, '  spaced  '),
    lease(ids.history, 'good-history', { status: 'TERMINATED', start_date: blazarDate(NOW - 3 * DAY), end_date: blazarDate(NOW - 2 * DAY), created_at: blazarDate(NOW - 4 * DAY) }),
    lease(ids.nul, 'nul\u0000name'),
    lease(ids.esc, 'esc \u001b[31mred'),
    lease(ids.bel, 'bell\u0007'),
    lease(ids.surrogate, 'half \ud800 a pair'),
    lease(ids.long, 'x'.repeat(300)),
    lease(ids.project, 'long-project', { project_id: 'p'.repeat(400) }),
    lease(ids.user, 'nul-user', { user_id: 'user\u0000' }),
    lease('not-a-uuid\u0000', 'bad-id'),
    lease(ids.params, 'nul-in-params'),
    lease(ids.badHost, 'on-a-bad-host'),
  ],
  reservations: [reservation(ids.historyRes, ids.history), reservation(ids.paramsRes, ids.params), reservation(ids.badHostRes, ids.badHost)],
  events: [],
  hostReservations: [hostReservation(ids.historyRes), hostReservation(ids.paramsRes, { resource_properties: '["==", "$rack", "a\u0000"]' }), hostReservation(ids.badHostRes)],
  hostAllocations: [{ compute_host_id: '8', reservation_id: ids.badHostRes }],
  hosts: [host('7', 'import-good'), host('8', 'import\u0000bad'), host('9', 'import-bad-capability')],
  capabilities: [
    { computehost_id: '7', property_name: 'rack', private: 0, capability_value: '10' },
    { computehost_id: '9', property_name: 'rack', private: 0, capability_value: 'ten\u001b' },
  ],
  instanceReservations: [],
  floatingIpReservations: [],
  floatingIpAllocations: [],
};

/** Why each hostile lease is left out (by the field that breaks a rule). */
const REFUSED: Array<[string, RegExp]> = [
  [ids.nul, /name: must not contain control characters/],
  [ids.esc, /name: must not contain control characters/],
  [ids.bel, /name: must not contain control characters/],
  [ids.surrogate, /name: must not contain control characters or invalid Unicode/],
  [ids.long, /name: must be at most 80 characters/],
  [ids.project, /project_id: expected at most 255 printable ASCII characters/],
  [ids.user, /user_id: expected at most 255 printable ASCII characters/],
  ['not-a-uuid\u0000', /id: expected a UUID/],
  [ids.params, new RegExp(`reservation ${ids.paramsRes}: resource_properties: must not contain control characters`)],
  [ids.badHost, /holds host "import\\u0000bad" \(Blazar id 8\), which is not importable: .*hypervisor_hostname: must not contain control characters/],
];

describe('the Blazar import and hostile rows: held to the API\'s rules, reported, the rest imported', () => {
  // The imported live leases' workflows end (a history lease has none, and stays with the database).
  const stack = useTestStack({}, {
    beforeStop: async (s) => {
      const asAdmin = apiClient(s.url, { 'x-auth-token': 'admin' });
      for (const id of [ids.live, ids.spaced]) await asAdmin('DELETE', `/v1/leases/${id}`);
      await eventually(async () => ((await Promise.all([ids.live, ids.spaced].map((id) => asAdmin('GET', `/v1/leases/${id}`)))).every((r) => r.status === 404) ? true : undefined));
    },
  });
  const deps = () => ({ pool: stack().db.pool, temporal: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, hosts: stack().config.hosts });
  const count = async (table: string) => Number((await stack().db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${table}`)).rows[0].n);

  function expectReported(report: ImportReport): void {
    expect(report.notImportable.map((n) => n.leaseId).sort()).toEqual(REFUSED.map(([id]) => id).sort());
    for (const [id, reason] of REFUSED) {
      const left = report.notImportable.find((n) => n.leaseId === id)!;
      expect(left.reason).toMatch(reason);
      expect(left.reason).toMatch(/^not importable: /);
    }
    expect(report.hostsNotImportable).toEqual([
      { blazarId: '8', name: 'import\u0000bad', reason: expect.stringMatching(/^hypervisor_hostname: must not contain control characters/) },
      { blazarId: '9', name: 'import-bad-capability', reason: expect.stringMatching(/^capability "rack": must not contain control characters/) },
    ]);
    expect(report.leases.map((l) => [l.id, l.name, l.action]).sort()).toEqual(
      [[ids.live, 'good-live', 'import'], [ids.spaced, 'spaced', 'import'], [ids.history, 'good-history', 'history']].sort(),
    );
    expect(report.hosts.map((h) => [h.name, h.action])).toEqual([['import-good', 'create']]);

    // The report names each one left out, and prints none of their control characters.
    const text = formatReport(report, 'blazar');
    for (const [id] of REFUSED) expect(text).toContain(id.replace('\u0000', '\\u0000'));
    // eslint-disable-next-line no-control-regex
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]|[\ud800-\udbff](?![\udc00-\udfff])/);
    expect(text).toContain(`Not importable (${REFUSED.length}):`);
    expect(text).toContain('Hosts not importable (2):');
  }

  it('dry run: every hostile lease and host reported with why, the others planned, nothing written', async () => {
    const report = await importFromBlazar(DATA, deps(), { apply: false, withHistory: true });
    expectReported(report);
    expect([await count('hosts'), await count('leases')]).toEqual([0, 0]);
  });

  it('--apply: the same reported, the rest imported as the API would keep it', async () => {
    const report = await importFromBlazar(DATA, deps(), { apply: true, withHistory: true });
    expectReported(report);
    expect((await stack().db.pool.query<{ hypervisor_hostname: string }>('SELECT hypervisor_hostname FROM hosts')).rows).toEqual([{ hypervisor_hostname: 'import-good' }]);
    expect((await stack().db.pool.query<{ id: string }>('SELECT id::text FROM leases ORDER BY id')).rows.map((r) => r.id)).toEqual([ids.live, ids.spaced, ids.history].sort());
    expect(await findLease(stack().db.pool, ids.spaced)).toMatchObject({ name: 'spaced', status: 'PENDING' });
    expect(await findLease(stack().db.pool, ids.history)).toMatchObject({ name: 'good-history', status: 'TERMINATED' });
  });
});
