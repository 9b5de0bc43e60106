/**
 * `npm run import:blazar -- --blazar-db mysql+pymysql://…`: brings a running Blazar's hosts and
 * leases into leasekeeper (src/import/). A dry run unless `--apply`; see `--help`.
 */
import { loadConfigOrExit } from '../src/config';
import { createPool } from '../src/db/pool';
import { parseImportArguments, UsageError, USAGE } from '../src/import/arguments';
import { describeConnection, readBlazar } from '../src/import/blazar-source';
import { formatReport, importFromBlazar } from '../src/import/blazar-import';
import { OpenStackConfigError, openStackClients } from '../src/openstack';
import { adoptBlazarNetwork } from '../src/resources/network-segment/adopt';
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
    const deps = { pool, temporal: client, taskQueue: config.temporal.taskQueue, hosts: config.hosts, adoptNetwork: data.networks ? networkAdopter() : undefined };
    const report = await importFromBlazar(data, deps, { apply: args.apply, withHistory: args.withHistory });
    process.stdout.write(formatReport(report, describeConnection(args.blazar)));
    const leftOut = report.conflicts.length + report.notImportable.length + report.hostsNotImportable.length + report.segmentsNotImportable.length;
    return leftOut > 0 ? 3 : 0;
  } finally {
    await connection.close();
    await pool.end();
  }
}

/**
 * Neutron with the OpenStack credentials of the environment (OS_CLOUD or OS_*), to adopt active
 * network leases' networks (Chameleon's); none configured: undefined, and those leases are left out saying why.
 */
function networkAdopter(): ((reservationId: string, networkId: string) => Promise<boolean>) | undefined {
  try {
    const { neutron } = openStackClients({});
    return (reservationId, networkId) => adoptBlazarNetwork(neutron, reservationId, networkId);
  } catch (err) {
    if (err instanceof OpenStackConfigError) return undefined;
    throw err;
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`import:blazar: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
