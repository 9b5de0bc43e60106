/**
 * The API's OpenAPI 3.1 description, served at `GET /v1/openapi.json`. Request schemas are the
 * routes' own zod schemas (the ones that validate every request), so the description cannot drift
 * from what is accepted; responses are described here, in zod too. test/openapi.test.ts holds the
 * catalogue to the app: every route described, nothing described that is not a route, real
 * answers valid against the schemas given here.
 *
 * @asteasolutions/zod-to-openapi turns zod 4 schemas into OpenAPI 3.1 (JSON Schema 2020-12),
 * parameters and all: its generator is what keeps request and description one thing.
 */
import { extendZodWithOpenApi, OpenAPIRegistry, OpenApiGeneratorV31, type RouteConfig } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { POWER_DRIVER_KINDS } from '../domain/host-power';
import { EVENT_TYPES, LEASE_STATUSES } from '../domain/lease';
import type { ResourceTypes } from '../domain/resource-plugin';
import { availabilityQuery } from './availability';
import { calendarQuery } from './calendar';
import { calendarLoginBody } from './calendar-page';
import { floatingIpAllocationQuery, floatingIpEnrolBody } from './floating-ips';
import { networkAllocationQuery, networkEnrolBody } from './networks';
import { hostAllocationQuery } from './host-allocations';
import { powerActionBody } from './host-power';
import { hostEnrolBody, propertyPrivacyBody } from './hosts';
import { maintenanceBody, maintenanceListQuery } from './maintenance';
import { projectPolicyBody } from './project-policy';
import { approversWebhookBody, webhooksBody } from './webhooks';
import { LEASE_NOTICE_TYPES } from '../domain/notices';
import { approvalAnswerSchema, createLeaseSchema, lendSchema, listLeasesQuery, reclaimSchema, updateLeaseSchema } from './lease-schemas';
import { usageQuery } from './usage';
import { FIGURE_NAMES, GROUP_KEYS, type Figure } from '../domain/usage-report';

// `.openapi(name)` below: the schemas that become named components.
extendZodWithOpenApi(z);

/** Blazar's formats, each checked against real answers by the test: a lease's dates, a record's times, and a date a request takes. */
const leaseDate = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}$/).describe('UTC, as Blazar writes lease dates: "2026-11-21T09:15:00.000000"');
const timestamp = z.string().regex(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/).describe('UTC, as Blazar writes created_at and updated_at: "2026-11-21 09:15:00"');
const requestDateText = z.string().regex(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$/).describe('UTC, in the form a request takes: "2026-11-21 09:15"');
const nullableTimestamp = timestamp.nullable();

/** Blazar's error body, with the request's id and, for some refusals, more (e.g. `earliest_start`). */
const errorBody = z
  .looseObject({
    error_code: z.number().int(),
    error_message: z.string(),
    error_name: z.union([z.string(), z.number().int()]),
    request_id: z.string().optional(),
  })
  .openapi('Error');

const reservation = z
  .looseObject({
    id: z.string(),
    lease_id: z.string(),
    resource_type: z.string(),
    status: z.enum(['pending', 'active', 'deleted', 'error']),
    missing_resources: z.boolean(),
    resources_changed: z.boolean(),
    lendings: z
      .array(
        z.strictObject({
          id: z.string().describe('the lend request'),
          hosts: z.array(z.string()),
          slots: z.number().int().optional().describe('a virtual:instance reservation\'s lending: how many of its slots, on those hosts'),
          lent_at: leaseDate,
          until: leaseDate,
          state: z.enum(['lent', 'reclaiming', 'returned']),
          returns_at: leaseDate.nullable().describe('reclaiming: when the hosts come back (their borrowers out)'),
          borrowed: z.boolean().describe('a preemptible lease booked some of it (known once reclaimed or returned)'),
        }),
      )
      .optional()
      .describe('An extension (issue 43): the latest 20 lendings of its hosts to preemptible leases (POST /v1/leases/{id}/lend); never who borrowed'),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .describe("A reservation: the request's parameters and what its resource type reserved (e.g. `resource_ids`), beside these fields")
  .openapi('Reservation');

const leaseEvent = z.strictObject({
  id: z.string(),
  lease_id: z.string(),
  event_type: z.enum(EVENT_TYPES),
  time: leaseDate,
  status: z.enum(['UNDONE', 'IN_PROGRESS', 'DONE', 'ERROR']),
  created_at: timestamp,
  updated_at: nullableTimestamp,
});

const leaseApproval = z.strictObject({
  kind: z.enum(['rule', 'exception']),
  rule: z.string(),
  reason: z.string(),
  justification: z.string().nullable(),
  requested_at: timestamp,
  timeout_at: timestamp,
  on_timeout: z.enum(['deny', 'approve']),
  outcome: z.enum(['approved', 'denied']).nullable(),
  answered_by: z.enum(['admin', 'timeout', 'end', 'preempted']).nullable(),
  answer_reason: z.string().nullable(),
  answered_at: nullableTimestamp,
});

const lease = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    user_id: z.string(),
    project_id: z.string(),
    start_date: leaseDate,
    end_date: leaseDate,
    status: z.enum(LEASE_STATUSES),
    status_reason: z.string().optional(),
    degraded: z.boolean(),
    notify_before_end: z.array(z.string()).optional().describe('An extension: when the lease warns its listeners before its end'),
    series_id: z.string().optional().describe('An extension: the series of recurring leases this lease is an occurrence of'),
    approval: leaseApproval.optional().describe('An extension: why the lease waits (or waited) for approval (PENDING_APPROVAL), and the answer'),
    pending_change: z
      .strictObject({ end_date: leaseDate, reservations: z.array(reservation), ...leaseApproval.shape })
      .optional()
      .describe("An extension: an active lease's change waiting for approval (an exception asked with `justification`): booked, not in effect; the lease's `end_date` and `reservations` are still the current ones. Answered by POST /v1/leases/{id}/approve or /deny; `timeout_at` is never past the current end"),
    change_approval: leaseApproval.optional().describe("An extension: the last change of the active lease that waited for approval, and its answer (denied: the lease went on as it was)"),
    trust_id: z.null(),
    reservations: z.array(reservation),
    events: z.array(leaseEvent),
    created_at: timestamp,
    updated_at: nullableTimestamp.describe('null until the lease is first changed, as in Blazar'),
  })
  .openapi('Lease');

const host = z
  .looseObject({
    id: z.string(),
    hypervisor_hostname: z.string(),
    hypervisor_type: z.string().nullable(),
    hypervisor_version: z.union([z.number().int(), z.string()]).nullable(),
    service_name: z.string().nullable(),
    vcpus: z.number().int(),
    memory_mb: z.number().int(),
    local_gb: z.number().int(),
    cpu_info: z.string().nullable(),
    availability_zone: z.string().nullable(),
    reservable: z.boolean(),
    status: z.null(),
    state: z.enum(['up', 'failed']).describe("the host monitor's view: failed when its compute service is down, disabled or forced down, or its hypervisor gone"),
    state_since: nullableTimestamp.describe('when it entered that state (null: up since it was enrolled)'),
    state_reason: z.string().nullable().describe('why it failed, or that it recovered'),
    last_repair: z
      .strictObject({ at: z.iso.datetime(), found: z.string(), action: z.string(), repaired: z.boolean() })
      .nullable()
      .describe('the last time the host monitor found the host outside the aggregate the calendar says, and whether it moved it back (LK_DRIFT_REPAIR)'),
    released_at: nullableTimestamp,
    released_by_lease: z.string().nullable(),
    trust_id: z.null(),
    created_at: timestamp,
    updated_at: timestamp,
    power: z
      .strictObject({
        driver: z.enum(POWER_DRIVER_KINDS),
        address: z.string().nullable(),
        port: z.number().int().nullable(),
        username: z.string().nullable(),
        password_set: z.boolean().describe('whether a password is stored (it is never shown)'),
        node: z.string().nullable(),
        manage: z.boolean(),
        boot_seconds: z.number().int().nullable(),
      })
      .nullable()
      .optional()
      .describe('the power settings (one host shown, changed or enrolled; null: none, the host is never powered off)'),
    power_state: z.enum(['on', 'off', 'unknown']).optional().describe('the last power state read or brought about (not read from the BMC for this answer)'),
    powered_off_since: nullableTimestamp.optional().describe('since when the host has been off'),
    next_needed: nullableTimestamp.optional().describe('the start of its earliest booking of any kind not ended yet (host, slots, preemptible, lending, maintenance; in the past: booked now); null: none'),
    power_error: z
      .strictObject({ message: z.string(), at: timestamp, failures: z.number().int(), next_try: nullableTimestamp })
      .nullable()
      .optional()
      .describe("its power driver's last failure unless a call succeeded since: when, how many in a row, and when the planner tries again (null: at its next look); null: none"),
  })
  .describe('An enrolled compute host; its extra capabilities are fields beside these')
  .openapi('Host');

