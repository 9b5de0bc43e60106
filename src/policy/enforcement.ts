/**
 * The usage policy at work: the rules in force for a project (environment, LK_POLICY_FILE, what
 * admins set over the API), checked with the project's other leases when a lease is recorded after
 * a change a user asked for, in the record's own transaction under the project's lock, so that two
 * admissions never both take the last of a limit. Blazar's external filter, when configured, is
 * asked first (it may take seconds: never under the lock).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { PoolClient } from 'pg';
import { inTransaction } from '../db/transaction';
import type { Pool } from '../db/pool';
import { liveLeaseCount, projectLeasesHeldWithin, projectLeasesStartingAfter, projectLeasesWithin } from '../db/leases';
import { lockProjectPolicy, projectRules } from '../db/usage-policy';
import { countLiveOfferHolds } from '../db/offer-holds';
import { approvalRuleNeed, bookedHostIds, countedWithWaitingChange, isExtensionOnly, namesHostClass, ONLY_EXTENSIONS_WAIT, type ApprovalNeed } from '../domain/approval';
import { hostPropertiesOf, listHosts } from '../db/hosts';
import { bookingChanged, LeaseErrorType, notStarted, type Lease } from '../domain/lease';
import { ledgerRange, memberBudgetShape, offerHoldRefusal, policyEvaluation, policyRefusal, ruleApplies, type PolicyRefusal, type PolicySubject, type ProjectLedger, type RuleEvaluation, type RuleName, type UsagePolicy } from '../domain/usage-policy';
import { FAIR_SHARE_LEDGER_CAP, fairShareSpans, type FairShareLedger } from '../domain/fair-share';
import type { MeteredLease } from '../domain/usage';
import { matchesQuery, parsePropertyQuery } from '../domain/property-query';
import { PolicyDeniedError, type ExternalServiceFilter, type PolicyContext } from './external-filter';
import { approvalPolicyOf, effectiveRules, rulesSchema, toUsagePolicy, type PolicyFile, type PolicyRules } from './rules';

/** A change the usage policy refuses: carried to the API as its status and message. */
export class UsagePolicyRefusal extends Error {
  constructor(readonly refusal: PolicyRefusal) {
    super(refusal.message);
    this.name = 'UsagePolicyRefusal';
  }
}

/** The external policy service could not be asked and the deployment fails closed: try again later (503). */
export class PolicyServiceUnavailable extends Error {
  override readonly name = 'PolicyServiceUnavailable';
}

export interface UsagePolicyDeps {
  pool: Pool;
  /** The deployment's rules from the environment (LK_MAX_LEASE_DURATION_DAYS, LK_MAX_ADVANCE_DAYS). */
  base: PolicyRules;
  file: PolicyFile;
  external?: ExternalServiceFilter;
  /** What the external filter is told of the deployment (Keystone's URL, the region), as Blazar tells it. */
  externalContext?: PolicyContext;
  /** Told when the external filter could not be asked and the deployment fails open. */
  onFailedOpen?: (reason: string) => void;
  /** The most leases lead_time and stacking read each (FAIR_SHARE_LEDGER_CAP; lower in tests). */
  fairShareLedgerCap?: number;
  /** How long an approval timeout's minute lasts: 60 s, shorter in tests only (config's approvalMinuteMs). */
  approvalMinuteMs?: number;
  /** What a preemptible hour is charged for in the rules that count hours (LK_PREEMPTIBLE_CHARGE_FACTOR): required, so that no caller charges otherwise than the usage report. */
  preemptibleChargeFactor: number;
}

/** What the policy is asked about: the lease as it would be, as it was, by whom, and the exception asked for. */
export interface PolicyCheck {
  next: Lease;
  previous?: Lease;
  byAdmin: boolean;
  justification?: string;
}

/**
 * The policy's refusals as lease failures, final for the request: 403 (LeaseErrorType.policy), or
 * 400 for Blazar's max_lease_duration as Blazar answers it; 503 when the external filter could not
 * be asked and the deployment fails closed. Anything else is handed back as it is.
 */
export function policyFailure(err: unknown): unknown {
  if (err instanceof UsagePolicyRefusal) {
    const { refusal } = err;
    return ApplicationFailure.create({ type: refusal.status === 400 ? LeaseErrorType.invalid : LeaseErrorType.policy, message: refusal.message, nonRetryable: true, details: [refusal.details] });
  }
  if (err instanceof PolicyServiceUnavailable) return ApplicationFailure.nonRetryable(err.message, 'PolicyServiceUnavailable');
  return err;
}

/** A change of an active lease sent with a justification (only an extension may wait: isExtensionOnly). */
const justifiedActiveChange = (subject: PolicyCheck): boolean => subject.justification !== undefined && subject.previous?.status === 'ACTIVE' && subject.next.status === 'ACTIVE';

