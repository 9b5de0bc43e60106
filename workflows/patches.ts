/**
 * Every `patched()` id the workflows use, in one place: what changed, when, what the old branch
 * still does for histories recorded before, and how the patch goes away (docs/development.md,
 * "Patch policy"). Workflow code names a patch by its entry here, never by a string literal;
 * `npm run patches` counts, for each, the running workflows that started before its date.
 */
import { leaseWorkflowType } from './lease/messages';
import { noticeWorkflowType } from './notices/messages';
import { powerPlannerWorkflowType } from './power-planner/messages';

export interface WorkflowPatch {
  /** The id given to patched() (recorded as a marker in every history that took the new branch). */
  readonly id: string;
  /** The workflow type whose histories carry it. */
  readonly workflowType: typeof leaseWorkflowType | typeof noticeWorkflowType | typeof powerPlannerWorkflowType;
  /** When it came into the code (YYYY-MM-DD, UTC): workflows started before then may take the old branch. */
  readonly introduced: string;
  /** What the old branch does (still run when a history recorded before the patch replays). */
  readonly oldBranch: string;
  /** The kept histories in test/histories that replay the old branch. */
  readonly oldHistories: string;
  /** When the patch's workflows can be expected gone, where that is known. */
  readonly note?: string;
}

/** The common retirement path (docs/development.md, "Patch policy"). */
export const RETIREMENT =
  'once `npm run patches` counts 0 for a patch on every deployment and no kept history in test/histories needs its old branch, patched(X.id) becomes deprecatePatch(X.id) and the old branch goes; once no running workflow started before that, the call and the entry go and the histories are re-recorded';

/** Transitions are recorded by local activities (one workflow task per transition instead of three). */
export const RECORD_LOCALLY = {
  id: 'record-locally',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-21',
  oldBranch: 'transitions and the delete recorded by (remote) activities',
  oldHistories: '<scenario>@2026-11-21-remote-records.json and older',
} as const satisfies WorkflowPatch;

/** A delete no longer waits for the earlier leases on the same resources to end. */
export const DELETE_INTERRUPTS_PREDECESSOR_WAIT = {
  id: 'delete-interrupts-predecessor-wait',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-21',
  oldBranch: 'a lease waiting for its predecessors (STARTING) waited for them even once deleted',
  oldHistories: '<scenario>@2026-11-21-hold.json and older',
} as const satisfies WorkflowPatch;

/** A lease tells only the later leases that wait for it, after recording its own end (issue 23). */
export const TELL_WAITING_SUCCESSORS = {
  id: 'tell-waiting-successors-after-record',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-23',
  oldBranch: 'every later lease on the same resources told, before the end was recorded; none told after a failed start or end',
  oldHistories: '<scenario>@2026-11-22-tell-every-successor.json and older',
} as const satisfies WorkflowPatch;

/** A state that cannot be recorded no longer stops the lease's life: it carries on unrecorded. */
export const TRANSITION_SURVIVES_FAILED_RECORD = {
  id: 'transition-survives-failed-record',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-23',
  oldBranch: 'a failed record failed the transition',
  oldHistories: 'none: only a failure reaches this step, and no kept history has one there',
} as const satisfies WorkflowPatch;

/** A compensation that fails is logged; the caller gets the original error. */
export const COMPENSATION_KEEPS_ORIGINAL_ERROR = {
  id: 'compensation-keeps-original-error',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-23',
  oldBranch: "the compensation's error replaced the original one",
  oldHistories: 'none: only a failure reaches this step, and no kept history has one there',
} as const satisfies WorkflowPatch;

/** A failed update puts the bookings back once, all of them as they were, retried as cleanups are. */
export const ONE_ROLLBACK_FOR_UPDATES = {
  id: 'one-rollback-for-updates',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-23',
  oldBranch: 'the bookings already moved went back twice (in the booking, then in the rollback, with quick retries)',
  oldHistories: 'none: only a failure reaches this step, and no kept history has one there',
} as const satisfies WorkflowPatch;

/** A delete is answered once the lease is gone (bookings freed, row removed), as Blazar's delete is synchronous. */
export const DELETE_ANSWERED_WHEN_GONE = {
  id: 'delete-answered-when-gone',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-23',
  oldBranch: 'a delete answered as soon as the deletion began (DELETING)',
  oldHistories: '<scenario>@2026-11-23-delete-answered-early.json and older',
} as const satisfies WorkflowPatch;

