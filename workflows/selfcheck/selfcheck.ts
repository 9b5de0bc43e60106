import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { SelfCheckResult } from './messages';

const { checkDatabase } = proxyActivities<Activities>({
  startToCloseTimeout: '10 seconds',
  retry: { maximumAttempts: 3 },
});

/** A round trip through server, worker, activity and database: the deep health check. */
export async function selfCheckWorkflow(): Promise<SelfCheckResult> {
  const { schemaVersion } = await checkDatabase();
  return { schemaVersion, taskQueue: workflowInfo().taskQueue };
}
