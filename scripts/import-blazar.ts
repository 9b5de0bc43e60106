/**
 * `npm run import:blazar -- --blazar-db mysql+pymysql://…`: brings a running Blazar's hosts and
 * leases into leasekeeper (src/import/). A dry run unless `--apply`; see `--help`.
 */
import { loadConfigOrExit } from '../src/config';
import { createPool } from '../src/db/pool';
import { parseImportArguments, UsageError, USAGE } from '../src/import/arguments';
import { describeConnection, readBlazar } from '../src/import/blazar-source';
import { formatReport, importFromBlazar } from '../src/import/blazar-import';
import { connectTemporal } from '../src/temporal';

async function main(): Promise<number> {
  let args;
  try {
    args = parseImportArguments(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`import:blazar: ${err.message}\n\n${USAGE}\n`);
    return 2;
  }
  if (args === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const config = loadConfigOrExit();
  const data = await readBlazar(args.blazar);
  const pool = createPool(config, 'leasekeeper-import-blazar');
  const { connection, client } = connectTemporal(config);
  try {
    const report = await importFromBlazar(data, { pool, temporal: client, taskQueue: config.temporal.taskQueue, hosts: config.hosts }, { apply: args.apply, withHistory: args.withHistory });
    process.stdout.write(formatReport(report, describeConnection(args.blazar)));
    return report.conflicts.length > 0 || report.notImportable.length > 0 || report.hostsNotImportable.length > 0 ? 3 : 0;
  } finally {
    await connection.close();
    await pool.end();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`import:blazar: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
