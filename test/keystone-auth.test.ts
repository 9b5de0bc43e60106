/**
 * Keystone mode with a fake token validator: who is a global admin, what is cached (valid and
 * invalid tokens, never longer than 5 minutes), and what a caller sees when Keystone fails or hangs.
 * The real-Keystone cases are in test/openstack/keystone-auth.test.ts.
 */
import { ApiError } from '../src/api/errors';
import { keystoneAuthenticator, type KeystoneAuthOptions, type ValidatedToken } from '../src/api/keystone-auth';

const HOUR = 3_600_000;

function fakeKeystone(tokens: Record<string, Partial<ValidatedToken>>) {
  const calls: string[] = [];
  return {
    calls,
    validator: {
      validateToken(token: string): Promise<ValidatedToken> {
        calls.push(token);
        const known = tokens[token];
        if (!known) return Promise.reject(Object.assign(new Error('404 Not Found: The resource could not be found.'), { status: 404 }));
        return Promise.resolve({ projectId: 'p', userId: 'u', roles: ['member'], expiresAt: new Date(Date.now() + HOUR), ...known });
      },
    },
  };
}

async function refusal(promise: Promise<unknown>): Promise<{ status: number; message: string }> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApiError);
  return { status: (err as ApiError).status, message: (err as ApiError).message };
}

describe('Keystone authentication (fake validator)', () => {
  const headers = (token: string) => ({ 'x-auth-token': token });

  it("makes a global admin only of the admin role in the admin project (by name and domain, or the configured id), never another project's admin", async () => {
    const keystone = fakeKeystone({
      cloudAdmin: { projectId: 'id-admin', projectName: 'admin', projectDomainId: 'default', roles: ['admin'] },
      projectAdmin: { projectId: 'id-a', projectName: 'project-a', projectDomainId: 'default', roles: ['admin', 'member'] },
      otherDomain: { projectId: 'id-x', projectName: 'admin', projectDomainId: 'elsewhere', roles: ['admin'] },
      notAdminProject: { projectId: 'id-admin', projectName: 'admin', projectDomainId: 'default', roles: ['admin'], isAdminProject: false },
      memberOfAdmin: { projectId: 'id-admin', projectName: 'admin', projectDomainId: 'default', roles: ['member'] },
    });
    const byName = keystoneAuthenticator(keystone.validator);
    const isAdmin = async (auth: typeof byName, token: string) => (await auth.authenticate(headers(token))).isAdmin;
    expect(await isAdmin(byName, 'cloudAdmin')).toBe(true);
    expect(await isAdmin(byName, 'projectAdmin')).toBe(false);
    expect(await isAdmin(byName, 'otherDomain')).toBe(false);
    expect(await isAdmin(byName, 'notAdminProject')).toBe(false);
    expect(await isAdmin(byName, 'memberOfAdmin')).toBe(false);
    expect((await byName.authenticate(headers('projectAdmin'))).roles).toContain('admin'); // the role stays: it is just not global

    const byId = keystoneAuthenticator(keystone.validator, { adminProject: { id: 'id-a' } });
    expect(await isAdmin(byId, 'projectAdmin')).toBe(true);
    expect(await isAdmin(byId, 'cloudAdmin')).toBe(false);
  });

  it('caches a refused token for a few seconds: 50 calls with one bogus token cost Keystone one validation', async () => {
    let now = 1_000_000;
    const keystone = fakeKeystone({});
    const auth = keystoneAuthenticator(keystone.validator, { negativeCacheMs: 5_000, now: () => now });
    const answers = await Promise.all(Array.from({ length: 50 }, () => refusal(auth.authenticate(headers('bogus')))));
    for (const answer of answers) expect(answer).toEqual({ status: 401, message: 'The request you have made requires authentication: the token is invalid or has expired' });
    await refusal(auth.authenticate(headers('bogus')));
    expect(keystone.calls).toEqual(['bogus']);
    now += 5_001;
    await refusal(auth.authenticate(headers('bogus')));
    expect(keystone.calls).toEqual(['bogus', 'bogus']);
  });

  it('reuses a validation for at most 5 minutes, whatever the setting', async () => {
    let now = 1_000_000;
    const keystone = fakeKeystone({ good: { expiresAt: new Date(now + 10 * HOUR) } });
    const auth = keystoneAuthenticator(keystone.validator, { cacheMs: HOUR, now: () => now });
    await auth.authenticate(headers('good'));
    now += 299_000;
    await auth.authenticate(headers('good'));
    expect(keystone.calls).toHaveLength(1);
    now += 2_000;
    await auth.authenticate(headers('good'));
    expect(keystone.calls).toHaveLength(2);
  });

  it('answers 503 without Keystone internals when Keystone fails, and within the timeout when it hangs', async () => {
    const warnings: object[] = [];
    const failing = keystoneAuthenticator(
      { validateToken: () => Promise.reject(Object.assign(new Error('500 Internal Server Error: (psycopg2.OperationalError) postgresql://keystone:s3cret@db/keystone'), { status: 500 })) },
      { log: { warn: (obj) => warnings.push(obj) } } satisfies KeystoneAuthOptions,
    );
    expect(await refusal(failing.authenticate(headers('t')))).toEqual({ status: 503, message: 'Keystone is unavailable: try again shortly' });
    expect(JSON.stringify(warnings.map((w) => String((w as { err: Error }).err.message)))).toContain('s3cret'); // the log has the detail

    const hung = keystoneAuthenticator({ validateToken: () => new Promise<never>(() => undefined) }, { timeoutMs: 50 });
    expect(await refusal(hung.authenticate(headers('t')))).toEqual({ status: 503, message: 'Keystone is unavailable: try again shortly' });
  });
});
