import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfig, type Config } from '../src/config';
import { WORKFLOWS_PATH, type WorkflowSource } from '../worker/create-worker';

/** Config for one test file: the test servers, and a task queue of its own. */
export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({ ...process.env, LK_TASK_QUEUE: `test-${randomUUID()}`, ...env });
}

let runtimeInstalled = false;

/** Only warnings from the SDK: its INFO lines (worker state changes) drown the test report. */
export function quietTemporalRuntime(): void {
  if (runtimeInstalled) return;
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
  runtimeInstalled = true;
}

export async function connectTestTemporal(config: Config) {
  quietTemporalRuntime();
  const nativeConnection = await NativeConnection.connect({ address: config.temporal.address });
  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  return {
    nativeConnection,
    connection,
    client,
    async close() {
      await connection.close();
      await nativeConnection.close();
    },
  };
}

/** Where test/global-setup.ts left the run's one workflow bundle. */
export const WORKFLOW_BUNDLE_ENV = 'LK_TEST_WORKFLOW_BUNDLE';

/**
 * The workflows a test worker runs: the bundle made once for the whole jest run, so that no worker
 * (re)start bundles again; the sources only where a test runs without the global setup.
 */
export function testWorkflows(): WorkflowSource {
  const bundlePath = process.env[WORKFLOW_BUNDLE_ENV];
  return bundlePath ? { bundlePath } : { workflowsPath: WORKFLOWS_PATH };
}
