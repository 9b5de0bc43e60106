/**
 * Offer holds while Blazar's external filter is configured (issue 41): the hold's workflow asks the
 * filter as a create does (check-create, outside any lock) before it records the hold; a denial is
 * the create's 403 naming the rule, with nothing booked; an accept asks the filter again.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startedLeaseWorkflow, useTestStack } from '../dev-stack/stack';
import { startWebhookReceiver, type Delivery, type WebhookReceiver } from './support/notice-receiver';

const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const DENIAL = 'Project denied has no credits left for 2 host-hours.';

/** Blazar's external filter as a credit service runs it: denies project `denied`, and leases named deny-*. */
function policyService() {
  return startWebhookReceiver({
    path: '/policy/',
    answer: (res, call) => {
      const lease = (call.body.lease ?? {}) as { name?: string; project_id?: string };
      if (call.path === '/policy/check-create' && (lease.project_id === 'denied' || lease.name?.startsWith('deny-'))) {
        return void res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ message: DENIAL }));
      }
      res.writeHead(204).end();
    },
  });
}

describe('offer holds with an external policy filter', () => {
  let policy: WebhookReceiver;
  beforeAll(async () => {
    policy = await policyService();
  });
  afterAll(async () => {
    await policy.close();
  });
  const stack = useTestStack(() => ({
    env: { LK_POLICY_EXTERNAL_URL: policy.url },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));
  const project = (id: string) => apiClient(() => stack().url, { 'X-Project-Id': id, 'X-Roles': 'member' });
  const allowed = project('allowed');
  const denied = project('denied');

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'filter-host-1' });
  });

  async function exactOffer(call: ReturnType<typeof project>, day: string): Promise<{ id: string }> {
    const res = await call('POST', '/v1/offers', { reservations: [hostReservation()], duration: 120, start_after: `${day} 10:00`, limit: 1 });
    expect(res.status).toBe(200);
    expect(res.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00` });
    return res.body.offers[0];
  }
  const asked = (projectId: string): Delivery[] => policy.requests.filter((d) => d.path === '/policy/check-create' && (d.body.lease as { project_id?: string } | undefined)?.project_id === projectId);
  const count = async (sql: string, projectId: string) => (await stack().db.pool.query<{ n: number }>(sql, [projectId])).rows[0].n;

  it("refuses a hold the filter denies with the create's 403 naming the rule, booking nothing", async () => {
    const offer = await exactOffer(denied, dayAhead(60));
    const refused = await denied('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ error_code: 403, error_message: DENIAL, rule: 'external', reason: 'policy:external' });
    expect(asked('denied').length).toBe(1);
    expect(await count('SELECT count(*)::int AS n FROM host_allocations WHERE project_id = $1', 'denied')).toBe(0);
    expect(await count('SELECT count(*)::int AS n FROM offer_holds WHERE project_id = $1', 'denied')).toBe(0);
    expect((await denied('GET', `/v1/offers/${offer.id}/hold`)).status).toBe(404);
  });

  it('holds an offer the filter allows, and asks it again at the accept (a denial then leaves the hold held)', async () => {
    const offer = await exactOffer(allowed, dayAhead(61));
    const held = await allowed('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(held.status).toBe(201);
    const holdId: string = held.body.hold.id;
    expect(held.body.hold).toMatchObject({ status: 'held', offer_id: offer.id });
    expect(asked('allowed').map((d) => (d.body.lease as { id: string }).id)).toEqual([holdId]);
    expect(await count('SELECT count(*)::int AS n FROM host_allocations WHERE project_id = $1', 'allowed')).toBe(1);

    const refused = await allowed('POST', `/v1/offers/${offer.id}/accept`, { name: 'deny-at-accept' });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'external', error_message: DENIAL });
    expect((await allowed('GET', `/v1/offers/${offer.id}/hold`)).body.hold).toMatchObject({ id: holdId, status: 'held' });

    const accepted = await allowed('POST', `/v1/offers/${offer.id}/accept`, { name: 'credited' });
    expect(accepted.status).toBe(201);
    expect(accepted.body.lease).toMatchObject({ id: holdId, name: 'credited' });
    expect(asked('allowed').map((d) => (d.body.lease as { name: string }).name).slice(1)).toEqual(['deny-at-accept', 'credited']);
    await startedLeaseWorkflow(stack(), holdId);
    expect((await allowed('DELETE', `/v1/leases/${holdId}`)).status).toBe(204);
  });
});
