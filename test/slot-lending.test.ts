/**
 * Lending a running instance lease's idle slots (issue 43), through the API and the real worker
 * (calendar-only: every slot not lent is idle; the Placement side has its rig test,
 * test/openstack/slot-lending.test.ts): POST /v1/leases/{id}/lend and /reclaim on a
 * virtual:instance reservation; a preemptible instance lease of another project borrows only
 * inside the lending, a regular one never; a reclaim cuts the borrower with the preemption warning
 * (told as reclaimed), and the slots come back once it is out; the lease JSON counts the slots and
 * never names the borrower; Blazar's error bodies for what cannot be lent or reclaimed.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { findLease } from '../src/db/leases';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { slotBorrowersOutsideLendings, slotLendingsOverAmounts } from '../dev-stack/fixtures/slot-lendings';
import { startWebhookReceiver, type Delivery, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack, type ApiCall } from '../dev-stack/stack';

/** A lease as the API shows it. */
type LeaseJson = ApiCall['body'];

const WARNING_SECONDS = 60;
const EVICTION_SECONDS = 5;
// Each host takes 2 slots of 4 vCPUs.
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };
const POOLS = ['lend', 'back', 'del', 'bad', 'lost'] as const;

describe('lending an instance lease\'s idle slots', () => {
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver({ path: '/hook' });
  });
  afterAll(async () => {
    await receiver.close();
  });
  const stack = useTestStack(() => ({
    env: {
      LK_WEBHOOK_ALLOW_PRIVATE: 'true', // the projects' receiver is on loopback here
      LK_NOTIFY_BEFORE_END: 'none',
      LK_PREEMPT_WARNING_MINUTES: String(WARNING_SECONDS / 60),
      LK_PREEMPT_EVICTION_SECONDS: String(EVICTION_SECONDS),
    },
    withPool: (pool) => {
      const slots = virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' });
      // While set, a lend's and a reclaim's answer is lost after they acted (their activity fails).
      const losing: typeof slots = {
        ...slots,
        async lend(ctx, request) {
          const lent = await slots.lend!(ctx, request);
          if (loseAnswers) throw ApplicationFailure.nonRetryable('the lend\'s answer was lost', 'LostAnswer');
          return lent;
        },
        async reclaim(ctx, request) {
          const taken = await slots.reclaim!(ctx, request);
          if (loseAnswers) throw ApplicationFailure.nonRetryable('the reclaim\'s answer was lost', 'LostAnswer');
          return taken;
        },
      };
      return [losing];
    },
  }));
  let loseAnswers = false;
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-lender', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-borrower', 'x-user-id': 'bob', 'x-roles': 'member' });
  const slotsIn = (pool: string, fields: Record<string, unknown> = {}) => ({
    resource_type: 'virtual:instance', vcpus: 4, memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'None', resource_properties: JSON.stringify(['==', '$pool', pool]), ...fields,
  });
  const leaseOf = async (id: string, as = asA) => (await as('GET', `/v1/leases/${id}`)).body.lease;
  const noticesOf = (id: string, type: string) => receiver.received.filter((d: Delivery) => d.body.payload.lease_id === id && d.body.event_type === type);
  const endOf = (lease: LeaseJson) => Date.parse(`${String(lease.end_date).slice(0, 19)}Z`);
  const lendingsOf = async (id: string) => (await leaseOf(id)).reservations[0].lendings as Array<Record<string, unknown>>;
  /** The lender's slot lendings in the database: slots, when returned, and the slot-ms borrowed. */
  const lendingRowsOf = async (leaseId: string) =>
    (
      await stack().db.pool.query<{ slots: number; returned_ms: number | null; borrowed_ms: number | null }>(
        `SELECT slots, (extract(epoch FROM returned_at) * 1000)::float8 AS returned_ms, borrowed_ms::float8 AS borrowed_ms FROM quantity_lendings WHERE lease_id = $1 ORDER BY id`,
        [leaseId],
      )
    ).rows;

  /** A lease of `as`'s project starting now, ACTIVE once its workflow started it. */
  async function activeLease(as: typeof asA, name: string, seconds: number, reservation: Record<string, unknown>): Promise<LeaseJson> {
    const made = await as('POST', '/v1/leases', { name, start_date: 'now', end_date: inSeconds(seconds), reservations: [reservation] });
    expect([made.status, made.body.error_message]).toEqual([201, undefined]);
    return eventually(async () => {
      const lease = await leaseOf(made.body.lease.id, as);
      return lease.status === 'ACTIVE' ? lease : undefined;
    });
  }

  beforeAll(async () => {
    const { pool } = stack().db;
    for (const name of POOLS) await insertHost(pool, { name: `slots-${name}`, capabilities: { pool: name } });
    await syncCapacityProviders(pool, COMPUTE_KIND, POOLS.map((name) => ({ uuid: randomUUID(), name: `slots-${name}`, host: `slots-${name}`, capacity: CAPACITY, traits: [] })));
    for (const project of ['project-lender', 'project-borrower']) {
      const as = apiClient(() => stack().url, { 'x-project-id': project, 'x-user-id': 'someone', 'x-roles': 'member' });
      expect((await as('PUT', `/v1/projects/${project}/webhooks`, { webhooks: [{ url: receiver.url }] })).status).toBe(200);
    }
  });

  afterEach(async () => {
    const { pool } = stack().db;
    expect(await doubleBookings(pool)).toEqual([]);
    expect(await slotBorrowersOutsideLendings(pool)).toEqual([]);
    expect(await slotLendingsOverAmounts(pool)).toEqual([]);
  });

  it('lends slots until a time: a preemptible instance lease borrows inside the lending only, a regular one never; a reclaim warns the borrower as reclaimed', async () => {
    const lender = await activeLease(asA, 'slot-lender', 2 * 3600, slotsIn('lend', { amount: 2 }));
    const until = inSeconds(3600);
    const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until });
    expect([lent.status, lent.body.error_message]).toEqual([200, undefined]);
    expect(lent.body.lease.reservations[0].lendings).toEqual([
      { id: expect.any(String), hosts: ['slots-lend'], slots: 1, lent_at: expect.any(String), until: `${until.replace(' ', 'T')}.000000`, state: 'lent', returns_at: null, borrowed: false },
    ]);

    // The host is full for regular asks; a preemptible one past the lending's end does not fit; one inside it does.
    expect((await asB('POST', '/v1/leases', { name: 'regular', start_date: 'now', end_date: inSeconds(1800), reservations: [slotsIn('lend')] })).status).toBe(409);
    expect((await asB('POST', '/v1/leases', { name: 'too-long', start_date: 'now', end_date: inSeconds(5400), reservations: [slotsIn('lend', { preemptible: true })] })).status).toBe(409);
    const borrower = await activeLease(asB, 'slot-borrower', 1800, slotsIn('lend', { preemptible: true }));
    expect(borrower.reservations[0].hosts).toEqual(['slots-lend']);
    // Only one lendable slot is left (the borrower holds the lent one, and it counts for nobody else).
    expect((await asB('POST', '/v1/leases', { name: 'second-borrower', start_date: 'now', end_date: inSeconds(1800), reservations: [slotsIn('lend', { preemptible: true })] })).status).toBe(409);

    // Only the slot not lent yet is idle: 2 cannot be lent.
    const more = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until });
    expect(more).toMatchObject({ status: 409, body: { error_code: 409, error_message: `Only 1 of the 2 instance slots of reservation ${lender.reservations[0].id} can be lent now: the others run servers or are lent already.`, idle: 1 } });
    // Nor can more be reclaimed than is lent.
    expect(await asA('POST', `/v1/leases/${lender.id}/reclaim`, { count: 2 })).toMatchObject({ status: 409, body: { error_message: `Reservation ${lender.reservations[0].id} lends 1 slot(s) now: cannot reclaim 2.` } });

    const askedMs = Date.now();
    const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, {});
    expect([reclaimed.status, reclaimed.body.error_message]).toEqual([200, undefined]);
    const [lending] = reclaimed.body.lease.reservations[0].lendings;
    expect(lending).toMatchObject({ hosts: ['slots-lend'], slots: 1, state: 'reclaiming', borrowed: true });
    const returnsAt = Date.parse(`${lending.returns_at.slice(0, 19)}Z`);
    expect(returnsAt).toBeGreaterThanOrEqual(Math.floor(askedMs / 1000) * 1000 + WARNING_SECONDS * 1000);

    // The borrower is told with the whole warning, as reclaimed; its end moves to the return; nothing names the lender.
    const notice = await eventually(() => Promise.resolve(noticesOf(borrower.id, 'lease.preempting')[0]));
    expect(notice.body.payload).toMatchObject({ reason: expect.stringMatching(/^reclaimed: /), warning_configured_seconds: WARNING_SECONDS, warning_short: false });
    const cut = await eventually(async () => {
      const now = await leaseOf(borrower.id, asB);
      return endOf(now) === returnsAt ? now : undefined;
    });
    expect(cut.status_reason).toMatch(/^reclaimed: /);
    for (const seen of [JSON.stringify(notice.body), JSON.stringify(cut)]) {
      expect(seen).not.toContain('project-lender');
      expect(seen).not.toContain(lender.id);
    }
    const seenByLender = JSON.stringify(await leaseOf(lender.id));
    expect(seenByLender).not.toContain('project-borrower');
    expect(seenByLender).not.toContain(borrower.id);
  });

  it('a reclaim needed now ends the borrower; the slots are reclaiming until it is out, then returned, and can be lent again', async () => {
    const lender = await activeLease(asA, 'slot-lender-back', 2 * 3600, slotsIn('back', { amount: 2 }));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'slot-borrower-back', 1800, slotsIn('back', { preemptible: true }));
    const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: inSeconds(0) });
    expect([reclaimed.status, reclaimed.body.error_message]).toEqual([200, undefined]);
    expect(reclaimed.body.lease.reservations[0].lendings[0]).toMatchObject({ slots: 2, state: 'reclaiming', borrowed: true });
    await eventually(async () => ((await lendingsOf(lender.id))[0].state === 'returned' ? true : undefined));
    const ended = (await findLease(stack().db.pool, borrower.id))!;
    expect(ended.status).toBe('TERMINATED');
    expect(ended.statusReason).toMatch(/^reclaimed: /);
    const [row] = await lendingRowsOf(lender.id);
    expect(row.slots).toBe(2);
    expect(row.returned_ms).toBeGreaterThanOrEqual(ended.events.find((e) => e.event_type === 'end_lease')!.finishedAt!);
    expect(row.borrowed_ms).toBeGreaterThan(0);
    // The lender's usage: the lent slots' vCPU and memory hours, and a credit for the borrowed slot-time at the factor (4 vCPUs a slot).
    const report = (await asA('GET', `/v1/usage?group_by=resource_type&from=${encodeURIComponent(inSeconds(-3600))}&to=${encodeURIComponent(inSeconds(3600))}`)).body.usage;
    const instances = report.groups.find((g: { resource_type: string }) => g.resource_type === 'virtual:instance');
    expect(instances.lent).toEqual({ host_hours: 0, vcpu_hours: expect.any(Number), memory_gb_hours: expect.any(Number), disk_gb_hours: expect.any(Number) });
    expect(instances.lent.vcpu_hours).toBeGreaterThan(0);
    expect(instances.borrowed_credit?.vcpu_hours ?? 0).toBeCloseTo((row.borrowed_ms! * 4 * report.preemptible_charge_factor) / 3_600_000, 3);
    // Back with the lessee: idle again, so lent again.
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until: inSeconds(3600) })).status).toBe(200);
  });

  it('records a slot lend and reclaim whose answers were lost after they acted: the lending as lent, its slots as reclaiming, and they come back', async () => {
    const lender = await activeLease(asA, 'slot-lender-lost', 2 * 3600, slotsIn('lost', { amount: 2 }));
    const { pool } = stack().db;
    loseAnswers = true;
    try {
      const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) });
      expect([lent.status, lent.body.error_message]).toEqual([200, undefined]);
      const [lending] = lent.body.lease.reservations[0].lendings;
      expect(lending).toMatchObject({ hosts: ['slots-lost'], slots: 1, state: 'lent' });
      // What the calendar lent under that lending id, no more.
      expect((await pool.query('SELECT lending_id::text, slots FROM quantity_lendings WHERE lease_id = $1', [lender.id])).rows).toEqual([{ lending_id: lending.id, slots: 1 }]);

      const borrower = await activeLease(asB, 'slot-borrower-lost', 1800, slotsIn('lost', { preemptible: true }));
      const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: inSeconds(0) });
      expect([reclaimed.status, reclaimed.body.error_message]).toEqual([200, undefined]);
      expect(reclaimed.body.lease.reservations[0].lendings).toEqual([expect.objectContaining({ id: lending.id, hosts: ['slots-lost'], slots: 1, state: 'reclaiming', borrowed: true })]);
      // The cut stands: the borrower ends, and the slot comes back to the lender.
      await eventually(async () => ((await leaseOf(borrower.id, asB)).status === 'TERMINATED' ? true : undefined));
      await eventually(async () => ((await lendingsOf(lender.id))[0].state === 'returned' ? true : undefined));
      expect((await lendingRowsOf(lender.id)).map((g) => g.returned_ms !== null)).toEqual([true]);
    } finally {
      loseAnswers = false;
    }
  });

  it('a lender deleted while lending warns its borrower as reclaimed, and the slot is free once the borrower is out', async () => {
    const lender = await activeLease(asA, 'slot-lender-del', 2 * 3600, slotsIn('del', { amount: 2 }));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'slot-borrower-del', 1800, slotsIn('del', { preemptible: true }));
    expect((await asA('DELETE', `/v1/leases/${lender.id}`)).status).toBe(204);
    const notice = await eventually(() => Promise.resolve(noticesOf(borrower.id, 'lease.preempting')[0]));
    expect(notice.body.payload.reason).toMatch(/^reclaimed: /);
    await eventually(async () => ((await leaseOf(borrower.id, asB)).status === 'TERMINATED' ? true : undefined));
    expect((await lendingRowsOf(lender.id)).map((g) => g.returned_ms !== null)).toEqual([true]);
    expect((await asB('POST', '/v1/leases', { name: 'after-del', start_date: 'now', end_date: inSeconds(1800), reservations: [slotsIn('del', { amount: 2 })] })).status).toBe(201);
  });

  it('answers what cannot be lent or reclaimed with Blazar\'s error bodies', async () => {
    const bad = (status: number, message: string | RegExp) => ({ status, body: { error_code: status, error_name: status, error_message: message } });
    const lender = await activeLease(asA, 'slot-lender-bad', 1800, slotsIn('bad', { amount: 2 }));
    expect(await asB('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(1500) })).toEqual(bad(404, `Object with {'lease_id': '${lender.id}'} not found`));
    expect(await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 0, until: inSeconds(1500) })).toMatchObject({ status: 400, body: { error_message: expect.stringMatching(/^count: /) } });
    expect(await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 3, until: inSeconds(1500) })).toMatchObject({ status: 409, body: { idle: 2 } });
    expect(await asA('POST', `/v1/leases/${lender.id}/reclaim`, {})).toEqual(bad(409, `Reservation ${lender.reservations[0].id} lends no slot now: nothing to reclaim.`));
    expect((await asA('DELETE', `/v1/leases/${lender.id}`)).status).toBe(204);
    const preemptible = await activeLease(asA, 'slot-preemptible-bad', 1800, slotsIn('bad', { preemptible: true }));
    expect(await asA('POST', `/v1/leases/${preemptible.id}/reclaim`, { reservation_id: preemptible.reservations[0].id })).toEqual(
      bad(400, `reservation ${preemptible.reservations[0].id} is preemptible: only a regular reservation lends its hosts`),
    );
  });
});

