import express from 'express';
import type { Client, Connection } from '@temporalio/client';
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import type { Logger } from '../log';
import type { ResourceTypes } from '../domain/resource-plugin';
import { authenticate, noAuth, type Authenticator } from './auth';
import { ApiError, errorHandler, notFoundRoute } from './errors';
import { checkHealth, checkWorker, sharedCheck } from './health';
import { checkRequestInput } from './input-check';
import { apiMetrics, metricsGuard, type ApiMetrics } from './metrics';
import { openApiDocument } from './openapi';
import { requestIds, requestLog } from './request-id';
import type { OpenStackClients } from '../openstack';
import { hostCalendar } from '../resources';
import type { HostCalendar } from '../resources/physical-host/calendar';
import { FloatingIpCalendar } from '../resources/floating-ip/calendar';
import { InstanceSlotCalendar } from '../resources/virtual-instance/calendar';
import { FloatingIpInventory } from '../resources/floating-ip/inventory';
import { NetworkSegmentInventory } from '../resources/network-segment/inventory';
import { HostInventory } from '../resources/physical-host/inventory';
import { PowerPlannerNudge } from './power-planner';
import { deploymentHostPower, type HostPower } from '../resources/physical-host/power';
import { availabilityRouter } from './availability';
import { offersRouter, type OfferDeps } from './offers';
import { offerHoldsRouter } from './offer-holds';
import { calendarPage } from './calendar-page';
import { signInThrottle } from './sign-in-limits';
import { calendarRouter } from './calendar';
import { hostAllocationsRouter } from './host-allocations';
import { floatingIpsRouter } from './floating-ips';
import { networksRouter } from './networks';
import { hostsRouter } from './hosts';
import { maintenanceRouter } from './maintenance';
import { leasesRouter, type NewLeaseDeps } from './leases';
import { seriesRouter } from './series';
import { usageRouter } from './usage';
import { projectPolicyRouter } from './project-policy';
import { policyCheckRouter } from './policy-check';
import { webhooksRouter } from './webhooks';
import { LeaseOutbox } from '../outbox';
import { temporalSetupCheck } from './admission';
import { usagePolicy, type UsagePolicyEnforcer } from '../policy';
import { durationMs } from '../policy/rules';
import { versionsRouter } from './versions';

export interface AppDeps {
  config: Pick<Config, 'temporal' | 'outbox' | 'healthTimeoutMs' | 'healthDeepIntervalMs' | 'leaseLimits' | 'policy' | 'notifyBeforeEnd' | 'idleLeases' | 'maxReservationsPerLease' | 'maxOccurrences' | 'offerTtlMs' | 'offerHolds' | 'api' | 'hosts' | 'inventory' | 'provisioningLeadMs' | 'notices' | 'preemption' | 'power'> &
    Partial<Pick<Config, 'networkSegments'>>;
  log: Logger;
  pool: Pool;
  connection: Connection;
  client: Client;
  types: ResourceTypes;
  /** The host calendar behind GET /v1/availability: the one `types` searches (see main.ts); made from the settings when absent. */
  calendar?: HostCalendar;
  authenticator?: Authenticator;
  /** The usage policy (the rules a project is shown and admins set); made from the settings when absent. */
  usagePolicy?: UsagePolicyEnforcer;
  /**
   * Starts the workflows of the leases the API admits (LK_ADMISSION=api); made from the settings
   * when absent. The caller that brings one stops it before closing the Temporal connection.
   */
  outbox?: LeaseOutbox;
  /** The OpenStack clients, built on first use (os-hosts needs Nova; the rest of the API does not). */
  openstack?: () => OpenStackClients;
  /** The API's metrics (main.ts may serve them on their own address); made from the settings when absent. */
  metrics?: ApiMetrics;
}

const API_VERSION_HEADER = 'OpenStack-API-Version';

