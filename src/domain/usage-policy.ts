/**
 * The usage policy: fair-sharing rules an operator sets for every project (and per project), checked
 * when a lease is admitted and when it changes. Pure: the rules, the lease before and after, and
 * the project's other leases in, a refusal (naming the rule, the limit, and what would fit) out.
 * A change is refused only where it makes things worse: a lease already over a rule tightened
 * since may still be renamed or shortened.
 */
import { formatMessageDate, reuseEnd } from './dates';
import { isPreemptibleLease } from './preemption';
import { type Lease } from './lease';
import {
  chargedAmount,
  holdingOf,
  HOUR_MS,
  meterHours,
  monthName,
  monthOf,
  monthsOf,
  peakRollingHours,
  peakWithin,
  type Holding,
  type Interval,
  type MeteredLease,
  type Meter,
} from './usage';
import { FAIR_SHARE_RULE_NAMES, fairShareFigures, memberBudgetOf, type FairShareLedger, type FairSharePolicy, type RuleFigures } from './fair-share';

/** The rules that limit what one project holds at once. */
export const AT_ONCE_RULES = { max_hosts: 'hosts', max_vcpus: 'vcpus', max_memory_mb: 'memory_mb', max_bandwidth_kbps: 'bandwidth_kbps', max_floating_ips: 'floating_ips', max_networks: 'networks' } as const;
export type AtOnceRule = keyof typeof AT_ONCE_RULES;
/** The budgets: meter-hours per period. */
export const BUDGET_METERS = { host_hours: 'hosts', vcpu_hours: 'vcpus' } as const;
export type BudgetName = keyof typeof BUDGET_METERS;

export const RULE_NAMES = ['max_lease_duration', 'max_advance', 'min_notice', 'max_leases', 'max_hosts', 'max_vcpus', 'max_memory_mb', 'max_bandwidth_kbps', 'max_floating_ips', 'max_networks', 'budget', 'extension', 'max_offer_holds', ...FAIR_SHARE_RULE_NAMES] as const satisfies ReadonlyArray<string>;
export type RuleName = (typeof RULE_NAMES)[number];

/** The rules in force for one project (absent: no limit). Durations in milliseconds. */
export interface UsagePolicy {
  maxLeaseDurationMs?: number;
  maxAdvanceMs?: number;
  minNoticeMs?: number;
  maxLeases?: number;
  /** Offer holds at once (POST /v1/offers/{id}/hold); 0: holds are off. */
  maxOfferHolds?: number;
  atOnce: Partial<Record<AtOnceRule, number>>;
  budget?: { period: { kind: 'month' } | { kind: 'rolling'; lengthMs: number }; hours: Partial<Record<BudgetName, number>> };
  extension?: { withinLastMs?: number; maxEachMs?: number; maxCount?: number };
  /** Rules admins are held to as well (by default they are exempt from all). */
  enforceOnAdmins: RuleName[];
  /** Rules a preemptible lease is exempt from (issue 43: e.g. no duration cap on borrowed time); absent: none. */
  preemptibleExempt?: RuleName[];
  /** Fair share over time (domain/fair-share.ts). */
  fairShare?: FairSharePolicy;
  /** What a preemptible hour is charged for in the rules that count hours (LK_PREEMPTIBLE_CHARGE_FACTOR); absent: 1, as any hour. */
  preemptibleChargeFactor?: number;
}

/** What is being checked: the lease as it would be, as it was (an update), by whom and when. */
export interface PolicySubject {
  next: Lease;
  previous?: Lease;
  byAdmin: boolean;
  nowMs: number;
}

/** The project's other leases that matter to the check (overlapping its periods), and how many are live and not ended. */
export interface ProjectLedger {
  others: MeteredLease[];
  liveLeases: number;
  /** What the fair-share rules read beyond `others` (stacking's classes). */
  fairShare?: FairShareLedger;
}