export class UsagePolicyEnforcer {
  private readonly externalContext: PolicyContext;

  constructor(private readonly deps: UsagePolicyDeps) {
    this.externalContext = deps.externalContext ?? {};
  }

  /** The rules in force for a project, layer by layer (the API shows them). */
  async rulesFor(db: Pool | PoolClient, projectId: string): Promise<{ effective: PolicyRules; layers: { deployment: PolicyRules; projectFile?: PolicyRules; project?: PolicyRules } }> {
    const stored = await projectRules(db, projectId);
    // Written through the API's schema; read through it again, so that a row edited by hand cannot break admissions.
    const parsed = stored ? rulesSchema.safeParse(stored.rules) : undefined;
    const project = parsed?.success ? parsed.data : undefined;
    const deployment = effectiveRules(this.deps.base, this.deps.file.defaults);
    const projectFile = this.deps.file.projects?.[projectId];
    return { effective: effectiveRules(deployment, projectFile, project), layers: { deployment, projectFile, project } };
  }

  /** The rules in force for a project as the check reads them, with the deployment's charge of preemptible hours. */
  private async policyFor(db: Pool | PoolClient, projectId: string): Promise<UsagePolicy> {
    return { ...toUsagePolicy((await this.rulesFor(db, projectId)).effective), preemptibleChargeFactor: this.deps.preemptibleChargeFactor };
  }

  /**
   * Records `next` with `record` if the policy allows the change from `previous` (none: admission);
   * throws UsagePolicyRefusal otherwise, with nothing recorded.
   */
  async recordWithinPolicy<T>(subject: PolicyCheck, record: (client: PoolClient, approval?: ApprovalNeed) => Promise<T>): Promise<T> {
    const { next, previous } = subject;
    // A rename, or an update that changes nothing booked, is never refused.
    if (previous && !bookingChanged(previous, next)) return inTransaction(this.deps.pool, (client) => record(client));
    await this.askExternalFilter(next, previous);
    return inTransaction(this.deps.pool, async (client) => record(client, await this.checkWithin(client, subject)));
  }

  /**
   * The rules' check inside the caller's transaction, which then records the change (the API's
   * admission, whose bookings are in the same transaction). When a rule counts the project's other
   * leases, it holds the project's policy lock until that transaction ends, so that concurrent
   * admissions of a project are checked one after the other. Throws UsagePolicyRefusal. It does not ask the external filter: a caller that checks
   * this way admits no lease while one is configured (asksExternalFilter). Answers the approval the
   * lease needs, if any (awaitingApproval stamps it): an approval rule's, or an exception to a
   * refusing rule when the change came with a justification.
   */
  async checkWithin(client: PoolClient, subject: PolicyCheck): Promise<ApprovalNeed | undefined> {
    // Only rules that count the project's other leases need them to stand still: then the lock.
    const refusal = await this.refusalOf(client, subject, () => lockProjectPolicy(client, subject.next.projectId));
    const approval = await this.approvalNeedOf(client, subject, refusal);
    if (refusal && !approval) throw new UsagePolicyRefusal(justifiedActiveChange(subject) && refusal.rule !== 'external' ? { ...refusal, message: `${refusal.message} (${ONLY_EXTENSIONS_WAIT})` } : refusal);
    return approval;
  }

  // --- Approval (issue 42) -----------------------------------------------------------------

  /**
   * The approval the change needs, given the refusal its rules found (none: admitted by them): an
   * exception to the refusal when sent with a justification, else the approval rule it meets. The
   * one decision of admission (checkWithin) and of the dry run (`POST /v1/policy/check`).
   */
  async approvalNeedOf(db: Pool | PoolClient, subject: PolicyCheck, refusal: PolicyRefusal | undefined): Promise<ApprovalNeed | undefined> {
    return refusal ? this.exceptionFor(db, subject, refusal) : this.approvalRuleNeed(db, subject);
  }

  /** An approval's timeout in the policy's minutes (what `approval[].timeout` and `exception_timeout` say). */
  timeoutMinutesOf(need: ApprovalNeed): number {
    return need.timeoutMs / (this.deps.approvalMinuteMs ?? 60_000);
  }

  /**
   * A member's exception: a lease not started, or an extension of an active lease (it then waits
   * as a pending change, the lease going on as it was; isExtensionOnly), refused by a rule of ours (not the external
   * filter's), sent with a justification.
   */
  private async exceptionFor(db: Pool | PoolClient, subject: PolicyCheck, refusal: PolicyRefusal): Promise<ApprovalNeed | undefined> {
    const activeChange = justifiedActiveChange(subject) && isExtensionOnly(subject.previous!, subject.next);
    if (subject.justification === undefined || refusal.rule === 'external' || !(notStarted(subject.next.status) || activeChange)) return undefined;
    const approval = approvalPolicyOf((await this.rulesFor(db, subject.next.projectId)).effective, this.deps.approvalMinuteMs);
    return { kind: 'exception', rule: refusal.rule, reason: refusal.message, justification: subject.justification, timeoutMs: approval.exceptionTimeoutMs, onTimeout: 'deny' };
  }

