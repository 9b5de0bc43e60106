/**
 * The production topology of Temporal, for `LK_TEMPORAL=server npm start` and the tests that run
 * on it: `temporal-server` on PostgreSQL (persistence and SQL visibility), its schema set up by
 * deploy/temporal/setup-schema.sh, the dynamic config in deploy/temporal/dynamicconfig.yaml, and
 * the Web UI server beside it. All built from their Go modules by scripts/build-temporal.sh.
 * docker-compose.yml runs the same versions with the same schema script, dynamic config and server
 * config (COMPOSE_TEMPORAL below; test/docker-compose.test.ts keeps its files equal to it).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import YAML from 'yaml';
import { REPO_ROOT } from '../src/paths';
import { ManagedProcess } from './processes';

export const TEMPORAL_DEPLOY_DIR = path.join(REPO_ROOT, 'deploy', 'temporal');

export interface TemporalServerPorts {
  frontend: number;
  history: number;
  matching: number;
  worker: number;
  frontendMembership: number;
  historyMembership: number;
  matchingMembership: number;
  workerMembership: number;
}

/** Temporal's own port layout around a frontend port: 7233 gives its defaults (7234, 7235, 7239; 6933…6939). */
export function standardServerPorts(frontend: number): TemporalServerPorts {
  return {
    frontend, history: frontend + 1, matching: frontend + 2, worker: frontend + 6,
    frontendMembership: frontend - 300, historyMembership: frontend - 299, matchingMembership: frontend - 298, workerMembership: frontend - 294,
  };
}

export interface TemporalDatabase {
  host: string;
  port: number;
  user: string;
  password: string;
}

export interface TemporalServerConfigOptions {
  database: TemporalDatabase;
  ports: TemporalServerPorts;
  /** The address the services bind to and tell each other (127.0.0.1; 0.0.0.0 in a container). */
  bindAddress: string;
  /** The address other members reach this one at (127.0.0.1; the container's name in compose). */
  broadcastAddress: string;
  dynamicConfigFile: string;
  /** Fixed for the life of the cluster; 1, 4 and 16 performed the same on 2 cores. */
  historyShards?: number;
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
}

/** temporal-server's static config, as an object (written as YAML). */
export function temporalServerConfig(options: TemporalServerConfigOptions): Record<string, unknown> {
  const { database, ports } = options;
  const datastore = (databaseName: string, maxConns: number) => ({
    sql: {
      pluginName: 'postgres12',
      databaseName,
      connectAddr: `${database.host}:${database.port}`,
      connectProtocol: 'tcp',
      user: database.user,
      password: database.password,
      maxConns,
      maxIdleConns: maxConns,
      maxConnLifetime: '1h',
    },
  });
  const rpc = (grpcPort: number, membershipPort: number) => ({ grpcPort, membershipPort, bindOnIP: options.bindAddress });
  return {
    log: { stdout: true, level: options.logLevel ?? 'warn' },
    persistence: {
      defaultStore: 'default',
      visibilityStore: 'visibility',
      numHistoryShards: options.historyShards ?? 4,
      datastores: { default: datastore('temporal', 20), visibility: datastore('temporal_visibility', 10) },
    },
    global: { membership: { maxJoinDuration: '30s', broadcastAddress: options.broadcastAddress } },
    services: {
      // httpPort 0: no HTTP API (leasekeeper and the UI speak gRPC).
      frontend: { rpc: { ...rpc(ports.frontend, ports.frontendMembership), httpPort: 0 } },
      history: { rpc: rpc(ports.history, ports.historyMembership) },
      matching: { rpc: rpc(ports.matching, ports.matchingMembership) },
      worker: { rpc: rpc(ports.worker, ports.workerMembership) },
    },
    clusterMetadata: {
      enableGlobalNamespace: false,
      failoverVersionIncrement: 10,
      masterClusterName: 'active',
      currentClusterName: 'active',
      clusterInformation: {
        active: { enabled: true, initialFailoverVersion: 1, rpcName: 'frontend', rpcAddress: `${options.broadcastAddress}:${ports.frontend}` },
      },
    },
    dcRedirectionPolicy: { policy: 'noop' },
    archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } },
    namespaceDefaults: { archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } } },
    dynamicConfigClient: { filepath: options.dynamicConfigFile, pollInterval: '10s' },
  };
}

export function temporalServerBinaries(cacheDir: string): { server: string; sqlTool: string; ui: string } {
  const bin = path.join(cacheDir, 'bin');
  const binaries = { server: path.join(bin, 'temporal-server'), sqlTool: path.join(bin, 'temporal-sql-tool'), ui: path.join(bin, 'temporal-ui-server') };
  const missing = Object.values(binaries).filter((file) => !fs.existsSync(file));
  if (missing.length > 0) {
    throw new Error(`${missing.map((file) => path.basename(file)).join(', ')} not found in ${bin}: run \`npm run temporal:build\` (or \`npm run setup\`), or set TEMPORAL_ADDRESS to use an existing server`);
  }
  return binaries;
}

