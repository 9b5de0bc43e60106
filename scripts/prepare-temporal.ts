/**
 * `npm run temporal:prepare [-- --retention-days N] [--wait-seconds S]`: prepares the namespace leasekeeper uses
 * (TEMPORAL_NAMESPACE, default `default`) on the Temporal at TEMPORAL_ADDRESS (default: the dev
 * server's address): creates it if missing (retention 30 days unless given), sets the retention
 * when given, registers the lease search attributes, and waits until Temporal answers queries on
 * them. Needs operator rights on the server. Safe to run again: it says what it changed.
 * With --wait-seconds, waits that long for a server that is still starting.
 */
import { loadConfigOrExit } from '../src/config';
import { connectAnswering, prepareNamespace } from '../src/temporal';
import { waitUntil } from '../dev-stack/processes';

/** `--name N`: a whole number from `min` to `max`, or undefined when the option is absent. */
function wholeNumberOption(argv: string[], name: string, min: number, max: number, unit: string): number | undefined {
  const at = argv.indexOf(name);
  if (at === -1) return undefined;
  const value = Number(argv[at + 1]);
  if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name}: expected a whole number of ${unit}, ${min} to ${max}`);
  return value;
}

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const { address, namespace } = config.temporal;
  const argv = process.argv.slice(2);
  const days = wholeNumberOption(argv, '--retention-days', 1, 3650, 'days');
  // A server started a moment ago (docker compose) answers once its services are up.
  const waitSeconds = wholeNumberOption(argv, '--wait-seconds', 0, 600, 'seconds') ?? 0;
  const connection = await waitUntil(`Temporal at ${address}`, () => connectAnswering(address), waitSeconds * 1000, 1_000);
  try {
    const prepared = await prepareNamespace(connection, { namespace, retentionDays: days });
    for (const change of prepared.changes) console.log(`temporal:prepare: ${change}`);
    if (prepared.changes.length === 0) console.log(`temporal:prepare: namespace ${namespace} was already prepared`);
    console.log(`temporal:prepare: ${address} namespace ${namespace} ready (retention ${prepared.retentionDays} days; a lease workflow with its search attributes could start after ${prepared.readyAfterMs} ms)`);
  } finally {
    await connection.close();
  }
}

main().catch((err: unknown) => {
  console.error(`temporal:prepare: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
