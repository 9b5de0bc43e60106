/**
 * The real worker process (dist/worker/main.js) and API process (dist/src/api/main.js) for a test
 * stack or a benchmark: what a deployment runs, so that they can be killed with -9, run several
 * at once and measured on their own (CPU, RSS). Kill one with `child.kill('SIGKILL')`; stop it with `stop()`.
 */
import path from 'node:path';
import { ManagedProcess } from './processes';
import { REPO_ROOT } from '../src/paths';

export interface WorkerProcessTarget {
  db: { url: string };
  config: { temporal: { address: string; taskQueue: string } };
}

/** `script`: the worker's entry under dist/, worker/main.js unless a benchmark brings its own (bench/calendar-only-worker.ts). */
export function startWorkerProcess(stack: WorkerProcessTarget, env: Record<string, string> = {}, script = path.join('dist', 'worker', 'main.js')): Promise<ManagedProcess> {
  return startProcess('worker', script, /"msg":"worker ready"/, stack, env);
}

/** An API process on `port` (loopback); its URL is `http://127.0.0.1:<port>`. `script`: the API's entry under dist/, src/api/main.js unless a benchmark brings its own. */
export function startApiProcess(stack: WorkerProcessTarget, port: number, env: Record<string, string> = {}, script = path.join('dist', 'src', 'api', 'main.js')): Promise<ManagedProcess> {
  return startProcess('api', script, /"msg":"api listening"/, stack, { LK_API_HOST: '127.0.0.1', LK_API_PORT: String(port), ...env });
}

async function startProcess(name: string, script: string, ready: RegExp, stack: WorkerProcessTarget, env: Record<string, string>): Promise<ManagedProcess> {
  const proc = new ManagedProcess({
    name,
    command: process.execPath,
    args: [path.join(REPO_ROOT, script)],
    env: {
      ...process.env,
      DATABASE_URL: stack.db.url,
      TEMPORAL_ADDRESS: stack.config.temporal.address,
      LK_TASK_QUEUE: stack.config.temporal.taskQueue,
      LK_LOG_LEVEL: 'info',
      LK_WORKER_METRICS_PORT: '', // none unless asked: several workers run at once
      LK_HOST_MONITOR: 'off', // unless a test asks for it: a monitor heals leases a test did not mean to change
      ...env,
    },
  });
  try {
    await proc.waitForLine(ready, 30_000);
  } catch (err) {
    await proc.stop(); // a process that never got ready must not linger
    throw err;
  }
  return proc;
}
