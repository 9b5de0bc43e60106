/**
 * `POST /v1/policy/check` (an extension): a dry run of a create (its body) or of a change
 * (`lease_id` and the update's fields). Answers every usage-policy rule in force with its figures,
 * whether the lease fits the calendar now, and, when it would be refused, what would work instead
 * (offers, bounded as `POST /v1/offers`). Nothing is booked and no lock is taken; Blazar's external
 * filter is not asked (admission asks it). Members check for their own project. An admin's check
 * of another project (`project_id`, or a lease of it) is evaluated as a member of that project would
 * be (its rules, without the admins' exemptions and admin-only options): what the dry run is for; of
 * their own project, as the admin. The answer says which (`as`). A lease that would wait for an
 * admin's approval (an approval rule, or an exception to a refusing rule asked with `justification`)
 * is `decision: "approval"`, decided as admission decides it (approvalNeedOf).
 */
import { randomUUID } from 'node:crypto';
import { Router, type Request } from 'express';
import { z } from 'zod';
import { applyLeaseUpdate, bookingChanged, isUuid, newLease, type Lease, type LeaseUpdateRequest } from '../domain/lease';
import { footprintOf } from '../domain/usage';
import { searchLease } from '../domain/fit-search';
import { formatRequestDate, wholeMinuteDown } from '../domain/dates';
import { findLease } from '../db/leases';
import { projectIdSchema } from '../policy/rules';
import type { PolicyRefusal, RuleEvaluation } from '../domain/usage-policy';
import type { ApprovalNeed } from '../domain/approval';
import type { UsagePolicyEnforcer } from '../policy/enforcement';
import { identityOf, type Identity } from './auth';
import { ApiError, parseRequest } from './errors';
import { createLeaseSchema, newLeaseRequest, updateLeaseSchema } from './lease-schemas';
import { admitsInApi } from './admission';
import { changedReservation, refuseAdminOnlyPolicies, updateOffers, type NewLeaseDeps } from './leases';
import { DEFAULT_OFFER_LIMIT, draftLease, makeOffers, neverFits, type OfferJson } from './offers';
import { refuseUnknownPropertyKeys } from './property-keys';
import { occurrenceRequests } from './series';

/** What the check answers. */
export interface PolicyCheckAnswer {
  /** `approval`: admitted, but recorded PENDING_APPROVAL until an admin answers (or the timeout does). */
  decision: 'admit' | 'approval' | 'refuse';
  /** Whose view the rules were evaluated in: a member's (admins' exemptions not applied) or the admin's. */
  as: 'member' | 'admin';
  rules: RuleEvaluation[];
  fits: boolean | null;
  offers: OfferJson[];
  offers_note?: string;
  /** The approval the lease would wait for (decision `approval`). */
  approval?: ApprovalJson;
  /** The refusal a justification turns into an exception waiting for approval. */
  exception?: { rule: string; message: string };
}

interface ApprovalJson {
  kind: ApprovalNeed['kind'];
  /** The approval rule's condition (`approval.hosts_over`…) or, for an exception, the refusing rule. */
  rule: string;
  reason: string;
  timeout_minutes: number;
  on_timeout: ApprovalNeed['onTimeout'];
  /** A series: how many of its occurrences would wait. */
  occurrences?: number;
}

const scopeSchema = z.object({ project_id: projectIdSchema.optional(), lease_id: z.string().max(64).optional() }).loose();