/** The lease announces its events (webhooks, oslo.messaging) and tells Blazar's external filter its end. */
export const LEASE_NOTICES = {
  id: 'lease-notices',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-25',
  oldBranch: 'no notices, and the external filter not told of the end',
  oldHistories: '<scenario>@2026-11-25-before-notices.json and older',
} as const satisfies WorkflowPatch;

/** An active lease warns its listeners before its end, at the offsets it asked for (`notify_before_end`). */
export const BEFORE_END_WARNINGS = {
  id: 'before-end-warnings',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-25',
  oldBranch: 'no warnings before the end',
  oldHistories: '<scenario>@2026-11-25-before-notices.json and older',
} as const satisfies WorkflowPatch;

/** An active lease nobody uses is warned (`lease.idle`), then ended early (LK_IDLE_LEASE_*). */
export const IDLE_LEASES = {
  id: 'idle-leases',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-25',
  oldBranch: 'no idle checks',
  oldHistories: '<scenario>@2026-11-25-notices-without-idle-limits.json and older',
} as const satisfies WorkflowPatch;

/** A project's webhook delivery may be held: the notice workflow waits on a timer and asks again. */
export const NOTICE_DELIVERY_HOLDS = {
  id: 'notice-delivery-holds',
  workflowType: noticeWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'each webhook delivered by one activity, retried until the retry span is over',
  oldHistories: 'notice-delivery@2026-11-27-before-holds.json',
  note: 'a notice workflow runs at most its retry span (LK_NOTICE_RETRY_HOURS, 24 h by default) after the deploy',
} as const satisfies WorkflowPatch;

/**
 * A failed update puts back only the bookings it moved (and the one that failed on new parameters):
 * none when the first re-booking, a window's move, failed (the old rollback then held the lease's
 * lock for nothing, up to a day, while the cloud its re-booking read was down).
 */
export const ROLLBACK_ONLY_MOVED = {
  id: 'rollback-only-moved-bookings',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'every reservation booked again for the old window, also when none had moved',
  oldHistories: 'none: only a failed update reaches this step, and no kept history has one',
} as const satisfies WorkflowPatch;

/**
 * A lease may wait for approval (PENDING_APPROVAL, issue 42): it waits for an admin's approve or
 * deny update, or its rule's timeout, before waiting for its start. Marked where the wait begins,
 * which only a lease admitted waiting for approval reaches.
 */
export const LEASE_APPROVAL = {
  id: 'lease-approval',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'no lease ever waited for approval (none was admitted as PENDING_APPROVAL)',
  oldHistories: 'every history recorded before 2026-11-27 (none reaches the wait: the branch only adds the wait)',
} as const satisfies WorkflowPatch;

/**
 * A change of an active lease may wait for approval (issue 42): a member's exception to a rule of
 * ours is booked at once while the lease goes on as it was; an admin's approve applies it (the end
 * timer moves), a deny, the timeout or the current end puts the bookings back. Marked where the
 * record answers a pending change, which only an update sent with a justification after this date reaches.
 */
export const LEASE_CHANGE_APPROVAL = {
  id: 'lease-change-approval',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'no change of an active lease ever waited (the record refused it instead, as before)',
  oldHistories: 'every history recorded before 2026-11-27 (none reaches it: the branch only adds the wait)',
} as const satisfies WorkflowPatch;

/**
 * Preemptible leases (issue 43): a preempted lease takes its new end, says why and tells its
 * lessee (leasePreempted signal, workflows/lease/preempt.ts); a lease's start waits for preempted
 * predecessors at most LK_PREEMPT_EVICTION_SECONDS (neighbours.ts). Marked where a preemption is
 * applied, and where a start finds earlier leases still on its resources.
 */
