/**
 * The host monitor's activities, thin: each asks the host watch of the resource type that enrols
 * compute hosts (physical:host) to look at Nova, record a host's state, put a recovered host back,
 * name the leases booked on hosts, or check that hosts (and each resource type's reservations) are
 * where the calendar says.
 */
import { log } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { HostObservation, HostStateChange } from '../src/domain/host-health';
import type { DriftCheck, HostWatch, MaintenanceBegun, ResourcePlugins } from '../src/domain/resource-plugin';
import type { NoticeService } from '../src/notifications/service';

export function hostActivities({ hostWatch, plugins, notices }: { hostWatch?: HostWatch; plugins: ResourcePlugins; notices?: NoticeService }) {
  const watch = (): HostWatch => {
    if (!hostWatch) throw ApplicationFailure.nonRetryable('this worker watches no hosts (it has no OpenStack)', 'NoHostWatch');
    return hostWatch;
  };
  return {
    observeHosts: (): Promise<HostObservation[]> => watch().observe(),
    recordHostState: (change: HostStateChange): Promise<void> => watch().record(change),
    returnRecoveredHost: (hostId: string): Promise<void> => watch().recovered(hostId),
    /** Announced to the deployment's listeners; delivered (and retried) by the notice's own workflow. */
    notifyHostChange: async ({ change, leaseIds }: { change: HostStateChange; leaseIds: string[] }): Promise<void> => void (await notices?.announce(watch().noticeOf(change, leaseIds))),
    leasesOnHosts: ({ hostIds, untilMs }: { hostIds: string[]; untilMs?: number }): Promise<string[]> => watch().leasesHolding(hostIds, untilMs),
    leasesToHeal: ({ untilMs }: { untilMs?: number }): Promise<string[]> => watch().leasesToHeal(untilMs),
    beginMaintenance: (windowId: string): Promise<MaintenanceBegun> => watch().beginMaintenance(windowId),
    endMaintenance: (end: { windowId: string; hostId: string; computeHost?: string }): Promise<{ leaseIds: string[] }> => watch().endMaintenance(end),
    /** The hosts' aggregates, then what each resource type checks of its own (instance slots: aggregates and Placement inventory). */
    async checkDrift({ previous, mode }: { previous: Record<string, string>; mode: 'repair' | 'report' }): Promise<DriftCheck> {
      const checks = [await watch().checkDrift(previous, mode)];
      for (const plugin of plugins.values()) {
        if (!plugin.checkDrift) continue;
        try {
          checks.push(await plugin.checkDrift(previous, mode));
        } catch (err) {
          // One type's failed check must not cost the others theirs: the next check tries again.
          log.warn('a resource type could not check its drift', { resourceType: plugin.resourceType, error: (err as Error).message });
        }
      }
      return {
        seen: Object.assign({}, ...checks.map((c) => c.seen)) as Record<string, string>,
        repaired: checks.flatMap((c) => c.repaired),
        reported: checks.flatMap((c) => c.reported),
        aggregatesRemoved: checks.flatMap((c) => c.aggregatesRemoved),
        leasesToHeal: [...new Set(checks.flatMap((c) => c.leasesToHeal ?? []))],
      };
    },
  };
}
