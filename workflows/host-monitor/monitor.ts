/**
 * The host monitor: one workflow per deployment (id `host-monitor-<task queue>`), started by the
 * worker if absent. It looks at every enrolled host in Nova each interval, decides with the pure
 * rules of src/domain/host-health.ts which hosts failed or recovered, records that (the hosts
 * table, shown by os-hosts), posts `host.failed` / `host.recovered` to the deployment's webhook,
 * and tells the leases booked on those hosts, whose workflows heal their
 * reservations through their resource types. Leases still booked on hosts they cannot count on
 * (failed; pending on a host out of admission) are told again every sweep. Every drift check it
 * puts hosts back in the aggregates the calendar says (src/resources/physical-host/drift.ts). It
 * continues as new at rest, carrying what it knows.
 */
import { condition, continueAsNew, getExternalWorkflowHandle, log, proxyActivities, setCurrentDetails, setHandler, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { assessHosts, failedHostIds, type HostHealthMap, type HostStateChange } from '../../src/domain/host-health';
import { markdownText } from '../../src/domain/markdown';
import { hostsChanged, leaseWorkflowId } from '../lease/messages';
import { getHostHealth, lookNow, type DriftState, type HostMonitorInput } from './messages';

/** Looks per run before continuing as new (each adds about ten events to the history). */
const LOOKS_PER_RUN = 500;

/** Host notices to the deployment's webhook: retried for an hour (a 4xx is final). */
const noticing = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  scheduleToCloseTimeout: '1 hour',
  retry: { initialInterval: '5 seconds', maximumInterval: '5 minutes', nonRetryableErrorTypes: ['NoticeRefused', 'NoHostWatch'] },
});
/** Looking and asking: a few quick tries; the next look tries again anyway. */
const looking = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumInterval: '10 seconds', maximumAttempts: 3, nonRetryableErrorTypes: ['NoHostWatch'] },
});
/** Recording and putting hosts back: longer, since a change not recorded is looked at again. */
const acting = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  scheduleToCloseTimeout: '10 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/** What the monitor knows, shared by its steps (and carried when it continues as new). */
interface MonitorState {
  readonly input: HostMonitorInput;
  health: HostHealthMap;
  lastSweepMs: number;
  drift: DriftState;
  lastLook?: { atMs: number; error?: string };
  /** Set by lookNow: look now instead of at the next interval. */
  wake: boolean;
}

export async function hostMonitorWorkflow(input: HostMonitorInput): Promise<void> {
  const m: MonitorState = {
    input,
    health: input.carried?.health ?? {},
    lastSweepMs: input.carried?.lastSweepMs ?? 0,
    drift: input.carried?.drift ?? { lastCheckMs: 0, seen: {}, repaired: 0, reported: 0, aggregatesRemoved: 0 },
    wake: false,
  };
  setHandler(getHostHealth, () => m.health);
  setHandler(lookNow, () => void (m.wake = true));

  for (let looks = 1; ; looks++) {
    m.wake = false;
    await look(m);
    if (looks >= LOOKS_PER_RUN || workflowInfo().continueAsNewSuggested) {
      return continueAsNew<typeof hostMonitorWorkflow>({ ...input, carried: { health: m.health, lastSweepMs: m.lastSweepMs, drift: m.drift } });
    }
    await condition(() => m.wake, input.intervalMs, { summary: 'until the next look' });
  }
}

async function look(m: MonitorState): Promise<void> {
  let observed;
  try {
    observed = await looking.observeHosts();
  } catch (err) {
    // Nova unreachable says nothing about the hosts: nothing changes until it answers again.
    m.lastLook = { atMs: Date.now(), error: (err as Error).message };
    log.warn('the host monitor could not look at the hosts', { error: m.lastLook.error });
    show(m);
    return;
  }
  const nowMs = Date.now();
  const recorded = await recordChanges(m, assessHosts(m.health, observed, nowMs, m.input.graceMs));
  m.lastLook = { atMs: nowMs };

  for (const change of recorded.filter((c) => c.state === 'up')) {
    try {
      await acting.returnRecoveredHost(change.hostId);
    } catch (err) {
      log.error('could not return a recovered host to the pool', { hostId: change.hostId, error: (err as Error).message });
    }
  }
  const untilMs = m.input.horizonMs === undefined ? undefined : nowMs + m.input.horizonMs;
  const within = untilMs === undefined ? {} : { untilMs };
  const told = new Set<string>();
  for (const change of recorded) {
    const hostIds = [change.hostId];
    // A recovered host's leases are all told (their flags clear); a failed one's within the healing horizon.
    const leaseIds = await tell(hostIds, () => looking.leasesOnHosts({ hostIds, ...(change.state === 'failed' ? within : {}) }), told);
    // The webhook never holds the monitor up: sent beside it, retried for an hour, then dropped.
    noticing.notifyHostChange({ change, leaseIds }).catch((err: unknown) => log.warn('a host notice was not delivered', { hostId: change.hostId, error: (err as Error).message }));
  }
  const sweep = nowMs - m.lastSweepMs >= m.input.sweepMs;
  if (sweep) {
    await tell([], () => looking.leasesToHeal(within), told);
    m.lastSweepMs = nowMs;
  }
  if (nowMs - m.drift.lastCheckMs >= m.input.driftMs) await checkDrift(m, nowMs);
  show(m);
}

