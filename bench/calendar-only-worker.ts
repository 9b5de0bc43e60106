/**
 * A worker process for the benchmarks that run several workers (bench:admission with
 * LK_BENCH_WORKERS): the real worker's workflows and activities, with physical:host booking on the
 * calendar alone (no OpenStack to move hosts in or out), as the in-process benchmarks book. What a
 * deployment runs is worker/main.ts; this differs only in its resource types.
 */
import { NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfigOrExit } from '../src/config';
import { createPool } from '../src/db/pool';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { createLogger } from '../src/log';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { createWorker } from '../worker/create-worker';
import { PinoTemporalLogger } from '../worker/temporal-logger';

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const log = createLogger(config, 'worker');
  Runtime.install({ logger: new PinoTemporalLogger(log), shutdownSignals: ['SIGINT', 'SIGTERM'] });
  const pool = createPool(config, 'leasekeeper-bench-worker', (err) => log.warn({ err }, 'idle database connection lost'));
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  const plugins = pluginRegistry([physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })]);
  const worker = await createWorker({ connection, config, deps: { pool, plugins }, workflows: { bundlePath: config.worker.workflowBundle } });
  log.info({ taskQueue: config.temporal.taskQueue }, 'worker ready');
  try {
    await worker.run();
  } finally {
    await connection.close();
    await pool.end();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