export const LEASE_PREEMPTION = {
  id: 'lease-preemption',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'no lease was ever preempted (none got the signal); a start waited for every earlier lease on its resources without bound',
  oldHistories: 'every history recorded before 2026-11-27 (those waiting for earlier leases replay the unbounded wait)',
  note: 'retired by the common path (RETIREMENT): the old branch ignores the signal and waits without bound, so it goes once no lease started before 2026-11-27 still waits for its start. The new branch itself changed after its first histories were recorded (the latest cut kept, a cut after an update skipped, an end instead of a start when the cut leaves nothing, the early wake of a start; a waiting change denied through the common settle, its bookings put back by a quick, bounded activity for the moved reservations only, none once the cut has passed): all on 2026-11-27, before any release, so it is not patched again; dev and test stacks holding leases opened under its first version must be reset',
} as const satisfies WorkflowPatch;

/**
 * Lending (issue 43): the owner of an active host lease lends idle hosts to preemptible leases and
 * reclaims them (the lend and reclaim updates, workflows/lease/lend.ts); the active loop takes lent
 * hosts back when their lending ends or their reclaim's return comes (a `lendingReturn` event); the
 * idle check of a lease that could lend looks at its idle hosts (`lease.lend_suggested`). Marked at
 * the top of both handlers, where the active loop adds the event (only a lease that lent reaches
 * it), and in the idle check before the new look (only a host lease with an idle warning set).
 */
export const LEASE_LENDING = {
  id: 'lease-lending',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-27',
  oldBranch: 'no lending event in the active loop (no lease lent: none got the lend update); idle checks asked only whether the lease was in use',
  oldHistories: 'every history recorded before 2026-11-27 (none has a lending; those with idle checks replay without the idle-hosts look)',
  note: 'retired by the common path (RETIREMENT) once no lease active before the release still runs',
} as const satisfies WorkflowPatch;

/**
 * A reclaim of all with a need sooner than the return of hosts already being reclaimed brings them
 * back sooner (issue 43), also when nothing is left lent: the reclaim handler's check lets it through
 * where it answered 409 "lends no host now" before. Marked in the reclaim handler.
 */
export const RECLAIM_SOONER = {
  id: 'reclaim-sooner',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'a reclaim with nothing left lent failed with 409, whatever its need',
  oldHistories: 'lent-and-reclaimed@2026-11-27-local-lend.json (its one reclaim had a host lent: both branches take it)',
  note: 'retired by the common path (RETIREMENT) once no lease that reclaimed before the deploy still runs',
} as const satisfies WorkflowPatch;

/**
 * A lend runs as a regular activity (issue 43): its time fits the hosts asked, it heartbeats per host
 * fenced, and an attempt given up on stops fencing (workflows/lease/activity-options.ts `forLend`).
 * Marked in the lend handler before its activity.
 */
export const LEND_AS_ACTIVITY = {
  id: 'lend-as-activity',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'the lend ran as a local activity (20 s, 3 tries), whatever the count',
  oldHistories: 'lent-and-reclaimed@2026-11-27-local-lend.json (lent-and-reclaimed.json takes the new branch)',
  note: 'retired by the common path (RETIREMENT) once no lend begun before the deploy can replay (a lend is answered within the REST call: hours after the deploy)',
} as const satisfies WorkflowPatch;

/**
 * A lend or reclaim whose activity failed after it acted (its answer lost) is reconciled with the
 * calendar (issue 43): what the lend request lent, by its lending id, is recorded as lent; hosts a
 * reclaim took back are recorded as reclaiming; the update then answers the lease. A lend that lent
 * nothing runs a put-back of the hosts its tries left fenced (putBackFencedHosts) before its error is
 * answered. Marked in the lend's and the reclaim's failure handlers (a refusal answers as before, unmarked).
 */
export const LENDING_RECONCILED = {
  id: 'lending-reconciled',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'the failure was answered, whatever the calendar held: the record stayed behind it',
  oldHistories: 'none: only a lend or reclaim whose activity failed reaches it, and no kept history has one',
  note: 'retired by the common path (RETIREMENT) once no lease that lent before the deploy still runs',
} as const satisfies WorkflowPatch;

/**
 * A failed hold of a reservation whose start makes the same resources again (`holdRedoneAtStart`:
 * an instance reservation's flavor, server group and aggregate) leaves the lease PENDING with a
 * status_reason, for its start to try again, instead of ERROR with every booking freed. Marked in
 * the hold's failure, only for such a reservation.
 */
