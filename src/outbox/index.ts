/**
 * Owed lease workflow starts. A lease the API admitted in its own transaction has a row in
 * `lease_outbox` until its workflow exists. The API starts it right after its commit; should that
 * fail, or the API die first, the sweeps of every API and worker start it. Every start is the same
 * idempotent call: the lease's workflow id, never a second run under it (REJECT_DUPLICATE), so a
 * start made twice finds the first.
 */
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import type { Logger } from 'pino';
import { leaseResourceTypes, type Lease } from '../domain/lease';
import { markdownText } from '../domain/markdown';
import { DEFAULT_PREEMPT_WARNING_MS, toLeasePreemption } from '../domain/preemption';
import { LeaseEndKey, LeaseStartKey, LeaseStatusKey, ProjectIdKey, ResourceTypesKey } from '../domain/search-attributes';
import { admittedStart, markStarted, sweepOwedStarts } from '../db/lease-outbox';
import { claimOwedPreemptions, markPreemptionFailed, markPreemptionTold, purgeToldPreemptions, type ClaimedPreemption } from '../db/lease-preemptions';
import { leaseStates } from '../db/leases';
import type { Pool } from '../db/pool';
import { leasePreempted, leaseWorkflowId, leaseWorkflowType, staticSummary, type LeaseWorkflow, type LeaseWorkflowInput } from '../../workflows/lease/messages';

/**
 * What a lease workflow is started with besides its input: the Web UI's summary and details
 * (`origin`: how the lease came, e.g. "created by user …"), and the search attributes that lists
 * and the Web UI filter on until its first transition sets them again.
 */
export function leaseWorkflowLabels(lease: Lease, origin: string) {
  return {
    staticSummary: staticSummary(lease),
    staticDetails: `Lease ${lease.id} of project ${markdownText(lease.projectId)}, ${origin}.`,
    typedSearchAttributes: new TypedSearchAttributes([
      { key: LeaseStatusKey, value: lease.status },
      { key: ProjectIdKey, value: lease.projectId },
      { key: LeaseStartKey, value: new Date(lease.startMs) },
      { key: LeaseEndKey, value: new Date(lease.endMs) },
      { key: ResourceTypesKey, value: leaseResourceTypes(lease) },
    ]),
  };
}

/**
 * Starts the workflow of a lease that stands recorded already (admitted by the API, or imported):
 * `input.admitted` or `input.carried` holds it. Never a second life for a lease id, even once the
 * first has closed: a workflow already there, running or not, counts as started. Except a run that
 * closed without ever holding the lease: an Idempotency-Key's earlier request that its workflow
 * refused (REJECTED) or never admitted leaves a closed run under the id the API then admits a
 * lease with; counted as started, that lease would never start, end, or be deleted.
 */
export async function startRecordedLease(client: Client, taskQueue: string, input: LeaseWorkflowInput, origin: string): Promise<void> {
  const lease = input.admitted ?? input.carried;
  if (!lease) throw new Error('a recorded lease is started with the lease it carries');
  const start = (workflowIdReusePolicy: 'REJECT_DUPLICATE' | 'ALLOW_DUPLICATE') =>
    client.workflow.start<LeaseWorkflow>(leaseWorkflowType, {
      workflowId: leaseWorkflowId(lease.id),
      taskQueue,
      args: [input],
      workflowIdReusePolicy,
      ...leaseWorkflowLabels(lease, origin),
    });
  try {
    await start('REJECT_DUPLICATE');
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    if (!input.admitted || !(await closedNeverHolding(client, lease.id))) return;
    try {
      await start('ALLOW_DUPLICATE');
    } catch (again) {
      // Another start (a sweep, the admitting API) was first: the lease has its workflow.
      if (!(again instanceof WorkflowExecutionAlreadyStartedError)) throw again;
    }
  }
}

/** Whether the lease's workflow id has a closed run that never admitted a lease (it refused it, or no admit came). */
async function closedNeverHolding(client: Client, leaseId: string): Promise<boolean> {
  const handle = client.workflow.getHandle<LeaseWorkflow>(leaseWorkflowId(leaseId));
  if ((await handle.describe()).status.name === 'RUNNING') return false;
  const outcome = await handle.result().catch(() => undefined); // a failed run held the lease: left alone
  return outcome?.status === 'REJECTED' || outcome?.status === 'NOT_ADMITTED';
}

