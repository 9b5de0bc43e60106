/**
 * Every setting leasekeeper reads, from the environment, with its default.
 * Validated once at start: a bad value stops the process with one line naming the variable.
 * docs/configuration.md mirrors this file.
 */
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { REPO_ROOT } from './paths';

/** What a preemptible hour is charged for unless LK_PREEMPTIBLE_CHARGE_FACTOR says (a caller given no settings charges as the report does). */
export const DEFAULT_PREEMPTIBLE_CHARGE_FACTOR = 0.25;

const port = z.coerce.number().int().min(1).max(65535);
const positiveInt = z.coerce.number().int().positive();
const millis = z.coerce.number().int().min(0);
/** How long a project webhook's name may take to resolve unless LK_WEBHOOK_DNS_TIMEOUT_MS says otherwise. */
export const WEBHOOK_DNS_TIMEOUT_MS = 3_000;
/** A setting's check that names what is wrong (or nothing) as a zod refinement. */
function problemAsIssue(problem: (value: string) => string | undefined) {
  return (value: string, ctx: z.RefinementCtx) => {
    const found = problem(value);
    if (found) ctx.addIssue({ code: 'custom', message: found });
  };
}

/**
 * ML2's `network_vlan_ranges` (LK_NEUTRON_TENANT_VLAN_RANGES, e.g. `physnet1:100:199,physnet2`): per
 * physical network Neutron knows, the VLAN ranges it hands to tenant networks (none for a physnet
 * listed alone: provider networks only). Physical networks in the order given.
 */
export type TenantVlanRanges = Map<string, Array<{ minimum: number; maximum: number }>>;

/** network_vlan_ranges as ML2 reads it; a string naming the first entry that is wrong when it is not. */
export function parseTenantVlanRanges(text: string): TenantVlanRanges | string {
  const ranges: TenantVlanRanges = new Map();
  for (const entry of text.split(',').map((e) => e.trim())) {
    const match = /^([^:\s]{1,64})(?::(\d{1,4}):(\d{1,4}))?$/.exec(entry);
    const [minimum, maximum] = match?.[2] === undefined ? [] : [Number(match[2]), Number(match[3])];
    if (!match || (minimum !== undefined && (minimum < 1 || maximum! > 4094 || minimum > maximum!))) {
      return `expected ML2's network_vlan_ranges, e.g. physnet1:100:199,physnet2 (tags 1 to 4094, the least first): ${JSON.stringify(entry.slice(0, 80))}`;
    }
    const known = ranges.get(match[1]) ?? [];
    ranges.set(match[1], minimum === undefined ? known : [...known, { minimum, maximum: maximum! }]);
  }
  return ranges;
}

/** A URL leasekeeper calls (a webhook, the external filter): httpUrlProblem's rule. */
export const httpUrl = z
  .string()
  .max(2_048, 'expected at most 2048 characters')
  .superRefine(problemAsIssue(httpUrlProblem));

// ---------------------------------------------------------------------------------------------
// Blazar's external filter (src/policy/external-filter.ts): read when the worker and the API build
// the usage policy, so that a bad value stops them (and only them) with one line.

/** The external filter's settings (src/policy/external-filter.ts, ExternalServiceFilter). */
export interface ExternalFilterSettings {
  /** Blazar's `external_service_base_endpoint`: the three paths are joined to it (urljoin: keep its trailing slash). */
  baseUrl?: string;
  /** Blazar's `external_service_check_create_endpoint`: this URL instead of `<base>check-create`. */
  checkCreateUrl?: string;
  /** Blazar's `external_service_check_update_endpoint`. */
  checkUpdateUrl?: string;
  /** Blazar's `external_service_on_end_endpoint`. */
  onEndUrl?: string;
  /**
   * Blazar's `external_service_token`: a static token sent as `X-Auth-Token` (none when unset).
   * Blazar does not send its own Keystone token (it did only in the filter's first version).
   */
  token?: string;
  /** Per call, body included. Ours: Blazar sets no timeout, so a hung service hangs its requests. */
  timeoutMs: number;
  /** Ours: when the service cannot be reached or answers neither 204 nor 403, allow (true) or deny (false, Blazar's). */
  failOpen: boolean;
}

const endpoint = z.string().trim().pipe(httpUrl);

const externalFilterEnvSchema = z.object({
  LK_POLICY_EXTERNAL_URL: endpoint.optional(),
  LK_POLICY_EXTERNAL_CHECK_CREATE_URL: endpoint.optional(),
  LK_POLICY_EXTERNAL_CHECK_UPDATE_URL: endpoint.optional(),
  LK_POLICY_EXTERNAL_ON_END_URL: endpoint.optional(),
  // Sent as a header: printable ASCII only, so it can neither break the request nor add headers.
  LK_POLICY_EXTERNAL_TOKEN: z
    .string()
    .regex(/^[\x21-\x7e]+$/, 'expected printable ASCII characters without spaces')
    .max(8192, 'expected at most 8192 characters')
    .optional(),
  LK_POLICY_EXTERNAL_TIMEOUT_MS: z
    .string()
    .regex(/^\s*\d{1,9}\s*$/, 'expected a whole number of milliseconds')
    .transform(Number)
    .pipe(z.number().min(100, 'must be at least 100').max(60_000, 'must be at most 60000'))
    .default(5_000),
  LK_POLICY_EXTERNAL_FAIL: z.enum(['open', 'closed'], { error: 'expected "open" or "closed"' }).default('closed'),
});

/**
 * The external filter's settings from LK_POLICY_EXTERNAL_*; undefined when no URL is set (no filter).
 * An empty variable counts as unset. Throws ConfigError, one line naming the variable.
 */
export function externalFilterSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): ExternalFilterSettings | undefined {
  const e = parseVariables(externalFilterEnvSchema, env);
  if (!e.LK_POLICY_EXTERNAL_URL && !e.LK_POLICY_EXTERNAL_CHECK_CREATE_URL && !e.LK_POLICY_EXTERNAL_CHECK_UPDATE_URL && !e.LK_POLICY_EXTERNAL_ON_END_URL) return undefined;
  return {
    baseUrl: e.LK_POLICY_EXTERNAL_URL,
    checkCreateUrl: e.LK_POLICY_EXTERNAL_CHECK_CREATE_URL,
    checkUpdateUrl: e.LK_POLICY_EXTERNAL_CHECK_UPDATE_URL,
    onEndUrl: e.LK_POLICY_EXTERNAL_ON_END_URL,
    token: e.LK_POLICY_EXTERNAL_TOKEN,
    timeoutMs: e.LK_POLICY_EXTERNAL_TIMEOUT_MS,
    failOpen: e.LK_POLICY_EXTERNAL_FAIL === 'open',
  };
}

// ---------------------------------------------------------------------------------------------
// OpenStack's client variables (src/openstack/auth.ts): read only where OpenStack is used, so that
// a process without OpenStack never trips on them. Which are required, and their URL rule, stay
// with the credentials (their errors name the variable as the OpenStack clients do).