export interface PolicyRefusal {
  /** `external`: Blazar's external filter (the deployment's policy service) said no. */
  rule: RuleName | 'external';
  /** 400 for Blazar's own rule (max_lease_duration, as Blazar answers it), 403 for the others. */
  status: 400 | 403;
  message: string;
  details: Record<string, unknown>;
}

const UNIT: Record<Meter, [string, string]> = {
  hosts: ['host', 'hosts'],
  vcpus: ['vCPU', 'vCPUs'],
  memory_mb: ['MiB of memory', 'MiB of memory'],
  disk_gb: ['GiB of disk', 'GiB of disk'],
  bandwidth_kbps: ['kbps of bandwidth', 'kbps of bandwidth'],
  floating_ips: ['floating IP', 'floating IPs'],
  networks: ['network segment', 'network segments'],
};
const amountOf = (meter: Meter, n: number) => `${round(n)} ${UNIT[meter][n === 1 ? 0 : 1]}`;
const round = (n: number) => Math.round(n * 100) / 100;
const hoursText = (ms: number) => `${round(ms / HOUR_MS)} h`;
const BUDGET_TEXT: Record<BudgetName, string> = { host_hours: 'host-hours', vcpu_hours: 'vCPU-hours' };

function refuse(rule: RuleName, message: string, details: Record<string, unknown> = {}, status: 400 | 403 = 403): PolicyRefusal {
  return { rule, status, message: status === 403 ? `Usage policy: ${message}` : message, details: { rule, ...details } };
}

/**
 * Whether a rule is checked on a change: admins are exempt unless `enforce_on_admins` names it, and
 * a preemptible lease (every reservation preemptible) when `preemptible_exempt` names it.
 */
export function ruleApplies(policy: UsagePolicy, subject: { next: Pick<Lease, 'reservations'>; byAdmin: boolean }, rule: RuleName): boolean {
  if (subject.byAdmin && !policy.enforceOnAdmins.includes(rule)) return false;
  return !(policy.preemptibleExempt?.includes(rule) && isPreemptibleLease(subject.next));
}

/** The first rule the change breaks, or undefined when the policy allows it. */
export function policyRefusal(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): PolicyRefusal | undefined {
  const applies = (rule: RuleName) => ruleApplies(policy, subject, rule);
  for (const [rule, check] of ruleChecks(policy, subject, ledger, fairShareFiguresOf(policy, subject, ledger))) {
    if (!applies(rule)) continue;
    const refusal = check();
    if (refusal) return refusal;
  }
  return undefined;
}

/** Every rule's check, in the order admission runs them. */
function ruleChecks(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger, figures: Partial<Record<RuleName, RuleFigures[]>>): Array<[RuleName, () => PolicyRefusal | undefined]> {
  return [
    ['max_lease_duration', () => durationRefusal(policy, subject)],
    ['max_advance', () => advanceRefusal(policy, subject)],
    ['min_notice', () => noticeRefusal(policy, subject)],
    ['max_leases', () => leaseCountRefusal(policy, subject, ledger)],
    ['extension', () => extensionRefusal(policy, subject)],
    ...(Object.keys(AT_ONCE_RULES) as AtOnceRule[]).map((rule): [RuleName, () => PolicyRefusal | undefined] => [rule, () => atOnceRefusal(rule, policy, subject, ledger)]),
    ['budget', () => budgetRefusal(policy, subject, ledger)],
    ...fairShareChecks(policy, subject, ledger, figures),
  ];
}

const datesChanged = ({ next, previous }: PolicySubject) => !previous || previous.startMs !== next.startMs || previous.endMs !== next.endMs;
const startChanged = ({ next, previous }: PolicySubject) => !previous || previous.startMs !== next.startMs;