export function policyCheckRouter(deps: NewLeaseDeps): Router {
  const router = Router();
  const createSchema = createLeaseSchema(deps.types, deps.maxReservationsPerLease);

  router.post('/policy/check', async (req, res) => {
    const caller = identityOf(res);
    const raw = bodyOf(req);
    const { project_id: projectId, lease_id: leaseId, ...rest } = parseRequest(scopeSchema, raw);
    if (projectId !== undefined && !caller.isAdmin && projectId !== caller.projectId) throw new ApiError(403, "Policy doesn't allow blazar:policy:check to be performed: members check their own project only.");
    const policy = deps.offers?.usagePolicy;
    if (!policy || !deps.offers) throw new ApiError(503, 'the usage policy is not available in this deployment');
    if (leaseId !== undefined) {
      const current = isUuid(leaseId) ? await findLease(deps.pool, leaseId.toLowerCase()) : undefined;
      if (!current || (!caller.isAdmin && current.projectId !== caller.projectId)) throw new ApiError(404, `Object with {'lease_id': '${leaseId}'} not found`);
      res.json(await checkChange(deps, viewOf(caller, current.projectId), current, rest));
      return;
    }
    const identity = viewOf(caller, projectId ?? caller.projectId);
    const body = parseRequest(createSchema, rest);
    refuseAdminOnlyPolicies(identity, 'blazar:leases:post', body.reservations?.map((r) => r.params));
    // A series: every occurrence, each with the earlier ones counted as its admission counts them.
    const requests = body.recurrence !== undefined ? occurrenceRequests(deps, identity, body, randomUUID()).map((o) => o.request) : [newLeaseRequest(deps, identity, body, randomUUID())];
    requests.forEach((r) => newLease(r)); // Blazar's date rules (400)
    await refuseUnknownPropertyKeys(deps.types, identity, body.reservations ?? []);
    const drafts = requests.map((r) => draftLease(deps.types, r));
    const { draft, evaluations, refusal, fits, approvals, mayPreempt } = await checkOccurrences(deps, identity, drafts, body.justification);
    const request = requests[drafts.indexOf(draft)];
    const admit = !refusal && fits;
    const found = admit
      ? { offers: [] }
      : await makeOffers(deps.offers, identity, {
          reservations: request.reservations.map((r) => ({ resource_type: r.resource_type, params: r.params })),
          mins: [],
          startMs: Math.max(draft.startMs, wholeMinuteDown(Date.now())),
          durationMs: draft.endMs - draft.startMs,
          minDurationMs: draft.endMs - draft.startMs,
          limit: DEFAULT_OFFER_LIMIT,
          mayPreempt,
        });
    const approval = admit && approvals.length > 0 ? { need: approvals[0], occurrences: body.recurrence !== undefined ? approvals.length : undefined } : undefined;
    res.json({ ...answer(identity, admit, evaluations, fits, found, policy, approval), ...(body.recurrence !== undefined ? { occurrences: drafts.length, occurrence: { name: draft.name, start_date: formatRequestDate(draft.startMs), end_date: formatRequestDate(draft.endMs) } } : {}) });
  });

  return router;
}

/**
 * The leases of a create checked one after another (one, or a series's occurrences, each with the
 * earlier ones counted): the first the policy refuses (no exception asked) or the calendar has no
 * room for, with its figures, else the last (whose figures count them all). `approvals`: what each
 * occurrence admitted would wait for, in order (an approval rule's, or an exception to a refusal).
 */
async function checkOccurrences(deps: NewLeaseDeps, identity: Identity, drafts: Lease[], justification: string | undefined) {
  const policy = deps.offers!.usagePolicy!;
  const approvals: ApprovalNeed[] = [];
  let checked: { draft: Lease; evaluations: RuleEvaluation[]; refusal?: PolicyRefusal; fits: boolean; mayPreempt: boolean } | undefined;
  for (const [i, draft] of drafts.entries()) {
    const subject = { next: draft, byAdmin: identity.isAdmin, justification };
    const { evaluations, refusal } = await policy.evaluate(deps.pool, subject, drafts.slice(0, i));
    const need = await policy.approvalNeedOf(deps.pool, subject, refusal);
    // As its create would book: counting preemptible bookings as free where it may cut them (issue 43).
    const mayPreempt = need === undefined && deps.admission !== undefined && admitsInApi(deps.admission, draft);
    const search = await searchLease(deps.types, identity.projectId, draft.reservations, draft.startMs, draft.endMs - draft.startMs, deps.provisioningLeadMs, { mayPreempt }).catch(neverFits);
    // A refusal turned into an exception admits the occurrence (waiting): the series goes on.
    checked = { draft, evaluations, refusal: need ? undefined : refusal, fits: search.longestMs >= draft.endMs - draft.startMs, mayPreempt };
    if (checked.refusal || !checked.fits) break;
    if (need) approvals.push(need);
  }
  return { ...checked!, approvals };
}