describe('borrowing instance slots right after a lend with a provisioning lead time', () => {
  const LEAD_SECONDS = 600;
  const stack = useTestStack(() => ({
    env: { LK_PROVISIONING_LEAD_TIME_SECONDS: String(LEAD_SECONDS), LK_NOTIFY_BEFORE_END: 'none', LK_PREEMPT_WARNING_MINUTES: '1' },
    withPool: (pool) => [virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' })],
  }));
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-lead-slot-lender', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-lead-slot-borrower', 'x-user-id': 'bob', 'x-roles': 'member' });
  const inLead = (fields: Record<string, unknown> = {}) => ({
    resource_type: 'virtual:instance', vcpus: 4, memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'None', resource_properties: JSON.stringify(['==', '$pool', 'lead']), ...fields,
  });

  afterEach(async () => {
    const { pool } = stack().db;
    expect(await doubleBookings(pool)).toEqual([]);
    expect(await slotBorrowersOutsideLendings(pool)).toEqual([]);
    expect(await slotLendingsOverAmounts(pool)).toEqual([]);
  });

  it('offers and admits a preemptible instance lease starting now, and one starting before its lead is over, inside a lending that began a moment ago', async () => {
    const { pool } = stack().db;
    await insertHost(pool, { name: 'slots-lead', capabilities: { pool: 'lead' } });
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: randomUUID(), name: 'slots-lead', host: 'slots-lead', capacity: CAPACITY, traits: [] }]);
    const made = await asA('POST', '/v1/leases', { name: 'lead-slot-lender', start_date: 'now', end_date: inSeconds(2 * 3600), reservations: [inLead({ amount: 2 })] });
    expect([made.status, made.body.error_message]).toEqual([201, undefined]);
    const lenderId = made.body.lease.id as string;
    await eventually(async () => ((await asA('GET', `/v1/leases/${lenderId}`)).body.lease.status === 'ACTIVE' ? true : undefined));
    expect((await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 2, until: inSeconds(3600) })).status).toBe(200);
    // The offers agree with admission: a preemptible lease fits now, in the lending (not after the lender's end).
    const offered = await asB('POST', '/v1/offers', { start_after: 'now', duration: 30, reservations: [inLead({ preemptible: true })], limit: 1 });
    expect([offered.status, offered.body.error_message]).toEqual([200, undefined]);
    expect(Date.parse(`${String(offered.body.offers[0].start_date).slice(0, 19)}Z`)).toBeLessThan(Date.now() + 120_000);
    const now = await asB('POST', '/v1/leases', { name: 'borrow-slot-now', start_date: 'now', end_date: inSeconds(1800), reservations: [inLead({ preemptible: true })] });
    expect([now.status, now.body.error_message]).toEqual([201, undefined]);
    // Its lead would reach 5 minutes before the lending began: only the part still ahead is blocked.
    const askedMs = Date.now();
    const soon = await asB('POST', '/v1/leases', { name: 'borrow-slot-soon', start_date: inSeconds(LEAD_SECONDS / 2), end_date: inSeconds(1800), reservations: [inLead({ preemptible: true })] });
    expect([soon.status, soon.body.error_message]).toEqual([201, undefined]);
    const { rows } = await pool.query<{ blocks_from_ms: number; start_ms: number }>(
      'SELECT (extract(epoch FROM lower(blocks)) * 1000)::float8 AS blocks_from_ms, (extract(epoch FROM lower(during)) * 1000)::float8 AS start_ms FROM quantity_allocations WHERE lease_id = $1',
      [soon.body.lease.id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].blocks_from_ms).toBeGreaterThanOrEqual(askedMs - 1000);
    expect(rows[0].blocks_from_ms).toBeLessThan(rows[0].start_ms);
    // Both borrow the lent slots, one each: a regular lease still sees them taken.
    expect((await asB('POST', '/v1/leases', { name: 'regular-slot-lead', start_date: 'now', end_date: inSeconds(1800), reservations: [inLead()] })).status).toBe(409);
  });
});
