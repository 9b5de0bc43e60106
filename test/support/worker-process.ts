/**
 * The real worker process (dist/worker/main.js) for a test stack or a benchmark: what a deployment
 * runs, so that it can be killed with -9 and measured on its own (CPU, RSS).
 * Kill it with `child.kill('SIGKILL')`; stop it with `stop()`.
 */
import path from 'node:path';
import { ManagedProcess } from '../../scripts/lib/processes';
import { REPO_ROOT } from '../../src/paths';

export interface WorkerProcessTarget {
  db: { url: string };
  config: { temporal: { address: string; taskQueue: string } };
}

export async function startWorkerProcess(stack: WorkerProcessTarget, env: Record<string, string> = {}): Promise<ManagedProcess> {
  const proc = new ManagedProcess({
    name: 'worker',
    command: process.execPath,
    args: [path.join(REPO_ROOT, 'dist', 'worker', 'main.js')],
    env: {
      ...process.env,
      DATABASE_URL: stack.db.url,
      TEMPORAL_ADDRESS: stack.config.temporal.address,
      LK_TASK_QUEUE: stack.config.temporal.taskQueue,
      LK_LOG_LEVEL: 'info',
      ...env,
    },
  });
  try {
    await proc.waitForLine(/"msg":"worker ready"/, 30_000);
  } catch (err) {
    await proc.stop(); // a worker that never got ready must not linger
    throw err;
  }
  return proc;
}