function durationRefusal(policy: UsagePolicy, subject: PolicySubject): PolicyRefusal | undefined {
  const limit = policy.maxLeaseDurationMs;
  const { next, previous } = subject;
  const duration = next.endMs - next.startMs;
  if (limit === undefined || duration <= limit || !datesChanged(subject) || (previous && duration <= previous.endMs - previous.startMs)) return undefined;
  const seconds = (ms: number) => Math.round(ms / 1000);
  // Blazar's MaxLeaseDurationException: its code (400) and sentence, which its clients know.
  return refuse('max_lease_duration', `Lease duration of ${seconds(duration)} seconds must be less than or equal to the maximum lease duration of ${seconds(limit)} seconds.`, { limit_seconds: seconds(limit), latest_end: reuseEnd(next.startMs + limit) }, 400);
}

function advanceRefusal(policy: UsagePolicy, subject: PolicySubject): PolicyRefusal | undefined {
  const limit = policy.maxAdvanceMs;
  const ahead = subject.next.startMs - subject.nowMs;
  if (limit === undefined || ahead <= limit || !startChanged(subject)) return undefined;
  const latest = reuseEnd(subject.nowMs + limit);
  const seconds = (ms: number) => Math.round(ms / 1000);
  return refuse('max_advance', `max_advance: Lease start of ${seconds(ahead)} seconds ahead must be less than or equal to the maximum advance booking of ${seconds(limit)} seconds; it fits with a start_date up to ${latest}.`, {
    limit_seconds: seconds(limit),
    latest_start: latest,
  });
}

function noticeRefusal(policy: UsagePolicy, subject: PolicySubject): PolicyRefusal | undefined {
  const limit = policy.minNoticeMs;
  const ahead = subject.next.startMs - subject.nowMs;
  if (!limit || ahead >= limit || !startChanged(subject)) return undefined;
  const earliest = Math.ceil((subject.nowMs + limit) / 60_000) * 60_000;
  return refuse('min_notice', `min_notice: a lease must be booked at least ${hoursText(limit)} before its start; it fits from ${formatMessageDate(earliest)}.`, { limit_hours: round(limit / HOUR_MS), earliest_start: formatMessageDate(earliest) });
}

function leaseCountRefusal(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): PolicyRefusal | undefined {
  const limit = policy.maxLeases;
  if (limit === undefined || subject.previous || ledger.liveLeases + 1 <= limit) return undefined;
  return refuse('max_leases', `max_leases: project ${subject.next.projectId} may have at most ${limit} lease(s) not yet ended, and has ${ledger.liveLeases}; delete or end one first.`, { limit, live_leases: ledger.liveLeases });
}

/**
 * The refusal of one more offer hold for a project that has `liveHolds` already (max_offer_holds;
 * admins exempt unless the rule is enforced on them). Checked when a hold is placed, not when a lease is.
 */
export function offerHoldRefusal(policy: UsagePolicy, subject: { liveHolds: number; byAdmin: boolean; next?: Pick<Lease, 'reservations'> }): PolicyRefusal | undefined {
  const limit = policy.maxOfferHolds;
  if (limit === undefined || subject.liveHolds + 1 <= limit) return undefined;
  // `next`: the lease the hold is for (a preemptible one is exempt when preemptible_exempt names the rule).
  if (!ruleApplies(policy, { byAdmin: subject.byAdmin, next: subject.next ?? { reservations: [] } }, 'max_offer_holds')) return undefined;
  return refuse('max_offer_holds', `max_offer_holds: at most ${limit} offer hold(s) at once, and ${subject.liveHolds} are held; release one (DELETE /v1/offers/{id}/hold) or accept it.`, { limit, live_holds: subject.liveHolds });
}

