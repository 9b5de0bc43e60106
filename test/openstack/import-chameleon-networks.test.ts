/**
 * The Blazar import from Chameleon's schema (issue 45), against the rig: a MariaDB database of our
 * own with Blazar's schema plus Chameleon's network tables (test/fixtures/chameleon-network-tables.sql,
 * at Chameleon's alembic head), filled as Chameleon's Blazar leaves it: two enrolled VLAN segments
 * (one with a capability) and one soft-deleted, a pending lease on one, and an active lease on the
 * other whose network Blazar made in Neutron (untagged, in the lessee's project) with a soft-deleted
 * allocation beside its live one. readBlazar reads what is live; --apply enrols the segments, books
 * both leases and adopts the active one's network, which the lease's end then deletes from Neutron.
 * Books no compute host.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import mysql from 'mysql2/promise';
import { networkSegmentAllocations } from '../../src/db/network-segment-allocations';
import { formatReport, importFromBlazar } from '../../src/import/blazar-import';
import { CHAMELEON_SCHEMA_REVISION, parseBlazarUrl, readBlazar } from '../../src/import/blazar-source';
import { networkSegmentPlugin } from '../../src/resources/network-segment';
import { adoptBlazarNetwork } from '../../src/resources/network-segment/adopt';
import { apiClient, deleteAllLeases, eventually, useTestStack } from '../../dev-stack/stack';
import { projectIdOf, REPO_ROOT, RIG_DIR, rigClients, uniqueName, untilStatus } from './support';

const MYSQL_PORT = Number(process.env.LK_OS_PORT_BASE ?? 10000) + 3306;
const SCHEMA = ['blazar-schema.sql', 'chameleon-network-tables.sql'].map((file) => fs.readFileSync(path.join(REPO_ROOT, 'test', 'fixtures', file), 'utf8')).join('\n');
/** Outside Neutron's tenant range, and apart from the other network segment test files' tags. */
const TAGS = { pending: 203, active: 204, removed: 205 };

/** Blazar's DATETIME: naive UTC, whole seconds. */
const blazarDate = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');

