/**
 * A resource type for tests of the lease life itself: it holds nothing in any cloud, records every
 * hook call with its time, and fails on request. The real resource types have their own tests
 * against OpenStack.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { leaseConflict } from '../../src/domain/lease';
import type { EndContext, EndOutcome, FitQuery, FitSearch, HookContext, ReservationContext, ResourcePlugin } from '../../src/domain/resource-plugin';

export interface HookCall {
  hook: 'reserve' | 'hold' | 'start' | 'startStep' | 'beforeEnd' | 'end';
  /** startStep: which step, and what the earlier steps handed on. */
  step?: string;
  state?: Record<string, unknown>;
  leaseId: string;
  reservationId: string;
  startedAt: number;
  finishedAt?: number;
  started?: boolean;
  force?: boolean;
  window: [number, number];
  /** The lease's status and the reservation's keys when the hook ran. */
  status: string;
  keys: string[];
}

const params = z.strictObject({
  keys: z.array(z.string()).default([]),
  fail_reserve: z.boolean().default(false),
  /** The first N reserve calls of the reservation fail as if PostgreSQL were down (connection refused). */
  unavailable_reserves: z.number().int().min(0).max(20).default(0),
  /** The first N reserve calls of the reservation once its lease has started fail so (an update's re-booking, putting it back). */
  unavailable_once_started: z.number().int().min(0).max(100).default(0),
  fail_start: z.boolean().default(false),
  /** How long start and end take, to make ordering observable. */
  hook_ms: z.number().int().min(0).max(10_000).default(0),
  /** How many calls of the end hook report something still in use before it finishes (like recycling hosts). */
  end_waits: z.number().int().min(0).max(100).default(0),
  /** Ask for the hold hook after admission (like a server shelved until start), and fail it. */
  hold: z.boolean().default(false),
  fail_hold: z.boolean().default(false),
  /** Its start makes what its hold makes (an instance reservation's flavor): a failed hold leaves the lease PENDING. */
  hold_redone_at_start: z.boolean().default(false),
  /** Hold, start and end report allocation details (like what a hold made, the host a server landed on, its snapshot). */
  report: z.boolean().default(false),
  /** Start in these steps (each its own activity), and fail the one named. */
  steps: z.array(z.string()).default([]),
  fail_step: z.string().optional(),
  /** Tells whether it is in use (idle-lease reaping): in use while listed in `inUseReservations`; without it, it cannot tell. */
  idle_check: z.boolean().default(false),
});

type RecordingParams = z.output<typeof params>;

export class RecordingPlugin implements ResourcePlugin<RecordingParams> {
  readonly resourceType = 'test:recording';
  readonly paramsSchema = params;
  readonly calls: HookCall[] = [];
  /** Reservations the lessee uses (idle-lease tests); the others are idle. */
  readonly inUseReservations = new Set<string>();

  inUse(ctx: HookContext<RecordingParams>): Promise<boolean | undefined> {
    if (!ctx.reservation.params.idle_check) return Promise.resolve(undefined);
    return Promise.resolve(this.inUseReservations.has(ctx.reservation.id));
  }

  callsFor(leaseId: string, hook?: HookCall['hook']): HookCall[] {
    return this.calls.filter((c) => c.leaseId === leaseId && (!hook || c.hook === hook));
  }

  private async run<T>(hook: HookCall['hook'], ctx: ReservationContext<RecordingParams>, extra: Partial<HookCall>, body: () => T | Promise<T>): Promise<T> {
    const call: HookCall = { hook, leaseId: ctx.leaseId, reservationId: ctx.reservation.id, startedAt: Date.now(), window: [ctx.startMs, ctx.endMs], status: ctx.leaseStatus, keys: ctx.reservation.params.keys, ...extra };
    this.calls.push(call);
    const result = await body();
    call.finishedAt = Date.now();
    return result;
  }

  private params(ctx: ReservationContext<RecordingParams>): RecordingParams {
    return ctx.reservation.params;
  }

