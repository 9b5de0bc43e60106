/**
 * Starts the deployment's host monitor workflow if it is not running (every worker asks at start;
 * the first one starts it, the others find it). Its settings are those of the worker that started
 * it; a changed setting takes effect when it is restarted (terminate it: the next worker start
 * starts it afresh, and it reads the hosts' recorded states).
 */
import { WorkflowIdConflictPolicy } from '@temporalio/common';
import type { Client } from '@temporalio/client';
import type { Config } from '../src/config';
import { hostMonitorWorkflowId, hostMonitorWorkflowType, type HostMonitorInput } from '../workflows/host-monitor/messages';

export async function ensureHostMonitor(client: Client, config: Pick<Config, 'temporal' | 'hostMonitor'>): Promise<string> {
  const { intervalMs, graceMs, horizonMs, sweepMs, driftMs, driftMode } = config.hostMonitor;
  const input: HostMonitorInput = { intervalMs, graceMs, sweepMs, driftMs, driftMode, ...(horizonMs === undefined ? {} : { horizonMs }) };
  const handle = await client.workflow.start(hostMonitorWorkflowType, {
    workflowId: hostMonitorWorkflowId(config.temporal.taskQueue),
    taskQueue: config.temporal.taskQueue,
    args: [input],
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    staticSummary: 'host monitor: watches enrolled hosts in Nova and heals the leases on failed ones',
  });
  return handle.workflowId;
}