function extensionRefusal(policy: UsagePolicy, subject: PolicySubject): PolicyRefusal | undefined {
  const { previous, next, nowMs } = subject;
  const rules = policy.extension;
  if (!rules || !previous || previous.status !== 'ACTIVE' || next.endMs <= previous.endMs) return undefined;
  if (rules.withinLastMs !== undefined && nowMs < previous.endMs - rules.withinLastMs) {
    const from = previous.endMs - rules.withinLastMs;
    return refuse('extension', `extension: a lease may be extended only within the last ${hoursText(rules.withinLastMs)} before its end, from ${formatMessageDate(from)}.`, { within_last_hours: round(rules.withinLastMs / HOUR_MS), extendable_from: formatMessageDate(from) });
  }
  if (rules.maxEachMs !== undefined && next.endMs - previous.endMs > rules.maxEachMs) {
    return refuse('extension', `extension: at most ${hoursText(rules.maxEachMs)} per extension; this one adds ${hoursText(next.endMs - previous.endMs)}; it fits with end_date ${reuseEnd(previous.endMs + rules.maxEachMs)}.`, {
      max_each_hours: round(rules.maxEachMs / HOUR_MS),
      latest_end: reuseEnd(previous.endMs + rules.maxEachMs),
    });
  }
  const count = next.extensions ?? 0;
  if (rules.maxCount !== undefined && count > rules.maxCount) {
    return refuse('extension', `extension: a lease may be extended at most ${rules.maxCount} time(s), and this one was extended ${count - 1} time(s) already.`, { max_count: rules.maxCount, extensions: count - 1 });
  }
  return undefined;
}

/** What a preemptible hour is charged for under the policy. */
const chargeFactorOf = (policy: UsagePolicy): number => policy.preemptibleChargeFactor ?? 1;

/** The holdings of the other leases, and of the lease itself as it would be and as it was. */
function holdingsOf(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): { others: Holding[]; next?: Holding; previous?: Holding } {
  const holding = (metered: MeteredLease): Holding | undefined => holdingOf(metered, subject.nowMs, chargeFactorOf(policy));
  return {
    others: ledger.others.map(holding).filter((h): h is Holding => h !== undefined),
    next: holding({ lease: subject.next }),
    previous: subject.previous ? holding({ lease: subject.previous }) : undefined,
  };
}

function atOnceRefusal(rule: AtOnceRule, policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): PolicyRefusal | undefined {
  const limit = policy.atOnce[rule];
  const meter = AT_ONCE_RULES[rule];
  if (limit === undefined) return undefined;
  const { others, next, previous } = holdingsOf(policy, subject, ledger);
  const wanted = next?.footprint[meter] ?? 0;
  if (!next || wanted === 0) return undefined;
  const peak = peakWithin([...others, next], meter, next.interval);
  if (peak <= limit) return undefined;
  if (previous && peak <= peakWithin([...others, previous], meter, previous.interval)) return undefined; // not worse than before
  const heldByOthers = peakWithin(others, meter, next.interval);
  const room = Math.max(0, limit - heldByOthers);
  const project = subject.next.projectId;
  return refuse(
    rule,
    `${rule}: project ${project} may hold at most ${amountOf(meter, limit)} at once; its other leases hold up to ${amountOf(meter, heldByOthers)} between ${formatMessageDate(next.interval.startMs)} and ${formatMessageDate(next.interval.endMs)}; this lease needs ${amountOf(meter, wanted)}; ${room > 0 ? `it fits with ${amountOf(meter, room)}` : 'nothing more fits in this window'}.`,
    { limit, held: heldByOthers, wanted, room },
  );
}

function budgetRefusal(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): PolicyRefusal | undefined {
  const budget = policy.budget;
  if (!budget) return undefined;
  const { others, next, previous } = holdingsOf(policy, subject, ledger);
  if (!next) return undefined;
  for (const [name, limit] of Object.entries(budget.hours) as Array<[BudgetName, number]>) {
    const meter = BUDGET_METERS[name];
    const amount = chargedAmount(next, meter);
    if (amount === 0) continue;
    const refusal =
      budget.period.kind === 'month'
        ? monthlyRefusal(name, meter, limit, others, next, previous)
        : rollingRefusal(name, meter, limit, budget.period.lengthMs, others, next, previous);
    if (refusal) return refusal;
  }
  return undefined;
}

