/**
 * Typed OpenStack clients for leasekeeper: `openStackClients()` builds one session (Keystone
 * password auth or static endpoints) and the Nova, Placement, Neutron, Glance, Keystone and Ironic
 * clients on it. No client retries on its own; see errors.ts for `retryable`.
 *
 *   const os = openStackClients();                        // OS_CLOUD / clouds.yaml or OS_* vars
 *   const os = openStackClients({ cloud: 'leasekeeper-admin' });
 *   const os = openStackClients({ credentials: { type: 'static', endpoints: { compute: url }, token } });
 */
import { loadCredentials, type LoadCredentialsOptions, type OpenStackCredentials } from './auth';
import { OpenStackConfigError } from './errors';
import { GlanceClient } from './glance';
import { IronicClient } from './ironic';
import type { HttpOptions, Session } from './http';
import { KeystoneClient, KeystoneSession, StaticSession } from './keystone';
import { NeutronClient } from './neutron';
import { NovaClient } from './nova';
import { PlacementClient } from './placement';

export * from './auth';
export * from './errors';
export * from './glance';
export * from './http';
export * from './ironic';
export * from './keystone';
export * from './neutron';
export * from './nova';
export * from './placement';
export { pollUntil } from './wait';

export interface OpenStackClientsOptions extends LoadCredentialsOptions, HttpOptions {
  /** Use these credentials instead of clouds.yaml / OS_* variables. */
  credentials?: OpenStackCredentials;
  /** Use this session (e.g. shared between several sets of clients); credentials are then ignored. */
  session?: Session;
  /** Default microversions (compute 2.91, placement 1.39). */
  microversions?: { compute?: string; placement?: string };
  /** Keystone sessions: renew the token when less than this is left (default 5 min). */
  renewBeforeMs?: number;
  /** Keystone sessions: the clock (ms since epoch), for tests. */
  now?: () => number;
}

export interface OpenStackClients {
  session: Session;
  keystone: KeystoneClient;
  nova: NovaClient;
  placement: PlacementClient;
  neutron: NeutronClient;
  glance: GlanceClient;
  /** Ironic: only where hosts are powered through it (issue 48); built like the others, used on first call. */
  ironic: IronicClient;
}

/** Builds a session from credentials: Keystone password auth or static endpoints. */
export function createSession(
  credentials: OpenStackCredentials,
  options: HttpOptions & { renewBeforeMs?: number; now?: () => number } = {},
): Session {
  const http: HttpOptions = { timeoutMs: options.timeoutMs, logger: options.logger, fetch: options.fetch, userAgent: options.userAgent };
  if (credentials.type === 'static') {
    return new StaticSession({ endpoints: credentials.endpoints, token: credentials.token, headers: credentials.headers, http });
  }
  return new KeystoneSession({ credentials, http, renewBeforeMs: options.renewBeforeMs, now: options.now });
}

/** The Keystone, Nova, Placement, Neutron and Glance clients on one session. */
export function openStackClients(options: OpenStackClientsOptions = {}): OpenStackClients {
  const session = options.session ?? createSession(options.credentials ?? loadCredentials(options), options);
  return {
    session,
    keystone: new KeystoneClient(session),
    nova: new NovaClient(session, { microversion: options.microversions?.compute }),
    placement: new PlacementClient(session, { microversion: options.microversions?.placement }),
    neutron: new NeutronClient(session),
    glance: new GlanceClient(session),
    ironic: new IronicClient(session),
  };
}

/**
 * The same service credentials scoped to another project, e.g. to create a server in a lessee's
 * project (the service user needs a role there: an inherited role on the domain does for all).
 * Built on first use per project, and kept.
 */
export function projectScopedClients(options: OpenStackClientsOptions = {}): (projectId: string) => OpenStackClients {
  const byProject = new Map<string, OpenStackClients>();
  return (projectId) => {
    let clients = byProject.get(projectId);
    if (!clients) {
      const credentials = options.credentials ?? loadCredentials(options);
      if (credentials.type !== 'password') throw new OpenStackConfigError('acting in a lessee project needs Keystone password credentials');
      const scoped = { ...credentials, projectId, projectName: undefined, projectDomainId: undefined, projectDomainName: undefined };
      clients = openStackClients({ ...options, credentials: scoped });
      byProject.set(projectId, clients);
    }
    return clients;
  };
}

/**
 * The clients, built on first use: processes start without OpenStack settings and fail (with
 * OpenStackConfigError naming the missing setting) only when something needs the cloud.
 */
export function lazyOpenStackClients(options: OpenStackClientsOptions = {}): () => OpenStackClients {
  let clients: OpenStackClients | undefined;
  return () => (clients ??= openStackClients(options));
}
