/**
 * The migration from a running Blazar (`npm run import:blazar`), against the rig: a MariaDB database
 * of our own with Blazar's schema (test/fixtures/blazar-schema.sql), filled as a running Blazar would
 * leave it — an active lease whose hosts sit in Blazar's aggregate for it, a pending one, a
 * terminated one, two leases Blazar double-booked on one host, one of a type leasekeeper has
 * not got, and one whose name holds a NUL and ESC (as Blazar's API let through): reported as not
 * importable by the API's rules, where it once aborted the whole run. The dry run changes nothing and lists the conflict; --apply imports; a second --apply
 * does nothing new. Then leasekeeper carries the leases on: the pending one starts on time (its host
 * into its aggregate), the active one ends on time (its host back in the pool, Blazar's aggregate gone).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import mysql from 'mysql2/promise';
import type { Lease } from '../../src/domain/lease';
import { findLease } from '../../src/db/leases';
import { parseImportArguments } from '../../src/import/arguments';
import { formatReport, importFromBlazar, type ImportReport } from '../../src/import/blazar-import';
import { describeConnection, parseBlazarUrl, readBlazar } from '../../src/import/blazar-source';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { physicalHostParams } from '../../src/resources/physical-host/params';
import { leaseWorkflowId } from '../../workflows/lease/messages';
import { apiClient, eventually, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, REPO_ROOT, RIG_DIR, rigClients, uniqueName } from './support';

const MYSQL_PORT = Number(process.env.LK_OS_PORT_BASE ?? 10000) + 3306;
const SCHEMA = fs.readFileSync(path.join(REPO_ROOT, 'test', 'fixtures', 'blazar-schema.sql'), 'utf8');

/** Blazar's DATETIME: naive UTC, whole seconds. */
const blazarDate = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
const wholeSecond = (ms: number) => Math.floor(ms / 1000) * 1000;
/** A name Blazar's API let through and PostgreSQL cannot even be asked about. */
const HOSTILE_NAME = 'nul\u0000 esc \u001b[31m';