/** The dry run of a change to `current` (a PUT's body). */
async function checkChange(deps: NewLeaseDeps, identity: Identity, current: Lease, body: Record<string, unknown>): Promise<PolicyCheckAnswer> {
  const policy = deps.offers!.usagePolicy!;
  const parsed = parseRequest(updateLeaseSchema, body);
  refuseAdminOnlyPolicies(identity, 'blazar:leases:put', parsed.reservations);
  const changed = parsed.reservations?.map((change, i) => changedReservation(current, change, i, deps.types));
  await refuseUnknownPropertyKeys(deps.types, identity, changed ?? []);
  const update: LeaseUpdateRequest = { name: parsed.name, start: parsed.start_date, end: parsed.end_date, beforeEnd: parsed.before_end_date, reservations: changed?.map(({ id, params }) => ({ id, params })), byAdmin: identity.isAdmin };
  const applied = applyLeaseUpdate(current, update, Date.now()); // Blazar's update rules (400)
  // Reservations whose parameters change hold what their type tells from the new parameters.
  const next: Lease = {
    ...applied,
    reservations: applied.reservations.map((r) => (changed?.some((c) => c.id === r.id) ? { ...r, allocation: undefined, footprint: deps.types.get(r.resource_type)?.offers?.footprint?.(r.params) ?? footprintOf({ ...r, allocation: undefined, footprint: undefined }) } : r)),
  };
  if (!bookingChanged(current, next)) return answer(identity, true, [], true, { offers: [] }, policy);
  const subject = { next, previous: current, byAdmin: identity.isAdmin, justification: parsed.justification };
  const { evaluations, refusal } = await policy.evaluate(deps.pool, subject);
  const need = await policy.approvalNeedOf(deps.pool, subject, refusal);
  const fits = await changeFits(deps, current, next, Boolean(changed));
  const admit = (!refusal || need !== undefined) && fits !== false;
  const found = admit ? { offers: [] } : await updateOffers(deps, identity, current, update, changed, refusal?.details.latest_end);
  return answer(identity, admit, evaluations, fits, found, policy, admit && need ? { need } : undefined);
}

/**
 * Whether the change fits the calendar now: a shortening always does; an extension of the same
 * resources, up to the latest end their types allow (null when a type cannot tell); anything else
 * searched anew, the lease's own bookings counted as taken (it may say no where the update would move).
 */
async function changeFits(deps: NewLeaseDeps, current: Lease, next: Lease, paramsChanged: boolean): Promise<boolean | null> {
  if (!paramsChanged && next.startMs >= current.startMs && next.endMs <= current.endMs) return true;
  if (!paramsChanged && next.startMs === current.startMs) {
    const types = [...new Set(current.reservations.map((r) => r.resource_type))].map((t) => deps.types.get(t));
    if (types.some((t) => !t?.latestEnd)) return null;
    const ends = await Promise.all(types.map((t) => t!.latestEnd!(current.id)));
    return ends.every((end) => end === undefined || end >= next.endMs);
  }
  const search = await searchLease(deps.types, next.projectId, next.reservations, next.startMs, next.endMs - next.startMs, deps.provisioningLeadMs).catch(neverFits);
  return search.longestMs >= next.endMs - next.startMs;
}

/** Whom the check is evaluated as: an admin checking another project, as a member of it; else the caller. */
function viewOf(caller: Identity, projectId: string): Identity {
  return caller.isAdmin && projectId !== caller.projectId ? { ...caller, projectId, isAdmin: false } : { ...caller, projectId };
}

/** `approval`: what the admitted lease would wait for (a series: the first occurrence's, and how many wait). */
function answer(identity: Identity, admit: boolean, rules: RuleEvaluation[], fits: boolean | null, found: { offers: OfferJson[]; note?: string }, policy: UsagePolicyEnforcer, approval?: { need: ApprovalNeed; occurrences?: number }): PolicyCheckAnswer {
  const base = { as: identity.isAdmin ? ('admin' as const) : ('member' as const), rules, fits, offers: found.offers, ...(found.note ? { offers_note: found.note } : {}) };
  if (!admit) return { decision: 'refuse', ...base };
  if (!approval) return { decision: 'admit', ...base };
  const { need, occurrences } = approval;
  return {
    decision: 'approval',
    ...base,
    approval: { kind: need.kind, rule: need.rule, reason: need.reason, timeout_minutes: policy.timeoutMinutesOf(need), on_timeout: need.onTimeout, ...(occurrences !== undefined ? { occurrences } : {}) },
    ...(need.kind === 'exception' ? { exception: { rule: need.rule, message: need.reason } } : {}),
  };
}

function bodyOf(req: Request): Record<string, unknown> {
  if (req.body === undefined || req.body === null || typeof req.body !== 'object' || Array.isArray(req.body)) throw new ApiError(400, 'expected a JSON object body (Content-Type: application/json)');
  return req.body as Record<string, unknown>;
}
