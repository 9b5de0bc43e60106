/**
 * The host monitor's activities, thin: each asks the host watch of the resource type that enrols
 * compute hosts (physical:host) to look at Nova, record a host's state, put a recovered host back,
 * or name the leases booked on hosts.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { HostObservation, HostStateChange } from '../src/domain/host-health';
import type { HostWatch } from '../src/domain/resource-plugin';

export function hostActivities({ hostWatch }: { hostWatch?: HostWatch }) {
  const watch = (): HostWatch => {
    if (!hostWatch) throw ApplicationFailure.nonRetryable('this worker watches no hosts (it has no OpenStack)', 'NoHostWatch');
    return hostWatch;
  };
  return {
    observeHosts: (): Promise<HostObservation[]> => watch().observe(),
    recordHostState: (change: HostStateChange): Promise<void> => watch().record(change),
    returnRecoveredHost: (hostId: string): Promise<void> => watch().recovered(hostId),
    leasesOnHosts: ({ hostIds, untilMs }: { hostIds: string[]; untilMs?: number }): Promise<string[]> => watch().leasesHolding(hostIds, untilMs),
    leasesToHeal: ({ untilMs }: { untilMs?: number }): Promise<string[]> => watch().leasesToHeal(untilMs),
  };
}
