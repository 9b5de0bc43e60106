/**
 * Shared helpers of the OpenStack contract tests: clients built from the rig's clouds.yaml
 * (scripts/openstack/up.sh writes it), unique names, a cleanup stack and a request-counting fetch.
 */
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { CLOUDS_FILE, RIG_DIR, rigClients, rigCredentials, rigEnv, type RigCloud } from '../../dev-stack/openstack-rig';
import { deleteAggregateNamed, uniqueName } from '../../dev-stack/fixtures/openstack';
import { REPO_ROOT } from '../../src/paths';
import type { ManagedProcess } from '../../dev-stack/processes';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { useTestStack, type TestStack } from '../../dev-stack/stack';
import { startWorkerProcess as startPlainWorkerProcess, type WorkerProcessTarget } from '../../dev-stack/worker-process';
import { parseRequestDate } from '../../src/domain/dates';
import { apiClient, eventually } from '../../dev-stack/stack';
import {
  ignoreNotFound,
  KeystoneSession,
  NotFoundError,
  type OpenStackClients,
  type PlacementClient,
  type ResourceProvider,
  type Server,
} from '../../src/openstack';

export { REPO_ROOT };
export { CLOUDS_FILE, RIG_DIR, rigClients, rigCredentials, rigEnv, type RigCloud };
export { deleteAggregateNamed, uniqueName };

/** The API as one project's member, or as the admin (dev-stack/stack.ts apiClient). */
export type Api = ReturnType<typeof apiClient>;

/** The rig project's id, as Keystone gives it to the cloud's credentials. */
export const projectIdOf = async (cloud: RigCloud): Promise<string> => (await new KeystoneSession({ credentials: rigCredentials(cloud) }).authenticate()).projectId;

/** A lease as `as` sees it through the API. */
export const leaseAs = async (as: Api, id: string) => (await as('GET', `/v1/leases/${id}`)).body.lease;

/** The lease once it has `status`, waited for at most `timeoutMs` (the failure says where it stood). */
export function untilStatus(as: Api, id: string, status: string, timeoutMs: number) {
  let last: Awaited<ReturnType<typeof leaseAs>>;
  return eventually(
    async () => {
      last = await leaseAs(as, id);
      return last?.status === status ? last : undefined;
    },
    timeoutMs,
    250,
    () => `lease ${id} not ${status} but ${last?.status} (${last?.status_reason})`,
  );
}

/** A date of the API's as ms. */
export const instant = (date: string): number => parseRequestDate(date)!;

/** Whether Nova no longer knows the server. */
export const serverGone = (clients: OpenStackClients, id: string): Promise<boolean> => clients.nova.getServer(id).then(() => false, (err: unknown) => err instanceof NotFoundError);

export const FLAVOR = 'm1.tiny';
export const IMAGE = 'fake-image';

/** Deletes a test's servers, each with the clients that made it, and waits until they are gone; failures are ignored. */
export async function deleteServers(servers: Array<{ clients: OpenStackClients; id: string }>): Promise<void> {
  for (const { clients, id } of servers) await clients.nova.deleteServer(id).catch(() => undefined);
  for (const { clients, id } of servers) await clients.nova.waitForServerDeleted(id, { timeoutMs: 60_000 }).catch(() => undefined);
}

/** Cleanups run in reverse order at the end; resources already gone are fine. */
export class Cleanup {
  private readonly steps: Array<{ what: string; run: () => Promise<unknown> }> = [];

  add(what: string, run: () => Promise<unknown>): void {
    this.steps.push({ what, run });
  }

  async run(): Promise<void> {
    const failures: string[] = [];
    while (this.steps.length > 0) {
      const step = this.steps.pop();
      if (step === undefined) break;
      try {
        await ignoreNotFound(step.run());
      } catch (error) {
        failures.push(`${step.what}: ${(error as Error).message}`);
      }
    }
    if (failures.length > 0) throw new Error(`cleanup failed:\n${failures.join('\n')}`);
  }
}

export interface RecordedRequest {
  method: string;
  url: string;
}

/** A fetch that records each request before passing it to the real one. */
export function recordingFetch(): { fetch: typeof fetch; requests: RecordedRequest[] } {
  const requests: RecordedRequest[] = [];
  const wrapped: typeof fetch = (input, init) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    requests.push({ method: init?.method ?? 'GET', url });
    return fetch(input, init);
  };
  return { fetch: wrapped, requests };
}

export function isAuthRequest(request: RecordedRequest): boolean {
  return request.method === 'POST' && request.url.endsWith('/auth/tokens');
}