const floatingIp = z
  .strictObject({
    id: z.string(),
    floating_network_id: z.string(),
    subnet_id: z.string().nullable(),
    floating_ip_address: z.string(),
    reservable: z.boolean(),
    created_at: timestamp,
    updated_at: nullableTimestamp,
  })
  .openapi('FloatingIp');

const networkSegment = z
  .looseObject({
    id: z.string(),
    network_type: z.enum(['vlan', 'vxlan']),
    physical_network: z.string().nullable(),
    segment_id: z.string().describe('the VLAN or VXLAN tag, as text'),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .describe('An enrolled network segment; its extra capabilities are fields beside these')
  .openapi('NetworkSegment');

const allocatedReservation = z.strictObject({ id: z.string(), lease_id: z.string(), project_id: z.string(), start_date: leaseDate, end_date: leaseDate });
const maintenanceWindow = z
  .strictObject({
    id: z.string(),
    host_id: z.string(),
    hypervisor_hostname: z.string(),
    start_date: leaseDate,
    end_date: leaseDate,
    reason: z.string(),
    disable_compute: z.boolean(),
    compute_disabled: z.boolean().describe("whether the window's start disabled the compute service (until its end)"),
    status: z.enum(['scheduled', 'in_force', 'over']),
    created_at: timestamp,
  })
  .openapi('MaintenanceWindow');
const bookedMaintenance = maintenanceWindow.extend({
  leases_told: z.array(z.string()).describe('pending leases that overlap it: told to heal (moved to other hosts, or flagged and their owners notified)'),
  leases_ended: z.array(z.string()).describe('leases that had begun, ended at its start ("force": true)'),
  leases_not_ended: z.array(z.strictObject({ lease_id: z.string(), error: z.string() })),
});
const windowParams = z.object({ id: z.string().max(255).describe('the host id'), windowId: z.string().max(255).describe('the window id') });
const hostAllocatedReservation = allocatedReservation.extend({ preemptible: z.literal(true).optional().describe('a preemptible booking (extension): a regular lease may cut it') });
const hostAllocation = z.strictObject({ resource_id: z.string(), hypervisor_hostname: z.string().optional(), reservations: z.array(hostAllocatedReservation) }).openapi('HostAllocation');
const networkAllocation = z.strictObject({ resource_id: z.string(), reservations: z.array(allocatedReservation) }).openapi('NetworkSegmentAllocation');
const floatingIpAllocation = z.strictObject({ resource_id: z.string(), floating_ip_address: z.string(), reservations: z.array(allocatedReservation) }).openapi('FloatingIpAllocation');

const versions = z.strictObject({
  versions: z.array(
    z.strictObject({
      id: z.string(),
      status: z.string(),
      min_version: z.string(),
      max_version: z.string(),
      links: z.array(z.strictObject({ rel: z.string(), href: z.string() })),
    }),
  ),
});

const check = z.looseObject({ ok: z.boolean(), latency_ms: z.number(), error: z.string().optional(), detail: z.record(z.string(), z.unknown()).optional() });
const health = z.strictObject({ status: z.enum(['ok', 'unavailable']), checks: z.strictObject({ temporal: check, database: check, worker: check.optional() }) });

const freeWindow = z.strictObject({
  start_date: leaseDate.describe('the free interval as stored, to the second'),
  end_date: leaseDate,
  start: requestDateText.nullable().describe('a start date to reuse in a request (whole minutes), null when no whole minute fits'),
  end: requestDateText.nullable(),
});
const availability = z.strictObject({
  availability: z.array(z.strictObject({ host_id: z.string(), hypervisor_hostname: z.string(), free: z.array(freeWindow), free_slots: z.number().int().optional() })),
  floatingips: z.strictObject({ network_id: z.string(), free: z.array(z.strictObject({ id: z.string(), floating_ip_address: z.string() })) }).optional(),
});
const window = z.strictObject({ start_date: requestDateText, end_date: requestDateText.nullable() });
const searchAnswer = z.strictObject({ earliest: window.nullable(), longest_from_start: window.nullable(), note: z.string().optional() });
const offer = z
  .strictObject({
    id: z.string(),
    kind: z.enum(['exact', 'later', 'shorter', 'fewer', 'extension']).describe('`extension`: a new end_date for an existing lease (extension offers)'),
    start_date: requestDateText,
    end_date: requestDateText,
    reservations: z.array(z.looseObject({ resource_type: z.string() })).describe('what each reservation would book, in counts: hosts, instances, addresses, ports and bandwidth; for admins, a host reservation also has would_book (the hosts: id, hypervisor_hostname)'),
    reason: z.string(),
    expires_at: z.string(),
    refused_by: z.string().optional().describe('the usage policy rule that refuses it (listed only when nothing else exists)'),
  })
  .openapi('Offer');
const offersAnswer = z.strictObject({ offers: z.array(offer), note: z.string().optional() });
const offerHold = z
  .strictObject({
    id: z.string().describe('the hold id: the id of the lease an accept records'),
    offer_id: z.string(),
    status: z.enum(['held', 'accepted', 'ended']),
    end_reason: z.enum(['expired', 'released', 'refused']).optional(),
    lease_id: z.string().optional().describe('once accepted'),
    start_date: requestDateText,
    end_date: requestDateText,
    expires_at: z.string(),
    reservations: z.array(z.looseObject({ resource_type: z.string() })),
  })
  .openapi('OfferHold');
const offerHoldAnswer = z.strictObject({ hold: offerHold });

const bookingLease = z.looseObject({ start_ms: z.number(), end_ms: z.number(), reserved: z.boolean().optional(), lease_id: z.string().optional(), mine: z.boolean().optional() });
const calendar = z.strictObject({
  start_ms: z.number(),
  end_ms: z.number(),
  now_ms: z.number(),
  hosts: z.array(z.strictObject({ id: z.string(), hypervisor_hostname: z.string(), vcpus: z.number(), memory_mb: z.number(), local_gb: z.number(), properties: z.record(z.string(), z.unknown()) })),
  bookings: z.array(
    bookingLease.extend({
      host_id: z.string(),
      shared: z.boolean().optional(),
      preemptible: z.literal(true).optional().describe('a preemptible booking (anyone\'s): a regular lease may take it back'),
      preempted: z.literal(true).optional().describe('its lease was preempted (only to whoever may know the lease)'),
      cut_ms: z.number().optional().describe('with preempted: the end the lease was cut to'),
      borrowed: z.literal(true).optional().describe('a preemptible booking inside another lease\'s lending (issue 43)'),
    }),
  ),
  lent: z
    .array(
      z.strictObject({
        host_id: z.string(),
        start_ms: z.number(),
        end_ms: z.number(),
        state: z.enum(['lent', 'reclaiming', 'returned']),
        lease_id: z.string().optional().describe('the lending lease (only to its project and admins)'),
      }),
    )
    .describe('hosts lent by the lease holding them (anyone\'s): time only preemptible leases may book'),
  powered_off: z
    .array(
      z.strictObject({
        host_id: z.string(),
        since_ms: z.number().describe('when the host was powered off'),
        wake_ms: z.number().nullable().describe('when the power planner will wake it for its next booking; null: no booking ahead, or no planner'),
      }),
    )
    .optional()
    .describe('hosts powered off now (admins only: members are sent nothing of hosts\' power)'),
  providers: z.array(z.looseObject({ uuid: z.string(), name: z.string(), kind: z.string() })),
  usage: z.array(bookingLease.extend({ provider_uuid: z.string(), amounts: z.record(z.string(), z.number()) })),
  networks: z
    .array(
      z.strictObject({
        id: z.string(),
        network_type: z.enum(['vlan', 'vxlan']),
        physical_network: z.string().nullable(),
        segment_id: z.string(),
        properties: z.record(z.string(), z.string()).optional().describe("the segment's extra capabilities (admins only)"),
        bookings: z.array(bookingLease),
      }),
    )
    .describe('the enrolled network segments (issue 45) and their bookings in the window'),
  leases: z.array(z.strictObject({ id: z.string(), name: z.string(), status: z.enum(LEASE_STATUSES), start_ms: z.number(), end_ms: z.number(), series_id: z.string().optional(), preemptible: z.literal(true).optional() })),
  series: z
    .array(z.strictObject({ id: z.string(), name: z.string(), gaps: z.array(z.strictObject({ name: z.string(), start_ms: z.number(), end_ms: z.number(), reason: z.string() })) }))
    .describe("the caller's series with occurrences refused in the window (gaps)"),
  truncated: z.boolean().optional(),
  note: z.string().optional(),
});

const refusedOccurrence = z.looseObject({ name: z.string(), start_date: requestDateText, end_date: requestDateText, reason: z.string(), error_message: z.string(), offers: z.array(offer).optional() });
const series = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    project_id: z.string(),
    recurrence: z.string(),
    created_at: z.string(),
    occurrences: z.array(z.strictObject({ lease_id: z.string(), name: z.string(), start_date: requestDateText, end_date: requestDateText, status: z.enum(LEASE_STATUSES) })),
    refused: z.array(refusedOccurrence).describe('occurrences a partial create could not admit: the gaps of the series'),
  })
  .openapi('Series');

