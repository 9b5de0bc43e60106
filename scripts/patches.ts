/**
 * `npm run patches`: lists every workflow patch (workflows/patches.ts) with the number of running
 * workflows of its type that started before it came in, on the Temporal at TEMPORAL_ADDRESS
 * (namespace TEMPORAL_NAMESPACE). A patch whose count is 0, and whose old branch no kept history in
 * test/histories replays, can be retired (docs/development.md, "Patch policy"). Read-only.
 */
import { Client } from '@temporalio/client';
import { loadConfigOrExit } from '../src/config';
import { connectAnswering } from '../src/temporal';
import { RETIREMENT } from '../workflows/patches';
import { patchUsage } from './lib/patch-usage';

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const { address, namespace } = config.temporal;
  const connection = await connectAnswering(address);
  try {
    const usage = await patchUsage(new Client({ connection, namespace }));
    console.log(`patches: ${address} namespace ${namespace}; running workflows started before each patch's day was over:`);
    for (const { patch, running } of usage) {
      const verdict = running === 0 ? `none running: may be deprecated once no kept history needs its old branch (${patch.oldHistories})` : 'keep';
      console.log(`${patch.id.padEnd(38)} ${patch.introduced}  ${patch.workflowType.padEnd(15)} ${String(running).padStart(6)}  ${verdict}`);
    }
    console.log(`Retirement: ${RETIREMENT}.`);
  } finally {
    await connection.close();
  }
}

main().catch((err: unknown) => {
  console.error(`patches: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
