/**
 * The Blazar import and Chameleon's network segment reservations (issue 45): from a schema with
 * Chameleon's network tables (its fork's alembic head, rows as readBlazar answers them: no MariaDB
 * needed), the segments are enrolled with their capabilities, a pending lease's network reservation
 * books its segment and shows as the API shows one, an active lease's network (Blazar's) is adopted
 * (tagged with its reservation) and shown as started, a terminated one comes as history; a segment
 * and a reservation breaking the API's rules are reported with why; an active lease whose network
 * cannot be adopted (no OpenStack credentials) is left out saying so. A second --apply changes
 * nothing. From upstream Blazar's schema (no network tables) the report says there are none.
 */
import { randomUUID } from 'node:crypto';
import { findLease } from '../src/db/leases';
import { networkSegmentAllocations } from '../src/db/network-segment-allocations';
import { listNetworkSegments } from '../src/db/network-segments';
import { formatReport, importFromBlazar } from '../src/import/blazar-import';
import { BLAZAR_SCHEMA_REVISION, CHAMELEON_SCHEMA_REVISION, type BlazarData, type BlazarLease, type BlazarNetworkTables } from '../src/import/blazar-source';
import { networkSegmentPlugin } from '../src/resources/network-segment';
import { apiClient, deleteAllLeases, useTestStack } from '../dev-stack/stack';

const NOW = Date.now();
const DAY = 86_400_000;
/** Blazar's DATETIME: naive UTC, whole seconds. */
const blazarDate = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');

const ids = {
  seg200: randomUUID(), seg201: randomUUID(), segBad: randomUUID(),
  pending: randomUUID(), pendingRes: randomUUID(),
  active: randomUUID(), activeRes: randomUUID(), activeNetwork: randomUUID(),
  history: randomUUID(), historyRes: randomUUID(),
  badParams: randomUUID(), badParamsRes: randomUUID(),
  onBadSegment: randomUUID(), onBadSegmentRes: randomUUID(),
};

function lease(id: string, name: string, extra: Partial<BlazarLease> = {}): BlazarLease {
  return { id, name, user_id: 'chi-user', project_id: 'chi-project', start_date: blazarDate(NOW + DAY), end_date: blazarDate(NOW + 2 * DAY), status: 'PENDING', degraded: 0, created_at: blazarDate(NOW - DAY), updated_at: null, ...extra };
}
const networkReservation = (id: string, leaseId: string, status = 'pending') => ({ id, lease_id: leaseId, resource_type: 'network', status, missing_resources: 0, resources_changed: 0 });
const networkRow = (reservationId: string, extra: Partial<BlazarNetworkTables['reservations'][number]> = {}) => ({
  reservation_id: reservationId, network_name: `net-${reservationId.slice(0, 8)}`, network_description: 'stitched', network_properties: '["==", "$physical_network", "physnet1"]', resource_properties: '', network_id: null, ...extra,
});

const NETWORKS: BlazarNetworkTables = {
  segments: [
    { id: ids.seg200, network_type: 'vlan', physical_network: 'physnet1', segment_id: '200' },
    { id: ids.seg201, network_type: 'vlan', physical_network: 'physnet1', segment_id: '201' },
    { id: ids.segBad, network_type: 'vlan', physical_network: null, segment_id: '202' }, // a VLAN without its physical network
  ],
  capabilities: [{ network_id: ids.seg200, property_name: 'stitch_provider', capability_value: 'fabric' }],
  reservations: [
    networkRow(ids.pendingRes),
    networkRow(ids.activeRes, { network_id: ids.activeNetwork }),
    networkRow(ids.historyRes),
    networkRow(ids.badParamsRes, { network_name: null }),
    networkRow(ids.onBadSegmentRes),
  ],
  allocations: [
    { network_id: ids.seg200, reservation_id: ids.pendingRes },
    { network_id: ids.seg201, reservation_id: ids.activeRes },
    { network_id: ids.seg200, reservation_id: ids.historyRes },
    { network_id: ids.seg201, reservation_id: ids.badParamsRes },
    { network_id: ids.segBad, reservation_id: ids.onBadSegmentRes },
  ],
};

const DATA: BlazarData = {
  revision: CHAMELEON_SCHEMA_REVISION,
  leases: [
    lease(ids.pending, 'chi-pending'),
    lease(ids.active, 'chi-active', { status: 'ACTIVE', start_date: blazarDate(NOW - DAY), end_date: blazarDate(NOW + DAY), created_at: blazarDate(NOW - 2 * DAY) }),
    lease(ids.history, 'chi-history', { status: 'TERMINATED', start_date: blazarDate(NOW - 3 * DAY), end_date: blazarDate(NOW - 2 * DAY), created_at: blazarDate(NOW - 4 * DAY) }),
    lease(ids.badParams, 'chi-no-name', { start_date: blazarDate(NOW + 3 * DAY), end_date: blazarDate(NOW + 4 * DAY) }),
    lease(ids.onBadSegment, 'chi-bad-segment'),
  ],
  reservations: [
    networkReservation(ids.pendingRes, ids.pending),
    networkReservation(ids.activeRes, ids.active, 'active'),
    networkReservation(ids.historyRes, ids.history, 'deleted'),
    networkReservation(ids.badParamsRes, ids.badParams),
    networkReservation(ids.onBadSegmentRes, ids.onBadSegment),
  ],
  events: [],
  hostReservations: [],
  hostAllocations: [],
  hosts: [],
  capabilities: [],
  instanceReservations: [],
  floatingIpReservations: [],
  floatingIpAllocations: [],
  networks: NETWORKS,
};