/** How a lease's workflow says it came, in the Web UI: the same whoever admitted it. */
export const createdOrigin = (lease: Pick<Lease, 'userId'>) => `created by user ${markdownText(lease.userId)}`;

export interface LeaseOutboxDeps {
  pool: Pool;
  client: Client;
  taskQueue: string;
  log: Logger;
  /** How often to sweep; how old an owed start must be for a sweep to take it. */
  sweepMs: number;
  graceMs: number;
  /** Starts in flight at once from this process (the rest wait their turn in memory, then the sweeps). */
  concurrency?: number;
  /** How long a start may wait for this process's admissions in flight to be answered first (`whileAdmitting`). */
  yieldMs?: number;
  /** The warning a preempted lease is told the deployment promises (LK_PREEMPT_WARNING_MINUTES; 10 min unset). */
  preemptionWarningMs?: number;
}

/** Owed starts a sweep takes at once; a busy backlog is worked through sweep after sweep. */
const SWEEP_BATCH = 100;
/** How long a start waits to be written to its row with others. */
const STARTED_FLUSH_MS = 50;
/** Owed starts kept in memory per process, waiting for a free slot; beyond that (or past the grace) the sweeps start them. */
const QUEUE_LIMIT = 10_000;
/**
 * How long a start waits, at most, while admissions are being answered. A workflow's start and
 * first task cost Temporal and the worker several times the CPU of an admission; made at once, in
 * the middle of a burst, they delay the answers still owed. Answers first, then the starts: the
 * lease's workflow has seconds, the person waiting for the 201 does not.
 */
const YIELD_MS = 1_000;

export class LeaseOutbox {
  private readonly queue: Array<{ input: LeaseWorkflowInput; committedAt: number }> = [];
  private inFlight = 0;
  private admitting = 0;
  private yieldTimer: NodeJS.Timeout | undefined;
  private readonly yieldMs: number;
  private sweeping: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly concurrency: number;

  private readonly startedIds: string[] = [];
  private flushing: Promise<void> | undefined;
  private onStarted?: (lagMs: number) => void;
  private onFailed?: (error: unknown) => void;
  /** Preempted leases being told now, and those cut meanwhile, told next. */
  private telling: Promise<unknown> | undefined;
  private readonly toTell = new Set<string>();

  constructor(private readonly deps: LeaseOutboxDeps) {
    this.concurrency = deps.concurrency ?? 16;
    this.yieldMs = deps.yieldMs ?? YIELD_MS;
  }

  /**
   * Runs an admission; the starts owed meanwhile wait until no admission is in flight here (or
   * for `yieldMs` at most), so that a burst's answers are not held up by its workflows' starts.
   */
  async whileAdmitting<T>(admission: () => Promise<T>): Promise<T> {
    this.admitting++;
    try {
      return await admission();
    } finally {
      this.admitting--;
      if (this.admitting === 0) this.drain();
    }
  }

  /** Tells `started` how long each start took from the admission's commit, and `failed` of each start that failed. */
  observedBy(started: (lagMs: number) => void, failed: (error: unknown) => void): this {
    this.onStarted = started;
    this.onFailed = failed;
    return this;
  }

  /** Starts an admitted lease's workflow soon (right after its admission's commit); a failure leaves it to the sweeps. */
  startSoon(input: LeaseWorkflowInput): void {
    if (this.queue.length >= QUEUE_LIMIT) return;
    this.queue.push({ input, committedAt: Date.now() });
    this.drain();
  }

  /**
   * Tells the workflows of the leases an admission just committed cut (lease_preemptions), at once;
   * nothing when it cut none. One telling at a time per process; leases cut meanwhile are told after
   * it. A failure is left to the sweeps.
   */
  tellPreemptedSoon(leaseIds: readonly string[]): void {
    if (leaseIds.length === 0) return;
    for (const id of leaseIds) this.toTell.add(id);
    this.tellQueued();
  }

