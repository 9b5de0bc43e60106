/**
 * Starts the deployment's host monitor workflow if it is not running (every worker asks at start;
 * the first one starts it, the others find it). Its settings are those of the worker that started
 * it; a changed setting takes effect when it is restarted (terminate it: the next worker start
 * starts it afresh, and it reads the hosts' recorded states). With LK_NOVA_NOTIFICATIONS_URL, wakes it
 * when Nova notifies a compute service's change.
 */
import { WorkflowIdConflictPolicy } from '@temporalio/common';
import type { Client } from '@temporalio/client';
import type { Config } from '../src/config';
import type { HostHealthMap } from '../src/domain/host-health';
import type { Logger } from '../src/log';
import type { ComputeServiceNotice } from '../src/openstack/nova-notifications';
import { consumeNovaNotifications, type NovaNotificationsConsumer } from '../src/openstack/nova-notifications-consumer';
import { getHostHealth, hostMonitorWorkflowId, hostMonitorWorkflowType, lookNow, type HostMonitorInput } from '../workflows/host-monitor/messages';

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

/** Notices within this long of a signal wait for its end: one signal per burst (a host change brings a few notices, every worker hears them). */
export const WAKE_THROTTLE_MS = 200;
/** A look this long after the grace, so that the monitor's clock has passed it too. */
const AFTER_GRACE_MS = 500;
/** How many times a host still held suspect after its grace is looked at again, a second apart. */
const AFTER_GRACE_ROUNDS = 5;

export interface HostMonitorWakerOptions {
  /** Signals the monitor to look now. */
  signal: () => Promise<void>;
  /** The monitor's view of the hosts (its getHostHealth query). */
  health: () => Promise<HostHealthMap>;
  graceMs: number;
  log: Logger;
}

/**
 * Turns Nova's compute service notices into looks of the host monitor. Each notice wakes it at once
 * (throttled: at most one signal per WAKE_THROTTLE_MS). A problem (disabled, forced down,
 * deleted) only makes a host suspect at that look: the monitor counts the grace period from it and
 * looks again only at its next interval, so the waker looks once more when the grace has passed,
 * and again while the monitor still holds the host suspect. The monitor workflow itself is left as
 * it is (its replay histories hold it).
 */
export class HostMonitorWaker {
  private lastSignalAt = -Infinity;
  private trailing: NodeJS.Timeout | undefined;
  private readonly afterGrace = new Map<string, NodeJS.Timeout>();
  private stopped = false;

  constructor(private readonly options: HostMonitorWakerOptions) {}

  notice(notice: ComputeServiceNotice): void {
    if (this.stopped) return;
    this.wake();
    clearTimeout(this.afterGrace.get(notice.host));
    this.afterGrace.delete(notice.host);
    if (notice.problem) this.lookAfterGrace(notice.host, this.options.graceMs + AFTER_GRACE_MS, AFTER_GRACE_ROUNDS);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.trailing);
    for (const timer of this.afterGrace.values()) clearTimeout(timer);
    this.afterGrace.clear();
  }

  private wake(): void {
    if (this.stopped || this.trailing) return;
    const waitMs = this.lastSignalAt + WAKE_THROTTLE_MS - Date.now();
    if (waitMs <= 0) return this.send();
    this.trailing = setTimeout(() => {
      this.trailing = undefined;
      this.send();
    }, waitMs);
  }

  private send(): void {
    this.lastSignalAt = Date.now();
    this.options.signal().catch((err: unknown) => this.options.log.warn({ err: (err as Error).message }, 'could not wake the host monitor (it looks at its next interval)'));
  }

  private lookAfterGrace(host: string, delayMs: number, roundsLeft: number): void {
    this.afterGrace.set(
      host,
      setTimeout(() => {
        this.afterGrace.delete(host);
        void this.stillSuspect(host).then((dueInMs) => {
          if (this.stopped || dueInMs === undefined || roundsLeft <= 0) return;
          // Suspect since a later look than the notice: its grace ends later.
          if (dueInMs > 0) return this.lookAfterGrace(host, dueInMs + AFTER_GRACE_MS, roundsLeft - 1);
          this.wake();
          this.lookAfterGrace(host, 1_000, roundsLeft - 1);
        });
      }, delayMs),
    );
  }

  /** How long until the monitor's grace for `host` ends (≤ 0: over), or undefined when it does not hold the host suspect; a monitor that does not answer gets one look. */
  private async stillSuspect(host: string): Promise<number | undefined> {
    try {
      const seen = Object.values(await this.options.health()).find((h) => h.host === host);
      if (seen?.state !== 'up' || seen.suspectSinceMs === undefined) return undefined;
      return seen.suspectSinceMs + this.options.graceMs - Date.now();
    } catch {
      this.wake();
      return undefined;
    }
  }
}

/**
 * With LK_NOVA_NOTIFICATIONS_URL: consumes Nova's notifications and wakes the deployment's host
 * monitor on each compute service change (every worker does; the throttle keeps it to a signal
 * per burst and worker). Polling goes on beside it.
 */
export function wakeHostMonitorOnNovaNotifications(
  client: Client,
  config: Pick<Config, 'temporal' | 'hostMonitor'>,
  url: string,
  log: Logger,
  options: { onConsuming?: () => void } = {},
): { consumer: NovaNotificationsConsumer; stop(): Promise<void> } {
  const monitor = client.workflow.getHandle(hostMonitorWorkflowId(config.temporal.taskQueue));
  const waker = new HostMonitorWaker({ signal: () => monitor.signal(lookNow), health: () => monitor.query(getHostHealth), graceMs: config.hostMonitor.graceMs, log });
  const consumer = consumeNovaNotifications({
    url,
    consumer: `host-monitor-${config.temporal.taskQueue}`,
    log,
    onNotice: (notice) => {
      log.debug({ notice }, 'nova notification: waking the host monitor');
      waker.notice(notice);
    },
    ...options,
  });
  return {
    consumer,
    async stop() {
      waker.stop();
      await consumer.stop();
    },
  };
}
