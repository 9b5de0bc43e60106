/** What the worker and the API know of the power planner (issue 48): its input, id, type name and signal. */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { PowerPlanSettings } from '../../src/domain/power-plan';

export interface PowerPlannerInput {
  /** The planner's rules' settings (LK_POWER_OFF_AFTER_IDLE, LK_POWER_WAKE_MARGIN_SECONDS, LK_POWER_RECHECK_SECONDS). */
  settings: PowerPlanSettings;
  /** Each host's action (a power change with its Nova step, or a look at a woken host) is given up after this long (its driver's bound and Nova's calls). */
  actionTimeoutMs: number;
  /** At most this many hosts' actions run at once. */
  parallel: number;
  /** While a woken host's compute service is not up yet, the planner looks at it this often. */
  bootPollMs: number;
  /** Set when it continues as new: the hosts woken whose compute service was not seen up yet, and the counts so far. */
  carried?: { booting: string[]; totals: PowerPlannerTotals };
}

export interface PowerPlannerTotals {
  poweredOff: number;
  poweredOn: number;
  /** Actions that failed (each is tried again at a later look). */
  failed: number;
}

export const powerPlannerWorkflowType = 'powerPlannerWorkflow';
/** One planner per deployment (namespace and task queue). */
export const powerPlannerWorkflowId = (taskQueue: string) => `power-planner-${taskQueue}`;

/** Look now instead of at the plan's next look (the API sends it after an admission or a change of a lease). */
export const planNow = defineSignal('planNow');
/** What the planner has done so far and the hosts it waits on. */
export const getPowerPlannerState = defineQuery<{ totals: PowerPlannerTotals; booting: string[]; lastLookMs?: number; nextLookMs?: number }>('getPowerPlannerState');
