/**
 * An Ironic stand-in on 127.0.0.1: the node power exchange as Ironic's API reference gives it
 * (`GET /v1/nodes/{node}` with `fields`, `PUT /v1/nodes/{node}/states/power` `{"target": …}` → 202
 * with no body), Ironic's error body (`{"error_message": "<JSON text of faultstring…>"}`), and a
 * record of each request with its headers. A node can be locked (409 NodeLocked, as while a
 * conductor works on it); a wrong token gets 401.
 */
import http from 'node:http';
import { freePort } from '../../dev-stack/ports';

export interface IronicStandInNode {
  uuid: string;
  name: string;
  power_state: 'power on' | 'power off' | null;
  locked?: boolean;
}

export interface IronicStandIn {
  /** http://127.0.0.1:<port> (the catalog's URL, without the version). */
  url: string;
  token: string;
  nodes: Map<string, IronicStandInNode>;
  requests: Array<{ method: string; path: string; headers: http.IncomingHttpHeaders; body?: unknown }>;
  close(): Promise<void>;
}

function ironicError(res: http.ServerResponse, status: number, faultstring: string): void {
  // Ironic puts the fault in a JSON text inside the JSON body.
  const errorMessage = JSON.stringify({ faultstring, faultcode: status >= 500 ? 'Server' : 'Client', debuginfo: null });
  res.writeHead(status, { 'content-type': 'application/json', 'x-openstack-request-id': 'req-ironic-stand-in' }).end(JSON.stringify({ error_message: errorMessage }));
}

export async function startIronicStandIn(nodes: IronicStandInNode[]): Promise<IronicStandIn> {
  const token = 'ironic-stand-in-token';
  const byKey = new Map<string, IronicStandInNode>();
  for (const node of nodes) {
    byKey.set(node.uuid, node);
    byKey.set(node.name, node);
  }
  const requests: IronicStandIn['requests'] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      if (raw.length < 64 * 1024) raw += chunk;
    });
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://stand-in');
      const body = raw === '' ? undefined : (JSON.parse(raw) as unknown);
      requests.push({ method: req.method ?? '', path: url.pathname + url.search, headers: req.headers, body });
      if (req.headers['x-auth-token'] !== token) return ironicError(res, 401, 'The request you have made requires authentication.');
      const match = /^\/v1\/nodes\/([^/]+)(\/states\/power)?$/.exec(url.pathname);
      const node = match ? byKey.get(decodeURIComponent(match[1])) : undefined;
      if (!match || !node) return ironicError(res, 404, `Node ${match ? decodeURIComponent(match[1]) : ''} could not be found.`);
      if (req.method === 'GET' && !match[2]) {
        const whole = { uuid: node.uuid, name: node.name, power_state: node.power_state, target_power_state: null, last_error: null, maintenance: false, provision_state: 'active', driver: 'fake-hardware' };
        const fields = url.searchParams.get('fields')?.split(',');
        const shown = fields ? Object.fromEntries(Object.entries(whole).filter(([key]) => fields.includes(key))) : whole;
        return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(shown));
      }
      if (req.method === 'PUT' && match[2]) {
        if (node.locked) return ironicError(res, 409, `Node ${node.uuid} is locked by host conductor-1, please retry after the current operation is completed.`);
        const target = (body as { target?: unknown } | undefined)?.target;
        if (target !== 'power on' && target !== 'power off') return ironicError(res, 400, `Invalid power state ${String(target)}.`);
        node.power_state = target;
        return res.writeHead(202).end();
      }
      return ironicError(res, 405, 'The method is not allowed for this resource.');
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    nodes: new Map(nodes.map((node) => [node.uuid, node])),
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
