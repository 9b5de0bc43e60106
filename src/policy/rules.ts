/**
 * The usage policy as operators write it: in the YAML file `LK_POLICY_FILE` (deployment defaults and
 * per-project entries) and over the API (`PUT /v1/projects/{id}/policy`, admins). Durations are
 * written `90m`, `48h`, `7d` or `2w`; `null` in a project's entry lifts a default.
 *
 *   defaults:
 *     max_lease_duration: 7d        # Blazar's max_lease_duration
 *     max_advance: 90d              # how far ahead a start may be
 *     min_notice: 1h                # how long before its start a lease must be booked
 *     max_leases: 20                # leases not yet ended, per project
 *     max_offer_holds: 3            # offer holds at once, per project (0: none)
 *     max_hosts: 8                  # held at once per project (also max_vcpus, max_memory_mb,
 *                                   #   max_bandwidth_kbps, max_floating_ips, max_networks)
 *     budget: { period: month, host_hours: 2000, vcpu_hours: 50000 }   # or period: 30d (rolling)
 *     extension: { within_last: 48h, max_each: 24h, max_count: 3 }
 *     enforce_on_admins: [max_hosts]  # admins are exempt from every other rule
 *     preemptible_exempt: [max_lease_duration]  # rules preemptible leases are exempt from
 *     approval:                     # leases that wait for an admin's answer (exactly one condition each)
 *       - { hosts_over: 4, timeout: 1440, on_timeout: deny }   # also slots_over, duration_over: 3d,
 *                                   #   host_properties: '["==", "$gpu", "a100"]', always: true
 *     exception_timeout: 1440       # minutes an exception (`justification`) waits, then denied
 *     # fair share over time (docs/operations.md, "Fair share over time"):
 *     lead_time: [{ beyond_days: 7, max_hosts: 2, max_host_hours: 336 }]
 *     stacking: [{ resource_properties: '["==", "$node_type", "gpu"]', window_days: 21, max_percent: 25 }]
 *     member_budgets: { default: 500, by_user: { <user id>: 1000 } }   # inside budget's period and meter
 *     allocation_end: "2027-06-30"   # no lease ends after 2027-06-30 00:00 UTC (the start of that day)
 *   projects:
 *     <project id>: { max_hosts: 16, budget: null }
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { DEFAULT_EXCEPTION_TIMEOUT_MINUTES, type ApprovalPolicy } from '../domain/approval';
import { parsePropertyQuery } from '../domain/property-query';
import { AT_ONCE_RULES, RULE_NAMES, type AtOnceRule, type UsagePolicy } from '../domain/usage-policy';
import { DAY_MS, MAX_FAIR_SHARE_STEPS, type FairSharePolicy } from '../domain/fair-share';

const UNIT_MS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 7 * 86_400_000 };
/** At most ~100 years, in any unit. */
const MAX_DURATION_MS = 36_500 * 86_400_000;

export const durationText = z
  .string({ error: 'expected a duration such as "48h", "7d", "90m" or "2w"' })
  .max(16, 'expected a duration such as "48h", "7d", "90m" or "2w"')
  .regex(/^\d{1,6}[mhdw]$/, 'expected a duration such as "48h", "7d", "90m" or "2w"')
  .refine((text) => durationMs(text) <= MAX_DURATION_MS, 'at most 36500 days');

export const durationMs = (text: string): number => Number(text.slice(0, -1)) * UNIT_MS[text.slice(-1)];

const PERIOD_HINT = 'expected "month" or a rolling span such as "30d"';
const limit = (what: string) => z.number({ error: `expected a whole number of ${what}` }).int(`expected a whole number of ${what}`).min(0).max(1e12);
const hours = z.number({ error: 'expected a number of hours' }).min(0).max(1e12);

// --- Approval (issue 42) -------------------------------------------------------------------