/** Says how the lease's hours were counted when they are charged less than in full (preemptible time). */
function chargedNote(holding: Holding, meter: Meter): string {
  const full = holding.footprint[meter] ?? 0;
  const charged = chargedAmount(holding, meter);
  return charged < full ? ` (preemptible: ${amountOf(meter, full)} charged as ${round(charged)})` : '';
}

function monthlyRefusal(name: BudgetName, meter: Meter, limit: number, others: Holding[], next: Holding, previous?: Holding): PolicyRefusal | undefined {
  for (const month of monthsOf(next.interval)) {
    const booked = meterHours(others, meter, month);
    const needed = meterHours([next], meter, month);
    if (booked + needed <= limit + 1e-9) continue;
    if (previous && needed <= meterHours([previous], meter, month)) continue; // not worse than before
    const room = Math.max(0, limit - booked);
    const amount = next.footprint[meter]!;
    // An hour of each unit is charged `rate` (less than 1 for preemptible time).
    const rate = chargedAmount(next, meter) / amount;
    const hoursInMonth = (Math.min(next.interval.endMs, month.endMs) - Math.max(next.interval.startMs, month.startMs)) / HOUR_MS;
    const fits: string[] = [];
    const fewer = Math.floor(room / (hoursInMonth * rate));
    if (fewer >= 1) fits.push(`with ${amountOf(meter, fewer)} for the same window`);
    const shorter = Math.floor((room / (amount * rate)) * 100) / 100;
    if (shorter > 0) fits.push(`with ${amountOf(meter, amount)} for ${round(shorter)} h`);
    const later = laterMonth(meter, limit, others, next);
    if (later) fits.push(`in ${later}`);
    return refuse(
      'budget',
      `${BUDGET_TEXT[name]} budget for ${monthName(month)}: ${round(limit)} h, ${round(booked)} h booked; this lease needs ${round(needed)} h${chargedNote(next, meter)}; ${fits.length ? `it fits ${fits.join(' or ')}` : 'nothing more fits this month'}.`,
      { budget: name, period: monthName(month), limit_hours: limit, booked_hours: round(booked), needed_hours: round(needed), room_hours: round(room) },
    );
  }
  return undefined;
}

/** The first month within a year after the lease's start in which the same lease, moved to that month's start, fits the budget. */
function laterMonth(meter: Meter, limit: number, others: Holding[], next: Holding): string | undefined {
  const duration = next.interval.endMs - next.interval.startMs;
  let month = monthOf(monthOf(next.interval.startMs).endMs);
  for (let i = 0; i < 12; i++, month = monthOf(month.endMs)) {
    const moved: Holding = { ...next, interval: { startMs: month.startMs, endMs: month.startMs + duration } };
    if (monthsOf(moved.interval).every((m) => meterHours([...others, moved], meter, m) <= limit + 1e-9)) {
      return new Date(month.startMs).toLocaleString('en', { month: 'long', year: 'numeric', timeZone: 'UTC' });
    }
  }
  return undefined;
}

function rollingRefusal(name: BudgetName, meter: Meter, limit: number, lengthMs: number, others: Holding[], next: Holding, previous?: Holding): PolicyRefusal | undefined {
  const peak = peakRollingHours([...others, next], meter, lengthMs, next.interval);
  if (peak.hours <= limit + 1e-9) return undefined;
  if (previous && peak.hours <= peakRollingHours([...others, previous], meter, lengthMs, previous.interval).hours) return undefined;
  const booked = meterHours(others, meter, peak.window);
  const needed = meterHours([next], meter, peak.window);
  const room = Math.max(0, limit - booked);
  const days = round(lengthMs / 86_400_000);
  return refuse(
    'budget',
    `${BUDGET_TEXT[name]} budget over any ${days} days: ${round(limit)} h; ${round(booked)} h booked in the ${days} days from ${formatMessageDate(peak.window.startMs)}; this lease needs ${round(needed)} h there${chargedNote(next, meter)}; ${room > 0 ? `it fits with ${amountOf(meter, next.footprint[meter]!)} for ${round(room / chargedAmount(next, meter))} h` : 'nothing more fits in that span'}.`,
    { budget: name, period: `${days}d`, limit_hours: limit, booked_hours: round(booked), needed_hours: round(needed), room_hours: round(room) },
  );
}

