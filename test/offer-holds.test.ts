/**
 * Offer holds and accepts through the API (issue 41): a hold books the offer's host for its project
 * (another project's create is refused, and sees no one's name), a release frees it, an accept
 * makes the held booking the lease as it is, an accept without a hold is a create, concurrent holds
 * of the last host give one hold, and the max_offer_holds cap.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, pendingTimers, startedLeaseWorkflow, untilWaitingOnTimerOf, useTestStack, workflowHistoryEvents } from '../dev-stack/stack';
import { offerHoldWorkflowId } from '../workflows/offer-hold/messages';

/** Whole days ahead (UTC), within the default usage policy's advance booking. */
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);

describe('offer holds', () => {
  const stack = useTestStack({
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  });
  const admin = apiClient(() => stack().url);
  const project = (id: string) => apiClient(() => stack().url, { 'X-Project-Id': id, 'X-Roles': 'member' });
  const alpha = project('alpha');
  const beta = project('beta');

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'hold-host-1' });
  });

  /** The `exact` offer for the one host over `day` 10:00–12:00. */
  async function exactOffer(call: ReturnType<typeof project>, day: string): Promise<{ id: string }> {
    const res = await call('POST', '/v1/offers', { reservations: [hostReservation()], duration: 120, start_after: `${day} 10:00`, limit: 1 });
    expect(res.status).toBe(200);
    expect(res.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00`, end_date: `${day} 12:00` });
    return res.body.offers[0];
  }
  const createOver = (call: ReturnType<typeof project>, day: string, name: string) =>
    call('POST', '/v1/leases', { name, start_date: `${day} 10:00`, end_date: `${day} 12:00`, reservations: [hostReservation()] });
  const hostRows = async (leaseId: string) => (await stack().db.pool.query<{ id: string }>('SELECT id::text FROM host_allocations WHERE lease_id = $1 ORDER BY id', [leaseId])).rows.map((r) => r.id);

  it("holds an offer's host against other projects, hidden from their lists, until released", async () => {
    const day = dayAhead(20);
    const offer = await exactOffer(alpha, day);
    const held = await alpha('POST', `/v1/offers/${offer.id}/hold`, { minutes: 5 });
    expect(held.status).toBe(201);
    expect(held.body.hold).toMatchObject({ offer_id: offer.id, status: 'held', start_date: `${day} 10:00`, end_date: `${day} 12:00`, reservations: [{ resource_type: 'physical:host', hosts: 1 }] });
    expect(Date.parse(held.body.hold.expires_at) - Date.now()).toBeLessThanOrEqual(5 * 60_000);
    expect((await hostRows(held.body.hold.id)).length).toBe(1);

    const refused = await createOver(beta, day, 'beta-blocked');
    expect(refused.status).toBe(409);
    expect(refused.body.reason).toBe('capacity');
    expect(refused.body.offers.length).toBeGreaterThan(0);
    expect(JSON.stringify(refused.body)).not.toContain(held.body.hold.id);
    // Another project's offer and hold do not exist for beta; nobody lists a lease.
    expect((await beta('POST', `/v1/offers/${offer.id}/hold`, {})).status).toBe(404);
    expect((await beta('GET', `/v1/offers/${offer.id}/hold`)).status).toBe(404);
    expect((await alpha('GET', '/v1/leases')).body.leases).toEqual([]);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).body.hold).toMatchObject({ id: held.body.hold.id, status: 'held' });
    // The calendar shows the host taken to everyone, and whose only to the holder.
    const window = `start=${encodeURIComponent(`${day} 00:00`)}&end=${encodeURIComponent(`${day} 23:00`)}`;
    const betaSees = (await beta('GET', `/v1/calendar?${window}`)).body.bookings;
    expect(betaSees).toHaveLength(1);
    expect(Object.keys(betaSees[0]).sort()).toEqual(['end_ms', 'host_id', 'reserved', 'start_ms']);
    expect((await alpha('GET', `/v1/calendar?${window}`)).body.bookings).toEqual([expect.objectContaining({ lease_id: held.body.hold.id, mine: true, held: true, hold_id: held.body.hold.id, expires_at_ms: Date.parse(held.body.hold.expires_at) })]);

    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
    expect(await hostRows(held.body.hold.id)).toEqual([]);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).body.hold).toMatchObject({ status: 'ended', end_reason: 'released' });
    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
    const created = await createOver(beta, day, 'beta-after-release');
    expect(created.status).toBe(201);
    // An offer is held once: after its hold ended, accept it (re-checked) or ask again.
    const again = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(again.status).toBe(409);
    expect(again.body.error_message).toContain('held already');
    expect((await beta('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  });

  it('accepts a held offer as the lease with the hold\'s id and bookings; a retried accept answers the same lease', async () => {
    const day = dayAhead(21);
    const offer = await exactOffer(alpha, day);
    const held = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(held.status).toBe(201);
    const rowsHeld = await hostRows(held.body.hold.id);
    expect(rowsHeld.length).toBe(1);

    const accepted = await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: 'alpha-accepted' });
    expect(accepted.status).toBe(201);
    expect(accepted.body.lease).toMatchObject({ id: held.body.hold.id, name: 'alpha-accepted', project_id: 'alpha', status: 'PENDING' });
    // The same rows (no new search, no new booking).
    expect(await hostRows(held.body.hold.id)).toEqual(rowsHeld);
    await startedLeaseWorkflow(stack(), held.body.hold.id);
    const retried = await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: 'alpha-accepted' });
    expect(retried.status).toBe(201);
    expect(retried.body.lease.id).toBe(held.body.hold.id);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).body.hold).toMatchObject({ status: 'accepted', lease_id: held.body.hold.id });
    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(409);
    expect((await alpha('GET', '/v1/leases')).body.leases.map((l: { id: string }) => l.id)).toEqual([held.body.hold.id]);
    expect((await alpha('DELETE', `/v1/leases/${held.body.hold.id}`)).status).toBe(204);
  });

  it('accepts an offer not held as a create: 201 while free, 409 with fresh offers once taken', async () => {
    const day = dayAhead(22);
    const offer = await exactOffer(alpha, day);
    const taken = await exactOffer(alpha, day);
    const accepted = await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: 'alpha-direct' });
    expect(accepted.status).toBe(201);
    expect(accepted.body.lease).toMatchObject({ name: 'alpha-direct', start_date: expect.stringContaining(`${day}T10:00`) });
    const refused = await alpha('POST', `/v1/offers/${taken.id}/accept`, { name: 'alpha-late' });
    expect(refused.status).toBe(409);
    expect(refused.body.reason).toBe('capacity');
    expect(refused.body.offers.length).toBeGreaterThan(0);
    expect((await alpha('DELETE', `/v1/leases/${accepted.body.lease.id}`)).status).toBe(204);
  });

  it("sets the hold workflow's timer for the hold's expiry: the asked minutes, or LK_OFFER_HOLD_MINUTES by default", async () => {
    const day = dayAhead(28);
    for (const [body, minutes] of [[{ minutes: 2 }, 2], [{}, stack().config.offerHolds.holdMs / 60_000]] as const) {
      const offer = await exactOffer(alpha, day);
      const before = Date.now();
      const held = await alpha('POST', `/v1/offers/${offer.id}/hold`, body);
      const after = Date.now();
      expect(held.status).toBe(201);
      const expiresAt = Date.parse(held.body.hold.expires_at);
      expect(expiresAt).toBeGreaterThanOrEqual(before + minutes * 60_000);
      expect(expiresAt).toBeLessThanOrEqual(after + minutes * 60_000);
      const workflowId = offerHoldWorkflowId(held.body.hold.id);
      await untilWaitingOnTimerOf(stack(), workflowId);
      const [timer] = pendingTimers(await workflowHistoryEvents(stack(), workflowId));
      // The history gives whole seconds.
      expect(Math.abs(timer.firesAt - expiresAt)).toBeLessThanOrEqual(2_000);
      expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
    }
  });

  it('refuses bad input with Blazar\'s error body', async () => {
    const day = dayAhead(23);
    const offer = await exactOffer(alpha, day);
    for (const minutes of [0, 61, 1.5, 'ten']) {
      const res = await alpha('POST', `/v1/offers/${offer.id}/hold`, { minutes });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error_code: 400, error_message: expect.stringContaining('minute') });
    }
    expect((await alpha('POST', `/v1/offers/${offer.id}/hold`, { other: 1 })).status).toBe(400);
    expect((await alpha('POST', '/v1/offers/not-a-uuid/hold', {})).status).toBe(404);
    expect((await alpha('POST', '/v1/offers/00000000-0000-4000-8000-000000000000/accept', { name: 'x' })).status).toBe(404);
    expect((await alpha('POST', `/v1/offers/${offer.id}/accept`, {})).status).toBe(400);
    expect((await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: 'x', start_date: 'now' })).status).toBe(400);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).status).toBe(404);
  });

  it('gives the last host to exactly one of 50 projects holding it at once; the others get 409 with offers', async () => {
    const day = dayAhead(24);
    const projects = Array.from({ length: 50 }, (_, i) => project(`racer-${i}`));
    const offers: Array<{ id: string }> = [];
    for (const call of projects) offers.push(await exactOffer(call, day));
    const answers = await Promise.all(projects.map((call, i) => call('POST', `/v1/offers/${offers[i].id}/hold`, {})));
    const won = answers.filter((a) => a.status === 201);
    const lost = answers.filter((a) => a.status !== 201);
    expect(won.length).toBe(1);
    expect(lost.length).toBe(49);
    for (const loss of lost) {
      expect(loss.status).toBe(409);
      expect(loss.body.reason).toBe('capacity');
      expect(loss.body.offers.length).toBeGreaterThan(0);
      for (const o of loss.body.offers) expect(o.start_date >= `${day} 12:00` || o.end_date <= `${day} 10:00`).toBe(true);
    }
    const { rows } = await stack().db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM offer_holds WHERE state = 'held' AND project_id LIKE 'racer-%'");
    expect(rows[0].n).toBe(1);
    const booked = await stack().db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM host_allocations WHERE project_id LIKE 'racer-%'");
    expect(booked.rows[0].n).toBe(1);
    expect((await projects[answers.indexOf(won[0])]('DELETE', `/v1/offers/${won[0].body.hold.offer_id}/hold`)).status).toBe(204);
  });

  it('answers concurrent holds of one offer by its project with one hold', async () => {
    const day = dayAhead(25);
    const offer = await exactOffer(alpha, day);
    const answers = await Promise.all(Array.from({ length: 5 }, () => alpha('POST', `/v1/offers/${offer.id}/hold`, {})));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 201]);
    expect(new Set(answers.map((a) => a.body.hold.id)).size).toBe(1);
    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
  });

  it('caps the holds a project has at once (max_offer_holds), with no offers on that refusal', async () => {
    expect((await admin('PUT', '/v1/projects/capped/policy', { max_offer_holds: 1 })).status).toBe(200);
    const capped = project('capped');
    const first = await exactOffer(capped, dayAhead(26));
    const second = await exactOffer(capped, dayAhead(27));
    expect((await capped('POST', `/v1/offers/${first.id}/hold`, {})).status).toBe(201);
    const refused = await capped('POST', `/v1/offers/${second.id}/hold`, {});
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'max_offer_holds', reason: 'policy:max_offer_holds', offers: [] });
    expect((await capped('DELETE', `/v1/offers/${first.id}/hold`)).status).toBe(204);
    expect((await capped('POST', `/v1/offers/${second.id}/hold`, {})).status).toBe(201);
    expect((await capped('DELETE', `/v1/offers/${second.id}/hold`)).status).toBe(204);
    expect((await admin('DELETE', '/v1/projects/capped/policy')).status).toBe(204);
  });
});