/** A client variable as python-openstackclient takes it: trimmed; empty or blank is unset. */
const clientVariable = (max: number) =>
  z
    .string()
    .max(max, `expected at most ${max} characters`)
    .transform((value) => value.trim() || undefined)
    .optional();
/** A file path: as written. */
const clientFile = z.string().max(4_096, 'expected at most 4096 characters').optional();

const openStackEnvSchema = z.object({
  OS_CLOUD: clientVariable(255),
  OS_CLIENT_CONFIG_FILE: clientFile,
  OS_CLIENT_SECURE_FILE: clientFile,
  OS_AUTH_URL: clientVariable(2_048),
  OS_USERNAME: clientVariable(255),
  OS_USER_ID: clientVariable(255),
  // As written, spaces included: a password is not trimmed.
  OS_PASSWORD: z.string().max(4_096, 'expected at most 4096 characters').optional(),
  OS_PROJECT_NAME: clientVariable(255),
  OS_TENANT_NAME: clientVariable(255),
  OS_PROJECT_ID: clientVariable(255),
  OS_TENANT_ID: clientVariable(255),
  OS_USER_DOMAIN_NAME: clientVariable(255),
  OS_USER_DOMAIN_ID: clientVariable(255),
  OS_PROJECT_DOMAIN_NAME: clientVariable(255),
  OS_PROJECT_DOMAIN_ID: clientVariable(255),
  OS_REGION_NAME: clientVariable(255),
  OS_INTERFACE: clientVariable(64),
  HOME: z.string().max(4_096).optional(),
});

/** OpenStack's client settings as the environment gives them (unset ones undefined). */
export interface OpenStackEnvSettings {
  /** OS_CLOUD: the cloud in clouds.yaml. */
  cloud?: string;
  /** OS_CLIENT_CONFIG_FILE: clouds.yaml, before the search path. */
  cloudsFile?: string;
  /** OS_CLIENT_SECURE_FILE: secure.yaml, before the search path. */
  secureFile?: string;
  /** The user's home (HOME, else the system's): `~/.config/openstack` is searched. */
  home: string;
  /** The OS_* password-authentication variables (Keystone v3), as python-openstackclient reads them. */
  password: {
    authUrl?: string;
    username?: string;
    userId?: string;
    password?: string;
    projectName?: string;
    projectId?: string;
    userDomainName?: string;
    userDomainId?: string;
    projectDomainName?: string;
    projectDomainId?: string;
    regionName?: string;
    interface?: string;
  };
}

/** OpenStack's client variables (OS_*), bounded; throws ConfigError, one line naming the variable. */
export function openStackSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): OpenStackEnvSettings {
  const e = parseVariables(openStackEnvSchema, env, { keepEmpty: ['OS_PASSWORD', 'HOME'] });
  return {
    cloud: e.OS_CLOUD,
    cloudsFile: e.OS_CLIENT_CONFIG_FILE,
    secureFile: e.OS_CLIENT_SECURE_FILE,
    home: e.HOME ?? os.homedir(),
    password: {
      authUrl: e.OS_AUTH_URL,
      username: e.OS_USERNAME,
      userId: e.OS_USER_ID,
      password: e.OS_PASSWORD === '' ? undefined : e.OS_PASSWORD,
      projectName: e.OS_PROJECT_NAME ?? e.OS_TENANT_NAME,
      projectId: e.OS_PROJECT_ID ?? e.OS_TENANT_ID,
      userDomainName: e.OS_USER_DOMAIN_NAME,
      userDomainId: e.OS_USER_DOMAIN_ID,
      projectDomainName: e.OS_PROJECT_DOMAIN_NAME,
      projectDomainId: e.OS_PROJECT_DOMAIN_ID,
      regionName: e.OS_REGION_NAME,
      interface: e.OS_INTERFACE,
    },
  };
}

/**
 * The variables a schema names, parsed: an empty one counts as unset unless listed in keepEmpty.
 * Throws ConfigError naming the first bad one, its value as shownValue shows it.
 */
function parseVariables<Shape extends z.ZodRawShape>(schema: z.ZodObject<Shape>, env: NodeJS.ProcessEnv, options: { keepEmpty?: string[] } = {}): z.infer<z.ZodObject<Shape>> {
  const names = Object.keys(schema.shape);
  const present = Object.fromEntries(names.filter((name) => env[name] !== undefined && (env[name] !== '' || options.keepEmpty?.includes(name))).map((name) => [name, env[name]]));
  const parsed = schema.safeParse(present);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const name = String(issue.path[0]);
  throw new ConfigError(`invalid configuration: ${name}=${JSON.stringify(shownValue(name, env[name] ?? ''))}: ${issue.message}`);
}