const usageFigures = z
  .strictObject(Object.fromEntries(FIGURE_NAMES.map((f) => [f, z.number().min(0)])) as Record<Figure, z.ZodNumber>)
  .describe('resource-hours, rounded to 4 decimals: memory in GB (1024 MB), bandwidth in Mbit/s (1000 kbit/s)')
  .openapi('UsageFigures');
const chargedUsage = z.strictObject({ booked: usageFigures, used: usageFigures }).describe('as charged: preemptible hours times preemptible_charge_factor, the others in full');
const preemptibleUsage = z
  .strictObject({ booked: usageFigures, used: usageFigures, leases: z.number().int().min(0).describe('distinct leases with preemptible time in the group') })
  .describe('the preemptible part of booked and used (borrowed time), in full');
const lentUsage = z
  .strictObject({ host_hours: z.number().min(0), ...Object.fromEntries(FIGURE_NAMES.filter((f) => f !== 'host_hours').map((f) => [f, z.number().min(0).optional()])) })
  .describe("host-hours the group's leases lent (issue 43), from lent until back, and the vCPU, memory and disk hours of the instance slots they lent (when not zero); only in groups that lent");
const slotCredit = z
  .strictObject(Object.fromEntries(FIGURE_NAMES.map((f) => [f, z.number().min(0).optional()])))
  .describe("borrowed hours of the group's lent instance slots back in the window, per figure, times preemptible_charge_factor: taken off those charged figures (never below 0); only in groups whose lent slots were borrowed");
const borrowedCredit = z.number().min(0).describe("borrowed host-hours of the group's lendings back in the window, times preemptible_charge_factor: taken off charged host_hours (never below 0); only in groups that lent");
const usageReport = z.strictObject({
  usage: z.strictObject({
    from: leaseDate,
    to: leaseDate,
    group_by: z.array(z.enum(GROUP_KEYS)),
    preemptible_charge_factor: z.number().min(0).max(1).describe('what a preemptible hour is charged for (LK_PREEMPTIBLE_CHARGE_FACTOR)'),
    groups: z.array(
      z.strictObject({
        project_id: z.string().optional(),
        resource_type: z.string().optional(),
        month: z.string().regex(/^\d{4}-\d{2}$/).optional().describe('a calendar month, UTC: "2026-11"'),
        booked: usageFigures,
        used: usageFigures,
        charged: chargedUsage,
        preemptible: preemptibleUsage.optional().describe('only in groups with preemptible time'),
        leases: z.number().int().min(0).describe('distinct leases booked or used within the group'),
        lent: lentUsage.optional(),
        borrowed_credit_hours: borrowedCredit.optional(),
        borrowed_credit: slotCredit.optional(),
      }),
    ),
    total: z.strictObject({ booked: usageFigures, used: usageFigures, charged: chargedUsage, preemptible: preemptibleUsage, leases: z.number().int().min(0), lent: lentUsage.optional(), borrowed_credit_hours: borrowedCredit.optional(), borrowed_credit: slotCredit.optional() }),
  }),
}).openapi('Usage');

const json = <T extends z.ZodType>(schema: T, description: string) => ({ description, content: { 'application/json': { schema } } });
const refusal = (description: string) => json(errorBody, description);
const noContent = (description: string) => ({ description });
const idParam = (what: string) => z.object({ id: z.string().max(255).describe(what) });
const projectParam = z.object({ projectId: z.string().max(255).describe('the project id') });
/** A project's usage policy: the rules in force and their layers (each written as `PUT` takes it). */
const projectPolicy = z.strictObject({
  project_id: z.string(),
  effective: projectPolicyBody,
  deployment: projectPolicyBody,
  project_file: projectPolicyBody.nullable(),
  project: projectPolicyBody.nullable(),
  updated_at: nullableTimestamp,
  updated_by: z.string().nullable(),
});

/** A project's webhook as the API shows it: never its secret, but once, when a PUT generated it. */
const projectWebhook = z
  .strictObject({
    id: z.uuid(),
    url: z.string(),
    events: z.array(z.enum(LEASE_NOTICE_TYPES)).nullable().describe('the lease event types it gets; null: all'),
    secret_set: z.literal(true),
    secret: z.string().optional().describe('the generated secret, in the answer of the PUT that generated it only'),
    delivered_count: z.number().int().min(0),
    dropped_count: z.number().int().min(0).describe('notices given up on: refused, or still failing after LK_NOTICE_RETRY_HOURS'),
    last_error: z.string().nullable(),
    last_error_at: nullableTimestamp,
    created_at: timestamp,
  })
  .openapi('ProjectWebhook');

/** The refusals every authenticated route can answer with, beside its own. */
const COMMON_REFUSALS = {
  400: refusal('a malformed request: the first problem, naming the field'),
  401: refusal('no valid X-Auth-Token (keystone)'),
  503: refusal('a dependency (PostgreSQL, Temporal, OpenStack) did not answer, or concurrent bookings of the same resources won every try (with Retry-After): try again'),
};

/** Everything under /v1 but the description itself: Keystone tokens, or noauth's identity headers in development. */
const AUTHENTICATED = [{ keystone: [] }];

/** One documented route. `path` in OpenAPI's form; the test compares it with Express's. */
type Operation = Omit<RouteConfig, 'responses'> & { summary: string; description: string; tags: [string]; responses: RouteConfig['responses'] };

/**
 * The reservation body a lease request accepts, by resource type: the types this deployment runs
 * (the same ones createLeaseSchema checks against), each with its parameters' schema.
 */
function reservationRequest(types: ResourceTypes) {
  const byType = [...types.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, type]) => z.intersection(z.object({ resource_type: z.literal(name) }), type.paramsSchema).describe(`a ${name} reservation`));
  return byType.length === 0 ? z.never() : byType.length === 1 ? byType[0] : z.union(byType as unknown as [z.ZodType, z.ZodType, ...z.ZodType[]]);
}

