/**
 * One maintenance window of one host (id `maintenance-<window id>`), started by the API when the
 * window is booked. It sleeps until the start; then, when the window asks, disables the host's
 * compute service in Nova (the host monitor knows not to count that as a failure), and tells the
 * leases booked on the host, which heal as for a failed host; it sleeps until the end (or until
 * the window is withdrawn), enables the service again, puts the host back in the pool if a heal
 * set it aside, and tells the leases again so that their flags clear. A window withdrawn before
 * its start only tells the leases. The calendar side (admission avoiding the window, pending leases
 * moved when it is booked) needs no workflow: the window's row does it.
 */
import { condition, getExternalWorkflowHandle, log, proxyActivities, setHandler } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { MaintenanceBegun } from '../../src/domain/resource-plugin';
import { hostsChanged, leaseWorkflowId } from '../lease/messages';
import { windowWithdrawn, type MaintenanceWindowInput } from './messages';

/** Switching the compute service and reading the calendar: retried for a day (a host left disabled is a host lost). */
const acting = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  scheduleToCloseTimeout: '1 day',
  retry: { initialInterval: '1 second', maximumInterval: '5 minutes', nonRetryableErrorTypes: ['NoHostWatch'] },
});

export async function maintenanceWindowWorkflow(input: MaintenanceWindowInput): Promise<void> {
  let withdrawn = false;
  setHandler(windowWithdrawn, () => void (withdrawn = true));

  let begun: MaintenanceBegun | undefined;
  if (input.startMs > Date.now()) await condition(() => withdrawn, input.startMs - Date.now(), { summary: 'until the window starts' });
  if (!withdrawn) {
    begun = await acting.beginMaintenance(input.windowId);
    await tell(begun.leaseIds, input.hostId);
    // A window cut short is signalled; one that ran its course ends on its own timer.
    if (begun.begun && begun.endMs > Date.now()) await condition(() => withdrawn, begun.endMs - Date.now(), { summary: 'until the window ends' });
  }
  const ended = await acting.endMaintenance({ windowId: input.windowId, hostId: input.hostId, ...(begun?.computeHost ? { computeHost: begun.computeHost } : {}) });
  await tell(ended.leaseIds, input.hostId);
}

async function tell(leaseIds: string[], hostId: string): Promise<void> {
  for (const leaseId of leaseIds) {
    try {
      await getExternalWorkflowHandle(leaseWorkflowId(leaseId)).signal(hostsChanged, { hostIds: [hostId] });
    } catch (err) {
      log.debug('a lease on a host in maintenance could not be told', { leaseId, error: (err as Error).message });
    }
  }
}
