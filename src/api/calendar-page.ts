/**
 * The calendar page (`/calendar/`): static files built into dist/web by `npm run build` (no CDN: it
 * works offline), and `settings`, which tells the page how to sign in. The page holds no
 * credential of ours: it calls /v1 with the user's own identity (noauth headers or a Keystone token).
 */
import fs from 'node:fs';
import path from 'node:path';
import express, { Router } from 'express';
import { REPO_ROOT } from '../paths';
import { ApiError } from './errors';

export const CALENDAR_ASSETS = path.join(REPO_ROOT, 'dist', 'web');

/** Only our own files: no inline script, no other origin (the page must not leak a token anywhere). */
const CONTENT_SECURITY_POLICY = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export function calendarPage(settings: { authStrategy: 'noauth' | 'keystone' }): Router {
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
    res.json({ auth_strategy: settings.authStrategy });
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
