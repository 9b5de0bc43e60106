/**
 * Part of `npm run setup`: creates the project-local PostgreSQL cluster and database (unless
 * DATABASE_URL names another server) and brings the schema to the latest migration.
 */
import path from 'node:path';
import { loadConfigOrExit } from '../src/config';
import { migrate } from '../src/db/migrate';
import { createPool } from '../src/db/pool';
import { ensureCluster, ensureDatabase, startPostgres } from '../dev-stack/postgres-local';
import type { ManagedProcess } from '../dev-stack/processes';

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  let server: ManagedProcess | undefined;
  if (!config.database.external) {
    const dataDir = path.join(config.dataDir, 'postgres');
    ensureCluster(dataDir);
    server = startPostgres({ dataDir, port: config.database.localPort, durable: true, pidDir: path.join(config.dataDir, 'run') });
  }
  try {
    await ensureDatabase(config.database.url);
    const pool = createPool(config, 'leasekeeper-setup');
    try {
      const { applied, version } = await migrate(pool);
      console.log(`database: schema version ${version}${applied.length ? ` (applied ${applied.join(', ')})` : ' (up to date)'}`);
    } finally {
      await pool.end();
    }
  } finally {
    await server?.stop();
  }
}

main().catch((err: unknown) => {
  console.error(`setup: database: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