export function createApp(deps: AppDeps): express.Express {
  const { config, log } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', config.api.trustProxy);

  app.use(requestIds(log));
  const metrics = deps.metrics ?? apiMetrics({ pool: deps.pool, cacheMs: config.api.metrics.cacheMs });
  app.use(metrics.measure);
  app.use((req, res, next) => {
    const started = performance.now();
    res.on('finish', () => {
      requestLog(res, log).info({ method: req.method, path: req.originalUrl, status: res.statusCode, ms: Math.round(performance.now() - started) }, 'request');
    });
    next();
  });

  // Blazar answers every route with a `.json` suffix too.
  app.use((req, _res, next) => {
    req.url = req.url.replace(/\.json(?=$|\?)/, '');
    next();
  });

  // Microversions: Blazar has only 1.0; `latest` means it.
  app.use((req, res, next) => {
    res.set(API_VERSION_HEADER, 'reservation 1.0');
    res.set('Vary', API_VERSION_HEADER);
    const requested = req.get(API_VERSION_HEADER);
    const match = requested && /^\s*reservation\s+(\S+)\s*$/i.exec(requested);
    if (match && !['1.0', 'latest'].includes(match[1].toLowerCase())) {
      next(new ApiError(406, `API version ${match[1]} is not supported: this server supports reservation 1.0`));
      return;
    }
    next();
  });

  // Bodies must say they are JSON: a web page can send text/plain or a form to a loopback API
  // without a CORS preflight, but never application/json (no cross-site request forgery).
  app.use((req, _res, next) => {
    const emptyBody = req.headers['content-length'] === '0'; // blazarclient's DELETE sends `Content-Length: 0` and no type
    if (!emptyBody && req.is('application/json') === false) {
      next(new ApiError(415, `Unsupported Content-Type ${JSON.stringify((req.get('content-type') ?? '').slice(0, 100))}: request bodies must be application/json`));
      return;
    }
    next();
  });
  app.use(express.json({ limit: '1mb', type: () => true }));

  const healthDeps = { ...deps, taskQueue: config.temporal.taskQueue, timeoutMs: config.healthTimeoutMs };
  const deepCheck = sharedCheck(() => checkWorker(healthDeps), config.healthDeepIntervalMs);
  app.get('/healthz', async (req, res) => {
    const deep = typeof req.query.deep === 'string' && ['1', 'true', 'yes'].includes(req.query.deep.toLowerCase());
    const health = await checkHealth(healthDeps, deep ? deepCheck : undefined);
    res.status(health.status === 'ok' ? 200 : 503).json(health);
  });

  // Prometheus: here unless LK_API_METRICS_PORT serves it apart (main.ts); without identity, or with LK_API_METRICS_TOKEN.
  if (!config.api.metrics.listen) app.get('/metrics', metricsGuard(config.api.metrics.token), metrics.scrape);
  let description: object | undefined; // made on first use: the same for the app's life
  app.get('/v1/openapi', (_req, res) => {
    res.json((description ??= openApiDocument(deps.types, config.api.publicUrl)));
  }); // `/v1/openapi.json` (the suffix is dropped above); a description needs no identity
  app.use(checkRequestInput); // control characters, lone surrogates, deep nesting: 400 before any route
  app.use(versionsRouter(config.api.publicUrl));
  app.use(
    '/calendar',
    calendarPage({
      authStrategy: config.api.authStrategy,
      noauthProjectId: config.api.noauthProjectId,
      issueUserToken: deps.openstack && ((login) => openstackOf(deps)().keystone.issueUserToken(login, { timeoutMs: config.api.authTimeoutMs })),
      signInThrottle: signInThrottle(config.api.signIn),
    }),
  );
  const calendar = deps.calendar ?? hostCalendar(deps.pool, config);
  const policy = deps.usagePolicy ?? usagePolicy(deps.pool, config);
  const setup = temporalSetupCheck(deps.client, config.api.workflowTimeoutMs);
  // Host leases admitted here (LK_ADMISSION=api), and accepted offer holds in either mode, start their
  // workflow right after the commit; the sweeps (src/outbox) catch what this misses.
  // With the power planner (LK_POWER_PLANNER=on), a lease admitted or changed tells it to look now: a sleeping host may be needed soon.
  const planner = config.power.planner ? new PowerPlannerNudge({ client: deps.client, taskQueue: config.temporal.taskQueue, log }) : undefined;
  const outbox = (deps.outbox ?? new LeaseOutbox({ pool: deps.pool, client: deps.client, taskQueue: config.temporal.taskQueue, log, ...config.outbox })).observedBy((lagMs) => {
    metrics.workflowStarted(lagMs);
    planner?.nudge();
  }, () => {
    metrics.workflowStartFailed();
    setup.recheck();
  });
  const commands = { client: deps.client, taskQueue: config.temporal.taskQueue, timeoutMs: config.api.workflowTimeoutMs, outbox, ...(planner ? { changed: () => planner.nudge() } : {}) };
  const admission = config.api.admission === 'api' ? { pool: deps.pool, types: deps.types, usagePolicy: policy, outbox, temporalReady: setup.ready } : undefined;
  const inventory = lazyInventory(deps);
  const power = hostPower(deps);
  const offers: OfferDeps = { pool: deps.pool, types: deps.types, usagePolicy: policy, provisioningLeadMs: config.provisioningLeadMs, offerTtlMs: config.offerTtlMs, maxReservationsPerLease: config.maxReservationsPerLease };
  const newLeases: NewLeaseDeps = {
    pool: deps.pool,
    types: deps.types,
    commands,
    admission,
    provisioningLeadMs: config.provisioningLeadMs,
    notifyBeforeEndMs: config.notifyBeforeEnd.map(durationMs),
    idleLeases: config.idleLeases,
    maxReservationsPerLease: config.maxReservationsPerLease,
    maxOccurrences: config.maxOccurrences,
    offers,
    preemptionWarningMs: config.preemption.warningMs,
  };
  app.use(
    '/v1',
    authenticate(deps.authenticator ?? noAuth()),
    leasesRouter(newLeases),
    seriesRouter(newLeases),
    offersRouter(offers),
    policyCheckRouter(newLeases),
    offerHoldsRouter({ ...newLeases, offers, usagePolicy: policy, client: deps.client, taskQueue: config.temporal.taskQueue, timeoutMs: config.api.workflowTimeoutMs, outbox, holdMs: config.offerHolds.holdMs, temporalReady: setup.ready }),
    hostAllocationsRouter({ pool: deps.pool }),
    usageRouter({ pool: deps.pool, preemptibleChargeFactor: config.preemption.chargeFactor }),
    projectPolicyRouter({ pool: deps.pool, policy, commands }),
    webhooksRouter({ pool: deps.pool, settings: config.notices }),
    hostsRouter({ pool: deps.pool, inventory, power, commands }),
    maintenanceRouter({ pool: deps.pool, inventory, commands }),
    floatingIpsRouter({ pool: deps.pool, inventory: lazyFloatingIpInventory(deps) }),
    networksRouter({ pool: deps.pool, inventory: lazyNetworkSegmentInventory(deps) }),
    calendarRouter({ pool: deps.pool, calendar, power: { hostPower: power, wakeMarginMs: config.power.planner ? config.power.marginMs : null } }),
    availabilityRouter({
      pool: deps.pool,
      calendar,
      slots: new InstanceSlotCalendar(deps.pool, { cleaningMs: config.hosts.cleaningMs }),
      floatingIps: new FloatingIpCalendar(deps.pool),
      types: deps.types,
      provisioningLeadMs: config.provisioningLeadMs,
      maxReservationsPerLease: config.maxReservationsPerLease,
    }),
  );

  app.use(notFoundRoute);
  app.use(errorHandler(log));
  return app;
}

