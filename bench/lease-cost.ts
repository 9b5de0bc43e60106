/**
 * `npm run bench:lease-cost`: what one lease costs, counted (issue 46). For each lease life,
 * N one-host leases (LK_BENCH_LEASES, default 50) by 8 clients, members of a project of the life's
 * own, then waited for until each is at rest in its final state (read from its workflow's history):
 * `end`, created to start 10 s later and end 10 s after that (TERMINATED); `delete-pending`,
 * created an hour ahead and deleted at once (its workflow closed); `webhook`, as `end` with the
 * project's webhook on a receiver on 127.0.0.1 answering 204; `approval`, as `end` with the
 * project's policy asking approval of every lease, approved by an admin after each create.
 * LK_BENCH_LEASE_LIVES (comma-separated) picks lives. Per lease: the lease workflow's workflow
 * tasks, activities and local activities (also by type), timers, child workflows, signals, updates,
 * search attribute upserts, history events; the notice workflows started for it (their ids carry
 * the lease's) and their history events; PostgreSQL transactions; CPU ms by process (this one:
 * clients, API and worker; Temporal; PostgreSQL) from the first create until every lease and
 * notice is at rest, also less what the processes use at rest. Writes bench/results/lease-cost.json.
 */
import http from 'node:http';
import type { Client as TemporalClient } from '@temporalio/client';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { freePort } from '../dev-stack/ports';
import { apiClient, inSeconds, startTestStack, type TestStack } from '../dev-stack/stack';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { noticeWorkflowId, noticeWorkflowType } from '../workflows/notices/messages';
import { cpuMeter, runBenchmark } from './common';
import { atRest, averageCounts, countHistory, type HistoryCounts } from './history-counts';

const LEASES = Number(process.env.LK_BENCH_LEASES ?? 50);
const LIVES = ['end', 'delete-pending', 'webhook', 'approval'] as const;
type Life = (typeof LIVES)[number];
const CLIENTS = 8;
/** A lease of the short lives starts this long after its create, and lasts as long. */
const LEAD_S = 10;
const DURATION_S = 10;
/** How long a life may take to come to rest after its last create. */
const SETTLE_MS = 180_000;
const POLL_MS = 500;
/** How long the processes' CPU at rest is measured before the lives (a measurement window, not a wait for anything). */
const IDLE_WINDOW_MS = 10_000;
const ADMIN = { 'x-auth-token': 'admin' };
const member = (project: string) => ({ 'x-project-id': project, 'x-user-id': `${project}-member`, 'x-roles': 'member' });

