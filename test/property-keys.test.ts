/**
 * A property query naming a key its resource type does not know is refused by the API itself (400,
 * Blazar's error body naming the key), before any workflow or booking: no worker runs here, so a
 * query that reached the lease workflow would get no answer at all (503 after the API's deadline).
 */
import { HYPERVISOR_FIELDS } from '../src/db/hosts';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, useTestStack } from '../dev-stack/stack';

// Within a member's advance-booking limit.
const day = new Date(Date.now() + 30 * 86_400_000).toISOString().slice(0, 10);
const START = `${day} 10:00`;
const END = `${day} 12:00`;
const colour = JSON.stringify(['==', '$colour', 'blue']);
const unknownCapability = { error_code: 400, error_name: 400, error_message: 'resource_properties: unknown property $colour (known: $gpu)' };
const unknownHypervisorField = {
  error_code: 400,
  error_name: 400,
  error_message: `hypervisor_properties: unknown property $colour (known: ${[...HYPERVISOR_FIELDS].sort().map((f) => `$${f}`).join(', ')})`,
};

describe('property queries with unknown keys', () => {
  const stack = useTestStack({
    noWorker: true,
    env: { LK_API_WORKFLOW_TIMEOUT_MS: '3000' },
    withPool: (pool) => [
      physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }),
      virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }),
    ],
  });
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-roles': 'member' });

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'gpu-host', vcpus: 8, capabilities: { gpu: 'a100' } });
  });

  const leaseNames = async () => (await stack().db.pool.query<{ name: string }>('SELECT name FROM leases ORDER BY name')).rows.map((r) => r.name);
  const instance = (fields: Record<string, unknown>) => ({ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1, ...fields });
  const create = (name: string, reservation: Record<string, unknown>) => member('POST', '/v1/leases', { name, start_date: START, end_date: END, reservations: [reservation] });

  it('are refused at lease creation, for host and instance leases, naming the key', async () => {
    const answers = {
      hostResource: await create('unknown-host-resource', blazarHostReservation({ resource_properties: colour })),
      hostHypervisor: await create('unknown-host-hypervisor', blazarHostReservation({ hypervisor_properties: colour })),
      instance: await create('unknown-instance', instance({ resource_properties: colour })),
    };
    expect(Object.fromEntries(Object.entries(answers).map(([what, res]) => [what, { status: res.status, body: res.body }]))).toEqual({
      hostResource: { status: 400, body: unknownCapability },
      hostHypervisor: { status: 400, body: unknownHypervisorField },
      instance: { status: 400, body: unknownCapability },
    });
    expect(await leaseNames()).toEqual([]);
  });

  it('are refused at lease update and availability search, before the lease workflow is asked', async () => {
    const lease = await create('known-keys', blazarHostReservation({ resource_properties: JSON.stringify(['==', '$gpu', 'a100']) }));
    expect([lease.status, lease.body.error_message]).toEqual([201, undefined]);
    const reservationId = lease.body.lease.reservations[0].id;
    const update = (fields: Record<string, unknown>) => member('PUT', `/v1/leases/${lease.body.lease.id}`, { reservations: [{ id: reservationId, ...fields }] });
    const search = (reservation: Record<string, unknown>) => member('POST', '/v1/availability/search', { start_date: START, end_date: END, reservations: [reservation] });
    const answers = [await update({ resource_properties: colour }), await update({ hypervisor_properties: colour }), await search(instance({ resource_properties: colour }))];
    expect(answers.map((res) => ({ status: res.status, body: res.body }))).toEqual([
      { status: 400, body: unknownCapability },
      { status: 400, body: unknownHypervisorField },
      { status: 400, body: unknownCapability },
    ]);
    // The lease is as created: its query, its booking.
    const shown = await member('GET', `/v1/leases/${lease.body.lease.id}`);
    expect(shown.body.lease.reservations[0]).toMatchObject({ resource_properties: '["==","$gpu","a100"]', hosts: ['gpu-host'] });
    expect(await leaseNames()).toEqual(['known-keys']);
  });
});
