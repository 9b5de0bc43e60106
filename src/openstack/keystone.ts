/**
 * Keystone: v3 password authentication (project-scoped) with a cached token that is renewed before
 * it expires, endpoint discovery from the service catalog, a Keystone-less static session, and the
 * validation of users' tokens for leasekeeper's own API.
 */
import { z } from 'zod';
import type { EndpointInterface, PasswordCredentials, StaticCredentials } from './auth';
import { EndpointNotFoundError, InvalidResponseError, InvalidTokenError, NotFoundError, OpenStackConfigError, type ServiceType } from './errors';
import { type CallOptions, type HttpOptions, sendRequest, ServiceHttp, type Session, seg, versionedBase } from './http';

const nameRef = z.object({ id: z.string(), name: z.string() });

const catalogSchema = z.array(
  z.object({
    type: z.string(),
    name: z.string().optional(),
    id: z.string().optional(),
    endpoints: z.array(
      z.object({
        id: z.string().optional(),
        interface: z.string(),
        region: z.string().nullish(),
        region_id: z.string().nullish(),
        url: z.string(),
      }),
    ),
  }),
);

const tokenBodySchema = z.object({
  token: z.object({
    expires_at: z.string(),
    issued_at: z.string().optional(),
    methods: z.array(z.string()).optional(),
    audit_ids: z.array(z.string()).optional(),
    user: z.object({ id: z.string(), name: z.string(), domain: nameRef.optional() }),
    project: z.object({ id: z.string(), name: z.string(), domain: nameRef.optional() }).optional(),
    roles: z.array(nameRef).optional(),
    catalog: catalogSchema.optional(),
    is_admin_project: z.boolean().optional(),
  }),
});

export type ServiceCatalog = z.infer<typeof catalogSchema>;

/** A project-scoped token and what Keystone says about it. */
export interface TokenInfo {
  projectId: string;
  projectName: string;
  projectDomainId: string | undefined;
  userId: string;
  userName: string;
  userDomainId: string | undefined;
  /** Role names, e.g. `['member', 'reader']`. */
  roles: string[];
  expiresAt: Date;
  issuedAt: Date | undefined;
  /** Keystone's `is_admin_project` (true for the cloud admin project, when configured). */
  isAdminProject: boolean | undefined;
}

/** The session's own token: TokenInfo plus the token itself and the catalog. */
export interface AuthState extends TokenInfo {
  token: string;
  catalog: ServiceCatalog;
}

function parseDate(value: string, what: string): Date {
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) throw new Error(`Keystone returned an invalid ${what}: ${value}`);
  return date;
}

type TokenBody = z.infer<typeof tokenBodySchema>['token'];

function tokenInfoOf(token: TokenBody): Omit<TokenInfo, 'projectId' | 'projectName'> & { projectId?: string; projectName?: string } {
  return {
    projectId: token.project?.id,
    projectName: token.project?.name,
    projectDomainId: token.project?.domain?.id,
    userId: token.user.id,
    userName: token.user.name,
    userDomainId: token.user.domain?.id,
    roles: (token.roles ?? []).map((role) => role.name),
    expiresAt: parseDate(token.expires_at, 'expires_at'),
    issuedAt: token.issued_at === undefined ? undefined : parseDate(token.issued_at, 'issued_at'),
    isAdminProject: token.is_admin_project,
  };
}

/** Picks an endpoint URL from the catalog by service type, interface and (optionally) region. */
export function findEndpoint(catalog: ServiceCatalog, service: ServiceType, interfaceName: EndpointInterface, region?: string): string {
  for (const entry of catalog) {
    if (entry.type !== service) continue;
    for (const endpoint of entry.endpoints) {
      if (endpoint.interface !== interfaceName) continue;
      if (region !== undefined && endpoint.region_id !== region && endpoint.region !== region) continue;
      return endpoint.url;
    }
  }
  throw new EndpointNotFoundError(service, interfaceName, region);
}

export interface KeystoneSessionOptions {
  credentials: PasswordCredentials;
  http?: HttpOptions;
  /** Renew the token when less than this is left (default 5 min; at most half the token's life). */
  renewBeforeMs?: number;
  /** The clock, in ms since the epoch (default Date.now); tests inject one. */
  now?: () => number;
}

export const DEFAULT_RENEW_BEFORE_MS = 5 * 60_000;

/**
 * A Keystone v3 password session. The token is fetched on first use, shared by all callers,
 * and renewed when it is close to expiry; concurrent callers share one in-flight authentication.
 */
export class KeystoneSession implements Session {
  readonly http: HttpOptions;
  readonly credentials: PasswordCredentials;
  private readonly renewBeforeMs: number;
  private readonly now: () => number;
  private current: { state: AuthState; renewAt: number } | undefined;
  private inFlight: Promise<AuthState> | undefined;

