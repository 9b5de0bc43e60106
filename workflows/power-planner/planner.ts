/**
 * The power planner (issue 48): one workflow per deployment (id `power-planner-<task queue>`),
 * started by the worker when LK_POWER_PLANNER=on. Each look: the wakes awaited are settled (the
 * database keeps them: once Nova reports a woken host's compute service up, its boot's duration is
 * recorded) and every host on and up whose service the planner disabled is enabled again; then the
 * plan (src/domain/power-plan.ts over HostPower.plan) says which hosts to wake, which to power off
 * (compute service disabled first, with a reason naming the next need) and whose power to read.
 * Each host's action is an activity of its own, started and not awaited by the look: wakes first,
 * in lanes of their own, then power-offs and reads in others, LK_POWER_PARALLEL at most in each, so
 * that a BMC that hangs holds only its own lane and never the next look's wakes; a host with an
 * action in flight, or for which no lane was free, is left to the next look, which then comes
 * within the boot poll. It sleeps until the plan's next look, or the API's `planNow` (a lease
 * admitted or changed), and continues as new when Temporal suggests it, once its actions are done.
 */
import { allHandlersFinished, condition, continueAsNew, log, patched, proxyActivities, setCurrentDetails, setHandler, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { POWER_PLANNER_LANES } from '../patches';
import { getPowerPlannerState, planNow, type PowerPlannerInput, type PowerPlannerTotals } from './messages';

/** Looks per run before continuing as new (a look with nothing to do adds about eight events). */
const LOOKS_PER_RUN = 500;
/** A look that could not read the plan (the database down) is tried again this soon at the latest. */
const RETRY_PLAN_MS = 60_000;
/** What no retry changes: credentials refused, settings that cannot work, a worker without the planner's dependencies. */
const FINAL = ['PowerAuthError', 'PowerConfigError', 'NoPowerPlanner'];

interface PlannerState {
  readonly input: PowerPlannerInput;
  /** Hosts woken whose compute service was not seen up yet, in the order woken. */
  booting: string[];
  totals: PowerPlannerTotals;
  /** Set by planNow. */
  wake: boolean;
  /** When the last look ended. */
  lastLookMs?: number;
  nextLookMs?: number;
  lastError?: string;
  /** Hosts with an action in flight (POWER_PLANNER_LANES), and how many run in each kind of lane. */
  busy: Set<string>;
  running: { wake: number; other: number };
}

export async function powerPlannerWorkflow(input: PowerPlannerInput): Promise<void> {
  const p: PlannerState = {
    input,
    booting: [...(input.carried?.booting ?? [])],
    totals: input.carried?.totals ?? { poweredOff: 0, poweredOn: 0, failed: 0 },
    wake: false,
    busy: new Set(),
    running: { wake: 0, other: 0 },
  };
  setHandler(planNow, () => void (p.wake = true));
  setHandler(getPowerPlannerState, () => ({ totals: p.totals, booting: p.booting, lastLookMs: p.lastLookMs, nextLookMs: p.nextLookMs }));

  for (let looks = 1; ; looks++) {
    p.wake = false;
    p.nextLookMs = patched(POWER_PLANNER_LANES.id) ? await lookInLanes(p) : await look(p);
    show(p);
    if (looks >= LOOKS_PER_RUN || workflowInfo().continueAsNewSuggested) {
      // Each action is bounded by its activity's time-out and tries.
      await condition(() => p.busy.size === 0);
      await condition(allHandlersFinished);
      return continueAsNew<typeof powerPlannerWorkflow>({ ...input, carried: { booting: p.booting, totals: p.totals } });
    }
    await condition(() => p.wake, Math.max(1, p.nextLookMs - Date.now()), { summary: 'until the next look' });
  }
}

function activitiesOf(input: PowerPlannerInput) {
  return {
    reading: proxyActivities<Activities>({ startToCloseTimeout: '1 minute', retry: { initialInterval: '1 second', maximumInterval: '10 seconds', maximumAttempts: 3, nonRetryableErrorTypes: FINAL } }),
    acting: proxyActivities<Activities>({
      startToCloseTimeout: input.actionTimeoutMs,
      retry: { initialInterval: '2 seconds', maximumInterval: '30 seconds', maximumAttempts: 2, nonRetryableErrorTypes: FINAL },
    }),
  };
}

/** A host's action in a look: woken, powered off, or its power read. */
type HostAction = 'wake' | 'power off' | 'read the power of';

/**
 * One look (POWER_PLANNER_LANES): the wakes settled and the awake hosts' services enabled, then the
 * plan, whose actions are started (wakes first, each kind in its own lanes) and not awaited.
 * Answers when to look again: within the boot poll while a wake is awaited, an action is in
 * flight or one was left for want of a lane.
 */
async function lookInLanes(p: PlannerState): Promise<number> {
  const { input } = p;
  const { reading, acting } = activitiesOf(input);
  try {
    const settled = await reading.settleHostPower({ busy: [...p.busy] });
    p.booting = settled.booting;
    for (const hostId of settled.givenUp) log.warn('a woken host is not up past its boot deadline (the host monitor fails it)', { hostId });
  } catch (err) {
    log.warn('the power planner could not look at the woken hosts', { error: (err as Error).message });
  }
  const plan = await readPlan(p, reading);
  if (typeof plan === 'number') return plan;
  const run = async (hostId: string, action: HostAction): Promise<void> => {
    try {
      if (action === 'wake') {
        if ((await acting.powerOnHost(hostId)) === 'woken') p.totals.poweredOn++;
      } else if (action === 'power off') {
        if ((await acting.powerOffHost({ hostId, offAfterIdleMs: input.settings.offAfterIdleMs })) === 'off') p.totals.poweredOff++;
      } else await acting.readHostPower(hostId);
    } catch (err) {
      p.totals.failed++;
      log.warn(`the power planner could not ${action} a host (tried again at a later look)`, { hostId, error: (err as Error).message });
    }
  };
  let left = 0;
  const start = (hostIds: readonly string[], action: HostAction, lane: keyof PlannerState['running']) => {
    for (const hostId of hostIds) {
      if (p.busy.has(hostId) || p.running[lane] >= input.parallel) {
        left++;
        continue;
      }
      p.busy.add(hostId);
      p.running[lane]++;
      void run(hostId, action).finally(() => {
        p.busy.delete(hostId);
        p.running[lane]--;
      });
    }
  };
  start(plan.powerOn, 'wake', 'wake');
  start(plan.powerOff, 'power off', 'other');
  start(plan.readState, 'read the power of', 'other');
  p.lastLookMs = Date.now();
  return p.booting.length > 0 || p.busy.size > 0 || left > 0 ? Math.min(plan.nextLookMs, Date.now() + input.bootPollMs) : plan.nextLookMs;
}

/** The look's plan; when it cannot be read (the database down), when to look again instead. */
async function readPlan(p: PlannerState, reading: Pick<Activities, 'planHostPower'>): Promise<Awaited<ReturnType<Activities['planHostPower']>> | number> {
  try {
    const plan = await reading.planHostPower(p.input.settings);
    p.lastError = undefined;
    return plan;
  } catch (err) {
    p.lastError = (err as Error).message;
    log.warn('the power planner could not read its plan', { error: p.lastError });
    p.lastLookMs = Date.now();
    return Date.now() + Math.min(p.input.settings.recheckMs, RETRY_PLAN_MS);
  }
}

/** One look of before POWER_PLANNER_LANES (kept for the histories it replays): the woken hosts, then the plan and its actions, awaited. Answers when to look again. */
async function look(p: PlannerState): Promise<number> {
  const { input } = p;
  const { reading, acting } = activitiesOf(input);
  await settleWoken(p, acting);
  const plan = await readPlan(p, reading);
  if (typeof plan === 'number') return plan;
  let failures = 0;
  const failed = (hostId: string, action: string, err: unknown) => {
    failures++;
    p.totals.failed++;
    log.warn(`the power planner could not ${action} a host (tried again at a later look)`, { hostId, error: (err as Error).message });
  };
  await inParallel(plan.powerOff, input.parallel, async (hostId) => {
    try {
      if ((await acting.powerOffHost({ hostId, offAfterIdleMs: input.settings.offAfterIdleMs })) === 'off') p.totals.poweredOff++;
    } catch (err) {
      failed(hostId, 'power off', err);
    }
  });
  await inParallel(plan.powerOn, input.parallel, async (hostId) => {
    try {
      await acting.powerOnHost(hostId);
      p.totals.poweredOn++;
      if (!p.booting.includes(hostId)) p.booting.push(hostId);
    } catch (err) {
      failed(hostId, 'power on', err);
    }
  });
  p.lastLookMs = Date.now();
  // A host booting, or a wake that failed, is looked at again soon.
  return p.booting.length > 0 || failures > 0 ? Math.min(plan.nextLookMs, Date.now() + input.bootPollMs) : plan.nextLookMs;
}

/** Looks at each woken host: up (enabled again, its boot recorded) or given up on (the host monitor fails it) leaves the list. */
async function settleWoken(p: PlannerState, acting: Pick<Activities, 'settleWokenHost'>): Promise<void> {
  const still: string[] = [];
  await inParallel([...p.booting], p.input.parallel, async (hostId) => {
    try {
      const outcome = await acting.settleWokenHost(hostId);
      if (outcome === 'booting') still.push(hostId);
      else if (outcome === 'given-up') log.warn('a woken host did not come up within its boot time and the resume time-out (the host monitor fails it)', { hostId });
    } catch (err) {
      still.push(hostId);
      log.warn('the power planner could not look at a woken host', { hostId, error: (err as Error).message });
    }
  });
  p.booting = p.booting.filter((hostId) => still.includes(hostId));
}

/** Runs `action` over `items`, at most `lanes` at once. */
async function inParallel<T>(items: readonly T[], lanes: number, action: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await action(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(lanes, items.length)) }, lane));
}

/** The Web UI's current details. */
function show(p: PlannerState): void {
  const utc = (ms: number | undefined) => (ms === undefined ? '?' : `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`);
  const { poweredOff, poweredOn, failed } = p.totals;
  setCurrentDetails(
    [
      p.lastError ? `**cannot plan** at ${utc(p.lastLookMs)}: ${p.lastError}` : `last look done at ${utc(p.lastLookMs)} · next look ${utc(p.nextLookMs)}`,
      `${poweredOff} power-off(s), ${poweredOn} wake(s), ${failed} failed action(s) · booting now: ${p.booting.length === 0 ? 'none' : p.booting.join(', ')}`,
    ].join('\n'),
  );
}
