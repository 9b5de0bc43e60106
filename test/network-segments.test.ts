/**
 * Network segment reservations (issue 45) through the API and the real worker, against Neutron in
 * memory (test/support/fake-neutron.ts): enrolment and its Neutron checks, admission in the segment
 * calendar (one segment per reservation, 409 with offers, property queries), the start's network
 * on exactly the booked segment in the lessee's project (idempotent across a lost answer), the
 * end's ports then network, a host and network lease started all or nothing, and isolation. The
 * rig test (test/openstack/) runs the same against a real Neutron.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { OpenStackClients, NeutronClient } from '../src/openstack';
import { networkSegmentPlugin } from '../src/resources/network-segment';
import { findLease } from '../src/db/leases';
import { reservationContext, typedContext } from '../src/domain/resource-plugin';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { FakeNeutron } from './support/fake-neutron';
import { networkSegmentBookings } from '../src/db/network-segment-allocations';
import { hostsChanged, leaseWorkflowId } from '../workflows/lease/messages';
import { randomUUID } from 'node:crypto';

/** Days a month ahead (within the deployment's advance-booking limit), as Blazar writes dates. */
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const [D1, D2, D3] = [30, 31, 32].map(dayAhead);

describe('network segment reservations', () => {
  const neutron = new FakeNeutron();
  const cloud = () => ({ neutron: neutron as unknown as NeutronClient });
  /** While set, the host reservation's start fails for good (the all-or-nothing case). */
  let failHostStart = false;
  const stack = useTestStack({
    // physnet2 with its own tenant range, physnet3 listed without one (ML2 knows it, Neutron's segment ranges do not).
    env: { LK_NEUTRON_TENANT_VLAN_RANGES: 'physnet2:400:499,physnet3' },
    openstack: () => cloud() as unknown as OpenStackClients,
    withPool: (pool) => {
      const hosts = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
      const failingHosts: typeof hosts = {
        ...hosts,
        async start(ctx) {
          if (failHostStart) throw ApplicationFailure.nonRetryable('the hosts could not be moved', 'TestHostStartFailed');
          return hosts.start?.(ctx);
        },
      };
      return [networkSegmentPlugin({ pool, cloud, deleteTimeoutMs: 3_000 }), failingHosts];
    },
  });
  const admin = apiClient(() => stack().url);
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' });
  const other = apiClient(() => stack().url, { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' });
  const segments: Record<string, string> = {};

  const networkReservation = (fields: Record<string, unknown> = {}) => ({ resource_type: 'network', network_name: 'my-net', network_description: '', network_properties: '', resource_properties: '', ...fields });
  const lease = (api: typeof admin, name: string, start: string, end: string, reservations: unknown[]) => api('POST', '/v1/leases', { name, start_date: start, end_date: end, reservations });
  const leaseOf = async (id: string, api = member) => (await api('GET', `/v1/leases/${id}`)).body.lease;
  const statusIs = (id: string, status: string) => eventually(async () => ((await leaseOf(id, admin))?.status === status ? leaseOf(id, admin) : undefined), 60_000);

  beforeAll(async () => {
    neutron.range('physnet1', 100, 199);
    neutron.range(null, 1000, 1999, 'vxlan');
    for (const [tag, capabilities] of [
      ['250', { stitch_provider: 'fabric' }],
      ['251', {}],
    ] as const) {
      const enrolled = await admin('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: tag, ...capabilities });
      expect(enrolled.status).toBe(201);
      segments[tag] = enrolled.body.network.id;
    }
    await insertHost(stack().db.pool, { name: 'net-host-1' });
  });
  afterEach(async () => {
    failHostStart = false;
    await deleteAllLeases(admin);
  });

  describe('enrolment', () => {
    it('enrols a segment with its capabilities, lists, shows and updates it', async () => {
      const shown = await admin('GET', `/v1/networks/${segments['250']}`);
      expect(shown.body.network).toEqual({
        id: segments['250'],
        network_type: 'vlan',
        physical_network: 'physnet1',
        segment_id: '250',
        stitch_provider: 'fabric',
        created_at: expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/),
        updated_at: expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/),
      });
      expect((await admin('GET', '/v1/networks')).body.networks.map((n: { segment_id: string }) => n.segment_id)).toEqual(['250', '251']);
      const updated = await admin('PUT', `/v1/networks/${segments['251']}`, { values: { stitch_provider: 'exchange' } });
      expect(updated.status).toBe(200);
      expect(updated.body.network).toMatchObject({ segment_id: '251', stitch_provider: 'exchange' });
      // Blazar's os-hosts form (capabilities as they are) works too; the segment's own fields never change.
      expect((await admin('PUT', `/v1/networks/${segments['251']}`, { stitch_provider: 'fabric2' })).body.network.stitch_provider).toBe('fabric2');
      const refused = await admin('PUT', `/v1/networks/${segments['251']}`, { values: { segment_id: '252' } });
      expect(refused).toMatchObject({ status: 400, body: { error_code: 400, error_message: expect.stringContaining("segment_id: a segment's fields cannot change") } });
      await admin('PUT', `/v1/networks/${segments['251']}`, { values: { stitch_provider: '' } });
      // A VXLAN segment has no physical network; its tag may reach 2^24 - 1.
      const vxlan = await admin('POST', '/v1/networks', { network_type: 'vxlan', segment_id: 16_777_215 });
      expect(vxlan).toMatchObject({ status: 201, body: { network: { network_type: 'vxlan', physical_network: null, segment_id: '16777215' } } });
      expect((await admin('DELETE', `/v1/networks/${vxlan.body.network.id}`)).status).toBe(204);
      expect((await admin('GET', `/v1/networks/${vxlan.body.network.id}`)).status).toBe(404);
    });

    it('refuses bad input with 400, a duplicate and what Neutron could not give a lease with 409', async () => {
      const enrol = (body: unknown) => admin('POST', '/v1/networks', body);
      const bad: Array<[unknown, string]> = [
        [{ physical_network: 'physnet1', segment_id: 300 }, 'Missing parameter network_type'],
        [{ network_type: 'flat', physical_network: 'physnet1', segment_id: 300 }, 'network_type: expected one of vlan, vxlan'],
        [{ network_type: 'vlan', segment_id: 300 }, 'Missing parameter physical_network'],
        [{ network_type: 'vlan', physical_network: 'physnet1' }, 'Missing parameter segment_id'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 4095 }, 'a vlan tag is a whole number from 1 to 4094'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: '0' }, 'a vlan tag is a whole number from 1 to 4094'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 'ten' }, 'Malformed parameter segment_id'],
        [{ network_type: 'vxlan', physical_network: 'physnet1', segment_id: 300 }, 'a vxlan segment has none'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 300, rack: { nested: true } }, 'capability rack: expected a string value'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 300, ['k'.repeat(65)]: 'v' }, 'Capability names must be 1 to 64 characters'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 300, rack: 'r'.repeat(256) }, 'capability rack: at most 255 characters'],
        [{ network_type: 'vlan', physical_network: 'physnet1', segment_id: 300, created_at: 'yesterday' }, 'created_at: not a capability'],
        [[1, 2], 'expected a JSON object'],
      ];
      for (const [body, message] of bad) {
        const answer = await enrol(body);
        expect({ body, status: answer.status, message: answer.body.error_message }).toEqual({ body, status: 400, message: expect.stringContaining(message) });
      }
      const duplicate = await enrol({ network_type: 'vlan', physical_network: 'physnet1', segment_id: 250 });
      expect(duplicate).toMatchObject({ status: 409, body: { error_code: 409, error_message: 'network segment vlan:physnet1:250 is already enrolled' } });
      const unknownPhysnet = await enrol({ network_type: 'vlan', physical_network: 'physnet9', segment_id: 300 });
      expect(unknownPhysnet).toMatchObject({ status: 409, body: { error_message: expect.stringContaining("physical network physnet9 is not in Neutron's network segment ranges") } });
      const tenantRange = await enrol({ network_type: 'vlan', physical_network: 'physnet1', segment_id: 150 });
      expect(tenantRange).toMatchObject({ status: 409, body: { error_message: expect.stringContaining('which Neutron hands to tenant networks') } });
      // LK_NEUTRON_TENANT_VLAN_RANGES names physnet3 without a range: known though in no Neutron segment range.
      const listedAlone = await enrol({ network_type: 'vlan', physical_network: 'physnet3', segment_id: 300 });
      expect(listedAlone.status).toBe(201);
      expect((await admin('DELETE', `/v1/networks/${listedAlone.body.network.id}`)).status).toBe(204);
      const inUse = neutron.network({ 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': 300, project_id: 'ops' });
      const taken = await enrol({ network_type: 'vlan', physical_network: 'physnet1', segment_id: 300 });
      expect(taken).toMatchObject({ status: 409, body: { error_message: `segment vlan:physnet1:300 is in use in Neutron (network ${inUse.id} of project ops): only a free segment can be made reservable` } });
      neutron.networks = neutron.networks.filter((n) => n !== inUse);
      // Without the segment range extension: refused unless LK_NEUTRON_TENANT_VLAN_RANGES names the physical network.
      const ranges = neutron.ranges;
      neutron.ranges = undefined;
      try {
        const unchecked = await enrol({ network_type: 'vlan', physical_network: 'physnet1', segment_id: 250 + 50 });
        expect(unchecked).toMatchObject({ status: 409, body: { error_message: expect.stringContaining("Neutron's network segment ranges cannot be read") } });
        expect(unchecked.body.error_message).toContain('service_plugins = network_segment_range');
        expect(unchecked.body.error_message).toContain('LK_NEUTRON_TENANT_VLAN_RANGES');
        const inConfiguredRange = await enrol({ network_type: 'vlan', physical_network: 'physnet2', segment_id: 450 });
        expect(inConfiguredRange).toMatchObject({ status: 409, body: { error_message: expect.stringContaining('lies in LK_NEUTRON_TENANT_VLAN_RANGES physnet2:400:499') } });
        for (const [physnet, tag] of [['physnet2', 300], ['physnet3', 301]] as const) {
          const configured = await enrol({ network_type: 'vlan', physical_network: physnet, segment_id: tag });
          expect(configured.status).toBe(201);
          expect((await admin('DELETE', `/v1/networks/${configured.body.network.id}`)).status).toBe(204);
        }
      } finally {
        neutron.ranges = ranges;
      }
      expect(await member('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: 300 })).toMatchObject({ status: 403 });
    });

    it('refuses to remove a segment while a lease holds it, naming the lease, and removes it once the lease is gone', async () => {
      const extra = await admin('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: 260, pool: 'removal' });
      expect(extra.status).toBe(201);
      const held = await lease(member, 'holds-260', `${D3} 10:00`, `${D3} 12:00`, [networkReservation({ resource_properties: '["==", "$pool", "removal"]' })]);
      expect(held.status).toBe(201);
      const refused = await admin('DELETE', `/v1/networks/${extra.body.network.id}`);
      expect(refused).toMatchObject({ status: 409, body: { error_message: `Can't delete network segment ${extra.body.network.id}. It is allocated by reservations of lease(s) holds-260 (${held.body.lease.id}).` } });
      const allocation = await admin('GET', `/v1/networks/${extra.body.network.id}/allocation`);
      expect(allocation.body.allocation).toEqual({ resource_id: extra.body.network.id, reservations: [expect.objectContaining({ id: held.body.lease.reservations[0].id, lease_id: held.body.lease.id, project_id: 'project-a' })] });
      expect((await member('DELETE', `/v1/leases/${held.body.lease.id}`)).status).toBe(204);
      // A booking committed before its lease's row (admitted by the workflow, or the external filter) holds it too.
      const unrecorded = randomUUID();
      const client = await stack().db.pool.connect();
      try {
        const fromMs = Date.now() + 86_400_000;
        await networkSegmentBookings.insert(client, { resourceId: extra.body.network.id, reservationId: randomUUID(), leaseId: unrecorded, projectId: 'project-a', fromMs, endMs: fromMs + 3_600_000, leadMs: 0, bookingKey: 'k' });
        const stillHeld = await admin('DELETE', `/v1/networks/${extra.body.network.id}`);
        expect(stillHeld).toMatchObject({ status: 409, body: { error_message: expect.stringContaining(`booking of ${unrecorded} (no live lease)`) } });
        await networkSegmentBookings.deleteLease(client, unrecorded);
      } finally {
        client.release();
      }
      expect((await admin('DELETE', `/v1/networks/${extra.body.network.id}`)).status).toBe(204);
    });
    it('answers an admission that chose a segment removed meanwhile by choosing again (409 never fits), not 400', async () => {
      const racing = await admin('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: 270, pool: 'racing' });
      expect(racing.status).toBe(201);
      const remover = await stack().db.pool.connect();
      try {
        // The removal's transaction, not committed yet: the admission still sees the segment and books it, then waits on its row.
        await remover.query('BEGIN');
        await remover.query('SELECT 1 FROM network_segments WHERE id = $1 FOR UPDATE', [racing.body.network.id]);
        await remover.query('DELETE FROM network_segments WHERE id = $1', [racing.body.network.id]);
        const admission = lease(member, 'racing', `${D3} 16:00`, `${D3} 17:00`, [networkReservation({ resource_properties: '["==", "$pool", "racing"]' })]);
        await eventually(async () => ((await stack().db.pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO network_segment_allocations%'")).rowCount ? true : undefined), 10_000);
        await remover.query('COMMIT');
        expect(await admission).toMatchObject({ status: 409, body: { error_message: expect.stringContaining('no enrolled network segment matches') } });
      } finally {
        await remover.query('ROLLBACK').catch(() => undefined);
        remover.release();
      }
    });
  });

  describe('admission', () => {
    it('books one segment per reservation, refuses a third with offers, and lets a property query pick the segment', async () => {
      const first = await lease(member, 'net-1', `${D1} 10:00`, `${D1} 12:00`, [networkReservation()]);
      expect(first.status).toBe(201);
      expect(first.body.lease.reservations[0]).toMatchObject({ resource_type: 'network', network_name: 'my-net', network_id: null, segment: { network_type: 'vlan', physical_network: 'physnet1' } });
      const second = await lease(other, 'net-2', `${D1} 11:00`, `${D1} 13:00`, [networkReservation()]);
      expect(second.status).toBe(201);
      const tags = [first, second].map((l) => l.body.lease.reservations[0].segment.segment_id).sort();
      expect(tags).toEqual(['250', '251']);
      const third = await lease(other, 'net-3', `${D1} 11:30`, `${D1} 12:30`, [networkReservation()]);
      expect(third.status).toBe(409);
      expect(third.body).toMatchObject({ error_code: 409, reason: 'capacity', earliest_start: `${D1} 12:00`, error_message: expect.stringContaining('Not enough network segments available.') });
      expect(third.body.offers.length).toBeGreaterThan(0);
      expect(third.body.offers[0]).toMatchObject({ kind: 'later', start_date: `${D1} 12:00` });
      // The allocations name both bookings to an admin.
      const allocations = (await admin('GET', '/v1/networks/allocations')).body.allocations;
      expect(allocations.flatMap((a: { reservations: unknown[] }) => a.reservations)).toHaveLength(2);

      // A query over a capability picks the segment that has it; over the tag, that tag.
      const stitched = await lease(member, 'stitched', `${D2} 10:00`, `${D2} 11:00`, [networkReservation({ resource_properties: '["==", "$stitch_provider", "fabric"]' })]);
      expect(stitched.body.lease.reservations[0].segment.segment_id).toBe('250');
      const tagged = await lease(member, 'tagged', `${D2} 10:00`, `${D2} 11:00`, [networkReservation({ network_properties: ['==', '$segment_id', '251'] })]);
      expect(tagged.body.lease.reservations[0].segment.segment_id).toBe('251');
      const none = await lease(member, 'none', `${D2} 12:00`, `${D2} 13:00`, [networkReservation({ network_properties: '["==", "$physical_network", "physnet2"]' })]);
      expect(none).toMatchObject({ status: 409, body: { error_message: expect.stringContaining('no enrolled network segment matches') } });
      const unknownKey = await lease(member, 'unknown', `${D2} 12:00`, `${D2} 13:00`, [networkReservation({ resource_properties: '["==", "$colour", "red"]' })]);
      expect(unknownKey).toMatchObject({ status: 400, body: { error_message: expect.stringContaining('unknown property $colour') } });
      const noName = await lease(member, 'noname', `${D2} 12:00`, `${D2} 13:00`, [networkReservation({ network_name: '' })]);
      expect(noName.status).toBe(400);
      // A pending lease's update books again: its query now asks for the other tag.
      const moving = await lease(member, 'moving', `${D3} 14:00`, `${D3} 15:00`, [networkReservation({ resource_properties: '["==", "$segment_id", "250"]' })]);
      expect(moving.body.lease.reservations[0].segment.segment_id).toBe('250');
      const moved = await member('PUT', `/v1/leases/${moving.body.lease.id}`, { reservations: [{ id: moving.body.lease.reservations[0].id, resource_properties: '["==", "$segment_id", "251"]' }] });
      expect(moved.status).toBe(200);
      expect(moved.body.lease.reservations[0].segment.segment_id).toBe('251');
      const longName = await lease(member, 'longname', `${D2} 12:00`, `${D2} 13:00`, [networkReservation({ network_name: 'n'.repeat(256) })]);
      expect(longName.status).toBe(400);
    });
  });

  it("holds an offer's segment against other leases and frees it when the hold is released", async () => {
    const day = dayAhead(33);
    const only250 = networkReservation({ resource_properties: '["==", "$segment_id", "250"]' });
    const offers = await member('POST', '/v1/offers', { reservations: [only250], duration: 60, start_after: `${day} 10:00`, limit: 1 });
    expect(offers.status).toBe(200);
    expect(offers.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00`, reservations: [{ resource_type: 'network', segments: 1 }] });
    const held = await member('POST', `/v1/offers/${offers.body.offers[0].id}/hold`, { minutes: 5 });
    expect(held.status).toBe(201);
    const heldRows = async () => (await stack().db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM network_segment_allocations WHERE lease_id = $1', [held.body.hold.id])).rows[0].n;
    expect(await heldRows()).toBe(1);
    // The hold's booking has no lease row: the segment still cannot be removed from under it.
    expect(await admin('DELETE', `/v1/networks/${segments['250']}`)).toMatchObject({ status: 409, body: { error_message: expect.stringContaining(`offer hold ${held.body.hold.id}`) } });
    expect((await lease(other, 'blocked', `${day} 10:00`, `${day} 11:00`, [only250])).status).toBe(409);
    expect((await member('DELETE', `/v1/offers/${offers.body.offers[0].id}/hold`)).status).toBe(204);
    expect(await heldRows()).toBe(0);
    expect((await lease(other, 'after-release', `${day} 10:00`, `${day} 11:00`, [only250])).status).toBe(201);
  });

  describe('start and end', () => {
    it("makes the lessee's network on exactly the booked segment at the start (a lost answer retried finds it), and at the end deletes its ports, then the network", async () => {
      neutron.failTaggingTimes = 1;
      const made = await lease(member, 'live', 'now', inSeconds(3600), [networkReservation({ network_name: 'experiment', network_description: 'stitched to the exchange' })]);
      expect(made.status).toBe(201);
      const active = await statusIs(made.body.lease.id, 'ACTIVE');
      const reservation = active.reservations[0];
      const created = neutron.networks.filter((n) => n.name === 'experiment');
      // One network, though the first try's answer was lost after Neutron made it.
      expect(created).toHaveLength(1);
      const network = created[0];
      expect(network).toMatchObject({
        project_id: 'project-a',
        'provider:network_type': 'vlan',
        'provider:physical_network': 'physnet1',
        'provider:segmentation_id': Number(reservation.segment.segment_id),
        tags: ['blazar', `reservation:${reservation.id}`],
        description: expect.stringContaining(`stitched to the exchange (leasekeeper: reservation ${reservation.id})`),
      });
      expect(reservation.network_id).toBe(network.id);
      expect((await leaseOf(made.body.lease.id)).reservations[0]).toMatchObject({ network_id: network.id, segment: reservation.segment });

      // Another project sees neither the lease nor which segment it holds.
      expect((await other('GET', `/v1/leases/${made.body.lease.id}`)).status).toBe(404);
      const window = `start=${encodeURIComponent(inSeconds(-60))}&end=${encodeURIComponent(inSeconds(7200))}`;
      const theirs = (await other('GET', `/v1/calendar?${window}`)).body.networks;
      const bookedRow = theirs.find((n: { bookings: unknown[] }) => n.bookings.length > 0);
      expect(bookedRow.bookings).toEqual([{ start_ms: expect.any(Number), end_ms: expect.any(Number), reserved: true }]);
      expect(JSON.stringify(theirs)).not.toContain(network.id);
      expect(JSON.stringify(theirs)).not.toContain('fabric'); // capabilities are the admins'
      const mine = (await member('GET', `/v1/calendar?${window}`)).body.networks.find((n: { id: string }) => n.id === bookedRow.id);
      expect(mine.bookings).toEqual([expect.objectContaining({ lease_id: made.body.lease.id, reservation_id: reservation.id, lease_name: 'live', status: 'ACTIVE' })]);

      // A server's port, a router's interface and DHCP's port on it: the server's deleted, the interface removed by its router.
      neutron.port(network.id, 'compute:nova');
      const routerPort = neutron.port(network.id, 'network:router_interface', 'router-1');
      neutron.port(network.id, 'network:dhcp');
      neutron.calls.length = 0;
      expect((await member('PUT', `/v1/leases/${made.body.lease.id}`, { end_date: 'now' })).status).toBe(200);
      const ended = await statusIs(made.body.lease.id, 'TERMINATED');
      expect(ended.reservations[0].network_id).toBeNull();
      expect(neutron.calls).toEqual(['delete port compute:nova', `remove router interface ${routerPort.device_id}`, 'delete network experiment']);
      expect(neutron.networks.filter((n) => n.name === 'experiment')).toEqual([]);
      expect(neutron.ports.filter((p) => p.network_id === network.id)).toEqual([]);
    });

    it('starts a host and a network reservation all or nothing: a failing host start takes the network back and frees both', async () => {
      failHostStart = true;
      const made = await lease(member, 'both', 'now', inSeconds(3600), [networkReservation({ network_name: 'with-hosts' }), hostReservation()]);
      expect(made.status).toBe(201);
      const failed = await statusIs(made.body.lease.id, 'ERROR');
      expect(failed.status_reason).toContain('the hosts could not be moved');
      expect(neutron.calls).toContain('create network with-hosts');
      expect(neutron.networks.filter((n) => n.name === 'with-hosts')).toEqual([]);
      expect((await admin('GET', '/v1/networks/allocations')).body.allocations.flatMap((a: { reservations: Array<{ lease_id: string }> }) => a.reservations.map((r) => r.lease_id))).not.toContain(made.body.lease.id);
    });

    it("fails the start of a host and network lease whose segment someone else's network took, undoing the hosts and saying so", async () => {
      // Made after the segment's enrolment, outside leasekeeper (an operator's network on the tag).
      const squatter = neutron.network({ 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': 251, project_id: 'ops' });
      try {
        const made = await lease(member, 'taken', 'now', inSeconds(3600), [hostReservation(), networkReservation({ network_name: 'never', resource_properties: '["==", "$segment_id", "251"]' })]);
        expect(made.status).toBe(201);
        const failed = await statusIs(made.body.lease.id, 'ERROR');
        expect(failed.status_reason).toContain('network segment vlan:physnet1:251 is taken in Neutron by a network outside this lease: an operator must act');
        // Whose network it is goes to the worker's log, never to the lessee.
        expect(failed.status_reason).not.toContain(squatter.id);
        expect(failed.status_reason).not.toContain('ops');
        expect(failed.reservations.map((r: { status: string }) => r.status)).toEqual(['error', 'error']);
        expect(neutron.networks.filter((n) => n.name === 'never')).toEqual([]);
        // The host's booking no longer blocks anything (a started reservation's row is ended, kept as its record).
        const blocking = await stack().db.pool.query('SELECT 1 FROM host_allocations WHERE lease_id = $1 AND upper(blocks) > now()', [made.body.lease.id]);
        expect(blocking.rowCount).toBe(0);
      } finally {
        neutron.networks = neutron.networks.filter((n) => n !== squatter);
      }
    });

    it('keeps its segment and network through an extension, and gets its network again on the same tag when Neutron lost it (drift check)', async () => {
      const made = await lease(member, 'kept', 'now', inSeconds(3600), [networkReservation({ network_name: 'kept-net' })]);
      const active = await statusIs(made.body.lease.id, 'ACTIVE');
      const { network_id: networkId, segment } = active.reservations[0];
      neutron.calls.length = 0;
      const extended = await member('PUT', `/v1/leases/${made.body.lease.id}`, { end_date: inSeconds(7200) });
      expect(extended.status).toBe(200);
      expect((await leaseOf(made.body.lease.id)).reservations[0]).toMatchObject({ network_id: networkId, segment });
      expect(neutron.calls).toEqual([]);
      // A started reservation keeps its segment and its network as made: queries its segment does not answer, and a new name, are refused.
      const reservationId = active.reservations[0].id;
      const otherTag = segment.segment_id === '250' ? '251' : '250';
      const requery = await member('PUT', `/v1/leases/${made.body.lease.id}`, { reservations: [{ id: reservationId, network_properties: `["==", "$segment_id", "${otherTag}"]` }] });
      expect(requery).toMatchObject({ status: 400, body: { error_message: expect.stringContaining('Network reservation cannot be updated with requested parameters.') } });
      const renamed = await member('PUT', `/v1/leases/${made.body.lease.id}`, { reservations: [{ id: reservationId, network_name: 'renamed' }] });
      expect(renamed).toMatchObject({ status: 400, body: { error_message: expect.stringContaining('Updating network_name or network_description of a started reservation is not supported') } });
      expect((await leaseOf(made.body.lease.id)).reservations[0]).toMatchObject({ network_name: 'kept-net', network_properties: '', network_id: networkId, segment });

      // Neutron lost the network: the drift check sees it, and the next one (seen again) makes it anew on the same tag.
      neutron.networks = neutron.networks.filter((n) => n.id !== networkId);
      const drift = networkSegmentPlugin({ pool: stack().db.pool, cloud });
      const first = await drift.checkDrift!({}, 'repair');
      const key = `network:${active.reservations[0].id}`;
      expect(first).toEqual({ seen: { [key]: `its network on vlan:physnet1:${segment.segment_id} is gone from Neutron` }, repaired: [], reported: [], aggregatesRemoved: [], leasesToHeal: [] });
      expect((await drift.checkDrift!(first.seen, 'report')).reported).toHaveLength(1);
      expect(neutron.networks.filter((n) => n.name === 'kept-net')).toEqual([]);
      const second = await drift.checkDrift!(first.seen, 'repair');
      // The repair is the lease's own heal, under its lock (never racing its end): the check only has it told.
      expect(second.repaired).toEqual([`reservation ${reservationId}: its network on vlan:physnet1:${segment.segment_id} is gone from Neutron (lease ${made.body.lease.id} told to heal: it makes the network again)`]);
      expect(second.leasesToHeal).toEqual([made.body.lease.id]);
      expect(neutron.networks.filter((n) => n.name === 'kept-net')).toEqual([]);
      await stack().temporal.client.workflow.getHandle(leaseWorkflowId(made.body.lease.id)).signal(hostsChanged, { hostIds: [] });
      const remade = await eventually(() => Promise.resolve(neutron.networks.find((n) => n.name === 'kept-net')), 30_000);
      expect(remade).toMatchObject({ project_id: 'project-a', 'provider:segmentation_id': Number(segment.segment_id), tags: ['blazar', `reservation:${reservationId}`] });
      // The lease JSON shows the network made again, not the lost one.
      expect(await eventually(async () => ((await leaseOf(made.body.lease.id)).reservations[0].network_id === remade.id ? true : undefined), 30_000)).toBe(true);
      expect((await drift.checkDrift!(second.seen, 'repair')).seen).toEqual({});

      // A heal (the lease told its hosts changed) makes it again too, at once.
      neutron.networks = neutron.networks.filter((n) => n.name !== 'kept-net');
      const stored = (await findLease(stack().db.pool, made.body.lease.id))!;
      const hook = { ...reservationContext(stored, stored.reservations[0]), reportProgress: () => undefined, placementOf: () => Promise.resolve({ hosts: [] }), announce: () => Promise.resolve() };
      const healed = await drift.heal!(typedContext(drift, hook));
      const again = neutron.networks.filter((n) => n.name === 'kept-net');
      expect(again).toEqual([expect.objectContaining({ 'provider:segmentation_id': Number(segment.segment_id), project_id: 'project-a' })]);
      expect(healed).toEqual({ allocation: { network_id: again[0].id }, missingResources: false, resourcesChanged: false });
    });

    it("deletes ordinary ports before router interfaces, leaves a router's own ports to go with them, and takes the network though the lessee untagged it", async () => {
      const made = await lease(member, 'routed', 'now', inSeconds(3600), [networkReservation({ network_name: 'routed-net' })]);
      const active = await statusIs(made.body.lease.id, 'ACTIVE');
      const network = neutron.networks.find((n) => n.id === active.reservations[0].network_id)!;
      // Listed first: the router's interface; then DVR's SNAT port of that router, and a server's port whose floating IP goes out through it.
      neutron.port(network.id, 'network:router_interface_distributed', 'router-2');
      neutron.port(network.id, 'network:router_centralized_snat', 'router-2');
      const server = neutron.port(network.id, 'compute:nova');
      neutron.floatingIpVia.set(server.id, 'router-2');
      neutron.port(network.id, 'network:dhcp');
      // The lessee owns the network: Neutron's default policy lets them drop its tags and description.
      network.tags = [];
      network.description = 'mine now';
      neutron.calls.length = 0;
      expect((await member('PUT', `/v1/leases/${made.body.lease.id}`, { end_date: 'now' })).status).toBe(200);
      const ended = await statusIs(made.body.lease.id, 'TERMINATED');
      expect(ended.reservations[0].network_id).toBeNull();
      expect(neutron.calls).toEqual(['delete port compute:nova', 'remove router interface router-2', 'delete network routed-net']);
      expect(neutron.networks.filter((n) => n.id === network.id)).toEqual([]);
    });

    it('ends in ERROR naming a port Neutron refuses to delete (a trunk parent) after the bounded wait, as NetworkNotDeleted', async () => {
      const made = await lease(member, 'trunked', 'now', inSeconds(3600), [networkReservation({ network_name: 'trunk-net' })]);
      const active = await statusIs(made.body.lease.id, 'ACTIVE');
      const network = neutron.networks.find((n) => n.id === active.reservations[0].network_id)!;
      const parent = neutron.port(network.id, 'compute:nova');
      neutron.trunkParents.add(parent.id);
      try {
        expect((await member('PUT', `/v1/leases/${made.body.lease.id}`, { end_date: 'now' })).status).toBe(200);
        const failed = await statusIs(made.body.lease.id, 'ERROR');
        expect(failed.status_reason).toContain(`network(s) ${network.id} still in use: port ${parent.id} (compute:nova)`);
        // The end's own failure type, not the hosts' ServersNotDeleted.
        const stored = (await findLease(stack().db.pool, made.body.lease.id))!;
        const plugin = networkSegmentPlugin({ pool: stack().db.pool, cloud, deleteTimeoutMs: 0 });
        const hook = { ...reservationContext(stored, stored.reservations[0]), reportProgress: () => undefined, placementOf: () => Promise.resolve({ hosts: [] }), announce: () => Promise.resolve(), started: true };
        await expect(plugin.end(typedContext(plugin, hook))).rejects.toMatchObject({ type: 'NetworkNotDeleted' });
      } finally {
        neutron.trunkParents.delete(parent.id);
        neutron.ports = neutron.ports.filter((p) => p !== parent);
        neutron.networks = neutron.networks.filter((n) => n !== network);
      }
    });

    it("adopts the network an overlapping try of its start made first (the create answered 409), and refuses one on its segment it did not make", async () => {
      // The first try's create was slow: the retry lists nothing, and the first try's network commits before the retry's create.
      neutron.beforeCreateNetwork = (request) => {
        neutron.beforeCreateNetwork = undefined;
        neutron.network({ ...request, project_id: request.project_id!, 'provider:physical_network': request['provider:physical_network'] ?? null, name: request.name!, description: request.description! });
      };
      try {
        const made = await lease(member, 'overlap', 'now', inSeconds(3600), [networkReservation({ network_name: 'overlap-net', resource_properties: '["==", "$segment_id", "250"]' })]);
        const active = await statusIs(made.body.lease.id, 'ACTIVE');
        const onIt = neutron.networks.filter((n) => n.name === 'overlap-net');
        expect(onIt).toHaveLength(1);
        expect(active.reservations[0].network_id).toBe(onIt[0].id);
        expect(onIt[0].tags).toEqual(['blazar', `reservation:${active.reservations[0].id}`]);
      } finally {
        neutron.beforeCreateNetwork = undefined;
      }
      // A network of the lessee's own project on the segment that no try of ours made (an operator's): the segment is taken.
      const notOurs = neutron.network({ 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': 251, project_id: 'project-a', name: 'operator-made' });
      try {
        const refused = await lease(member, 'not-ours', 'now', inSeconds(3600), [networkReservation({ network_name: 'never-2', resource_properties: '["==", "$segment_id", "251"]' })]);
        const failed = await statusIs(refused.body.lease.id, 'ERROR');
        expect(failed.status_reason).toContain('network segment vlan:physnet1:251 is taken in Neutron by a network outside this lease');
        expect(neutron.networks.filter((n) => n.id === notOurs.id)).toHaveLength(1);
      } finally {
        neutron.networks = neutron.networks.filter((n) => n !== notOurs);
      }
    });

    it("ends in ERROR naming the port Neutron keeps, once the end's wait for it is over", async () => {
      const made = await lease(member, 'stuck', 'now', inSeconds(3600), [networkReservation({ network_name: 'stuck-net' })]);
      const active = await statusIs(made.body.lease.id, 'ACTIVE');
      const network = neutron.networks.find((n) => n.id === active.reservations[0].network_id)!;
      const stuck = neutron.port(network.id, 'compute:nova');
      // Neutron answers the delete and keeps the port (an agent that never lets go).
      const deletePort = neutron.deletePort.bind(neutron);
      neutron.deletePort = (id: string) => (id === stuck.id ? Promise.resolve() : deletePort(id));
      try {
        expect((await member('PUT', `/v1/leases/${made.body.lease.id}`, { end_date: 'now' })).status).toBe(200);
        const failed = await statusIs(made.body.lease.id, 'ERROR');
        expect(failed.status_reason).toContain(`network(s) ${network.id} still in use: port ${stuck.id} (compute:nova)`);
      } finally {
        neutron.deletePort = deletePort;
        neutron.ports = neutron.ports.filter((p) => p !== stuck);
        neutron.networks = neutron.networks.filter((n) => n !== network);
      }
    });
  });
});
