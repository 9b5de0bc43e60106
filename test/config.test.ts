import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { ConfigError, loadConfig } from '../src/config';

describe('configuration', () => {
  it('has documented defaults for an empty environment', () => {
    const config = loadConfig({ HOME: '/home/someone' });
    expect(config.api).toEqual({ host: '127.0.0.1', port: 1234, authStrategy: 'noauth', authCacheMs: 60_000, workflowTimeoutMs: 30_000 });
    expect(config.temporal).toMatchObject({ address: '127.0.0.1:7233', external: false, namespace: 'default', taskQueue: 'leasekeeper', uiPort: 8233 });
    expect(config.database).toMatchObject({ url: 'postgres://leasekeeper@127.0.0.1:15432/leasekeeper', external: false });
    expect(config.cacheDir).toBe('/home/someone/.cache/leasekeeper');
    expect(config.worker.maxCachedWorkflows).toBe(2_000);
  });

  it('derives the local database and Temporal addresses from their ports', () => {
    const config = loadConfig({ LK_PG_PORT: '25432', LK_TEMPORAL_PORT: '17233' });
    expect(config.database.url).toBe('postgres://leasekeeper@127.0.0.1:25432/leasekeeper');
    expect(config.temporal.address).toBe('127.0.0.1:17233');
  });

  it('uses existing servers when their addresses are given', () => {
    const config = loadConfig({ TEMPORAL_ADDRESS: 'temporal.internal:7233', DATABASE_URL: 'postgresql://u:p@db:5432/lk' });
    expect(config.temporal).toMatchObject({ address: 'temporal.internal:7233', external: true });
    expect(config.database).toMatchObject({ url: 'postgresql://u:p@db:5432/lk', external: true });
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ LK_API_PORT: '' }).api.port).toBe(1234);
  });

  it.each([
    ['LK_API_PORT', 'http'],
    ['LK_API_PORT', '70000'],
    ['LK_LOG_LEVEL', 'loud'],
    ['TEMPORAL_ADDRESS', 'no-port'],
    ['DATABASE_URL', 'mysql://root@db/lk'],
    ['LK_WORKER_MAX_CACHED_WORKFLOWS', '0'],
  ])('rejects %s=%s with one line naming the variable', (name, value) => {
    let error: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toContain(`${name}=${JSON.stringify(value)}`);
    expect(message).not.toContain('\n');
  });

  it('stops a process with exit code 2 and a one-line message', () => {
    const run = spawnSync(process.execPath, [path.join(__dirname, '..', 'dist', 'src', 'api', 'main.js')], {
      env: { ...process.env, LK_API_PORT: 'eighty' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(2);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^leasekeeper: invalid configuration: LK_API_PORT="eighty": .*number/);
  });
});