  /** Tells the next batch of leases cut, unless a telling runs (it goes on with them when done). */
  private tellQueued(): void {
    if (this.telling || this.toTell.size === 0) return;
    const batch = [...this.toTell].slice(0, SWEEP_BATCH);
    for (const id of batch) this.toTell.delete(id);
    this.telling = this.tellClaimed({ limit: batch.length, olderThanMs: 0, leaseIds: batch })
      .catch((err: unknown) => this.deps.log.warn({ err }, 'telling preempted leases failed: the sweeps will try again'))
      .finally(() => {
        this.telling = undefined;
        this.tellQueued();
      });
  }

  /** Sweeps: tells owed preemptions older than `olderThanMs` whose next try is due, a batch at a time. */
  private async tellPreempted(olderThanMs: number): Promise<{ told: number; failed: number }> {
    const total = { told: 0, failed: 0 };
    for (;;) {
      const batch = await this.tellClaimed({ limit: SWEEP_BATCH, olderThanMs });
      total.told += batch.told;
      total.failed += batch.failed;
      if (batch.failed > 0 || batch.told < SWEEP_BATCH) return total;
    }
  }

  /** Claims owed preemptions (committed, no lock held), tells each, and marks it told (unless its end changed meanwhile) or its error. */
  private async tellClaimed(options: { limit: number; olderThanMs: number; leaseIds?: string[] }): Promise<{ told: number; failed: number }> {
    const claimed = await claimOwedPreemptions(this.deps.pool, options);
    let told = 0;
    for (const owed of claimed) {
      const result = await this.tellOne(owed);
      if (result.told) {
        told++;
        await markPreemptionTold(this.deps.pool, owed);
      } else {
        await markPreemptionFailed(this.deps.pool, owed.leaseId, result.error);
      }
    }
    return { told, failed: claimed.length - told };
  }

  /** One preempted lease's workflow told (a signal, which it applies once: a second changes nothing). */
  private async tellOne(owed: ClaimedPreemption): Promise<{ told: true } | { told: false; error: string }> {
    try {
      // A lending's reclaim (issue 43) says so: the lessee is told its lender takes the host back.
      const told = toLeasePreemption(owed, this.deps.preemptionWarningMs ?? DEFAULT_PREEMPT_WARNING_MS);
      await this.deps.client.workflow.getHandle<LeaseWorkflow>(leaseWorkflowId(owed.leaseId)).signal(leasePreempted, told);
      return { told: true };
    } catch (err) {
      // Gone, ended, or past its (uncut) end: nothing left to tell. Else (for one not started yet: its own owed start) tried again.
      const state = (await leaseStates(this.deps.pool, [owed.leaseId])).get(owed.leaseId);
      if (!state || state.deleted || state.status === 'TERMINATED' || state.status === 'ERROR' || state.endMs <= Date.now()) return { told: true };
      return { told: false, error: err instanceof Error ? err.message : String(err) };
    }
  }

  /**
   * An update or a delete found no workflow for the lease: if the API admitted it, its workflow is
   * started now (or found started meanwhile, by the admitting API or a sweep: the start is
   * idempotent), and the answer is true; false for a lease the API did not admit. Throws when
   * Temporal refuses the start.
   */
  async startOwed(leaseId: string): Promise<boolean> {
    const admitted = await admittedStart<LeaseWorkflowInput>(this.deps.pool, leaseId);
    if (!admitted) return false;
    await this.start(admitted.input);
    if (!admitted.started) await markStarted(this.deps.pool, [leaseId]);
    return true;
  }