export function apiOperations(types: ResourceTypes): Operation[] {
  const leaseCreate = createLeaseSchema(types).extend({ reservations: z.array(reservationRequest(types)).nullish() });
  const leaseBody = json(z.strictObject({ lease }), 'the lease');
  const notFound = refusal('no such object (or not visible to the caller)');
  const adminOnly = refusal("the caller is not an admin (Blazar's policy refusal)");
  return [
    {
      method: 'get', path: '/', tags: ['versions'], summary: 'API versions',
      description: "Blazar's version document: one version, v1.0, linked at the configured public URL (LK_PUBLIC_URL). Also at /versions. Answers 300 Multiple Choices, as Blazar does.",
      responses: { 300: json(versions, 'the versions') },
    },
    {
      method: 'get', path: '/versions', tags: ['versions'], summary: 'API versions',
      description: 'The same document as `GET /`.',
      responses: { 300: json(versions, 'the versions') },
    },
    {
      method: 'get', path: '/healthz', tags: ['operations'], summary: 'Health of the API and what it needs',
      description: 'Checks Temporal and PostgreSQL (and, with `deep=1`, that a worker answers a self-check workflow; shared between callers for LK_HEALTH_DEEP_INTERVAL_SECONDS). No identity needed.',
      request: { query: z.object({ deep: z.enum(['1', 'true', 'yes', '0', 'false', 'no']).optional() }) },
      responses: { 200: json(health, 'all checks passed'), 503: json(health, 'a check failed: which one, and why') },
    },
    {
      method: 'get', path: '/metrics', tags: ['operations'], summary: 'Prometheus metrics of the API',
      description: 'Requests by route and status, create latency, admissions and refusals by reason, leases by status (read from the database at most every LK_API_METRICS_CACHE_SECONDS), calendar query latency, and the Node.js process. No Keystone identity: with LK_API_METRICS_TOKEN, `Authorization: Bearer <token>`; with LK_API_METRICS_PORT, served on that port instead of here.',
      responses: { 200: { description: 'the Prometheus text format', content: { 'text/plain': { schema: z.string() } } }, 401: refusal('LK_API_METRICS_TOKEN is set and the request does not carry it') },
    },
    {
      method: 'get', path: '/v1/openapi.json', tags: ['versions'], summary: 'This description',
      description: 'The OpenAPI 3.1 description of this API, with the reservation parameters of the resource types this deployment runs. No identity needed.',
      responses: { 200: { description: 'an OpenAPI 3.1 document', content: { 'application/json': { schema: z.looseObject({ openapi: z.string() }) } } } },
    },
    {
      method: 'get', path: '/v1/leases', tags: ['leases'], summary: 'List leases',
      description: "The caller's project's leases (an admin's: every project's, or `project_id`'s), newest first. Without `limit` the whole list is streamed; with it, a page and a `leases_links` next link (`marker`). `from`/`to` keep the leases whose window overlaps them. `awaiting_approval=true` (an extension) keeps those an admin's answer is waited for: `PENDING_APPROVAL` leases and active leases with a `pending_change`.",
      security: AUTHENTICATED,
      request: { query: listLeasesQuery },
      responses: {
        200: json(z.strictObject({ leases: z.array(lease), leases_links: z.array(z.strictObject({ rel: z.literal('next'), href: z.string() })).optional() }), 'the leases'),
        ...COMMON_REFUSALS,
      },
    },
    {
      method: 'post', path: '/v1/leases', tags: ['leases'], summary: 'Create a lease',
      description:
        "Admits the lease only if every reservation's resources are free for the whole window (the calendars' constraints decide), then answers with it PENDING (or ACTIVE soon after for `now`). Its workflow starts it on time and cleans up after it. An `Idempotency-Key` header makes a retry return the same lease (with `recurrence`, the same series: no second one, even for copies sent together); the same key with another body, or already used for the other kind of create (a lease's key on a series or the other way round), is a 409.",
      security: AUTHENTICATED,
      request: {
        headers: z.object({ 'Idempotency-Key': z.string().min(1).max(255).optional() }),
        body: { content: { 'application/json': { schema: leaseCreate } }, required: true },
      },
      responses: {
        201: {
          description: 'the lease; with `recurrence`, the series, its admitted occurrences (`leases`, the first also as `lease`) and those refused (`partial`), each with offers',
          content: { 'application/json': { schema: z.union([z.strictObject({ lease }), z.strictObject({ lease: lease.optional(), series, leases: z.array(lease), refused: z.array(refusedOccurrence) })]) } },
        },
        ...COMMON_REFUSALS,
        403: refusal('a policy refused it (too long, too far ahead, an admin-only end policy, a private property)'),
        409: refusal('the resources are not free for the window (with the earliest start that fits, when one was found), or the name is taken'),
        410: refusal('the Idempotency-Key belongs to a lease (or series) that was deleted'),
      },
    },
    {
      method: 'get', path: '/v1/leases/{id}', tags: ['leases'], summary: 'Show a lease',
      description: "The lease as stored by its workflow's last transition. Another project's lease is a 404 for a non-admin.",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id') },
      responses: { 200: leaseBody, ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'put', path: '/v1/leases/{id}', tags: ['leases'], summary: 'Update a lease',
      description:
        "Renames it, moves its dates (the bookings move with them, or nothing changes: 409), or ends it now (`end_date: \"now\"`). Blazar's rules: a started lease's start cannot move; `reservations` change a reservation's parameters by id. A refusal for capacity or a usage policy rule also carries `reason` and `offers` (an extension's: the ends up to `latest_end`).",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id'), body: { content: { 'application/json': { schema: updateLeaseSchema } }, required: true } },
      responses: { 200: leaseBody, ...COMMON_REFUSALS, 403: refusal('a policy refused the change'), 404: notFound, 409: refusal('the new window is not free, the name is taken, or the lease is changing') },
    },
    {
      method: 'delete', path: '/v1/leases/{id}', tags: ['leases'], summary: 'Delete a lease',
      description: "Takes back what the lease's phase holds (servers, aggregates, bookings) and removes it, answering once it is gone, as Blazar's delete is synchronous. A cleanup that outlasts the API's deadline in a slow cloud answers 202 with the lease DELETING.",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id') },
      responses: { 204: noContent('the lease is gone'), 202: leaseBody, ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'get', path: '/v1/series/{id}', tags: ['leases'], summary: 'Show a series of recurring leases (extension)',
      description: 'The series (its rule, and what the create asked), its occurrences by start with their status, and the occurrences a partial create refused. Another project\'s series is a 404 for a non-admin.',
      security: AUTHENTICATED,
      request: { params: idParam('the series id') },
      responses: { 200: json(z.strictObject({ series }), 'the series'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'put', path: '/v1/series/{id}', tags: ['leases'], summary: 'Change a series from an occurrence on (extension)',
      description:
        'Moves the occurrences from `from` on (an occurrence\'s lease id, or a date: those starting then or later; all when absent) to a new time of day (`start_time`, "HH:MM" UTC, on each one\'s own day) and/or a new `duration` (minutes), each through the lease update path. Or, alone in its PUT, changes where the series ends: `count` (the rule\'s COUNT, from the first occurrence, at most LK_MAX_OCCURRENCES) or `until` ("YYYY-MM-DD HH:MM" UTC, the rule\'s UNTIL). Fewer: the occurrences past the new end are deleted (one started or ended never is: it is listed in `untouched`); more: the new ones are admitted as a create admits them, the usage policy counting each. All or nothing: a refused occurrence leaves the series as it was and answers 409/403 with every refusal and its offers; `partial: true` keeps what could change and lists the rest.',
      security: AUTHENTICATED,
      request: {
        params: idParam('the series id'),
        body: { content: { 'application/json': { schema: z.strictObject({ from: z.string().optional(), start_time: z.string().optional(), duration: z.number().int().optional(), count: z.number().int().min(1).optional(), until: z.string().optional(), partial: z.boolean().optional() }) } }, required: true },
      },
      responses: {
        200: json(
          z.strictObject({
            series,
            refused: z.array(refusedOccurrence),
            untouched: z.array(z.strictObject({ lease_id: z.string(), name: z.string(), status: z.enum(LEASE_STATUSES), reason: z.string() })).optional().describe('with `count` or `until`: occurrences past the new end left alone because they started or ended'),
          }),
          'the series as changed, and the occurrences refused (partial)',
        ),
        ...COMMON_REFUSALS,
        403: refusal('a usage policy rule refuses an occurrence (with `refused` and offers)'),
        404: notFound,
        409: refusal('an occurrence does not fit at its new time (with `refused` and offers)'),
      },
    },
    {
      method: 'delete', path: '/v1/series/{id}', tags: ['leases'], summary: 'Delete a series from an occurrence on (extension)',
      description: 'Deletes the occurrence `from` (a lease id) and those after it, or every occurrence (and the series) without `from`, each as a lease delete.',
      security: AUTHENTICATED,
      request: { params: idParam('the series id'), query: z.object({ from: z.string().optional() }) },
      responses: { 204: noContent('deleted'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'get', path: '/v1/leases/{id}/extension-offers', tags: ['leases'], summary: 'How far could this lease be extended? (extension)',
      description:
        'The longest extension possible now (its resources kept: up to the next booking of them) and shorter steps (halves), each an `end_date` to PUT; steps the usage policy refuses are left out, or listed with the rule when none is allowed. A type that cannot tell leaves a `note`.',
      security: AUTHENTICATED,
      request: { params: idParam('the lease id') },
      responses: { 200: json(offersAnswer, 'the extension offers, longest first'), ...COMMON_REFUSALS, 404: notFound, 409: refusal('the lease has ended or is being deleted') },
    },
    ...(['approve', 'deny'] as const).map((outcome) => ({
      method: 'post' as const, path: `/v1/leases/{id}/${outcome}`, tags: ['leases'] as [string], summary: outcome === 'approve' ? 'Approve a lease waiting for approval' : 'Deny a lease waiting for approval',
      description:
        outcome === 'approve'
          ? 'A lease PENDING_APPROVAL (an approval rule, or an exception asked with `justification`) goes on PENDING, waiting for its start; one whose start has passed starts at once, its end unchanged. An active lease with a `pending_change` takes the change (its end moves). Admins only.'
          : "A lease PENDING_APPROVAL is denied: its capacity is freed and it ends TERMINATED, `status_reason` naming the reason. An active lease's `pending_change` is denied: what it booked is freed and the lease goes on as it was. Admins only.",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id'), body: { content: { 'application/json': { schema: approvalAnswerSchema } }, required: false } },
      responses: { 200: leaseBody, ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('the lease is not waiting for approval') },
    })),
    {
      method: 'post', path: '/v1/leases/{id}/lend', tags: ['leases'], summary: "Lend an active lease's idle hosts or instance slots to preemptible leases (extension)",
      description:
        "`count` idle hosts of the lease's host reservation, or `count` idle slots of its instance reservation (`reservation_id` when it has more than one that can lend), are lent until `until` (later than now plus the preemption warning, no later than the lease's end): preemptible leases may book them inside that time, regular leases never. Idle: a host with no server of any project on it; a slot no server of the reservation's flavor uses (a calendar-only deployment: every host or slot not lent). The lease's project or an admin; docs/api.md, \"Lending\".",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id'), body: { content: { 'application/json': { schema: lendSchema } }, required: true } },
      responses: {
        200: leaseBody,
        ...COMMON_REFUSALS,
        404: notFound,
        409: refusal('the lease is not active, its reservation has 20 lendings out, or fewer hosts or slots than asked are idle (`idle`: how many are)'),
      },
    },
    {
      method: 'post', path: '/v1/leases/{id}/reclaim', tags: ['leases'], summary: 'Take lent hosts or slots back (extension)',
      description:
        "`count` lent hosts or slots (all when left out; unborrowed ones first; slots by whole lendings on a host, so perhaps more than `count`) are taken back, needed from `needed_at` (when left out: now plus the preemption warning and the telling's time, a tenth of the warning, at most 5 s): their borrowers are cut to end by then and told (`lease.preempting`, reason `reclaimed: …`); each host comes back into the lease once its borrowers are out (`returns_at`), waited for at most LK_PREEMPT_EVICTION_SECONDS.",
      security: AUTHENTICATED,
      request: { params: idParam('the lease id'), body: { content: { 'application/json': { schema: reclaimSchema } }, required: false } },
      responses: { 200: leaseBody, ...COMMON_REFUSALS, 404: notFound, 409: refusal('the lease is not active, lends nothing, or lends fewer hosts or slots than `count`') },
    },
    {
      method: 'get', path: '/v1/os-hosts', tags: ['hosts'], summary: 'List enrolled hosts',
      description: 'Every compute host enrolled for reservations, with its extra capabilities. Admins only.',
      security: AUTHENTICATED,
      responses: { 200: json(z.strictObject({ hosts: z.array(host) }), 'the hosts'), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'post', path: '/v1/os-hosts', tags: ['hosts'], summary: 'Enrol a host',
      description: "Enrols a Nova compute host (by its hypervisor hostname) into the reservable pool; it must have no servers. Other fields become the host's extra capabilities, but `power`: its power settings, as `PUT /v1/os-hosts/{id}` takes them. Admins only.",
      security: AUTHENTICATED,
      request: { body: { content: { 'application/json': { schema: hostEnrolBody } }, required: true } },
      responses: { 201: json(z.strictObject({ host }), 'the enrolled host'), ...COMMON_REFUSALS, 403: adminOnly, 404: refusal('Nova has no such hypervisor'), 409: refusal('already enrolled, or it has servers') },
    },
    {
      method: 'get', path: '/v1/os-hosts/properties', tags: ['hosts'], summary: 'List host capabilities',
      description: 'The names of the extra capabilities hosts have (`detail=1`: with whether each is private). Private ones are shown to admins only, with `all=1`.',
      security: AUTHENTICATED,
      request: { query: z.object({ detail: z.string().optional(), all: z.string().optional() }) },
      responses: {
        200: json(z.strictObject({ resource_properties: z.array(z.looseObject({ property: z.string(), private: z.boolean().optional() })) }), 'the capabilities'),
        ...COMMON_REFUSALS,
      },
    },
    {
      method: 'patch', path: '/v1/os-hosts/properties/{name}', tags: ['hosts'], summary: 'Make a capability private or public',
      description: "A private capability is hidden from non-admins: not listed, not shown on hosts, and a non-admin's query that names it is refused. Admins only.",
      security: AUTHENTICATED,
      request: { params: z.object({ name: z.string().max(255) }), body: { content: { 'application/json': { schema: propertyPrivacyBody } }, required: true } },
      responses: { 200: json(z.strictObject({ resource_property: z.strictObject({ property: z.string(), private: z.boolean() }) }), 'the capability'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'get', path: '/v1/os-hosts/allocations', tags: ['hosts'], summary: "List hosts' bookings",
      description: "Every enrolled host with the reservations booked on it (filtered by `lease_id`, `reservation_id`, or a `from`/`to` window), streamed; a preemptible booking's entry says `preemptible: true`. A non-admin sees only the hosts and bookings of their own project's leases.",
      security: AUTHENTICATED,
      request: { query: hostAllocationQuery },
      responses: { 200: json(z.strictObject({ allocations: z.array(hostAllocation) }), 'the allocations'), ...COMMON_REFUSALS },
    },
    {
      method: 'get', path: '/v1/os-hosts/{id}', tags: ['hosts'], summary: 'Show a host',
      description: 'One enrolled host with its extra capabilities. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id') },
      responses: { 200: json(z.strictObject({ host }), 'the host'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'put', path: '/v1/os-hosts/{id}', tags: ['hosts'], summary: "Change a host's capabilities, or take it out of admission",
      description:
        'Sets extra capabilities (the body itself, as blazarclient sends it, or under `values`, as Blazar\'s API reference writes it). A capability that a live lease\'s query relies on cannot change (409). `reservable` (true or false, also as text) is no capability: false keeps the host enrolled but out of new leases, and its pending leases are booked elsewhere or flagged; a released host cannot be made reservable this way (409: enrol it again). `power` is no capability either: the host\'s power settings (`driver` ipmi, ironic, command or none; `address`, `port`, `username`, `password` for ipmi; `node` for ironic; `manage`; `boot_seconds`), the fields given replacing the stored ones (null clears one), checked complete for the driver (400). Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id'), body: { content: { 'application/json': { schema: z.record(z.string(), z.unknown()) } }, required: true } },
      responses: { 200: json(z.strictObject({ host }), 'the host'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('a lease that holds the host now or later relies on the capability, or the host was released') },
    },
    {
      method: 'post', path: '/v1/os-hosts/{id}/power', tags: ['hosts'], summary: 'Wake a host or put it to sleep',
      description:
        'An extension (issue 48). Powers the host on or off through its power driver (`power.driver`: ipmi, ironic or command). Off is refused (409) while the host is booked now or its next booking starts within its boot time. The answer is the host with its power fields; a BMC or program that did not answer is a 503 (try again), one that refused (credentials, a missing program, an unknown node) a 502. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id'), body: { content: { 'application/json': { schema: powerActionBody } }, required: true } },
      responses: {
        200: json(z.strictObject({ host }), 'the host'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound,
        409: refusal('the host has no power driver, or is booked now or within its boot time'), 502: refusal('the BMC, Ironic or the program refused'), 503: refusal('the BMC, Ironic or the program did not answer'),
      },
    },
    {
      method: 'delete', path: '/v1/os-hosts/{id}', tags: ['hosts'], summary: 'Remove a host',
      description: 'Takes the host out of the reservable pool (back to Nova), refused while a lease holds or will hold it. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id') },
      responses: { 204: noContent('removed'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('a lease holds or will hold the host') },
    },
    {
      method: 'get', path: '/v1/os-hosts/{id}/allocation', tags: ['hosts'], summary: "Show a host's bookings",
      description: "The reservations booked on one host; a non-admin sees only their own project's.",
      security: AUTHENTICATED,
      request: { params: idParam('the host id'), query: hostAllocationQuery },
      responses: { 200: json(z.strictObject({ allocation: hostAllocation }), 'the allocation'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'post', path: '/v1/os-hosts/{id}/maintenance', tags: ['maintenance'], summary: 'Book a maintenance window on a host',
      description:
        'An extension. The host is blocked over [start_date, end_date): new leases avoid it; pending leases booked on it then move to other hosts (same rules as healing) or are flagged (`missing_resources`) and their owners notified with where the lease would fit. A lease that has begun is never cut short: 409, unless `"force": true`, which ends it at the window\'s start. `disable_compute`: the compute service is disabled in Nova over the window (the host monitor does not count that as a failure) and enabled at its end. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id'), body: { content: { 'application/json': { schema: maintenanceBody } }, required: true } },
      responses: { 201: json(z.strictObject({ maintenance: bookedMaintenance }), 'the window'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('another window overlaps, a lease that has begun holds the host (without force), or the host was released') },
    },
    {
      method: 'get', path: '/v1/os-hosts/{id}/maintenance', tags: ['maintenance'], summary: "List a host's maintenance windows",
      description: 'Those not over yet (`all=true`: past ones too), by start; `limit` (at most 1000) and `marker` (the last window of the previous page) page through them. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the host id'), query: maintenanceListQuery },
      responses: { 200: json(z.strictObject({ maintenance: z.array(maintenanceWindow) }), 'the windows'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'get', path: '/v1/os-hosts/{id}/maintenance/{windowId}', tags: ['maintenance'], summary: 'Show a maintenance window',
      description: 'One window of the host. Admins only.',
      security: AUTHENTICATED,
      request: { params: windowParams },
      responses: { 200: json(z.strictObject({ maintenance: maintenanceWindow }), 'the window'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'delete', path: '/v1/os-hosts/{id}/maintenance/{windowId}', tags: ['maintenance'], summary: 'Withdraw a maintenance window',
      description: 'Before its start it is deleted; in force it ends now (kept on record): the compute service is enabled again and the leases on the host are told (their flags clear). Admins only.',
      security: AUTHENTICATED,
      request: { params: windowParams },
      responses: { 204: noContent('withdrawn'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('the window is over') },
    },
    {
      method: 'get', path: '/v1/maintenance', tags: ['maintenance'], summary: 'List maintenance windows of every host',
      description: 'Those not over yet (`all=true`: past ones too; `host_id`: one host), by start, paged by `limit` and `marker`. Admins only.',
      security: AUTHENTICATED,
      request: { query: maintenanceListQuery },
      responses: { 200: json(z.strictObject({ maintenance: z.array(maintenanceWindow) }), 'the windows'), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'get', path: '/v1/maintenance/{windowId}', tags: ['maintenance'], summary: 'Show a maintenance window',
      description: 'One window, by id. Admins only.',
      security: AUTHENTICATED,
      request: { params: z.object({ windowId: z.string().max(255).describe('the window id') }) },
      responses: { 200: json(z.strictObject({ maintenance: maintenanceWindow }), 'the window'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'delete', path: '/v1/maintenance/{windowId}', tags: ['maintenance'], summary: 'Withdraw a maintenance window',
      description: 'As `DELETE /v1/os-hosts/{id}/maintenance/{windowId}`. Admins only.',
      security: AUTHENTICATED,
      request: { params: z.object({ windowId: z.string().max(255).describe('the window id') }) },
      responses: { 204: noContent('withdrawn'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('the window is over') },
    },
    {
      method: 'get', path: '/v1/projects/{projectId}/policy', tags: ['usage policy'], summary: "Show a project's usage policy",
      description:
        'An extension. The rules in force for the project (`effective`) and the layers they come from: the deployment\'s (the environment and `LK_POLICY_FILE`\'s defaults), the file\'s entry for the project, and what an admin set over the API (`project`). Members see their own project\'s only.',
      security: AUTHENTICATED,
      request: { params: projectParam },
      responses: { 200: json(z.strictObject({ policy: projectPolicy }), 'the policy'), ...COMMON_REFUSALS, 403: refusal("another project's policy (members)") },
    },
    {
      method: 'put', path: '/v1/projects/{projectId}/policy', tags: ['usage policy'], summary: "Set a project's usage policy",
      description:
        'Sets the project\'s own rules over the deployment\'s: each key sets a limit, `null` lifts it, an absent key keeps the deployment\'s; `budget` and `extension` are replaced whole. Durations are written `90m`, `48h`, `7d` or `2w`. They apply to leases admitted or changed from now on. Admins only.',
      security: AUTHENTICATED,
      request: { params: projectParam, body: { content: { 'application/json': { schema: projectPolicyBody } }, required: true } },
      responses: {
        200: json(z.strictObject({ policy: projectPolicy, allocation_end: z.strictObject({ deleted_leases: z.array(z.string()), shortened_leases: z.array(z.string()) }).optional().describe('with an allocation_end in force: the leases past it this update ended') }), 'the policy'),
        ...COMMON_REFUSALS,
        403: adminOnly,
        503: refusal('the policy is saved but not every lease past its allocation_end was ended yet: repeat the PUT to finish'),
      },
    },
    {
      method: 'post', path: '/v1/policy/check', tags: ['usage policy'], summary: 'Would this lease or change be admitted? (extension)',
      description:
        'A dry run: takes a create\'s body (admins: with `project_id`), or `lease_id` and an update\'s fields, and answers every usage-policy rule in force with its figures (`rules`; with `recurrence`, for every occurrence, the first refused one answered), whether the lease fits the calendar now (`fits`; null when its types cannot tell), the `decision` a create or update would meet now, and, when refused, what would work instead (`offers`, at most 5). `decision` is `approval` when the lease would be admitted but recorded PENDING_APPROVAL: an approval rule names it (`approval`: the rule, its timeout and what the timeout decides; with `recurrence`, how many occurrences would wait), or a rule of the policy refuses it and the body carries `justification` (`exception`: the refusing rule and its message); decided as admission decides it. Nothing is booked, no lock is taken, Blazar\'s external filter is not asked. Members check their own project\'s leases only.',
      security: AUTHENTICATED,
      request: { body: { content: { 'application/json': { schema: z.looseObject({ project_id: z.string().optional(), lease_id: z.string().optional() }).describe('a create\'s body, or lease_id and an update\'s fields') } }, required: true } },
      responses: {
        200: json(
          z.strictObject({
            decision: z.enum(['admit', 'approval', 'refuse']),
            rules: z.array(z.strictObject({ rule: z.string(), ok: z.boolean(), limit: z.union([z.number(), z.string()]).nullable(), value: z.union([z.number(), z.string()]).nullable(), message: z.string() })),
            fits: z.boolean().nullable(),
            offers: z.array(offer),
            offers_note: z.string().optional(),
            approval: z
              .strictObject({
                kind: z.enum(['rule', 'exception']),
                rule: z.string().describe('the approval rule\'s condition (`approval.hosts_over`…), or for an exception the refusing rule'),
                reason: z.string(),
                timeout_minutes: z.number().describe('how long an admin has to answer'),
                on_timeout: z.enum(['deny', 'approve']).describe('what the timeout decides'),
                occurrences: z.number().int().optional().describe('with `recurrence`: how many occurrences would wait (the fields above are the first\'s)'),
              })
              .optional()
              .describe('with decision `approval`: what the lease would wait for'),
            exception: z.strictObject({ rule: z.string(), message: z.string() }).optional().describe('with decision `approval` and `justification`: the refusal the exception would be asked for'),
            occurrences: z.number().int().optional().describe('with `recurrence`: how many occurrences the series has (each was checked with the earlier ones counted)'),
            occurrence: z.strictObject({ name: z.string(), start_date: z.string(), end_date: z.string() }).optional().describe('with `recurrence`: the occurrence the answer is of (the first refused, else the last)'),
          }),
          'each rule with its figures, the fit, and offers when refused',
        ),
        ...COMMON_REFUSALS,
        403: refusal("another project (members)"),
        404: notFound,
      },
    },
    {
      method: 'delete', path: '/v1/projects/{projectId}/policy', tags: ['usage policy'], summary: "Remove a project's own usage policy",
      description: 'The project is held to the deployment\'s rules again. Admins only.',
      security: AUTHENTICATED,
      request: { params: projectParam },
      responses: { 204: noContent('removed'), ...COMMON_REFUSALS, 403: adminOnly, 404: refusal('the project has no policy of its own') },
    },
    {
      method: 'get', path: '/v1/projects/{projectId}/webhooks', tags: ['notifications'], summary: "List a project's webhooks",
      description:
        "An extension. The webhooks the project's lease notices are posted to (besides the deployment's), with how their deliveries went. Members see their own project's only.",
      security: AUTHENTICATED,
      request: { params: projectParam },
      responses: { 200: json(z.strictObject({ webhooks: z.array(projectWebhook) }), 'the webhooks'), ...COMMON_REFUSALS, 403: refusal("another project's webhooks (members)") },
    },
    {
      method: 'put', path: '/v1/projects/{projectId}/webhooks', tags: ['notifications'], summary: "Set a project's webhooks",
      description:
        "An extension. Replaces the project's list (at most 10). Each webhook gets the project's lease notices (`events`: only those) as a JSON POST `{event_type, message_id, timestamp, payload}` (the payload is Blazar's notification payload), with `Idempotency-Key` and `X-Leasekeeper-Signature: sha256=<HMAC-SHA256 of the body>`. A URL already listed keeps its id, counters and secret unless a secret is given; a new one without a secret gets a generated secret, shown in this answer only. URLs must resolve to public addresses (unless the deployment allows private ones). Members set their own project's.",
      security: AUTHENTICATED,
      request: { params: projectParam, body: { content: { 'application/json': { schema: webhooksBody } }, required: true } },
      responses: { 200: json(z.strictObject({ webhooks: z.array(projectWebhook) }), 'the webhooks as set'), ...COMMON_REFUSALS, 403: refusal("another project's webhooks (members)") },
    },
    {
      method: 'get', path: '/v1/projects/{projectId}/approvers-webhook', tags: ['notifications'], summary: "Show a project's approvers' webhook",
      description: "An extension (approval, issue 42). The webhook that hears the approval notices (`lease.approval_requested`, `lease.approved`, `lease.denied`) of the project's leases, besides the deployment's approvers' webhook; null when none is set. Admins only; its secret is never shown again.",
      security: AUTHENTICATED,
      request: { params: projectParam },
      responses: { 200: json(z.strictObject({ approvers_webhook: projectWebhook.nullable() }), "the approvers' webhook, or null"), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'put', path: '/v1/projects/{projectId}/approvers-webhook', tags: ['notifications'], summary: "Set a project's approvers' webhook",
      description: "An extension (approval, issue 42). Sets the one webhook that hears the approval notices of the project's leases, posted and signed as a project's webhooks are (`X-Leasekeeper-Signature`), and held to public addresses as they are. The same URL keeps its id, counters and secret unless a secret is given; another URL replaces it, with a generated secret shown in this answer only when none is given. Admins only.",
      security: AUTHENTICATED,
      request: { params: projectParam, body: { content: { 'application/json': { schema: approversWebhookBody } }, required: true } },
      responses: { 200: json(z.strictObject({ approvers_webhook: projectWebhook }), "the approvers' webhook as set"), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'delete', path: '/v1/projects/{projectId}/approvers-webhook', tags: ['notifications'], summary: "Remove a project's approvers' webhook",
      description: "An extension. The project's approval notices go to the deployment's approvers' webhook only again. Admins only.",
      security: AUTHENTICATED,
      request: { params: projectParam },
      responses: { 204: noContent('removed'), ...COMMON_REFUSALS, 403: adminOnly, 404: refusal("the project has no approvers' webhook") },
    },
    {
      method: 'get', path: '/v1/networks', tags: ['network segments'], summary: 'List reservable network segments',
      description: 'Every network segment (VLAN or VXLAN tag) enrolled for reservations. Admins only.',
      security: AUTHENTICATED,
      responses: { 200: json(z.strictObject({ networks: z.array(networkSegment) }), 'the segments'), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'post', path: '/v1/networks', tags: ['network segments'], summary: 'Enrol a network segment',
      description:
        "Enrols a segment with extra capabilities (string fields beside `network_type`, `physical_network`, `segment_id`). Neutron is asked: the physical network in its segment ranges, the tag outside every range it hands to tenant networks, no network on it. Admins only.",
      security: AUTHENTICATED,
      request: { body: { content: { 'application/json': { schema: networkEnrolBody } }, required: true } },
      responses: { 201: json(z.strictObject({ network: networkSegment }), 'the enrolled segment'), ...COMMON_REFUSALS, 403: adminOnly, 409: refusal('already enrolled, or Neutron could not give it to a lease') },
    },
    {
      method: 'get', path: '/v1/networks/allocations', tags: ['network segments'], summary: "List network segments' bookings",
      description: 'Every enrolled segment with the reservations booked on it from now on (filtered by `lease_id` or `reservation_id`). Admins only.',
      security: AUTHENTICATED,
      request: { query: networkAllocationQuery },
      responses: { 200: json(z.strictObject({ allocations: z.array(networkAllocation) }), 'the allocations'), ...COMMON_REFUSALS, 403: adminOnly },
    },
    {
      method: 'get', path: '/v1/networks/{id}', tags: ['network segments'], summary: 'Show a network segment',
      description: 'One enrolled segment. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the segment id') },
      responses: { 200: json(z.strictObject({ network: networkSegment }), 'the segment'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'put', path: '/v1/networks/{id}', tags: ['network segments'], summary: "Change a network segment's capabilities",
      description: 'Sets extra capabilities (as they are, or under `values`); the segment\'s type, physical network and tag never change (400). Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the segment id'), body: { content: { 'application/json': { schema: z.record(z.string(), z.unknown()) } }, required: true } },
      responses: { 200: json(z.strictObject({ network: networkSegment }), 'the segment'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'delete', path: '/v1/networks/{id}', tags: ['network segments'], summary: 'Remove a network segment',
      description: 'Takes the segment out of reservations, refused (409 naming the leases) while a booking of it ends in the future. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the segment id') },
      responses: { 204: noContent('removed'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('a lease holds or will hold it') },
    },
    {
      method: 'get', path: '/v1/networks/{id}/allocation', tags: ['network segments'], summary: "Show a network segment's bookings",
      description: 'The reservations booked on one segment from now on. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the segment id'), query: networkAllocationQuery },
      responses: { 200: json(z.strictObject({ allocation: networkAllocation }), 'the allocation'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound },
    },
    {
      method: 'get', path: '/v1/floatingips', tags: ['floating IPs'], summary: 'List reservable floating IPs',
      description: 'Every floating IP address enrolled for reservations.',
      security: AUTHENTICATED,
      responses: { 200: json(z.strictObject({ floatingips: z.array(floatingIp) }), 'the addresses'), ...COMMON_REFUSALS },
    },
    {
      method: 'post', path: '/v1/floatingips', tags: ['floating IPs'], summary: 'Enrol a floating IP',
      description: "Enrols an address of an external network for reservations (Neutron is asked: an external network, one of its subnets, outside their allocation pools and gateway, and not in use). Admins only.",
      security: AUTHENTICATED,
      request: { body: { content: { 'application/json': { schema: floatingIpEnrolBody } }, required: true } },
      responses: { 201: json(z.strictObject({ floatingip: floatingIp }), 'the enrolled address'), ...COMMON_REFUSALS, 403: adminOnly, 409: refusal('already enrolled or in use') },
    },
    {
      method: 'get', path: '/v1/floatingips/allocations', tags: ['floating IPs'], summary: "List floating IPs' bookings",
      description: "Every enrolled address with the reservations booked on it (filtered by `lease_id` or `reservation_id`). A non-admin sees only the addresses their own project's leases book, and only those bookings.",
      security: AUTHENTICATED,
      request: { query: floatingIpAllocationQuery },
      responses: { 200: json(z.strictObject({ allocations: z.array(floatingIpAllocation) }), 'the allocations'), ...COMMON_REFUSALS },
    },
    {
      method: 'get', path: '/v1/floatingips/{id}', tags: ['floating IPs'], summary: 'Show a floating IP',
      description: 'One enrolled address.',
      security: AUTHENTICATED,
      request: { params: idParam('the floating IP id') },
      responses: { 200: json(z.strictObject({ floatingip: floatingIp }), 'the address'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'delete', path: '/v1/floatingips/{id}', tags: ['floating IPs'], summary: 'Remove a floating IP',
      description: 'Takes the address out of reservations, refused while a lease holds or will hold it. Admins only.',
      security: AUTHENTICATED,
      request: { params: idParam('the floating IP id') },
      responses: { 204: noContent('removed'), ...COMMON_REFUSALS, 403: adminOnly, 404: notFound, 409: refusal('a lease holds or will hold it') },
    },
    {
      method: 'get', path: '/v1/floatingips/{id}/allocation', tags: ['floating IPs'], summary: "Show a floating IP's bookings",
      description: "The reservations booked on one address; a non-admin sees only their own project's.",
      security: AUTHENTICATED,
      request: { params: idParam('the floating IP id'), query: floatingIpAllocationQuery },
      responses: { 200: json(z.strictObject({ allocation: floatingIpAllocation }), 'the allocation'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'get', path: '/v1/calendar', tags: ['availability'], summary: 'Bookings in a window (extension)',
      description:
        "What the calendar page draws: the hosts matching the property queries, their bookings in the window (another project's shown only as `reserved`; `preemptible` ones flagged, and to whoever may know the lease, a preempted lease's `cut_ms`; `borrowed` ones booked inside a lending), the hosts' lent spans (`lent`, the lending lease only to its project and admins), quantity providers (bandwidth, instance slots) with their bookings, and the caller's own leases. At most 93 days; past 30 000 bookings the answer says `truncated`.",
      security: AUTHENTICATED,
      request: { query: calendarQuery },
      responses: { 200: json(calendar, 'the window'), ...COMMON_REFUSALS },
    },
    {
      method: 'get', path: '/v1/availability', tags: ['availability'], summary: 'Free intervals per host (extension)',
      description: 'For each host matching the property queries, its free intervals in the window; with `vcpus`, `memory_mb` and `disk_gb`, how many instance slots of that size are free; with `network_id`, the free floating IPs of that network.',
      security: AUTHENTICATED,
      request: { query: availabilityQuery },
      responses: { 200: json(availability, 'the free intervals'), ...COMMON_REFUSALS },
    },
    {
      method: 'post', path: '/v1/availability/search', tags: ['availability'], summary: 'When would this lease fit? (extension)',
      description:
        "Takes a lease request's body (without a name) and answers the earliest window of the same length from `start_date` in which every reservation fits, and how long the lease could last from `start_date` itself. Nothing is booked. The search is bounded: a `note` says where it stopped.",
      security: AUTHENTICATED,
      request: { body: { content: { 'application/json': { schema: leaseCreate.omit({ name: true }) } }, required: true } },
      responses: { 200: json(searchAnswer, 'the earliest fit and the longest lease from the start'), ...COMMON_REFUSALS },
    },
    {
      method: 'post', path: '/v1/offers', tags: ['availability'], summary: 'What would work instead (extension)',
      description:
        'Takes reservations (as a create), a `duration` in minutes, a range (`start_after`, `end_before`) and what would do instead (`min` per reservation, `min_duration`), and answers up to `limit` offers, best first: `exact`, `later`, `shorter`, `fewer`. Offers are kept until `expires_at`. Members see counts only; admins also see the hosts each host reservation would book (`would_book`).',
      security: AUTHENTICATED,
      request: {
        body: {
          content: {
            'application/json': {
              schema: z.strictObject({
                reservations: z.array(z.looseObject({ resource_type: z.string(), min: z.number().int().optional() })),
                duration: z.number().int(),
                min_duration: z.number().int().optional(),
                start_after: requestDateText.optional(),
                end_before: requestDateText.optional(),
                limit: z.number().int().optional(),
              }),
            },
          },
          required: true,
        },
      },
      responses: { 200: json(offersAnswer, 'the offers, best first'), ...COMMON_REFUSALS },
    },
    {
      method: 'post', path: '/v1/offers/{id}/hold', tags: ['availability'], summary: 'Hold an offer for a few minutes (extension)',
      description:
        "Books the offer's reservations for up to `LK_OFFER_HOLD_MINUTES` (`minutes` asks fewer), so that nobody else takes them meanwhile; the hold ends by itself at `expires_at`. Any resource type: host offers are booked by the API, any other (and any offer while Blazar's external filter is configured, which is asked as at a create) by the hold's workflow. The same request while the hold is live answers it again (200); an offer is held once. A project holds at most `max_offer_holds` at once. A refusal for capacity or a usage policy rule carries `reason` and fresh `offers`.",
      security: AUTHENTICATED,
      request: { params: idParam('the offer id'), body: { content: { 'application/json': { schema: z.strictObject({ minutes: z.number().int().optional() }) } }, required: false } },
      responses: {
        201: json(offerHoldAnswer, 'held'),
        200: json(offerHoldAnswer, 'held already, by the same project'),
        ...COMMON_REFUSALS,
        403: refusal('a usage policy rule refuses it (max_offer_holds, or the lease it would become; `external`: the external filter denies it)'),
        404: notFound,
        409: refusal('the capacity was taken meanwhile (with fresh offers), or the offer was held before'),
      },
    },
    {
      method: 'get', path: '/v1/offers/{id}/hold', tags: ['availability'], summary: "Show an offer's hold (extension)",
      description: 'The hold: `held`, `accepted` (then `lease_id`) or `ended` (with `end_reason`).',
      security: AUTHENTICATED,
      request: { params: idParam('the offer id') },
      responses: { 200: json(offerHoldAnswer, 'the hold'), ...COMMON_REFUSALS, 404: notFound },
    },
    {
      method: 'delete', path: '/v1/offers/{id}/hold', tags: ['availability'], summary: "Release an offer's hold (extension)",
      description: 'Frees what the hold booked at once (an ended hold answers 204 too). An accepted hold is a lease: delete the lease.',
      security: AUTHENTICATED,
      request: { params: idParam('the offer id') },
      responses: { 204: noContent('released'), ...COMMON_REFUSALS, 404: notFound, 409: refusal('the hold was accepted') },
    },
    {
      method: 'post', path: '/v1/offers/{id}/accept', tags: ['availability'], summary: 'Make an offer a lease (extension)',
      description:
        "Records the offer as a lease named `name`. A live hold becomes the lease with the hold's id and keeps its bookings; an offer not held, or whose hold ended, is admitted as a create is, seeing the calendars as they are now. `Idempotency-Key` as on a create; accepting a held offer again answers its lease.",
      security: AUTHENTICATED,
      request: {
        params: idParam('the offer id'),
        headers: z.object({ 'Idempotency-Key': z.string().min(1).max(255).optional() }),
        body: { content: { 'application/json': { schema: z.strictObject({ name: z.string(), before_end_date: requestDateText.optional(), notify_before_end: z.unknown().optional() }) } }, required: true },
      },
      responses: {
        201: leaseBody,
        ...COMMON_REFUSALS,
        403: refusal('a usage policy rule refuses the lease (with offers)'),
        404: notFound,
        409: refusal('the capacity was taken (with fresh offers), or the name is taken'),
      },
    },
    {
      method: 'get', path: '/v1/usage', tags: ['usage'], summary: 'Booked and used resource-hours (extension)',
      description:
        "Accounting over [from, to) (by default this calendar month so far): per group (`group_by`: project, resource_type, month, or several; default project), the hours of each resource booked (a live lease's window; a deleted lease only what it used; nothing for a lease whose start failed) and used (from the start's end to the end, the deletion, or now), clipped to the window and, by month, split at month ends (UTC). Each group also shows its figures as charged (`charged`: a preemptible reservation's hours times `preemptible_charge_factor`, LK_PREEMPTIBLE_CHARGE_FACTOR; the others in full; a preempted lease up to its cut) and, when it has any, its preemptible part (`preemptible`, in full). Members see their own project; admins every project, or `project_id`'s. With `Accept: text/csv`: a header line, then one line per group.",
      security: AUTHENTICATED,
      request: { query: usageQuery },
      responses: {
        200: { description: 'the report', content: { 'application/json': { schema: usageReport }, 'text/csv': { schema: z.string().describe('the groups: their keys, booked_* and used_* figures, leases, then charged_booked_*, charged_used_*, preemptible_booked_*, preemptible_used_*, preemptible_leases, lent_host_hours, borrowed_credit_hours') } } },
        ...COMMON_REFUSALS,
        403: refusal("a member asked for another project's usage"),
      },
    },
    {
      method: 'get', path: '/calendar/settings', tags: ['calendar page'], summary: "The calendar page's settings",
      description: 'How the page signs in: `noauth` (with the default project) or `keystone`.',
      responses: { 200: json(z.union([z.strictObject({ auth_strategy: z.literal('noauth'), default_project_id: z.string() }), z.strictObject({ auth_strategy: z.literal('keystone') })]), 'the settings') },
    },
    {
      method: 'post', path: '/calendar/login', tags: ['calendar page'], summary: 'Sign the calendar page in',
      description: 'Exchanges a Keystone user name and password for a project-scoped token (keystone deployments only), so that the page calls the API as that user.',
      request: { body: { content: { 'application/json': { schema: calendarLoginBody } }, required: true } },
      responses: {
        200: json(z.strictObject({ token: z.string(), project_id: z.string(), project_name: z.string(), expires_at: z.string() }), 'a token'),
        400: refusal('a malformed request'),
        401: refusal('Keystone refused the credentials'),
        404: refusal('not a keystone deployment'),
        429: refusal('too many failed sign-ins for the user name or from the address (LK_SIGNIN_*): Retry-After says when to try again'),
        503: refusal('Keystone did not answer'),
      },
    },
  ];
}

/** The OpenAPI 3.1 document for a deployment running `types`. */
export function openApiDocument(types: ResourceTypes, publicUrl: string): ReturnType<OpenApiGeneratorV31['generateDocument']> {
  const registry = new OpenAPIRegistry();
  registry.registerComponent('securitySchemes', 'keystone', {
    type: 'apiKey',
    in: 'header',
    name: 'X-Auth-Token',
    description: 'A Keystone token (LK_AUTH_STRATEGY=keystone). With noauth (development) the identity comes from X-Project-Id, X-User-Id and X-Roles instead.',
  });
  for (const operation of apiOperations(types)) registry.registerPath(operation);
  return new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'leasekeeper',
      version: '1.0',
      description: "Time-based reservations of OpenStack resources: OpenStack Blazar's v1 API (python-blazarclient works unchanged) and leasekeeper's extensions. Errors carry Blazar's body: `error_code`, `error_message`, `error_name`, and the request's id.",
    },
    servers: [{ url: publicUrl }],
  });
}