/** The range of time a check reads other leases from: every period the lease as it would be (or was) touches. */
export function ledgerRange(policy: UsagePolicy, subject: PolicySubject): Interval {
  const spans = [subject.next, subject.previous].filter((l): l is Lease => l !== undefined).map((l) => ({ startMs: l.startMs, endMs: l.endMs }));
  let startMs = Math.min(...spans.map((s) => s.startMs));
  let endMs = Math.max(...spans.map((s) => s.endMs));
  const period = policy.budget?.period;
  if (period?.kind === 'month') {
    startMs = monthOf(startMs).startMs;
    // laterMonth looks up to a year past the start, a lease's duration on.
    endMs = Math.max(monthOf(endMs).endMs, monthOf(startMs).startMs + 400 * 86_400_000 + (subject.next.endMs - subject.next.startMs));
  } else if (period?.kind === 'rolling') {
    startMs -= period.lengthMs;
    endMs += period.lengthMs;
  }
  return { startMs, endMs };
}

// ---- Fair share over time (issue 42): lead_time, stacking, member_budget, allocation_end ----

const refusalOfFigures = (figures: RuleFigures) => refuse(figures.rule, figures.message, figures.details);

/** The fair-share rules' figures (domain/fair-share.ts), computed once per check. */
function fairShareFiguresOf(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): Partial<Record<RuleName, RuleFigures[]>> {
  return policy.fairShare ? fairShareFigures(policy.fairShare, subject, ledger.others, ledger.fairShare ?? { classHosts: [] }, chargeFactorOf(policy)) : {};
}

/** The fair-share rules' checks, run after the others: each refuses with its first failing figure. */
function fairShareChecks(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger, figures: Partial<Record<RuleName, RuleFigures[]>>): Array<[RuleName, () => PolicyRefusal | undefined]> {
  if (!policy.fairShare) return [];
  const refusalOf = (rule: RuleName) => () => {
    const failing = figures[rule]?.find((f) => !f.ok);
    return failing && refusalOfFigures(failing);
  };
  return [
    ['allocation_end', refusalOf('allocation_end')],
    ['lead_time', refusalOf('lead_time')],
    ['stacking', refusalOf('stacking')],
    ['member_budget', () => memberBudgetRefusal(policy, subject, ledger)],
  ];
}

/**
 * A member's own budget inside the project's: the project's budget (its period and first meter:
 * host-hours, else vCPU-hours; a month when the project has none) counted over the member's own
 * leases only, with the member's limit.
 */
function memberBudgetRefusal(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): PolicyRefusal | undefined {
  const userId = subject.next.userId;
  const limit = policy.fairShare && memberBudgetOf(policy.fairShare, userId);
  if (limit === undefined) return undefined;
  const budget = memberBudgetShape(policy);
  const meter = (Object.keys(budget.hours) as BudgetName[])[0] ?? 'host_hours';
  const own: ProjectLedger = { ...ledger, others: ledger.others.filter((m) => m.lease.userId === userId) };
  const refusal = budgetRefusal({ ...policy, budget: { ...budget, hours: { [meter]: limit } } }, subject, own);
  if (!refusal) return undefined;
  const message = `member_budget: user ${userId} may book at most ${round(limit)} ${BUDGET_TEXT[meter]} of project ${subject.next.projectId}'s budget; ${refusal.message.replace(/^Usage policy: /, '')}`;
  const figures = { ...refusal.details };
  delete figures.rule; // the budget's: this refusal is member_budget's
  return refuse('member_budget', message, { ...figures, member: userId, limit, value: round(Number(refusal.details.booked_hours ?? 0) + Number(refusal.details.needed_hours ?? 0)) });
}