export const HOLD_FAILURE_LEFT_TO_START = {
  id: 'hold-failure-left-to-start',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'a failed hold freed every booking and ended the lease in ERROR, whatever its type',
  oldHistories: 'none kept: no history in test/histories has a failed hold (the old branch is only what a worker of before 2026-11-28 recorded)',
  note: 'retired by the common path (RETIREMENT) once no lease admitted before 2026-11-28 is still PENDING with its hold due',
} as const satisfies WorkflowPatch;

/**
 * An update of a preemptible lease refused for capacity (409) while a cut of it was owed and not
 * applied (issue 43: the cut committed, its tell not yet handled) reads the lease's latest cut (a
 * local activity with a few tries: the refusal answers if it fails), applies it as its tell would,
 * and tries again once on the lease as cut: an update that moves
 * nothing no longer answers 409 for the moments before the tell, and the rollback of the first try
 * books nothing past the cut. Marked there, only for such a refusal.
 */
export const UPDATE_AFTER_OWED_CUT = {
  id: 'update-after-owed-cut',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'the refused update answered its 409 at once, the cut applied only when its tell came',
  oldHistories: 'none kept: no history in test/histories has a preemptible lease refused an update',
  note: 'retired by the common path (RETIREMENT) once no preemptible lease admitted before 2026-11-28 still runs',
} as const satisfies WorkflowPatch;

/**
 * The power planner's looks start each host's action without awaiting it (issue 48, the review):
 * wakes first, each kind in lanes of its own, so that a hanging BMC never delays the next look's
 * wakes; the wakes awaited are kept in the database (settleHostPower, one activity per look, which
 * also enables again every host on and up that the planner had disabled), and hosts of unknown
 * power are read (readHostPower). Marked at each look.
 */
export const POWER_PLANNER_LANES = {
  id: 'power-planner-lanes',
  workflowType: powerPlannerWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'each look settled the woken hosts of its own list one activity each, then ran the power-offs, then the wakes, awaiting each batch',
  oldHistories: 'power-planner.json',
  note: 'retired by the common path (RETIREMENT) once the planner has continued as new after the deploy (at most LOOKS_PER_RUN looks, or when Temporal suggests it; terminating it makes the next worker start it afresh)',
} as const satisfies WorkflowPatch;

/**
 * A lease's start asks each reservation why it will wait, if it will (issue 48: a host woken for it
 * still booting; the physical-host start waits for it until its boot deadline), and shows the answer
 * as its status_reason while it starts. Marked at every start (a local activity per reservation).
 */
export const START_SHOWS_BOOT_WAIT = {
  id: 'start-shows-boot-wait',
  workflowType: leaseWorkflowType,
  introduced: '2026-11-28',
  oldBranch: 'the start asked nothing before starting its reservations: no status_reason while its hosts booted (the start hook waits all the same, being activity code)',
  oldHistories: 'every history recorded before 2026-11-28 (their starts replay without the question)',
  note: 'retired by the common path (RETIREMENT) once no lease admitted before the deploy is still waiting for its start',
} as const satisfies WorkflowPatch;

/** All of them, oldest first. */
export const PATCHES: readonly WorkflowPatch[] = [
  RECORD_LOCALLY,
  DELETE_INTERRUPTS_PREDECESSOR_WAIT,
  TELL_WAITING_SUCCESSORS,
  TRANSITION_SURVIVES_FAILED_RECORD,
  COMPENSATION_KEEPS_ORIGINAL_ERROR,
  ONE_ROLLBACK_FOR_UPDATES,
  DELETE_ANSWERED_WHEN_GONE,
  LEASE_NOTICES,
  BEFORE_END_WARNINGS,
  IDLE_LEASES,
  NOTICE_DELIVERY_HOLDS,
  ROLLBACK_ONLY_MOVED,
  LEASE_APPROVAL,
  LEASE_CHANGE_APPROVAL,
  LEASE_PREEMPTION,
  LEASE_LENDING,
  RECLAIM_SOONER,
  LEND_AS_ACTIVITY,
  LENDING_RECONCILED,
  HOLD_FAILURE_LEFT_TO_START,
  UPDATE_AFTER_OWED_CUT,
  POWER_PLANNER_LANES,
  START_SHOWS_BOOT_WAIT,
];