function openstackOf(deps: AppDeps): NonNullable<AppDeps['openstack']> {
  if (!deps.openstack) throw new ApiError(503, 'OpenStack is not configured: set OS_CLOUD (clouds.yaml) or OS_AUTH_URL and credentials');
  return deps.openstack;
}

/** The host inventory: reading and updating hosts needs no cloud; enrolling and removing them asks Nova. */
function lazyInventory(deps: AppDeps): () => HostInventory {
  const inventory = new HostInventory(deps.pool, () => openstackOf(deps)().nova, deps.config.inventory);
  return () => inventory;
}

/** Hosts' power: the drivers as the deployment sets them up; Ironic's client only for a host powered through Ironic. */
function hostPower(deps: AppDeps): HostPower {
  return deploymentHostPower(deps.pool, deps.config.power, { ironic: () => openstackOf(deps)().ironic });
}

/** The enrolled addresses are read without OpenStack; enrolling one asks Neutron. */
function lazyFloatingIpInventory(deps: AppDeps): () => FloatingIpInventory {
  const inventory = new FloatingIpInventory(deps.pool, () => openstackOf(deps)().neutron);
  return () => inventory;
}

/** The enrolled segments are read without OpenStack; enrolling one asks Neutron (and LK_NEUTRON_TENANT_VLAN_RANGES, when set). */
function lazyNetworkSegmentInventory(deps: AppDeps): () => NetworkSegmentInventory {
  const inventory = new NetworkSegmentInventory(deps.pool, () => openstackOf(deps)().neutron, deps.config.networkSegments?.tenantVlanRanges);
  return () => inventory;
}
