import express from 'express';
import type { Client, Connection } from '@temporalio/client';
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import type { Logger } from '../log';
import { errorHandler, notFoundRoute } from './errors';
import { checkHealth } from './health';

export interface AppDeps {
  config: Pick<Config, 'temporal' | 'healthTimeoutMs'>;
  log: Logger;
  pool: Pool;
  connection: Connection;
  client: Client;
}

export function createApp(deps: AppDeps): express.Express {
  const { config, log } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  app.use((req, res, next) => {
    const started = performance.now();
    res.on('finish', () => {
      log.info({ method: req.method, path: req.originalUrl, status: res.statusCode, ms: Math.round(performance.now() - started) }, 'request');
    });
    next();
  });
  app.use(express.json({ limit: '1mb' }));

  app.get('/healthz', async (req, res) => {
    const deep = typeof req.query.deep === 'string' && ['1', 'true', 'yes'].includes(req.query.deep.toLowerCase());
    const health = await checkHealth(
      { ...deps, taskQueue: config.temporal.taskQueue, timeoutMs: config.healthTimeoutMs },
      deep,
    );
    res.status(health.status === 'ok' ? 200 : 503).json(health);
  });

  app.use(notFoundRoute);
  app.use(errorHandler(log));
  return app;
}
