/**
 * Tells the power planner (issue 48) to look now: after the API admitted a lease (its workflow
 * started) or changed one, a host asleep may be needed sooner than the planner's next look. One
 * small signal, sent beside the answer and never waited for; while one is in flight, further ones
 * are folded into one more. A planner that is down or absent costs a line in the log, never the
 * request: it looks at least every LK_POWER_RECHECK_SECONDS anyway.
 */
import type { Client } from '@temporalio/client';
import type { Logger } from '../log';
import { planNow, powerPlannerWorkflowId } from '../../workflows/power-planner/messages';

/** How long a signal may take before it is given up (the next look comes anyway). */
const SIGNAL_DEADLINE_MS = 2_000;

export class PowerPlannerNudge {
  private inFlight = false;
  private again = false;

  constructor(private readonly deps: { client: Client; taskQueue: string; log: Logger }) {}

  nudge(): void {
    if (this.inFlight) {
      this.again = true;
      return;
    }
    this.inFlight = true;
    const { client, taskQueue, log } = this.deps;
    client.connection
      .withDeadline(Date.now() + SIGNAL_DEADLINE_MS, () => client.workflow.getHandle(powerPlannerWorkflowId(taskQueue)).signal(planNow))
      .catch((err: unknown) => log.debug({ err: (err as Error).message }, 'could not tell the power planner to look now (it looks at its next look)'))
      .finally(() => {
        this.inFlight = false;
        if (this.again) {
          this.again = false;
          this.nudge();
        }
      });
  }
}
