/**
 * Two worker processes and two API processes on one Temporal and one PostgreSQL, as a deployment
 * with spare capacity runs: clients spread host-lease creates and extensions over both APIs while
 * short leases start and end, and one worker and one API are killed with -9 in the middle of it.
 * Afterwards: no host booked twice, no booking without its lease, every lease the clients were
 * told about is there as they left it, every lease has exactly one workflow, and every short lease
 * ran its events exactly once, on whichever worker was left.
 */
import type { ManagedProcess } from '../dev-stack/processes';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost, orphanBookings } from '../dev-stack/fixtures/hosts';
import { freePort } from '../dev-stack/ports';
import { apiClient, eventually, inSeconds, startedLeaseWorkflow, useTestStack, withLeaseHistory } from '../dev-stack/stack';
import { startApiProcess, startWorkerProcess } from '../dev-stack/worker-process';

const HOSTS = 8;
const CLIENTS = 12;
const REQUESTS_PER_CLIENT = 12;
/** The kills come after this many answered creates: mid-load, whatever the machine's speed. */
const KILL_AFTER = 40;
const SHORT_LEASES = 10;
/** Temporal's default number of partitions per task queue (`matching.numTaskqueueReadPartitions`). */
const TASK_QUEUE_PARTITIONS = 4;
/**
 * Credentials, so that host leases are admitted (without any, they are refused: they could never
 * start); these leases are in 2099 and are never started or deleted (both would call Nova), so no
 * call goes to this address. The test's end terminates their workflows.
 */
const CLOUD_NEVER_CALLED = { OS_AUTH_URL: 'http://127.0.0.1:9/v3', OS_USERNAME: 'unused', OS_PASSWORD: 'unused', OS_PROJECT_NAME: 'unused', OS_USER_DOMAIN_NAME: 'Default', OS_PROJECT_DOMAIN_NAME: 'Default' };

