import { randomBytes } from 'node:crypto';
import { migrate } from '../src/db/migrate';
import { createPool, type Pool } from '../src/db/pool';
import { withClient } from './postgres-local';

function serverUrl(database: string, server = process.env.DATABASE_URL ?? ''): string {
  const url = new URL(server);
  url.pathname = `/${database}`;
  return url.toString();
}

async function adminQuery(sql: string, server?: string): Promise<void> {
  await withClient(serverUrl('postgres', server), (client) => client.query(sql));
}

export interface TestDatabase {
  url: string;
  pool: Pool;
  drop(): Promise<void>;
}

/** A brand-new, empty database on the test server (or on `server`, a URL of it); `drop()` removes it. */
export async function createTestDatabase(server?: string): Promise<TestDatabase> {
  const name = `lk_test_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`, server);
  const url = serverUrl(name, server);
  // Unbounded waits: API, worker and outbox share these 5 connections, where each process of a
  // deployment has its own pool; a busy test must queue, not fail.
  const pool = createPool({ database: { url, poolSize: 5, connectionTimeoutMs: 0 } }, 'leasekeeper-test');
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`, server);
    },
  };
}

/**
 * For a test file (or describe block) that needs only a migrated database: creates it before the
 * tests and drops it after them; the returned function gives it to the tests.
 */
export function useMigratedTestDatabase(): () => TestDatabase {
  let db: TestDatabase | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    await migrate(db.pool);
  });
  afterAll(async () => {
    await db?.drop();
  });
  return () => {
    if (!db) throw new Error('the test database is not ready: useMigratedTestDatabase() must be called in a describe block, outside the tests');
    return db;
  };
}
