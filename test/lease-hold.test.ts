/**
 * Parts of the lease life that server and bandwidth reservations lean on: the hold right after
 * admission (a server shelved until its start), start/end hooks that report what they did (the
 * host a server landed on, the snapshot it left) merged into the lease JSON, and a start made of
 * steps, each its own activity (ports, candidates, binding, allocations).
 */
import { RecordingPlugin } from './support/recording-plugin';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

describe('hold until start, and hooks that report', () => {
  const plugin = new RecordingPlugin();
  /** The deployment's webhook: every lease notice. */
  let deployment: WebhookReceiver;
  beforeAll(async () => {
    deployment = await startWebhookReceiver();
  });
  afterAll(async () => {
    await deployment.close();
  });
  const stack = useTestStack(() => ({ plugins: [plugin], env: { LK_WEBHOOK_URLS: deployment.url, LK_WEBHOOK_SECRET: 'lease-hold-secret', LK_WEBHOOK_ALLOW_PRIVATE: 'true' } }));
  const api = apiClient(() => stack().url);

  const leaseOf = async (id: string) => {
    const res = await api('GET', `/v1/leases/${id}`);
    return res.status === 404 ? undefined : res.body.lease;
  };
  const waitForStatus = (id: string, status: string, timeoutMs = 30_000) =>
    eventually(async () => ((await leaseOf(id))?.status === status || (status === 'GONE' && !(await leaseOf(id))) ? true : undefined), timeoutMs);

  it('holds right after admission, starts later, and shows what start and end reported', async () => {
    const created = await api('POST', '/v1/leases', {
      name: 'held',
      start_date: inSeconds(4),
      end_date: inSeconds(7),
      reservations: [
        { resource_type: 'test:recording', hold: true, report: true },
        { resource_type: 'test:recording' },
      ],
    });
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    const [held, plain] = lease.reservations;
    const scheduledStart = Date.parse(`${lease.start_date}Z`);
    await eventually(() => Promise.resolve(plugin.callsFor(lease.id, 'hold').length > 0 ? true : undefined), 10_000);
    const holds = plugin.callsFor(lease.id, 'hold');
    // Only the reservation that asked for it is held, once, well before the start.
    expect(holds.map((c) => c.reservationId)).toEqual([held.id]);
    expect(holds[0].startedAt).toBeLessThan(scheduledStart - 1_000);
    // What the hold reported joins the reservation (an instance reservation's flavor, aggregate and server group).
    const afterHold = await eventually(async () => {
      const now = await leaseOf(lease.id);
      return now.reservations.find((r: { id: string }) => r.id === held.id).held_as ? now : undefined;
    }, 10_000);
    expect(afterHold.status).toBe('PENDING');
    expect(afterHold.reservations.find((r: { id: string }) => r.id === held.id).held_as).toBe(`shelf-${held.id.slice(0, 8)}`);

    await waitForStatus(lease.id, 'ACTIVE');
    const active = await leaseOf(lease.id);
    expect(active.reservations.find((r: { id: string }) => r.id === held.id).started_on).toBe('node-1');
    expect(active.reservations.find((r: { id: string }) => r.id === plain.id).started_on).toBeUndefined();

    await waitForStatus(lease.id, 'TERMINATED');
    const ended = await leaseOf(lease.id);
    const heldAfter = ended.reservations.find((r: { id: string }) => r.id === held.id);
    expect(heldAfter.left_behind).toBe(`image-of-${held.id.slice(0, 8)}`);
    expect(heldAfter.started_on).toBe('node-1'); // earlier reports stay
    expect(heldAfter.held_as).toBe(`shelf-${held.id.slice(0, 8)}`);
    expect(plugin.callsFor(lease.id, 'hold')).toHaveLength(1);
    await api('DELETE', `/v1/leases/${lease.id}`);
    await waitForStatus(lease.id, 'GONE');
  }, 60_000);

  it('a start in steps runs each step as its own activity, in order, each seeing what the earlier handed on', async () => {
    const created = await api('POST', '/v1/leases', {
      name: 'stepped',
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'test:recording', steps: ['make', 'choose', 'bind'] }],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await waitForStatus(id, 'ACTIVE');
    const steps = plugin.callsFor(id, 'startStep');
    expect(steps.map((c) => [c.step, c.state])).toEqual([
      ['make', {}],
      ['choose', { done: ['make'] }],
      ['bind', { done: ['make', 'choose'] }],
    ]);
    expect(plugin.callsFor(id, 'start')).toEqual([]); // the steps replace the single start
    expect((await leaseOf(id)).reservations[0]).toMatchObject({ last_step: 'bind', make_saw: 0, choose_saw: 1, bind_saw: 2 });
    // Each step was its own activity in the history.
    const history = await stack().temporal.client.workflow.getHandle(`lease-${id}`).fetchHistory();
    const scheduled = (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'startReservationStep');
    expect(scheduled).toHaveLength(3);

    const failing = await api('POST', '/v1/leases', {
      name: 'stepped-fails',
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'test:recording', steps: ['make', 'choose', 'bind'], fail_step: 'choose' }],
    });
    await waitForStatus(failing.body.lease.id, 'ERROR');
    expect((await leaseOf(failing.body.lease.id)).status_reason).toBe('start failed: the test resource failed step choose');
    expect(plugin.callsFor(failing.body.lease.id, 'startStep').map((c) => c.step)).toEqual(['make', 'choose']);
    expect(plugin.callsFor(failing.body.lease.id, 'end').map((c) => c.started)).toEqual([false]);
    for (const leaseId of [id, failing.body.lease.id]) await api('DELETE', `/v1/leases/${leaseId}`);
  }, 60_000);

  it('a hold that cannot be done puts the lease in ERROR with the reason and frees every booking', async () => {
    const created = await api('POST', '/v1/leases', {
      name: 'hold-fails',
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [
        { resource_type: 'test:recording', keys: ['thing-1'] },
        { resource_type: 'test:recording', hold: true, fail_hold: true },
      ],
    });
    expect(created.status).toBe(201);
    const id = created.body.lease.id;
    await waitForStatus(id, 'ERROR');
    const lease = await leaseOf(id);
    expect(lease.status_reason).toBe('hold until start failed: the test resource cannot be set aside');
    expect(lease.reservations.map((r: { status: string }) => r.status)).toEqual(['error', 'error']);
    // Both bookings were released as never started, and nothing started.
    expect(plugin.callsFor(id, 'end').map((c) => c.started)).toEqual([false, false]);
    expect(plugin.callsFor(id, 'start')).toEqual([]);
    await api('DELETE', `/v1/leases/${id}`);
    await waitForStatus(id, 'GONE');
  }, 60_000);

  it('a failed hold whose start makes the same resources (an instance reservation) leaves the lease PENDING, saying why, and the start tries again', async () => {
    const created = await api('POST', '/v1/leases', {
      name: 'hold-left-to-start',
      start_date: inSeconds(4),
      end_date: inSeconds(3600),
      reservations: [
        { resource_type: 'test:recording' },
        { resource_type: 'test:recording', hold: true, fail_hold: true, hold_redone_at_start: true },
      ],
    });
    expect(created.status).toBe(201);
    const id = created.body.lease.id;
    const afterHold = await eventually(async () => {
      const lease = await leaseOf(id);
      return lease.status_reason ? lease : undefined;
    }, 10_000);
    expect([afterHold.status, afterHold.status_reason]).toEqual(['PENDING', 'hold until start failed, the start tries again: the test resource cannot be set aside']);
    expect(afterHold.reservations.map((r: { status: string }) => r.status)).toEqual(['pending', 'pending']);
    // Its lessee is told, as of a lease part of which could not be made: degraded, the start to try again.
    const told = await eventually(() => Promise.resolve(deployment.received.find((d) => d.body.payload.lease_id === id && d.body.event_type === 'lease.degraded')), 10_000);
    expect(told.body.payload).toMatchObject({ reason: afterHold.status_reason, reservation_ids: [afterHold.reservations[1].id], retried_at_start: true });
    // Nothing freed: the bookings wait for the start, which runs every reservation's hook (the held one's makes its resources).
    expect(plugin.callsFor(id, 'end')).toEqual([]);
    await waitForStatus(id, 'ACTIVE');
    const started = await leaseOf(id);
    expect(started.status_reason).toBeUndefined();
    expect(plugin.callsFor(id, 'start').map((c) => c.reservationId)).toEqual(started.reservations.map((r: { id: string }) => r.id));
    expect(plugin.callsFor(id, 'hold')).toHaveLength(1);
    await api('DELETE', `/v1/leases/${id}`);
    await waitForStatus(id, 'GONE');
  }, 60_000);

  it('a delete right after admission gives the resource back as never started, and nothing starts', async () => {
    const created = await api('POST', '/v1/leases', {
      name: 'hold-then-delete',
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'test:recording', hold: true, hook_ms: 0 }],
    });
    expect(created.status).toBe(201);
    const id = created.body.lease.id;
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    await waitForStatus(id, 'GONE');
    const calls = plugin.calls.filter((c) => c.leaseId === id).map((c) => c.hook);
    expect(calls.filter((h) => h === 'start')).toEqual([]);
    expect(plugin.callsFor(id, 'end').map((c) => c.started)).toEqual([false]);
  }, 60_000);
});
