/**
 * A small versioned-migration runner: files `NNN_name.sql` in ./migrations, applied in order,
 * each in its own transaction, recorded in `schema_migrations` with a checksum so that an edited
 * migration is caught instead of silently diverging. Concurrent starters (API and worker) are
 * serialised by an advisory lock, so running it at every start-up is safe.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Pool } from 'pg';
import { REPO_ROOT } from '../paths';

export const MIGRATIONS_DIR = path.join(REPO_ROOT, 'src', 'db', 'migrations');
const LOCK_KEY = 0x1ea5e; // any constant shared by every leasekeeper process

export interface Migration {
  version: number;
  /** The file name without `.sql`, e.g. `001_extensions`. */
  id: string;
  name: string;
  sql: string;
  checksum: string;
}

export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  const migrations = fs
    .readdirSync(dir)
    .filter((file) => file.endsWith('.sql'))
    .map((file) => {
      const match = /^(\d+)_([\w-]+)\.sql$/.exec(file);
      if (!match) throw new Error(`migration file name must look like 001_name.sql: ${file}`);
      const sql = fs.readFileSync(path.join(dir, file), 'utf8');
      return {
        version: Number(match[1]),
        id: file.slice(0, -'.sql'.length),
        name: match[2],
        sql,
        checksum: crypto.createHash('sha256').update(sql).digest('hex'),
      };
    })
    .sort((a, b) => a.version - b.version);
  migrations.forEach((m, i) => {
    if (i > 0 && m.version === migrations[i - 1].version) throw new Error(`two migrations share version ${m.version}`);
  });
  return migrations;
}

export interface MigrationResult {
  applied: number[];
  version: number;
}

export async function migrate(pool: Pool, migrations = readMigrations()): Promise<MigrationResult> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      checksum text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ version: number; checksum: string }>('SELECT version, checksum FROM schema_migrations');
    const done = new Map(rows.map((row) => [row.version, row.checksum]));
    const known = new Set(migrations.map((m) => m.version));
    const unknown = [...done.keys()].filter((v) => !known.has(v));
    if (unknown.length > 0) {
      throw new Error(`database schema is newer than this code (unknown migrations ${unknown.join(', ')}): upgrade leasekeeper`);
    }
    const applied: number[] = [];
    for (const m of migrations) {
      const checksum = done.get(m.version);
      if (checksum !== undefined) {
        if (checksum !== m.checksum) throw new Error(`migration ${m.id} was edited after it was applied: add a new migration instead`);
        continue;
      }
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [m.version, m.name, m.checksum]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.id} failed: ${(err as Error).message}`);
      }
      applied.push(m.version);
    }
    return { applied, version: migrations.length ? migrations[migrations.length - 1].version : 0 };
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    client.release();
  }
}

export async function schemaVersion(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations');
  return rows[0]?.version ?? 0;
}
