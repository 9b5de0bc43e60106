import { formatBlazarDate } from '../src/domain/dates';
import type { ApiError } from '../src/api/errors';
import { changeLease } from '../src/api/lease-commands';
import { LeaseStatusKey } from '../src/domain/search-attributes';
import { getLease, leaseWorkflowId } from '../workflows/lease/messages';
import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, eventually, inSeconds, leaseHistoryEvents, pendingTimers, useTestStack } from '../dev-stack/stack';

describe('lease lifecycle on the real Temporal server', () => {
  const plugin = new RecordingPlugin();
  const stack = useTestStack({ plugins: [plugin] });
  const api = apiClient(() => stack().url);

  async function statusOf(id: string): Promise<string | undefined> {
    const res = await api('GET', `/v1/leases/${id}`);
    return res.status === 404 ? 'GONE' : (res.body.lease.status as string);
  }

  async function waitForStatus(id: string, status: string, timeoutMs = 30_000): Promise<void> {
    await eventually(async () => ((await statusOf(id)) === status ? true : undefined), timeoutMs);
  }

  it('runs a short lease PENDING → ACTIVE → TERMINATED with every event DONE, on time', async () => {
    const created = await api('POST', '/v1/leases', { name: 'short', start_date: inSeconds(5), end_date: inSeconds(15), reservations: [], events: [] });
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    expect(lease).toMatchObject({ name: 'short', status: 'PENDING', project_id: 'admin', reservations: [] });
    expect(lease.events.map((e: { event_type: string; status: string }) => [e.event_type, e.status])).toEqual([
      ['start_lease', 'UNDONE'],
      ['before_end_lease', 'UNDONE'],
      ['end_lease', 'UNDONE'],
    ]);

    const seen = new Set<string>();
    await eventually(async () => {
      const status = await statusOf(lease.id);
      if (status) seen.add(status);
      return status === 'TERMINATED' ? true : undefined;
    }, 40_000);
    expect([...seen].filter((s) => ['PENDING', 'ACTIVE', 'TERMINATED'].includes(s))).toEqual(['PENDING', 'ACTIVE', 'TERMINATED']);

    const final = (await api('GET', `/v1/leases/${lease.id}`)).body.lease;
    expect(final.events.map((e: { status: string }) => e.status)).toEqual(['DONE', 'DONE', 'DONE']);

    const { rows } = await stack().db.pool.query('SELECT document FROM leases WHERE id = $1', [lease.id]);
    const start = rows[0].document.events.find((e: { event_type: string }) => e.event_type === 'start_lease');
    const end = rows[0].document.events.find((e: { event_type: string }) => e.event_type === 'end_lease');
    const startLag = start.startedAt - start.time;
    const endLag = end.startedAt - end.time;
    console.log(`short lease: start lag ${startLag} ms, end lag ${endLag} ms`);
    expect(startLag).toBeGreaterThanOrEqual(0);
    expect(endLag).toBeGreaterThanOrEqual(0);

    const handle = stack().temporal.client.workflow.getHandle(leaseWorkflowId(lease.id));
    // The row is written by the activity; the search attributes follow in the next workflow task.
    const description = await eventually(async () => {
      const d = await handle.describe();
      return d.typedSearchAttributes.get(LeaseStatusKey) === 'TERMINATED' ? d : undefined;
    }, 10_000);
    expect((await handle.query(getLease)).status).toBe('TERMINATED');
    const metadata: { currentDetails: string } = await handle.query('__temporal_workflow_metadata');
    expect(metadata.currentDetails).toContain('**TERMINATED**');
    expect(metadata.currentDetails).toContain('| end_lease |');
    expect(await description.staticSummary()).toBe(`lease short · project admin · ${final.start_date.slice(0, 16).replace('T', ' ')} UTC → ${final.end_date.slice(0, 16).replace('T', ' ')} UTC`);
  }, 60_000);

  it('starts a "now" lease at once, dated the current minute as Blazar does', async () => {
    const before = Date.now();
    const created = await api('POST', '/v1/leases', { name: 'now-lease', start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording' }] });
    const after = Date.now();
    expect(created.status).toBe(201);
    expect(created.body.lease.start_date).toMatch(/:00\.000000$/);
    const minuteOf = (ms: number) => ms - (ms % 60_000);
    expect([minuteOf(before), minuteOf(after)]).toContain(Date.parse(`${created.body.lease.start_date.slice(0, 19)}Z`));
    // Booked from the request, not from the minute's start: the part gone may still be held by a lease that ended in it.
    const [reserve] = plugin.callsFor(created.body.lease.id, 'reserve');
    expect(reserve.window[0]).toBeGreaterThanOrEqual(before);
    expect(reserve.window[0]).toBeLessThanOrEqual(after);
    await waitForStatus(created.body.lease.id, 'ACTIVE', 10_000);
  });

  it('shows updated_at null until the lease changes after its creation, as Blazar', async () => {
    const created = await api('POST', '/v1/leases', { name: 'untouched', start_date: inSeconds(3600), end_date: inSeconds(7200) });
    expect(created.body.lease.updated_at).toBeNull();
    expect(created.body.lease.events.map((e: { updated_at: unknown }) => e.updated_at)).toEqual([null, null, null]);
    expect((await api('GET', `/v1/leases/${created.body.lease.id}`)).body.lease.updated_at).toBeNull();
    const renamed = await api('PUT', `/v1/leases/${created.body.lease.id}`, { name: 'touched' });
    expect(renamed.body.lease.updated_at).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
  });

  it('moves dates and renames while pending; refuses what Blazar refuses', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'movable', start_date: inSeconds(3600), end_date: inSeconds(7200) });
    const id = body.lease.id;
    const newStart = inSeconds(1800);
    const moved = await api('PUT', `/v1/leases/${id}`, { name: 'moved', start_date: newStart, end_date: inSeconds(5400) });
    expect(moved.status).toBe(200);
    expect(moved.body.lease).toMatchObject({ name: 'moved', start_date: `${newStart.replace(' ', 'T')}.000000`, status: 'PENDING' });
    expect((await api('GET', `/v1/leases/${id}`)).body.lease.name).toBe('moved');

    const past = await api('PUT', `/v1/leases/${id}`, { start_date: '2001-01-01 00:00' });
    expect(past).toEqual({ status: 400, body: { error_code: 400, error_message: 'Start date must be later than current date. start_date must be "now" or a later date.', error_name: 400 } });
    const inverted = await api('PUT', `/v1/leases/${id}`, { end_date: inSeconds(60) });
    expect(inverted.status).toBe(400);
    expect(inverted.body.error_message).toBe('End date must be later than current and start date. end_date must be later than start_date.');
    const early = await api('PUT', `/v1/leases/${id}`, { end_date: 'now' });
    expect(early.status).toBe(400);

    // The sleeping workflow wakes for the new dates: start in 2 s instead of half an hour.
    expect((await api('PUT', `/v1/leases/${id}`, { start_date: inSeconds(2), end_date: inSeconds(4) })).status).toBe(200);
    await waitForStatus(id, 'ACTIVE', 10_000);
    await waitForStatus(id, 'TERMINATED', 10_000);
  });

  it('ends an active lease early with end_date "now", and then only allows renaming', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'early', start_date: 'now', end_date: inSeconds(3600) });
    const id = body.lease.id;
    await waitForStatus(id, 'ACTIVE', 10_000);
    const ended = await api('PUT', `/v1/leases/${id}`, { end_date: 'now' });
    expect(ended.status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 10_000);
    const renamed = await api('PUT', `/v1/leases/${id}`, { name: 'early-ended' });
    expect(renamed.status).toBe(200);
    expect(renamed.body.lease).toMatchObject({ name: 'early-ended', status: 'TERMINATED' });
    const extend = await api('PUT', `/v1/leases/${id}`, { end_date: inSeconds(7200) });
    expect(extend.status).toBe(400);
    expect(extend.body.error_message).toMatch(/^Terminated leases can only be renamed\./);
  });

  it('extends an active lease: the end moves and the lease stays active', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'extend', start_date: 'now', end_date: inSeconds(4) });
    const id = body.lease.id;
    await waitForStatus(id, 'ACTIVE', 10_000);
    const longer = await api('PUT', `/v1/leases/${id}`, { end_date: inSeconds(3600) });
    expect(longer.status).toBe(200);
    // The workflow no longer waits for the old end: the timer it now waits on is due at the new one.
    const timers = pendingTimers(await leaseHistoryEvents(stack(), id));
    expect(timers).toHaveLength(1);
    expect(timers[0].firesAt).toBeGreaterThan(Date.now() + 3000_000);
    expect(await statusOf(id)).toBe('ACTIVE');
  });

  it('answers an update whose first re-booking failed with its error, puts nothing back, and leaves the lease free for the next request', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'rebook-fails', start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording', unavailable_once_started: 100 }] });
    const id = body.lease.id;
    await waitForStatus(id, 'ACTIVE', 10_000);
    const longer = await api('PUT', `/v1/leases/${id}`, { end_date: inSeconds(7200) });
    expect([longer.status, longer.body.error_message]).toEqual([503, 'the database is unavailable: try again shortly']);
    // The admission, then the three quick tries of the new window, and no rollback: nothing had moved.
    const reserves = plugin.callsFor(id, 'reserve').map((c) => (c.window[1] === plugin.callsFor(id, 'reserve')[0].window[1] ? 'old' : 'new'));
    expect(reserves).toEqual(['old', 'new', 'new', 'new']);
    const renamed = await api('PUT', `/v1/leases/${id}`, { name: 'rebook-failed' });
    expect([renamed.status, renamed.body.lease?.name]).toEqual([200, 'rebook-failed']);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  }, 90_000);

  it('puts back only the bookings a failed update had moved', async () => {
    const reservations = [{ resource_type: 'test:recording' }, { resource_type: 'test:recording', unavailable_once_started: 100 }];
    const { body } = await api('POST', '/v1/leases', { name: 'rebook-half', start_date: 'now', end_date: inSeconds(3600), reservations });
    const id = body.lease.id;
    const [moves, fails] = body.lease.reservations.map((r: { id: string }) => r.id);
    await waitForStatus(id, 'ACTIVE', 10_000);
    const before = plugin.callsFor(id, 'reserve').length;
    expect((await api('PUT', `/v1/leases/${id}`, { end_date: inSeconds(7200) })).status).toBe(503);
    const end = (c: { window: [number, number] }) => c.window[1];
    const update = plugin.callsFor(id, 'reserve').slice(before);
    const oldEnd = end(plugin.callsFor(id, 'reserve')[0]);
    // The first moved to the new end, the second failed its three tries; only the first went back.
    expect(update.map((c) => [c.reservationId, end(c) === oldEnd ? 'old' : 'new'])).toEqual([
      [moves, 'new'],
      [fails, 'new'],
      [fails, 'new'],
      [fails, 'new'],
      [moves, 'old'],
    ]);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  }, 90_000);

  it('puts back the booking whose re-booking failed when its parameters changed (its type may have moved it before failing)', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'rebook-params', start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording', keys: ['k-a'], unavailable_once_started: 3 }] });
    const { id } = body.lease;
    await waitForStatus(id, 'ACTIVE', 10_000);
    const changed = await api('PUT', `/v1/leases/${id}`, { reservations: [{ id: body.lease.reservations[0].id, keys: ['k-b'] }] });
    expect(changed.status).toBe(503);
    // The three tries with the new keys, then the old ones booked again.
    expect(plugin.callsFor(id, 'reserve').map((c) => c.keys)).toEqual([['k-a'], ['k-b'], ['k-b'], ['k-b'], ['k-a']]);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  }, 90_000);

  it('deletes a pending lease, freeing its booking without starting it', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'drop-pending', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [{ resource_type: 'test:recording' }] });
    const id = body.lease.id;
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    await waitForStatus(id, 'GONE', 10_000);
    expect(plugin.callsFor(id).map((c) => [c.hook, c.started])).toEqual([['reserve', undefined], ['end', false]]);
    const result = await stack().temporal.client.workflow.getHandle(leaseWorkflowId(id)).result();
    expect(result).toEqual({ id, status: 'DELETED' });
  });

  it('deletes an active lease, taking its resources back', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'drop-active', start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording' }] });
    const id = body.lease.id;
    await waitForStatus(id, 'ACTIVE', 10_000);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    await waitForStatus(id, 'GONE', 10_000);
    expect(plugin.callsFor(id).map((c) => c.hook)).toEqual(['reserve', 'start', 'beforeEnd', 'end']);
    expect(plugin.callsFor(id, 'end')[0].started).toBe(true);
  });

  it('treats cancelling the workflow (Web UI, CLI) as a delete and still cleans up', async () => {
    const { body } = await api('POST', '/v1/leases', { name: 'cancelled', start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording' }] });
    const id = body.lease.id;
    await waitForStatus(id, 'ACTIVE', 10_000);
    const handle = stack().temporal.client.workflow.getHandle(leaseWorkflowId(id));
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    expect(await statusOf(id)).toBe('GONE');
    expect(plugin.callsFor(id, 'end').map((c) => c.started)).toEqual([true]);
  });

  it('puts a lease whose start fails in ERROR with the reason, and frees what it held', async () => {
    const { body } = await api('POST', '/v1/leases', {
      name: 'doomed',
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'test:recording' }, { resource_type: 'test:recording', fail_start: true }],
    });
    const id = body.lease.id;
    await waitForStatus(id, 'ERROR', 10_000);
    const lease = (await api('GET', `/v1/leases/${id}`)).body.lease;
    expect(lease.status_reason).toBe('start failed: the test resource refused to start');
    expect(lease.events.find((e: { event_type: string }) => e.event_type === 'start_lease').status).toBe('ERROR');
    const ends = plugin.callsFor(id, 'end').map((c) => c.started);
    expect(ends).toEqual([true, false]); // the first had started and is taken back; the second only unbooked
  });

  it('refuses a lease that cannot be booked with 409 and keeps nothing of it', async () => {
    const res = await api('POST', '/v1/leases', { name: 'too-big', start_date: inSeconds(60), end_date: inSeconds(120), reservations: [{ resource_type: 'test:recording', fail_reserve: true }] });
    expect(res).toEqual({ status: 409, body: { error_code: 409, error_message: 'not enough test:recording capacity for this window', error_name: 409 } });
    const list = await api('GET', '/v1/leases?name=too-big');
    expect(list.body.leases).toEqual([]);
  });

  it('admits a lease whose first admission attempt found the database unreachable: frees what it held, then books again', async () => {
    const res = await api('POST', '/v1/leases', { name: 'after-outage', start_date: inSeconds(60), end_date: inSeconds(120), reservations: [{ resource_type: 'test:recording', unavailable_reserves: 3 }] });
    expect(res.status).toBe(201);
    const id = res.body.lease.id;
    // Three tries of the first attempt, the release that waited for the database, then the fourth try books.
    expect(plugin.callsFor(id).map((c) => c.hook)).toEqual(['reserve', 'reserve', 'reserve', 'end', 'reserve']);
    expect((await api('GET', `/v1/leases/${id}`)).body.lease.status).toBe('PENDING');
  });

  it('answers 503 with the reason when the database stays unreachable through every admission attempt, and keeps nothing', async () => {
    const res = await api('POST', '/v1/leases', { name: 'never-reachable', start_date: inSeconds(60), end_date: inSeconds(120), reservations: [{ resource_type: 'test:recording', unavailable_reserves: 20 }] });
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error_code: 503, error_name: 503, error_message: 'the database is unavailable: try again shortly' });
    expect((await api('GET', '/v1/leases?name=never-reachable')).body.leases).toEqual([]);
  }, 60_000);

  it('runs back-to-back leases on the same resources in order: the earlier end before the later start', async () => {
    const t = Date.now() + 4_000;
    const reservation = { resource_type: 'test:recording', keys: ['thing-1'], hook_ms: 1_500 };
    const first = await api('POST', '/v1/leases', { name: 'first', start_date: inSeconds(0, t), end_date: inSeconds(3, t), reservations: [reservation] });
    const second = await api('POST', '/v1/leases', { name: 'second', start_date: inSeconds(3, t), end_date: inSeconds(6, t), reservations: [reservation] });
    expect([first.status, second.status]).toEqual([201, 201]);
    await waitForStatus(second.body.lease.id, 'TERMINATED', 30_000);
    const firstEnd = plugin.callsFor(first.body.lease.id, 'end')[0];
    const secondStart = plugin.callsFor(second.body.lease.id, 'start')[0];
    expect(firstEnd.finishedAt).toBeDefined();
    expect(secondStart.startedAt).toBeGreaterThanOrEqual(firstEnd.finishedAt!);
  }, 45_000);

  it('deletes a lease that waits for an earlier lease on the same resources at once, without waiting for that one to end', async () => {
    const reservation = { resource_type: 'test:recording', keys: ['thing-2'] };
    const earlier = await api('POST', '/v1/leases', { name: 'earlier', start_date: 'now', end_date: inSeconds(3600), reservations: [reservation] });
    const later = await api('POST', '/v1/leases', { name: 'later', start_date: inSeconds(1), end_date: inSeconds(7200), reservations: [reservation] });
    expect([earlier.status, later.status]).toEqual([201, 201]);
    await waitForStatus(earlier.body.lease.id, 'ACTIVE');
    await waitForStatus(later.body.lease.id, 'STARTING'); // waits for the earlier lease's end, an hour away
    // A change now would queue behind that wait, past the request's deadline: refused at once instead.
    const rename = await api('PUT', `/v1/leases/${later.body.lease.id}`, { name: 'renamed-while-waiting' });
    expect(rename).toEqual({ status: 409, body: { error_code: 409, error_name: 409, error_message: 'Invalid lease status. Lease later is STARTING: try again once it is ACTIVE.' } });
    // The workflow's own validator says the same to a caller that goes past the API (or read a stale row).
    const commands = { client: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, timeoutMs: 20_000 };
    const direct = await changeLease(commands, later.body.lease.id, { name: 'renamed-directly' }).then(() => undefined, (err: unknown) => err as ApiError);
    expect([direct?.status, direct?.message]).toEqual([409, 'Invalid lease status. Lease later is STARTING: try again once it is ACTIVE.']);
    const asked = Date.now();
    expect((await api('DELETE', `/v1/leases/${later.body.lease.id}`)).status).toBe(204);
    await waitForStatus(later.body.lease.id, 'GONE', 10_000);
    console.log(`a lease waiting for its predecessor deleted in ${Date.now() - asked} ms`);
    expect(plugin.callsFor(later.body.lease.id, 'start')).toEqual([]);
    expect(plugin.callsFor(later.body.lease.id, 'end').map((c) => c.started)).toEqual([false]);
    expect(await statusOf(earlier.body.lease.id)).toBe('ACTIVE');
    await api('DELETE', `/v1/leases/${earlier.body.lease.id}`);
    await waitForStatus(earlier.body.lease.id, 'GONE');
  }, 45_000);

  it('deleting the earliest of many pending leases on a resource signals none of the later ones (issue 23)', async () => {
    const reservation = { resource_type: 'test:recording', keys: ['thing-3'] };
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await api('POST', '/v1/leases', { name: `queued-${i}`, start_date: inSeconds(3600 * (i + 1)), end_date: inSeconds(3600 * (i + 2)), reservations: [reservation] });
      expect(res.status).toBe(201);
      ids.push(res.body.lease.id);
    }
    expect((await api('DELETE', `/v1/leases/${ids[0]}`)).status).toBe(204);
    const handle = stack().temporal.client.workflow.getHandle(leaseWorkflowId(ids[0]));
    await handle.result();
    const { events } = await handle.fetchHistory();
    // Before: one signal to each of the four later leases, at every delete (N² in all).
    expect(events?.filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes)).toEqual([]);
    for (const id of ids.slice(1)) expect(await statusOf(id)).toBe('PENDING');
    for (const id of ids.slice(1)) await api('DELETE', `/v1/leases/${id}`);
    for (const id of ids.slice(1)) await waitForStatus(id, 'GONE');
  }, 45_000);

  it('tells a lease waiting in STARTING at once when its predecessor is deleted, and starts it', async () => {
    const reservation = { resource_type: 'test:recording', keys: ['thing-4'] };
    const earlier = await api('POST', '/v1/leases', { name: 'earlier-4', start_date: 'now', end_date: inSeconds(3600), reservations: [reservation] });
    const later = await api('POST', '/v1/leases', { name: 'later-4', start_date: inSeconds(1), end_date: inSeconds(7200), reservations: [reservation] });
    expect([earlier.status, later.status]).toEqual([201, 201]);
    await waitForStatus(earlier.body.lease.id, 'ACTIVE');
    await waitForStatus(later.body.lease.id, 'STARTING');
    expect((await api('DELETE', `/v1/leases/${earlier.body.lease.id}`)).status).toBe(204);
    // Well within the 60 s after which a waiting lease looks at its predecessors' rows again.
    await waitForStatus(later.body.lease.id, 'ACTIVE', 15_000);
    const earlierEnd = plugin.callsFor(earlier.body.lease.id, 'end')[0];
    expect(plugin.callsFor(later.body.lease.id, 'start')[0].startedAt).toBeGreaterThanOrEqual(earlierEnd.finishedAt!);
    await api('DELETE', `/v1/leases/${later.body.lease.id}`);
    await waitForStatus(later.body.lease.id, 'GONE');
  }, 45_000);

  it('formats dates exactly as Blazar does', () => {
    expect(formatBlazarDate(Date.UTC(2026, 10, 21, 9, 15, 7, 42))).toBe('2026-11-21T09:15:07.042000');
  });
});