/** Creates or upgrades Temporal's databases (deploy/temporal/setup-schema.sh, as compose does). */
export async function setupTemporalSchema(sqlTool: string, database: TemporalDatabase): Promise<void> {
  try {
    await promisify(execFile)('sh', [path.join(TEMPORAL_DEPLOY_DIR, 'setup-schema.sh')], {
      env: {
        ...process.env,
        TEMPORAL_SQL_TOOL: sqlTool,
        SQL_HOST: database.host,
        SQL_PORT: String(database.port),
        SQL_USER: database.user,
        SQL_PASSWORD: database.password,
      },
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    const { stderr, stdout, message } = err as { stderr?: string; stdout?: string; message: string };
    const tail = `${stdout ?? ''}${stderr ?? ''}`.trim().split('\n').slice(-8).join('\n');
    throw new Error(`Temporal's schema setup on PostgreSQL ${database.host}:${database.port} failed: ${message.split('\n')[0]}\n${tail}`);
  }
}

export interface TemporalServerOptions {
  binaries: { server: string; ui: string };
  /** Where the generated config goes (config/development.yaml, ui/config/development.yaml). */
  rootDir: string;
  database: TemporalDatabase;
  ports: TemporalServerPorts;
  /** Web UI port; none when absent. */
  uiPort?: number;
  defaultNamespace: string;
  echo?: boolean;
  pidDir?: string;
}

/** Writes the config and starts temporal-server (and its Web UI when `uiPort` is given). The schema must be set up. */
export function startTemporalServer(options: TemporalServerOptions): ManagedProcess[] {
  const configDir = path.join(options.rootDir, 'config');
  fs.mkdirSync(configDir, { recursive: true });
  const config = temporalServerConfig({
    database: options.database,
    ports: options.ports,
    bindAddress: '127.0.0.1',
    broadcastAddress: '127.0.0.1',
    dynamicConfigFile: path.join(TEMPORAL_DEPLOY_DIR, 'dynamicconfig.yaml'),
  });
  fs.writeFileSync(path.join(configDir, 'development.yaml'), YAML.stringify(config));
  const processes = [new ManagedProcess({
    name: 'temporal',
    command: options.binaries.server,
    args: ['--root', options.rootDir, '--config', 'config', '--env', 'development', '--allow-no-auth', 'start'],
    echo: options.echo,
    pidDir: options.pidDir,
  })];
  if (options.uiPort !== undefined) {
    const uiConfigDir = path.join(options.rootDir, 'ui', 'config');
    fs.mkdirSync(uiConfigDir, { recursive: true });
    fs.writeFileSync(path.join(uiConfigDir, 'base.yaml'), '');
    fs.writeFileSync(path.join(uiConfigDir, 'development.yaml'), YAML.stringify(temporalUiConfig({ temporalAddress: `127.0.0.1:${options.ports.frontend}`, host: '127.0.0.1', port: options.uiPort, publicUrl: `http://127.0.0.1:${options.uiPort}`, defaultNamespace: options.defaultNamespace })));
    processes.push(new ManagedProcess({
      name: 'temporal-ui',
      command: options.binaries.ui,
      args: ['--root', path.join(options.rootDir, 'ui'), '--config', 'config', '--env', 'development', 'start'],
      echo: options.echo,
      pidDir: options.pidDir,
    }));
  }
  return processes;
}

/** The Web UI server's config; `publicUrl` is where browsers reach it. */
export function temporalUiConfig(options: { temporalAddress: string; host: string; port: number; publicUrl: string; defaultNamespace: string }): Record<string, unknown> {
  return {
    temporalGrpcAddress: options.temporalAddress,
    host: options.host,
    port: options.port,
    enableUi: true,
    defaultNamespace: options.defaultNamespace,
    notifyOnNewVersion: false, // no calls out of a loopback stack
    cors: { allowOrigins: [options.publicUrl], cookieInsecure: true },
    refreshInterval: '1m',
  };
}

/**
 * What docker-compose.yml's Temporal containers read (deploy/temporal/config/docker.yaml and
 * deploy/temporal/ui/config/docker.yaml): the same config as here, for compose's hosts. The server's
 * own address is known only inside its container, so that file is a template the server renders
 * (TEMPORAL_IP, set by deploy/temporal/start-server.sh).
 */
export const COMPOSE_TEMPORAL = {
  database: { host: 'postgresql', port: 5432, user: 'leasekeeper', password: 'leasekeeper' },
  serverConfig: (address = '{{ env "TEMPORAL_IP" }}') => temporalServerConfig({
    database: COMPOSE_TEMPORAL.database,
    ports: standardServerPorts(7233),
    bindAddress: address,
    broadcastAddress: address,
    dynamicConfigFile: '/etc/temporal/dynamicconfig.yaml',
    logLevel: 'info',
  }),
  uiConfig: () => temporalUiConfig({ temporalAddress: 'temporal:7233', host: '0.0.0.0', port: 8080, publicUrl: 'http://127.0.0.1:8233', defaultNamespace: 'default' }),
};