describe("importing Chameleon's network segment reservations", () => {
  const admin = rigClients('leasekeeper-admin');
  const database = `chameleon_import_${randomBytes(4).toString('hex')}`;
  const blazarUrl = `mysql+pymysql://root@127.0.0.1:${MYSQL_PORT}/${database}?charset=utf8`;
  const rootConnection = () => mysql.createConnection({ socketPath: path.join(RIG_DIR, 'mysql.sock'), user: 'root', multipleStatements: true });
  const ids = {
    seg203: randomUUID(), seg204: randomUUID(), seg205: randomUUID(),
    pending: randomUUID(), pendingRes: randomUUID(),
    active: randomUUID(), activeRes: randomUUID(),
  };
  let projectAId: string;
  let networkId: string;
  const onTag = (tag: number) => admin.neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag });

  const stack = useTestStack(
    { withPool: (pool) => [networkSegmentPlugin({ pool, cloud: () => admin })], openstack: () => admin },
    {
      beforeStop: async () => {
        try {
          await deleteAllLeases(api);
        } finally {
          for (const network of await onTag(TAGS.active)) await admin.neutron.deleteNetwork(network.id).catch(() => undefined);
          const root = await rootConnection();
          await root.query(`DROP DATABASE IF EXISTS ${database}`);
          await root.end();
        }
      },
    },
  );
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    projectAId = await projectIdOf('leasekeeper-project-a');
    for (const network of await onTag(TAGS.active)) await admin.neutron.deleteNetwork(network.id);
    const t0 = Date.now();
    // What Chameleon's Blazar made at the active lease's start: a network on the segment, in the lessee's project, untagged.
    const made = await admin.neutron.createNetwork({ name: uniqueName('chi-net'), project_id: projectAId, 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': TAGS.active });
    networkId = made.id;

    const root = await rootConnection();
    try {
      await root.query(`CREATE DATABASE ${database}; USE ${database}; ${SCHEMA}`);
      const insert = (table: string, rows: Array<Record<string, unknown>>) =>
        Promise.all(rows.map((row) => root.query(`INSERT INTO ${table} SET ?`, [{ id: randomUUID(), created_at: blazarDate(t0 - 3_600_000), ...row }])));
      await insert('network_segments', [
        { id: ids.seg203, network_type: 'vlan', physical_network: 'physnet1', segment_id: TAGS.pending },
        { id: ids.seg204, network_type: 'vlan', physical_network: 'physnet1', segment_id: TAGS.active },
        { id: ids.seg205, network_type: 'vlan', physical_network: 'physnet1', segment_id: TAGS.removed, deleted: ids.seg205, deleted_at: blazarDate(t0 - 60_000) },
      ]);
      await insert('resource_properties', [{ id: 'p-stitch', resource_type: 'network', property_name: 'stitch_provider', private: 0 }]);
      await insert('networksegment_extra_capabilities', [{ network_id: ids.seg203, property_id: 'p-stitch', capability_value: 'fabric' }]);
      const lease = (id: string, name: string, status: string, startMs: number, endMs: number) => ({
        id, name, status, user_id: 'chi-user', project_id: projectAId, start_date: blazarDate(startMs), end_date: blazarDate(endMs), trust_id: '',
      });
      await insert('leases', [
        lease(ids.pending, 'chi-pending', 'PENDING', t0 + 86_400_000, t0 + 90_000_000),
        lease(ids.active, 'chi-active', 'ACTIVE', t0 - 600_000, t0 + 3_600_000),
      ]);
      await insert('reservations', [
        { id: ids.pendingRes, lease_id: ids.pending, resource_id: randomUUID(), resource_type: 'network', status: 'pending' },
        { id: ids.activeRes, lease_id: ids.active, resource_id: randomUUID(), resource_type: 'network', status: 'active' },
      ]);
      await insert('network_reservations', [
        { reservation_id: ids.pendingRes, network_name: 'pending-net', network_description: '', network_properties: '["==", "$stitch_provider", "fabric"]', resource_properties: '' },
        { reservation_id: ids.activeRes, network_name: made.name, network_description: null, network_properties: '', resource_properties: '', network_id: networkId },
      ]);
      await insert('network_allocations', [
        { network_id: ids.seg203, reservation_id: ids.pendingRes },
        { network_id: ids.seg204, reservation_id: ids.activeRes },
        // An earlier allocation of the active reservation, soft-deleted by Blazar: not read.
        { network_id: ids.seg203, reservation_id: ids.activeRes, deleted: randomUUID(), deleted_at: blazarDate(t0 - 700_000) },
      ]);
    } finally {
      await root.end();
    }
  }, 60_000);

  it('reads the live rows of the network tables at Chameleon\'s revision', async () => {
    const data = await readBlazar(parseBlazarUrl(blazarUrl));
    expect(data.revision).toBe(CHAMELEON_SCHEMA_REVISION);
    expect(data.networks?.segments.map((s) => [s.id, s.segment_id])).toEqual([
      [ids.seg203, String(TAGS.pending)],
      [ids.seg204, String(TAGS.active)],
    ]);
    expect(data.networks?.capabilities).toEqual([{ network_id: ids.seg203, property_name: 'stitch_provider', capability_value: 'fabric' }]);
    expect(data.networks?.allocations.map((a) => [a.reservation_id, a.network_id]).sort()).toEqual([[ids.activeRes, ids.seg204], [ids.pendingRes, ids.seg203]].sort());
    expect(data.networks?.reservations.find((r) => r.reservation_id === ids.activeRes)?.network_id).toBe(networkId);
  });

  it("--apply enrols the segments, books both leases and adopts the active one's network, which its end deletes", async () => {
    const deps = {
      pool: stack().db.pool, temporal: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, hosts: stack().config.hosts,
      adoptNetwork: (reservationId: string, id: string) => adoptBlazarNetwork(admin.neutron, reservationId, id),
    };
    const report = await importFromBlazar(await readBlazar(parseBlazarUrl(blazarUrl)), deps, { apply: true, withHistory: false });
    expect({ conflicts: report.conflicts, notImportable: report.notImportable, segmentsNotImportable: report.segmentsNotImportable }).toEqual({ conflicts: [], notImportable: [], segmentsNotImportable: [] });
    expect(formatReport(report, 'chameleon')).toMatch(/Imported 2 live lease\(s\) and 0 as history, 0 host\(s\), 2 network segment\(s\)\./);
    expect((await networkSegmentAllocations(stack().db.pool, {})).map((a) => [a.lease_id, a.network_segment_id]).sort()).toEqual([[ids.active, ids.seg204], [ids.pending, ids.seg203]].sort());
    const [adopted] = await onTag(TAGS.active);
    expect(adopted).toMatchObject({ id: networkId, tags: expect.arrayContaining(['blazar', `reservation:${ids.activeRes}`]) });
    expect((await api('GET', `/v1/leases/${ids.active}`)).body.lease.reservations[0]).toMatchObject({ network_id: networkId, segment: { segment_id: String(TAGS.active) } });

    // The lease carried on by leasekeeper: its end takes Blazar's network away.
    expect((await api('PUT', `/v1/leases/${ids.active}`, { end_date: 'now' })).status).toBe(200);
    await untilStatus(api, ids.active, 'TERMINATED', 120_000);
    await eventually(async () => ((await onTag(TAGS.active)).length === 0 ? true : undefined), 30_000);
  }, 180_000);
});
