/** The command line of `npm run import:blazar`: its options, checked, with the usage text for mistakes. */
import { BlazarSourceError, parseBlazarUrl, type BlazarConnection } from './blazar-source';

export const USAGE = `usage: npm run import:blazar -- --blazar-db mysql+pymysql://user:password@host:port/blazar [--apply] [--with-history]

  --blazar-db URL   Blazar's database ([database] connection in blazar.conf; mysql://… also taken)
  --apply           make the changes (without it: a dry run that prints what it would do)
  --with-history    also import terminated and failed leases, as rows (no bookings, no workflow)

leasekeeper's own settings (DATABASE_URL, TEMPORAL_ADDRESS, LK_TASK_QUEUE, …) come from the environment, as for npm start;
OpenStack credentials (OS_CLOUD or OS_*) only to adopt the networks of active network leases (Chameleon's schema).
Exit status: 0 done (or a clean dry run), 3 some leases, hosts or network segments left out (conflicts, not importable: listed), 1 failure, 2 usage.`;

export interface ImportArguments {
  blazar: BlazarConnection;
  apply: boolean;
  withHistory: boolean;
}

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export function parseImportArguments(argv: string[]): ImportArguments | 'help' {
  let url: string | undefined;
  let apply = false;
  let withHistory = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    else if (flag === '--apply' && inline === undefined) apply = true;
    else if (flag === '--with-history' && inline === undefined) withHistory = true;
    else if (flag === '--blazar-db') {
      if (url !== undefined) throw new UsageError('--blazar-db is given twice');
      url = inline ?? argv[++i];
      if (url === undefined) throw new UsageError('--blazar-db needs a URL');
    } else throw new UsageError(`unknown argument ${JSON.stringify(arg.slice(0, 80))}`);
  }
  if (url === undefined) throw new UsageError('--blazar-db is required');
  try {
    return { blazar: parseBlazarUrl(url), apply, withHistory };
  } catch (err) {
    if (err instanceof BlazarSourceError) throw new UsageError(err.message);
    throw err;
  }
}
