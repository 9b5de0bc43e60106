/**
 * The real worker process killed with -9 at each step of a host lease's life: during admission,
 * before the start (down while the start falls due), mid-start and mid-end (a proxy in front of
 * Nova holds the aggregate call, so the kill lands inside the activity), and while active. After
 * each restart the lease goes on to the state it would have reached; the host is always where it
 * belongs (the lease aggregate while active, the pool otherwise, never both or neither), and no
 * booking is left behind in PostgreSQL.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../dev-stack/processes';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { FaultProxy } from '../support/fault-proxy';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost, orphanBookings } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, leaseHistoryEvents, untilTimersFired, untilWaitingOnTimer, useTestStack } from '../../dev-stack/stack';
import { getLease, leaseWorkflowId } from '../../workflows/lease/messages';
import { deleteAggregateNamed, rigClients, rigEnv, startWorkerProcess, uniqueName } from './support';

const HOST = 'fake-2';
const AGGREGATE_ACTION = /\/os-aggregates\/\d+\/action$/;

describe('worker killed with -9 at each step of a host lease', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-crash-'));
  let proxy: FaultProxy;
  let worker: ManagedProcess | undefined;
  let hostId: string | undefined;

  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  const statusOf = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease.status as string;

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  const stack = useTestStack(
    {
      // The workflow admits here: step 1 kills the worker in the middle of an admission (the API's own admission has no worker in it; test/api-admission.test.ts and test/multi-process.test.ts cover an API that dies).
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_API_WORKFLOW_TIMEOUT_MS: '15000', LK_ADMISSION: 'workflow' },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', freepool })],
      openstack: () => admin,
      noWorker: true, // only the worker process runs leases here
    },
    {
      beforeStop: async () => {
        proxy?.clear();
        if (!worker || worker.child.exitCode !== null || worker.child.signalCode !== null) worker = await startWorker().catch(() => undefined);
        try {
          await deleteAllLeases(api);
        } finally {
          await worker?.stop();
        }
        if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    hostId = await enrolHost(api, HOST);
  });

  afterAll(async () => {
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const startWorker = () => startWorkerProcess(stack(), { novaUrl: proxy.url, dir: tmp, env: { LK_FREEPOOL_AGGREGATE: freepool } });

  async function killWorker(): Promise<void> {
    worker!.child.kill('SIGKILL');
    await worker!.exited;
  }

  /** Holds the next aggregate call with `bodyIncludes`, runs `trigger`, kills the worker once Nova got the call, and starts a new worker. */
  async function killDuring(bodyIncludes: string, trigger: () => Promise<void>): Promise<number> {
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes, fault: { kind: 'delay', ms: 10_000 }, times: 1 });
    const since = Date.now();
    await trigger();
    await proxy.waitForRequest((r) => r.at >= since && r.method === 'POST' && AGGREGATE_ACTION.test(r.path) && r.body.includes(bodyIncludes), 60_000);
    await killWorker();
    worker = await startWorker();
    return Date.now();
  }

  /** The host is in exactly one of the two aggregates: the lease's while it is active, the pool otherwise. */
  async function expectHostIn(where: 'pool' | 'lease', leaseAggregate: string): Promise<void> {
    const inPool = (await aggregateNamed(freepool))?.hosts ?? [];
    const inLease = (await aggregateNamed(leaseAggregate))?.hosts ?? [];
    expect({ inPool, inLease }).toEqual(where === 'pool' ? { inPool: [HOST], inLease: [] } : { inPool: [], inLease: [HOST] });
  }

  it('after every kill and restart the lease goes on, with the host where it belongs and no booking left over', async () => {
    worker = await startWorker();
    const body = {
      name: uniqueName('crash'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ before_end: '' })],
    };
    const create = () => api('POST', '/v1/leases', body, { 'Idempotency-Key': body.name });

    // 1. Admission: killed while its booking transaction waits on a lock this test holds on the
    //    calendar. The client's retry with the same Idempotency-Key converges on one lease.
    const locker = await stack().db.pool.connect();
    locker.on('error', () => undefined); // cut when the test database is dropped after a failure
    let inFlight: Promise<Awaited<ReturnType<typeof create>>>;
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE host_allocations IN EXCLUSIVE MODE');
      inFlight = create();
      await eventually(async () => {
        const { rows } = await locker.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'");
        return rows.length > 0 ? true : undefined;
      }, 30_000).catch(async (err: Error) => {
        const { rows } = await locker.query('SELECT pid, state, wait_event_type, wait_event, left(query, 120) AS query FROM pg_stat_activity WHERE datname = current_database()');
        throw new Error(`${err.message}: no admission waited on the lock; sessions: ${JSON.stringify(rows)}`);
      });
      await killWorker();
    } finally {
      await locker.query('COMMIT').catch(() => undefined);
      locker.release();
    }
    worker = await startWorker();
    let created = await inFlight;
    const firstAnswer = created.status;
    for (let tries = 0; created.status !== 201 && tries < 5; tries++) created = await create();
    expect(created.status).toBe(201);
    console.log(`killed mid-admission: first answer ${firstAnswer}, lease admitted`);
    const { id } = created.body.lease;
    const aggregate: string = created.body.lease.reservations[0].aggregate;
    expect((await api('GET', `/v1/leases?name=${body.name}`)).body.leases.map((l: { id: string }) => l.id)).toEqual([id]);
    const bookings = await stack().db.pool.query('SELECT 1 FROM host_allocations WHERE lease_id = $1', [id]);
    expect(bookings.rowCount).toBe(1);
    expect(await statusOf(id)).toBe('PENDING');

    // 2. Before the start: moved to a few seconds from now, then down while the start falls due
    //    (its timer fires in Temporal); nothing starts without a worker.
    expect((await api('PUT', `/v1/leases/${id}`, { start_date: inSeconds(5) })).status).toBe(200);
    await untilWaitingOnTimer(stack(), id);
    await killWorker();
    await untilTimersFired(stack(), id);
    expect(await statusOf(id)).toBe('PENDING');
    await expectHostIn('pool', aggregate);

    // 3. Mid-start: the restarted worker starts the overdue lease; killed while Nova adds the host.
    let restarted = await killDuring('add_host', async () => {
      worker = await startWorker();
    });
    await eventually(async () => ((await statusOf(id)) === 'ACTIVE' ? true : undefined), 120_000);
    console.log(`killed mid-start: ACTIVE ${Date.now() - restarted} ms after the restart`);
    await expectHostIn('lease', aggregate);

    // 4. Active: killed and started again; the new worker replays the lease (a query makes it load
    //    the whole history) and runs nothing twice: the lease stays active, no activity is added.
    const activitiesOf = async () => (await leaseHistoryEvents(stack(), id)).filter((e) => e.activityTaskScheduledEventAttributes).length;
    // Killed once the task that made it ACTIVE is complete (its end timer set): killed between the
    // record and that task's completion, the replay would answer STARTING until the new worker ran it again.
    await untilWaitingOnTimer(stack(), id);
    await killWorker();
    const activitiesBefore = await activitiesOf();
    expect(await statusOf(id)).toBe('ACTIVE');
    worker = await startWorker();
    // Until the server has seen the new worker poll, a query is refused (FAILED_PRECONDITION).
    const replayed = await eventually(() => stack().temporal.client.workflow.getHandle(leaseWorkflowId(id)).query(getLease).catch((err: Error) => {
      if (/no poller seen/.test(`${err.message} ${String(err.cause)}`)) return undefined;
      throw err;
    }), 30_000, 250);
    expect(replayed.status).toBe('ACTIVE');
    expect(await activitiesOf()).toBe(activitiesBefore);
    expect(await statusOf(id)).toBe('ACTIVE');
    await expectHostIn('lease', aggregate);

    // 5. Mid-end: ended early; killed while Nova removes the host.
    restarted = await killDuring('remove_host', async () => {
      expect((await api('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    });
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 120_000);
    console.log(`killed mid-end: TERMINATED ${Date.now() - restarted} ms after the restart`);
    expect((await aggregateNamed(freepool))?.hosts).toEqual([HOST]);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
    const events = (await api('GET', `/v1/leases/${id}`)).body.lease.events.map((e: { status: string }) => e.status);
    expect(events).toEqual(['DONE', 'DONE', 'DONE']);
    expect(await orphanBookings(stack().db.pool)).toEqual([]);
  }, 360_000);
});
