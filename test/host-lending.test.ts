/**
 * Lending a running host lease's idle hosts (issue 43), through the API and the real worker
 * (calendar-only: every unlent usable host is idle): POST /v1/leases/{id}/lend and /reclaim; a
 * preemptible lease borrows only inside a lending, a regular one never; a reclaim cuts the
 * borrowers with the preemption warning (told as reclaimed, never naming the lender), takes the
 * unborrowed hosts first, and the hosts come back once the borrowers are out; a lender's end takes
 * its hosts back; Blazar's error bodies for what cannot be lent.
 */
import { ApplicationFailure } from '@temporalio/common';
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { ResourcePlugin } from '../src/domain/resource-plugin';
import type { PhysicalHostParams } from '../src/resources/physical-host/params';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { borrowersOutsideLendings, doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { findLease } from '../src/db/leases';
import { startWebhookReceiver, type Delivery, type WebhookReceiver } from './support/notice-receiver';
import { FakeNova, glance } from './support/fake-nova';
import { leaseAggregateFor } from '../src/resources/physical-host/aggregates';
import type { NovaClient } from '../src/openstack';
import type { Pool } from '../src/db/pool';
import { activityRuns, apiClient, eventually, inSeconds, useTestStack, type ApiCall } from '../dev-stack/stack';

/** A lease as the API shows it. */
type LeaseJson = ApiCall['body'];

const WARNING_SECONDS = 60;
const EVICTION_SECONDS = 5;

describe('lending a lease\'s idle hosts', () => {
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
      const hosts = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
      // A borrower's end waits for this while it is set (an eviction that outlasts the bound).
      const held: ResourcePlugin<PhysicalHostParams> = {
        ...hosts,
        async end(ctx) {
          if (ctx.reservation.params.preemptible && holdBorrowerEnds) await holdBorrowerEnds;
          return hosts.end(ctx);
        },
        // While set, a lend's and a reclaim's answer is lost after they acted (their activity fails).
        async lend(ctx, request) {
          lendSignal = ctx.signal;
          if (lendInNova) return lendInNova(ctx, request);
          const lent = await hosts.lend!(ctx, request);
          if (loseAnswers) throw ApplicationFailure.nonRetryable('the lend\'s answer was lost', 'LostAnswer');
          return lent;
        },
        async reclaim(ctx, request) {
          const taken = await hosts.reclaim!(ctx, request);
          if (loseAnswers) throw ApplicationFailure.nonRetryable('the reclaim\'s answer was lost', 'LostAnswer');
          return taken;
        },
        // While set, the calendar reads that reconcile a failed lend or reclaim fail, for good.
        async lentBy(ctx, lendingId) {
          if (failReconcileReads) throw ApplicationFailure.nonRetryable('the calendar could not be read', 'ReadFailed');
          return hosts.lentBy!(ctx, lendingId);
        },
        async reclaimingHosts(ctx) {
          if (failReconcileReads) throw ApplicationFailure.nonRetryable('the calendar could not be read', 'ReadFailed');
          return hosts.reclaimingHosts!(ctx);
        },
        putBackFenced: (ctx) => (lendInNova ? withNova(pool).putBackFenced!(ctx) : hosts.putBackFenced!(ctx)),
      };
      return [held];
    },
  }));
  let holdBorrowerEnds: Promise<void> | undefined;
  let loseAnswers = false;
  let failReconcileReads = false;
  /** The cancellation signal the last lend's hook was given (its activity's: a try given up on stops fencing). */
  let lendSignal: AbortSignal | undefined;
  /** Nova in memory, for the lends that fence hosts in it (`lendInNova`); the rest of the stack is calendar-only. */
  const nova = new FakeNova();
  const withNova = (pool: Pool) => physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => ({ nova: nova as unknown as NovaClient, glance }), freepool: 'pool' });
  /** While set, a lend runs this instead (e.g. fencing in `nova`). */
  let lendInNova: NonNullable<ResourcePlugin<PhysicalHostParams>['lend']> | undefined;
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-lender', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-borrower', 'x-user-id': 'bob', 'x-roles': 'member' });
  const inPool = (pool: string, fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', pool]), ...fields });
  const leaseOf = async (id: string, as = asA) => (await as('GET', `/v1/leases/${id}`)).body.lease;
  const noticesOf = (id: string, type: string) => receiver.received.filter((d: Delivery) => d.body.payload.lease_id === id && d.body.event_type === type);
  const endOf = (lease: LeaseJson) => Date.parse(`${String(lease.end_date).slice(0, 19)}Z`);
  /** The lender's lendings in the database: when each was returned, its end (a reclaim's return), and the host-ms borrowed. */
  const returnedLendingsOf = async (leaseId: string) =>
    (
      await stack().db.pool.query<{ returned_ms: number; end_ms: number; borrowed_ms: number }>(
        `SELECT (extract(epoch FROM returned_at) * 1000)::float8 AS returned_ms, (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms, borrowed_ms::float8 AS borrowed_ms
         FROM host_lendings WHERE lease_id = $1 ORDER BY id`,
        [leaseId],
      )
    ).rows;
  const lendingsOf = async (id: string) => (await leaseOf(id)).reservations[0].lendings as Array<Record<string, unknown>>;

  /** A lease of `as`'s project starting now, ACTIVE once its workflow started it. */
  async function activeLease(as: typeof asA, name: string, seconds: number, reservation: Record<string, unknown>): Promise<LeaseJson> {
    const made = await as('POST', '/v1/leases', { name, start_date: 'now', end_date: inSeconds(seconds), reservations: [reservation] });
    expect(made.status).toBe(201);
    return eventually(async () => {
      const lease = await leaseOf(made.body.lease.id, as);
      return lease.status === 'ACTIVE' ? lease : undefined;
    });
  }

  beforeAll(async () => {
    for (const [name, pool] of [['lend-1', 'lend'], ['lend-2', 'lend'], ['back-1', 'back'], ['part-1', 'part'], ['part-2', 'part'], ['del-1', 'del'], ['bad-1', 'bad'], ['evict-1', 'evict'], ['soon-1', 'soon'], ['lost-1', 'lost'], ['lost-2', 'lost'], ['fence-1', 'fence'], ['fence-2', 'fence'], ['read-1', 'read'], ['read-2', 'read']] as const) {
      await insertHost(stack().db.pool, { name, capabilities: { pool } });
    }
    for (const project of ['project-lender', 'project-borrower']) {
      const as = apiClient(() => stack().url, { 'x-project-id': project, 'x-user-id': 'someone', 'x-roles': 'member' });
      expect((await as('PUT', `/v1/projects/${project}/webhooks`, { webhooks: [{ url: receiver.url }] })).status).toBe(200);
    }
  });

  afterEach(async () => {
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    expect(await borrowersOutsideLendings(stack().db.pool)).toEqual([]);
  });

  it('lends idle hosts until a time: a preemptible lease borrows inside the lending only, a regular one never; a reclaim warns the borrower as reclaimed', async () => {
    const lender = await activeLease(asA, 'lender', 2 * 3600, inPool('lend', { min: 2, max: 2 }));
    const until = inSeconds(3600);
    const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until });
    expect(lent.status).toBe(200);
    expect(lendSignal).toBeInstanceOf(AbortSignal);
    expect(lendSignal?.aborted).toBe(false);
    expect(lent.body.lease.reservations[0].lendings).toEqual([{ id: expect.any(String), hosts: ['lend-1'], lent_at: expect.any(String), until: `${until.replace(' ', 'T')}.000000`, state: 'lent', returns_at: null, borrowed: false }]);

    // A regular lease sees the lender's booking; a preemptible one past the lending's end does not fit; one inside it does.
    expect((await asB('POST', '/v1/leases', { name: 'regular', start_date: 'now', end_date: inSeconds(1800), reservations: [inPool('lend')] })).status).toBe(409);
    expect((await asB('POST', '/v1/leases', { name: 'too-long', start_date: 'now', end_date: inSeconds(5400), reservations: [inPool('lend', { preemptible: true })] })).status).toBe(409);
    const borrower = await activeLease(asB, 'borrower', 1800, inPool('lend', { preemptible: true }));
    expect(borrower.reservations[0].hosts).toEqual(['lend-1']);

    // Only the host not lent yet is idle: 2 cannot be lent.
    const more = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until });
    expect(more).toMatchObject({ status: 409, body: { error_code: 409, error_message: `Only 1 of the 2 hosts of reservation ${lender.reservations[0].id} can be lent now: the others run servers or are lent already.`, idle: 1 } });

    const askedMs = Date.now();
    const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, {});
    expect(reclaimed.status).toBe(200);
    const [lending] = reclaimed.body.lease.reservations[0].lendings;
    expect(lending).toMatchObject({ hosts: ['lend-1'], state: 'reclaiming', borrowed: true });
    const returnsAt = Date.parse(`${lending.returns_at.slice(0, 19)}Z`);
    expect(returnsAt).toBeGreaterThanOrEqual(Math.floor(askedMs / 1000) * 1000 + WARNING_SECONDS * 1000);

    // The borrower is told with the warning, as reclaimed; its end moves to the return; nothing names the lender.
    const notice = await eventually(() => Promise.resolve(noticesOf(borrower.id, 'lease.preempting')[0]));
    expect(notice.body.payload).toMatchObject({ reason: expect.stringMatching(/^reclaimed: the lending lease takes its host back from /), warning_configured_seconds: WARNING_SECONDS, warning_short: false });
    expect(notice.body.payload.warning_seconds).toBeGreaterThanOrEqual(WARNING_SECONDS);
    const cut = await eventually(async () => {
      const now = await leaseOf(borrower.id, asB);
      return endOf(now) === returnsAt ? now : undefined;
    });
    expect(cut.status_reason).toMatch(/^reclaimed: the lending lease takes its host back from /);
    for (const seen of [JSON.stringify(notice.body), JSON.stringify(cut)]) {
      expect(seen).not.toContain('project-lender');
      expect(seen).not.toContain(lender.id);
    }
    // Nor does the lender see who borrowed.
    const seenByLender = JSON.stringify(await leaseOf(lender.id));
    expect(seenByLender).not.toContain('project-borrower');
    expect(seenByLender).not.toContain(borrower.id);
  });

  it('a reclaim needed now ends the borrower at once; the host is reclaiming until the borrower is out, then returned, and can be lent again', async () => {
    const lender = await activeLease(asA, 'lender-back', 2 * 3600, inPool('back'));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'borrower-back', 1800, inPool('back', { preemptible: true }));
    const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: inSeconds(0) });
    expect(reclaimed.status).toBe(200);
    expect(reclaimed.body.lease.reservations[0].lendings[0]).toMatchObject({ state: 'reclaiming', borrowed: true });
    await eventually(async () => ((await lendingsOf(lender.id))[0].state === 'returned' ? true : undefined));
    const ended = (await findLease(stack().db.pool, borrower.id))!;
    expect(ended.status).toBe('TERMINATED');
    expect(ended.statusReason).toMatch(/^reclaimed: /);
    // Back only once the borrower was out (its end done), with the time it borrowed.
    const [row] = (await returnedLendingsOf(lender.id));
    expect(row.returned_ms).toBeGreaterThanOrEqual(ended.events.find((e) => e.event_type === 'end_lease')!.finishedAt!);
    expect(row.borrowed_ms).toBeGreaterThan(0);
    // Back in the lease: idle again, so lent again.
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
  });

  it('takes a reclaimed host back once the eviction bound has passed, even while its borrower\'s end still runs', async () => {
    const lender = await activeLease(asA, 'lender-evict', 2 * 3600, inPool('evict'));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'borrower-evict', 1800, inPool('evict', { preemptible: true }));
    let letGo!: () => void;
    holdBorrowerEnds = new Promise((resolve) => (letGo = resolve));
    try {
      expect((await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: inSeconds(0) })).status).toBe(200);
      await eventually(async () => ((await leaseOf(borrower.id, asB)).status === 'TERMINATING' ? true : undefined));
      // Past the 5 s bound the host is the lender's again, the borrower's end still held; not before.
      await eventually(async () => ((await lendingsOf(lender.id))[0].state === 'returned' ? true : undefined), 20_000);
      expect((await leaseOf(borrower.id, asB)).status).toBe('TERMINATING');
      const [row] = await returnedLendingsOf(lender.id);
      expect(row.returned_ms - row.end_ms).toBeGreaterThanOrEqual(EVICTION_SECONDS * 1000);
    } finally {
      letGo();
      holdBorrowerEnds = undefined;
    }
    await eventually(async () => ((await leaseOf(borrower.id, asB)).status === 'TERMINATED' ? true : undefined));
  });

  it('a reclaim of all with a sooner need brings a host already being reclaimed back sooner; without a sooner need it is a 409', async () => {
    const lender = await activeLease(asA, 'lender-soon', 2 * 3600, inPool('soon'));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'borrower-soon', 1800, inPool('soon', { preemptible: true }));
    const returnOf = (lease: LeaseJson) => Date.parse(`${String(lease.reservations[0].lendings[0].returns_at).slice(0, 19)}Z`);
    const asInstant = (blazarTime: string) => Date.parse(`${blazarTime.replace(' ', 'T')}Z`);
    const firstNeed = inSeconds(1200);
    const first = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: firstNeed });
    expect(first.status).toBe(200);
    expect(returnOf(first.body.lease)).toBe(asInstant(firstNeed));

    const nothingLent = { status: 409, body: { error_code: 409, error_message: `Reservation ${lender.reservations[0].id} lends no host now: nothing to reclaim.` } };
    expect(await asA('POST', `/v1/leases/${lender.id}/reclaim`, {})).toMatchObject(nothingLent);
    expect(await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: inSeconds(1500) })).toMatchObject(nothingLent);
    expect(await asA('POST', `/v1/leases/${lender.id}/reclaim`, { count: 1, needed_at: inSeconds(120) })).toMatchObject(nothingLent);

    const soonerNeed = inSeconds(120);
    const sooner = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { needed_at: soonerNeed });
    expect(sooner.status).toBe(200);
    expect(sooner.body.lease.reservations[0].lendings).toHaveLength(1);
    expect(sooner.body.lease.reservations[0].lendings[0]).toMatchObject({ hosts: ['soon-1'], state: 'reclaiming', borrowed: true });
    expect(returnOf(sooner.body.lease)).toBe(asInstant(soonerNeed));
    // The borrower is cut to the sooner need too.
    await eventually(async () => (endOf(await leaseOf(borrower.id, asB)) === asInstant(soonerNeed) ? true : undefined));
  });

  it('records a lend and a reclaim whose answers were lost after they acted: the lending as lent, its host as reclaiming', async () => {
    const lender = await activeLease(asA, 'lender-lost', 2 * 3600, inPool('lost', { min: 2, max: 2 }));
    const pool = stack().db.pool;
    loseAnswers = true;
    try {
      const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) });
      expect(lent.status).toBe(200);
      const [lending] = lent.body.lease.reservations[0].lendings;
      expect(lending).toMatchObject({ hosts: ['lost-1'], state: 'lent' });
      // What the calendar lent under that lending id, no more.
      expect((await pool.query('SELECT lending_id::text FROM host_lendings WHERE lease_id = $1', [lender.id])).rows).toEqual([{ lending_id: lending.id }]);

      const borrower = await activeLease(asB, 'borrower-lost', 1800, inPool('lost', { preemptible: true }));
      const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, {});
      expect(reclaimed.status).toBe(200);
      const [taken] = reclaimed.body.lease.reservations[0].lendings;
      expect(taken).toMatchObject({ id: lending.id, hosts: ['lost-1'], state: 'reclaiming', borrowed: true });
      // The cut stands, and the record says when the host is back: when the borrower's cut booking ends.
      const { rows } = await pool.query<{ end_ms: number }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM host_allocations WHERE lease_id = $1', [borrower.id]);
      expect(rows).toEqual([{ end_ms: Date.parse(`${String(taken.returns_at).slice(0, 19)}Z`) }]);
    } finally {
      loseAnswers = false;
    }
  });

  it('answers a lost lend\'s or reclaim\'s own error when the calendar cannot be read to reconcile it', async () => {
    const lender = await activeLease(asA, 'lender-unread', 2 * 3600, inPool('read', { min: 2, max: 2 }));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    loseAnswers = true;
    failReconcileReads = true;
    try {
      const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, {});
      expect(reclaimed.status).toBe(503);
      expect(reclaimed.body.error_message).toMatch(/the reclaim's answer was lost/);
      const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) });
      expect(lent.status).toBe(503);
      expect(lent.body.error_message).toMatch(/the lend's answer was lost/);
    } finally {
      loseAnswers = false;
      failReconcileReads = false;
    }
  });

  it('puts the hosts a lend fenced back into the lease when its every try is given up on half way, and answers the lend\'s error', async () => {
    const lender = await activeLease(asA, 'lender-fenced', 3600, inPool('fence', { min: 2, max: 2 }));
    const aggregate = leaseAggregateFor(lender.reservations[0].id);
    nova.aggregate('pool', []);
    nova.aggregate(aggregate.name, ['fence-1', 'fence-2'], { 'leasekeeper:reservation': lender.reservations[0].id }, aggregate.availabilityZone);
    let tries = 0;
    // Each try is given up on (its time out, its heartbeats lost) once it has fenced its first host: it stops and leaves it fenced.
    lendInNova = (ctx, request) => {
      tries++;
      const givenUp = new AbortController();
      nova.afterListing = () => givenUp.abort(new Error('the lend\'s try was given up on'));
      return withNova(stack().db.pool).lend!({ ...ctx, signal: givenUp.signal }, request);
    };
    try {
      const lent = await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until: inSeconds(1800) });
      expect(lent.status).toBe(503);
      expect(lent.body.error_message).toMatch(/the lend's try was given up on/);
    } finally {
      lendInNova = undefined;
      nova.afterListing = undefined;
    }
    expect(tries).toBe(3);
    const where = Object.fromEntries(nova.aggregates.map((a) => [a.name, [...a.hosts].sort()]));
    expect(where).toEqual({ pool: [], [aggregate.name]: ['fence-1', 'fence-2'] });
    expect(await lendingsOf(lender.id)).toBeUndefined(); // none recorded
    expect((await stack().db.pool.query('SELECT 1 FROM host_lendings WHERE lease_id = $1', [lender.id])).rows).toEqual([]);
  });

  it('a partial reclaim takes the unborrowed host first; the lender extends while lent but cannot shorten under a lending', async () => {
    const lender = await activeLease(asA, 'lender-part', 2 * 3600, inPool('part', { min: 2, max: 2 }));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 2, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'borrower-part', 1800, inPool('part', { preemptible: true }));
    const borrowed = borrower.reservations[0].hosts[0] as string;
    const unborrowed = ['part-1', 'part-2'].find((h) => h !== borrowed)!;
    const reclaimed = await asA('POST', `/v1/leases/${lender.id}/reclaim`, { count: 1 });
    expect(reclaimed.status).toBe(200);
    expect(reclaimed.body.lease.reservations[0].lendings).toEqual([
      expect.objectContaining({ hosts: [borrowed], state: 'lent' }),
      expect.objectContaining({ hosts: [unborrowed], state: 'reclaiming', borrowed: false }),
    ]);
    // Nobody was cut: the borrower owes no news and keeps its end.
    expect((await stack().db.pool.query('SELECT 1 FROM lease_preemptions WHERE lease_id = $1', [borrower.id])).rows).toEqual([]);
    expect(endOf(await leaseOf(borrower.id, asB))).toBe(endOf(borrower));
    await eventually(async () => ((await lendingsOf(lender.id)).some((g) => g.state === 'returned') ? true : undefined));

    expect((await asA('PUT', `/v1/leases/${lender.id}`, { end_date: inSeconds(3 * 3600) })).status).toBe(200);
    const shortened = await asA('PUT', `/v1/leases/${lender.id}`, { end_date: inSeconds(1800) });
    expect(shortened.status).toBe(409);
    expect(shortened.body.error_message).toMatch(new RegExp(`^Reservation ${lender.reservations[0].id} lends hosts until .*: reclaim them first\\.$`));
  });

  it('a lender deleted while lending warns its borrower as reclaimed, and the host is free once the borrower is out', async () => {
    const lender = await activeLease(asA, 'lender-del', 2 * 3600, inPool('del'));
    expect((await asA('POST', `/v1/leases/${lender.id}/lend`, { count: 1, until: inSeconds(3600) })).status).toBe(200);
    const borrower = await activeLease(asB, 'borrower-del', 1800, inPool('del', { preemptible: true }));
    expect((await asA('DELETE', `/v1/leases/${lender.id}`)).status).toBe(204);
    const notice = await eventually(() => Promise.resolve(noticesOf(borrower.id, 'lease.preempting')[0]));
    expect(notice.body.payload.reason).toMatch(/^reclaimed: /);
    await eventually(async () => ((await leaseOf(borrower.id, asB)).status === 'TERMINATED' ? true : undefined));
    expect((await asB('POST', '/v1/leases', { name: 'after-del', start_date: 'now', end_date: inSeconds(1800), reservations: [inPool('del')] })).status).toBe(201);
  });

  it('answers what cannot be lent with Blazar\'s error bodies: 404 to other projects, 400 for bad fields and reservations, 409 for a lease not active or nothing lent', async () => {
    const pending = await asA('POST', '/v1/leases', { name: 'pending-bad', start_date: inSeconds(86_400), end_date: inSeconds(90_000), reservations: [inPool('bad')] });
    expect(pending.status).toBe(201);
    const pendingId = pending.body.lease.id as string;
    const bad = (status: number, message: string | RegExp) => ({ status, body: { error_code: status, error_name: status, error_message: message } });
    expect(await asB('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(88_000) })).toEqual(bad(404, `Object with {'lease_id': '${pendingId}'} not found`));
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 0, until: inSeconds(88_000) })).toMatchObject({ status: 400, body: { error_code: 400, error_message: expect.stringMatching(/^count: /) } });
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(88_000), hosts: 3 })).toMatchObject({ status: 400 });
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(30) })).toMatchObject({ status: 400, body: { error_message: expect.stringMatching(/^until: must be later than now plus the preemption warning/) } });
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(95_000) })).toMatchObject({ status: 400, body: { error_message: expect.stringMatching(/^until: must be no later than the lease's end/) } });
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(88_000), reservation_id: '00000000-0000-4000-8000-000000000000' })).toEqual(
      bad(400, 'reservation_id: lease pending-bad has no reservation 00000000-0000-4000-8000-000000000000'),
    );
    expect(await asA('POST', `/v1/leases/${pendingId}/lend`, { count: 1, until: inSeconds(88_000) })).toEqual(bad(409, 'Lease pending-bad is PENDING: only an active lease lends or reclaims its hosts.'));
    const preemptible = await activeLease(asA, 'preemptible-bad', 1800, inPool('bad', { preemptible: true }));
    expect(await asA('POST', `/v1/leases/${preemptible.id}/lend`, { count: 1, until: inSeconds(1500) })).toEqual(
      bad(400, 'lease preemptible-bad has no reservation that can lend: only regular physical:host reservations without on_end: release lend'),
    );
    expect(await asA('POST', `/v1/leases/${preemptible.id}/reclaim`, { reservation_id: preemptible.reservations[0].id })).toEqual(
      bad(400, `reservation ${preemptible.reservations[0].id} is preemptible: only a regular reservation lends its hosts`),
    );
    expect((await asA('DELETE', `/v1/leases/${preemptible.id}`)).status).toBe(204);
    const regular = await activeLease(asA, 'regular-bad', 1800, inPool('bad'));
    expect(await asA('POST', `/v1/leases/${regular.id}/reclaim`, {})).toEqual(bad(409, `Reservation ${regular.reservations[0].id} lends no host now: nothing to reclaim.`));
    expect(await asA('POST', `/v1/leases/${regular.id}/reclaim`, { needed_at: inSeconds(-3600) })).toEqual(bad(400, 'needed_at: must not be in the past'));
    expect(await asA('POST', `/v1/leases/${regular.id}/lend`, { count: 2, until: inSeconds(1500) })).toMatchObject({ status: 409, body: { idle: 1 } });
    // The lend ran as a (regular) activity: its 409's `idle` came through the activity's failure and the update's.
    expect(await activityRuns(stack(), regular.id, 'lendReservation')).toBe(1);
  });
});