/** The budget members' budgets are counted in: the project's, or a month of host-hours when it has none. */
export function memberBudgetShape(policy: UsagePolicy): NonNullable<UsagePolicy['budget']> {
  return policy.budget ?? { period: { kind: 'month' }, hours: { host_hours: 0 } };
}

/** One rule as the dry run shows it (`POST /v1/policy/check`): its figures, whether it passes. */
export interface RuleEvaluation {
  rule: RuleName;
  ok: boolean;
  limit: number | string | null;
  value: number | string | null;
  message: string;
}

/**
 * Every rule in force for the project, evaluated on the change (admission stops at the first
 * refusal; this goes on): the fair-share rules with their figures, the others with their limit
 * and, when they refuse, the would-be value their refusal names; and the refusal admission would
 * answer (the first, in admission's order: one pass computes both). Rules that do not apply
 * (admins are exempt, the change does not touch them) are left out.
 */
export function policyEvaluation(policy: UsagePolicy, subject: PolicySubject, ledger: ProjectLedger): { evaluations: RuleEvaluation[]; refusal?: PolicyRefusal } {
  const applies = (rule: RuleName) => ruleApplies(policy, subject, rule);
  const evaluations: RuleEvaluation[] = [];
  let first: PolicyRefusal | undefined;
  const figuresOf = fairShareFiguresOf(policy, subject, ledger);
  for (const [rule, check] of ruleChecks(policy, subject, ledger, figuresOf)) {
    if (!applies(rule)) continue;
    const figures = figuresOf[rule];
    if (figures) {
      for (const f of figures) evaluations.push({ rule, ok: f.ok, limit: f.limit, value: f.value, message: f.ok ? f.message : `Usage policy: ${f.message}` });
      first ??= check();
      continue;
    }
    const limit = configuredLimit(rule, policy, subject.next.userId);
    const refusal = check();
    first ??= refusal;
    if (refusal) {
      const d = refusal.details;
      evaluations.push({ rule, ok: false, limit: firstFigure(d, ['limit', 'limit_seconds', 'limit_hours', 'max_each_hours', 'max_count', 'within_last_hours']) ?? limit, value: firstFigure(d, ['value', 'wanted', 'live_leases', 'needed_hours', 'extensions']), message: refusal.message });
    } else if (limit !== null) {
      evaluations.push({ rule, ok: true, limit, value: null, message: `${rule}: within the limit.` });
    }
  }
  return { evaluations, ...(first ? { refusal: first } : {}) };
}

const firstFigure = (details: Record<string, unknown>, keys: string[]): number | string | null => {
  for (const key of keys) {
    const value = details[key];
    if (typeof value === 'number' || typeof value === 'string') return value;
  }
  return null;
};

/** A rule's limit as configured (null: not in force), in the unit its refusal names. */
function configuredLimit(rule: RuleName, policy: UsagePolicy, userId: string): number | null {
  const seconds = (ms: number | undefined) => (ms === undefined ? null : Math.round(ms / 1000));
  switch (rule) {
    case 'max_lease_duration':
      return seconds(policy.maxLeaseDurationMs);
    case 'max_advance':
      return seconds(policy.maxAdvanceMs);
    case 'min_notice':
      return policy.minNoticeMs ? round(policy.minNoticeMs / HOUR_MS) : null;
    case 'max_leases':
      return policy.maxLeases ?? null;
    case 'budget':
      return policy.budget ? (Object.values(policy.budget.hours)[0] ?? null) : null;
    case 'member_budget':
      return (policy.fairShare && memberBudgetOf(policy.fairShare, userId)) ?? null;
    case 'extension':
      return policy.extension?.maxCount ?? null;
    default:
      return rule in AT_ONCE_RULES ? (policy.atOnce[rule as AtOnceRule] ?? null) : null;
  }
}
