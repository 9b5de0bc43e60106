import { Router, type RequestHandler } from 'express';

/**
 * `GET /` and `GET /versions`: Blazar answers 300 Multiple Choices with its one version. The links
 * use the configured public URL (LK_PUBLIC_URL), never the caller's Host header: a forged Host must
 * not make the API hand out links to another site.
 */
export function versionsRouter(publicUrl: string): Router {
  const router = Router();
  const handler: RequestHandler = (_req, res) => {
    res.status(300).json({
      versions: [
        {
          id: 'v1.0',
          status: 'CURRENT',
          min_version: '1.0',
          max_version: '1.0',
          links: [{ rel: 'self', href: `${publicUrl}/v1/` }],
        },
      ],
    });
  };
  router.get('/', handler);
  router.get('/versions', handler);
  return router;
}