describe("the Blazar import and Chameleon's network segment reservations", () => {
  const stack = useTestStack(
    { withPool: (pool) => [networkSegmentPlugin({ pool, cloud: 'calendar-only' })] },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url, { 'x-auth-token': 'admin' })) },
  );
  const adopted: Array<[string, string]> = [];
  const deps = (adopt = true) => ({
    pool: stack().db.pool,
    temporal: stack().temporal.client,
    taskQueue: stack().config.temporal.taskQueue,
    hosts: stack().config.hosts,
    ...(adopt ? { adoptNetwork: (reservationId: string, networkId: string) => Promise.resolve(adopted.push([reservationId, networkId]) > 0) } : {}),
  });
  const admin = () => apiClient(stack().url, { 'x-auth-token': 'admin' });

  it("says so when the schema has no network tables (upstream Blazar's)", async () => {
    const upstream: BlazarData = { ...DATA, revision: BLAZAR_SCHEMA_REVISION, networks: undefined, leases: [], reservations: [] };
    const report = await importFromBlazar(upstream, deps(), { apply: false, withHistory: true });
    expect(report).toMatchObject({ networkTables: false, segments: [], segmentsNotImportable: [] });
    expect(formatReport(report, 'blazar')).toContain('Network segments: this schema has no network tables (upstream Blazar has no network reservations');
  });

  it('without OpenStack credentials, leaves out the active lease whose network would need adopting; the dry run writes nothing', async () => {
    const report = await importFromBlazar(DATA, deps(false), { apply: false, withHistory: true });
    expect(report.notImportable.find((n) => n.leaseId === ids.active)?.reason).toMatch(new RegExp(`^not importable yet: its network ${ids.activeNetwork} \\(made by Blazar at its start\\) can be adopted only with OpenStack credentials`));
    expect(await listNetworkSegments(stack().db.pool)).toEqual([]);
  });

  it('--apply: segments enrolled, the pending lease booked, the active one adopted, the history kept; what breaks the rules reported', async () => {
    const report = await importFromBlazar(DATA, deps(), { apply: true, withHistory: true });
    expect(report.segments.map((s) => [s.name, s.action, s.id])).toEqual([
      ['vlan:physnet1:200', 'create', ids.seg200],
      ['vlan:physnet1:201', 'create', ids.seg201],
    ]);
    expect(report.segmentsNotImportable).toEqual([{ blazarId: ids.segBad, name: 'vlan:202', reason: expect.stringContaining('physical_network') }]);
    expect(report.leases.map((l) => [l.name, l.action, l.networks])).toEqual([
      ['chi-active', 'import', ['vlan:physnet1:201']],
      ['chi-pending', 'import', ['vlan:physnet1:200']],
      ['chi-history', 'history', ['vlan:physnet1:200']],
    ]);
    expect(report.notImportable.map((n) => [n.leaseId, n.reason])).toEqual(
      expect.arrayContaining([
        [ids.badParams, expect.stringMatching(new RegExp(`^not importable: it breaks the API's rules: reservation ${ids.badParamsRes}: network_name: `))],
        [ids.onBadSegment, expect.stringMatching(/^not importable: it breaks the API's rules: .*holds network segment vlan:202, which is not importable/)],
      ]),
    );
    expect(adopted).toEqual([[ids.activeRes, ids.activeNetwork]]);
    const text = formatReport(report, 'chameleon');
    expect(text).toContain('Network segments (2):');
    expect(text).toContain('Network segments not importable (1):');
    expect(text).toMatch(/chi-pending.* on network segment vlan:physnet1:200\): imported/);

    const segments = await listNetworkSegments(stack().db.pool);
    expect(segments.map((s) => [s.id, s.segment_id, s.capabilities])).toEqual([
      [ids.seg200, '200', { stitch_provider: 'fabric' }],
      [ids.seg201, '201', {}],
    ]);
    const booked = await networkSegmentAllocations(stack().db.pool, {});
    expect(booked.map((b) => [b.lease_id, b.network_segment_id]).sort()).toEqual([[ids.active, ids.seg201], [ids.pending, ids.seg200]].sort());

    // As the API shows a network reservation: the segment, and the network once started.
    const pending = (await admin()('GET', `/v1/leases/${ids.pending}`)).body.lease;
    expect(pending).toMatchObject({ status: 'PENDING', project_id: 'chi-project' });
    expect(pending.reservations).toEqual([
      expect.objectContaining({ resource_type: 'network', network_name: `net-${ids.pendingRes.slice(0, 8)}`, network_description: 'stitched', network_id: null, segment: { network_type: 'vlan', physical_network: 'physnet1', segment_id: '200' } }),
    ]);
    const active = (await admin()('GET', `/v1/leases/${ids.active}`)).body.lease;
    expect(active).toMatchObject({ status: 'ACTIVE', reservations: [expect.objectContaining({ network_id: ids.activeNetwork, segment: expect.objectContaining({ segment_id: '201' }) })] });
    expect(await findLease(stack().db.pool, ids.history)).toMatchObject({ status: 'TERMINATED' });

    // Once more: nothing new.
    const again = await importFromBlazar(DATA, deps(), { apply: true, withHistory: true });
    expect(again.changes).toBe(0);
    expect(again.segments.map((s) => s.action)).toEqual(['present', 'present']);
    expect(adopted).toHaveLength(1);
  });
});
