/**
 * AUTH_STRATEGY=keystone against the rig's real Keystone: tokens of project A see A's leases only,
 * an admin token sees all, a bad or missing token is a 401 with Blazar's error body; the calendar
 * page signs a user in with their password (their own token, through the API) in Chromium.
 */
import { launchChromium } from '../../dev-stack/fixtures/browser';
import { keystoneAuthenticator } from '../../src/api/keystone-auth';
import { apiClient, inSeconds, useTestStack } from '../../dev-stack/stack';
import { KeystoneSession } from '../../src/openstack';
import { rigCredentials, rigClients } from './support';

describe('Keystone authentication of API callers', () => {
  const service = rigClients('leasekeeper-admin');
  const stack = useTestStack({
    authenticator: keystoneAuthenticator({ validateToken: (token) => service.keystone.validateToken(token) }),
    openstack: () => service,
    env: { LK_AUTH_STRATEGY: 'keystone' },
  });
  let tokens: { a: string; b: string; admin: string };

  beforeAll(async () => {
    const tokenOf = async (cloud: 'leasekeeper-project-a' | 'leasekeeper-project-b' | 'leasekeeper-admin') => (await new KeystoneSession({ credentials: rigCredentials(cloud) }).authenticate()).token;
    tokens = { a: await tokenOf('leasekeeper-project-a'), b: await tokenOf('leasekeeper-project-b'), admin: await tokenOf('leasekeeper-admin') };
  });

  it("lets project A see its own leases only, and an admin all of them", async () => {
    const asA = apiClient(stack().url, { 'x-auth-token': tokens.a });
    const asB = apiClient(stack().url, { 'x-auth-token': tokens.b });
    const asAdmin = apiClient(stack().url, { 'x-auth-token': tokens.admin });
    const a = await asA('POST', '/v1/leases', { name: 'keystone-a', start_date: inSeconds(3600), end_date: inSeconds(7200) });
    const b = await asB('POST', '/v1/leases', { name: 'keystone-b', start_date: inSeconds(3600), end_date: inSeconds(7200) });
    expect([a.status, b.status]).toEqual([201, 201]);
    const projectA = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    expect(a.body.lease.project_id).toBe(projectA);

    expect((await asA('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name)).toEqual(['keystone-a']);
    expect((await asA('GET', `/v1/leases/${b.body.lease.id}`)).status).toBe(404);
    expect((await asA('DELETE', `/v1/leases/${b.body.lease.id}`)).status).toBe(404);
    expect((await asAdmin('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name).sort()).toEqual(['keystone-a', 'keystone-b']);
    expect((await asA('GET', '/v1/os-hosts')).status).toBe(403);
  });

  it('answers 401 with the Blazar error body for an invalid or missing token', async () => {
    const invalid = await apiClient(stack().url, { 'x-auth-token': 'gAAAAAnot-a-real-token' })('GET', '/v1/leases');
    expect(invalid).toEqual({ status: 401, body: { error_code: 401, error_message: 'The request you have made requires authentication: the token is invalid or has expired', error_name: 401 } });
    const missing = await apiClient(stack().url)('GET', '/v1/leases');
    expect(missing.status).toBe(401);
    expect(missing.body.error_message).toBe('The request you have made requires authentication: send a Keystone token in X-Auth-Token');
  });

  it('signs a user in on the calendar page with their password: their own token, which the API then accepts', async () => {
    const a = rigCredentials('leasekeeper-project-a');
    const login = { username: a.username, password: a.password, project_name: a.projectName, user_domain_name: a.userDomainName ?? 'Default', project_domain_name: a.projectDomainName ?? 'Default' };
    const anonymous = apiClient(stack().url);
    expect((await anonymous('GET', '/calendar/settings')).body).toEqual({ auth_strategy: 'keystone' });
    const signedIn = await anonymous('POST', '/calendar/login', login);
    expect(signedIn.status).toBe(200);
    expect(signedIn.body).toMatchObject({ token: expect.any(String), project_name: a.projectName });
    const asA = apiClient(stack().url, { 'x-auth-token': signedIn.body.token });
    const leases = await asA('GET', '/v1/leases');
    expect(leases.status).toBe(200);
    expect(leases.body.leases.map((l: { name: string }) => l.name)).toEqual(['keystone-a']);

    const wrong = await anonymous('POST', '/calendar/login', { ...login, password: `${a.password}-wrong` });
    expect(wrong).toEqual({ status: 401, body: { error_code: 401, error_message: 'Keystone refused the sign-in: check the user name, password, project and domains', error_name: 401 } });
    const incomplete = await anonymous('POST', '/calendar/login', { username: a.username });
    expect(incomplete.status).toBe(400);
    expect(incomplete.body.error_message).toMatch(/password/);

    // The same in the page.
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      await page.goto(`${stack().url}/calendar/`);
      const form = page.getByRole('form', { name: 'Sign in with Keystone' });
      await form.getByLabel('User', { exact: true }).fill(login.username!);
      await form.getByLabel('Password').fill(login.password);
      await form.getByLabel('Project', { exact: true }).fill(login.project_name!);
      await form.getByRole('button', { name: 'Sign in' }).click();
      await page.getByText('Signed in as your Keystone token').waitFor({ timeout: 15_000 });
      await page.getByRole('link', { name: 'keystone-a' }).waitFor({ timeout: 15_000 }); // A's lease, in the week shown
    } finally {
      await browser.close();
    }
  });
});