/** Records each change the look found; one not recorded is left out of the health (the next look sees it again). Answers those recorded. */
async function recordChanges(m: MonitorState, assessed: ReturnType<typeof assessHosts>): Promise<HostStateChange[]> {
  const recorded: HostStateChange[] = [];
  for (const change of assessed.changes) {
    try {
      await acting.recordHostState(change);
      recorded.push(change);
      log.info(change.state === 'failed' ? 'host failed' : 'host recovered', { hostId: change.hostId, host: change.host, reason: change.reason });
    } catch (err) {
      // Not recorded: the next look sees the same change again.
      log.error('could not record a host state', { hostId: change.hostId, state: change.state, error: (err as Error).message });
      if (m.health[change.hostId]) assessed.health[change.hostId] = m.health[change.hostId];
      else delete assessed.health[change.hostId];
    }
  }
  m.health = assessed.health;
  return recorded;
}

/** Hosts out of the aggregate the calendar says: repaired (or reported) when the previous check saw the same. */
async function checkDrift(m: MonitorState, nowMs: number): Promise<void> {
  m.drift = { ...m.drift, lastCheckMs: nowMs };
  try {
    const check = await acting.checkDrift({ previous: m.drift.seen, mode: m.input.driftMode });
    for (const line of check.repaired) log.warn('drift repaired', { drift: line });
    for (const line of check.reported) log.warn('drift found (LK_DRIFT_REPAIR=report: left as it is)', { drift: line });
    for (const name of check.aggregatesRemoved) log.info('removed the aggregate of an ended lease', { aggregate: name });
    // A repair a lease makes itself, under its lock (a network reservation's lost network): told as a sweep tells.
    const toHeal = check.leasesToHeal ?? [];
    if (toHeal.length > 0) await tell([], () => Promise.resolve(toHeal), new Set());
    m.drift = {
      lastCheckMs: nowMs,
      seen: check.seen,
      repaired: m.drift.repaired + check.repaired.length,
      reported: m.drift.reported + check.reported.length,
      aggregatesRemoved: m.drift.aggregatesRemoved + check.aggregatesRemoved.length,
    };
  } catch (err) {
    log.error('the drift check failed', { error: (err as Error).message });
  }
}

/** Signals every lease `find` names (each once per look) to heal; answers the leases found. */
async function tell(hostIds: string[], find: () => Promise<string[]>, told: Set<string>): Promise<string[]> {
  let leaseIds: string[];
  try {
    leaseIds = await find();
  } catch (err) {
    log.error('could not find the leases to heal', { hostIds, error: (err as Error).message });
    return [];
  }
  for (const leaseId of leaseIds.filter((id) => !told.has(id))) {
    told.add(leaseId);
    try {
      await getExternalWorkflowHandle(leaseWorkflowId(leaseId)).signal(hostsChanged, { hostIds });
    } catch (err) {
      // A lease whose workflow is gone (deleted meanwhile) has nothing to heal.
      log.debug('a lease booked on a changed host could not be told', { leaseId, error: (err as Error).message });
    }
  }
  return leaseIds;
}

/** The Web UI's current details: failed and suspect hosts, and the last look. */
function show(m: MonitorState): void {
  const { health, drift, lastLook } = m;
  const rows = Object.entries(health)
    .filter(([, h]) => h.state === 'failed' || h.suspectSinceMs !== undefined)
    .map(([id, h]) =>
      h.state === 'failed'
        ? `| ${id} | ${markdownText(h.host)} | failed since ${utc(h.sinceMs)} | ${markdownText(h.reason ?? '')} |`
        : `| ${id} | ${markdownText(h.host)} | suspect since ${utc(h.suspectSinceMs)} | ${markdownText(h.suspectReason ?? '')} |`,
    );
  const hosts = Object.keys(health).length;
  const header = lastLook?.error
    ? `**cannot look** at ${utc(lastLook.atMs)}: ${markdownText(lastLook.error)}`
    : `**${hosts - failedHostIds(health).length} of ${hosts} host(s) up** · looked at ${lastLook ? utc(lastLook.atMs) : 'never'}`;
  const driftLine = `drift: ${drift.repaired} host move(s) repaired, ${drift.reported} reported, ${drift.aggregatesRemoved} stale aggregate(s) removed · ${Object.keys(drift.seen).length} host(s) out of place at the last check (${utc(drift.lastCheckMs || undefined)})`;
  setCurrentDetails([header, driftLine, ...(rows.length ? ['', '| id | host | state | why |', '| --- | --- | --- | --- |', ...rows] : [])].join('\n'));
}

function utc(ms: number | undefined): string {
  return ms === undefined ? '?' : `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}
