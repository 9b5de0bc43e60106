import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfig, type Config } from '../../src/config';

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
