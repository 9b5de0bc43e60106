import type { Pool } from '../src/db/pool';
import type { EventType } from '../src/domain/lease';
import type { HostWatch, ResourcePlugins } from '../src/domain/resource-plugin';
import type { NoticeService } from '../src/notifications/service';
import type { UsagePolicyEnforcer } from '../src/policy/enforcement';
import type { HostPower } from '../src/resources/physical-host/power';

/** What activities are given by the worker that hosts them. */
export interface ActivityDeps {
  pool: Pool;
  /** The resource types this worker can carry out, by resource_type. */
  plugins: ResourcePlugins;
  /** How the host monitor sees enrolled hosts (none without OpenStack: the monitor is not started). */
  hostWatch?: HostWatch;
  /** Hosts' power, for the power planner (none: LK_POWER_PLANNER is off, its activities refuse). */
  hostPower?: HostPower;
  /** Lease and host notices (none: nothing is announced). */
  notices?: NoticeService;
  /** The usage policy, checked when a change a user asked for is recorded (none: no rules). */
  usagePolicy?: UsagePolicyEnforcer;
  /** Told when a lease event has begun, how late (the worker's metrics); none in tests. */
  eventStarted?: (eventType: EventType, lagMs: number) => void;
  /** How long a regular lease's start waits at most for a preempted lease's end on its hosts (LK_PREEMPT_EVICTION_SECONDS; 120 s unset). */
  preemptionEvictionMs?: number;
  /** The warning a lending's reclaim gives its borrowers when its need is not given (LK_PREEMPT_WARNING_MINUTES; 10 min unset). */
  preemptionWarningMs?: number;
  /** Tells the workflows of leases a reclaim cut, right after its commit (the worker's outbox; its sweeps cover a crash). */
  tellPreempted?: (leaseIds: readonly string[]) => void;
}
