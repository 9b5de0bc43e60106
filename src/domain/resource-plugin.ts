/**
 * A resource type (physical host, instance, bandwidth, floating IP) plugs in behind this one small
 * interface, as in Blazar's resource plugins. The lease workflow calls each hook through a generic
 * activity (activities/reservations.ts), so every hook runs with Temporal's timeouts and retries and
 * must be idempotent, keyed by the reservation id.
 */
import type { z } from 'zod';
import type { LeaseStatus, Reservation } from './lease';

export interface ReservationContext {
  leaseId: string;
  leaseName: string;
  projectId: string;
  userId: string;
  /** The lease's status when the hook runs: an ACTIVE lease keeps its resources when re-booked. */
  leaseStatus: LeaseStatus;
  reservation: Reservation;
  /** Every reservation of the lease (this one included), for types that book them jointly. */
  leaseReservations: Reservation[];
  startMs: number;
  endMs: number;
  /** Resources are made ready this long before startMs (and booked from then). */
  provisioningLeadMs: number;
}

/** What an end hook left to do. */
export interface EndOutcome {
  /**
   * Set while some resources are not back yet (e.g. recycling hosts that still run servers): the
   * workflow calls the hook again later, and with `force` when the lease is deleted meanwhile.
   */
  waitingFor?: string;
  /** When to look again (the workflow keeps it between 1 s and 5 min; 15 s when unset). */
  recheckAfterMs?: number;
  /** Merged into the reservation's allocation in the lease JSON (e.g. the snapshot image taken). */
  allocation?: Record<string, unknown>;
}

export interface StartOutcome {
  /** Merged into the reservation's allocation in the lease JSON (e.g. the host a server ended up on). */
  allocation?: Record<string, unknown>;
}

export type EndContext = ReservationContext & {
  /** False for a lease deleted before it started (or whose start failed: then undo what moved). */
  started: boolean;
  /** Do not wait for anything: take everything back now. */
  force?: boolean;
};

export interface ReserveResult {
  /** Shown in the lease JSON under the reservation (hosts, amounts, aggregate…). */
  allocation: Record<string, unknown>;
  /** The resources held, e.g. `host:3`: leases sharing a key start only after the earlier one ended. */
  resourceKeys: string[];
  /** The plugin's `hold` hook is to run right after admission (e.g. to shelve a server until start). */
  holdUntilStart?: boolean;
  /** Start in these steps (`startStep`), each its own activity with its own retries, instead of one `start`. */
  startSteps?: StartStep[];
}

/** One step of a start made of several: its own activity, time-out and retry policy. */
export interface StartStep {
  name: string;
  /** How long one try may take. */
  timeoutSeconds: number;
  /** Tries before the start fails (1: none again). */
  maximumAttempts: number;
  /** Pause before the first retry; it doubles after each. */
  retryIntervalSeconds: number;
}

/** What a step hands to the next (ids of what it made, choices), and what it shows in the lease JSON. */
export interface StepOutcome {
  state: Record<string, unknown>;
  allocation?: Record<string, unknown>;
}

export interface HealResult {
  /** Resources that failed and could not be replaced. */
  missingResources: boolean;
  /** Resources that were replaced by others. */
  resourcesChanged: boolean;
}

export interface ResourcePlugin {
  /** Blazar's resource_type, e.g. `physical:host`. */
  readonly resourceType: string;
  /** Validates a reservation's parameters at the API edge; zod issues become a 400. */
  readonly paramsSchema: z.ZodType<Record<string, unknown>>;
  /** Books capacity for [start, end] (again, for a new window, when the lease is updated); 409 when it is not free. */
  reserve(ctx: ReservationContext): Promise<ReserveResult>;
  /**
   * Right after admission, when reserve asked for it: sets the resources aside until the start, so
   * that others can use the capacity meanwhile (a server is shelved and offloaded).
   */
  hold?(ctx: ReservationContext): Promise<void>;
  /** Makes the reserved resources usable by the lessee. */
  start(ctx: ReservationContext): Promise<StartOutcome | void>;
  /** One of the steps reserve listed in `startSteps`, given what the earlier steps handed on. */
  startStep?(step: string, ctx: ReservationContext, state: Record<string, unknown>): Promise<StepOutcome>;
  /** The before-end action (snapshot, notify…). */
  beforeEnd(ctx: ReservationContext): Promise<void>;
  /** Takes the resources back and frees the booking, or says what it is still waiting for. */
  end(ctx: EndContext): Promise<EndOutcome>;
  /** Replaces failed resources where it can. */
  heal(ctx: ReservationContext): Promise<HealResult>;
}

export type ResourcePlugins = ReadonlyMap<string, ResourcePlugin>;

export function pluginRegistry(plugins: ResourcePlugin[]): ResourcePlugins {
  return new Map(plugins.map((plugin) => [plugin.resourceType, plugin]));
}