const MAX_APPROVAL_RULES = 10;
/** An answer's timeout, in whole minutes: at least one, at most 30 days. */
const approvalMinutes = z.number({ error: 'expected a timeout in whole minutes' }).int('expected a timeout in whole minutes').min(1).max(30 * 1440);
const APPROVAL_CONDITIONS = ['hosts_over', 'slots_over', 'duration_over', 'host_properties', 'always'] as const;
const propertyQueryText = z
  .string({ error: 'expected a host property query, e.g. \'["==", "$gpu", "a100"]\'' })
  .max(4096)
  .refine((text) => {
    try {
      return parsePropertyQuery(text).kind !== 'any';
    } catch {
      return false;
    }
  }, 'expected a host property query naming a host class, e.g. \'["==", "$gpu", "a100"]\'');
/** One approval rule: exactly one condition, its timeout (minutes) and what the timeout decides. */
const approvalRuleSchema = z
  .strictObject({
    hosts_over: limit('hosts').optional(),
    slots_over: limit('instance slots').optional(),
    duration_over: durationText.optional(),
    host_properties: propertyQueryText.optional(),
    always: z.literal(true).optional(),
    timeout: approvalMinutes,
    on_timeout: z.enum(['deny', 'approve'], { error: 'expected "deny" or "approve"' }).default('deny'),
  })
  .refine((rule) => APPROVAL_CONDITIONS.filter((key) => rule[key] !== undefined).length === 1, `expected exactly one condition of ${APPROVAL_CONDITIONS.join(', ')}`);

/**
 * The approval rules as the check reads them. `minuteMs`: how long a written minute lasts, 60 s
 * but in tests (config's `approvalMinuteMs`, which no environment variable sets).
 */
export function approvalPolicyOf(rules: PolicyRules, minuteMs = 60_000): ApprovalPolicy {
  return {
    rules: (rules.approval ?? []).map((rule) => ({
      ...(rule.hosts_over !== undefined ? { hostsOver: rule.hosts_over } : {}),
      ...(rule.slots_over !== undefined ? { slotsOver: rule.slots_over } : {}),
      ...(rule.duration_over !== undefined ? { durationOverMs: durationMs(rule.duration_over) } : {}),
      ...(rule.host_properties !== undefined ? { hostProperties: parsePropertyQuery(rule.host_properties) } : {}),
      ...(rule.always ? { always: true as const } : {}),
      timeoutMs: rule.timeout * minuteMs,
      onTimeout: rule.on_timeout,
    })),
    exceptionTimeoutMs: (rules.exception_timeout ?? DEFAULT_EXCEPTION_TIMEOUT_MINUTES) * minuteMs,
  };
}

// ---- Fair share over time (issue 42): lead_time, stacking, member_budgets, allocation_end ----

const STEPS_HINT = `at most ${MAX_FAIR_SHARE_STEPS} steps`;
const userIdSchema = z.string().min(1).max(255).regex(/^[^\p{Cc}\s]+$/u, 'expected a user id');
const fairShareRules = {
  /** Limits on what begins more than `beyond_days` from now; sooner, any number. */
  lead_time: z
    .array(
      z
        .strictObject({
          beyond_days: z.number({ error: 'expected a whole number of days' }).int('expected a whole number of days').min(0).max(3_650),
          max_hosts: limit('hosts').optional(),
          max_vcpus: limit('vCPUs').optional(),
          max_host_hours: hours.optional(),
        })
        .refine((step) => step.max_hosts !== undefined || step.max_vcpus !== undefined || step.max_host_hours !== undefined, 'expected max_hosts, max_vcpus or max_host_hours'),
    )
    .max(MAX_FAIR_SHARE_STEPS, STEPS_HINT)
    .nullish(),
  /** A project's share of a host class over any window of `window_days`, overlapping leases counted once. */
  stacking: z
    .array(
      z.strictObject({
        resource_properties: z
          .string({ error: 'expected a property query, as resource_properties' })
          .min(1)
          .max(2_048)
          .refine((text) => {
            try {
              parsePropertyQuery(text);
              return true;
            } catch {
              return false;
            }
          }, 'expected a property query, as resource_properties (e.g. ["==", "$node_type", "gpu"])'),
        window_days: z.number({ error: 'expected a whole number of days' }).int('expected a whole number of days').min(1).max(366),
        max_percent: z.number({ error: 'expected a percentage' }).min(0).max(100),
      }),
    )
    .max(MAX_FAIR_SHARE_STEPS, `at most ${MAX_FAIR_SHARE_STEPS} classes`)
    .nullish(),
  /** Members' own budgets inside the project's (its period and meter). */
  member_budgets: z
    .strictObject({
      default: hours.nullish(),
      by_user: z
        .record(userIdSchema, hours)
        .refine((users) => Object.keys(users).length <= 1_000, 'at most 1000 users')
        .optional(),
    })
    .nullish(),
  /** No lease of the project may end after it. */
  allocation_end: z
    .string({ error: 'expected a date such as "2027-06-30T00:00:00Z"' })
    .max(40)
    .refine((text) => /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(text) && Number.isFinite(allocationEndMs(text)), 'expected a date such as "2027-06-30T00:00:00Z"')
    .nullish(),
};

