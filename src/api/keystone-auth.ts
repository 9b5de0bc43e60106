/**
 * AUTH_STRATEGY=keystone: every request carries a Keystone token in X-Auth-Token, validated with
 * our service token (GET /v3/auth/tokens). Validations are cached briefly (and never past the
 * token's own expiry), so a burst of calls costs Keystone one validation.
 */
import type { Authenticator, Identity } from './auth';
import { ApiError } from './errors';

export interface ValidatedToken {
  projectId: string;
  userId: string;
  roles: string[];
  expiresAt: Date;
}

export interface TokenValidator {
  /** Resolves the token's scope and roles; rejects with an error whose `status` is 404 for a bad token. */
  validateToken(token: string): Promise<ValidatedToken>;
}

export interface KeystoneAuthOptions {
  cacheMs?: number;
  maxCachedTokens?: number;
  now?: () => number;
}

export function keystoneAuthenticator(validator: TokenValidator, options: KeystoneAuthOptions = {}): Authenticator {
  const cacheMs = options.cacheMs ?? 60_000;
  const maxCached = options.maxCachedTokens ?? 10_000;
  const now = options.now ?? Date.now;
  const cache = new Map<string, { identity: Identity; until: number }>();

  async function validate(token: string): Promise<Identity> {
    let validated: ValidatedToken;
    try {
      validated = await validator.validateToken(token);
    } catch (err) {
      const status = (err as { status?: number }).status;
      // Keystone answers 404 for a token that is unknown, revoked or expired; anything else is
      // Keystone (or our own service credentials) failing, not the caller's fault.
      if (status === 404) throw new ApiError(401, 'The request you have made requires authentication: the token is invalid or has expired');
      throw new ApiError(503, `cannot validate the token: Keystone is unavailable (${(err as Error).message})`);
    }
    const roles = validated.roles.map((r) => r.toLowerCase());
    const identity: Identity = { projectId: validated.projectId, userId: validated.userId, roles, isAdmin: roles.includes('admin') };
    if (cache.size >= maxCached) cache.delete(cache.keys().next().value!); // oldest first
    cache.set(token, { identity, until: Math.min(now() + cacheMs, validated.expiresAt.getTime()) });
    return identity;
  }

  return {
    async authenticate(headers) {
      const raw = headers['x-auth-token'];
      const token = (Array.isArray(raw) ? raw[0] : raw)?.trim();
      if (!token) throw new ApiError(401, 'The request you have made requires authentication: send a Keystone token in X-Auth-Token');
      const cached = cache.get(token);
      if (cached && cached.until > now()) return cached.identity;
      cache.delete(token);
      return validate(token);
    },
  };
}
