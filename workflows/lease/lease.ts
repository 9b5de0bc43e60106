/**
 * One lease, its whole life, as one durable workflow (id `lease-<uuid>`):
 *
 *   admission ─ PENDING ──(start)── STARTING ── ACTIVE ──(before end)──(end)── TERMINATING ── TERMINATED
 *                  │                   │           │                               │
 *                  └──── delete ───────┴──── DELETING (cleanup for the phase) ─────┴─── row removed, done
 *
 * Timers, not polling: the workflow sleeps until each event is due and wakes early when an update
 * moves a date or a delete arrives. Every transition is written to PostgreSQL (the API reads
 * leases from there) and to search attributes and the Web UI's current details.
 * Resource types act through the reservation hooks (reserve / start / before-end / end); a lease
 * with no reservations is valid and goes through the same life.
 */
import {
  ApplicationFailure,
  CancellationScope,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  allHandlersFinished,
  log,
  patched,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import {
  applyLeaseUpdate,
  assertSettled,
  hasEnded,
  leaseConflict,
  LeaseErrorType,
  leaseResourceTypes,
  newLease,
  bookingChanged,
  spanText,
  withEventTimes,
  type EventType,
  type Lease,
  type LeaseUpdateRequest,
  type RecordPolicy,
  type Reservation,
} from '../../src/domain/lease';
import { LeaseEndKey, LeaseStartKey, LeaseStatusKey, ProjectIdKey, ResourceTypesKey } from '../../src/domain/search-attributes';
import { leaseNoticeId, type Notice, type NoticeType } from '../../src/domain/notices';
import { bookedReservation, reservationContext as context, type EndOutcome, type HealOutcome, type ReservationContext } from '../../src/domain/resource-plugin';
import { announcing, forStep, healing, looking, mustFinish, patient, polling, quick, recording, recordingLocally } from './activity-options';
import { asFailure, failureMessage } from './failures';
import { Lock } from './lock';
import {
  admitLease,
  deleteLease,
  getLease,
  hostsChanged,
  predecessorEnded,
  updateLease,
  leaseWorkflowId,
  type LeaseOutcome,
  type LeaseWorkflowInput,
} from './messages';
import { describe, describeDeleted, describeStartStep, describeWaitingForEnd, describeWaitingForPredecessors } from './web-ui';

/** Admission tries again after a database outage, this many times in all. */
const ADMISSION_ATTEMPTS = 5;
/** How long a started workflow waits for its admit update before giving up (the REST call died). */
const ADMISSION_WAIT_MS = 5 * 60_000;
/** Patch: a lease tells only the later leases that wait for it, after recording its own end. */
const TELL_WAITING_SUCCESSORS = 'tell-waiting-successors-after-record';
/** Patch: a failed update puts the bookings back once, all of them as they were (before, the ones already moved went back twice). */
const ONE_ROLLBACK_FOR_UPDATES = 'one-rollback-for-updates';
/**
 * Patch: a delete is answered once the lease is gone (its bookings freed, its row removed), as
 * Blazar's delete is synchronous; before, it was answered as soon as the deletion began.
 */
const DELETE_ANSWERED_WHEN_GONE = 'delete-answered-when-gone';
/**
 * Patch: the lease announces its events (lease.create, lease.event.start_lease…: webhooks and
 * oslo.messaging, delivered by a workflow of their own) and tells Blazar's external filter its end.
 */
const LEASE_NOTICES = 'lease-notices';
/** Patch: an active lease warns its listeners before its end, at the offsets it asked for (`notify_before_end`). */
const BEFORE_END_WARNINGS = 'before-end-warnings';
/** Patch: an active lease nobody uses is warned (`lease.idle`), then ended early (LK_IDLE_LEASE_*). */
const IDLE_LEASES = 'idle-leases';
/** How long to wait for a predecessor's signal before looking at its row again. */
const PREDECESSOR_RECHECK_MS = 60_000;

// ─── The lease's life ──────────────────────────────────────────────────────────────────────────

export async function leaseWorkflow(input: LeaseWorkflowInput): Promise<LeaseOutcome> {
  let lease: Lease = input.carried ?? input.admitted ?? newLease(input.request);
  let admission: 'pending' | 'admitted' | 'rejected' = input.carried || input.admitted ? 'admitted' : 'pending';
  let rejection: ApplicationFailure | undefined;
  let deletion: 'none' | 'requested' | 'done' = 'none';
  let revision = 0; // bumped by every accepted update: sleeping loops recompute their deadlines
  let deletesAnswering = 0; // delete updates not yet answered: the workflow ends only after them
  const endedPredecessors = new Set<string>();
  const lock = new Lock(); // one change at a time: transitions, updates and deletes never interleave

  answerMessages();
  if (input.admitted) setCurrentDetails(describe(lease));

  // Admission comes with the start (Update-with-Start); a start without it means the REST call died.
  if (!(await condition(() => admission !== 'pending', ADMISSION_WAIT_MS))) {
    return { id: lease.id, status: 'NOT_ADMITTED', reason: 'no admit update arrived' };
  }
  if (admission !== 'admitted') return { id: lease.id, status: 'REJECTED', reason: rejection?.message };
  // Announced here, once the admission's caller has its answer (a lease continued as new was announced before).
  if (!input.carried) await announce('lease.create');

  try {
    if (lease.status === 'PENDING') {
      if (lease.reservations.some((r) => r.hold === 'due')) await holdUntilStart();
    }
    if (lease.status === 'PENDING') {
      // Resources are made ready a provisioning lead time before the start (0 by default).
      const startAt = () => ({ type: 'start_lease' as const, time: lease.startMs - (lease.provisioningLeadMs ?? 0) });
      if ((await sleepUntil(startAt)) === 'delete') return await remove();
      await startLease();
    }
    while (lease.status === 'ACTIVE') {
      if ((await sleepUntil(nextActiveEvent)) === 'delete') return await remove();
      const next = nextActiveEvent();
      if (next.warning !== undefined) await warnBeforeEnd(next.warning);
      else if (next.idleCheck) await checkIdle();
      else if (next.type === 'before_end_lease') await runBeforeEnd();
      else await endLease();
    }
    // TERMINATED or ERROR: the lease can still be renamed (answerMessages) and deleted.
    for (;;) {
      await condition(() => deletion !== 'none' || workflowInfo().continueAsNewSuggested);
      if (deletion !== 'none') return await remove();
      await continueAsNewWhenIdle();
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    // Cancelled from the Web UI or CLI: treat as a delete, and finish it whatever happens.
    await CancellationScope.nonCancellable(remove);
    throw err;
  }

  // ─── Messages: admit, update, delete, and the queries and signals ──────────────────────────────

  /** Registered before the first wait, so that the admit update sent with the start finds its handler. */
  function answerMessages(): void {
    setHandler(getLease, () => lease);
    setHandler(predecessorEnded, (leaseId) => void endedPredecessors.add(leaseId));
    // From the host monitor; signals that arrive while a heal waits for the lock join it.
    let healQueued = false;
    setHandler(hostsChanged, async ({ hostIds }) => {
      if (healQueued) return;
      healQueued = true;
      await lock.run(async () => {
        healQueued = false;
        await heal(hostIds);
      });
    });

    setHandler(admitLease, ({ requestHash }) =>
      lock.run(async () => {
        if (requestHash !== input.requestHash) throw leaseConflict('this Idempotency-Key was already used for a different request');
        if (admission === 'admitted') return lease;
        if (admission === 'rejected') throw rejection!;
        for (let attempt = 1; ; attempt++) {
          try {
            await record({ ...lease, reservations: await book(lease) }, 'admission', { byAdmin: input.request.byAdmin ?? false });
            admission = 'admitted';
            return lease;
          } catch (err) {
            await compensate('freeing the bookings of a refused admission', () => CancellationScope.nonCancellable(() => releaseAll(lease, false)));
            const failure = asFailure(err);
            // PostgreSQL was unreachable: freeing the bookings above waited until it answered again, so try again.
            if (failure.type === LeaseErrorType.unavailable && attempt < ADMISSION_ATTEMPTS) continue;
            admission = 'rejected';
            rejection = failure;
            throw rejection;
          }
        }
      }),
    );

    setHandler(
      updateLease,
      (update) =>
        lock.run(async () => {
          const before = lease;
          let next = applyLeaseUpdate(before, update, Date.now()); // again: the lease may have moved on while queued
          const rebook = bookingChanged(before, next) && !hasEnded(next.status);
          try {
            if (rebook) next = { ...next, reservations: await book(next, before) };
            // The usage policy is checked with the record, in its transaction: refused, it rolls back below.
            await record(next, 'life', { previous: before, byAdmin: update.byAdmin ?? false });
          } catch (err) {
            // The one rollback, whether booking or recording failed: every booking as it was. It must
            // finish (the lease's record says the old window), so since the patch it retries as cleanups do.
            if (rebook) await compensate('putting the bookings back', () => book(before, undefined, patched(ONE_ROLLBACK_FOR_UPDATES) ? mustFinish : quick));
            throw asFailure(err);
          }
          revision++;
          await announce('lease.update');
          return lease;
        }),
      {
        validator: (update: LeaseUpdateRequest) => {
          assertAdmitted();
          assertSettled(lease); // validators do not run on replay: old histories are unaffected
          applyLeaseUpdate(lease, update, Date.now());
        },
      },
    );

    setHandler(
      deleteLease,
      async () => {
        if (deletion === 'none') deletion = 'requested';
        const untilGone = patched(DELETE_ANSWERED_WHEN_GONE);
        deletesAnswering++;
        try {
          await condition(() => deletion === 'done' || (!untilGone && lease.status === 'DELETING'));
        } finally {
          deletesAnswering--;
        }
        return lease;
      },
      { validator: assertAdmitted },
    );
  }

  // ─── Phases ─────────────────────────────────────────────────────────────────────────────────

  /**
   * Right after admission: reservations whose resources wait out of use until the start (a server
   * shelved, its host free for others) are set aside. If that cannot be done, the lease is ERROR.
   */
  async function holdUntilStart(): Promise<void> {
    await lock.run(async () => {
      if (deletion !== 'none') return; // the delete takes everything back as it is
      try {
        for (const reservation of lease.reservations) {
          if (reservation.hold === 'due') await patient.holdReservation(context(lease, reservation));
        }
      } catch (err) {
        const reason = `hold until start failed: ${failureMessage(err)}`;
        log.error('lease hold failed', { leaseId: lease.id, reason });
        await CancellationScope.nonCancellable(() => releaseAll(lease, false));
        const reservations = lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
        await transition({ status: 'ERROR', statusReason: reason, reservations });
        await announce('lease.error', { reason });
        return;
      }
      await transition({ reservations: lease.reservations.map((r) => (r.hold === 'due' ? { ...r, hold: 'done' as const } : r)) });
    });
  }

  async function startLease(): Promise<void> {
    await lock.run(async () => {
      await transition({ status: 'STARTING' }, 'start_lease', 'IN_PROGRESS');
      if ((await waitForPredecessors()) === 'deleted') {
        await transition({ status: 'PENDING' }); // nothing started: the delete frees the bookings as for a pending lease
        return;
      }
      const started: Reservation[] = [];
      const allocations = new Map<string, Record<string, unknown>>();
      try {
        for (const reservation of lease.reservations) {
          // Later reservations see what earlier ones reported (e.g. the server a bandwidth reservation's ports are for).
          const ctx = context({ ...lease, reservations: withAllocations(lease.reservations, allocations) }, reservation);
          const outcome = reservation.startSteps?.length ? await runStartSteps(ctx, reservation.startSteps) : await patient.startReservation(ctx);
          if (outcome?.allocation) allocations.set(reservation.id, outcome.allocation);
          started.push(reservation);
        }
      } catch (err) {
        // Never half-started: take back what started, free every booking, and say why.
        const reason = `start failed: ${failureMessage(err)}`;
        log.error('lease start failed', { leaseId: lease.id, reason });
        await CancellationScope.nonCancellable(async () => {
          for (const reservation of lease.reservations) {
            await mustFinish.endReservation({ ...context(lease, reservation), started: started.includes(reservation) });
          }
        });
        const reservations = lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
        await transition({ status: 'ERROR', statusReason: reason, reservations }, 'start_lease', 'ERROR');
        if (patched(TELL_WAITING_SUCCESSORS)) await notifySuccessors();
        await announce('lease.error', { reason });
        return;
      }
      // A pending reservation moved by healing shows it until its start.
      const reservations = withAllocations(lease.reservations, allocations).map((r) => ({ ...withoutFlag(r, 'resources_changed'), status: 'active' as const }));
      await transition({ status: 'ACTIVE', reservations }, 'start_lease', 'DONE');
      await announce('lease.event.start_lease');
    });
  }

  /** A start made of steps: each its own activity with the step's time-out and retries; each hands its state to the next. */
  async function runStartSteps(ctx: ReservationContext, steps: NonNullable<Reservation['startSteps']>): Promise<{ allocation: Record<string, unknown> }> {
    let state: Record<string, unknown> = {};
    let allocation: Record<string, unknown> = {};
    for (const [index, step] of steps.entries()) {
      setCurrentDetails(describeStartStep(lease, ctx.reservation.id, index, steps.length, step.name));
      const outcome = await forStep(step).startReservationStep({ ...ctx, step: step.name, state });
      state = outcome.state;
      allocation = { ...allocation, ...outcome.allocation };
    }
    return { allocation };
  }

  async function runBeforeEnd(): Promise<void> {
    await lock.run(async () => {
      await transition({}, 'before_end_lease', 'IN_PROGRESS');
      try {
        for (const reservation of lease.reservations) await patient.beforeEndReservation(context(lease, reservation));
        await transition({}, 'before_end_lease', 'DONE');
        await announce('lease.event.before_end_lease');
      } catch (err) {
        // The before-end action is a courtesy (snapshot, notice): its failure does not end the lease.
        await transition({ statusReason: `before_end failed: ${failureMessage(err)}` }, 'before_end_lease', 'ERROR');
      }
    });
  }

  async function endLease(): Promise<void> {
    await lock.run(async () => {
      await transition({ status: 'TERMINATING' }, 'end_lease', 'IN_PROGRESS');
      let allocations: Map<string, Record<string, unknown>>;
      try {
        allocations = await releaseAll(lease, true);
      } catch (err) {
        const reservations = lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
        await transition({ status: 'ERROR', statusReason: `end failed: ${failureMessage(err)}`, reservations }, 'end_lease', 'ERROR');
        // An ERROR lease no longer counts as a predecessor (findPredecessors): whoever waits may go.
        if (patched(TELL_WAITING_SUCCESSORS)) await notifySuccessors();
        await announce('lease.error', { reason: lease.statusReason });
        await tellPolicyEnded();
        return;
      }
      const toldFirst = !patched(TELL_WAITING_SUCCESSORS);
      if (toldFirst) await notifySuccessors();
      const reservations = withAllocations(lease.reservations, allocations).map((r) => ({ ...r, status: 'deleted' as const }));
      await transition({ status: 'TERMINATED', reservations }, 'end_lease', 'DONE');
      if (!toldFirst) await notifySuccessors();
      await announce('lease.event.end_lease');
      await tellPolicyEnded();
    });
  }

  /** Deletion from any phase: take back what the phase holds, then remove the lease's row. */
  async function remove(): Promise<LeaseOutcome> {
    await lock.run(async () => {
      const wasActive = lease.status === 'ACTIVE';
      const holdsBookings = lease.status === 'PENDING' || wasActive;
      // As Blazar: a lease deleted before its end is told to the external filter as ended.
      const endsNow = !hasEnded(lease.status);
      await transition({ status: 'DELETING' });
      const toldFirst = !patched(TELL_WAITING_SUCCESSORS);
      if (holdsBookings) {
        await releaseAll(lease, wasActive, true);
        if (toldFirst) await notifySuccessors();
      }
      lease = { ...lease, version: lease.version + 1, updatedMs: Date.now() };
      await recorder().recordLeaseDeleted(lease);
      if (holdsBookings && !toldFirst) await notifySuccessors();
      deletion = 'done';
      upsertSearchAttributes([{ key: LeaseStatusKey, value: 'DELETED' }]);
      setCurrentDetails(describeDeleted(Date.now()));
      await announce('lease.delete');
      if (endsNow) await tellPolicyEnded();
    });
    // Whoever asked for the delete hears that it is done before the workflow ends.
    if (patched(DELETE_ANSWERED_WHEN_GONE)) await condition(() => deletesAnswering === 0);
    return { id: lease.id, status: 'DELETED' };
  }

  /**
   * Hosts the lease is booked on failed or came back: each reservation's type heals it (re-books a
   * pending one elsewhere, replaces failed hosts of an active one) and says what is missing. Never
   * fails the lease: a heal that cannot be done now leaves the reservation as it is (the monitor asks again).
   */
  async function heal(hostIds: string[]): Promise<void> {
    if ((lease.status !== 'PENDING' && lease.status !== 'ACTIVE') || deletion !== 'none') return;
    const reservations: Reservation[] = [];
    for (const reservation of lease.reservations) {
      let outcome: HealOutcome | undefined;
      try {
        outcome = await healing.healReservation(context(lease, reservation));
      } catch (err) {
        log.warn('healing a reservation failed', { leaseId: lease.id, reservationId: reservation.id, hostIds, error: failureMessage(err) });
      }
      reservations.push(outcome ? healed(reservation, outcome) : reservation);
    }
    if (JSON.stringify(reservations) === JSON.stringify(lease.reservations)) return;
    log.info('lease healed', { leaseId: lease.id, hostIds, degraded: reservations.some((r) => r.missing_resources || r.resources_changed) });
    await transition({ reservations });
  }

  // ─── Steps shared by the phases ─────────────────────────────────────────────────────────────

  /**
   * Announces a lease event to whoever listens (one notice per event and lease version). Never
   * fails nor holds up the lease: delivery runs in a workflow of its own, and an announce that
   * cannot be made is logged.
   */
  async function announce(eventType: NoticeType, details?: Record<string, unknown>, key?: string): Promise<void> {
    if (!patched(LEASE_NOTICES)) return;
    const notice: Notice = { id: leaseNoticeId(lease.id, eventType, lease.version, key), eventType, occurredMs: Date.now(), projectId: lease.projectId, lease, ...(details ? { details } : {}) };
    try {
      await announcing.announceNotice(notice);
    } catch (err) {
      if (isCancellation(err)) throw err;
      log.warn('a lease notice could not be announced', { leaseId: lease.id, eventType, error: failureMessage(err) });
    }
  }

  /** Blazar's external filter hears that the lease ended (its `on-end`), best effort. */
  async function tellPolicyEnded(): Promise<void> {
    if (!patched(LEASE_NOTICES)) return;
    try {
      const problem = await announcing.leaseEndedForPolicy(lease);
      if (problem) log.warn('the external policy service was not told of the end', { leaseId: lease.id, problem });
    } catch (err) {
      if (isCancellation(err)) throw err;
      log.warn('the external policy service was not told of the end', { leaseId: lease.id, error: failureMessage(err) });
    }
  }

  /**
   * Sleeps until the next event is due, re-reading it after every accepted update, unless a
   * delete arrives first. Long lives with many updates continue as new here, at rest.
   */
  async function sleepUntil(next: () => { type: EventType; time: number }): Promise<'due' | 'delete'> {
    for (;;) {
      if (deletion !== 'none') return 'delete';
      const { type, time } = next();
      const remaining = time - Date.now();
      if (remaining <= 0) return 'due';
      if (workflowInfo().continueAsNewSuggested) await continueAsNewWhenIdle();
      const seen = revision;
      await condition(() => revision !== seen || deletion !== 'none' || workflowInfo().continueAsNewSuggested, remaining, { summary: `until ${type}` });
    }
  }

  /**
   * While active: the before-end action if it has not run (it is never due after the end), else the
   * end; a warning before the end (`warning`: its offset) when one is due earlier.
   */
  function nextActiveEvent(): { type: EventType; time: number; warning?: number; idleCheck?: true } {
    const beforeEnd = lease.events.find((e) => e.event_type === 'before_end_lease')!;
    const actionDue = beforeEnd.status === 'UNDONE' && beforeEnd.time <= lease.endMs;
    const due = actionDue ? { type: 'before_end_lease' as const, time: beforeEnd.time } : { type: 'end_lease' as const, time: lease.endMs };
    const idleCheckAt = nextIdleCheck();
    const event = idleCheckAt !== undefined && idleCheckAt < due.time ? { type: due.type, time: idleCheckAt, idleCheck: true as const } : due;
    if (!lease.notifyBeforeEndMs?.length || !patched(BEFORE_END_WARNINGS)) return event;
    // Not warned yet of this end; not before the start; not when the before-end event's own notice says it at that moment.
    const warnings = lease.notifyBeforeEndMs
      .filter((offset) => lease.warnedBeforeEnd?.[String(offset)] !== lease.endMs)
      .map((offset) => ({ offset, time: lease.endMs - offset }))
      .filter((w) => w.time >= lease.startMs && w.time < lease.endMs && !(actionDue && w.time === beforeEnd.time))
      .sort((a, b) => a.time - b.time);
    const first = warnings[0];
    return first && first.time < event.time ? { type: 'before_end_lease', time: first.time, warning: first.offset } : event;
  }

  /** When to look next whether anyone uses the lease: a quarter of its shortest idle limit, between 1 s and 15 min. */
  function nextIdleCheck(): number | undefined {
    const limits = [lease.idle?.warnAfterMs, lease.idle?.endAfterMs].filter((ms): ms is number => ms !== undefined && ms > 0);
    if (limits.length === 0 || !patched(IDLE_LEASES)) return undefined;
    const step = Math.min(Math.max(Math.min(...limits) / 4, 1_000), 15 * 60_000);
    return (lease.idleCheckedMs ?? lease.startMs) + step;
  }

  /**
   * Idle-lease reaping (Chameleon's reaper, in the lease's own life): idle when no reservation that
   * can tell is in use. Idle for warnAfterMs: `lease.idle`, once per idle spell; for endAfterMs: the
   * lease ends now, saying why. A look that fails counts as in use: nothing is ended on a doubt.
   */
  async function checkIdle(): Promise<void> {
    await lock.run(async () => {
      let seen: Array<boolean | undefined>;
      try {
        seen = [];
        for (const reservation of lease.reservations) seen.push(await looking.reservationInUse(context(lease, reservation)));
      } catch (err) {
        log.warn('could not tell whether the lease is in use', { leaseId: lease.id, error: failureMessage(err) });
        seen = [true];
      }
      const now = Date.now();
      const idle = seen.some((s) => s === false) && !seen.some((s) => s === true);
      lease = idle ? { ...lease, idleSince: lease.idleSince ?? now, idleCheckedMs: now } : { ...lease, idleSince: undefined, idleWarned: undefined, idleCheckedMs: now };
      const since = lease.idleSince;
      if (since === undefined) return;
      const { warnAfterMs, endAfterMs } = lease.idle ?? {};
      if (warnAfterMs !== undefined && now - since >= warnAfterMs && !lease.idleWarned) {
        lease = { ...lease, idleWarned: true };
        await announce('lease.idle', { idle_since: new Date(since).toISOString(), ...(endAfterMs !== undefined ? { ends_at: new Date(Math.min(lease.endMs, since + endAfterMs)).toISOString() } : {}) }, `idle-${since}`);
      }
      if (endAfterMs !== undefined && now - since >= endAfterMs && now < lease.endMs) {
        const reason = `ended early: nothing of project ${lease.projectId} has used the lease since ${new Date(since).toISOString()} (idle for ${spanText(Math.round((now - since) / 1000) * 1000)}; the deployment ends idle leases after ${spanText(endAfterMs)})`;
        log.info('ending an idle lease', { leaseId: lease.id, idleSince: since });
        await transition(withEventTimes({ ...lease, endMs: now, statusReason: reason }));
      }
    });
  }

  /** A warning before the end: a notice only (the lease's state is unchanged), once per offset and end. */
  async function warnBeforeEnd(offset: number): Promise<void> {
    await lock.run(async () => {
      lease = { ...lease, warnedBeforeEnd: { ...lease.warnedBeforeEnd, [String(offset)]: lease.endMs } };
      await announce('lease.event.before_end_lease', { notify_before_end: spanText(offset), time_left_seconds: Math.max(0, Math.round((lease.endMs - Date.now()) / 1000)) }, `warning-${offset}-${lease.endMs}`);
    });
  }

  function assertAdmitted(): void {
    if (admission !== 'admitted' || deletion === 'done') {
      throw ApplicationFailure.create({ type: 'LeaseNotFound', message: `lease ${lease.id} not found`, nonRetryable: true });
    }
  }

  async function continueAsNewWhenIdle(): Promise<never> {
    await condition(() => allHandlersFinished() && !lock.held);
    // The lease as it stands is all the next run needs (an admitted lease's first state goes).
    return continueAsNew<typeof leaseWorkflow>({ ...input, admitted: undefined, carried: lease });
  }

  /**
   * Books every reservation for `target`'s window (reserve is idempotent per reservation, so
   * booking again moves the booking). `movedFrom`: histories from before the patch put the bookings
   * already moved back to it here, before the update's own rollback did it again. `via`: quick
   * for a booking someone waits for, mustFinish for a rollback.
   */
  async function book(target: Lease, movedFrom?: Lease, via: typeof quick = quick): Promise<Reservation[]> {
    const booked: Reservation[] = [];
    try {
      for (const reservation of target.reservations) {
        booked.push(bookedReservation(reservation, await via.reserveReservation(context(target, reservation))));
      }
      return booked;
    } catch (err) {
      if (movedFrom && !patched(ONE_ROLLBACK_FOR_UPDATES)) {
        await compensate('putting moved bookings back', async () => {
          for (const reservation of booked) await mustFinish.reserveReservation(context(movedFrom, reservation));
        });
      }
      throw err;
    }
  }

  /**
   * Runs every reservation's end hook: takes resources back (if started) and frees the bookings.
   * A hook that is still waiting (e.g. recycling hosts until their last server is gone) is polled
   * until it is done; a delete meanwhile (or `force`) makes it take everything back at once.
   */
  async function releaseAll(of: Lease, started: boolean, force = false): Promise<Map<string, Record<string, unknown>>> {
    const allocations = new Map<string, Record<string, unknown>>();
    for (const reservation of of.reservations) {
      if (reservation.status === 'deleted') continue;
      const ctx = { ...context(of, reservation), started, force };
      let outcome: EndOutcome | undefined = await mustFinish.endReservation(ctx);
      if (outcome?.waitingFor) outcome = await waitForEnd(ctx, outcome); // (histories from before end outcomes carry none)
      if (outcome?.allocation) allocations.set(reservation.id, outcome.allocation);
    }
    return allocations;
  }

  /** Polls a waiting end hook until it is done; returns its last outcome. */
  async function waitForEnd(ctx: ReservationContext & { started: boolean; force: boolean }, outcome: EndOutcome): Promise<EndOutcome | undefined> {
    const show = (o: EndOutcome) => setCurrentDetails(describeWaitingForEnd(lease, o.waitingFor!));
    const intervalOf = (o: EndOutcome) => Math.min(Math.max(o.recheckAfterMs ?? 15_000, 1_000), 5 * 60_000);
    show(outcome);
    let next: EndOutcome | undefined = outcome;
    if (!ctx.force) {
      // Polled by retries of one activity until its owner lets go, unless a delete comes first.
      const scope = new CancellationScope();
      const done = scope.run(() => polling(intervalOf(outcome)).awaitReservationEnd(ctx));
      const deleted = condition(() => deletion !== 'none');
      if ((await Promise.race([done.then(() => 'done' as const), deleted.then(() => 'deleted' as const)])) === 'done') return undefined;
      scope.cancel();
      await done.catch(() => undefined);
      next = await mustFinish.endReservation({ ...ctx, force: true });
    }
    // Forced: nothing waits for its owner any more, only for what cannot be hurried (servers being deleted).
    while (next?.waitingFor) {
      show(next);
      await sleep(intervalOf(next));
      next = await mustFinish.endReservation({ ...ctx, force: true });
    }
    return next;
  }

  /** Back-to-back leases on the same resources: wait until every earlier lease on them has ended, unless this one is deleted meanwhile. */
  async function waitForPredecessors(): Promise<'ready' | 'deleted'> {
    const keys = leaseResourceKeys(lease);
    if (keys.length === 0) return 'ready';
    // A delete used to wait for the predecessors to end (it needs the lock this wait holds).
    const deleteInterrupts = patched('delete-interrupts-predecessor-wait');
    for (;;) {
      if (deleteInterrupts && deletion !== 'none') return 'deleted';
      const waiting = (await recording.findPredecessors({ leaseId: lease.id, keys, startMs: lease.startMs })).filter((id) => !endedPredecessors.has(id));
      if (waiting.length === 0) return 'ready';
      setCurrentDetails(describeWaitingForPredecessors(waiting));
      await condition(() => waiting.every((id) => endedPredecessors.has(id)) || (deleteInterrupts && deletion !== 'none'), PREDECESSOR_RECHECK_MS, {
        summary: 'until earlier leases end',
      });
    }
  }

  /**
   * Tells the later leases on the same resources that this one has ended. Since the patch, only
   * those already waiting (STARTING), and only after this lease's end is recorded: a later lease
   * that reads its predecessors before that record is STARTING before this query runs, so it is
   * told; one that reads after it sees this lease ended. Leases still PENDING find out from the
   * table when their start comes. Telling every later lease made deleting N leases on a host cost
   * N² signals (issue 23).
   */
  async function notifySuccessors(): Promise<void> {
    const keys = leaseResourceKeys(lease);
    if (keys.length === 0) return;
    const waitingOnly = patched(TELL_WAITING_SUCCESSORS);
    const successors = await recording.findSuccessors({ leaseId: lease.id, keys, startMs: lease.startMs, ...(waitingOnly ? { waitingOnly } : {}) });
    for (const id of successors) {
      try {
        await getExternalWorkflowHandle(leaseWorkflowId(id)).signal(predecessorEnded, lease.id);
      } catch (err) {
        // A later lease that finished meanwhile (deleted) has nothing to wait for: not an error.
        if (waitingOnly) log.debug('a later lease was gone before it could be told', { successor: id, error: failureMessage(err) });
        else log.warn('could not tell a later lease that this one ended', { successor: id, error: failureMessage(err) });
      }
    }
  }

  /** Changes the lease, marks an event, and records it everywhere (PostgreSQL, search attributes, Web UI). */
  async function transition(change: Partial<Lease>, eventType?: EventType, eventStatus?: Lease['events'][number]['status']): Promise<void> {
    const now = Date.now();
    const next: Lease = { ...lease, ...change };
    if (eventType && eventStatus) {
      next.events = next.events.map((e) => {
        if (e.event_type !== eventType) return e;
        return eventStatus === 'IN_PROGRESS' ? { ...e, status: eventStatus, startedAt: now } : { ...e, status: eventStatus, finishedAt: now };
      });
    }
    try {
      await record(next);
    } catch (err) {
      // A state that cannot be stored (refused by the database, or failing record after record) must not stop the
      // lease's life: the end must still free its resources. It carries on unrecorded; the row keeps the last state
      // stored, and a delete still removes it. (Before the patch a record never failed: it was retried for ever.)
      if (isCancellation(err) || !patched('transition-survives-failed-record')) throw err;
      log.error('a lease transition could not be recorded', { leaseId: lease.id, status: next.status, error: failureMessage(err) });
      lease = { ...next, version: lease.version + 1, updatedMs: Date.now() };
    }
  }

  /**
   * Runs a compensation (freeing or putting back bookings after a failure). Should it fail too, the
   * failure is logged and the original error is what the caller gets (before the patch the
   * compensation's error replaced it).
   */
  async function compensate(what: string, undo: () => Promise<unknown>): Promise<void> {
    try {
      await undo();
    } catch (err) {
      if (isCancellation(err) || !patched('compensation-keeps-original-error')) throw err;
      log.error(`${what} failed`, { leaseId: lease.id, error: failureMessage(err) });
    }
  }

  /** Histories from before the patch recorded transitions with (remote) activities. */
  function recorder() {
    return patched('record-locally') ? recordingLocally : recording;
  }

  /**
   * Writes `next` (one version up) to PostgreSQL, then makes it the lease. `policy`: a change a user
   * asked for, checked against the usage policy in the same transaction (refused: nothing written).
   */
  async function record(next: Lease, phase: 'admission' | 'life' = 'life', policy?: RecordPolicy): Promise<void> {
    const versioned: Lease = { ...next, version: lease.version + 1, updatedMs: Date.now() };
    await (phase === 'admission' ? quick : recorder()).recordLease(versioned, ...(policy ? [policy] : []));
    lease = versioned;
    upsertSearchAttributes([
      { key: LeaseStatusKey, value: lease.status },
      { key: ProjectIdKey, value: lease.projectId },
      { key: LeaseStartKey, value: new Date(lease.startMs) },
      { key: LeaseEndKey, value: new Date(lease.endMs) },
      { key: ResourceTypesKey, value: leaseResourceTypes(lease) },
    ]);
    setCurrentDetails(describe(lease));
  }
}

// ─── Helpers (pure) ────────────────────────────────────────────────────────────────────────────


/** Reservations with what their hooks reported merged into their allocations. */
function withAllocations(reservations: Reservation[], allocations: Map<string, Record<string, unknown>>): Reservation[] {
  return reservations.map((r) => (allocations.has(r.id) ? { ...r, allocation: { ...r.allocation, ...allocations.get(r.id) } } : r));
}

/** The reservation as its type's heal hook reports it now (flags present only when set). */
function healed(reservation: Reservation, outcome: HealOutcome): Reservation {
  let next: Reservation = {
    ...reservation,
    allocation: { ...reservation.allocation, ...outcome.allocation },
    resourceKeys: outcome.resourceKeys ?? reservation.resourceKeys,
  };
  next = outcome.missingResources ? { ...next, missing_resources: true } : withoutFlag(next, 'missing_resources');
  return outcome.resourcesChanged ? { ...next, resources_changed: true } : withoutFlag(next, 'resources_changed');
}

function withoutFlag(reservation: Reservation, flag: 'missing_resources' | 'resources_changed'): Reservation {
  if (!(flag in reservation)) return reservation;
  const copy = { ...reservation };
  delete copy[flag];
  return copy;
}

function leaseResourceKeys(lease: Lease): string[] {
  return [...new Set(lease.reservations.flatMap((r) => r.resourceKeys ?? []))];
}