/**
 * An allocation end as written (a date alone: the midnight that begins that day, UTC; no zone: UTC),
 * rounded down to a whole minute: leases are dated in whole minutes (as Blazar's), so the leases
 * shortened to it end on a whole minute and still by the end written.
 */
export function allocationEndMs(text: string): number {
  const iso = text.replace(' ', 'T');
  return Math.floor(Date.parse(/T/.test(iso) && !/(Z|[+-]\d{2}:?\d{2})$/.test(iso) ? `${iso}Z` : iso) / 60_000) * 60_000;
}

/** The fair-share rules as the check reads them. */
function toFairSharePolicy(rules: PolicyRules): FairSharePolicy | undefined {
  const policy: FairSharePolicy = {
    leadTime: rules.lead_time?.map((s) => ({ beyondMs: s.beyond_days * DAY_MS, maxHosts: s.max_hosts, maxVcpus: s.max_vcpus, maxHostHours: s.max_host_hours })),
    stacking: rules.stacking?.map((s) => ({ query: s.resource_properties, windowMs: s.window_days * DAY_MS, maxPercent: s.max_percent })),
    memberBudgets: rules.member_budgets ? { default: rules.member_budgets.default ?? undefined, byUser: rules.member_budgets.by_user ?? {} } : undefined,
    allocationEndMs: rules.allocation_end ? allocationEndMs(rules.allocation_end) : undefined,
  };
  return policy.leadTime?.length || policy.stacking?.length || policy.memberBudgets || policy.allocationEndMs !== undefined ? policy : undefined;
}

/** One set of rules (the defaults, or a project's entry): every key optional, `null` lifts a limit. */
export const rulesSchema = z.strictObject({
  ...fairShareRules,
  max_lease_duration: durationText.nullish(),
  max_advance: durationText.nullish(),
  min_notice: durationText.nullish(),
  max_leases: limit('leases').nullish(),
  max_offer_holds: limit('offer holds').nullish(),
  max_hosts: limit('hosts').nullish(),
  max_vcpus: limit('vCPUs').nullish(),
  max_memory_mb: limit('MiB').nullish(),
  max_bandwidth_kbps: limit('kbps').nullish(),
  max_floating_ips: limit('floating IPs').nullish(),
  max_networks: limit('network segments').nullish(),
  budget: z
    .strictObject({
      period: z
        .string({ error: PERIOD_HINT })
        .max(16, PERIOD_HINT)
        .refine((text) => text === 'month' || durationText.safeParse(text).success, PERIOD_HINT),
      host_hours: hours.nullish(),
      vcpu_hours: hours.nullish(),
    })
    .nullish(),
  extension: z
    .strictObject({
      within_last: durationText.nullish(),
      max_each: durationText.nullish(),
      max_count: limit('extensions').nullish(),
    })
    .nullish(),
  enforce_on_admins: z.array(z.enum(RULE_NAMES, { error: `expected rule names: ${RULE_NAMES.join(', ')}` })).max(RULE_NAMES.length).nullish(),
  // Preemptible leases (issue 43): rules that do not hold them back (e.g. max_lease_duration on borrowed time).
  preemptible_exempt: z.array(z.enum(RULE_NAMES, { error: `expected rule names: ${RULE_NAMES.join(', ')}` })).max(RULE_NAMES.length).nullish(),
  // Approval (issue 42): rules whose leases wait for an admin's answer, and how long exceptions wait.
  approval: z.array(approvalRuleSchema).max(MAX_APPROVAL_RULES, `at most ${MAX_APPROVAL_RULES} approval rules`).nullish(),
  exception_timeout: approvalMinutes.nullish(),
});
export type PolicyRules = z.output<typeof rulesSchema>;

