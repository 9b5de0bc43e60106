/**
 * AUTH_STRATEGY=keystone: every request carries a Keystone token in X-Auth-Token, validated with
 * our service token (GET /v3/auth/tokens). Validations are cached briefly (at most 5 minutes, never
 * past the token's own expiry; a token Keystone refused for a few seconds), concurrent validations
 * of one token share one call, and a validation that takes too long is a 503: a burst of calls
 * costs Keystone one validation, and a slow Keystone holds no request for long.
 */
import { createHash } from 'node:crypto';
import type { Authenticator, Identity } from './auth';
import { ApiError } from './errors';

export interface ValidatedToken {
  projectId: string;
  projectName?: string;
  projectDomainId?: string;
  userId: string;
  roles: string[];
  expiresAt: Date;
  /** Keystone's `is_admin_project`: false for every project but the cloud's admin project, when Keystone has one configured. */
  isAdminProject?: boolean;
}

export interface TokenValidator {
  /** Resolves the token's scope and roles; rejects with an error whose `status` is 404 for a bad token. */
  validateToken(token: string): Promise<ValidatedToken>;
}

/** The project whose `admin` role makes a global admin: by id, or else by name within a domain. */
export interface AdminProject {
  id?: string;
  name?: string;
  domainId?: string;
}

export interface KeystoneAuthOptions {
  cacheMs?: number;
  /** How long a token Keystone refused is refused without asking again. */
  negativeCacheMs?: number;
  maxCachedTokens?: number;
  /** How long a validation may take before the caller gets 503. */
  timeoutMs?: number;
  adminProject?: AdminProject;
  log?: { warn(obj: object, msg: string): void };
  now?: () => number;
}

/** A revoked token keeps working until its cached validation expires: never longer than this. */
export const MAX_AUTH_CACHE_MS = 300_000;

const INVALID_TOKEN = 'The request you have made requires authentication: the token is invalid or has expired';
const KEYSTONE_UNAVAILABLE = 'Keystone is unavailable: try again shortly';

/** Keystone's bootstrap admin project: `admin` in the default domain. */
const DEFAULT_ADMIN_PROJECT: AdminProject = { name: 'admin', domainId: 'default' };

function inAdminProject(token: ValidatedToken, admin: AdminProject): boolean {
  if (token.isAdminProject === false) return false; // Keystone knows its admin project better than our settings
  if (admin.id !== undefined) return token.projectId === admin.id;
  return admin.name !== undefined && token.projectName === admin.name && token.projectDomainId === (admin.domainId ?? 'default');
}

export function keystoneAuthenticator(validator: TokenValidator, options: KeystoneAuthOptions = {}): Authenticator {
  const cacheMs = Math.min(options.cacheMs ?? 60_000, MAX_AUTH_CACHE_MS);
  const negativeCacheMs = options.negativeCacheMs ?? 5_000;
  const maxCached = options.maxCachedTokens ?? 10_000;
  const timeoutMs = options.timeoutMs ?? 5_000;
  const adminProject = options.adminProject ?? DEFAULT_ADMIN_PROJECT;
  const now = options.now ?? Date.now;
  // Keyed by the token's hash: the caches hold no credentials. Map order is insertion order: oldest first.
  const cache = new Map<string, { identity?: Identity; until: number }>();
  const validating = new Map<string, Promise<Identity>>();

  function remember(key: string, entry: { identity?: Identity; until: number }): void {
    cache.delete(key);
    if (cache.size >= maxCached) cache.delete(cache.keys().next().value!);
    cache.set(key, entry);
  }

  function withTimeout<T>(promise: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
  }

  async function validate(key: string, token: string): Promise<Identity> {
    let validated: ValidatedToken;
    try {
      validated = await withTimeout(validator.validateToken(token));
    } catch (err) {
      // Keystone answers 404 for a token that is unknown, revoked or expired; anything else is
      // Keystone (or our own service credentials) failing, not the caller's fault. The caller
      // learns nothing of Keystone's internals: the log has them.
      if ((err as { status?: number }).status === 404) {
        remember(key, { until: now() + negativeCacheMs });
        throw new ApiError(401, INVALID_TOKEN);
      }
      options.log?.warn({ err }, 'Keystone token validation failed');
      throw new ApiError(503, KEYSTONE_UNAVAILABLE);
    }
    const roles = validated.roles.map((r) => r.toLowerCase());
    const identity: Identity = { projectId: validated.projectId, userId: validated.userId, roles, isAdmin: roles.includes('admin') && inAdminProject(validated, adminProject) };
    remember(key, { identity, until: Math.min(now() + cacheMs, validated.expiresAt.getTime()) });
    return identity;
  }

  return {
    async authenticate(headers) {
      const raw = headers['x-auth-token'];
      const token = (Array.isArray(raw) ? raw[0] : raw)?.trim();
      if (!token) throw new ApiError(401, 'The request you have made requires authentication: send a Keystone token in X-Auth-Token');
      const key = createHash('sha256').update(token).digest('hex');
      const cached = cache.get(key);
      if (cached && cached.until > now()) {
        if (!cached.identity) throw new ApiError(401, INVALID_TOKEN);
        return cached.identity;
      }
      cache.delete(key);
      let pending = validating.get(key);
      if (!pending) {
        pending = validate(key, token).finally(() => validating.delete(key));
        validating.set(key, pending);
      }
      return pending;
    },
  };
}
