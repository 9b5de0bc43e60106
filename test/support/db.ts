import { randomBytes } from 'node:crypto';
import { Client, Pool } from 'pg';

function serverUrl(database: string): string {
  const url = new URL(process.env.DATABASE_URL ?? '');
  url.pathname = `/${database}`;
  return url.toString();
}

async function adminQuery(sql: string): Promise<void> {
  const client = new Client({ connectionString: serverUrl('postgres') });
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

/** A brand-new, empty database on the test server; `drop()` removes it. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `lk_test_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = serverUrl(name);
  const pool = new Pool({ connectionString: url, max: 5 });
  pool.on('error', () => undefined); // idle connections are cut when the database is dropped
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}
