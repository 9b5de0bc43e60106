import { randomBytes } from 'node:crypto';
import { Client, Pool } from 'pg';

function serverUrl(database: string, server = process.env.DATABASE_URL ?? ''): string {
  const url = new URL(server);
  url.pathname = `/${database}`;
  return url.toString();
}

async function adminQuery(sql: string, server?: string): Promise<void> {
  const client = new Client({ connectionString: serverUrl('postgres', server) });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
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
  const pool = new Pool({ connectionString: url, max: 5 });
  pool.on('error', () => undefined); // idle connections are cut when the database is dropped
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`, server);
    },
  };
}