  reserve(ctx: HookContext<RecordingParams>) {
    return this.run('reserve', ctx, {}, () => {
      const p = this.params(ctx);
      if (p.fail_reserve) throw leaseConflict('not enough test:recording capacity for this window');
      const startedCalls = this.callsFor(ctx.leaseId, 'reserve').filter((c) => c.reservationId === ctx.reservation.id && c.status !== 'PENDING').length;
      if (this.callsFor(ctx.leaseId, 'reserve').length <= p.unavailable_reserves || (ctx.leaseStatus !== 'PENDING' && startedCalls <= p.unavailable_once_started)) {
        throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432 (test:recording)'), { code: 'ECONNREFUSED' });
      }
      return {
        allocation: { held_keys: p.keys },
        resourceKeys: p.keys,
        ...(p.hold ? { holdUntilStart: true, ...(p.hold_redone_at_start ? { holdRedoneAtStart: true } : {}) } : {}),
        ...(p.steps.length ? { startSteps: p.steps.map((name) => ({ name, timeoutSeconds: 10, maximumAttempts: 3, retryIntervalSeconds: 1 })) } : {}),
      };
    });
  }

  hold(ctx: HookContext<RecordingParams>) {
    return this.run('hold', ctx, {}, () => {
      if (this.params(ctx).fail_hold) throw ApplicationFailure.nonRetryable('the test resource cannot be set aside', 'TestHoldRefused');
      return this.params(ctx).report ? { allocation: { held_as: `shelf-${ctx.reservation.id.slice(0, 8)}` } } : undefined;
    });
  }

  start(ctx: HookContext<RecordingParams>) {
    return this.run('start', ctx, {}, async () => {
      const p = this.params(ctx);
      await new Promise((resolve) => setTimeout(resolve, p.hook_ms));
      if (p.fail_start) throw ApplicationFailure.nonRetryable('the test resource refused to start', 'TestStartRefused');
      return p.report ? { allocation: { started_on: `node-${this.callsFor(ctx.leaseId, 'start').length}` } } : undefined;
    });
  }

  startStep(step: string, ctx: HookContext<RecordingParams>, state: Record<string, unknown>) {
    return this.run('startStep', ctx, { step, state }, () => {
      if (this.params(ctx).fail_step === step) throw ApplicationFailure.nonRetryable(`the test resource failed step ${step}`, 'TestStepFailed');
      const done = [...((state.done as string[] | undefined) ?? []), step];
      return { state: { done }, allocation: { last_step: step, [`${step}_saw`]: done.length - 1 } };
    });
  }

  beforeEnd(ctx: HookContext<RecordingParams>) {
    return this.run('beforeEnd', ctx, {}, () => undefined);
  }

  end(ctx: EndContext<RecordingParams>): Promise<EndOutcome> {
    return this.run('end', ctx, { started: ctx.started, force: ctx.force }, async () => {
      const p = this.params(ctx);
      await new Promise((resolve) => setTimeout(resolve, p.hook_ms));
      const calls = this.callsFor(ctx.leaseId, 'end').filter((c) => c.reservationId === ctx.reservation.id).length;
      if (ctx.started && !ctx.force && calls <= p.end_waits) return { waitingFor: `test resource still in use (end call ${calls} of ${p.end_waits + 1})`, recheckAfterMs: 1_000 };
      return p.report && ctx.started ? { allocation: { left_behind: `image-of-${ctx.reservation.id.slice(0, 8)}` } } : {};
    });
  }

  /** Unlimited capacity, except for reservations that ask to be refused. */
  earliest({ reservations, startMs }: FitQuery<RecordingParams>): Promise<FitSearch> {
    const refused = reservations.some((r) => r.params.fail_reserve);
    return Promise.resolve(refused ? { longestMs: 0, cutShort: false, tried: 1 } : { earliest: startMs, longestMs: Infinity, cutShort: false, tried: 1 });
  }
}