  /**
   * The approval rule a member's lease meets, checked at admission and when a lease not started
   * changes what it books (admins approve: their own leases never wait).
   */
  private async approvalRuleNeed(db: Pool | PoolClient, subject: PolicyCheck): Promise<ApprovalNeed | undefined> {
    const { next, previous, byAdmin } = subject;
    if (byAdmin || !notStarted(next.status) || (previous && !bookingChanged(previous, next))) return undefined;
    const policy = approvalPolicyOf((await this.rulesFor(db, next.projectId)).effective, this.deps.approvalMinuteMs);
    if (policy.rules.length === 0) return undefined;
    const hostProperties = namesHostClass(policy) ? await hostPropertiesOf(db, bookedHostIds(next)) : [];
    return approvalRuleNeed(policy, next, hostProperties);
  }

  /**
   * Whether the project may take one more offer hold, for the lease `draft` (booked in the caller's
   * transaction): max_offer_holds, counted under the project's lock so that two holds never both
   * take the last slot, then the rules the lease itself would meet at accept (a hold the accept
   * would refuse is never taken). Throws UsagePolicyRefusal.
   */
  async checkOfferHold(client: PoolClient, draft: Lease, byAdmin: boolean): Promise<ApprovalNeed | undefined> {
    await lockProjectPolicy(client, draft.projectId);
    const policy = await this.policyFor(client, draft.projectId);
    const holdRefusal = offerHoldRefusal(policy, { liveHolds: await countLiveOfferHolds(client, draft.projectId, Date.now()), byAdmin, next: draft });
    if (holdRefusal) throw new UsagePolicyRefusal(holdRefusal);
    return this.checkWithin(client, { next: draft, byAdmin });
  }

  /**
   * The rule the change would break, by the same check as checkWithin, without the project's lock
   * and without recording anything: a preview (offers), which the admission checks again.
   */
  wouldRefuse(db: Pool | PoolClient, subject: PolicyCheck): Promise<PolicyRefusal | undefined> {
    return this.refusalOf(db, subject);
  }

  /**
   * Every rule in force evaluated on the change, with its figures (`POST /v1/policy/check`): the
   * same reads as wouldRefuse, no lock, nothing recorded. `earlier`: leases counted as if recorded
   * beside the project's (a series's earlier occurrences, as its admission counts them).
   */
  async evaluate(db: Pool | PoolClient, subject: { next: Lease; previous?: Lease; byAdmin: boolean }, earlier: Lease[] = []): Promise<{ evaluations: RuleEvaluation[]; refusal?: PolicyRefusal }> {
    const { policy, full, ledger: recorded } = await this.ledgerOf(db, subject);
    const ledger = { ...recorded, others: [...recorded.others, ...earlier.map((lease) => ({ lease }))], liveLeases: recorded.liveLeases + earlier.length };
    return policyEvaluation(policy, full, ledger);
  }

  /** `lock`: taken before the project's other leases are read, when a rule counts them. */
  private async refusalOf(db: Pool | PoolClient, subject: PolicyCheck, lock?: () => Promise<void>): Promise<PolicyRefusal | undefined> {
    const { policy, full, ledger } = await this.ledgerOf(db, subject, lock);
    return policyRefusal(policy, full, ledger);
  }

  /** The rules in force for the change's project, and what of the project they read. */
  private async ledgerOf(db: Pool | PoolClient, subject: { next: Lease; previous?: Lease; byAdmin: boolean }, lock?: () => Promise<void>): Promise<{ policy: UsagePolicy; full: PolicySubject; ledger: ProjectLedger }> {
    const { next, previous } = subject;
    const policy = await this.policyFor(db, next.projectId);
    const full: PolicySubject = { ...subject, nowMs: Date.now() };
    const fairShare = policy.fairShare;
    // Rules an admin is exempt from read nothing (nor take the lock) for an admin's change.
    const applies = (rule: RuleName) => ruleApplies(policy, subject, rule);
    const readsLeadTime = Boolean(fairShare?.leadTime?.length) && applies('lead_time');
    const readsStacking = Boolean(fairShare?.stacking?.length) && applies('stacking');
    const readsMemberBudgets = fairShare?.memberBudgets !== undefined && applies('member_budget');
    const needsLedger = (Object.keys(policy.atOnce) as RuleName[]).some(applies) || (policy.budget !== undefined && applies('budget')) || readsMemberBudgets;
    const countsLeases = policy.maxLeases !== undefined && !previous && applies('max_leases');
    if (needsLedger || countsLeases || readsLeadTime || readsStacking) await lock?.();
    // The budgets and at-once rules read every lease in their periods, uncapped: a cap would drop the latest, those a new lease meets.
    // Members' budgets count in the project's budget period (a month when it has none).
    const range = ledgerRange(readsMemberBudgets ? { ...policy, budget: memberBudgetShape(policy) } : policy, full);
    const others = needsLedger ? (await projectLeasesWithin(db, next.projectId, range, next.id)).map(countedWithWaitingChange) : [];
    const liveLeases = countsLeases ? await liveLeaseCount(db, next.projectId, next.id) : 0;
    const classHosts = fairShare?.stacking?.length && readsStacking ? await stackingClassHosts(db, fairShare.stacking.map((s) => s.query)) : [];
    const shareLedger = fairShare && (await this.fairShareLedger(db, fairShare, full, classHosts, { leadTime: readsLeadTime, stacking: readsStacking }));
    return { policy, full, ledger: { others, liveLeases, ...(shareLedger ? { fairShare: shareLedger } : {}) } };
  }

