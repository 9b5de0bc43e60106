/**
 * The power planner's activities (issue 48), thin: each runs one step of the physical-host type's
 * HostPower for one host (or reads the plan). A driver's PowerError becomes an ApplicationFailure
 * of its name, retryable as the error says (a BMC that did not answer may; refused credentials
 * will not).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { PowerPlan, PowerPlanSettings } from '../src/domain/power-plan';
import { PowerError } from '../src/power';
import type { HostPower, WakeOutcome } from '../src/resources/physical-host/power';

export function powerActivities({ hostPower }: { hostPower?: HostPower }) {
  const power = (): HostPower => {
    if (!hostPower) throw ApplicationFailure.nonRetryable('this worker has no power planner (LK_POWER_PLANNER is off)', 'NoPowerPlanner');
    return hostPower;
  };
  return {
    planHostPower: (settings: PowerPlanSettings): Promise<PowerPlan> => power().plan(Date.now(), settings),
    powerOffHost: ({ hostId, offAfterIdleMs }: { hostId: string; offAfterIdleMs: number }): Promise<'off' | 'kept'> => typed(() => power().putToSleep(hostId, Date.now(), { offAfterIdleMs })),
    powerOnHost: (hostId: string): Promise<void> => typed(() => power().wake(hostId)),
    settleWokenHost: (hostId: string): Promise<WakeOutcome> => power().settleWake(hostId, Date.now()),
  };
}

async function typed<T>(step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    if (!(err instanceof PowerError)) throw err;
    throw ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: !err.retryable, cause: err });
  }
}
