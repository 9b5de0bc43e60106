/**
 * Offer holds end by themselves (issue 41): a hold of a few seconds (a setting no environment
 * variable gives) blocks another project until its workflow's timer fires, then frees the host;
 * with no worker at the expiry, the next booking frees it anyway; an accept after the expiry is
 * checked again, as a create. Holds its workflow placed (instance slots, a floating IP) end the
 * same way. Waits follow the hold workflow's history, never the clock, except in the test with no
 * worker: it waits out the API's wait for a workflow (the 503 it tests), shortened on a stack of its own.
 */
import { randomUUID } from 'node:crypto';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { placedHoldId } from '../src/api/offer-holds';
import { hostReservation as anyHost } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, untilTimersFiredOf, untilWaitingOnTimerOf, useTestStack } from '../dev-stack/stack';
import { offerHoldWorkflowId } from '../workflows/offer-hold/messages';

/** Long enough for the test's next request or two to come before it on a loaded machine. */
const HOLD_MS = 8_000;
/** How long the API waits for a workflow (LK_API_WORKFLOW_TIMEOUT_MS): holds placed by their workflow answer within it on a loaded machine. */
const API_WAIT_MS = 10_000;
/**
 * The API's wait on the stack with no worker, which the 503 test waits out: long enough for the
 * hold's workflow to start (a call to the Temporal server, well under a second), far shorter than
 * a worker's placement may need. A setting of the test's stack alone (no environment variable).
 */
const NO_WORKER_API_WAIT_MS = 3_000;
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
/** The one host whole-host leases may take (the instance slots' host is another). */
const hostReservation = () => anyHost({ resource_properties: JSON.stringify(['==', '$role', 'whole']) });
const NETWORK = '66666666-6666-4666-8666-666666666666';

