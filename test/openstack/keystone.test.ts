/** Keystone v3 against the rig: auth, token cache and renewal, catalog, token validation. */
import {
  EndpointNotFoundError,
  InvalidTokenError,
  KeystoneClient,
  KeystoneSession,
  NotFoundError,
  StaticSession,
  UnauthorizedError,
  validateToken,
} from '../../src/openstack';
import { isAuthRequest, recordingFetch, rigClients, rigCredentials, rigEnv } from './support';

const env = rigEnv();

test('password auth gives a project-scoped token with roles and an expiry', async () => {
  const session = new KeystoneSession({ credentials: rigCredentials('leasekeeper-admin') });
  const auth = await session.authenticate();
  expect(auth.token.length).toBeGreaterThan(20);
  expect(auth.projectName).toBe('admin');
  expect(auth.userName).toBe('admin');
  expect(auth.roles).toEqual(expect.arrayContaining(['admin', 'member']));
  expect(auth.expiresAt.getTime()).toBeGreaterThan(Date.now() + 10 * 60_000);
  expect(auth.catalog.map((entry) => entry.type).sort()).toEqual(['compute', 'identity', 'image', 'network', 'placement']);
});

test('one authentication serves many calls, concurrent ones included', async () => {
  const recorder = recordingFetch();
  const os = rigClients('leasekeeper-admin', { fetch: recorder.fetch });
  // Concurrent first calls share the one in-flight authentication.
  await Promise.all([
    os.nova.listServices({ binary: 'nova-compute' }),
    os.placement.listResourceProviders({ name: 'fake-1' }),
    os.neutron.listNetworks({ name: 'none-such' }),
    os.glance.listImages({ name: 'fake-image' }),
    os.nova.listFlavors(),
  ]);
  await os.nova.listHypervisors();
  await os.keystone.listProjects({ name: 'project-a' });
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(1);
  expect(recorder.requests.length).toBe(8);
});

test('the token is renewed when less than the renewal margin is left', async () => {
  const recorder = recordingFetch();
  const started = Date.now();
  let clock = started;
  const os = rigClients('leasekeeper-admin', { fetch: recorder.fetch, now: () => clock });
  const session = os.session as KeystoneSession;
  const first = await session.authenticate();
  await os.nova.listServices();
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(1);
  // The lifetime counts from when the token arrived (on our clock), so Keystone's clock does not matter.
  const lifetime = first.expiresAt.getTime() - (first.issuedAt?.getTime() ?? NaN);
  expect(lifetime).toBeGreaterThan(30 * 60_000);

  // 10 minutes left: still more than the 5-minute margin, no renewal.
  clock = started + lifetime - 10 * 60_000;
  await os.nova.listServices();
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(1);

  // 4 minutes left: renewed before the call, concurrent callers sharing one authentication.
  clock = started + lifetime - 4 * 60_000;
  await Promise.all([os.nova.listServices(), os.placement.listTraits({ name: 'startswith:CUSTOM_PHYSNET' }), os.glance.listImages()]);
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(2);
  const second = await session.authenticate();
  expect(second.token).not.toBe(first.token);
  await os.nova.listServices();
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(2);
});

test('a short renewal margin: renewed only when that little is left', async () => {
  const recorder = recordingFetch();
  const started = Date.now();
  let clock = started;
  const os = rigClients('leasekeeper-admin', { fetch: recorder.fetch, now: () => clock, renewBeforeMs: 1_000 });
  const first = await (os.session as KeystoneSession).authenticate();
  const lifetime = first.expiresAt.getTime() - (first.issuedAt?.getTime() ?? NaN);
  clock = started + lifetime - 4 * 60_000;
  await os.nova.listServices();
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(1);
  clock = started + lifetime - 500;
  await os.nova.listServices();
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(2);
});

test('a token rejected with 401 is dropped; the next call authenticates afresh', async () => {
  const recorder = recordingFetch();
  const victim = rigClients('leasekeeper-admin', { fetch: recorder.fetch });
  const token = await victim.session.getToken();
  expect(token).toBeDefined();
  // Revoke the victim's token with another admin session (DELETE /v3/auth/tokens).
  const admin = rigClients('leasekeeper-admin');
  await admin.keystone.http.request({ method: 'DELETE', path: '/auth/tokens', headers: { 'X-Subject-Token': token ?? '' } });

  const error = await victim.keystone.listProjects().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(UnauthorizedError);
  expect(error).toMatchObject({ status: 401, service: 'identity', retryable: false });
  const projects = await victim.keystone.listProjects();
  expect(projects.map((p) => p.name)).toEqual(expect.arrayContaining(['admin', 'project-a', 'project-b']));
  expect(recorder.requests.filter(isAuthRequest)).toHaveLength(2);
  expect(await victim.session.getToken()).not.toBe(token);
});