const envSchema = z.object({
  LK_LOG_LEVEL: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
  LK_API_HOST: z.string().min(1).default('127.0.0.1'),
  LK_API_PORT: port.default(1234),
  LK_DATA_DIR: z.string().min(1).default(path.join(REPO_ROOT, '.data')),
  LK_CACHE_DIR: z.string().min(1).optional(),
  HOME: z.string().min(1).optional(),

  // Temporal. When TEMPORAL_ADDRESS is unset, `npm start` (and the tests) run one on LK_TEMPORAL_PORT:
  // LK_TEMPORAL=dev the CLI's dev server on SQLite, =server temporal-server on PostgreSQL (production's).
  LK_TEMPORAL: z.enum(['dev', 'server']).default('dev'),
  TEMPORAL_ADDRESS: z.string().regex(/^[^\s:]+:\d+$/, 'expected host:port').optional(),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  LK_TASK_QUEUE: z.string().min(1).default('leasekeeper'),
  LK_TEMPORAL_PORT: port.default(7233),
  // The worker's Prometheus metrics on this port (the Temporal SDK's on the next, hence ≤ 65534); unset: none.
  LK_WORKER_METRICS_PORT: port.max(65534).optional(),
  LK_WORKER_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  LK_TEMPORAL_UI_PORT: port.default(8233),

  // PostgreSQL. When DATABASE_URL is unset, the scripts run a project-local cluster on LK_PG_PORT.
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/, error: 'expected postgres://user[:password]@host:port/database' }).optional(),
  LK_PG_PORT: port.default(15432),
  LK_DB_POOL_SIZE: positiveInt.default(10),

  // Worker.
  LK_WORKFLOW_BUNDLE: z.string().min(1).default(path.join(REPO_ROOT, 'dist', 'workflow-bundle.js')),
  LK_WORKER_MAX_CACHED_WORKFLOWS: positiveInt.default(2_000),
  LK_WORKER_SHUTDOWN_GRACE_MS: millis.default(30_000),

  // API: how callers are identified, and how long a REST call waits for a lease workflow.
  LK_AUTH_STRATEGY: z.enum(['noauth', 'keystone']).default('noauth'),
  // At most 5 minutes: a revoked token keeps working until its cached validation expires.
  LK_AUTH_CACHE_SECONDS: z.coerce.number().int().min(0).max(300).default(60),
  LK_API_WORKFLOW_TIMEOUT_MS: positiveInt.default(30_000),
  // Who admits a lease whose every reservation books in the calendar alone (hosts): the API, in one
  // transaction with an owed workflow start (`api`, the default), or the lease workflow (`workflow`).
  LK_ADMISSION: z.enum(['api', 'workflow']).default('api'),
  // How often each API and worker looks for owed workflow starts, and how old one must be to be
  // taken by a sweep (younger ones are being started by the API that admitted them).
  LK_OUTBOX_SWEEP_MS: z.coerce.number().int().min(100).max(60_000).default(1_000),
  LK_OUTBOX_GRACE_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
  // Preemptible leases (issue 43): the warning a preempted lease gets before its new end whenever
  // the regular lease's start allows, and how long a regular lease's start waits at most for a
  // preempted lease's end on its hosts.
  // Minutes, to the second (0.25 is 15 s): a short warning is for tests and trials of the rules.
  LK_PREEMPT_WARNING_MINUTES: z.coerce
    .number()
    .min(0)
    .max(1_440)
    .refine((minutes) => Number.isInteger(Math.round(minutes * 60 * 1e6) / 1e6), 'a whole number of seconds, in minutes (0.25 is 15 s)')
    .default(10),
  LK_PREEMPT_EVICTION_SECONDS: z.coerce.number().int().min(0).max(3_600).default(120),
  // What a preemptible hour is charged for, against a regular hour's 1 (GET /v1/usage, budgets and
  // every rule that counts hours): written as a plain decimal, so that "", "0x1" or "1e0" are no factor.
  LK_PREEMPTIBLE_CHARGE_FACTOR: z
    .string()
    .regex(/^(0(\.\d{1,6})?|1(\.0{1,6})?|\.\d{1,6})$/, 'expected a number from 0 to 1 with at most 6 decimals, such as 0.25')
    .transform(Number)
    .default(DEFAULT_PREEMPTIBLE_CHARGE_FACTOR),
  // Exposure of the API: the base URL of the links it hands out (never the caller's Host header);
  // noauth trusts identity headers, so it listens on loopback only unless explicitly allowed.
  LK_PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  LK_ALLOW_NOAUTH_REMOTE: z.enum(['true', 'false']).default('false'),
  // noauth: the project of a caller that names none (the development admin).
  LK_NOAUTH_PROJECT_ID: z.string().regex(/^[\x21-\x7e]{1,255}$/, 'expected at most 255 printable ASCII characters, no spaces').default('admin'),
  // Keystone mode: the `admin` role makes a global admin only in this project (by id, or by name
  // and domain id: Keystone's bootstrap project `admin` in domain `default`), and how long a token
  // validation may take before the caller gets 503.
  LK_ADMIN_PROJECT_ID: z.string().min(1).max(255).optional(),
  LK_ADMIN_PROJECT_NAME: z.string().min(1).max(255).default('admin'),
  LK_ADMIN_PROJECT_DOMAIN_ID: z.string().min(1).max(255).default('default'),
  LK_AUTH_TIMEOUT_MS: positiveInt.max(60_000).default(5_000),
  // Keystone mode: the calendar page's password sign-in is refused (429) past this many failures per
  // user name, or per client address, within the window; the address is the socket's unless the
  // proxies in front are trusted (a hop count, or their addresses: express's `trust proxy`).
  LK_SIGNIN_FAILURES_PER_USER: positiveInt.max(10_000).default(10),
  LK_SIGNIN_FAILURES_PER_ADDRESS: positiveInt.max(100_000).default(30),
  LK_SIGNIN_WINDOW_SECONDS: positiveInt.max(86_400).default(300),
  LK_API_TRUST_PROXY: z
    .string()
    .max(1_024)
    .superRefine(problemAsIssue(trustProxyProblem))
    .optional(),
  // The API's Prometheus metrics: on their own port (then not on the API's), behind a bearer token,
  // and how long the counts read from the database serve scrapes before being read again.
  LK_API_METRICS_PORT: port.optional(),
  LK_API_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  LK_API_METRICS_TOKEN: z.string().min(16, 'expected at least 16 characters').max(256).regex(/^[\x21-\x7e]+$/, 'expected printable ASCII, no spaces').optional(),
  LK_API_METRICS_CACHE_SECONDS: z.coerce.number().min(0).max(300).default(5),
  // The HTTP server: a whole request (headers and body) must arrive within the request timeout, its
  // headers within the headers timeout; at most this many connections are open at once.
  LK_API_REQUEST_TIMEOUT_MS: positiveInt.default(30_000),
  LK_API_HEADERS_TIMEOUT_MS: positiveInt.default(10_000),
  LK_API_MAX_CONNECTIONS: positiveInt.default(1_000),
  // Members' leases (admins are exempt): longest duration, how far ahead a lease may start, and how
  // many leases not yet ended a project may have. Protective defaults (docs/operations.md, "Defaults
  // of a new deployment"): a fresh install never runs unlimited; Chameleon's 7-day lease is the reference.
  LK_MAX_LEASE_DURATION_DAYS: z.coerce.number().positive().max(36_500).default(7),
  LK_MAX_ADVANCE_DAYS: z.coerce.number().min(0).max(36_500).default(365),
  LK_MAX_LEASES: z.coerce.number().int().min(1).max(1_000_000).default(50),
  // The usage policy (docs/operations.md, "The usage policy"): rules per deployment and per project, in YAML; and
  // Blazar's external filter (a policy service asked at create, update and end). Both are read and
  // checked by src/policy when the worker and the API start.
  LK_POLICY_FILE: z.string().min(1).max(4_096).optional(),
  // When an active lease warns before its end (lease.event.before_end_lease notices) unless it
  // names its own `notify_before_end`: a comma list of durations ("48h,1h", as Chameleon warns); "none": never.
  LK_NOTIFY_BEFORE_END: z
    .string()
    .regex(/^(none|\d{1,6}[mhdw](,\d{1,6}[mhdw]){0,4})$/, 'expected "none" or up to 5 durations such as "48h,1h"')
    .default('48h,1h'),
  // Idle leases (Chameleon's reaper; unset: off): an active lease with no server of its project on
  // its hosts or instance slots for this long is warned (lease.idle), then ended early.
  LK_IDLE_LEASE_WARN_HOURS: z.coerce.number().positive().max(87_600).optional(),
  LK_IDLE_LEASE_END_HOURS: z.coerce.number().positive().max(87_600).optional(),
  LK_POLICY_EXTERNAL_URL: z.string().max(2_048).optional(),
  LK_POLICY_EXTERNAL_CHECK_CREATE_URL: z.string().max(2_048).optional(),
  LK_POLICY_EXTERNAL_CHECK_UPDATE_URL: z.string().max(2_048).optional(),
  LK_POLICY_EXTERNAL_ON_END_URL: z.string().max(2_048).optional(),
  LK_POLICY_EXTERNAL_TOKEN: z.string().max(4_096).optional(),
  LK_POLICY_EXTERNAL_TIMEOUT_MS: z.string().max(16).optional(),
  LK_POLICY_EXTERNAL_FAIL: z.string().max(16).optional(),
  // Reservations in one lease (create and availability search): Blazar needs a handful; each costs the calendar's search work.
  LK_MAX_RESERVATIONS_PER_LEASE: positiveInt.max(1_000).default(50),
  // Occurrences in one series of recurring leases (POST /v1/leases with `recurrence`): each is a lease and a workflow.
  LK_MAX_OCCURRENCES: positiveInt.max(1_000).default(50),
  // How long an offer (POST /v1/offers, a refusal's offers) stays findable by its id.
  LK_OFFER_TTL_MINUTES: positiveInt.max(1_440).default(15),
  // Offer holds: how long one keeps an offer's capacity booked, and how many a project may have at once (0: holds are off).
  LK_OFFER_HOLD_MINUTES: positiveInt.max(60).default(10),
  LK_MAX_OFFER_HOLDS: z.coerce.number().int().min(0).max(1_000).default(3),

  // The host calendar: a gap between consecutive leases on a host (Blazar's cleaning_time), and
  // whether to pick among equally good hosts at random instead of by id.
  LK_HOST_CLEANING_TIME_MINUTES: z.coerce.number().min(0).max(24 * 60).default(0),
  LK_HOST_RANDOM_CHOICE: z.enum(['true', 'false']).default('false'),
  // What a host reservation's `before_end: default` does: nothing, snapshot every server, or notify.
  LK_HOST_BEFORE_END_DEFAULT: z.enum(['', 'snapshot', 'notify']).default(''),
  // What a host reservation's `on_end: default` does with the hosts and their servers at the end, and
  // how long `recycle` waits for the last servers before deleting them (unset: until the host's next booking).
  LK_HOST_ON_END_DEFAULT: z.enum(['delete', 'recycle', 'release']).default('delete'),
  LK_HOST_RECYCLE_GRACE_SECONDS: z.coerce.number().int().min(0).max(30 * 86_400).optional(),
  // Resources are made ready this long before a lease's start (its hosts are the lessee's from then on).
  LK_PROVISIONING_LEAD_TIME_SECONDS: z.coerce.number().int().min(0).max(86_400).default(0),
  // Where `before_end: notify` posts its JSON notice (a webhook); unset: notify is refused at the edge.
  LK_NOTIFY_URL: httpUrl.optional(),
  // The approvers' webhook (issue 42): hears lease.approval_requested, lease.approved and lease.denied only.
  LK_APPROVERS_WEBHOOK_URL: httpUrl.optional(),
  // The Nova aggregate that holds reservable hosts while no lease has them, and the project named in
  // its filter_tenant_id (no real project by default, so no ordinary server lands there).
  LK_FREEPOOL_AGGREGATE: z.string().min(1).max(255).default('freepool'),
  LK_FREEPOOL_PROJECT_ID: z.string().min(1).default('leasekeeper-freepool'),
  // Hosts ending under `release` go here, open to everyone and flagged for the operator.
  LK_RELEASED_AGGREGATE: z.string().min(1).max(255).default('leasekeeper-released'),

  // A replaced failed host waits here (closed to every project) until it is up again.
  LK_FAILED_AGGREGATE: z.string().min(1).max(255).default('leasekeeper-failed'),

  // The host monitor (started by the worker when it has OpenStack): how often it looks at Nova, how
  // long a problem must last before a host counts as failed (a host that flaps is not), how far
  // ahead pending leases are healed (unset: all of them), and how often leases still booked on a
  // failed host are told again.
  LK_HOST_MONITOR: z.enum(['on', 'off']).default('on'),
  LK_HOST_MONITOR_INTERVAL_SECONDS: z.coerce.number().min(0.1).max(3_600).default(10),
  LK_HOST_FAIL_GRACE_SECONDS: z.coerce.number().min(0).max(86_400).default(30),
  LK_HEALING_HORIZON_HOURS: z.coerce.number().positive().max(87_600).optional(),
  LK_HEALING_RETRY_MINUTES: z.coerce.number().min(0.01).max(1_440).default(5),
  // How often the monitor checks that every host is in the aggregate the calendar says, and whether
  // it puts them back (`repair`) or only reports what it finds (`report`).
  LK_DRIFT_CHECK_MINUTES: z.coerce.number().min(0.01).max(1_440).default(5),
  LK_DRIFT_REPAIR: z.enum(['repair', 'report']).default('repair'),
  // Nova's message bus (its transport_url, as oslo.messaging writes it): the monitor also looks at
  // once when Nova notifies a compute service's change; unset: it only polls.
  LK_NOVA_NOTIFICATIONS_URL: z
    .string()
    .max(2_048)
    .regex(/^(rabbit|amqp):\/\/[^\s/?#]+(\/[^\s?#]*)?(\?[^\s#]*)?$/, "expected rabbit://user:password@host:port/vhost (Nova's transport_url)")
    .optional(),

  // Server reservations (`virtual:server`): what the start does when on-demand servers took the
  // reserved host's room (move to another host with room, or fail with the reason), and how long
  // the hosts' capacities read from Placement serve admissions before being read again.
  LK_SERVER_HOST_FULL_POLICY: z.enum(['move', 'fail']).default('move'),
  LK_CAPACITY_REFRESH_SECONDS: z.coerce.number().int().min(0).max(86_400).default(60),
  // Bandwidth reservations (`network:bandwidth`): how many candidate hosts the start tries to bind the ports on.
  LK_BANDWIDTH_BIND_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(3),
  // Network segment reservations (`network`): ML2's network_vlan_ranges, for enrolment's checks when
  // Neutron has no segment range extension, and for physical networks it lists without a range.
  LK_NEUTRON_TENANT_VLAN_RANGES: z
    .string()
    .max(4_096)
    .superRefine(problemAsIssue((value) => {
      const parsed = parseTenantVlanRanges(value);
      return typeof parsed === 'string' ? parsed : undefined;
    }))
    .optional(),

  // Notices (src/notifications): every lease event and the host monitor's, delivered to webhooks and
  // to oslo.messaging, retried for LK_NOTICE_RETRY_HOURS. The deployment's webhooks (≤ 10, and
  // LK_NOTIFY_URL, today's endpoint) are trusted; projects' own (`PUT /v1/projects/{id}/webhooks`)
  // may not reach private, loopback or link-local addresses unless LK_WEBHOOK_ALLOW_PRIVATE=true
  // (no request into the cloud's control plane). oslo.messaging as Blazar's notifier publishes:
  // oslo's control_exchange (Blazar keeps oslo's default, `openstack`), topics `<topic>.<priority>`.
  LK_WEBHOOK_URLS: z
    .string()
    .max(10 * 2_049)
    .superRefine(problemAsIssue(webhookUrlListProblem))
    .optional(),
  LK_WEBHOOK_SECRET: z.string().min(16).max(256).optional(),
  LK_NOTICE_TIMEOUT_MS: positiveInt.max(300_000).default(10_000),
  LK_NOTICE_RETRY_HOURS: z.coerce.number().min(0.001).max(720).default(24),
  LK_WEBHOOK_ALLOW_PRIVATE: z.enum(['true', 'false']).default('false'),
  // Projects' webhook names are resolved by c-ares (A and AAAA, a real timeout, no libuv thread
  // held by a name server that never answers): these name servers (unset: /etc/resolv.conf's).
  LK_WEBHOOK_DNS_SERVERS: z
    .string()
    .max(256)
    .superRefine(problemAsIssue(dnsServerListProblem))
    .optional(),
  LK_WEBHOOK_DNS_TIMEOUT_MS: positiveInt.max(30_000).default(WEBHOOK_DNS_TIMEOUT_MS),
  LK_NOTIFICATION_TRANSPORT_URL: z
    .string()
    .max(2_048)
    .regex(/^(rabbit|amqp):\/\/[^\s/?#]+(\/[^\s?#]*)?(\?[^\s#]*)?$/, "expected rabbit://user:password@host:port/vhost (oslo.messaging's transport_url)")
    .optional(),
  LK_NOTIFICATION_EXCHANGE: z.string().regex(/^[\w.:-]{1,255}$/, 'expected an exchange name (letters, digits, _ . : -)').default('openstack'),
  LK_NOTIFICATION_TOPICS: z.string().max(1_024).regex(/^[\w.:-]{1,200}(,[\w.:-]{1,200}){0,9}$/, 'expected at most 10 topics, comma-separated').default('notifications'),
  LK_NOTIFICATION_PUBLISHER_ID: z.string().regex(/^[\x21-\x7e]{1,255}$/, 'expected at most 255 printable ASCII characters, no spaces').default('blazar.lease'),
  // Delivery runs on its own task queue (<LK_TASK_QUEUE>-notices) with its own activity slots, so
  // that no receiver holds up lease work; a project's webhooks have at most
  // LK_NOTICE_PROJECT_IN_FLIGHT deliveries in flight per worker (the rest wait), and a webhook
  // that failed to answer this many times in a row is held back for a cool-down, then probed once.
  LK_NOTICE_CONNECT_TIMEOUT_MS: positiveInt.max(300_000).default(3_000),
  LK_NOTICE_WORKER_SLOTS: positiveInt.max(10_000).default(50),
  LK_NOTICE_PROJECT_IN_FLIGHT: positiveInt.max(1_000).default(4),
  LK_WEBHOOK_BREAKER_FAILURES: positiveInt.max(1_000).default(5),
  LK_WEBHOOK_BREAKER_COOLDOWN_SECONDS: positiveInt.max(86_400).default(60),

  // How long a health check may wait for each dependency; a deep check (a workflow) runs at most
  // once per interval, its result shared by every caller meanwhile.
  // Power management of idle reservable hosts (issue 48; docs/operations.md, "Power"): the planner's
  // rules (src/domain/power-plan.ts) and the drivers' settings (src/power).
  LK_POWER_PLANNER: z.enum(['on', 'off']).default('off'),
  LK_POWER_PARALLEL: z.coerce.number().int().min(1).max(100).default(8),
  LK_POWER_OFF_AFTER_IDLE: z.string().regex(/^\s*\d{1,6}\s*[smhd]\s*$/, 'expected a duration such as "2h", "90m" or "1d"').default('2h'),
  LK_POWER_WAKE_MARGIN_SECONDS: z.coerce.number().int().min(0).max(86_400).default(300),
  LK_POWER_BOOT_SECONDS: z.coerce.number().int().min(1).max(86_400).default(600),
  LK_POWER_BOOT_SAMPLES: z.coerce.number().int().min(1).max(100).default(5),
  LK_POWER_RECHECK_SECONDS: z.coerce.number().int().min(1).max(86_400).default(300),
  LK_POWER_AWAKE_RESERVE: z.coerce.number().int().min(0).max(1_000).default(0),
  LK_POWER_RESUME_TIMEOUT_SECONDS: z.coerce.number().int().min(0).max(86_400).default(600),
  LK_POWER_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(600).default(60),
  LK_POWER_COMMAND_ON: z.string().max(8_192).superRefine(problemAsIssue(argvProblem)).optional(),
  LK_POWER_COMMAND_OFF: z.string().max(8_192).superRefine(problemAsIssue(argvProblem)).optional(),
  LK_POWER_COMMAND_STATUS: z.string().max(8_192).superRefine(problemAsIssue(argvProblem)).optional(),
  LK_POWER_IPMI_CIPHER_SUITE: z.coerce.number().int().min(0).max(17).optional(),
  LK_HEALTH_TIMEOUT_MS: positiveInt.default(2_000),
  LK_HEALTH_DEEP_INTERVAL_SECONDS: z.coerce.number().int().min(0).max(3_600).default(10),
});

export type Config = ReturnType<typeof toConfig>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

function toConfig(env: z.infer<typeof envSchema>) {
  // The outbox tells preempted leases of it; a lending's reclaim gives its borrowers the same.
  const preemptionWarningMs = Math.round(env.LK_PREEMPT_WARNING_MINUTES * 60) * 1000;
  return {
    logLevel: env.LK_LOG_LEVEL,
    api: {
      host: env.LK_API_HOST,
      port: env.LK_API_PORT,
      authStrategy: env.LK_AUTH_STRATEGY,
      noauthProjectId: env.LK_NOAUTH_PROJECT_ID,
      authCacheMs: env.LK_AUTH_CACHE_SECONDS * 1000,
      authTimeoutMs: env.LK_AUTH_TIMEOUT_MS,
      adminProject: { id: env.LK_ADMIN_PROJECT_ID, name: env.LK_ADMIN_PROJECT_NAME, domainId: env.LK_ADMIN_PROJECT_DOMAIN_ID },
      workflowTimeoutMs: env.LK_API_WORKFLOW_TIMEOUT_MS,
      admission: env.LK_ADMISSION,
      publicUrl: (env.LK_PUBLIC_URL ?? `http://${env.LK_API_HOST.includes(':') ? `[${env.LK_API_HOST}]` : env.LK_API_HOST}:${env.LK_API_PORT}`).replace(/\/+$/, ''),
      server: { requestTimeoutMs: env.LK_API_REQUEST_TIMEOUT_MS, headersTimeoutMs: env.LK_API_HEADERS_TIMEOUT_MS, maxConnections: env.LK_API_MAX_CONNECTIONS },
      signIn: { failuresPerUser: env.LK_SIGNIN_FAILURES_PER_USER, failuresPerAddress: env.LK_SIGNIN_FAILURES_PER_ADDRESS, windowMs: env.LK_SIGNIN_WINDOW_SECONDS * 1000 },
      /** express's `trust proxy`: false (the socket's address), a hop count, or the proxies' addresses. */
      trustProxy: trustProxySetting(env.LK_API_TRUST_PROXY),
      metrics: {
        /** Where the API's /metrics is served instead of on the API's own address; undefined: on the API's. */
        listen: env.LK_API_METRICS_PORT === undefined ? undefined : { host: env.LK_API_METRICS_HOST, port: env.LK_API_METRICS_PORT },
        token: env.LK_API_METRICS_TOKEN,
        cacheMs: Math.round(env.LK_API_METRICS_CACHE_SECONDS * 1000),
      },
    },
    maxReservationsPerLease: env.LK_MAX_RESERVATIONS_PER_LEASE,
    /** Occurrences in one series of recurring leases, at most. */
    maxOccurrences: env.LK_MAX_OCCURRENCES,
    /** How long an offer is kept for a hold or an accept. */
    offerTtlMs: env.LK_OFFER_TTL_MINUTES * 60_000,
    /** Offer holds: the longest (and default) hold, and the deployment's max_offer_holds. */
    offerHolds: { holdMs: env.LK_OFFER_HOLD_MINUTES * 60_000, maxAtOnce: env.LK_MAX_OFFER_HOLDS },
    /** Warnings before the end a lease gets unless it asks otherwise (durations as written). */
    notifyBeforeEnd: env.LK_NOTIFY_BEFORE_END === 'none' ? [] : env.LK_NOTIFY_BEFORE_END.split(','),
    /** Idle-lease reaping given to every lease at creation; undefined: off. */
    idleLeases:
      env.LK_IDLE_LEASE_WARN_HOURS !== undefined || env.LK_IDLE_LEASE_END_HOURS !== undefined
        ? {
            ...(env.LK_IDLE_LEASE_WARN_HOURS !== undefined ? { warnAfterMs: Math.round(env.LK_IDLE_LEASE_WARN_HOURS * 3_600_000) } : {}),
            ...(env.LK_IDLE_LEASE_END_HOURS !== undefined ? { endAfterMs: Math.round(env.LK_IDLE_LEASE_END_HOURS * 3_600_000) } : {}),
          }
        : undefined,
    leaseLimits: { maxDurationMs: env.LK_MAX_LEASE_DURATION_DAYS * 86_400_000, maxAdvanceMs: env.LK_MAX_ADVANCE_DAYS * 86_400_000, maxLeases: env.LK_MAX_LEASES },
    /** The usage policy's settings as written: src/policy reads the file and checks them all at start. */
    policy: Object.fromEntries(Object.entries(env).filter(([name]) => name.startsWith('LK_POLICY_'))) as Partial<Record<`LK_POLICY_${string}`, string>>,
    /**
     * How long an approval timeout's written minute lasts: always 60 s here; tests shorten it in the
     * config they build (no environment variable sets it), so that a timeout fires in seconds.
     */
    approvalMinuteMs: 60_000,
    dataDir: env.LK_DATA_DIR,
    cacheDir: env.LK_CACHE_DIR ?? path.join(env.HOME ?? os.homedir(), '.cache', 'leasekeeper'),
    temporal: {
      address: env.TEMPORAL_ADDRESS ?? `127.0.0.1:${env.LK_TEMPORAL_PORT}`,
      external: env.TEMPORAL_ADDRESS !== undefined,
      /** Which Temporal the scripts run when it is not external. */
      topology: env.LK_TEMPORAL,
      namespace: env.TEMPORAL_NAMESPACE,
      taskQueue: env.LK_TASK_QUEUE,
      /** Notices' delivery workflows and activities: a queue of their own, polled by the worker's notice worker. */
      noticeTaskQueue: `${env.LK_TASK_QUEUE}-notices`,
      devServerPort: env.LK_TEMPORAL_PORT,
      uiPort: env.LK_TEMPORAL_UI_PORT,
    },
    /** Owed lease workflow starts (the API's admissions): the sweeps of every API and worker. */
    outbox: { sweepMs: env.LK_OUTBOX_SWEEP_MS, graceMs: env.LK_OUTBOX_GRACE_MS, preemptionWarningMs },
    /**
     * Preemptible leases: a regular lease's start waits at most this long for a preempted lease's end
     * on its hosts; a preemptible hour is charged this much of a regular one; a lending's reclaim
     * (issue 43) gives its borrowers the warning, as a preemption does.
     */
    preemption: { evictionMs: env.LK_PREEMPT_EVICTION_SECONDS * 1_000, chargeFactor: env.LK_PREEMPTIBLE_CHARGE_FACTOR, warningMs: preemptionWarningMs },
    database: {
      url: env.DATABASE_URL ?? `postgres://leasekeeper@127.0.0.1:${env.LK_PG_PORT}/leasekeeper`,
      external: env.DATABASE_URL !== undefined,
      localPort: env.LK_PG_PORT,
      poolSize: env.LK_DB_POOL_SIZE,
    },
    worker: {
      workflowBundle: env.LK_WORKFLOW_BUNDLE,
      maxCachedWorkflows: env.LK_WORKER_MAX_CACHED_WORKFLOWS,
      shutdownGraceMs: env.LK_WORKER_SHUTDOWN_GRACE_MS,
      metrics: env.LK_WORKER_METRICS_PORT === undefined ? undefined : { host: env.LK_WORKER_METRICS_HOST, port: env.LK_WORKER_METRICS_PORT },
    },
    hosts: {
      cleaningMs: env.LK_HOST_CLEANING_TIME_MINUTES * 60_000,
      randomChoice: env.LK_HOST_RANDOM_CHOICE === 'true',
      beforeEndDefault: env.LK_HOST_BEFORE_END_DEFAULT,
      onEndDefault: env.LK_HOST_ON_END_DEFAULT,
      recycleGraceMs: env.LK_HOST_RECYCLE_GRACE_SECONDS === undefined ? undefined : env.LK_HOST_RECYCLE_GRACE_SECONDS * 1000,
    },
    servers: { hostFullPolicy: env.LK_SERVER_HOST_FULL_POLICY, capacityRefreshMs: env.LK_CAPACITY_REFRESH_SECONDS * 1000 },
    bandwidth: { bindAttempts: env.LK_BANDWIDTH_BIND_ATTEMPTS, capacityRefreshMs: env.LK_CAPACITY_REFRESH_SECONDS * 1000 },
    /** Enrolment's view of ML2's VLAN ranges when configured (it wins over Neutron's segment ranges for the physical networks it names). */
    networkSegments: { tenantVlanRanges: env.LK_NEUTRON_TENANT_VLAN_RANGES === undefined ? undefined : (parseTenantVlanRanges(env.LK_NEUTRON_TENANT_VLAN_RANGES) as TenantVlanRanges) },
    provisioningLeadMs: env.LK_PROVISIONING_LEAD_TIME_SECONDS * 1000,
    notifyUrl: env.LK_NOTIFY_URL,
    inventory: {
      freepoolAggregate: env.LK_FREEPOOL_AGGREGATE,
      freepoolProjectId: env.LK_FREEPOOL_PROJECT_ID,
      releasedAggregate: env.LK_RELEASED_AGGREGATE,
      failedAggregate: env.LK_FAILED_AGGREGATE,
    },
    hostMonitor: {
      enabled: env.LK_HOST_MONITOR === 'on',
      intervalMs: Math.round(env.LK_HOST_MONITOR_INTERVAL_SECONDS * 1000),
      graceMs: Math.round(env.LK_HOST_FAIL_GRACE_SECONDS * 1000),
      horizonMs: env.LK_HEALING_HORIZON_HOURS === undefined ? undefined : Math.round(env.LK_HEALING_HORIZON_HOURS * 3_600_000),
      sweepMs: Math.round(env.LK_HEALING_RETRY_MINUTES * 60_000),
      driftMs: Math.round(env.LK_DRIFT_CHECK_MINUTES * 60_000),
      driftMode: env.LK_DRIFT_REPAIR,
      notificationsUrl: env.LK_NOVA_NOTIFICATIONS_URL,
    },
    notices: noticeSettings(env),
    power: powerSettings(env),
    healthTimeoutMs: env.LK_HEALTH_TIMEOUT_MS,
    healthDeepIntervalMs: env.LK_HEALTH_DEEP_INTERVAL_SECONDS * 1000,
  };
}

/**
 * What an http(s) URL that leasekeeper calls gets wrong, if anything: the one rule for the
 * deployment's webhooks (LK_WEBHOOK_URLS), projects' own and the external filter's endpoints.
 * At most 2048 characters; no credentials (they end up in logs: a webhook checks the signature,
 * the external filter gets its token in a header).
 */
export function httpUrlProblem(url: string): string | undefined {
  if (url.length > 2_048) return 'expected at most 2048 characters';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'expected an http:// or https:// URL';
  }
  if ((parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || !parsed.hostname) return 'expected an http:// or https:// URL';
  if (parsed.username || parsed.password) return 'expected no credentials in the URL (they would reach logs)';
  if (parsed.href.length > 2_048) return 'expected at most 2048 characters';
  return undefined;
}

/** What a power program's argv (LK_POWER_COMMAND_*: a JSON array of 1 to 32 strings, the program first, an absolute path) gets wrong, if anything. */
function argvProblem(value: string): string | undefined {
  let argv: unknown;
  try {
    argv = JSON.parse(value);
  } catch {
    return 'expected a JSON array of strings, e.g. ["/usr/local/sbin/pdu-power", "on"]';
  }
  if (!Array.isArray(argv) || argv.length === 0 || argv.length > 32 || !argv.every((arg) => typeof arg === 'string' && arg.length <= 1_024 && !arg.includes('\0'))) {
    return 'expected a JSON array of 1 to 32 strings (each at most 1024 characters)';
  }
  if (!path.isAbsolute(argv[0] as string)) return 'expected the program as an absolute path (the programs run with a minimal PATH)';
  return undefined;
}

const DURATION_UNIT_MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * How long a lease's start waits at most for its hosts' boots (issue 48), from the wake it waits
 * for: the start runs in an activity of 30 minutes in all (workflows/lease/activity-options.ts,
 * `patient`), which holds the lease's lock; past this the start goes on, and the host monitor fails
 * a host not up by its boot deadline (healing replaces it). LK_POWER_BOOT_SECONDS +
 * LK_POWER_RESUME_TIMEOUT_SECONDS must stay below it (loadConfig refuses more).
 */
export const START_BOOT_WAIT_MS = 25 * 60_000;

/** Power management's settings (issue 48): the planner's rules, and what the drivers need of the deployment. */
function powerSettings(env: z.infer<typeof envSchema>) {
  const idle = /(\d+)\s*([smhd])/.exec(env.LK_POWER_OFF_AFTER_IDLE)!;
  const argv = (value: string | undefined) => (value === undefined || value.trim() === '' ? undefined : (JSON.parse(value) as string[]));
  const [on, off, status] = [argv(env.LK_POWER_COMMAND_ON), argv(env.LK_POWER_COMMAND_OFF), argv(env.LK_POWER_COMMAND_STATUS)];
  return {
    /** Whether the worker runs the power planner (LK_POWER_PLANNER=on): nothing powers a host off on its own otherwise. */
    planner: env.LK_POWER_PLANNER === 'on',
    /** How many hosts' power actions the planner runs at once. */
    parallel: env.LK_POWER_PARALLEL,
    /** While a woken host's compute service is not up yet, the planner looks at it this often. */
    bootPollMs: 10_000,
    /** A host sleeps only when its next booking is further than this plus its boot time. */
    offAfterIdleMs: Number(idle[1]) * DURATION_UNIT_MS[idle[2]],
    /** A sleeping host is woken this much before its boot time ahead of its next booking. */
    marginMs: env.LK_POWER_WAKE_MARGIN_SECONDS * 1_000,
    /** A host's boot time until `bootSamples` of its boots are known (then their 95th percentile). */
    defaultBootMs: env.LK_POWER_BOOT_SECONDS * 1_000,
    bootSamples: env.LK_POWER_BOOT_SAMPLES,
    /** Past its boot time, how long more a woken host may take before its compute service down is a failure. */
    resumeTimeoutMs: env.LK_POWER_RESUME_TIMEOUT_SECONDS * 1_000,
    /** The planner looks again at least this often (bookings made meanwhile). */
    recheckMs: env.LK_POWER_RECHECK_SECONDS * 1_000,
    /** Hosts free for long the planner keeps awake per capability set, for leases starting now (the awake reserve). */
    awakeReserve: env.LK_POWER_AWAKE_RESERVE,
    /** Each driver call's bound (ipmitool, a program, an Ironic request). */
    timeoutMs: env.LK_POWER_TIMEOUT_SECONDS * 1_000,
    /** The `command` driver's programs; undefined: none configured. */
    commands: on && off ? { on, off, status } : undefined,
    ipmiCipherSuite: env.LK_POWER_IPMI_CIPHER_SUITE,
  };
}

/** What a deployment webhook URL list (LK_WEBHOOK_URLS) gets wrong, if anything. */
function webhookUrlListProblem(value: string): string | undefined {
  const urls = splitList(value);
  if (urls.length > 10) return `at most 10 webhook URLs, not ${urls.length}`;
  for (const url of urls) {
    const problem = httpUrlProblem(url);
    if (problem) return `${JSON.stringify(url.slice(0, 100))}: ${problem}`;
  }
  return undefined;
}

/** What a name server list (LK_WEBHOOK_DNS_SERVERS: up to 4 of `address`, `ipv4:port`, `[ipv6]:port`) gets wrong, if anything. */
function dnsServerListProblem(value: string): string | undefined {
  const servers = splitList(value);
  if (servers.length > 4) return `at most 4 name servers, not ${servers.length}`;
  for (const server of servers) {
    const withPort = /^(?:\[([^\]]+)\]|([\d.]+)):(\d{1,5})$/.exec(server);
    const address = withPort ? (withPort[1] ?? withPort[2]) : server;
    const portOk = !withPort || (Number(withPort[3]) >= 1 && Number(withPort[3]) <= 65_535);
    const familyOk = withPort?.[1] !== undefined ? net.isIP(address) === 6 : net.isIP(address) !== 0;
    if (!portOk || !familyOk) return `${JSON.stringify(server.slice(0, 60))}: expected an IP address, ipv4:port or [ipv6]:port`;
  }
  return undefined;
}

/** express's named ranges, besides addresses and subnets. */
const PROXY_RANGES = ['loopback', 'linklocal', 'uniquelocal'];

/** What a trusted-proxy setting (LK_API_TRUST_PROXY) gets wrong, if anything. */
function trustProxyProblem(value: string): string | undefined {
  if (/^\d+$/.test(value.trim())) return Number(value) <= 10 ? undefined : 'expected at most 10 proxy hops';
  if (value.trim() === 'false') return undefined;
  for (const entry of splitList(value)) {
    const [address, bits, more] = entry.split('/');
    const version = net.isIP(address ?? '');
    if (PROXY_RANGES.includes(entry)) continue;
    if (version === 0 || more !== undefined || (bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= (version === 4 ? 32 : 128)))) {
      return `${JSON.stringify(entry.slice(0, 100))}: expected a hop count, or addresses and subnets of the proxies (or ${PROXY_RANGES.join(', ')}), comma-separated`;
    }
  }
  return undefined;
}