describe('importing a running Blazar', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool'); // Blazar's pool aggregate, which leasekeeper takes over
  const database = `blazar_import_${randomBytes(4).toString('hex')}`;
  const blazarUrl = `mysql+pymysql://root@127.0.0.1:${MYSQL_PORT}/${database}?charset=utf8`;
  const rootConnection = () => mysql.createConnection({ socketPath: path.join(RIG_DIR, 'mysql.sock'), user: 'root', multipleStatements: true });

  const project = `blazar-project-${randomUUID().slice(0, 8)}`;
  const ids = {
    active: randomUUID(), activeRes: randomUUID(),
    pending: randomUUID(), pendingRes: randomUUID(),
    terminated: randomUUID(), terminatedRes: randomUUID(),
    first: randomUUID(), firstRes: randomUUID(),
    second: randomUUID(), secondRes: randomUUID(),
    instance: randomUUID(), instanceRes: randomUUID(),
    hostile: randomUUID(),
    // Blazar's schema makes host ids UUIDs; ours are numbers. Read first (it sorts before '1'): its new id must not take a kept one.
    fake3: `0${randomUUID().slice(1)}`,
  };
  // Set when Blazar's rows are written (the stack is up by then): the active lease ends, and the
  // pending one starts, a few seconds after the import the tests run first.
  let t0: number, activeEnd: number, pendingStart: number, pendingEnd: number, day2: number;
  function setTimes(): void {
    t0 = wholeSecond(Date.now());
    activeEnd = t0 + 15_000;
    pendingStart = t0 + 20_000;
    pendingEnd = pendingStart + 2 * 3_600_000;
    day2 = Math.floor(t0 / 86_400_000) * 86_400_000 + 2 * 86_400_000;
  }

  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool })],
      openstack: () => admin,
    },
    {
      // Leave the rig as we found it: the leases' workflows ended, their aggregates and ours gone, our MariaDB database dropped.
      beforeStop: async () => {
        try {
          for (const id of [ids.active, ids.pending, ids.first]) await api('DELETE', `/v1/leases/${id}`);
          await eventually(async () => {
            const listed = ((await api('GET', '/v1/leases')).body?.leases ?? []) as Array<{ id: string }>;
            return listed.some((l) => ([ids.active, ids.pending, ids.first] as string[]).includes(l.id)) ? undefined : true;
          }, 60_000);
        } finally {
          for (const name of [ids.activeRes, ids.pendingRes, freepool]) await deleteAggregateNamed(admin, name);
          const root = await rootConnection();
          await root.query(`DROP DATABASE IF EXISTS ${database}`);
          await root.end();
        }
      },
      timeoutMs: 120_000,
    },
  );
  const api = apiClient(() => stack().url);
  const deps = () => ({ pool: stack().db.pool, temporal: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, hosts: stack().config.hosts });
  const runImport = async (options: { apply: boolean; withHistory: boolean }): Promise<ImportReport> => importFromBlazar(await readBlazar(parseBlazarUrl(blazarUrl)), deps(), options);
  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  const count = async (table: string) => Number((await stack().db.pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);

  beforeAll(async () => {
    setTimes();
    // Nova as Blazar leaves it: fake-2 and fake-3 in its pool, fake-1 in the active lease's aggregate.
    const pool = await admin.nova.createAggregate({ name: freepool });
    await admin.nova.addHostToAggregate(pool.id, 'fake-2');
    await admin.nova.addHostToAggregate(pool.id, 'fake-3');
    const leaseAggregate = await admin.nova.createAggregate({ name: ids.activeRes, availability_zone: `blazar_${ids.activeRes}` });
    await admin.nova.setAggregateMetadata(leaseAggregate.id, { 'blazar:owner': project });
    await admin.nova.addHostToAggregate(leaseAggregate.id, 'fake-1');

    const root = await rootConnection();
    try {
      await root.query(`CREATE DATABASE ${database}; USE ${database}; ${SCHEMA}`);
      const insert = (table: string, rows: Array<Record<string, unknown>>) =>
        Promise.all(rows.map((row) => root.query(`INSERT INTO ${table} SET ?`, [{ id: randomUUID(), created_at: blazarDate(t0 - 3_600_000), ...row }])));
      await insert('computehosts', [
        { id: '1', hypervisor_hostname: 'fake-1', service_name: 'fake-1', vcpus: 10, cpu_info: '{}', hypervisor_type: 'fake', hypervisor_version: 1000, memory_mb: 8192, local_gb: 1028, availability_zone: 'nova', trust_id: '' },
        { id: '2', hypervisor_hostname: 'fake-2', service_name: 'fake-2', vcpus: 10, cpu_info: '{}', hypervisor_type: 'fake', hypervisor_version: 1000, memory_mb: 8192, local_gb: 1028, availability_zone: 'nova', trust_id: '' },
        { id: ids.fake3, hypervisor_hostname: 'fake-3', service_name: 'fake-3', vcpus: 10, cpu_info: '{}', hypervisor_type: 'fake', hypervisor_version: 1000, memory_mb: 8192, local_gb: 1028, availability_zone: 'nova', trust_id: '' },
      ]);
      await insert('resource_properties', [
        { id: 'p-rack', resource_type: 'physical:host', property_name: 'rack', private: 0 },
        { id: 'p-owner', resource_type: 'physical:host', property_name: 'owner', private: 1 },
      ]);
      await insert('computehost_extra_capabilities', [
        { computehost_id: '1', property_id: 'p-rack', capability_value: '10' },
        { computehost_id: '2', property_id: 'p-rack', capability_value: '9' },
        { computehost_id: '2', property_id: 'p-owner', capability_value: 'ops' },
      ]);
      const lease = (id: string, name: string, status: string, startMs: number, endMs: number, createdMs: number) => ({
        id, name, status, user_id: 'blazar-user', project_id: project, start_date: blazarDate(startMs), end_date: blazarDate(endMs), created_at: blazarDate(createdMs), trust_id: '',
      });
      await insert('leases', [
        lease(ids.active, 'active', 'ACTIVE', t0 - 600_000, activeEnd, t0 - 700_000),
        lease(ids.pending, 'pending', 'PENDING', pendingStart, pendingEnd, t0 - 500_000),
        lease(ids.terminated, 'terminated', 'TERMINATED', t0 - 3 * 86_400_000, t0 - 2 * 86_400_000, t0 - 4 * 86_400_000),
        // Blazar's double booking: two requests at once, both given fake-3 for overlapping windows.
        lease(ids.first, 'first', 'PENDING', day2 + 10 * 3_600_000, day2 + 12 * 3_600_000, t0 - 400_000),
        lease(ids.second, 'second', 'PENDING', day2 + 11 * 3_600_000, day2 + 13 * 3_600_000, t0 - 399_000),
        lease(ids.instance, 'instances', 'PENDING', day2, day2 + 3_600_000, t0 - 300_000),
        lease(ids.hostile, HOSTILE_NAME, 'PENDING', day2, day2 + 3_600_000, t0 - 200_000),
      ]);
      const reservation = (id: string, leaseId: string, status: string, type = 'physical:host') => ({ id, lease_id: leaseId, resource_id: randomUUID(), resource_type: type, status });
      await insert('reservations', [
        reservation(ids.activeRes, ids.active, 'active'),
        reservation(ids.pendingRes, ids.pending, 'pending'),
        reservation(ids.terminatedRes, ids.terminated, 'deleted'),
        reservation(ids.firstRes, ids.first, 'pending'),
        reservation(ids.secondRes, ids.second, 'pending'),
        reservation(ids.instanceRes, ids.instance, 'pending', 'virtual:instance'),
      ]);
      const hostReservation = (reservationId: string, extra: Record<string, unknown> = {}) => ({
        reservation_id: reservationId, count_range: '1-1', hypervisor_properties: '', resource_properties: '', before_end: 'default', ...extra,
      });
      await insert('computehost_reservations', [
        hostReservation(ids.activeRes, { resource_properties: '["==", "$rack", "10"]' }),
        hostReservation(ids.pendingRes, { hypervisor_properties: '[">=", "$vcpus", "2"]' }),
        hostReservation(ids.terminatedRes),
        hostReservation(ids.firstRes),
        hostReservation(ids.secondRes),
      ]);
      await insert('instance_reservations', [{ reservation_id: ids.instanceRes, vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 2, affinity: null }]);
      // Blazar drops a lease's allocations at its end: the terminated lease has none.
      await insert('computehost_allocations', [
        { compute_host_id: '1', reservation_id: ids.activeRes },
        { compute_host_id: '2', reservation_id: ids.pendingRes },
        { compute_host_id: ids.fake3, reservation_id: ids.firstRes },
        { compute_host_id: ids.fake3, reservation_id: ids.secondRes },
      ]);
      const events = (leaseId: string, startMs: number, endMs: number, statuses: [string, string, string]) =>
        (['start_lease', 'before_end_lease', 'end_lease'] as const).map((type, i) => ({
          lease_id: leaseId, event_type: type, status: statuses[i], time: blazarDate([startMs, Math.max(startMs, endMs - 3_600_000), endMs][i]),
        }));
      await insert('events', [
        ...events(ids.active, t0 - 600_000, activeEnd, ['DONE', 'DONE', 'UNDONE']),
        ...events(ids.pending, pendingStart, pendingEnd, ['UNDONE', 'UNDONE', 'UNDONE']),
        ...events(ids.terminated, t0 - 3 * 86_400_000, t0 - 2 * 86_400_000, ['DONE', 'DONE', 'DONE']),
        ...events(ids.first, day2 + 10 * 3_600_000, day2 + 12 * 3_600_000, ['UNDONE', 'UNDONE', 'UNDONE']),
        ...events(ids.second, day2 + 11 * 3_600_000, day2 + 13 * 3_600_000, ['UNDONE', 'UNDONE', 'UNDONE']),
        ...events(ids.instance, day2, day2 + 3_600_000, ['UNDONE', 'UNDONE', 'UNDONE']),
      ]);
    } finally {
      await root.end();
    }
  }, 60_000);

  it('takes the URL forms Blazar and DATABASE_URL use, and refuses others', () => {
    expect(parseBlazarUrl('mysql+pymysql://blazar:s%40cret@db.example:3307/blazar?charset=utf8')).toEqual({ host: 'db.example', port: 3307, user: 'blazar', password: 's@cret', database: 'blazar' });
    expect(parseBlazarUrl('mysql://root@localhost/blazar?unix_socket=/run/mysqld/mysqld.sock')).toEqual({ socketPath: '/run/mysqld/mysqld.sock', user: 'root', database: 'blazar' });
    expect(describeConnection(parseBlazarUrl('mysql://u:pw@h/b'))).toBe('mysql://u@h:3306/b');
    expect(() => parseBlazarUrl('postgres://u@h/b')).toThrow(/expected mysql\+pymysql:\/\//);
    expect(() => parseBlazarUrl('mysql://u@h/')).toThrow(/must name the database/);
    expect(parseImportArguments(['--blazar-db', 'mysql://u@h/b', '--apply'])).toMatchObject({ apply: true, withHistory: false, blazar: { database: 'b' } });
    expect(() => parseImportArguments(['--apply'])).toThrow('--blazar-db is required');
    expect(() => parseImportArguments(['--blazar-db=mysql://u@h/b', '--force'])).toThrow('unknown argument "--force"');
  });

  it('dry run: says what it would do, lists the conflict and what cannot come, and changes nothing', async () => {
    const report = await runImport({ apply: false, withHistory: true });
    const text = formatReport(report, 'blazar');
    expect(text).toContain('DRY RUN');
    expect(report.hosts.map((h) => [h.name, h.action, h.id]).sort()).toEqual([['fake-1', 'create', '1'], ['fake-2', 'create', '2'], ['fake-3', 'create', undefined]]);
    expect(report.hosts.find((h) => h.name === 'fake-3')!.notes.join()).toMatch(/is not a number/);
    expect(report.leases.map((l) => [l.name, l.action]).sort()).toEqual([['active', 'import'], ['first', 'import'], ['pending', 'import'], ['terminated', 'history']]);
    expect(report.conflicts).toEqual([{ leaseId: ids.second, leaseName: 'second', message: expect.stringContaining(`host fake-3 is booked twice`) }]);
    expect(report.conflicts[0].message).toContain(`overlaps lease ${ids.first} "first"`);
    expect(report.notImportable).toEqual([
      { leaseId: ids.instance, leaseName: 'instances', status: 'PENDING', reason: expect.stringContaining('virtual:instance (2 × 1 vCPU, 512 MB, 1 GB)') },
      { leaseId: ids.hostile, leaseName: HOSTILE_NAME, status: 'PENDING', reason: expect.stringContaining("it breaks the API's rules: name: must not contain control characters") },
    ]);
    // eslint-disable-next-line no-control-regex
    expect(text).not.toMatch(/[\u0000\u001b]/);
    expect(text).toMatch(/Conflicts \(1\):\n {2}lease \S+ "second" is not imported: host fake-3 is booked twice/);

    expect([await count('hosts'), await count('leases'), await count('host_allocations')]).toEqual([0, 0, 0]);
    await expect(stack().temporal.client.workflow.getHandle(leaseWorkflowId(ids.active)).describe()).rejects.toThrow();
    expect((await aggregateNamed(ids.activeRes))?.hosts).toEqual(['fake-1']);
  }, 60_000);

  it('--apply imports hosts, bookings, leases and workflows as leasekeeper would have made them; a second --apply adds nothing', async () => {
    const report = await runImport({ apply: true, withHistory: true });
    expect(report.changes).toBe(3 + 4);
    expect(report.conflicts.map((c) => c.leaseId)).toEqual([ids.second]);
    expect(report.notImportable.map((n) => n.leaseId)).toEqual([ids.instance, ids.hostile]);

    // Hosts keep Blazar's ids where ours can (numbers), with their capabilities; a private one stays private.
    const hosts = (await api('GET', '/v1/os-hosts')).body.hosts as Array<{ id: string; hypervisor_hostname: string; rack?: string }>;
    const fake3Id = hosts.find((h) => h.hypervisor_hostname === 'fake-3')!.id;
    expect(hosts.map((h) => [h.id, h.hypervisor_hostname, h.rack]).sort((x, y) => x[1]!.localeCompare(y[1]!))).toEqual([['1', 'fake-1', '10'], ['2', 'fake-2', '9'], [fake3Id, 'fake-3', undefined]]);
    expect(fake3Id).toMatch(/^\d+$/);
    const capabilities = await stack().db.pool.query('SELECT c.host_id::text, c.name, c.value, s.private FROM host_capabilities c LEFT JOIN capability_settings s USING (name) ORDER BY 1, 2');
    expect(capabilities.rows).toEqual([
      { host_id: '1', name: 'rack', value: '10', private: null },
      { host_id: '2', name: 'owner', value: 'ops', private: true },
      { host_id: '2', name: 'rack', value: '9', private: null },
    ]);

    // The pending lease exactly as the physical-host plugin books one, ids and aggregate as Blazar's.
    const pending = await findLease(stack().db.pool, ids.pending);
    const params = physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '[">=", "$vcpus", "2"]', resource_properties: '', before_end: 'default' });
    expect(pending).toEqual<Lease>({
      id: ids.pending,
      name: 'pending',
      projectId: project,
      userId: 'blazar-user',
      startMs: pendingStart,
      endMs: pendingEnd,
      status: 'PENDING',
      reservations: [{
        id: ids.pendingRes,
        resource_type: 'physical:host',
        status: 'pending',
        params: JSON.parse(JSON.stringify(params)),
        allocation: { hosts: ['fake-2'], host_ids: ['2'], aggregate: ids.pendingRes, availability_zone: `blazar_${ids.pendingRes}`, on_end: 'delete' },
        resourceKeys: ['host:2'],
      }],
      events: [
        { id: `${ids.pending}:start_lease`, event_type: 'start_lease', time: pendingStart, status: 'UNDONE' },
        { id: `${ids.pending}:before_end_lease`, event_type: 'before_end_lease', time: pendingEnd - 3_600_000, status: 'UNDONE' },
        { id: `${ids.pending}:end_lease`, event_type: 'end_lease', time: pendingEnd, status: 'UNDONE' },
      ],
      createdMs: t0 - 500_000,
      updatedMs: t0 - 500_000,
      version: 1,
    });
    expect(physicalHostParams.safeParse(pending!.reservations[0].params).success).toBe(true);

    // Through the API as any lease: the active one with its Blazar aggregate, the terminated one as history.
    const active = (await api('GET', `/v1/leases/${ids.active}`)).body.lease;
    expect(active).toMatchObject({ status: 'ACTIVE', project_id: project });
    expect(active.reservations[0]).toMatchObject({ status: 'active', hosts: ['fake-1'], aggregate: ids.activeRes, availability_zone: `blazar_${ids.activeRes}` });
    expect((await api('GET', `/v1/leases/${ids.terminated}`)).body.lease).toMatchObject({ status: 'TERMINATED' });
    expect((await api('GET', `/v1/leases/${ids.second}`)).status).toBe(404);
    expect((await api('GET', `/v1/leases/${ids.instance}`)).status).toBe(404);
    expect((await api('GET', `/v1/leases/${ids.hostile}`)).status).toBe(404);
    const bookings = (await stack().db.pool.query('SELECT host_id::text, lease_id::text FROM host_allocations ORDER BY lease_id')).rows;
    expect(bookings).toEqual(expect.arrayContaining([{ host_id: '1', lease_id: ids.active }, { host_id: '2', lease_id: ids.pending }, { host_id: fake3Id, lease_id: ids.first }]));
    expect(bookings).toHaveLength(3);
    for (const id of [ids.active, ids.pending, ids.first]) {
      expect((await stack().temporal.client.workflow.getHandle(leaseWorkflowId(id)).describe()).status.name).toBe('RUNNING');
    }

    const again = await runImport({ apply: true, withHistory: true });
    expect(again.changes).toBe(0);
    expect(again.leases.every((l) => l.action === 'present')).toBe(true);
    expect(again.hosts.every((h) => h.action === 'present')).toBe(true);
    expect(again.conflicts.map((c) => c.leaseId)).toEqual([ids.second]);
    expect(formatReport(again, 'blazar')).toContain('Nothing new: every importable host and lease was already imported.');
    expect([await count('hosts'), await count('leases'), await count('host_allocations')]).toEqual([3, 4, 3]);
  }, 60_000);

  it('carries the leases on: the active one ends on time and returns its host, the pending one starts on time', async () => {
    const lease = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;
    const ended = await eventually(async () => ((await lease(ids.active)).status === 'TERMINATED' ? findLease(stack().db.pool, ids.active) : undefined), activeEnd - Date.now() + 30_000, 250);
    const endEvent = ended.events.find((e) => e.event_type === 'end_lease')!;
    expect(endEvent).toMatchObject({ time: activeEnd, status: 'DONE' });
    expect(endEvent.startedAt).toBeGreaterThanOrEqual(activeEnd);
    console.log(`imported active lease: end began ${endEvent.startedAt! - activeEnd} ms after it was due`);
    expect((await aggregateNamed(freepool))?.hosts).toContain('fake-1');
    expect(await aggregateNamed(ids.activeRes)).toBeUndefined();

    const started = await eventually(async () => ((await lease(ids.pending)).status === 'ACTIVE' ? findLease(stack().db.pool, ids.pending) : undefined), pendingStart - Date.now() + 30_000, 250);
    const startEvent = started.events.find((e) => e.event_type === 'start_lease')!;
    expect(startEvent.startedAt).toBeGreaterThanOrEqual(pendingStart);
    console.log(`imported pending lease: start began ${startEvent.startedAt! - pendingStart} ms after it was due`);
    expect(await aggregateNamed(ids.pendingRes)).toMatchObject({ hosts: ['fake-2'], availability_zone: `blazar_${ids.pendingRes}` });
    expect((await aggregateNamed(freepool))?.hosts).not.toContain('fake-2');
  }, 120_000);
});