/** The stack for a block of this file's tests (the API waiting `apiWaitMs` for a workflow), with two projects and the tests' steps. */
function useExpiryStack(apiWaitMs: number, noWorker = false) {
  const stack = useTestStack({
    withPool: (pool) => [
      physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }),
      virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }),
      floatingIpPlugin({ pool, cloud: 'calendar-only' }),
    ],
    config: (config) => ({ ...config, offerHolds: { ...config.offerHolds, holdMs: HOLD_MS }, api: { ...config.api, workflowTimeoutMs: apiWaitMs } }),
    noWorker,
  });
  const project = (id: string) => apiClient(() => stack().url, { 'X-Project-Id': id, 'X-Roles': 'member' });

  beforeAll(async () => {
    const { pool } = stack().db;
    await insertHost(pool, { name: 'expiry-host-1', capabilities: { role: 'whole' } });
    // Two 8-vCPU slots, and one address.
    await insertHost(pool, { name: 'expiry-slots-1', capabilities: { role: 'slots' } });
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: randomUUID(), name: 'expiry-slots-1', host: 'expiry-slots-1', capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] }]);
    await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address: '198.51.100.30' });
  });

  async function exactOffer(call: ReturnType<typeof project>, day: string, reservation: Record<string, unknown> = hostReservation()): Promise<{ id: string }> {
    const res = await call('POST', '/v1/offers', { reservations: [reservation], duration: 120, start_after: `${day} 10:00`, limit: 1 });
    expect(res.status).toBe(200);
    expect(res.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00` });
    return res.body.offers[0];
  }
  async function hold(call: ReturnType<typeof project>, offerId: string): Promise<string> {
    const res = await call('POST', `/v1/offers/${offerId}/hold`, {});
    expect(res.status).toBe(201);
    return res.body.hold.id;
  }
  const createOver = (call: ReturnType<typeof project>, day: string, name: string, reservation: Record<string, unknown> = hostReservation()) =>
    call('POST', '/v1/leases', { name, start_date: `${day} 10:00`, end_date: `${day} 12:00`, reservations: [reservation] });
  /** Once the hold's workflow has set its timer and the timer has fired (its history says so, not the clock). */
  async function untilExpired(holdId: string): Promise<void> {
    await untilWaitingOnTimerOf(stack(), offerHoldWorkflowId(holdId));
    await untilTimersFiredOf(stack(), offerHoldWorkflowId(holdId));
  }
  const holdState = async (id: string) => (await stack().db.pool.query<{ state: string; end_reason: string | null }>('SELECT state, end_reason FROM offer_holds WHERE id = $1', [id])).rows[0];
  return { stack, alpha: project('alpha'), beta: project('beta'), exactOffer, hold, createOver, untilExpired, holdState };
}

describe('offer hold expiry', () => {
  const { stack, alpha, beta, exactOffer, hold, createOver, untilExpired, holdState } = useExpiryStack(API_WAIT_MS);

  it('blocks another project until its timer fires, then ends by itself and frees the host', async () => {
    const day = dayAhead(40);
    const holdId = await hold(alpha, (await exactOffer(alpha, day)).id);
    expect((await createOver(beta, day, 'beta-blocked')).status).toBe(409);
    await untilExpired(holdId);
    expect(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result()).toBe('expired');
    expect(await holdState(holdId)).toEqual({ state: 'ended', end_reason: 'expired' });
    const created = await createOver(beta, day, 'beta-after-expiry');
    expect(created.status).toBe(201);
    expect((await beta('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  });

  it('ends a hold its workflow placed (instance slots and a floating IP) when its timer fires, freeing what it booked', async () => {
    const day = dayAhead(45);
    const slots = { resource_type: 'virtual:instance', vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 2, resource_properties: '' };
    const address = { resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1 };
    const res = await alpha('POST', '/v1/offers', { reservations: [slots, address], duration: 120, start_after: `${day} 10:00`, limit: 1 });
    expect(res.body.offers[0]).toMatchObject({ kind: 'exact', start_date: `${day} 10:00` });
    const holdId = await hold(alpha, res.body.offers[0].id);
    for (const reservation of [slots, address]) {
      const blocked = await createOver(beta, day, 'beta-blocked', reservation);
      expect(blocked.status).toBe(409);
      expect(blocked.body.reason).toBe('capacity');
    }
    await untilExpired(holdId);
    expect(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result()).toBe('expired');
    expect(await holdState(holdId)).toEqual({ state: 'ended', end_reason: 'expired' });
    for (const reservation of [slots, address]) {
      const created = await createOver(beta, day, `beta-after-expiry-${reservation.resource_type}`, reservation);
      expect(created.status).toBe(201);
      expect((await beta('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
    }
  });

  it('frees the host at the expiry with no worker running: the next booking ends the hold', async () => {
    const day = dayAhead(41);
    const holdId = await hold(alpha, (await exactOffer(alpha, day)).id);
    const workflowId = offerHoldWorkflowId(holdId);
    await untilWaitingOnTimerOf(stack(), workflowId);
    await stack().stopWorker();
    try {
      await untilTimersFiredOf(stack(), workflowId);
      expect(await holdState(holdId)).toEqual({ state: 'held', end_reason: null });
      const created = await createOver(beta, day, 'beta-no-worker');
      expect(created.status).toBe(201);
      expect(await holdState(holdId)).toEqual({ state: 'ended', end_reason: 'expired' });
    } finally {
      await stack().startWorker();
    }
    // The workflow's own end finds the hold ended: nothing to free.
    expect(await stack().temporal.client.workflow.getHandle(workflowId).result()).toBe('expired');
    expect(await holdState(holdId)).toEqual({ state: 'ended', end_reason: 'expired' });
  });

  it('releases a hold with no worker running (in the database); the workflow, told, ends without freeing anything twice', async () => {
    const day = dayAhead(44);
    const offer = await exactOffer(alpha, day);
    const holdId = await hold(alpha, offer.id);
    await untilWaitingOnTimerOf(stack(), offerHoldWorkflowId(holdId));
    await stack().stopWorker();
    try {
      expect((await alpha('DELETE', `/v1/offers/${offer.id}/hold`)).status).toBe(204);
      expect(await holdState(holdId)).toEqual({ state: 'ended', end_reason: 'released' });
      const created = await createOver(beta, day, 'beta-after-release');
      expect(created.status).toBe(201);
    } finally {
      await stack().startWorker();
    }
    expect(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result()).toBe('ended');
  });

  it('checks an accept after the expiry again: 201 with a new booking while free, 409 with offers once another project took the host', async () => {
    const day = dayAhead(42);
    const offer = await exactOffer(alpha, day);
    const holdId = await hold(alpha, offer.id);
    await untilExpired(holdId);
    const accepted = await alpha('POST', `/v1/offers/${offer.id}/accept`, { name: 'alpha-after-expiry' });
    expect(accepted.status).toBe(201);
    expect(accepted.body.lease.id).not.toBe(holdId);
    expect((await alpha('DELETE', `/v1/leases/${accepted.body.lease.id}`)).status).toBe(204);

    const later = dayAhead(43);
    const mine = await exactOffer(alpha, later);
    const mineHold = await hold(alpha, mine.id);
    await untilExpired(mineHold);
    const taken = await createOver(beta, later, 'beta-took-it');
    expect(taken.status).toBe(201);
    const refused = await alpha('POST', `/v1/offers/${mine.id}/accept`, { name: 'alpha-too-late' });
    expect(refused.status).toBe(409);
    expect(refused.body.reason).toBe('capacity');
    expect(refused.body.offers.length).toBeGreaterThan(0);
    expect(await holdState(mineHold)).toEqual({ state: 'ended', end_reason: 'expired' });
  });
});

describe('an offer hold no worker places', () => {
  const { stack, alpha, beta, exactOffer, createOver, holdState } = useExpiryStack(NO_WORKER_API_WAIT_MS, true);

  it('answers 503 when no worker places a hold in time; the hold never holds, and its workflow, back, books nothing', async () => {
    const day = dayAhead(47);
    const address = { resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1 };
    const offer = await exactOffer(alpha, day, address);
    const holdId = placedHoldId(offer.id);
    const res = await alpha('POST', `/v1/offers/${offer.id}/hold`, {});
    expect(res.status).toBe(503);
    expect((await alpha('GET', `/v1/offers/${offer.id}/hold`)).status).toBe(404);
    await stack().startWorker();
    // Back, the workflow finds its caller gone: it refuses the placement before booking ('refused': the
    // API told it, or its deadline passed), or the placement never reached it ('not-placed': the update
    // was lost with the caller's call). Either way nothing was held.
    expect(['refused', 'not-placed']).toContain(await stack().temporal.client.workflow.getHandle(offerHoldWorkflowId(holdId)).result());
    expect(await holdState(holdId)).toBeUndefined();
    const rows = await stack().db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM floating_ip_allocations WHERE lease_id = $1', [holdId]);
    expect(rows.rows[0].n).toBe(0);
    const created = await createOver(beta, day, 'beta-after-503', address);
    expect(created.status).toBe(201);
    expect((await beta('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  });
});
