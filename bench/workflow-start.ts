/**
 * `npm run bench:workflow-start`: the floor under any admission design that keeps one workflow
 * per lease (issue 22). Starts LK_BENCH_LEASES (default 1 000) lease workflows of leases already
 * admitted, from LK_BENCH_CLIENTS (default 50) concurrent callers, as an outbox would start them
 * after the calendar had booked them: the lease as input, its search attributes with the start,
 * no admission update, no activity. The worker is its own process (LK_BENCH_WORKERS, default 1).
 * Prints how fast Temporal accepts the starts, how long until every workflow has run its first
 * task (it then sleeps until the lease's start), the lag from each start to that first task, and
 * CPU per workflow by process; writes bench/results/workflow-start.json.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { leaseWorkflowLabels } from '../src/outbox';
import { newLease, type NewLeaseRequest } from '../src/domain/lease';
import { startTestStack } from '../dev-stack/stack';
import { leaseWorkflowId, leaseWorkflowType, type LeaseWorkflow } from '../workflows/lease/messages';
import { measuredWorkers, runBenchmark, summary, workflowRunningAt } from './common';

const LEASES = Number(process.env.LK_BENCH_LEASES ?? 1_000);
const CLIENTS = Number(process.env.LK_BENCH_CLIENTS ?? 50);
const WORKERS = Number(process.env.LK_BENCH_WORKERS ?? 1);
/** How long the workers may take to run every first task before the benchmark gives up. */
const CATCH_UP_LIMIT_MS = 10 * 60_000;
/** Workflows whose history is read for the start-to-first-task lag. */
const SAMPLED = 200;

/** Whether the workflow has completed its first workflow task (its history holds more than the start and the task scheduled). */
async function ranFirstTask(client: Client, leaseId: string): Promise<boolean> {
  return (await client.workflow.getHandle(leaseWorkflowId(leaseId)).describe()).historyLength > 2;
}

runBenchmark(WORKERS === 1 ? 'workflow-start' : `workflow-start-${WORKERS}-workers`, async () => {
  for (const [name, value, max] of [['LK_BENCH_LEASES', LEASES, 100_000], ['LK_BENCH_CLIENTS', CLIENTS, 500], ['LK_BENCH_WORKERS', WORKERS, 8]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  const stack = await startTestStack({ noWorker: true });
  const measured = await measuredWorkers(stack, WORKERS).catch(async (err: unknown) => {
    await stack.stop(); // a process that did not start must not leave the stack running
    throw err;
  });
  try {
    const { client } = stack.temporal;
    const ids: string[] = [];
    const startLatency: number[] = [];
    const farFuture = Date.UTC(2099, 0, 1);
    const began = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < LEASES) {
          const i = next++;
          const request: NewLeaseRequest = { id: randomUUID(), name: `start-${i}`, projectId: 'bench', userId: 'bench', start: farFuture + i * 60_000, end: farFuture + i * 60_000 + 3_600_000, reservations: [], requestedMs: Date.now() };
          const lease = { ...newLease(request), version: 1 };
          const t = performance.now();
          await client.workflow.start<LeaseWorkflow>(leaseWorkflowType, {
            workflowId: leaseWorkflowId(request.id),
            taskQueue: stack.config.temporal.taskQueue,
            args: [{ request, requestHash: 'bench', carried: lease }],
            ...leaseWorkflowLabels(lease, 'started by bench:workflow-start'),
          });
          startLatency.push(performance.now() - t);
          ids.push(request.id);
        }
      }),
    );
    const startsSeconds = (performance.now() - began) / 1000;

    // Caught up when the last workflows started have run their first task (the task queue is served in order, roughly).
    const caughtUpBy = Date.now() + CATCH_UP_LIMIT_MS;
    for (;;) {
      const last = ids.slice(-20);
      if ((await Promise.all(last.map((id) => ranFirstTask(client, id)))).every(Boolean)) break;
      if (Date.now() > caughtUpBy) throw new Error(`the workers did not run the first tasks of ${LEASES} workflows within ${CATCH_UP_LIMIT_MS / 60_000} min`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const allRunningSeconds = (performance.now() - began) / 1000;
    const cpu = measured.cpuUsed();

    // Every workflow ran its first task, and how long after its start (from the histories of a sample).
    const notRunning = (await Promise.all(ids.map(async (id) => ((await ranFirstTask(client, id)) ? 0 : 1)))).reduce<number>((a, b) => a + b, 0);
    const lags: number[] = [];
    for (const id of ids.filter((_, i) => i % Math.max(1, Math.floor(ids.length / SAMPLED)) === 0).slice(0, SAMPLED)) {
      const { startedMs, firstTaskMs } = await workflowRunningAt(client, leaseWorkflowId(id));
      if (firstTaskMs !== undefined) lags.push(firstTaskMs - startedMs);
    }

    const perWorkflow = Object.fromEntries(Object.entries(cpu).map(([role, seconds]) => [role, typeof seconds === 'number' ? Math.round((seconds * 1000 * 10) / LEASES) / 10 : seconds]));
    const result = {
      leases: LEASES,
      clients: CLIENTS,
      workers: WORKERS,
      startsAcceptedPerSecond: Math.round((LEASES / startsSeconds) * 10) / 10,
      startLatencyMs: summary(startLatency),
      allRunningAfterSeconds: Math.round(allRunningSeconds * 10) / 10,
      runningPerSecond: Math.round((LEASES / allRunningSeconds) * 10) / 10,
      firstTaskLagMs: summary(lags),
      notRunning,
      cpuMsPerWorkflow: perWorkflow,
    };
    console.log(`\nworkflow-start: ${LEASES} lease workflows, ${CLIENTS} callers, ${WORKERS} worker(s)`);
    console.table({
      'starts accepted per second (start RPC p50 / p99 ms)': { value: `${result.startsAcceptedPerSecond} (${result.startLatencyMs.p50} / ${result.startLatencyMs.p99})` },
      'all running (first task done) after s, per second': { value: `${result.allRunningAfterSeconds}, ${result.runningPerSecond}/s` },
      'start → first task lag p50 / p99 / max (ms)': { value: `${result.firstTaskLagMs.p50} / ${result.firstTaskLagMs.p99} / ${result.firstTaskLagMs.max}` },
      'not running at the end': { value: notRunning },
      ...Object.fromEntries(Object.entries(perWorkflow).map(([role, ms]) => [`CPU ms per workflow: ${role}`, { value: ms }])),
    });
    if (notRunning !== 0) process.exitCode = 1;
    return result;
  } finally {
    for (const worker of measured.workers) await worker.stop();
    await stack.stop();
  }
});