  constructor(options: KeystoneSessionOptions) {
    this.credentials = options.credentials;
    this.http = options.http ?? {};
    this.renewBeforeMs = options.renewBeforeMs ?? DEFAULT_RENEW_BEFORE_MS;
    this.now = options.now ?? Date.now;
  }

  /** Keystone's versioned URL, e.g. `http://127.0.0.1:15000/v3`. */
  get authUrl(): string {
    return versionedBase(this.credentials.authUrl, '/v3');
  }

  /** The current token and its details, authenticating first when there is none or it is due for renewal. */
  async authenticate(): Promise<AuthState> {
    const current = this.current;
    if (current !== undefined && this.now() < current.renewAt) return current.state;
    this.inFlight ??= this.requestToken().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  /**
   * When to renew, on our own clock: the token's lifetime (expires_at − issued_at, both Keystone's
   * clock, so clock skew does not matter) counted from when we received it, less the margin
   * (at most half the lifetime, so short-lived tokens are still used).
   */
  private renewAtFor(state: AuthState, receivedAt: number): number {
    const lifetime = state.expiresAt.getTime() - (state.issuedAt?.getTime() ?? receivedAt);
    const margin = Math.min(this.renewBeforeMs, Math.max(0, lifetime / 2));
    return receivedAt + lifetime - margin;
  }

  private async requestToken(): Promise<AuthState> {
    const c = this.credentials;
    const user: Record<string, unknown> = { password: c.password };
    if (c.userId !== undefined) {
      user.id = c.userId;
    } else {
      user.name = c.username;
      user.domain = c.userDomainId !== undefined ? { id: c.userDomainId } : c.userDomainName !== undefined ? { name: c.userDomainName } : { id: 'default' };
    }
    const project: Record<string, unknown> =
      c.projectId !== undefined
        ? { id: c.projectId }
        : {
            name: c.projectName,
            domain: c.projectDomainId !== undefined ? { id: c.projectDomainId } : c.projectDomainName !== undefined ? { name: c.projectDomainName } : { id: 'default' },
          };
    const url = `${this.authUrl}/auth/tokens`;
    const response = await sendRequest<unknown>(
      {
        service: 'identity',
        method: 'POST',
        url,
        body: { auth: { identity: { methods: ['password'], password: { user } }, scope: { project } } },
      },
      this.http,
    );
    const token = response.headers.get('x-subject-token');
    const parsed = tokenBodySchema.safeParse(response.body);
    if (!token || !parsed.success) {
      throw new InvalidResponseError(`Keystone's token response is malformed${token ? `: ${parsed.error?.message ?? ''}` : ' (no X-Subject-Token)'}`, {
        service: 'identity',
        method: 'POST',
        url,
        status: response.status,
        requestId: response.requestId,
      });
    }
    const info = tokenInfoOf(parsed.data.token);
    if (info.projectId === undefined || info.projectName === undefined) {
      throw new OpenStackConfigError('Keystone returned a token without project scope; check the project settings');
    }
    const state: AuthState = { ...info, projectId: info.projectId, projectName: info.projectName, token, catalog: parsed.data.token.catalog ?? [] };
    this.current = { state, renewAt: this.renewAtFor(state, this.now()) };
    return state;
  }

  async getToken(): Promise<string> {
    return (await this.authenticate()).token;
  }

  async getEndpoint(service: ServiceType): Promise<string> {
    const override = this.credentials.endpointOverride?.[service];
    if (override !== undefined) return override;
    const { catalog } = await this.authenticate();
    try {
      return findEndpoint(catalog, service, this.credentials.interface ?? 'public', this.credentials.regionName);
    } catch (error) {
      if (service === 'identity' && error instanceof EndpointNotFoundError) return this.authUrl;
      throw error;
    }
  }

  invalidateToken(token: string): void {
    if (this.current?.state.token === token) this.current = undefined;
  }
}

export interface StaticSessionOptions extends Omit<StaticCredentials, 'type'> {
  http?: HttpOptions;
}

/** No Keystone: fixed endpoint URLs and an optional fixed token. */
export class StaticSession implements Session {
  readonly http: HttpOptions;
  readonly extraHeaders: Readonly<Record<string, string>> | undefined;
  private readonly endpoints: Partial<Record<ServiceType, string>>;
  private readonly token: string | undefined;

  constructor(options: StaticSessionOptions) {
    this.endpoints = options.endpoints;
    this.token = options.token;
    this.extraHeaders = options.headers;
    this.http = options.http ?? {};
  }

  getToken(): Promise<string | undefined> {
    return Promise.resolve(this.token);
  }

  getEndpoint(service: ServiceType): Promise<string> {
    const url = this.endpoints[service];
    if (url === undefined) return Promise.reject(new OpenStackConfigError(`no endpoint configured for service type '${service}' (endpoints.${service})`));
    return Promise.resolve(url);
  }

