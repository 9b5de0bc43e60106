/**
 * A project-local PostgreSQL cluster built from Debian's binaries: initdb once, run `postgres` in the
 * foreground (so its PID is ours), TCP on 127.0.0.1 only, no Unix socket. As root (CI, containers),
 * the server runs as the `postgres` system user, since PostgreSQL refuses to run as root.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';
import { ManagedProcess, waitUntil } from './processes';

export const LOCAL_SUPERUSER = 'leasekeeper';

export function postgresBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin', 'postgres'))) : [];
  if (versions.length === 0) {
    throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql: run `npm run setup` (or apt-get install postgresql)');
  }
  versions.sort((a, b) => Number(b) - Number(a));
  return path.join(root, versions[0], 'bin');
}

const runningAsRoot = process.getuid?.() === 0;

/** Runs as the postgres system user when we are root; otherwise as ourselves. */
function asServerUser(command: string, args: string[]): { command: string; args: string[] } {
  if (!runningAsRoot) return { command, args };
  return { command: 'setpriv', args: ['--reuid=postgres', '--regid=postgres', '--init-groups', '--', command, ...args] };
}

/** Creates the cluster under `dataDir` unless it exists. Superuser `leasekeeper`, trust auth on loopback. */
export function ensureCluster(dataDir: string): void {
  if (fs.existsSync(path.join(dataDir, 'PG_VERSION'))) return;
  fs.mkdirSync(path.dirname(dataDir), { recursive: true });
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (runningAsRoot) execFileSync('chown', ['-R', 'postgres:postgres', dataDir]);
  const initdb = asServerUser(path.join(postgresBinDir(), 'initdb'), [
    '-D', dataDir, '-U', LOCAL_SUPERUSER, '--auth-host=trust', '--auth-local=trust', '-E', 'UTF8', '--no-locale', '--no-instructions',
  ]);
  execFileSync(initdb.command, initdb.args, { stdio: 'pipe' });
}

export interface PostgresServerOptions {
  dataDir: string;
  port: number;
  /** Tests trade durability for speed; the dev cluster keeps fsync on. */
  durable: boolean;
  echo?: boolean;
  pidDir?: string;
  /** The process's name in logs and PID files (default `postgres`). */
  name?: string;
}

export function startPostgres(options: PostgresServerOptions): ManagedProcess {
  const settings = [
    '-c', 'listen_addresses=127.0.0.1',
    '-c', `port=${options.port}`,
    '-c', 'unix_socket_directories=',
    '-c', 'max_connections=200',
    ...(options.durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']),
  ];
  const { command, args } = asServerUser(path.join(postgresBinDir(), 'postgres'), ['-D', options.dataDir, ...settings]);
  return new ManagedProcess({ name: options.name ?? 'postgres', command, args, echo: options.echo, pidDir: options.pidDir, stopSignal: 'SIGINT' });
}

export function localUrl(port: number, database: string): string {
  return `postgres://${LOCAL_SUPERUSER}@127.0.0.1:${port}/${database}`;
}

/**
 * Runs `use` on a connection of its own to `url`, closed afterwards. Its 'error' listener keeps a
 * connection cut between queries (a server going down) from ending the process: the next query fails.
 */
export async function withClient<T>(url: string, use: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

/** Waits until the server accepts connections, then creates `database` if it is missing. */
export async function ensureDatabase(serverUrl: string, timeoutMs = 30_000): Promise<void> {
  const url = new URL(serverUrl);
  const database = decodeURIComponent(url.pathname.slice(1));
  url.pathname = '/postgres';
  await waitUntil('PostgreSQL', () =>
    withClient(url.toString(), async (client) => {
      const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
      if (!rowCount) await client.query(`CREATE DATABASE "${database.replace(/"/g, '""')}"`);
    }),
  timeoutMs);
}
