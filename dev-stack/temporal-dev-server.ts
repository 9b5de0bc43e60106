/**
 * The real Temporal server for development and tests: the Temporal CLI's dev server (built from its
 * Go module by scripts/build-temporal.sh), persisted to a SQLite file, never in memory.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { searchAttributeCliSpecs } from '../src/domain/search-attributes';
import { ManagedProcess, waitUntil } from './processes';

export function temporalBinary(cacheDir: string): string {
  const binary = process.env.LK_TEMPORAL_BIN ?? path.join(cacheDir, 'bin', 'temporal');
  if (!fs.existsSync(binary)) {
    throw new Error(`Temporal CLI not found at ${binary}: run \`npm run setup\` (or \`npm run temporal:build\`), or set TEMPORAL_ADDRESS to use an existing server`);
  }
  return binary;
}

export interface TemporalDevServerOptions {
  binary: string;
  dbFile: string;
  port: number;
  uiPort: number;
  namespace: string;
  headless?: boolean;
  echo?: boolean;
  pidDir?: string;
}

export function devServerArgs(options: TemporalDevServerOptions): string[] {
  return [
    'server', 'start-dev',
    '--ip', '127.0.0.1',
    '--port', String(options.port),
    '--db-filename', options.dbFile,
    '--sqlite-pragma', 'journal_mode=WAL',
    '--sqlite-pragma', 'synchronous=NORMAL',
    '--namespace', options.namespace,
    '--log-level', 'warn',
    ...searchAttributeCliSpecs().flatMap((spec) => ['--search-attribute', spec]),
    ...(options.headless ? ['--headless'] : ['--ui-ip', '127.0.0.1', '--ui-port', String(options.uiPort)]),
  ];
}

export function startTemporalDevServer(options: TemporalDevServerOptions): ManagedProcess {
  fs.mkdirSync(path.dirname(options.dbFile), { recursive: true });
  return new ManagedProcess({
    name: 'temporal',
    command: options.binary,
    args: devServerArgs(options),
    echo: options.echo,
    pidDir: options.pidDir,
  });
}

/** Waits until the frontend answers and the namespace is registered. */
export async function waitForTemporal(address: string, namespace: string, timeoutMs = 60_000): Promise<void> {
  await waitUntil('Temporal', async () => {
    const connection = await Connection.connect({ address, connectTimeout: 1_000 });
    try {
      await connection.workflowService.describeNamespace({ namespace });
    } finally {
      await connection.close();
    }
  }, timeoutMs, 300);
}