  invalidateToken(): void {
    // A static token cannot be renewed.
  }
}

export interface Project {
  id: string;
  name: string;
  domain_id: string;
  description?: string;
  enabled: boolean;
  is_domain?: boolean;
  parent_id?: string | null;
  tags?: string[];
}

/** A user's password sign-in, scoped to one of their projects (domains by name, as the dashboard asks). */
export interface UserLogin {
  username: string;
  password: string;
  userDomainName: string;
  projectName: string;
  projectDomainName: string;
}

/** Keystone's identity API beyond the session's own token. */
export class KeystoneClient {
  readonly http: ServiceHttp;

  constructor(readonly session: Session) {
    this.http = new ServiceHttp('identity', session, { versionPath: '/v3' });
  }

  /**
   * A user's own project-scoped token from their password (`POST /v3/auth/tokens`), for the calendar
   * page's sign-in. Throws UnauthorizedError (401) for a wrong name, password or project.
   */
  async issueUserToken(login: UserLogin, options: CallOptions = {}): Promise<{ token: string; projectId: string; projectName: string; expiresAt: Date }> {
    // The user's password is their credential: our service token is neither sent nor (on a wrong
    // password's 401) thrown away, and a Keystone session's own URL needs no service sign-in to find.
    const response = await this.http.request<unknown>({
      method: 'POST',
      path: this.session.authUrl === undefined ? '/auth/tokens' : `${this.session.authUrl}/auth/tokens`,
      withoutSession: true,
      query: { nocatalog: '' },
      body: {
        auth: {
          identity: { methods: ['password'], password: { user: { name: login.username, password: login.password, domain: { name: login.userDomainName } } } },
          scope: { project: { name: login.projectName, domain: { name: login.projectDomainName } } },
        },
      },
      timeoutMs: options.timeoutMs,
      signal: options.signal,
    });
    const token = response.headers.get('x-subject-token');
    const parsed = tokenBodySchema.safeParse(response.body);
    const info = parsed.success ? tokenInfoOf(parsed.data.token) : undefined;
    if (!token || info?.projectId === undefined || info.projectName === undefined) {
      throw new InvalidResponseError("Keystone's token response is malformed or not scoped to a project", { service: 'identity', method: 'POST', url: '/v3/auth/tokens', status: response.status, requestId: response.requestId });
    }
    return { token, projectId: info.projectId, projectName: info.projectName, expiresAt: info.expiresAt };
  }

  /**
   * Validates a user's token (`GET /v3/auth/tokens`, X-Subject-Token) with the session's own token.
   * Throws InvalidTokenError (a NotFoundError, 404) when the token is unknown, expired, revoked or
   * not scoped to a project, and UnauthorizedError (401) when Keystone rejects our own token.
   */
  async validateToken(userToken: string, options: CallOptions & { allowExpired?: boolean } = {}): Promise<TokenInfo> {
    let response;
    try {
      response = await this.http.request<unknown>({
        method: 'GET',
        path: '/auth/tokens',
        query: { nocatalog: '', allow_expired: options.allowExpired ? 1 : undefined },
        headers: { 'X-Subject-Token': userToken },
        timeoutMs: options.timeoutMs,
        signal: options.signal,
      });
    } catch (error) {
      if (error instanceof NotFoundError) {
        throw new InvalidTokenError(`the token is not valid: ${error.message}`, {
          service: error.service,
          method: error.method,
          url: error.url,
          status: error.status,
          requestId: error.requestId,
          body: error.body,
        });
      }
      throw error;
    }
    const parsed = tokenBodySchema.safeParse(response.body);
    if (!parsed.success) {
      throw new InvalidResponseError(`Keystone's token validation response is malformed: ${parsed.error.message}`, {
        service: 'identity',
        method: 'GET',
        url: '/v3/auth/tokens',
        status: response.status,
        requestId: response.requestId,
      });
    }
    const info = tokenInfoOf(parsed.data.token);
    if (info.projectId === undefined || info.projectName === undefined) {
      throw new InvalidTokenError('the token is not scoped to a project', {
        service: 'identity',
        method: 'GET',
        url: '/v3/auth/tokens',
        status: 404,
        requestId: response.requestId,
      });
    }
    return { ...info, projectId: info.projectId, projectName: info.projectName };
  }

  async listProjects(filters: { name?: string; domainId?: string; enabled?: boolean } = {}, options: CallOptions = {}): Promise<Project[]> {
    const body = await this.http.get<{ projects: Project[] }>('/projects', { name: filters.name, domain_id: filters.domainId, enabled: filters.enabled }, options);
    return body.projects;
  }

  async getProject(id: string, options: CallOptions = {}): Promise<Project> {
    return (await this.http.get<{ project: Project }>(`/projects/${seg(id)}`, undefined, options)).project;
  }
}

/**
 * Validates a user's token with a session's service token: the function our API's Keystone
 * authentication calls. See KeystoneClient.validateToken.
 */
export async function validateToken(session: Session, userToken: string, options: CallOptions & { allowExpired?: boolean } = {}): Promise<TokenInfo> {
  return new KeystoneClient(session).validateToken(userToken, options);
}