describe('two workers and two APIs on one Temporal and one PostgreSQL', () => {
  const processes: ManagedProcess[] = [];
  const stack = useTestStack({ noWorker: true }, {
    beforeStop: async ({ config, temporal }) => {
      await Promise.all(processes.map((proc) => proc.stop()));
      // The 2099 leases' workflows would wait on the shared test server for ever: ended here.
      for await (const run of temporal.client.workflow.list({ query: `TaskQueue = '${config.temporal.taskQueue}' AND ExecutionStatus = 'Running'` })) {
        await temporal.client.workflow.getHandle(run.workflowId, run.runId).terminate('end of test');
      }
    },
    timeoutMs: 60_000,
  });
  let workers: ManagedProcess[];
  let apis: Array<{ proc: ManagedProcess; url: string }>;

  beforeAll(async () => {
    for (let i = 0; i < HOSTS; i++) await insertHost(stack().db.pool, { name: `shared-${i}` });
    workers = await Promise.all([0, 1].map(() => startWorkerProcess(stack(), CLOUD_NEVER_CALLED)));
    apis = await Promise.all([0, 1].map(async () => {
      const port = await freePort();
      return { proc: await startApiProcess(stack(), port, CLOUD_NEVER_CALLED), url: `http://127.0.0.1:${port}` };
    }));
    processes.push(...workers, ...apis.map((api) => api.proc));
  }, 60_000);

  /**
   * Who polls the lease task queue for workflow tasks, over all of its partitions: a poller waits on
   * one partition, chosen at random, so the root partition alone may not have seen a worker yet.
   */
  async function workflowTaskPollers(): Promise<Set<string>> {
    const { namespace, taskQueue } = stack().config.temporal;
    const names = [taskQueue, ...Array.from({ length: TASK_QUEUE_PARTITIONS - 1 }, (_, i) => `/_sys/${taskQueue}/${i + 1}`)];
    const identities = new Set<string>();
    for (const name of names) {
      const described = await stack().temporal.client.workflowService.describeTaskQueue({ namespace, taskQueue: { name }, taskQueueType: 1 });
      for (const poller of described.pollers ?? []) if (poller.identity) identities.add(poller.identity);
    }
    return identities;
  }

  it('books nothing twice, loses nothing and runs each lease once when one worker and one API are killed under load', async () => {
    const [apiA, apiB] = apis.map((api) => apiClient(api.url));
    // Both workers poll the lease task queue before anything is killed.
    const identities = await eventually(async () => {
      const seen = await workflowTaskPollers();
      return seen.size === 2 ? seen : undefined;
    }, 30_000, 250, () => 'both workers never polled the lease task queue');
    expect(identities.size).toBe(2);

    // Short leases, half through each API: they start and end while the load runs and the kills happen.
    const short: string[] = [];
    for (let i = 0; i < SHORT_LEASES; i++) {
      const created = await (i % 2 ? apiB : apiA)('POST', '/v1/leases', { name: `short-${i}`, start_date: inSeconds(5 + i), end_date: inSeconds(20 + i) });
      expect(created.status).toBe(201);
      short.push(created.body.lease.id);
    }

    // Host leases over both APIs, a third of them then extended by an hour through the other API;
    // after KILL_AFTER answers, worker A and API A go with -9.
    const kept = new Map<string, { name: string; end: string }>(); // lease id → what the client was told
    const lostAnswers: string[] = []; // requests whose connection died with API A: outcome unknown to the client
    let answered = 0;
    let killed: Promise<unknown> | undefined;
    const statuses: Record<string, number> = {};
    const count = (what: string) => void (statuses[what] = (statuses[what] ?? 0) + 1);
    const killMidLoad = () => {
      killed ??= Promise.all([workers[0], apis[0].proc].map((proc) => {
        proc.child.kill('SIGKILL');
        return proc.exited;
      }));
    };
    await Promise.all(Array.from({ length: CLIENTS }, async (_, client) => {
      for (let r = 0; r < REQUESTS_PER_CLIENT; r++) {
        const api = killed === undefined && (client + r) % 2 === 0 ? apiA : apiB;
        const day = String(1 + ((client * REQUESTS_PER_CLIENT + r) % 28)).padStart(2, '0');
        const hour = (client * 3 + r) % 20;
        const at = (h: number) => `2099-02-${day} ${String(h).padStart(2, '0')}:00`;
        const name = `load-${client}-${r}`;
        let created;
        try {
          created = await api('POST', '/v1/leases', { name, start_date: at(hour), end_date: at(hour + 3), reservations: [blazarHostReservation({ min: '1', max: '2' })] });
        } catch {
          lostAnswers.push(name); // API A died under this request
          continue;
        }
        count(`create ${created.status}`);
        if (++answered === KILL_AFTER) killMidLoad();
        if (created.status !== 201) continue;
        const id = created.body.lease.id as string;
        kept.set(id, { name, end: at(hour + 3) });
        if (r % 3 === 0) {
          const extended = await apiB('PUT', `/v1/leases/${id}`, { end_date: at(hour + 4) });
          count(`extend ${extended.status}`);
          if (extended.status === 200) kept.set(id, { name, end: at(hour + 4) });
        }
      }
    }));
    await killed;
    console.log(`answers ${JSON.stringify(statuses)}; answers lost with API A: ${lostAnswers.length}`);
    // Booked (201, 200) or no host free for the window (409); never a 5xx, whichever process died.
    expect(Object.keys(statuses).filter((what) => !/ (200|201|409)$/.test(what))).toEqual([]);
    expect(statuses['create 201']).toBeGreaterThan(KILL_AFTER / 2);
    expect(statuses['extend 200']).toBeGreaterThan(0);

    // The short leases ran on the worker that was left: each event once, all done.
    for (const id of short) {
      await eventually(async () => ((await apiB('GET', `/v1/leases/${id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 90_000, 250, () => `short lease ${id} not TERMINATED`).catch((err: Error) => withLeaseHistory(stack(), id, err));
      const { events } = (await apiB('GET', `/v1/leases/${id}`)).body.lease;
      expect(events.map((event: { event_type: string; status: string }) => `${event.event_type}:${event.status}`).sort()).toEqual(['before_end_lease:DONE', 'end_lease:DONE', 'start_lease:DONE']);
    }

    // Every lease the clients were told about is there, as they left it.
    for (const [id, { name, end }] of kept) {
      const lease = (await apiB('GET', `/v1/leases/${id}`)).body.lease;
      expect([lease.name, lease.status, lease.end_date.slice(0, 16).replace('T', ' '), lease.reservations[0].hosts.length > 0]).toEqual([name, 'PENDING', end, true]);
    }

    // Nothing booked twice, no booking without its lease — including those of the lost answers.
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    expect(await orphanBookings(stack().db.pool)).toEqual([]);

    // Every live lease has exactly one workflow run, still running while the lease is pending.
    const { rows: live } = await stack().db.pool.query<{ id: string; status: string }>('SELECT id::text, status FROM leases WHERE deleted_at IS NULL');
    expect(live.length).toBeGreaterThanOrEqual(kept.size + SHORT_LEASES);
    for (const lease of live) {
      // A lease admitted just before may have its workflow started just after (src/outbox), and Temporal's visibility follows a moment later.
      const { description: described } = await startedLeaseWorkflow(stack(), lease.id);
      if (lease.status === 'PENDING') expect([lease.id, described.status.name]).toEqual([lease.id, 'RUNNING']);
      const runs = await eventually(async () => ((await stack().temporal.client.workflow.count(`WorkflowId = '${leaseWorkflowId(lease.id)}'`)).count || undefined), 10_000);
      expect([lease.id, runs]).toEqual([lease.id, 1]);
    }
  }, 240_000);
});