/** A webhook receiver on 127.0.0.1 (a port from dev-stack/ports.ts) that answers every notice 204. */
async function receiver() {
  let received = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received++;
      res.writeHead(204).end();
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received: () => received,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const historyOf = async (client: TemporalClient, workflowId: string) => (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];

/** Polls `pending` (bounded by `until`) until `done` holds for each (`done` answers a round's items at once); throws naming what is left. */
async function untilEach<T>(pending: T[], done: (left: T[]) => Promise<boolean[]>, until: number, what: string, explain: (left: T[]) => Promise<string> = () => Promise.resolve('')): Promise<void> {
  let left = pending;
  for (;;) {
    const finished = await done(left);
    left = left.filter((_, i) => !finished[i]);
    if (!left.length) return;
    if (Date.now() > until) throw new Error(`${left.length} of ${pending.length} ${what} not at rest in time ${await explain(left)}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Transactions committed in leasekeeper's database so far (PostgreSQL's statistics, flushed within a second or so). */
async function committedTransactions(stack: TestStack): Promise<number> {
  const { rows } = await stack.db.pool.query<{ n: string }>('SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()');
  return Number(rows[0].n);
}

/** Notice workflows of these leases (their ids begin with the lease's), open ones only if `running`. */
async function noticeWorkflowsOf(client: TemporalClient, leaseIds: Set<string>, running: boolean): Promise<string[]> {
  const ids: string[] = [];
  const query = `WorkflowType = '${noticeWorkflowType}'${running ? " AND ExecutionStatus = 'Running'" : ''}`;
  for await (const execution of client.workflow.list({ query })) {
    // notice-<lease id>:<event>:v<version>…
    const leaseId = execution.workflowId.slice(noticeWorkflowId('').length).split(':')[0];
    if (leaseIds.has(leaseId)) ids.push(execution.workflowId);
  }
  return ids;
}

async function runLife(stack: TestStack, life: Life, idle: Record<string, number | string>) {
  const project = `cost-${life}`;
  const api = apiClient(stack.url, member(project));
  const admin = apiClient(stack.url, ADMIN);
  const hook = life === 'webhook' ? await receiver() : undefined;
  try {
    if (hook) {
      const put = await api('PUT', `/v1/projects/${project}/webhooks`, { webhooks: [{ url: hook.url }] });
      if (put.status !== 200) throw new Error(`webhook: ${put.status} ${JSON.stringify(put.body)}`);
    }
    // Members' limits out of reach (N leases at once); the approval life asks approval of every lease.
    const policy = { max_leases: 1_000_000, max_hosts: 1_000, ...(life === 'approval' ? { approval: [{ always: true, timeout: 1440 }] } : {}) };
    const set = await admin('PUT', `/v1/projects/${project}/policy`, policy);
    if (set.status !== 200) throw new Error(`policy: ${set.status} ${JSON.stringify(set.body)}`);

    const cpuUsed = cpuMeter();
    const transactionsBefore = await committedTransactions(stack);
    const began = Date.now();
    const leaseIds: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < LEASES) {
          const i = next++;
          const window = life === 'delete-pending' ? { start_date: inSeconds(3600), end_date: inSeconds(7200) } : { start_date: inSeconds(LEAD_S), end_date: inSeconds(LEAD_S + DURATION_S) };
          const res = await api('POST', '/v1/leases', { name: `${project}-${i}`, ...window, reservations: [hostReservation({ min: 1, max: 1 })] });
          if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
          const id = res.body.lease.id as string;
          leaseIds.push(id);
          if (life === 'delete-pending') {
            const deleted = await api('DELETE', `/v1/leases/${id}`);
            if (deleted.status !== 204) throw new Error(`delete ${id}: ${deleted.status} ${JSON.stringify(deleted.body)}`);
          }
          if (life === 'approval') {
            if (res.body.lease.status !== 'PENDING_APPROVAL') throw new Error(`lease ${id} is ${res.body.lease.status}, not waiting for approval`);
            const approved = await admin('POST', `/v1/leases/${id}/approve`, {});
            if (approved.status !== 200) throw new Error(`approve ${id}: ${approved.status} ${JSON.stringify(approved.body)}`);
          }
        }
      }),
    );
    const until = Date.now() + SETTLE_MS;
    // Ended by the lease's row first (one query a round; a deleted lease's workflow closes): only then its history is read.
    await untilEach(
      leaseIds,
      async (left) => {
        const { rows } = life === 'delete-pending' ? { rows: [] } : await stack.db.pool.query<{ id: string }>("SELECT id FROM leases WHERE id = ANY($1) AND status = 'TERMINATED'", [left]);
        const ended = new Set(rows.map((row) => row.id));
        return Promise.all(left.map(async (id) => (life === 'delete-pending' || ended.has(id)) && atRest(await historyOf(stack.temporal.client, leaseWorkflowId(id)))));
      },
      until,
      'lease workflows',
      async (left) => {
        const { rows } = await stack.db.pool.query<{ id: string; status: string }>('SELECT id, status FROM leases WHERE id = ANY($1)', [left]);
        const last = async (id: string) => Object.keys((await historyOf(stack.temporal.client, leaseWorkflowId(id))).at(-1) ?? {}).find((key) => key.endsWith('Attributes'));
        return `(e.g. ${(await Promise.all(left.slice(0, 3).map(async (id) => `${id}: ${rows.find((r) => r.id === id)?.status ?? 'no row'}, last event ${await last(id)}`))).join('; ')})`;
      },
    );
    const leaseSet = new Set(leaseIds);
    // Delivery done: none of their notice workflows still open, and (the webhook's) as many received as
    // there are notice workflows, the same in two rounds in a row (visibility lags behind the histories).
    let lastSeen = '';
    await untilEach(
      [leaseSet],
      async ([ids]) => {
        const running = (await noticeWorkflowsOf(stack.temporal.client, ids, true)).length;
        const all = hook ? (await noticeWorkflowsOf(stack.temporal.client, ids, false)).length : 0;
        const seen = `${running}/${all}/${hook?.received() ?? 0}`;
        const settled = running === 0 && (!hook || (all > 0 && all === hook.received())) && seen === lastSeen;
        lastSeen = seen;
        return [settled];
      },
      until,
      'notice workflow sets',
    );
    const seconds = (Date.now() - began) / 1000;
    const cpu = cpuUsed();
    const transactions = (await committedTransactions(stack)) - transactionsBefore;

    // Counted after the CPU is read: the reading of histories is not the lease's cost.
    const leaseCounts: HistoryCounts[] = [];
    for (const id of leaseIds) {
      const events = await historyOf(stack.temporal.client, leaseWorkflowId(id));
      // Only the latest run is read: a lease that continued as new would be undercounted.
      if (events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes) throw new Error(`lease ${id} continued as new: its earlier runs are not counted`);
      leaseCounts.push(countHistory(events));
    }
    const noticeIds = await noticeWorkflowsOf(stack.temporal.client, leaseSet, false);
    if (hook && noticeIds.length !== hook.received()) throw new Error(`${noticeIds.length} notice workflows, ${hook.received()} notices received`);
    const noticeCounts: HistoryCounts[] = [];
    for (const id of noticeIds) noticeCounts.push(countHistory(await historyOf(stack.temporal.client, id)));
    const perLease = (value: number | string) => (typeof value === 'number' ? Math.round(((value * 1000) / LEASES) * 10) / 10 : value);
    return {
      life,
      leases: LEASES,
      seconds: Math.round(seconds * 10) / 10,
      leaseWorkflow: averageCounts(leaseCounts, LEASES),
      noticeWorkflows: Math.round((noticeIds.length / LEASES) * 10) / 10,
      noticeWorkflow: averageCounts(noticeCounts, LEASES),
      ...(hook ? { noticesReceived: hook.received() } : {}),
      // With the benchmark's own: one status query a round while it waits, and the outbox's sweeps.
      postgresTransactionsPerLease: Math.round((transactions / LEASES) * 10) / 10,
      cpuMsPerLease: Object.fromEntries(Object.entries(cpu).map(([role, value]) => [role, perLease(value)])),
      // The same, less what the processes use at rest (idleCpuMsPerSecond) over the life's seconds.
      cpuMsPerLeaseLessIdle: Object.fromEntries(Object.entries(cpu).map(([role, value]) => [role, typeof value === 'number' && typeof idle[role] === 'number' ? Math.round(((value * 1000 - idle[role] * seconds) / LEASES) * 10) / 10 : value])),
    };
  } finally {
    await hook?.close();
  }
}

runBenchmark('lease-cost', async () => {
  if (!Number.isInteger(LEASES) || LEASES < 1 || LEASES > 1_000) throw new Error('LK_BENCH_LEASES must be 1..1000');
  const lives = (process.env.LK_BENCH_LEASE_LIVES ?? LIVES.join(',')).split(',').map((life) => life.trim());
  const unknown = lives.filter((life) => !(LIVES as readonly string[]).includes(life));
  if (unknown.length) throw new Error(`LK_BENCH_LEASE_LIVES: unknown ${unknown.join(', ')} (expected ${LIVES.join(', ')})`);
  // The project's webhook is on loopback.
  const stack = await startTestStack({ env: { LK_WEBHOOK_ALLOW_PRIVATE: 'true' }, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  try {
    // One host per lease: every life's leases overlap.
    for (let h = 0; h < LEASES; h++) await insertHost(stack.db.pool, { name: `cost-host-${h}` });
    // What the processes use at rest (worker polls, outbox sweeps, Temporal's own loops), per second: counted out of the lives' CPU.
    const idleMeter = cpuMeter();
    const idleFrom = Date.now();
    await new Promise((resolve) => setTimeout(resolve, IDLE_WINDOW_MS));
    const idle = Object.fromEntries(Object.entries(idleMeter()).map(([role, value]) => [role, typeof value === 'number' ? Math.round((value * 1000) / ((Date.now() - idleFrom) / 1000)) : value]));
    console.log('CPU ms per second at rest:', idle);
    const runs: Array<Awaited<ReturnType<typeof runLife>>> = [];
    for (const life of lives as Life[]) {
      const run = await runLife(stack, life, idle);
      console.log(`${life}: ${run.leases} leases at rest after ${run.seconds} s`);
      runs.push(run);
    }
    const rows: Record<string, Record<string, number | string>> = {};
    const row = (name: string, value: (run: (typeof runs)[number]) => number | string) => {
      rows[name] = Object.fromEntries(runs.map((run) => [run.life, value(run)]));
    };
    row('workflow tasks', (r) => r.leaseWorkflow.workflowTasks);
    row('activities', (r) => r.leaseWorkflow.activities);
    row('local activities', (r) => r.leaseWorkflow.localActivities);
    row('timers started', (r) => r.leaseWorkflow.timers);
    row('child workflows', (r) => r.leaseWorkflow.childWorkflows);
    row('signals', (r) => r.leaseWorkflow.signals);
    row('updates', (r) => r.leaseWorkflow.updates);
    row('search attribute upserts', (r) => r.leaseWorkflow.searchAttributeUpserts);
    row('history events: lease workflow', (r) => r.leaseWorkflow.events);
    row('notice workflows', (r) => r.noticeWorkflows);
    row('notice workflows: tasks / activities', (r) => `${r.noticeWorkflow.workflowTasks} / ${r.noticeWorkflow.activities}`);
    row('history events: notice workflows', (r) => r.noticeWorkflow.events);
    row('PostgreSQL transactions', (r) => r.postgresTransactionsPerLease);
    for (const role of Object.keys(runs[0]?.cpuMsPerLease ?? {})) row(`CPU ms: ${role} (less idle)`, (r) => `${r.cpuMsPerLease[role] ?? ''} (${r.cpuMsPerLeaseLessIdle[role] ?? ''})`);
    row('seconds until at rest', (r) => r.seconds);
    console.log(`\nper lease (averaged over ${LEASES} leases a life):`);
    console.table(rows);
    // Where the activities go: the lease workflow's by type, per lease.
    const types = [...new Set(runs.flatMap((run) => Object.keys(run.leaseWorkflow.byType)))].sort();
    console.table(Object.fromEntries(types.map((type) => [type, Object.fromEntries(runs.map((run) => [run.life, run.leaseWorkflow.byType[type] ?? 0]))])));
    return { leases: LEASES, clients: CLIENTS, leadSeconds: LEAD_S, durationSeconds: DURATION_S, idleCpuMsPerSecond: idle, runs, table: rows };
  } finally {
    await stack.stop();
  }
});
