/**
 * Who is calling. `noauth` (development) reads the identity from headers, as Nova's noauth does;
 * a Keystone token validator fills the same interface later (AUTH_STRATEGY=keystone).
 */
import type { RequestHandler } from 'express';
import { projectIdSchema } from '../policy/rules';
import { ApiError } from './errors';

export interface Identity {
  projectId: string;
  userId: string;
  roles: string[];
  isAdmin: boolean;
}

export interface Authenticator {
  /** Resolves the caller, or throws ApiError(401). */
  authenticate(headers: Record<string, string | string[] | undefined>): Promise<Identity>;
}

/** Identity headers are names: they reach the database, search attributes and logs, so they are short and printable. */
const MAX_IDENTITY_HEADER = 255;
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/** What is wrong with a project or user id (or a role), if anything: the identity headers' rule, also the Blazar import's. */
export function identityProblem(text: string): string | undefined {
  return text.length > MAX_IDENTITY_HEADER || !PRINTABLE_ASCII.test(text) ? `expected at most ${MAX_IDENTITY_HEADER} printable ASCII characters` : undefined;
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = headers[name];
  const text = (Array.isArray(value) ? value[0] : value)?.trim() || undefined;
  const problem = text === undefined ? undefined : identityProblem(text);
  if (problem) throw new ApiError(400, `${name.replace(/\b\w/g, (c) => c.toUpperCase())}: ${problem}`);
  return text;
}

/**
 * Development only. `X-Auth-Token: admin` → admin. Otherwise `X-Project-Id`, `X-User-Id` and
 * `X-Roles` (comma-separated) say who the caller is. A request with none of these (e.g.
 * `blazar --os-auth-type none`) is the development admin of `defaultProjectId` (LK_NOAUTH_PROJECT_ID;
 * `npm start` with the loopback OpenStack makes it the rig admin's project, so that a lease made
 * that way is the rig admin's to boot servers in).
 */
export function noAuth(defaultProjectId = 'admin'): Authenticator {
  return {
    authenticate(headers) {
      const token = header(headers, 'x-auth-token');
      const projectId = header(headers, 'x-project-id') ?? header(headers, 'x-tenant-id');
      const roles = (header(headers, 'x-roles') ?? '').split(',').map((r) => r.trim().toLowerCase()).filter(Boolean);
      if (token === 'admin' || projectId === undefined) {
        return Promise.resolve({ projectId: projectId ?? defaultProjectId, userId: header(headers, 'x-user-id') ?? 'admin', roles: ['admin', ...roles], isAdmin: true });
      }
      return Promise.resolve({ projectId, userId: header(headers, 'x-user-id') ?? projectId, roles, isAdmin: roles.includes('admin') });
    },
  };
}

export function authenticate(authenticator: Authenticator): RequestHandler {
  return (req, res, next) => {
    authenticator.authenticate(req.headers).then(
      (identity) => {
        res.locals.identity = identity;
        next();
      },
      next,
    );
  };
}

export function identityOf(res: { locals: Record<string, unknown> }): Identity {
  return res.locals.identity as Identity;
}

/** Admins only, refused as Blazar's policy refuses: `blazar:<target>:<action>` (oshosts, floatingips, networks…). */
export function requireAdmin(res: { locals: Record<string, unknown> }, target: string, action: string): void {
  if (!identityOf(res).isAdmin) throw new ApiError(403, `Policy doesn't allow blazar:${target}:${action} to be performed.`);
}

/**
 * The project a per-project route names (`/projects/{projectId}/…`), if the caller may act on it:
 * admins on any; members on their own only, and not at all for `adminOnly` actions. `rule` is the
 * policy name Blazar's wording refuses with; `ownOnly` says what members may do instead.
 */
export function projectInScope(res: { locals: Record<string, unknown> }, raw: string, rule: string, options: { adminOnly?: boolean; ownOnly: string }): string {
  const identity = identityOf(res);
  if (!projectIdSchema.safeParse(raw).success) throw new ApiError(400, `${JSON.stringify(raw.slice(0, 64))} is not a project id`);
  if (options.adminOnly && !identity.isAdmin) throw new ApiError(403, `Policy doesn't allow ${rule} to be performed.`);
  if (!identity.isAdmin && raw !== identity.projectId) throw new ApiError(403, `Policy doesn't allow ${rule} to be performed: ${options.ownOnly}.`);
  return raw;
}
