/**
 * The calendar page's password sign-in (POST /calendar/login) against a Keystone stand-in that
 * records every request: the user's token is asked for without the service's token, a wrong
 * password leaves the service session alone, and failed sign-ins are limited per user name and per
 * client address (429 with Retry-After, before Keystone is asked), the address being the socket's
 * unless the proxies in front are trusted.
 */
import { keystoneAuthenticator } from '../src/api/keystone-auth';
import { openStackClients, type OpenStackClients } from '../src/openstack';
import { withoutRequestId } from '../dev-stack/http';
import { startKeystoneStandIn, type KeystoneStandIn } from './support/keystone-stand-in';
import { apiClient, useTestStack, type TestStackOptions } from '../dev-stack/stack';

const USERS = { alice: { password: 'alice-password', project: 'alpha' }, bob: { password: 'bob-password', project: 'beta' } };
const WINDOW_SECONDS = 600;

/** A Keystone stand-in, and a stack in Keystone mode whose service credentials are the stand-in's. */
function keystoneStack(env: Record<string, string>) {
  let keystone: KeystoneStandIn | undefined;
  let clients: OpenStackClients | undefined;
  beforeAll(async () => {
    keystone = await startKeystoneStandIn(USERS);
    const { username, password, projectName } = keystone.service;
    clients = openStackClients({ credentials: { type: 'password', authUrl: keystone.authUrl, username, password, projectName } });
  });
  afterAll(async () => {
    await keystone?.close();
  });
  const stack = useTestStack((): TestStackOptions => ({
    noWorker: true,
    env: { LK_AUTH_STRATEGY: 'keystone', ...env },
    openstack: () => clients!,
    authenticator: keystoneAuthenticator({ validateToken: (token) => clients!.keystone.validateToken(token) }),
  }));

  /** A sign-in, as from `from` (X-Forwarded-For) when given. */
  async function signIn(username: string, password: string, from?: string) {
    const res = await fetch(`${stack().url}/calendar/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(from ? { 'x-forwarded-for': from } : {}) },
      body: JSON.stringify({ username, password, project_name: 'whichever' }),
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: withoutRequestId(res, await res.json()) as Record<string, unknown> };
  }
  return { stack, keystone: () => keystone!, signIn };
}

describe('calendar sign-in in Keystone mode (behind a trusted proxy)', () => {
  const { stack, keystone, signIn } = keystoneStack({
    LK_API_TRUST_PROXY: 'loopback',
    LK_SIGNIN_FAILURES_PER_USER: '5',
    LK_SIGNIN_FAILURES_PER_ADDRESS: '40',
    LK_SIGNIN_WINDOW_SECONDS: String(WINDOW_SECONDS),
  });
  const signInsOf = (user: string) => keystone().userSignIns().filter((r) => r.user === user).length;

  it("asks for the user's token without the service token, and 30 wrong passwords cost the service session nothing", async () => {
    // The service session signs in once (to validate a user's token for /v1).
    const signedIn = await signIn('alice', USERS.alice.password, '198.51.100.1');
    expect(signedIn.status).toBe(200);
    expect(signedIn.body).toMatchObject({ project_name: 'alpha', token: expect.any(String) });
    const asAlice = apiClient(stack().url, { 'x-auth-token': String(signedIn.body.token) });
    expect((await asAlice('GET', '/v1/leases')).status).toBe(200);
    expect(keystone().serviceSignIns()).toBe(1);

    for (let i = 0; i < 30; i++) {
      const wrong = await signIn(`guess-${i}`, 'wrong', '198.51.100.1'); // 30 names: no per-name limit reached
      expect(wrong).toEqual({ status: 401, retryAfter: null, body: { error_code: 401, error_message: 'Keystone refused the sign-in: check the user name, password, project and domains', error_name: 401 } });
    }
    expect(keystone().serviceSignIns()).toBe(1);
    const userSignIns = keystone().userSignIns();
    expect(userSignIns).toHaveLength(31);
    expect(userSignIns.filter((r) => r.headers['x-auth-token'] !== undefined)).toEqual([]);
    // The service token still validates users' tokens.
    const again = await signIn('bob', USERS.bob.password, '198.51.100.1');
    expect((await apiClient(stack().url, { 'x-auth-token': String(again.body.token) })('GET', '/v1/leases')).status).toBe(200);
    expect(keystone().serviceSignIns()).toBe(1);
  });

  it("refuses a user name's sixth failed sign-in with 429 and Retry-After before asking Keystone; other names still sign in", async () => {
    // Concurrent guesses count from their start: 8 at once, 5 reach Keystone.
    const burst = await Promise.all(Array.from({ length: 8 }, () => signIn('alice', 'wrong', '198.51.100.2')));
    expect(burst.map((r) => r.status).sort()).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);
    expect(signInsOf('alice')).toBe(5 + 1); // and the success of the first test
    const refused = await signIn('alice', USERS.alice.password, '198.51.100.3'); // the name is held, from anywhere, even with the password
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ error_code: 429, error_message: expect.stringMatching(/^Too many failed sign-ins for this user name: try again in \d+ s$/), error_name: 429 });
    const retryAfter = Number(refused.retryAfter);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(WINDOW_SECONDS);
    expect(refused.body.error_message).toContain(`in ${retryAfter} s`);
    expect(signInsOf('alice')).toBe(6);
    // Another name from the same address: under the address's limit, so it signs in.
    expect((await signIn('bob', USERS.bob.password, '198.51.100.2')).status).toBe(200);
  });

  it("refuses an address past its failures, whatever the names, and no other address", async () => {
    const before = keystone().userSignIns().length;
    for (let i = 0; i < 40; i++) expect((await signIn(`spray-${i}`, 'wrong', '203.0.113.7')).status).toBe(401);
    const refused = await signIn('spray-40', 'wrong', '203.0.113.7');
    expect(refused.status).toBe(429);
    expect(refused.body.error_message).toMatch(/^Too many failed sign-ins from this address: try again in \d+ s$/);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect((await signIn('bob', USERS.bob.password, '203.0.113.7')).status).toBe(429); // the address is held
    expect(keystone().userSignIns().length - before).toBe(40);
    expect((await signIn('bob', USERS.bob.password, '203.0.113.8')).status).toBe(200);
    expect((await signIn('bob', USERS.bob.password)).status).toBe(200); // the proxy's own address
  });
});

describe('calendar sign-in in Keystone mode (no proxy trusted: the default)', () => {
  const { keystone, signIn } = keystoneStack({ LK_SIGNIN_FAILURES_PER_ADDRESS: '3' });

  it('counts by the connection\'s address: a forged X-Forwarded-For does not escape the limit', async () => {
    for (let i = 0; i < 3; i++) expect((await signIn(`guess-${i}`, 'wrong', `192.0.2.${i}`)).status).toBe(401);
    const refused = await signIn('guess-3', 'wrong', '192.0.2.99');
    expect(refused.status).toBe(429);
    expect(refused.body.error_message).toMatch(/from this address/);
    expect(keystone().userSignIns()).toHaveLength(3);
  });
});
