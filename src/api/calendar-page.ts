/**
 * The calendar page (`/calendar/`): static files built into dist/web by `npm run build` (no CDN: it
 * works offline), and `settings`, which tells the page how to sign in. The page holds no
 * credential of ours: it calls /v1 with the user's own identity (noauth headers or a Keystone token).
 */
import fs from 'node:fs';
import path from 'node:path';
import express, { Router } from 'express';
import { z } from 'zod';
import { UnauthorizedError } from '../openstack/errors';
import type { UserLogin } from '../openstack/keystone';
import { REPO_ROOT } from '../paths';
import { ApiError, parseRequest } from './errors';
import { SignInLimited, type SignInThrottle } from './sign-in-limits';

export const CALENDAR_ASSETS = path.join(REPO_ROOT, 'dist', 'web');

/** Only our own files: no inline script, no other origin (the page must not leak a token anywhere). */
const CONTENT_SECURITY_POLICY = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export interface CalendarPageSettings {
  authStrategy: 'noauth' | 'keystone';
  /** noauth: the project a caller without headers acts in (the sign-in form's default, as the development admin). */
  noauthProjectId: string;
  /** keystone: a user's password to their own token (Keystone's POST /v3/auth/tokens). */
  issueUserToken?: (login: UserLogin) => Promise<{ token: string; projectId: string; projectName: string; expiresAt: Date }>;
  /** keystone: the limits on failed sign-ins (src/api/sign-in-limits.ts). */
  signInThrottle?: SignInThrottle;
}

/** Keystone's names: short (control characters were refused before any route, by checkRequestInput). */
const keystoneName = (what: string) => z.string({ error: `expected the ${what}` }).min(1, `expected the ${what}`).max(255, 'must be at most 255 characters');

export const calendarLoginBody = z.strictObject({
  username: keystoneName('user name'),
  password: z.string({ error: 'expected the password' }).min(1, 'expected the password').max(4096, 'must be at most 4096 characters'),
  project_name: keystoneName('project name'),
  user_domain_name: keystoneName('user domain name').default('Default'),
  project_domain_name: keystoneName('project domain name').default('Default'),
});

export function calendarPage(settings: CalendarPageSettings): Router {
  const router = Router();
  router.use((_req, res, next) => {
    res.set('Content-Security-Policy', CONTENT_SECURITY_POLICY);
    res.set('X-Content-Type-Options', 'nosniff');
    res.set('Referrer-Policy', 'no-referrer');
    next();
  });
  // The API drops a `.json` suffix from every path (Blazar's routes), so this is `settings` with or without it.
  router.get('/settings', (_req, res) => {
    res.set('Cache-Control', 'no-store');
    res.json(settings.authStrategy === 'noauth' ? { auth_strategy: 'noauth', default_project_id: settings.noauthProjectId } : { auth_strategy: 'keystone' });
  });
  // Sign-in with a Keystone password: the page gets the user's own token (kept in the tab's session
  // storage) and never a credential of ours. Keystone's answer to a wrong password is one 401 for every cause.
  router.post('/login', async (req, res) => {
    res.set('Cache-Control', 'no-store');
    if (settings.authStrategy !== 'keystone' || !settings.issueUserToken) throw new ApiError(404, 'Signing in with a password is for LK_AUTH_STRATEGY=keystone: with noauth, choose a project');
    const body = parseRequest(calendarLoginBody, req.body);
    let attempt;
    try {
      // The client's address is the socket's unless LK_API_TRUST_PROXY names the proxies in front (express's `trust proxy`).
      attempt = settings.signInThrottle?.begin(`${body.user_domain_name}/${body.username}`, req.ip ?? req.socket.remoteAddress ?? '');
    } catch (err) {
      if (err instanceof SignInLimited) res.set('Retry-After', String(err.retryAfterSeconds));
      throw err;
    }
    try {
      const issued = await settings.issueUserToken({ username: body.username, password: body.password, userDomainName: body.user_domain_name, projectName: body.project_name, projectDomainName: body.project_domain_name });
      attempt?.succeeded();
      res.json({ token: issued.token, project_id: issued.projectId, project_name: issued.projectName, expires_at: issued.expiresAt.toISOString() });
    } catch (err) {
      if (err instanceof UnauthorizedError) {
        attempt?.refused();
        throw new ApiError(401, 'Keystone refused the sign-in: check the user name, password, project and domains');
      }
      attempt?.undecided();
      throw err;
    }
  });
  router.use(express.static(CALENDAR_ASSETS, { index: 'index.html', redirect: true, fallthrough: true }));
  router.use((req, _res, next) => {
    if (!fs.existsSync(path.join(CALENDAR_ASSETS, 'index.html'))) {
      next(new ApiError(503, 'The calendar page is not built: run `npm run build`'));
      return;
    }
    next(new ApiError(404, `No file ${JSON.stringify(req.path.slice(0, 100))} in the calendar page`));
  });
  return router;
}
