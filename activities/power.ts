/**
 * The power planner's activities (issue 48), thin: each runs one step of the physical-host type's
 * HostPower for one host (or reads the plan, or settles the wakes). A driver's PowerError becomes an
 * ApplicationFailure of its name, retryable as the error says (a BMC that did not answer may;
 * refused credentials will not).
 */
import { ApplicationFailure } from '@temporalio/common';
import { log } from '@temporalio/activity';
import type { PowerPlanSettings } from '../src/domain/power-plan';
import type { PowerState } from '../src/domain/host-power';
import { PowerError } from '../src/power';
import type { HostPower, HostPowerPlan, WakeOutcome, WakeResult, WakesSettled } from '../src/resources/physical-host/power';

export function powerActivities({ hostPower }: { hostPower?: HostPower }) {
  const power = (): HostPower => {
    if (!hostPower) throw ApplicationFailure.nonRetryable('this worker has no power planner (LK_POWER_PLANNER is off)', 'NoPowerPlanner');
    return hostPower;
  };
  return {
    planHostPower: (settings: PowerPlanSettings): Promise<HostPowerPlan> => power().plan(Date.now(), settings),
    powerOffHost: async ({ hostId, offAfterIdleMs }: { hostId: string; offAfterIdleMs: number }): Promise<'off' | 'kept'> => {
      const outcome = await typed(() => power().putToSleep(hostId, Date.now(), { offAfterIdleMs }));
      if (outcome.state === 'kept') log.info('a host planned for a power-off is kept on', { hostId, reason: outcome.reason });
      return outcome.state;
    },
    powerOnHost: (hostId: string): Promise<WakeResult> => typed(() => power().wake(hostId)),
    readHostPower: (hostId: string): Promise<PowerState> => typed(() => power().readState(hostId)),
    /** The wakes awaited and the awake hosts' compute services (hosts in `busy` have an action in flight). */
    settleHostPower: ({ busy }: { busy: string[] }): Promise<WakesSettled> => power().settleWakes(Date.now(), busy),
    /** One woken host (the planner's look of before 2026-11-28, for its replays). */
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
