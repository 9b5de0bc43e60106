/** The HTTP layer's typed errors: real OpenStack error bodies, a black hole and a closed port. */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import {
  BadRequestError,
  ConnectionError,
  ForbiddenError,
  isRetryable,
  NotFoundError,
  NovaClient,
  type RequestLogEvent,
  StaticSession,
  TimeoutError,
} from '../../src/openstack';
import { rigClients } from './support';

test('a missing server is a NotFoundError with the request id, also given to the logger', async () => {
  const events: RequestLogEvent[] = [];
  const { nova } = rigClients('leasekeeper-admin', { logger: (event) => events.push(event) });
  const id = randomUUID();
  const error = await nova.getServer(id).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(NotFoundError);
  const notFound = error as NotFoundError;
  expect(notFound).toMatchObject({ name: 'NotFoundError', status: 404, service: 'compute', method: 'GET', retryable: false });
  expect(notFound.url).toMatch(new RegExp(`/v2\\.1/servers/${id}$`));
  expect(notFound.requestId).toMatch(/^req-[0-9a-f-]{36}$/);
  expect(notFound.message).toContain(`Instance ${id} could not be found.`);
  expect(notFound.message).toContain(notFound.requestId);
  expect(isRetryable(notFound)).toBe(false);

  const event = events.find((e) => e.url === notFound.url);
  expect(event).toMatchObject({ service: 'compute', method: 'GET', status: 404, requestId: notFound.requestId, error: notFound });
  expect(event?.durationMs).toBeGreaterThanOrEqual(0);
  // Successful requests are logged too (the authentication among them).
  expect(events.some((e) => e.service === 'identity' && e.status === 201 && e.requestId !== undefined)).toBe(true);
});

test("each service's error body gives the message and code", async () => {
  const os = rigClients('leasekeeper-admin');
  const missing = randomUUID();

  const image = await os.glance.getImage(missing).catch((e: unknown) => e);
  expect(image).toBeInstanceOf(NotFoundError);
  expect((image as NotFoundError).message).toMatch(new RegExp(`^No image found with ID ${missing} \\(image GET`));

  const network = await os.neutron.getNetwork(missing).catch((e: unknown) => e);
  expect(network).toMatchObject({ status: 404, code: 'NetworkNotFound', service: 'network' });
  expect((network as Error).message).toMatch(new RegExp(`^Network ${missing} could not be found\\.`));

  const provider = await os.placement.getResourceProvider(missing).catch((e: unknown) => e);
  expect(provider).toMatchObject({ status: 404, code: 'placement.undefined_code', service: 'placement' });
  expect((provider as Error).message).toMatch(new RegExp(`^No resource provider with uuid ${missing} found`));

  const bad = await os.placement.listResourceProviders({ resources: { VCPU: -1 } }).catch((e: unknown) => e);
  expect(bad).toBeInstanceOf(BadRequestError);
  expect(bad).toMatchObject({ status: 400, retryable: false });
  expect((bad as BadRequestError).requestId).toMatch(/^req-/);
});

test('microversion headers per service, overridable per request; 403 is a ForbiddenError', async () => {
  const { nova, placement } = rigClients('leasekeeper-admin');
  const compute = await nova.http.request({ method: 'GET', path: '/os-services' });
  expect(compute.headers.get('openstack-api-version')).toBe('compute 2.91');
  expect(compute.requestId).toMatch(/^req-/);
  const older = await nova.http.request({ method: 'GET', path: '/os-services', microversion: '2.53' });
  expect(older.headers.get('openstack-api-version')).toBe('compute 2.53');
  const resourceProviders = await placement.http.request({ method: 'GET', path: '/resource_providers' });
  expect(resourceProviders.headers.get('openstack-api-version')).toBe('placement 1.39');

  const denied = await rigClients('leasekeeper-project-b')
    .nova.listHypervisors()
    .catch((e: unknown) => e);
  expect(denied).toBeInstanceOf(ForbiddenError);
  expect(denied).toMatchObject({ status: 403, service: 'compute', retryable: false });
  expect((denied as Error).message).toMatch(/not allowed|Policy/i);
});

test('no answer within the timeout is a retryable TimeoutError', async () => {
  const sockets = new Set<net.Socket>();
  const blackHole = net.createServer((socket) => {
    sockets.add(socket); // accept, read nothing, answer nothing
  });
  await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
  const { port } = blackHole.address() as net.AddressInfo;
  try {
    const nova = new NovaClient(new StaticSession({ endpoints: { compute: `http://127.0.0.1:${port}/v2.1` }, token: 't', http: { timeoutMs: 5_000 } }));
    const started = Date.now();
    const error = await nova.getServer('x', { timeoutMs: 300 }).catch((e: unknown) => e);
    const elapsed = Date.now() - started;
    expect(error).toBeInstanceOf(TimeoutError);
    expect(error).toMatchObject({ name: 'TimeoutError', service: 'compute', method: 'GET', status: undefined, timeoutMs: 300, retryable: true });
    expect((error as TimeoutError).url).toBe(`http://127.0.0.1:${port}/v2.1/servers/x`);
    expect(isRetryable(error)).toBe(true);
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(3_000);
    expect(sockets.size).toBeGreaterThan(0);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve, reject) => blackHole.close((err) => (err ? reject(err) : resolve())));
  }
});

test('a refused connection is a retryable ConnectionError', async () => {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));

  const nova = new NovaClient(new StaticSession({ endpoints: { compute: `http://127.0.0.1:${port}` } }));
  const error = await nova.listServices().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ConnectionError);
  expect(error).toMatchObject({ service: 'compute', retryable: true, url: `http://127.0.0.1:${port}/v2.1/os-services` });
  expect((error as Error).message).toContain('ECONNREFUSED');
});
