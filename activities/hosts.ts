/**
 * The host monitor's activities, thin: each asks the host watch of the resource type that enrols
 * compute hosts (physical:host) to look at Nova, record a host's state, put a recovered host back,
 * name the leases booked on hosts, or check that hosts are in the aggregates the calendar says.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { HostObservation, HostStateChange } from '../src/domain/host-health';
import type { DriftCheck, HostWatch, MaintenanceBegun } from '../src/domain/resource-plugin';

export function hostActivities({ hostWatch }: { hostWatch?: HostWatch }) {
  const watch = (): HostWatch => {
    if (!hostWatch) throw ApplicationFailure.nonRetryable('this worker watches no hosts (it has no OpenStack)', 'NoHostWatch');
    return hostWatch;
  };
  return {
    observeHosts: (): Promise<HostObservation[]> => watch().observe(),
    recordHostState: (change: HostStateChange): Promise<void> => watch().record(change),
    returnRecoveredHost: (hostId: string): Promise<void> => watch().recovered(hostId),
    notifyHostChange: ({ change, leaseIds }: { change: HostStateChange; leaseIds: string[] }): Promise<void> => watch().notify(change, leaseIds),
    leasesOnHosts: ({ hostIds, untilMs }: { hostIds: string[]; untilMs?: number }): Promise<string[]> => watch().leasesHolding(hostIds, untilMs),
    leasesToHeal: ({ untilMs }: { untilMs?: number }): Promise<string[]> => watch().leasesToHeal(untilMs),
    beginMaintenance: (windowId: string): Promise<MaintenanceBegun> => watch().beginMaintenance(windowId),
    endMaintenance: (end: { windowId: string; hostId: string; computeHost?: string }): Promise<{ leaseIds: string[] }> => watch().endMaintenance(end),
    checkDrift: ({ previous, mode }: { previous: Record<string, string>; mode: 'repair' | 'report' }): Promise<DriftCheck> => watch().checkDrift(previous, mode),
  };
}
