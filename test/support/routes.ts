/**
 * The routes an Express 5 app answers, read from its router (mounted routers included), for the
 * tests that hold every route to a rule: authorization checked, described in the OpenAPI document.
 */
import type express from 'express';

interface Layer {
  route?: { path: string | string[]; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
  rawPath?: string | string[];
}

/** "METHOD /full/path/:param" of every route, sorted, each once. */
export function appRoutes(app: express.Express): string[] {
  const routes = new Set<string>();
  const walk = (stack: Layer[], prefix: string) => {
    for (const layer of stack) {
      if (layer.route) {
        const { path, methods } = layer.route;
        for (const one of ([] as string[]).concat(path)) {
          for (const method of Object.keys(methods).filter((m) => methods[m] && m !== '_all')) routes.add(`${method.toUpperCase()} ${prefix}${one}`);
        }
      } else if (layer.handle?.stack) {
        walk(layer.handle.stack, prefix + (typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : ''));
      }
    }
  };
  walk((app as unknown as { router: { stack: Layer[] } }).router.stack, '');
  return [...routes].sort();
}