/** Project ids as Keystone makes them (and the test headers), bounded. */
export const projectIdSchema = z.string().min(1).max(255).regex(/^[^\p{Cc}\s/]+$/u, 'expected a project id');

export const policyFileSchema = z.strictObject({
  defaults: rulesSchema.optional(),
  projects: z.record(projectIdSchema, rulesSchema).optional(),
});
export type PolicyFile = z.output<typeof policyFileSchema>;

/** The file's rules, or none; a bad file stops the process with one line naming the bad key. */
export function loadPolicyFile(file: string | undefined): PolicyFile {
  if (!file) return {};
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`LK_POLICY_FILE ${file}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text, { maxAliasCount: 100 }) ?? {};
  } catch (err) {
    throw new Error(`LK_POLICY_FILE ${file}: not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const parsed = policyFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = issue.path.map(String).join('.');
    const what = issue.code === 'unrecognized_keys' ? `unknown key(s) ${issue.keys.join(', ')}` : issue.message;
    throw new Error(`LK_POLICY_FILE ${file}: ${key ? `${key}: ` : ''}${what}`);
  }
  return parsed.data;
}

/**
 * The rules in force for a project: the deployment's (`base`, from the environment), then the
 * file's defaults, then its entry for the project, then what an admin set over the API. Each layer
 * sets or lifts (null) single keys; `budget` and `extension` are replaced whole.
 */
export function effectiveRules(...layers: Array<PolicyRules | undefined>): PolicyRules {
  const merged: PolicyRules = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer ?? {})) if (value !== undefined) Object.assign(merged, { [key]: value });
  }
  return merged;
}

/** Rules as the check reads them. */
export function toUsagePolicy(rules: PolicyRules): UsagePolicy {
  const ms = (text: string | null | undefined) => (text ? durationMs(text) : undefined);
  const atOnce: UsagePolicy['atOnce'] = {};
  for (const rule of Object.keys(AT_ONCE_RULES) as AtOnceRule[]) {
    const value = rules[rule];
    if (typeof value === 'number') atOnce[rule] = value;
  }
  const budgetHours = rules.budget ? Object.fromEntries(Object.entries({ host_hours: rules.budget.host_hours, vcpu_hours: rules.budget.vcpu_hours }).filter(([, v]) => typeof v === 'number')) : {};
  return {
    maxLeaseDurationMs: ms(rules.max_lease_duration),
    maxAdvanceMs: ms(rules.max_advance),
    minNoticeMs: ms(rules.min_notice),
    maxLeases: rules.max_leases ?? undefined,
    maxOfferHolds: rules.max_offer_holds ?? undefined,
    atOnce,
    budget:
      rules.budget && Object.keys(budgetHours).length
        ? { period: rules.budget.period === 'month' ? { kind: 'month' } : { kind: 'rolling', lengthMs: durationMs(rules.budget.period) }, hours: budgetHours }
        : undefined,
    extension: rules.extension
      ? { withinLastMs: ms(rules.extension.within_last), maxEachMs: ms(rules.extension.max_each), maxCount: rules.extension.max_count ?? undefined }
      : undefined,
    enforceOnAdmins: rules.enforce_on_admins ?? [],
    preemptibleExempt: rules.preemptible_exempt ?? [],
    fairShare: toFairSharePolicy(rules),
  };
}

/** The deployment's rules from the environment (before the policy file existed): Blazar's max_lease_duration, the advance, leases not yet ended, and offer holds at once. */
export function environmentRules(limits: { maxDurationMs: number; maxAdvanceMs: number; maxLeases?: number; maxOfferHolds?: number }): PolicyRules {
  const hours = (ms: number) => `${Math.round(ms / 3_600_000)}h`;
  return {
    max_lease_duration: hours(limits.maxDurationMs),
    max_advance: hours(limits.maxAdvanceMs),
    ...(limits.maxLeases !== undefined ? { max_leases: limits.maxLeases } : {}),
    ...(limits.maxOfferHolds !== undefined ? { max_offer_holds: limits.maxOfferHolds } : {}),
  };
}