function trustProxySetting(value: string | undefined): false | number | string[] {
  if (value === undefined || value.trim() === 'false') return false;
  return /^\d+$/.test(value.trim()) ? Number(value) : splitList(value);
}

const splitList = (value: string) => value.split(',').map((part) => part.trim()).filter((part) => part !== '');

function noticeSettings(env: z.infer<typeof envSchema>) {
  // Today's endpoint (LK_NOTIFY_URL) hears every notice too, as one more deployment webhook: nothing it heard is lost.
  const webhooks = [...new Set([...splitList(env.LK_WEBHOOK_URLS ?? ''), ...(env.LK_NOTIFY_URL ? [env.LK_NOTIFY_URL] : [])].map((url) => new URL(url).href))];
  return {
    /** The deployment's webhooks, trusted (no address check): notice targets `deployment:<index>`. */
    deploymentWebhooks: webhooks,
    /** Their HMAC key (X-Leasekeeper-Signature); unset: unsigned. */
    deploymentSecret: env.LK_WEBHOOK_SECRET,
    /** The approvers' webhook, the deployment's too (signed with its key): approval notices only, target `deployment:approvers`. */
    approversWebhook: env.LK_APPROVERS_WEBHOOK_URL ? new URL(env.LK_APPROVERS_WEBHOOK_URL).href : undefined,
    timeoutMs: env.LK_NOTICE_TIMEOUT_MS,
    retryForMs: Math.round(env.LK_NOTICE_RETRY_HOURS * 3_600_000),
    allowPrivate: env.LK_WEBHOOK_ALLOW_PRIVATE === 'true',
    /** How projects' webhook names are resolved: these name servers (unset: the system's), within this time. */
    dns: { servers: env.LK_WEBHOOK_DNS_SERVERS ? splitList(env.LK_WEBHOOK_DNS_SERVERS) : undefined, timeoutMs: env.LK_WEBHOOK_DNS_TIMEOUT_MS },
    oslo: env.LK_NOTIFICATION_TRANSPORT_URL
      ? { transportUrl: env.LK_NOTIFICATION_TRANSPORT_URL, exchange: env.LK_NOTIFICATION_EXCHANGE, topics: splitList(env.LK_NOTIFICATION_TOPICS), publisherId: env.LK_NOTIFICATION_PUBLISHER_ID }
      : undefined,
    delivery: {
      /** Connecting (name lookup, TCP and TLS) must be done within this, within the whole timeout. */
      connectTimeoutMs: Math.min(env.LK_NOTICE_CONNECT_TIMEOUT_MS, env.LK_NOTICE_TIMEOUT_MS),
      /** The notice worker's activity slots. */
      workerSlots: env.LK_NOTICE_WORKER_SLOTS,
      /** A project's webhook deliveries in flight at once in one worker. */
      projectInFlight: env.LK_NOTICE_PROJECT_IN_FLIGHT,
      /** Failures to answer in a row (time-outs, connection failures) that hold a webhook back. */
      breakerFailures: env.LK_WEBHOOK_BREAKER_FAILURES,
      /** The first hold's length; each failed probe doubles it, up to an hour. */
      breakerCooldownMs: env.LK_WEBHOOK_BREAKER_COOLDOWN_SECONDS * 1_000,
    },
  };
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** A setting as an error message may show it: a URL's password (database, message bus) masked; a secret never shown, even a wrong one. */
function shownValue(name: string, value: string): string {
  if (/_(TOKEN|SECRET|PASSWORD)$/.test(name)) return '***';
  return value.replace(/((?:\/\/|,)[^:@/\s,]*:)[^@/\s]*@/g, '$1***@');
}

/** Parses the environment; throws ConfigError whose message is one line naming the variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable means "use the default", as in most shells' ${VAR:-default}.
  const settings = parseVariables(envSchema, env);
  const { LK_AUTH_STRATEGY, LK_API_HOST, LK_ALLOW_NOAUTH_REMOTE } = settings;
  if (LK_AUTH_STRATEGY === 'noauth' && !isLoopback(LK_API_HOST) && LK_ALLOW_NOAUTH_REMOTE !== 'true') {
    throw new ConfigError(
      `invalid configuration: LK_API_HOST=${JSON.stringify(LK_API_HOST)}: noauth (LK_AUTH_STRATEGY) trusts identity headers, so it listens on loopback only; set LK_AUTH_STRATEGY=keystone, or LK_ALLOW_NOAUTH_REMOTE=true if the address is reachable only by trusted callers`,
    );
  }
  const power = powerSettings(settings);
  if (power.marginMs > power.offAfterIdleMs) {
    throw new ConfigError(`invalid configuration: LK_POWER_WAKE_MARGIN_SECONDS=${settings.LK_POWER_WAKE_MARGIN_SECONDS}: must be at most LK_POWER_OFF_AFTER_IDLE (${settings.LK_POWER_OFF_AFTER_IDLE}), or a host just woken could be put back to sleep before its booking`);
  }
  if (power.defaultBootMs + power.resumeTimeoutMs >= START_BOOT_WAIT_MS) {
    throw new ConfigError(
      `invalid configuration: LK_POWER_BOOT_SECONDS=${settings.LK_POWER_BOOT_SECONDS} + LK_POWER_RESUME_TIMEOUT_SECONDS=${settings.LK_POWER_RESUME_TIMEOUT_SECONDS}: must be less than ${START_BOOT_WAIT_MS / 1_000} s in all (a lease's start waits at most ${START_BOOT_WAIT_MS / 60_000} minutes for a host's boot, within its activity's 30 minutes)`,
    );
  }
  if ((settings.LK_POWER_COMMAND_ON === undefined) !== (settings.LK_POWER_COMMAND_OFF === undefined)) {
    throw new ConfigError('invalid configuration: LK_POWER_COMMAND_ON and LK_POWER_COMMAND_OFF go together (the command driver needs both programs)');
  }
  return toConfig(settings);
}

/** For process entry points: a bad setting ends the process with a one-line message. */
export function loadConfigOrExit(env: NodeJS.ProcessEnv = process.env): Config {
  return orExit(() => loadConfig(env));
}

/** For process entry points: whatever `make` builds from the settings, or the process ends with its ConfigError's one line. */
export function orExit<T>(make: () => T): T {
  try {
    return make();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`leasekeeper: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}
