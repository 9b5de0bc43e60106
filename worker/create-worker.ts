import { Client, WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { NativeConnection, Worker, type ActivityInterceptorsFactory } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../activities';
import type { Config } from '../src/config';
import { noticeService, type NoticeService } from '../src/notifications/service';
import { usagePolicy } from '../src/policy';
import { noticeWorkflowId, noticeWorkflowType, type NoticeWorkflow } from '../workflows/notices/messages';

/**
 * Production runs the prebuilt bundle (`npm run build` writes it); tests run the bundle their run
 * made once (test/global-setup.ts), or the sources where there is none.
 */
export type WorkflowSource = { bundlePath: string } | { workflowsPath: string };

export const WORKFLOWS_PATH = require.resolve('../workflows');

export interface WorkerOptions {
  connection: NativeConnection;
  config: Pick<Config, 'temporal' | 'worker' | 'leaseLimits' | 'policy' | 'notices'> & Partial<Pick<Config, 'preemption'>>;
  deps: ActivityDeps;
  workflows: WorkflowSource;
  identity?: string;
  /** Activity interceptors (the worker's metrics). */
  activityInterceptors?: ActivityInterceptorsFactory[];
}

/** What the lease worker and the notice worker have alike: every activity, the workflows, the drain on SIGTERM. */
function commonWorkerOptions(options: WorkerOptions, identitySuffix: string) {
  const { connection, config, deps, workflows } = options;
  return {
    connection,
    namespace: config.temporal.namespace,
    ...(options.identity ? { identity: `${options.identity}${identitySuffix}` } : {}),
    // The usage policy and the notices from the settings unless the caller brings its own.
    activities: createActivities({ ...deps, preemptionEvictionMs: deps.preemptionEvictionMs ?? config.preemption?.evictionMs, preemptionWarningMs: deps.preemptionWarningMs ?? config.preemption?.warningMs, usagePolicy: deps.usagePolicy ?? usagePolicy(deps.pool, config), notices: deps.notices ?? workerNotices(connection, config, deps) }),
    ...(options.activityInterceptors ? { interceptors: { activity: options.activityInterceptors } } : {}),
    ...('bundlePath' in workflows ? { workflowBundle: { codePath: workflows.bundlePath } } : { workflowsPath: workflows.workflowsPath }),
    // On SIGTERM, running activities get this long to finish before the worker stops.
    shutdownGraceTime: config.worker.shutdownGraceMs,
    // A running hook's heartbeat goes out at least this often (the SDK's default waits up to 80 % of
    // the heartbeat timeout between two): the 10 s timeout that notices a dead worker keeps a margin.
    maxHeartbeatThrottleInterval: 3_000,
  };
}

export async function createWorker(options: WorkerOptions): Promise<Worker> {
  const { config } = options;
  return Worker.create({
    ...commonWorkerOptions(options, ''),
    taskQueue: config.temporal.taskQueue,
    // Pending leases sleep for weeks: keep only recently active ones in memory.
    maxCachedWorkflows: config.worker.maxCachedWorkflows,
    // Half the workflow-task pollers on the task queue itself (the SDK's default is a fifth, the rest
    // on this worker's sticky queue): every admitted lease's workflow takes its first task from there,
    // and with two pollers over the queue's partitions a burst's first tasks waited up to 2.5 s
    // (bench:admission, LK_BENCH_BURST=1); with five, under one.
    nonStickyToStickyPollRatio: 0.5,
  });
}

/**
 * The worker's notice worker, in the same process: notices' delivery workflows and activities on
 * the notices task queue, with activity slots of their own (LK_NOTICE_WORKER_SLOTS), so that
 * receivers that are slow or never answer wait there and never hold a slot lease work needs. It
 * registers every activity, and the lease worker keeps the notice activities too: delivery
 * workflows started before the notices queue existed finish on the lease queue.
 */
export async function createNoticeWorker(options: WorkerOptions): Promise<Worker> {
  const { config } = options;
  return Worker.create({
    ...commonWorkerOptions(options, '/notices'),
    taskQueue: config.temporal.noticeTaskQueue,
    maxConcurrentActivityTaskExecutions: config.notices.delivery.workerSlots,
    // A delivery workflow is short-lived or sleeps (backoff, a hold): few need to stay in memory.
    maxCachedWorkflows: Math.min(config.worker.maxCachedWorkflows, 500),
  });
}

/**
 * Notices as this worker announces them: each one's delivery is a workflow on the notices task
 * queue, started through its connection (a second announce of the same notice finds it running or done).
 */
export function workerNotices(connection: NativeConnection, config: Pick<Config, 'temporal' | 'notices'>, deps: Pick<ActivityDeps, 'pool'>, onDropped?: (eventType: string, channel: 'webhook' | 'oslo') => void): NoticeService {
  const client = new Client({ connection, namespace: config.temporal.namespace });
  return noticeService({
    pool: deps.pool,
    settings: config.notices,
    onDropped,
    startDelivery: async (notice, targets) => {
      try {
        await client.workflow.start<NoticeWorkflow>(noticeWorkflowType, {
          workflowId: noticeWorkflowId(notice.id),
          taskQueue: config.temporal.noticeTaskQueue,
          args: [notice, targets],
          staticSummary: `${notice.eventType} ${notice.lease ? `of lease ${notice.lease.id}` : typeof notice.details?.host === 'string' ? notice.details.host : ''}`.slice(0, 200),
        });
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err; // announced before: delivered or being delivered
      }
    },
  });
}
