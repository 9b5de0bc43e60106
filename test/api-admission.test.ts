/**
 * Host leases admitted by the API itself (LK_ADMISSION=api, the default): bookings, row and owed
 * workflow start in one transaction, the workflow started after the answer. What must hold:
 * capacity never double-booked under concurrent creates, the same refusals as the workflow's
 * admission, Idempotency-Key retries answered with the first lease, and no lease ever left
 * without its workflow (a change starts an owed one; the sweeps start the rest).
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { WorkflowNotFoundError } from '@temporalio/client';
import { createApp } from '../src/api/app';
import { LeaseOutbox } from '../src/outbox';
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { Pool } from '../src/db/pool';
import { pluginRegistry, type ResourcePlugin } from '../src/domain/resource-plugin';
import { DatabaseError } from 'pg';
import { z } from 'zod';
import { newLease, type NewLeaseRequest } from '../src/domain/lease';
import type { LeaseWorkflowInput } from '../workflows/lease/messages';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, startTestStack, useTestStack, type TestStack } from '../dev-stack/stack';

const PROJECT = { 'x-project-id': 'admission-project', 'x-user-id': 'alice', 'x-auth-token': 'notused' };
const hostType = (pool: Pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })];
const hostsOf = (scenario: string) => ({ resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$scenario', scenario]) });

/** An owed start that the admitting API never makes: what an API killed right after its commit leaves. */
class NeverStartingOutbox extends LeaseOutbox {
  override startSoon(): void {}
}

/** Records when each workflow start would be made, instead of making it: the order of starts and answers is what is tested. */
class RecordingOutbox extends LeaseOutbox {
  readonly started: Array<{ leaseId: string; atMs: number }> = [];
  protected override start(input: LeaseWorkflowInput): Promise<void> {
    this.started.push({ leaseId: input.admitted!.id, atMs: Date.now() });
    return Promise.resolve();
  }
}

function admittedInput(name: string): LeaseWorkflowInput {
  const request: NewLeaseRequest = { id: randomUUID(), name, projectId: 'admission-project', userId: 'alice', start: Date.now() + 3_600_000, end: Date.now() + 7_200_000, reservations: [], requestedMs: Date.now() };
  return { request, requestHash: 'f'.repeat(64), admitted: newLease(request) };
}

