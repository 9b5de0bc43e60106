import { Router, type RequestHandler } from 'express';

/** `GET /` and `GET /versions`: Blazar answers 300 Multiple Choices with its one version. */
export function versionsRouter(): Router {
  const router = Router();
  const handler: RequestHandler = (req, res) => {
    const base = `${req.protocol}://${req.get('host') ?? '127.0.0.1'}`;
    res.status(300).json({
      versions: [
        {
          id: 'v1.0',
          status: 'CURRENT',
          min_version: '1.0',
          max_version: '1.0',
          links: [{ rel: 'self', href: `${base}/v1/` }],
        },
      ],
    });
  };
  router.get('/', handler);
  router.get('/versions', handler);
  return router;
}
