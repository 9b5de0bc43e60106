/**
 * Starts the deployment's power planner workflow (issue 48) if it is not running: every worker with
 * LK_POWER_PLANNER=on asks at start; the first one starts it, the others find it. Its settings are
 * those of the worker that started it; a changed setting takes effect when it is restarted
 * (terminate it: the next worker start starts it afresh; it reads the hosts' recorded power).
 */
import { WorkflowIdConflictPolicy } from '@temporalio/common';
import type { Client } from '@temporalio/client';
import type { Config } from '../src/config';
import { powerPlannerWorkflowId, powerPlannerWorkflowType, type PowerPlannerInput } from '../workflows/power-planner/messages';

/** The planner's input from the deployment's settings. */
export function powerPlannerInput(power: Config['power']): PowerPlannerInput {
  return {
    settings: { offAfterIdleMs: power.offAfterIdleMs, marginMs: power.marginMs, recheckMs: power.recheckMs, awakeReserve: power.awakeReserve },
    // A power change is the driver's call and Nova's two: the driver's bound, and Nova's.
    actionTimeoutMs: power.timeoutMs + 60_000,
    parallel: power.parallel,
    bootPollMs: power.bootPollMs,
  };
}

export async function ensurePowerPlanner(client: Client, config: Pick<Config, 'temporal' | 'power'>): Promise<string> {
  const handle = await client.workflow.start(powerPlannerWorkflowType, {
    workflowId: powerPlannerWorkflowId(config.temporal.taskQueue),
    taskQueue: config.temporal.taskQueue,
    args: [powerPlannerInput(config.power)],
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    staticSummary: 'power planner: powers idle reservable hosts off and wakes them ahead of their bookings',
  });
  return handle.workflowId;
}
