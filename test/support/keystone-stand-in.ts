/**
 * A Keystone stand-in on 127.0.0.1 for the API's Keystone mode: password sign-ins
 * (`POST /v3/auth/tokens`) for the service user and the users given, token validation
 * (`GET /v3/auth/tokens`, which needs the service's current token), and a record of every request
 * with its headers, so that a test counts the service's sign-ins and sees what each request carried.
 */
import http from 'node:http';
import { freePort } from '../../dev-stack/ports';

export interface StandInRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** The user name of a password sign-in. */
  user?: string;
}

export interface KeystoneStandIn {
  /** http://127.0.0.1:<port>/v3 */
  authUrl: string;
  /** The service user's credentials (a project-scoped password session). */
  service: { username: string; password: string; projectName: string };
  requests: StandInRequest[];
  /** The service user's password sign-ins so far. */
  serviceSignIns: () => number;
  /** The sign-ins of anyone but the service user, so far. */
  userSignIns: () => StandInRequest[];
  close: () => Promise<void>;
}

const SERVICE = { username: 'leasekeeper', password: 'service-secret', projectName: 'service' };
const HOUR = 3_600_000;

function tokenBody(user: string, project: string, roles: string[]) {
  const now = Date.now();
  return {
    token: {
      expires_at: new Date(now + HOUR).toISOString(),
      issued_at: new Date(now).toISOString(),
      methods: ['password'],
      user: { id: `id-${user}`, name: user, domain: { id: 'default', name: 'Default' } },
      project: { id: `id-${project}`, name: project, domain: { id: 'default', name: 'Default' } },
      roles: roles.map((name) => ({ id: `id-${name}`, name })),
      catalog: [], // the identity endpoint is then the auth URL
    },
  };
}

/** `users`: name → password and project of each user who may sign in. */
export async function startKeystoneStandIn(users: Record<string, { password: string; project: string }>): Promise<KeystoneStandIn> {
  const requests: StandInRequest[] = [];
  const issued = new Map<string, { user: string; project: string; roles: string[] }>();
  let serviceToken: string | undefined;
  let count = 0;
  const send = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
  };
  const unauthorized = (res: http.ServerResponse) => send(res, 401, { error: { code: 401, title: 'Unauthorized', message: 'The request you have made requires authentication.' } });

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = (req.url ?? '').split('?')[0];
      const record: StandInRequest = { method: req.method ?? '', path, headers: req.headers };
      requests.push(record);
      if (path !== '/v3/auth/tokens') return send(res, 404, { error: { code: 404, message: 'not here' } });
      if (req.method === 'POST') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { auth?: { identity?: { password?: { user?: { name?: string; password?: string } } } } };
        const { name = '', password = '' } = body.auth?.identity?.password?.user ?? {};
        record.user = name;
        const token = `token-${++count}`;
        if (name === SERVICE.username && password === SERVICE.password) {
          serviceToken = token;
          issued.set(token, { user: name, project: SERVICE.projectName, roles: ['admin'] });
          return send(res, 201, tokenBody(name, SERVICE.projectName, ['admin']), { 'x-subject-token': token });
        }
        const user = users[name];
        if (!user || user.password !== password) return unauthorized(res);
        issued.set(token, { user: name, project: user.project, roles: ['member'] });
        return send(res, 201, tokenBody(name, user.project, ['member']), { 'x-subject-token': token });
      }
      if (req.method === 'GET') {
        if (serviceToken === undefined || req.headers['x-auth-token'] !== serviceToken) return unauthorized(res);
        const subject = issued.get(String(req.headers['x-subject-token']));
        if (!subject) return send(res, 404, { error: { code: 404, message: 'Could not find token' } });
        return send(res, 200, tokenBody(subject.user, subject.project, subject.roles));
      }
      return send(res, 405, { error: { code: 405, message: 'method not allowed' } });
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    authUrl: `http://127.0.0.1:${port}/v3`,
    service: SERVICE,
    requests,
    serviceSignIns: () => requests.filter((r) => r.method === 'POST' && r.user === SERVICE.username).length,
    userSignIns: () => requests.filter((r) => r.method === 'POST' && r.user !== SERVICE.username),
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
