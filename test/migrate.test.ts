import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { migrate, readMigrations, schemaVersion } from '../src/db/migrate';
import { createTestDatabase, type TestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

describe('migrations on a real PostgreSQL', () => {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    await db.drop();
  });

  it('brings a fresh database to the latest schema, then does nothing on a re-run', async () => {
    const migrations = readMigrations();
    const latest = migrations[migrations.length - 1].version;

    const first = await migrate(db.pool);
    expect(first.applied).toEqual(migrations.map((m) => m.version));
    expect(first.version).toBe(latest);
    expect(await schemaVersion(db.pool)).toBe(latest);

    const again = await migrate(db.pool);
    expect(again).toEqual({ applied: [], version: latest });
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM schema_migrations');
    expect(rows[0].n).toBe(migrations.length);
  });

  it('enables btree_gist, so exclusion constraints can mix = and &&', async () => {
    await migrate(db.pool);
    const { rows } = await db.pool.query("SELECT extname FROM pg_extension WHERE extname = 'btree_gist'");
    expect(rows).toHaveLength(1);
    await db.pool.query(`CREATE TEMP TABLE probe (host_id int, during tstzrange, EXCLUDE USING gist (host_id WITH =, during WITH &&))`);
  });

  it('keeps the wakes of before migration 043 still within their boot as awaited, with the deadline they had', async () => {
    await migrate(db.pool, readMigrations().filter((m) => m.version < 43));
    const hostIds: Record<string, string> = {};
    for (const name of ['booting', 'own-boot-time', 'booted-long-ago', 'off-again']) hostIds[name] = await insertHost(db.pool, { name });
    // Woken by the code of before 043 (woken_at only): a minute ago, one with its own boot time of 30 s; an hour ago; and a minute ago but off since.
    await db.pool.query(
      `INSERT INTO host_power (host_id, driver, power_state, power_state_at, powered_off_since, woken_at, boot_seconds) VALUES
         ($1, 'command', 'on', now() - interval '1 minute', NULL, now() - interval '1 minute', NULL),
         ($2, 'command', 'on', now() - interval '1 minute', NULL, now() - interval '1 minute', 30),
         ($3, 'command', 'on', now() - interval '1 hour', NULL, now() - interval '1 hour', NULL),
         ($4, 'command', 'off', now(), now(), now() - interval '1 minute', NULL)`,
      [hostIds.booting, hostIds['own-boot-time'], hostIds['booted-long-ago'], hostIds['off-again']],
    );
    await migrate(db.pool);
    const { rows } = await db.pool.query<{ host_id: string; after_wake_s: number | null; deadline_after_wake_s: number | null }>(
      `SELECT host_id::text, extract(epoch FROM wake_requested_at - woken_at)::float8 AS after_wake_s, extract(epoch FROM boot_deadline_at - woken_at)::float8 AS deadline_after_wake_s FROM host_power`,
    );
    const wakeOf = (name: string) => rows.find((row) => row.host_id === hostIds[name]);
    expect(wakeOf('booting')).toMatchObject({ after_wake_s: 0, deadline_after_wake_s: 1_200 });
    expect(wakeOf('own-boot-time')).toMatchObject({ after_wake_s: 0, deadline_after_wake_s: 630 });
    expect(wakeOf('booted-long-ago')).toMatchObject({ after_wake_s: null, deadline_after_wake_s: null });
    expect(wakeOf('off-again')).toMatchObject({ after_wake_s: null, deadline_after_wake_s: null });
  });

  it('is safe when several processes start at once', async () => {
    const results = await Promise.all([migrate(db.pool), migrate(db.pool), migrate(db.pool)]);
    const applied = results.flatMap((r) => r.applied);
    expect(applied).toEqual(readMigrations().map((m) => m.version)); // each applied exactly once
  });

  describe('with migrations of our own', () => {
    let dir: string;
    beforeEach(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-migrations-'));
      fs.writeFileSync(path.join(dir, '001_first.sql'), 'CREATE TABLE widgets (id int PRIMARY KEY);');
      fs.writeFileSync(path.join(dir, '002_second.sql'), 'ALTER TABLE widgets ADD COLUMN name text;');
    });
    afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

    it('refuses a migration edited after it was applied', async () => {
      await migrate(db.pool, readMigrations(dir));
      fs.writeFileSync(path.join(dir, '002_second.sql'), 'ALTER TABLE widgets ADD COLUMN label text;');
      await expect(migrate(db.pool, readMigrations(dir))).rejects.toThrow('002_second was edited after it was applied');
    });

    it('rolls back a failing migration and keeps the earlier ones', async () => {
      fs.writeFileSync(path.join(dir, '003_broken.sql'), 'ALTER TABLE widgets ADD COLUMN ok int; SELECT no_such_function();');
      await expect(migrate(db.pool, readMigrations(dir))).rejects.toThrow(/003_broken failed/);
      expect(await schemaVersion(db.pool)).toBe(2);
      const { rows } = await db.pool.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'widgets' ORDER BY column_name");
      expect(rows.map((r) => r.column_name)).toEqual(['id', 'name']);
    });

    it('refuses to run against a schema newer than the code', async () => {
      await migrate(db.pool, readMigrations(dir));
      fs.rmSync(path.join(dir, '002_second.sql'));
      await expect(migrate(db.pool, readMigrations(dir))).rejects.toThrow('database schema is newer than this code');
    });
  });
});