describe('endpoint discovery', () => {
  test('each service type is found in the catalog', async () => {
    const { session } = rigClients('leasekeeper-admin');
    expect(await session.getEndpoint('compute')).toBe(env.LK_NOVA_URL);
    expect(await session.getEndpoint('placement')).toBe(env.LK_PLACEMENT_URL);
    expect(await session.getEndpoint('network')).toBe(env.LK_NEUTRON_URL);
    expect(await session.getEndpoint('image')).toBe(env.LK_GLANCE_URL);
    expect((await session.getEndpoint('identity')).replace(/\/$/, '')).toBe(env.LK_KEYSTONE_URL);
  });

  test('interface and region are selectable; an override wins; a missing region is an error', async () => {
    const credentials = rigCredentials('leasekeeper-admin');
    const internal = new KeystoneSession({ credentials: { ...credentials, interface: 'internal', regionName: 'RegionOne' } });
    expect(await internal.getEndpoint('compute')).toBe(env.LK_NOVA_URL);
    const auth = await internal.authenticate();
    const internalUrl = auth.catalog.find((e) => e.type === 'compute')?.endpoints.find((e) => e.interface === 'internal')?.url;
    expect(internalUrl).toBe(env.LK_NOVA_URL);

    const overridden = new KeystoneSession({ credentials: { ...credentials, endpointOverride: { image: 'http://127.0.0.1:1/glance' } } });
    expect(await overridden.getEndpoint('image')).toBe('http://127.0.0.1:1/glance');

    const elsewhere = new KeystoneSession({ credentials: { ...credentials, regionName: 'RegionNowhere' } });
    const error = await elsewhere.getEndpoint('compute').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EndpointNotFoundError);
    expect((error as Error).message).toBe("no public endpoint for service type 'compute' in region 'RegionNowhere' in the service catalog");
  });

  test('without Keystone: static endpoints and token', async () => {
    const admin = await new KeystoneSession({ credentials: rigCredentials('leasekeeper-admin') }).authenticate();
    const session = new StaticSession({ endpoints: { compute: env.LK_NOVA_URL ?? '' }, token: admin.token });
    const os = rigClients('leasekeeper-admin', { session });
    const services = await os.nova.listServices({ binary: 'nova-compute' });
    expect(services.map((s) => s.host).sort()).toEqual(['fake-1', 'fake-2', 'fake-3']);
    await expect(os.placement.listTraits()).rejects.toThrow("no endpoint configured for service type 'placement'");
  });
});

describe('token validation', () => {
  test("a project-a user's token gives its project, user and roles", async () => {
    const userA = new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') });
    const userAuth = await userA.authenticate();
    const { keystone, session } = rigClients('leasekeeper-admin');

    const info = await keystone.validateToken(userAuth.token);
    expect(info).toMatchObject({
      projectId: userAuth.projectId,
      projectName: 'project-a',
      userId: userAuth.userId,
      userName: 'user-a',
      roles: expect.arrayContaining(['member']),
    });
    expect(info.roles).not.toContain('admin');
    expect(info.expiresAt.getTime()).toBe(userAuth.expiresAt.getTime());
    const [projectA] = await keystone.listProjects({ name: 'project-a' });
    expect(info.projectId).toBe(projectA?.id);

    // The free function does the same with any session.
    expect((await validateToken(session, userAuth.token)).userName).toBe('user-a');
  });

  test('an invalid token is an InvalidTokenError (404, a NotFoundError)', async () => {
    const { keystone } = rigClients('leasekeeper-admin');
    const error = await keystone.validateToken('gAAAAABnot-a-real-token').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidTokenError);
    expect(error).toBeInstanceOf(NotFoundError);
    expect(error).toMatchObject({ status: 404, service: 'identity', method: 'GET', retryable: false });
    expect((error as InvalidTokenError).requestId).toMatch(/^req-/);
  });

  test('a rejected service token is an UnauthorizedError (401)', async () => {
    const keystone = new KeystoneClient(new StaticSession({ endpoints: { identity: env.LK_KEYSTONE_URL ?? '' }, token: 'not-our-token' }));
    const userB = await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-b') }).getToken();
    const error = await keystone.validateToken(userB).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnauthorizedError);
    expect(error).toMatchObject({ status: 401, retryable: false });
    expect((error as Error).message).toMatch(/requires authentication/);
  });
});
