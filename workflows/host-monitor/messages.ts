/** What the worker and the API know of the host monitor: its input, id, type name and query. */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { HostHealthMap } from '../../src/domain/host-health';

export interface HostMonitorInput {
  /** How often it looks at Nova (LK_HOST_MONITOR_INTERVAL_SECONDS). */
  intervalMs: number;
  /** How long a problem must last before a host counts as failed (LK_HOST_FAIL_GRACE_SECONDS). */
  graceMs: number;
  /** Pending leases are healed only when they start within this (LK_HEALING_HORIZON_HOURS); unset: all. */
  horizonMs?: number;
  /**
   * How often leases still booked on hosts they cannot count on (failed; pending on a host out of
   * admission) are told again: those booked while the host was failing, and degraded ones for
   * which a host may have become free. The first look after a start is such a sweep.
   */
  sweepMs: number;
  /** How often it checks that hosts are in the aggregates the calendar says (LK_DRIFT_CHECK_MINUTES), and whether it repairs (LK_DRIFT_REPAIR). */
  driftMs: number;
  driftMode: 'repair' | 'report';
  /** Set when it continues as new: what it knew. */
  carried?: { health: HostHealthMap; lastSweepMs: number; drift: DriftState };
}

export const hostMonitorWorkflowType = 'hostMonitorWorkflow';
/** One monitor per deployment (namespace and task queue). */
export const hostMonitorWorkflowId = (taskQueue: string) => `host-monitor-${taskQueue}`;

/** Every enrolled host's health as last seen, by host id. */
export const getHostHealth = defineQuery<HostHealthMap>('getHostHealth');
/** Look now instead of at the next interval (an operator, or a notification from Nova). */
export const lookNow = defineSignal('lookNow');

/** Drift checks so far: when the last ran, what it saw (repaired if seen again), and totals. */
export interface DriftState {
  lastCheckMs: number;
  seen: Record<string, string>;
  repaired: number;
  reported: number;
  aggregatesRemoved: number;
}