async function workflowStatus(stack: TestStack, leaseId: string): Promise<string | undefined> {
  try {
    return (await stack.temporal.client.workflow.getHandle(`lease-${leaseId}`).describe()).status.name;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}

describe('leases admitted by the API', () => {
  const stack = useTestStack({ withPool: hostType });
  const api = apiClient(() => stack().url, PROJECT);

  it('admits concurrent creates over three hosts without a double booking: three 201s, the rest Blazar\'s 409; each admitted lease\'s workflow runs', async () => {
    for (let n = 0; n < 3; n++) await insertHost(stack().db.pool, { name: `race-${n}-${randomUUID().slice(0, 8)}`, capabilities: { scenario: 'race' } });
    const window = { start_date: inSeconds(3600), end_date: inSeconds(7200) };
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => api('POST', '/v1/leases', { name: `race-${i}`, ...window, reservations: [hostsOf('race')] })));
    const admitted = answers.filter((a) => a.status === 201);
    expect(answers.map((a) => a.status).sort()).toEqual([...Array(3).fill(201), ...Array(17).fill(409)]);
    for (const refused of answers.filter((a) => a.status === 409)) {
      expect(refused.body).toMatchObject({ error_code: 409, error_name: 409, error_message: expect.stringContaining('Not enough hosts available') });
    }
    expect(new Set(admitted.map((a) => a.body.lease.reservations[0].hosts[0])).size).toBe(3);
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    for (const { body } of admitted) await eventually(async () => ((await workflowStatus(stack(), body.lease.id)) === 'RUNNING' ? true : undefined), 15_000);
    // Each start is written to its row just after Temporal took it (a batch at a time).
    const owed = async () => (await stack().db.pool.query<{ owed: string }>('SELECT count(*)::text AS owed FROM lease_outbox WHERE started_at IS NULL AND lease_id = ANY($1)', [admitted.map((a) => a.body.lease.id)])).rows[0].owed;
    await eventually(async () => ((await owed()) === '0' ? true : undefined), 10_000);
    expect(await owed()).toBe('0');
  });

  it('answers concurrent retries with one Idempotency-Key with the one lease, and refuses the key with another body', async () => {
    await insertHost(stack().db.pool, { name: `retried-${randomUUID().slice(0, 8)}`, capabilities: { scenario: 'retried' } });
    const key = { 'Idempotency-Key': `key-${randomUUID()}` };
    const body = { name: 'retried', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostsOf('retried')] };
    const retried = apiClient(() => stack().url, { ...PROJECT, ...key });
    const answers = await Promise.all(Array.from({ length: 5 }, () => retried('POST', '/v1/leases', body)));
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201, 201, 201]);
    expect(new Set(answers.map((a) => a.body.lease.id)).size).toBe(1);
    expect((await api('GET', '/v1/leases?name=retried')).body.leases).toHaveLength(1);
    const other = await retried('POST', '/v1/leases', { ...body, name: 'retried-other' });
    expect(other).toEqual({ status: 409, body: { error_code: 409, error_name: 409, error_message: 'this Idempotency-Key was already used for a different request' } });
    // Deleted, the key stays spent.
    expect((await api('DELETE', `/v1/leases/${answers[0].body.lease.id}`)).status).toBe(204);
    expect((await retried('POST', '/v1/leases', body)).status).toBe(410);
  });

  it('starts an owed workflow when its lease is changed or deleted, and the sweeps start the others', async () => {
    const s = stack();
    for (let n = 0; n < 3; n++) await insertHost(s.db.pool, { name: `owed-${n}-${randomUUID().slice(0, 8)}`, capabilities: { scenario: 'owed' } });
    const outbox = new NeverStartingOutbox({ pool: s.db.pool, client: s.temporal.client, taskQueue: s.config.temporal.taskQueue, log: pino({ level: 'silent' }), sweepMs: 60_000, graceMs: 60_000 });
    const app = createApp({ config: s.config, log: pino({ level: 'silent' }), pool: s.db.pool, connection: s.temporal.connection, client: s.temporal.client, types: pluginRegistry(hostType(s.db.pool)), outbox });
    const server = await new Promise<Server>((resolve) => {
      const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
    });
    try {
      const dying = apiClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, PROJECT);
      const create = async (name: string) => {
        const res = await dying('POST', '/v1/leases', { name, start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostsOf('owed')] });
        expect(res.status).toBe(201);
        return res.body.lease.id as string;
      };
      const [renamed, deleted, swept] = [await create('owed-renamed'), await create('owed-deleted'), await create('owed-swept')];
      // Answered, booked, and no workflow yet: the API "died" before starting them.
      expect(await workflowStatus(s, renamed)).toBeUndefined();
      const put = await dying('PUT', `/v1/leases/${renamed}`, { name: 'owed-renamed-2' });
      expect({ status: put.status, name: put.body.lease?.name }).toEqual({ status: 200, name: 'owed-renamed-2' });
      expect(await workflowStatus(s, renamed)).toBe('RUNNING');
      expect((await dying('DELETE', `/v1/leases/${deleted}`)).status).toBe(204);
      // The workflow ends just after the delete's answer.
      await eventually(async () => ((await workflowStatus(s, deleted)) === 'COMPLETED' ? true : undefined), 10_000);
      expect((await api('GET', `/v1/leases/${deleted}`)).status).toBe(404);
      // The stack's worker sweeps owed starts older than LK_OUTBOX_GRACE_MS (2 s) every second.
      await eventually(async () => ((await workflowStatus(s, swept)) === 'RUNNING' ? true : undefined), 20_000);
      // Each row is marked once its start is made (a sweep marks its batch as it commits).
      const marked = async () => (await s.db.pool.query<{ started: boolean }>('SELECT started_at IS NOT NULL AS started FROM lease_outbox WHERE lease_id = ANY($1)', [[renamed, deleted, swept]])).rows;
      await eventually(async () => ((await marked()).every((r) => r.started) ? true : undefined), 10_000);
      expect(await marked()).toHaveLength(3);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 60_000);

  it('answers a burst first: owed starts wait while admissions are in flight, until the last is answered or for yieldMs at most', async () => {
    const s = stack();
    const deps = { pool: s.db.pool, client: s.temporal.client, taskQueue: s.config.temporal.taskQueue, log: pino({ level: 'silent' }), sweepMs: 60_000, graceMs: 60_000 };
    // No admission in flight: started at once.
    const idle = new RecordingOutbox({ ...deps, yieldMs: 60_000 });
    const alone = admittedInput('alone');
    idle.startSoon(alone);
    expect(idle.started.map((x) => x.leaseId)).toEqual([alone.admitted!.id]);

    // Two admissions in flight: the starts owed meanwhile wait for the last one to end, however long.
    const outbox = new RecordingOutbox({ ...deps, yieldMs: 60_000 });
    const releases: Array<() => void> = [];
    const admission = () => outbox.whileAdmitting(() => new Promise<void>((resolve) => releases.push(resolve)));
    const [first, second] = [admission(), admission()];
    const [a, b] = [admittedInput('a'), admittedInput('b')];
    outbox.startSoon(a);
    outbox.startSoon(b);
    releases[0]();
    await first;
    expect(outbox.started).toEqual([]);
    releases[1]();
    await second;
    expect(outbox.started.map((x) => x.leaseId)).toEqual([a.admitted!.id, b.admitted!.id]);

    // Admissions that never end hold a start back for yieldMs, and no longer.
    const yielding = new RecordingOutbox({ ...deps, yieldMs: 300 });
    void yielding.whileAdmitting(() => new Promise<void>(() => undefined));
    const committedAt = Date.now();
    const held = admittedInput('held');
    yielding.startSoon(held);
    expect(yielding.started).toEqual([]);
    await eventually(() => Promise.resolve(yielding.started.length ? true : undefined), 10_000);
    expect(yielding.started[0].leaseId).toBe(held.admitted!.id);
    expect(yielding.started[0].atMs - committedAt).toBeGreaterThanOrEqual(300);
    await Promise.all([idle.stop(), outbox.stop(), yielding.stop()]);
  });

  it('answers a booking that lost its race on every try with a 503 and Retry-After, never a 500, and records nothing', async () => {
    // A type whose every booking loses to a concurrent one, however often the admission runs again:
    // PostgreSQL's deadlock, then the exclusion constraint (another took the resource first), by turns.
    let tries = 0;
    const alwaysLosing: ResourcePlugin = {
      resourceType: 'test:always-losing',
      paramsSchema: z.strictObject({}),
      earliest: () => Promise.resolve({ longestMs: 0, cutShort: false, tried: 1 }),
      reserve: () => Promise.reject(new Error('admitted by the API only')),
      end: () => Promise.resolve({}),
      bookAtAdmission: () => {
        tries++;
        const [message, code] = tries % 2 ? ['deadlock detected', '40P01'] : ['conflicting key value violates exclusion constraint', '23P01'];
        return Promise.reject(Object.assign(new DatabaseError(message, 0, 'error'), { code }));
      },
    };
    const contended = await startTestStack({ plugins: [alwaysLosing] });
    try {
      const res = await fetch(`${contended.url}/v1/leases`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...PROJECT },
        body: JSON.stringify({ name: 'contended', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [{ resource_type: 'test:always-losing' }] }),
      });
      expect({ status: res.status, retryAfter: res.headers.get('retry-after') }).toEqual({ status: 503, retryAfter: '1' });
      expect(await res.json()).toMatchObject({ error_code: 503, error_message: 'too many concurrent bookings of the same resources: nothing was booked; try again' });
      expect(tries).toBe(20); // inTransaction's attempts, each rolled back; the last lost on the exclusion constraint
      expect((await apiClient(contended.url, PROJECT)('GET', '/v1/leases?name=contended')).body.leases).toEqual([]);
      expect((await contended.db.pool.query('SELECT 1 FROM lease_outbox')).rowCount).toBe(0);
    } finally {
      await contended.stop();
    }
  }, 60_000);

  it('refuses what the workflow\'s admission refuses, with the same answers', async () => {
    const byWorkflow = await startTestStack({ withPool: hostType, env: { LK_ADMISSION: 'workflow' } });
    try {
      const both = [stack(), byWorkflow];
      for (const s of both) await insertHost(s.db.pool, { name: `same-${randomUUID().slice(0, 8)}`, capabilities: { scenario: 'same' } });
      const start = inSeconds(3600);
      const end = inSeconds(7200);
      const requests = [
        { name: 'same-first', start_date: start, end_date: end, reservations: [hostsOf('same')] },
        { name: 'same-second', start_date: start, end_date: end, reservations: [hostsOf('same')] },
        { name: 'same-first', start_date: inSeconds(9000), end_date: inSeconds(9600), reservations: [] },
        { name: 'same-none', start_date: start, end_date: end, reservations: [hostsOf('nowhere')] },
      ];
      const answers = [];
      for (const s of both) {
        const call = apiClient(s.url, PROJECT);
        const got = [];
        for (const request of requests) {
          const res = await call('POST', '/v1/leases', request);
          // Reservation and offer ids are new in each request, and offers expire a while after they are made: the answers are compared without them.
          const refusal = () => JSON.stringify(res).replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>').replace(/"expires_at":"[^"]*"/g, '"expires_at":"<when>"');
          got.push(res.status === 201 ? { status: 201, reservations: res.body.lease.reservations.map((r: Record<string, unknown>) => ({ resource_type: r.resource_type, hosts: (r.hosts as unknown[]).length })) } : JSON.parse(refusal()));
        }
        answers.push(got);
      }
      expect(answers[0].slice(0, 3).map((a) => a.status)).toEqual([201, 409, 409]);
      expect(answers[0]).toEqual(answers[1]);
      // The same admitted lease either way, and the workflow admitted its own.
      const workflowAdmitted = (await apiClient(byWorkflow.url, PROJECT)('GET', '/v1/leases?name=same-first')).body.leases[0];
      const history = await byWorkflow.temporal.client.workflow.getHandle(`lease-${workflowAdmitted.id}`).fetchHistory();
      expect(history.events?.some((e) => e.workflowExecutionUpdateAcceptedEventAttributes)).toBe(true);
    } finally {
      await byWorkflow.stop();
    }
  }, 60_000);
});
