/**
 * Two parts of the lease life that resource types lean on: the provisioning lead time (resources
 * are made ready before the start) and end hooks that wait (hosts recycling until their last
 * server is gone), including a delete that arrives while the end waits.
 */
import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, eventually, inSeconds, leaseHistoryEvents, useTestStack } from '../dev-stack/stack';

/** A protobuf timestamp or duration ({seconds, nanos}) in milliseconds. */
const millisOf = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6);

const LEAD_SECONDS = 4;

describe('provisioning lead time and waiting end hooks', () => {
  const plugin = new RecordingPlugin();
  const stack = useTestStack({ plugins: [plugin], env: { LK_PROVISIONING_LEAD_TIME_SECONDS: String(LEAD_SECONDS) } });
  const api = apiClient(() => stack().url);

  const statusOf = async (id: string) => {
    const res = await api('GET', `/v1/leases/${id}`);
    return res.status === 404 ? 'GONE' : (res.body.lease.status as string);
  };
  const waitForStatus = (id: string, status: string, timeoutMs = 30_000) => eventually(async () => ((await statusOf(id)) === status ? true : undefined), timeoutMs);

  it('starts the resources the lead time before the start, and keeps the start date as asked', async () => {
    const created = await api('POST', '/v1/leases', { name: 'lead', start_date: inSeconds(8), end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording' }] });
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    const scheduledStart = Date.parse(`${lease.start_date}Z`);
    await waitForStatus(lease.id, 'ACTIVE');
    // When the workflow woke to start is read from its history (the timer it waited on), not from
    // when the activity happened to run: a loaded machine runs the activity late, not the timer.
    const events = await leaseHistoryEvents(stack(), lease.id);
    const started = events.findIndex((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'startReservation');
    expect(started).toBeGreaterThan(0);
    // The last timer fired before the start. Its duration counts from the workflow's clock (when its
    // task began) and the server counts it from when the task ended: so it fires at the lead start,
    // later by at most that task's own time, never before.
    const before = events.slice(0, started);
    const firedEvent = before.filter((e) => e.timerFiredEventAttributes).pop()!;
    const startedIndex = before.findIndex((e) => e.timerStartedEventAttributes?.timerId === firedEvent.timerFiredEventAttributes!.timerId);
    const taskBegan = before.slice(0, startedIndex).filter((e) => e.workflowTaskStartedEventAttributes).pop()!;
    const taskTime = millisOf(before[startedIndex].eventTime) - millisOf(taskBegan.eventTime);
    const leadStart = scheduledStart - LEAD_SECONDS * 1000;
    expect(millisOf(firedEvent.eventTime)).toBeGreaterThanOrEqual(leadStart);
    expect(millisOf(firedEvent.eventTime) - leadStart).toBeLessThanOrEqual(taskTime + 500);
    expect(plugin.callsFor(lease.id, 'start')).toHaveLength(1);
    const shown = (await api('GET', `/v1/leases/${lease.id}`)).body.lease;
    expect(shown.start_date).toBe(lease.start_date);
    await api('DELETE', `/v1/leases/${lease.id}`);
    await waitForStatus(lease.id, 'GONE');
  }, 60_000);

  it('stays TERMINATING while the end hook waits, polls it, then ends', async () => {
    const created = await api('POST', '/v1/leases', { name: 'waits', start_date: 'now', end_date: inSeconds(3), reservations: [{ resource_type: 'test:recording', end_waits: 2 }] });
    expect(created.status).toBe(201);
    const id = created.body.lease.id;
    await waitForStatus(id, 'TERMINATING');
    const waiting = await stack().temporal.client.workflow.getHandle(`lease-${id}`).describe();
    expect(waiting.status.name).toBe('RUNNING');
    await waitForStatus(id, 'TERMINATED');
    const ends = plugin.callsFor(id, 'end');
    expect(ends.map((c) => [c.started, c.force ?? false])).toEqual([
      [true, false],
      [true, false],
      [true, false],
    ]);
    // Polled about a second apart (the hook asked for 1 s), not in a tight loop.
    expect(ends[2].startedAt - ends[1].startedAt).toBeGreaterThanOrEqual(900);
    await api('DELETE', `/v1/leases/${id}`);
    await waitForStatus(id, 'GONE');
  }, 60_000);

  it('a delete while the end waits takes everything back at once', async () => {
    const created = await api('POST', '/v1/leases', { name: 'forced', start_date: 'now', end_date: inSeconds(2), reservations: [{ resource_type: 'test:recording', end_waits: 100 }] });
    const id = created.body.lease.id;
    await waitForStatus(id, 'TERMINATING');
    const deleted = await api('DELETE', `/v1/leases/${id}`);
    expect(deleted.status).toBe(204);
    await waitForStatus(id, 'GONE');
    const ends = plugin.callsFor(id, 'end');
    expect(ends.length).toBeLessThan(100);
    expect(ends[ends.length - 1]).toMatchObject({ started: true, force: true });
  }, 60_000);
});
