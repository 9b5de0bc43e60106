import { NativeConnection, Worker, type ActivityInterceptorsFactory } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../activities';
import type { Config } from '../src/config';

/**
 * Production runs the prebuilt bundle (`npm run build` writes it); tests bundle the sources,
 * so that a test always runs the workflow code next to it.
 */
export type WorkflowSource = { bundlePath: string } | { workflowsPath: string };

export const WORKFLOWS_PATH = require.resolve('../workflows');

export async function createWorker(options: {
  connection: NativeConnection;
  config: Pick<Config, 'temporal' | 'worker'>;
  deps: ActivityDeps;
  workflows: WorkflowSource;
  identity?: string;
  /** Activity interceptors (the worker's metrics). */
  activityInterceptors?: ActivityInterceptorsFactory[];
}): Promise<Worker> {
  const { connection, config, deps, workflows } = options;
  return Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    ...(options.identity ? { identity: options.identity } : {}),
    activities: createActivities(deps),
    ...(options.activityInterceptors ? { interceptors: { activity: options.activityInterceptors } } : {}),
    ...('bundlePath' in workflows ? { workflowBundle: { codePath: workflows.bundlePath } } : { workflowsPath: workflows.workflowsPath }),
    // Pending leases sleep for weeks: keep only recently active ones in memory.
    maxCachedWorkflows: config.worker.maxCachedWorkflows,
    // On SIGTERM, running activities get this long to finish before the worker stops.
    shutdownGraceTime: config.worker.shutdownGraceMs,
  });
}
