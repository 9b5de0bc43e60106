/**
 * Offer holds of types whose reserve runs in the worker (issue 41): instance slots and floating IPs
 * (calendar-only here) are held by the hold's workflow, with the answers of a hold of hosts: the
 * hold blocks another project, a release frees it, an accept makes it the lease with the hold's id
 * and its bookings as they are, and of many projects holding the last address at once one gets it.
 */
import { randomUUID } from 'node:crypto';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startedLeaseWorkflow, useTestStack } from '../dev-stack/stack';
import { offerHoldWorkflowId } from '../workflows/offer-hold/messages';

const NETWORK = '55555555-5555-4555-8555-555555555555';
/** Whole days ahead (UTC), within the default usage policy's advance booking. */
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
/** Two 8-vCPU slots in all (one host of 16). */
const slots = (amount: number) => ({ resource_type: 'virtual:instance', vcpus: 8, memory_mb: 1024, disk_gb: 10, amount, resource_properties: '' });
/** One address in all. */
const address = { resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1 };

describe('offer holds placed by their workflow', () => {
  const stack = useTestStack({
    withPool: (pool) => [virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }), floatingIpPlugin({ pool, cloud: 'calendar-only' })],
  });
  const project = (id: string) => apiClient(() => stack().url, { 'X-Project-Id': id, 'X-Roles': 'member' });
  const alpha = project('alpha');
  const beta = project('beta');

  beforeAll(async () => {
    const { pool } = stack().db;
    await insertHost(pool, { name: 'placed-host-1' });
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: randomUUID(), name: 'placed-host-1', host: 'placed-host-1', capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] }]);
    await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address: '198.51.100.20' });
  });

  async function exactOffer(call: ReturnType<typeof project>, day: string, reservation: Record<string, unknown>): Promise<{ id: string }> {
    const res = await call('POST', '/v1/offers', { reservations: [reservation], duration: 120, start_after: `${day} 10:00`, limit: 1 });
    expect(res.status).toBe(200);
    expect(res.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00`, end_date: `${day} 12:00` });
    return res.body.offers[0];
  }
  const createOver = (call: ReturnType<typeof project>, day: string, name: string, reservation: Record<string, unknown>) =>
    call('POST', '/v1/leases', { name, start_date: `${day} 10:00`, end_date: `${day} 12:00`, reservations: [reservation] });
  const rowsOf = async (leaseId: string) => {
    const { rows } = await stack().db.pool.query<{ id: string }>(
      `SELECT 'q' || id FROM quantity_allocations WHERE lease_id = $1 UNION ALL SELECT 'f' || id FROM floating_ip_allocations WHERE lease_id = $1 ORDER BY 1`,
      [leaseId],
    );
    return rows.map((r) => Object.values(r)[0]);
  };

  it.each([
    ['instance slots', 50, slots(2), slots(1)],
    ['a floating IP', 51, address, address],
  ])('holds %s against other projects until released', async (_what, days, held, other) => {
    const day = dayAhead(days);
    const offer = await exactOffer(alpha, day, held);
    const hold = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(hold.status).toBe(201);
    expect(hold.body.hold).toMatchObject({ offer_id: offer.id, status: 'held', start_date: `${day} 10:00`, end_date: `${day} 12:00`, reservations: [{ resource_type: held.resource_type }] });
    const holdId: string = hold.body.hold.id;
    expect((await rowsOf(holdId)).length).toBeGreaterThan(0);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).body.hold).toMatchObject({ id: holdId, status: 'held' });
    // The same hold asked again answers it.
    const again = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(again.status).toBe(200);
    expect(again.body.hold.id).toBe(holdId);

    const refused = await createOver(beta, day, 'beta-blocked', other);
    expect(refused.status).toBe(409);
    expect(refused.body.reason).toBe('capacity');
    expect(refused.body.offers.length).toBeGreaterThan(0);
    expect(JSON.stringify(refused.body)).not.toContain(holdId);
    expect((await alpha('GET', '/v1/leases')).body.leases).toEqual([]);

    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
    expect(await rowsOf(holdId)).toEqual([]);
    // The workflow, told, ends the hold (its end hooks find nothing left).
    expect(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result()).toBe('ended');
    const created = await createOver(beta, day, 'beta-after-release', other);
    expect(created.status).toBe(201);
    expect((await beta('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  });

  it.each([
    ['instance slots', 52, slots(2)],
    ['a floating IP', 53, address],
  ])('accepts a held offer of %s as the lease with the hold\'s id and bookings', async (_what, days, held) => {
    const day = dayAhead(days);
    const offer = await exactOffer(alpha, day, held);
    const hold = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(hold.status).toBe(201);
    const holdId: string = hold.body.hold.id;
    const rowsHeld = await rowsOf(holdId);
    expect(rowsHeld.length).toBeGreaterThan(0);

    const accepted = await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: `accepted-${days}` });
    expect(accepted.status).toBe(201);
    expect(accepted.body.lease).toMatchObject({ id: holdId, name: `accepted-${days}`, project_id: 'alpha', status: 'PENDING' });
    await startedLeaseWorkflow(stack(), holdId);
    // The hold's workflow leaves the lease's bookings alone; the lease owns the same rows (not booked again).
    expect(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result()).toBe('ended');
    expect(await rowsOf(holdId)).toEqual(rowsHeld);
    expect((await alpha('GET', `/v1/leases/${holdId}`)).body.lease).toMatchObject({ id: holdId, status: 'PENDING' });
    expect((await alpha('DELETE', `/v1/leases/${holdId}`)).status).toBe(204);
  });

  it('answers concurrent holds of one offer by its project with one hold (one placement)', async () => {
    const offer = await exactOffer(alpha, dayAhead(55), address);
    const answers = await Promise.all(Array.from({ length: 5 }, () => alpha('POST', `/v1/offers/${offer.id}/hold`, {})));
    expect(answers.every((a) => a.status === 201 || a.status === 200)).toBe(true);
    expect(new Set(answers.map((a) => a.body.hold.id)).size).toBe(1);
    expect((await stack().db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM offer_holds WHERE offer_id = $1', [offer.id])).rows[0].n).toBe(1);
    expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
  });

  it('caps the holds a project has at once (max_offer_holds): 403 with no offers, and what the refused hold booked is freed', async () => {
    const admin = apiClient(() => stack().url);
    expect((await admin('PUT', '/v1/projects/capped/policy', { max_offer_holds: 1 })).status).toBe(200);
    const capped = project('capped');
    const first = await exactOffer(capped, dayAhead(56), address);
    const second = await exactOffer(capped, dayAhead(57), address);
    expect((await capped('POST', `/v1/offers/${first.id}/hold`, {})).status).toBe(201);
    const refused = await capped('POST', `/v1/offers/${second.id}/hold`, {});
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'max_offer_holds', reason: 'policy:max_offer_holds', offers: [] });
    const booked = await stack().db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM floating_ip_allocations WHERE project_id = 'capped'");
    expect(booked.rows[0].n).toBe(1);
    expect((await capped('DELETE', `/v1/offers/${first.id}/hold`)).status).toBe(204);
    expect((await admin('DELETE', '/v1/projects/capped/policy')).status).toBe(204);
  });

  it('gives the last floating IP to exactly one of 10 projects holding it at once; the others get 409 with offers and keep nothing', async () => {
    const day = dayAhead(54);
    const racers = Array.from({ length: 10 }, (_, i) => project(`fip-racer-${i}`));
    const offers: Array<{ id: string }> = [];
    for (const call of racers) offers.push(await exactOffer(call, day, address));
    const answers = await Promise.all(racers.map((call, i) => call('POST', `/v1/offers/${offers[i].id}/hold`, {})));
    const won = answers.filter((a) => a.status === 201);
    expect(won.length).toBe(1);
    for (const loss of answers.filter((a) => a.status !== 201)) {
      expect(loss.status).toBe(409);
      expect(loss.body.reason).toBe('capacity');
      expect(loss.body.offers.length).toBeGreaterThan(0);
      for (const o of loss.body.offers) expect(o.start_date >= `${day} 12:00` || o.end_date <= `${day} 10:00`).toBe(true);
    }
    const { pool } = stack().db;
    expect((await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM offer_holds WHERE state = 'held' AND project_id LIKE 'fip-racer-%'")).rows[0].n).toBe(1);
    expect((await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM floating_ip_allocations WHERE project_id LIKE 'fip-racer-%'")).rows[0].n).toBe(1);
    const winner = racers[answers.indexOf(won[0])];
    expect((await winner('DELETE', `/v1/offers/${won[0].body.hold.offer_id}/hold`)).status).toBe(204);
  });
});
