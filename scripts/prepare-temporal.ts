/**
 * `npm run temporal:prepare [-- --retention-days N]`: prepares the namespace leasekeeper uses
 * (TEMPORAL_NAMESPACE, default `default`) on the Temporal at TEMPORAL_ADDRESS (default: the dev
 * server's address): creates it if missing (retention 30 days unless given), sets the retention
 * when given, registers the lease search attributes, and waits until Temporal answers queries on
 * them. Needs operator rights on the server. Safe to run again: it says what it changed.
 */
import { Connection } from '@temporalio/client';
import { loadConfigOrExit } from '../src/config';
import { prepareNamespace } from '../src/temporal';

function retentionDays(argv: string[]): number | undefined {
  const at = argv.indexOf('--retention-days');
  if (at === -1) return undefined;
  const value = Number(argv[at + 1]);
  if (!Number.isInteger(value) || value < 1 || value > 3650) throw new Error('--retention-days: expected a whole number of days, 1 to 3650');
  return value;
}

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const { address, namespace } = config.temporal;
  const days = retentionDays(process.argv.slice(2));
  const connection = await Connection.connect({ address, connectTimeout: 10_000 });
  try {
    const prepared = await prepareNamespace(connection, { namespace, retentionDays: days });
    for (const change of prepared.changes) console.log(`temporal:prepare: ${change}`);
    if (prepared.changes.length === 0) console.log(`temporal:prepare: namespace ${namespace} was already prepared`);
    console.log(`temporal:prepare: ${address} namespace ${namespace} ready (retention ${prepared.retentionDays} days; lease search attributes answer queries after ${prepared.readyAfterMs} ms)`);
  } finally {
    await connection.close();
  }
}

main().catch((err: unknown) => {
  console.error(`temporal:prepare: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