/** The Placement resource provider with this exact name. */
export async function providerNamed(placement: PlacementClient, name: string): Promise<ResourceProvider> {
  const [provider] = await placement.listResourceProviders({ name });
  if (provider === undefined) throw new Error(`no resource provider named ${name}`);
  return provider;
}

/** The bandwidth provider Neutron's placement plugin made for a host's br-ex. */
export function bandwidthProviderName(host: string): string {
  return `${host}:Open vSwitch agent:br-ex`;
}

/** Boots a server (tiny unless a flavor is named; no network), optionally into a zone or onto a host, and waits until it is ACTIVE or ERROR. */
export async function bootServer(
  clients: OpenStackClients,
  where: { zone?: string; host?: string; flavor?: string } = {},
  onCreated?: (id: string) => void,
): Promise<Server> {
  const flavor = (await clients.nova.listFlavors()).find((f) => f.name === (where.flavor ?? FLAVOR))!;
  const image = (await clients.glance.listImages({ name: IMAGE }))[0];
  const created = await clients.nova.createServer({
    name: uniqueName('srv'),
    flavorRef: flavor.id,
    imageRef: image.id,
    networks: 'none',
    ...(where.zone ? { availability_zone: where.zone } : {}),
    ...(where.host ? { host: where.host } : {}),
  });
  onCreated?.(created.id);
  return clients.nova.waitForServer(created.id, (s) => s.status === 'ACTIVE' || s.status === 'ERROR', { timeoutMs: 90_000, failOnError: false });
}

/**
 * The real worker process for a test stack, with Nova behind `novaUrl` and Neutron behind
 * `neutronUrl` (fault proxies; either may be left out): it reads a copy of the rig's clouds.yaml
 * with those endpoints overridden.
 */
export async function startWorkerProcess(stack: WorkerProcessTarget, options: { novaUrl?: string; neutronUrl?: string; dir: string; env?: Record<string, string> }): Promise<ManagedProcess> {
  const cloudsFile = path.join(options.dir, 'clouds.yaml');
  if (!fs.existsSync(cloudsFile)) {
    const clouds = YAML.parse(fs.readFileSync(CLOUDS_FILE, 'utf8')) as { clouds: Record<string, Record<string, unknown>> };
    if (options.novaUrl) clouds.clouds['leasekeeper-admin'].compute_endpoint_override = options.novaUrl;
    if (options.neutronUrl) clouds.clouds['leasekeeper-admin'].network_endpoint_override = options.neutronUrl;
    fs.writeFileSync(cloudsFile, YAML.stringify(clouds), { mode: 0o600 });
  }
  return startPlainWorkerProcess(stack, { OS_CLIENT_CONFIG_FILE: cloudsFile, OS_CLOUD: 'leasekeeper-admin', ...options.env });
}

/**
 * A test stack whose host leases act in the rig's Nova, with aggregates of the test's own (pool and
 * released) and a fast recycle poll; `cleanUp` runs before it stops (leases, servers, hosts), then
 * the aggregates go. The host type's calls go through `cloud` (e.g. clients behind a fault proxy).
 */
export function hostLeaseStack(
  admin: OpenStackClients,
  aggregates: { freepool: string; released: string },
  cleanUp: () => Promise<void>,
  env: Record<string, string> = {},
  cloud: () => OpenStackClients = () => admin,
): () => TestStack {
  return useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: aggregates.freepool, LK_RELEASED_AGGREGATE: aggregates.released, ...env },
      withPool: (pool) => [
        physicalHostPlugin({
          pool,
          settings: { cleaningMs: 0, randomChoice: false },
          cloud,
          freepool: aggregates.freepool,
          endAggregates: { released: aggregates.released, closedProjectId: 'leasekeeper-freepool' },
          recyclePollMs: 1_000,
        }),
      ],
      openstack: () => admin,
    },
    {
      beforeStop: async () => {
        await cleanUp();
        for (const name of Object.values(aggregates)) await deleteAggregateNamed(admin, name);
      },
    },
  );
}

/**
 * Forces rig compute services down (what an operator or a fencing agent does to a dead host) and
 * remembers which, so that a test puts every one back up whatever happens (`restoreAll`).
 */
export function computeForcing(admin: OpenStackClients) {
  const forced = new Set<string>();
  async function forceDown(host: string, down: boolean): Promise<void> {
    const [service] = await admin.nova.listServices({ binary: 'nova-compute', host });
    await admin.nova.updateService(service.id, { forced_down: down });
    if (down) forced.add(host);
    else forced.delete(host);
  }
  const restoreAll = async (): Promise<void> => {
    for (const host of [...forced]) await forceDown(host, false);
  };
  return { forceDown, restoreAll };
}