  /**
   * What lead_time and stacking read, each only when the lease falls under one of its steps or
   * classes: lead_time the leases beginning past its nearest step (to the far future), stacking the
   * span of its windows around the lease. Each read is capped (a project could book without end
   * ahead); past the cap, that rule refuses rather than check part of the leases.
   */
  private async fairShareLedger(db: Pool | PoolClient, fairShare: NonNullable<UsagePolicy['fairShare']>, full: PolicySubject, classHosts: Array<ReadonlySet<string>>, applies: { leadTime: boolean; stacking: boolean }): Promise<FairShareLedger> {
    const cap = this.deps.fairShareLedgerCap ?? FAIR_SHARE_LEDGER_CAP;
    const { next } = full;
    const spans = fairShareSpans(fairShare, full, classHosts, applies);
    const overCap: NonNullable<FairShareLedger['overCap']> = {};
    const leases = new Map<string, MeteredLease>();
    const keep = (rule: 'lead_time' | 'stacking', found: MeteredLease[]) => {
      if (found.length > cap) overCap[rule] = cap;
      for (const m of found.slice(0, cap)) leases.set(m.lease.id, m);
    };
    if (spans.leadTimeAfterMs !== undefined) keep('lead_time', await projectLeasesStartingAfter(db, next.projectId, spans.leadTimeAfterMs, next.id, cap + 1));
    if (spans.stackingSpan) keep('stacking', await projectLeasesHeldWithin(db, next.projectId, spans.stackingSpan, next.id, cap + 1));
    return { classHosts, leases: [...leases.values()], ...(Object.keys(overCap).length ? { overCap } : {}) };
  }

  /** Blazar's external filter on a lease that ended (best effort: never fails the lease). */
  async leaseEnded(lease: Lease): Promise<string | undefined> {
    if (!this.deps.external) return undefined;
    const outcome = await this.deps.external.onEnd(this.externalContext, lease);
    return outcome.outcome === 'failed-open' ? outcome.reason : undefined;
  }

  /** Whether changes are put to Blazar's external filter (LK_POLICY_EXTERNAL_URL). */
  asksExternalFilter(): boolean {
    return this.deps.external !== undefined;
  }

  /**
   * Blazar's external filter on a change, if one is configured (else nothing): outside any lock, as
   * it may take seconds. Throws UsagePolicyRefusal, or PolicyServiceUnavailable when it fails closed.
   */
  async askExternalFilter(next: Lease, previous?: Lease): Promise<void> {
    const external = this.deps.external;
    if (!external) return;
    try {
      const outcome = previous ? await external.checkUpdate(this.externalContext, previous, next) : await external.checkCreate(this.externalContext, next);
      if (outcome.outcome === 'failed-open') this.deps.onFailedOpen?.(outcome.reason ?? 'the external policy service could not be asked');
    } catch (err) {
      if (err instanceof PolicyDeniedError && err.kind === 'unavailable') throw new PolicyServiceUnavailable(err.message);
      if (err instanceof PolicyDeniedError) throw new UsagePolicyRefusal({ rule: 'external', status: 403, message: err.message, details: { rule: 'external' } });
      throw err;
    }
  }
}

/** Each stacking class's hosts: the reservable hosts whose capabilities match its query (one read of the hosts for all classes). */
async function stackingClassHosts(db: Pool | PoolClient, queries: string[]): Promise<Array<ReadonlySet<string>>> {
  const hosts = (await listHosts(db)).filter((h) => h.reservable && h.released_at === null);
  return queries.map((text) => {
    const query = parsePropertyQuery(text);
    return new Set(hosts.filter((h) => matchesQuery(query, h.capabilities)).map((h) => h.id));
  });
}