  /** Starts the owed starts older than the grace, a batch at a time, until none is left or one fails. */
  async sweep(): Promise<{ started: number; failed: number }> {
    const total = { started: 0, failed: 0 };
    for (;;) {
      const batch = await sweepOwedStarts<LeaseWorkflowInput>(this.deps.pool, { limit: SWEEP_BATCH, olderThanMs: this.deps.graceMs, concurrency: this.concurrency }, async ({ input }) => {
        try {
          await this.start(input);
          return { started: true };
        } catch (err) {
          this.onFailed?.(err);
          return { started: false, error: err instanceof Error ? err.message : String(err) };
        }
      });
      total.started += batch.started;
      total.failed += batch.failed;
      if (batch.failed > 0 || batch.started < SWEEP_BATCH) break;
    }
    // Preempted leases whose workflow was not told (the admitting API died, or Temporal refused).
    const preemptions = await this.tellPreempted(this.deps.graceMs);
    if (preemptions.told > 0 || preemptions.failed > 0) this.deps.log.info(preemptions, 'owed preemptions swept');
    // Told preemptions long past their end: a bounded batch per sweep.
    await purgeToldPreemptions(this.deps.pool, SWEEP_BATCH);
    return total;
  }

  /** Sweeps every `sweepMs` until stopped. */
  runSweeps(): void {
    if (this.timer) return;
    const tick = () => {
      this.sweeping = this.sweep()
        .then(({ started, failed }) => {
          if (started > 0 || failed > 0) this.deps.log.info({ started, failed }, 'owed lease workflow starts swept');
        })
        .catch((err: unknown) => this.deps.log.warn({ err }, 'sweeping owed lease workflow starts failed'))
        .finally(() => {
          this.sweeping = undefined;
          if (this.timer) this.timer = setTimeout(tick, this.deps.sweepMs);
        });
    };
    this.timer = setTimeout(tick, this.deps.sweepMs);
  }

  /**
   * Stops sweeping and waits up to `waitMs` for the starts under way (those still queued are left to
   * the sweeps), before the caller closes the Temporal connection under them.
   */
  async stop(waitMs = 10_000): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.yieldTimer) clearTimeout(this.yieldTimer);
    this.yieldTimer = undefined;
    this.queue.length = 0;
    const until = Date.now() + waitMs;
    await this.sweeping;
    // A telling goes on with the leases cut meanwhile: wait for the last of them.
    while (this.telling) await this.telling;
    while (this.inFlight > 0 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
    await this.flushing;
  }

  /** Starts made: written to their rows a batch at a time (one UPDATE for a burst's starts), at the latest STARTED_FLUSH_MS later. */
  private noteStarted(leaseId: string): void {
    this.startedIds.push(leaseId);
    this.flushing ??= new Promise<void>((resolve) => setTimeout(resolve, STARTED_FLUSH_MS)).then(() => this.flushStarted());
  }

  private async flushStarted(): Promise<void> {
    const ids = this.startedIds.splice(0);
    this.flushing = undefined;
    // A row left unmarked is started again by a sweep, which finds the workflow there: harmless.
    if (ids.length) await markStarted(this.deps.pool, ids).catch((err: unknown) => this.deps.log.warn({ err, leases: ids.length }, 'recording started lease workflows failed: the sweeps will find them started'));
  }

  protected start(input: LeaseWorkflowInput): Promise<void> {
    return startRecordedLease(this.deps.client, this.deps.taskQueue, input, createdOrigin(input.admitted!));
  }

  private drain(): void {
    while (this.inFlight < this.concurrency && this.queue.length > 0) {
      const waited = Date.now() - this.queue[0].committedAt;
      if (this.admitting > 0 && waited < this.yieldMs) {
        // Answers first: look again when the last admission in flight ends, or when the oldest start may wait no longer.
        this.yieldTimer ??= setTimeout(() => {
          this.yieldTimer = undefined;
          this.drain();
        }, this.yieldMs - waited);
        return;
      }
      const { input, committedAt } = this.queue.shift()!;
      // Waited past the grace: the sweeps (of every process) take it now; starting it here too would be twice.
      if (Date.now() - committedAt > this.deps.graceMs) continue;
      this.inFlight++;
      const leaseId = input.admitted!.id;
      this.start(input)
        .then(() => {
          this.onStarted?.(Date.now() - committedAt);
          this.noteStarted(leaseId);
        })
        .catch((err: unknown) => {
          this.onFailed?.(err);
          this.deps.log.warn({ err, leaseId }, 'starting an admitted lease\'s workflow failed: the sweeps will try again');
        })
        .finally(() => {
          this.inFlight--;
          this.drain();
        });
    }
  }
}
