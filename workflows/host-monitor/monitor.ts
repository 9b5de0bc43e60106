/**
 * The host monitor: one workflow per deployment (id `host-monitor-<task queue>`), started by the
 * worker if absent. It looks at every enrolled host in Nova each interval, decides with the pure
 * rules of src/domain/host-health.ts which hosts failed or recovered, records that (the hosts
 * table, shown by os-hosts), and tells the leases booked on those hosts, whose workflows heal their
 * reservations through their resource types. Leases still booked on hosts they cannot count on
 * (failed; pending on a host out of admission) are told again every sweep. It continues as new at
 * rest, carrying what it knows.
 */
import { condition, continueAsNew, getExternalWorkflowHandle, log, proxyActivities, setCurrentDetails, setHandler, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { assessHosts, failedHostIds, type HostHealthMap, type HostStateChange } from '../../src/domain/host-health';
import { markdownText } from '../../src/domain/markdown';
import { hostsChanged, leaseWorkflowId } from '../lease/messages';
import { getHostHealth, lookNow, type HostMonitorInput } from './messages';

/** Looks per run before continuing as new (each adds about ten events to the history). */
const LOOKS_PER_RUN = 500;

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

export async function hostMonitorWorkflow(input: HostMonitorInput): Promise<void> {
  let health: HostHealthMap = input.carried?.health ?? {};
  let lastSweepMs = input.carried?.lastSweepMs ?? 0;
  let lastLook: { atMs: number; error?: string } | undefined;
  let wake = false;
  setHandler(getHostHealth, () => health);
  setHandler(lookNow, () => void (wake = true));

  for (let looks = 1; ; looks++) {
    wake = false;
    await look();
    if (looks >= LOOKS_PER_RUN || workflowInfo().continueAsNewSuggested) {
      return continueAsNew<typeof hostMonitorWorkflow>({ ...input, carried: { health, lastSweepMs } });
    }
    await condition(() => wake, input.intervalMs, { summary: 'until the next look' });
  }

  async function look(): Promise<void> {
    let observed;
    try {
      observed = await looking.observeHosts();
    } catch (err) {
      // Nova unreachable says nothing about the hosts: nothing changes until it answers again.
      lastLook = { atMs: Date.now(), error: (err as Error).message };
      log.warn('the host monitor could not look at the hosts', { error: lastLook.error });
      show();
      return;
    }
    const nowMs = Date.now();
    const assessed = assessHosts(health, observed, nowMs, input.graceMs);
    const recorded: HostStateChange[] = [];
    for (const change of assessed.changes) {
      try {
        await acting.recordHostState(change);
        recorded.push(change);
        log.info(change.state === 'failed' ? 'host failed' : 'host recovered', { hostId: change.hostId, host: change.host, reason: change.reason });
      } catch (err) {
        // Not recorded: the next look sees the same change again.
        log.error('could not record a host state', { hostId: change.hostId, state: change.state, error: (err as Error).message });
        if (health[change.hostId]) assessed.health[change.hostId] = health[change.hostId];
        else delete assessed.health[change.hostId];
      }
    }
    health = assessed.health;
    lastLook = { atMs: nowMs };

    const failed = recorded.filter((c) => c.state === 'failed').map((c) => c.hostId);
    const recovered = recorded.filter((c) => c.state === 'up').map((c) => c.hostId);
    for (const hostId of recovered) {
      try {
        await acting.returnRecoveredHost(hostId);
      } catch (err) {
        log.error('could not return a recovered host to the pool', { hostId, error: (err as Error).message });
      }
    }
    const untilMs = input.horizonMs === undefined ? undefined : nowMs + input.horizonMs;
    const sweep = nowMs - lastSweepMs >= input.sweepMs;
    const told = new Set<string>();
    const within = untilMs === undefined ? {} : { untilMs };
    if (failed.length) await tell(failed, () => looking.leasesOnHosts({ hostIds: failed, ...within }), told);
    if (recovered.length) await tell(recovered, () => looking.leasesOnHosts({ hostIds: recovered }), told);
    if (sweep) {
      await tell([], () => looking.leasesToHeal(within), told);
      lastSweepMs = nowMs;
    }
    show();
  }

  /** Signals every lease `find` names (each once per look) to heal. */
  async function tell(hostIds: string[], find: () => Promise<string[]>, told: Set<string>): Promise<void> {
    let leaseIds: string[];
    try {
      leaseIds = await find();
    } catch (err) {
      log.error('could not find the leases to heal', { hostIds, error: (err as Error).message });
      return;
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
  }

  /** The Web UI's current details: failed and suspect hosts, and the last look. */
  function show(): void {
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
    setCurrentDetails(rows.length ? [header, '', '| id | host | state | why |', '| --- | --- | --- | --- |', ...rows].join('\n') : header);
  }
}

function utc(ms: number | undefined): string {
  return ms === undefined ? '?' : `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}