describe('suggesting a lease lend its idle hosts', () => {
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver({ path: '/hook' });
  });
  afterAll(async () => {
    await receiver.close();
  });
  const stack = useTestStack(() => ({
    // Idle checks every second (a quarter of the 3.6 s warning, at least 1 s); a lending must outlast twice the 1 min warning.
    env: { LK_IDLE_LEASE_WARN_HOURS: '0.001', LK_NOTIFY_URL: receiver.url, LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_NOTIFY_BEFORE_END: 'none', LK_PREEMPT_WARNING_MINUTES: '1' },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));
  const api = apiClient(() => stack().url, { 'x-project-id': 'project-idle', 'x-user-id': 'ida', 'x-roles': 'member' });

  it('tells an active lease whose hosts sit idle that it could lend them, once, and lends nothing', async () => {
    await insertHost(stack().db.pool, { name: 'idle-1', capabilities: { pool: 'idle' } });
    const made = await api('POST', '/v1/leases', { name: 'idle-lender', start_date: 'now', end_date: inSeconds(3600), reservations: [blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', 'idle']) })] });
    expect(made.status).toBe(201);
    const id = made.body.lease.id as string;
    const suggestions = () => receiver.received.filter((d: Delivery) => d.body.event_type === 'lease.lend_suggested' && d.body.payload.lease_id === id);
    const suggested = await eventually(() => Promise.resolve(suggestions()[0]));
    expect(suggested.body.payload).toMatchObject({ reservation_id: made.body.lease.reservations[0].id, idle_hosts: 1, idle_since: expect.any(String), lend: `POST /v1/leases/${id}/lend` });
    // Three more looks at the idle hosts after it: no second suggestion, nothing lent.
    const looks = () => activityRuns(stack(), id, 'idleHostsOf');
    const seen = await looks();
    await eventually(async () => ((await looks()) >= seen + 3 ? true : undefined));
    expect(suggestions()).toHaveLength(1);
    expect((await api('GET', `/v1/leases/${id}`)).body.lease.reservations[0].lendings).toBeUndefined();
    expect((await stack().db.pool.query('SELECT 1 FROM host_lendings WHERE lease_id = $1', [id])).rows).toEqual([]);
  });
});

describe('borrowing right after a lend with a provisioning lead time', () => {
  const LEAD_SECONDS = 600;
  const stack = useTestStack(() => ({
    env: { LK_PROVISIONING_LEAD_TIME_SECONDS: String(LEAD_SECONDS), LK_NOTIFY_BEFORE_END: 'none', LK_PREEMPT_WARNING_MINUTES: '1' },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false, provisioningLeadMs: LEAD_SECONDS * 1000 }, cloud: 'calendar-only' })],
  }));
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-lead-lender', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-lead-borrower', 'x-user-id': 'bob', 'x-roles': 'member' });
  const inPool = (fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', 'lead']), ...fields });

  afterEach(async () => {
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    expect(await borrowersOutsideLendings(stack().db.pool)).toEqual([]);
  });

  it('admits a preemptible lease starting now, and one starting before its lead is over, inside a lending that began a moment ago', async () => {
    for (const name of ['lead-1', 'lead-2']) await insertHost(stack().db.pool, { name, capabilities: { pool: 'lead' } });
    const made = await asA('POST', '/v1/leases', { name: 'lead-lender', start_date: 'now', end_date: inSeconds(2 * 3600), reservations: [inPool({ min: 2, max: 2 })] });
    expect(made.status).toBe(201);
    const lenderId = made.body.lease.id as string;
    await eventually(async () => ((await asA('GET', `/v1/leases/${lenderId}`)).body.lease.status === 'ACTIVE' ? true : undefined));
    expect((await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 2, until: inSeconds(3600) })).status).toBe(200);
    // The offers agree with admission: a preemptible lease fits now, in the lending (not after the lender's end).
    const offered = await asB('POST', '/v1/offers', { start_after: 'now', duration: 30, reservations: [inPool({ preemptible: true })], limit: 1 });
    expect(offered.status).toBe(200);
    expect(Date.parse(`${String(offered.body.offers[0].start_date).slice(0, 19)}Z`)).toBeLessThan(Date.now() + 120_000);

    const now = await asB('POST', '/v1/leases', { name: 'borrow-now', start_date: 'now', end_date: inSeconds(1800), reservations: [inPool({ preemptible: true })] });
    expect(now.status).toBe(201);
    // Its lead would reach 5 minutes before the lending began: only the part still ahead is blocked.
    const askedMs = Date.now();
    const soon = await asB('POST', '/v1/leases', { name: 'borrow-soon', start_date: inSeconds(LEAD_SECONDS / 2), end_date: inSeconds(1800), reservations: [inPool({ preemptible: true })] });
    expect(soon.status).toBe(201);
    const { rows } = await stack().db.pool.query<{ blocks_from_ms: number; start_ms: number }>(
      'SELECT (extract(epoch FROM lower(blocks)) * 1000)::float8 AS blocks_from_ms, (extract(epoch FROM lower(during)) * 1000)::float8 AS start_ms FROM host_allocations WHERE lease_id = $1',
      [soon.body.lease.id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].blocks_from_ms).toBeGreaterThanOrEqual(askedMs - 1000);
    expect(rows[0].blocks_from_ms).toBeLessThan(rows[0].start_ms);
    // Both borrow the lent hosts, one each: a regular lease still sees them taken.
    expect((await asB('POST', '/v1/leases', { name: 'regular-lead', start_date: 'now', end_date: inSeconds(1800), reservations: [inPool()] })).status).toBe(409);
  });

  it('keeps a regular lease\'s whole lead: one whose lead reaches into a booking that ended a moment ago is refused, a preemptible one is not', async () => {
    await insertHost(stack().db.pool, { name: 'whole-1', capabilities: { pool: 'whole' } });
    const inWhole = (fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', 'whole']), ...fields });
    const made = await asA('POST', '/v1/leases', { name: 'ended-now', start_date: 'now', end_date: inSeconds(3600), reservations: [inWhole()] });
    expect(made.status).toBe(201);
    const endedId = made.body.lease.id as string;
    await eventually(async () => ((await asA('GET', `/v1/leases/${endedId}`)).body.lease.status === 'ACTIVE' ? true : undefined));
    expect((await asA('PUT', `/v1/leases/${endedId}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await asA('GET', `/v1/leases/${endedId}`)).body.lease.status === 'TERMINATED' ? true : undefined));
    // Starting in 5 minutes, its 10-minute lead reaches back before the end: nothing lent here, the lead alone refuses it.
    const regular = await asB('POST', '/v1/leases', { name: 'regular-lead', start_date: inSeconds(LEAD_SECONDS / 2), end_date: inSeconds(1800), reservations: [inWhole()] });
    expect(regular.status).toBe(409);
    const preemptible = await asB('POST', '/v1/leases', { name: 'preemptible-lead', start_date: inSeconds(LEAD_SECONDS / 2), end_date: inSeconds(1800), reservations: [inWhole({ preemptible: true })] });
    expect(preemptible.status).toBe(201);
  });
});

describe('a lend that outlasts the REST call', () => {
  let release: (() => void) | undefined;
  const stack = useTestStack(() => ({
    env: { LK_API_WORKFLOW_TIMEOUT_MS: '2000', LK_NOTIFY_BEFORE_END: 'none', LK_PREEMPT_WARNING_MINUTES: '1' },
    withPool: (pool) => {
      const hosts = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
      // Each lend waits for the test's release (a lend of many hosts on a slow Nova).
      const slow: ResourcePlugin<PhysicalHostParams> = {
        ...hosts,
        async lend(ctx, request) {
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return hosts.lend!(ctx, request);
        },
      };
      return [slow];
    },
  }));
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-slow-lender', 'x-user-id': 'alice', 'x-roles': 'member' });

  it('answers a 503 saying the lend is still running and where its lending will show, and the lending shows there once made', async () => {
    await insertHost(stack().db.pool, { name: 'slow-1', capabilities: { pool: 'slow' } });
    const made = await asA('POST', '/v1/leases', { name: 'slow-lender', start_date: 'now', end_date: inSeconds(2 * 3600), reservations: [blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', 'slow']) })] });
    expect(made.status).toBe(201);
    const leaseId = made.body.lease.id as string;
    await eventually(async () => ((await asA('GET', `/v1/leases/${leaseId}`)).body.lease.status === 'ACTIVE' ? true : undefined));
    const lent = await asA('POST', `/v1/leases/${leaseId}/lend`, { count: 1, until: inSeconds(3600) });
    expect(lent.status).toBe(503);
    expect(lent.body.error_message).toBe(
      `the lend did not answer within 2 s and is still running: its lending shows in the lease (GET /v1/leases/${leaseId}, the reservation's lendings) once made. Look there before lending again: another lend lends more hosts.`,
    );
    (await eventually(() => Promise.resolve(release)))();
    const lendings = await eventually(async () => (await asA('GET', `/v1/leases/${leaseId}`)).body.lease.reservations[0].lendings as unknown[] | undefined);
    expect(lendings).toEqual([expect.objectContaining({ hosts: ['slow-1'], state: 'lent' })]);
  });
});
