/**
 * `PUT /v1/os-hosts/{id} {"reservable": false}` (Chameleon's `disabled`): the host stays enrolled
 * but takes no new lease; pending leases on it are booked again elsewhere, or flagged when nothing
 * else fits (the flag clears when the host is reservable again); an active lease keeps it to its end.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const A100 = JSON.stringify(['==', '$gpu', 'a100']);
const H100 = JSON.stringify(['==', '$gpu', 'h100']);

describe('taking a host out of admission', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const api = apiClient(() => stack().url);
  const ids = new Map<string, string>();
  const later = () => ({ start_date: inSeconds(3600), end_date: inSeconds(7200) });
  const leaseJson = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;
  const nameOf = (hostId: string) => [...ids].find(([, id]) => id === hostId)![0];

  beforeAll(async () => {
    ids.set('a100-1', await insertHost(stack().db.pool, { name: 'a100-1', capabilities: { gpu: 'a100' } }));
    ids.set('a100-2', await insertHost(stack().db.pool, { name: 'a100-2', capabilities: { gpu: 'a100' } }));
    ids.set('h100-1', await insertHost(stack().db.pool, { name: 'h100-1', capabilities: { gpu: 'h100' } }));
  });

  it('moves a pending lease off the host, flags one that cannot move, and clears the flag when the host is back', async () => {
    const window = later();
    const created = await api('POST', '/v1/leases', { name: 'pending-a100', ...window, reservations: [hostReservation({ resource_properties: A100 })] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [first] = created.body.lease.reservations[0].host_ids as string[];
    const other = nameOf(first) === 'a100-1' ? 'a100-2' : 'a100-1';

    // blazarclient's `host-update --extra reservable=False` sends text; a capability may change at the same time.
    const off = await api('PUT', `/v1/os-hosts/${first}`, { reservable: 'False', rack: '9' });
    expect(off.status).toBe(200);
    expect(off.body.host).toMatchObject({ reservable: false, rack: '9', state: 'up' });
    const moved = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].host_ids[0] !== first ? lease : undefined;
    });
    expect(moved.reservations[0]).toMatchObject({ host_ids: [ids.get(other)], hosts: [other], resources_changed: true, missing_resources: false });
    expect(moved.degraded).toBe(true);

    // No new lease may book it: the only other a100 is taken in this window.
    const refused = await api('POST', '/v1/leases', { name: 'no-room', ...window, reservations: [hostReservation({ resource_properties: A100 })] });
    expect(refused.status).toBe(409);

    // The other one out too (Blazar's documented body): nowhere to move, so the lease keeps it and is flagged.
    expect((await api('PUT', `/v1/os-hosts/${ids.get(other)}`, { values: { reservable: false } })).status).toBe(200);
    const flagged = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].missing_resources ? lease : undefined;
    });
    expect(flagged.reservations[0].hosts).toEqual([other]);
    expect(flagged.degraded).toBe(true);

    expect((await api('PUT', `/v1/os-hosts/${ids.get(other)}`, { reservable: true })).body.host.reservable).toBe(true);
    const cleared = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].missing_resources ? undefined : lease;
    });
    // Still moved before its start: resources_changed stays until then.
    expect(cleared.reservations[0]).toMatchObject({ hosts: [other], resources_changed: true });
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    expect((await api('PUT', `/v1/os-hosts/${first}`, { reservable: true })).status).toBe(200);
  });

  it('leaves an active lease on its host to the end', async () => {
    const created = await api('POST', '/v1/leases', { name: 'active-h100', start_date: 'now', end_date: inSeconds(3600), reservations: [hostReservation({ resource_properties: H100 })] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await eventually(async () => ((await leaseJson(id)).status === 'ACTIVE' ? true : undefined));
    expect((await api('PUT', `/v1/os-hosts/${ids.get('h100-1')}`, { reservable: false })).status).toBe(200);
    // Told, it healed nothing: the heal ran (its activity is in the history) and the lease is as it was.
    const handle = stack().temporal.client.workflow.getHandle(leaseWorkflowId(id));
    await eventually(async () => {
      const { events } = await handle.fetchHistory();
      return events?.some((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'healReservation') && events.at(-1)?.workflowTaskCompletedEventAttributes ? true : undefined;
    });
    const lease = await leaseJson(id);
    expect(lease).toMatchObject({ status: 'ACTIVE', degraded: false });
    expect(lease.reservations[0].hosts).toEqual(['h100-1']);
    // But no new lease on it.
    expect((await api('POST', '/v1/leases', { name: 'after', start_date: inSeconds(7200), end_date: inSeconds(9000), reservations: [hostReservation({ resource_properties: H100 })] })).status).toBe(409);
  });

  it('refuses a value that is not true or false, and a released host back into admission', async () => {
    const bad = await api('PUT', `/v1/os-hosts/${ids.get('a100-1')}`, { reservable: 'maybe' });
    expect(bad).toMatchObject({ status: 400, body: { error_code: 400, error_message: 'reservable: expected true or false (whether new leases may book the host)' } });
    await stack().db.pool.query("UPDATE hosts SET reservable = false, released_at = now(), released_by_lease = '00000000-0000-4000-8000-000000000001' WHERE id = $1", [ids.get('a100-2')]);
    const released = await api('PUT', `/v1/os-hosts/${ids.get('a100-2')}`, { reservable: true });
    expect(released.status).toBe(409);
    expect(released.body.error_message).toMatch(/^host a100-2 was released by lease 00000000-0000-4000-8000-000000000001: once it is empty, enrol it again/);
  });
});
