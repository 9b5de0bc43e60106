/**
 * Preemptible host leases (issue 43), through the API and the real worker: `preemptible` at the
 * edge; a regular lease prefers free hosts and takes a preemptible lease's host only when it must,
 * cutting that lease in its own transaction; the preempted lease is told (lease.preempting, never
 * naming the other project), takes the new end and ends with the reason; one not started yet whose
 * whole window is taken ends at once; a regular lease whose start comes sooner than the warning
 * waits for the preempted lease's end, never longer than the eviction bound.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { ResourcePlugin } from '../src/domain/resource-plugin';
import type { PhysicalHostParams } from '../src/resources/physical-host/params';
import { blazarHostReservation, pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { bookInTransaction } from '../src/resources/shared/booking';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type Delivery, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, leaseHistoryEvents, useTestStack } from '../dev-stack/stack';
import { formatRequestDate } from '../src/domain/dates';
import { addOwedPreemption, latestCutOf, preemptedAmong } from '../src/db/lease-preemptions';
import { withConnection } from '../src/db/pool';
import { leasePreempted } from '../workflows/lease/messages';
import { LeaseOutbox } from '../src/outbox';
import pino from 'pino';

const EVICTION_SECONDS = 3;
/** A whole hour `days` ahead (within a member's max_advance), plus `hours`: Blazar's request date. */
const TODAY = Math.ceil(Date.now() / 3_600_000) * 3_600_000;
const at = (days: number, hours: number) => formatRequestDate(TODAY + days * 86_400_000 + hours * 3_600_000);

describe('preemptible host leases', () => {
  let project: WebhookReceiver;
  /** The ends of preemptible reservations wait for this while it is set (an eviction that takes long). */
  let holdPreemptibleEnds: Promise<void> | undefined;
  /** The ends of regular reservations wait for this while it is set. */
  let holdRegularEnds: Promise<void> | undefined;
  beforeAll(async () => {
    project = await startWebhookReceiver({ path: '/hook' });
  });
  afterAll(async () => {
    await project.close();
  });
  const stack = useTestStack(() => ({
    env: {
      LK_WEBHOOK_ALLOW_PRIVATE: 'true', // the project's receiver is on loopback here
      LK_NOTIFY_BEFORE_END: 'none',
      LK_PREEMPT_WARNING_MINUTES: '5',
      LK_PREEMPT_EVICTION_SECONDS: String(EVICTION_SECONDS),
    },
    withPool: (pool) => {
      const hosts = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
      const held: ResourcePlugin<PhysicalHostParams> = {
        ...hosts,
        async end(ctx) {
          if (ctx.reservation.params.preemptible && holdPreemptibleEnds) await holdPreemptibleEnds;
          if (!ctx.reservation.params.preemptible && holdRegularEnds) await holdRegularEnds;
          return hosts.end(ctx);
        },
      };
      return [held];
    },
  }));
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-b-secret', 'x-user-id': 'bob', 'x-roles': 'member' });
  const inPool = (pool: string, fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$pool', pool]), ...fields });
  const hostIds: Record<string, string> = {};
  const leaseOf = async (id: string, as = asA) => (await as('GET', `/v1/leases/${id}`)).body.lease;
  const hostsOf = async (leaseId: string) =>
    (await stack().db.pool.query<{ host_id: string; end_ms: number }>('SELECT host_id::text, (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM host_allocations WHERE lease_id = $1 ORDER BY host_id', [leaseId])).rows;
  const noticesOf = (id: string, type: string) => project.received.filter((d: Delivery) => d.body.payload.lease_id === id && d.body.event_type === type);

  beforeAll(async () => {
    for (const [name, pool] of [['free-1', 'free'], ['free-2', 'free'], ['cut-1', 'cut'], ['cut-2', 'cut'], ['gone-1', 'gone'], ['short-1', 'short'], ['none-1', 'none'], ['flip-1', 'flip'], ['chg-1', 'chg'], ['appr-1', 'appr']] as const) {
      hostIds[name] = await insertHost(stack().db.pool, { name, capabilities: { pool } });
    }
    hostIds['mv-held'] = await insertHost(stack().db.pool, { name: 'mv-held', capabilities: { pool: 'mv', tier: 'held' } });
    hostIds['mv-free'] = await insertHost(stack().db.pool, { name: 'mv-free', capabilities: { pool: 'mv' } });
    hostIds['mix-r'] = await insertHost(stack().db.pool, { name: 'mix-r', capabilities: { pool: 'mix', slot: 'r' } });
    hostIds['mix-p'] = await insertHost(stack().db.pool, { name: 'mix-p', capabilities: { pool: 'mix', slot: 'p' } });
    hostIds['ask-1'] = await insertHost(stack().db.pool, { name: 'ask-1', capabilities: { pool: 'ask' } });
    hostIds['stale-1'] = await insertHost(stack().db.pool, { name: 'stale-1', capabilities: { pool: 'stale' } });
    hostIds['unused-1'] = await insertHost(stack().db.pool, { name: 'unused-1', capabilities: { pool: 'unused' } });
    expect((await asA('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url: project.url }] })).status).toBe(200);
  });

  afterEach(async () => {
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
  });

  it('takes "preemptible" as a boolean (blazarclient sends text), shows it, and refuses other values with Blazar\'s 400', async () => {
    const made = await asA('POST', '/v1/leases', { name: 'shape', start_date: at(10, 0), end_date: at(10, 1), reservations: [inPool('none', { preemptible: 'True' })] });
    expect(made.status).toBe(201);
    expect(made.body.lease.reservations[0]).toMatchObject({ resource_type: 'physical:host', preemptible: true });
    const aliased = await asA('POST', '/v1/leases', { name: 'shape-alias', start_date: at(13, 0), end_date: at(13, 1), reservations: [inPool('none', { resource_type: 'preemptible:host' })] });
    expect(aliased.status).toBe(201);
    expect(aliased.body.lease.reservations[0]).toMatchObject({ resource_type: 'physical:host', preemptible: true });
    const contradicted = await asA('POST', '/v1/leases', { name: 'shape-contradicted', start_date: at(13, 2), end_date: at(13, 3), reservations: [inPool('none', { resource_type: 'physical:host:preemptible', preemptible: 'False' })] });
    expect(contradicted).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'reservations[0].preemptible: must be true (or left out) with resource_type physical:host:preemptible' } });
    const regular = await asA('POST', '/v1/leases', { name: 'shape-regular', start_date: at(11, 0), end_date: at(11, 1), reservations: [inPool('none')] });
    expect(regular.body.lease.reservations[0].preemptible).toBe(false);
    const bad = await asA('POST', '/v1/leases', { name: 'shape-bad', start_date: at(12, 0), end_date: at(12, 1), reservations: [inPool('none', { preemptible: 'maybe' })] });
    expect(bad).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'reservations[0].preemptible: expected true or false' } });
    const kept = await asA('POST', '/v1/leases', { name: 'shape-release', start_date: at(12, 0), end_date: at(12, 1), reservations: [inPool('none', { preemptible: true, on_end: 'release' })] });
    expect(kept.status).toBe(400);
    expect(kept.body.error_message).toMatch(/preemptible reservation cannot keep its hosts for good/);
  });

  it('lifts the policy rules preemptible_exempt names for a lease whose every reservation is preemptible, only', async () => {
    const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-user-id': 'root', 'x-roles': 'admin' });
    expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { max_lease_duration: '1d', preemptible_exempt: ['max_lease_duration'] })).status).toBe(200);
    try {
      const long = (fields: Record<string, unknown>) => asA('POST', '/v1/leases', { name: `long-${JSON.stringify(fields).length}`, start_date: at(40, 0), end_date: at(42, 0), reservations: [inPool('none', fields)] });
      expect((await long({ preemptible: true })).status).toBe(201);
      const regular = await long({});
      expect(regular.status).toBe(400);
      expect(regular.body.error_message).toMatch(/maximum lease duration/);
    } finally {
      expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { max_lease_duration: null, preemptible_exempt: null })).status).toBe(200);
    }
  });

  it('changes "preemptible" only while the lease is PENDING, booking it anew as such', async () => {
    const pending = await asA('POST', '/v1/leases', { name: 'flip-pending', start_date: at(50, 0), end_date: at(50, 1), reservations: [inPool('flip')] });
    expect(pending.status).toBe(201);
    const pendingId = pending.body.lease.id as string;
    const flipped = await asA('PUT', `/v1/leases/${pendingId}`, { reservations: [{ id: pending.body.lease.reservations[0].id, preemptible: true }] });
    expect(flipped.status).toBe(200);
    expect(flipped.body.lease.reservations[0].preemptible).toBe(true);
    const flags = await stack().db.pool.query<{ preemptible: boolean }>('SELECT preemptible FROM host_allocations WHERE lease_id = $1', [pendingId]);
    expect(flags.rows).toEqual([{ preemptible: true }]);
    expect((await asA('DELETE', `/v1/leases/${pendingId}`)).status).toBe(204);

    const started = await asA('POST', '/v1/leases', { name: 'flip-started', start_date: 'now', end_date: inSeconds(3600), reservations: [inPool('flip')] });
    expect(started.status).toBe(201);
    const startedId = started.body.lease.id as string;
    await eventually(async () => ((await leaseOf(startedId)).status === 'ACTIVE' ? true : undefined));
    const refused = await asA('PUT', `/v1/leases/${startedId}`, { reservations: [{ id: started.body.lease.reservations[0].id, preemptible: true }] });
    expect(refused).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'reservations[0].preemptible: can change only while the lease is PENDING (lease flip-started is ACTIVE)' } });
    expect((await leaseOf(startedId)).reservations[0].preemptible).toBe(false);
  });

  it('a regular lease prefers free hosts; a preemptible one never displaces anyone', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-free', start_date: at(20, 0), end_date: at(20, 2), reservations: [inPool('free', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentHost = lent.body.lease.reservations[0].hosts[0];
    const regular = await asB('POST', '/v1/leases', { name: 'regular-free', start_date: at(20, 0), end_date: at(20, 2), reservations: [inPool('free')] });
    expect(regular.status).toBe(201);
    expect(regular.body.lease.reservations[0].hosts).not.toContain(lentHost);
    expect((await hostsOf(lent.body.lease.id)).map((r) => r.end_ms)).toEqual([TODAY + 20 * 86_400_000 + 2 * 3_600_000]);
    // Both hosts are held now: another preemptible lease takes neither the regular's nor the preemptible's.
    const another = await asA('POST', '/v1/leases', { name: 'lent-free-2', start_date: at(20, 1), end_date: at(20, 3), reservations: [inPool('free', { preemptible: true })] });
    expect(another.status).toBe(409);
    expect(await hostsOf(lent.body.lease.id)).toHaveLength(1);
    // Offers: a regular ask counts the preemptible lease's host as free; a preemptible ask does not.
    const ask = (fields: Record<string, unknown>) => asB('POST', '/v1/offers', { reservations: [inPool('free', fields)], duration: 60, start_after: at(20, 0), limit: 1 });
    expect((await ask({})).body.offers[0]).toMatchObject({ kind: 'exact', start_date: at(20, 0) });
    expect((await ask({ preemptible: true })).body.offers[0]).toMatchObject({ kind: 'later', start_date: at(20, 2) });
    // An admin's view names the host admission would take: the preemptible lease's.
    const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-user-id': 'root', 'x-roles': 'admin' });
    const viewed = await asAdmin('POST', '/v1/offers', { reservations: [inPool('free')], duration: 60, start_after: at(20, 0), limit: 1 });
    expect(viewed.body.offers[0].reservations[0].would_book).toEqual([{ id: hostIds[lentHost], hypervisor_hostname: lentHost }]);
  });

  it('a 409\'s offers count a preemptible lease\'s host as free only where the booking that follows may cut it: a create\'s, not an update\'s or an offer hold\'s', async () => {
    for (const name of ['ofr-1', 'ofr-2']) await insertHost(stack().db.pool, { name, capabilities: { pool: 'ofr' } });
    // ofr-1 is a preemptible lease's until 7d+4h, ofr-2 a regular lease's until 7d+2h.
    const lent = await asA('POST', '/v1/leases', { name: 'ofr-lent', start_date: at(7, 0), end_date: at(7, 4), reservations: [inPool('ofr', { preemptible: true })] });
    const held = await asA('POST', '/v1/leases', { name: 'ofr-held', start_date: at(7, 0), end_date: at(7, 2), reservations: [inPool('ofr')] });
    expect([lent.status, held.status]).toEqual([201, 201]);
    const both = inPool('ofr', { min: 2, max: 2 });
    const firstStart = (answer: { status: number; body: { offers: Array<{ start_date: string }> } }) => [answer.status, answer.body.offers[0]?.start_date];
    // A create may cut: its offers start once the regular lease ends.
    const created = await asB('POST', '/v1/leases', { name: 'ofr-create', start_date: at(7, 1), end_date: at(7, 3), reservations: [both] });
    expect(firstStart(created)).toEqual([409, at(7, 2)]);
    // An update never cuts: its offers start after the preemptible lease.
    const own = await asB('POST', '/v1/leases', { name: 'ofr-update', start_date: at(8, 0), end_date: at(8, 2), reservations: [both] });
    expect(own.status).toBe(201);
    const moved = await asB('PUT', `/v1/leases/${own.body.lease.id}`, { start_date: at(7, 1), end_date: at(7, 3) });
    expect(firstStart(moved)).toEqual([409, at(7, 4)]);
    // Nor does an offer hold: the offers (asked before a create) name 7d+2h, the hold's refusal after the preemptible lease.
    const offered = await asB('POST', '/v1/offers', { reservations: [both], duration: 120, start_after: at(7, 2), limit: 1 });
    expect(offered.body.offers[0]).toMatchObject({ start_date: at(7, 2) });
    const hold = await asB('POST', `/v1/offers/${offered.body.offers[0].id}/hold`, {});
    expect(firstStart(hold)).toEqual([409, at(7, 4)]);
  });

  it('cuts a running preemptible lease when a regular lease needs its host: the lease is told at once, with the warning, and its end moves', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-cut', start_date: 'now', end_date: inSeconds(4 * 3600), reservations: [inPool('cut', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    await eventually(async () => ((await leaseOf(lentId)).status === 'ACTIVE' ? true : undefined));
    // Needs both hosts of the pool in an hour: one is free, the other is the preemptible lease's.
    const start = Date.parse('2000-01-01T00:00:00Z') + Math.ceil((Date.now() + 3_600_000 - Date.parse('2000-01-01T00:00:00Z')) / 60_000) * 60_000;
    const needing = await asB('POST', '/v1/leases', { name: 'regular-cut', start_date: inSeconds(0, start), end_date: inSeconds(3600, start), reservations: [inPool('cut', { min: 2, max: 2 })] });
    expect(needing.status).toBe(201);
    expect(needing.body.lease.reservations[0].hosts.sort()).toEqual(['cut-1', 'cut-2']);
    // In the admission's transaction: the preemptible booking ends where the regular one begins.
    expect((await hostsOf(lentId)).map((r) => r.end_ms)).toEqual([start]);
    const lease = await eventually(async () => {
      const now = await leaseOf(lentId);
      return Date.parse(`${String(now.end_date).slice(0, 19)}Z`) === start ? now : undefined;
    });
    expect(lease).toMatchObject({ status: 'ACTIVE', status_reason: expect.stringMatching(/^preempted: host needed by another lease from /) });
    const notice = await eventually(() => Promise.resolve(noticesOf(lentId, 'lease.preempting')[0]));
    expect(notice.body.payload).toMatchObject({ lease_id: lentId, ends_at: new Date(start).toISOString(), warning_configured_seconds: 300, warning_short: false });
    expect(notice.body.payload.warning_seconds).toBeGreaterThanOrEqual(3000);
    // What the preempted lessee sees never names the other project or its lease.
    for (const seen of [JSON.stringify(notice.body), JSON.stringify(await leaseOf(lentId))]) {
      expect(seen).not.toContain('project-b-secret');
      expect(seen).not.toContain(needing.body.lease.id);
    }
  });

  it('denies a change waiting for approval when the lease is preempted: approving it cannot move the end past the cut', async () => {
    const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-user-id': 'root', 'x-roles': 'admin' });
    expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { extension: { max_count: 0 }, exception_timeout: 600 })).status).toBe(200);
    try {
      const lent = await asA('POST', '/v1/leases', { name: 'lent-chg', start_date: 'now', end_date: inSeconds(3600), reservations: [inPool('chg', { preemptible: true })] });
      const lentId = lent.body.lease.id as string;
      await eventually(async () => ((await leaseOf(lentId)).status === 'ACTIVE' ? true : undefined));
      const asked = await asA('PUT', `/v1/leases/${lentId}`, { end_date: inSeconds(3 * 3600), justification: 'a longer run' });
      expect(asked.status).toBe(200);
      expect(asked.body.lease.pending_change).toMatchObject({ outcome: null });
      // Another project needs the host within the lease's current hour.
      const start = Date.parse('2000-01-01T00:00:00Z') + Math.ceil((Date.now() + 1800_000 - Date.parse('2000-01-01T00:00:00Z')) / 60_000) * 60_000;
      const needing = await asB('POST', '/v1/leases', { name: 'regular-chg', start_date: inSeconds(0, start), end_date: inSeconds(600, start), reservations: [inPool('chg')] });
      expect(needing.status).toBe(201);
      const preempted = await eventually(async () => {
        const now = await leaseOf(lentId);
        return now.change_approval ? now : undefined;
      });
      expect(preempted.pending_change).toBeUndefined();
      expect(preempted.change_approval).toMatchObject({ outcome: 'denied', answered_by: 'preempted' });
      expect(Date.parse(`${String(preempted.end_date).slice(0, 19)}Z`)).toBe(start);
      expect(preempted.status_reason).toMatch(/^preempted: host needed by another lease from /);
      expect((await asAdmin('POST', `/v1/leases/${lentId}/approve`, {})).status).toBe(409);
      expect(Date.parse(`${String((await leaseOf(lentId)).end_date).slice(0, 19)}Z`)).toBe(start);
      expect((await hostsOf(lentId)).map((r) => r.end_ms)).toEqual([start]);
    } finally {
      expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { extension: null, exception_timeout: null })).status).toBe(200);
    }
  });

  it('ends at once a preemptible lease not started yet whose whole window a regular lease takes', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-gone', start_date: at(30, 1), end_date: at(30, 2), reservations: [inPool('gone', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const needing = await asB('POST', '/v1/leases', { name: 'regular-gone', start_date: at(30, 0), end_date: at(30, 3), reservations: [inPool('gone')] });
    expect(needing.status).toBe(201);
    expect(await hostsOf(lent.body.lease.id)).toEqual([]);
    const ended = await eventually(async () => {
      const now = await leaseOf(lent.body.lease.id);
      return now.status === 'TERMINATED' ? now : undefined;
    });
    expect(ended.status_reason).toBe(`preempted: host needed by another lease from ${at(30, 0)}`);
    const notice = await eventually(() => Promise.resolve(noticesOf(lent.body.lease.id, 'lease.preempting')[0]));
    expect(notice.body.payload).toMatchObject({ status: 'TERMINATED', reason: ended.status_reason });
  });

  it('a preempted lease moved past the cut onto a free host starts there: the earlier cut no longer applies', async () => {
    const base = Date.now();
    const held = (fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$tier', 'held']), ...fields });
    const lent = await asA('POST', '/v1/leases', { name: 'lent-moved', start_date: inSeconds(15, base), end_date: inSeconds(3600, base), reservations: [held({ preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    const needing = await asB('POST', '/v1/leases', { name: 'regular-moved', start_date: inSeconds(18, base), end_date: inSeconds(3600, base), reservations: [held()] });
    expect(needing.status).toBe(201);
    const [{ end_ms: cutMs }] = await hostsOf(lentId);
    const cut = await eventually(async () => {
      const now = await leaseOf(lentId);
      return Date.parse(`${String(now.end_date).slice(0, 19)}Z`) === cutMs ? now : undefined;
    });
    expect(cut.status_reason).toMatch(/^preempted: /);
    const moved = await asA('PUT', `/v1/leases/${lentId}`, {
      start_date: inSeconds(22, base),
      end_date: inSeconds(3600, base),
      reservations: [{ id: lent.body.lease.reservations[0].id, resource_properties: JSON.stringify(['==', '$pool', 'mv']) }],
    });
    expect(moved.status).toBe(200);
    expect(await hostsOf(lentId)).toEqual([{ host_id: hostIds['mv-free'], end_ms: Date.parse(`${inSeconds(3600, base).replace(' ', 'T')}Z`) }]);
    const started = await eventually(async () => {
      const now = await leaseOf(lentId);
      return now.status === 'PENDING' || now.status === 'STARTING' ? undefined : now;
    }, 60_000);
    expect(started.status).toBe('ACTIVE');
    // Booked anew, it is no longer a preempted lease: its reason went with the cut.
    expect(String(started.status_reason ?? '')).not.toMatch(/preempted/);
  });

  it('a cut whose tell comes only after an update booked the lease anew does not cut it', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-stale', start_date: at(2, 0), end_date: at(2, 4), reservations: [inPool('stale', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    const startMs = Date.parse(`${at(2, 0).replace(' ', 'T')}Z`);
    // A cut committed that leaves nothing of the window, its tell held (its next try an hour away: no sweep sends it).
    await withConnection(stack().db.pool, (client) => addOwedPreemption(client, { leaseId: lentId, endMs: startMs, neededFromMs: startMs }));
    await stack().db.pool.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [lentId]);
    const [{ sequence }] = (await stack().db.pool.query<{ sequence: number }>('SELECT (extract(epoch FROM created_at) * 1000)::float8 AS sequence FROM lease_preemptions WHERE lease_id = $1', [lentId])).rows;
    expect((await asA('PUT', `/v1/leases/${lentId}`, { start_date: at(3, 0), end_date: at(3, 4) })).status).toBe(200);
    // The held tell arrives after the update (a sweep's retry): ignored.
    await stack().temporal.client.workflow.getHandle(`lease-${lentId}`).signal(leasePreempted, { endMs: startMs, neededFromMs: startMs, warningMs: 300_000, sequence });
    // A rename queued behind whatever the tell did under the lease's lock.
    expect((await asA('PUT', `/v1/leases/${lentId}`, { name: 'lent-stale-renamed' })).status).toBe(200);
    const lease = await leaseOf(lentId);
    expect({ name: lease.name, status: lease.status, end: String(lease.end_date).slice(0, 16) }).toEqual({ name: 'lent-stale-renamed', status: 'PENDING', end: at(3, 4).replace(' ', 'T').slice(0, 16) });
    expect(await hostsOf(lentId)).toHaveLength(1);
  });

  it('an update that moves nothing, sent after a cut committed and before its tell, applies the cut and succeeds (no 409 for those moments)', async () => {
    const hostId = await insertHost(stack().db.pool, { name: 'owed-1', capabilities: { pool: 'owed', rack: 'r1' } });
    const lent = await asA('POST', '/v1/leases', { name: 'lent-owed', start_date: at(5, 0), end_date: at(5, 4), reservations: [inPool('owed', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    const cutMs = Date.parse(`${at(5, 2).replace(' ', 'T')}Z`);
    // A regular booking cuts it from its third hour, committed with its tell held (its next try an hour away: no sweep sends it).
    const regular = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', 'owed']) }));
    const needing = reservationContext({ reservation: regular, leaseReservations: [regular], startMs: cutMs, endMs: cutMs + 3_600_000 });
    const calendar = new HostCalendar(stack().db.pool, { cleaningMs: 0, randomChoice: false });
    await bookInTransaction(stack().db.pool, async (client) => {
      await calendar.bookWithin(client, needing, { preempt: true });
      await client.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [lentId]);
    }, { retryExclusion: true });
    expect(await hostsOf(lentId)).toEqual([{ host_id: hostId, end_ms: cutMs }]);
    // The same host asked another way: nothing moves, but the booking is made again for the window the lease records.
    const samePlace = JSON.stringify(['and', ['==', '$pool', 'owed'], ['==', '$rack', 'r1']]);
    const updated = await asA('PUT', `/v1/leases/${lentId}`, { reservations: [{ id: lent.body.lease.reservations[0].id, resource_properties: samePlace }] });
    expect([updated.status, updated.body.error_message]).toEqual([200, undefined]);
    expect(updated.body.lease).toMatchObject({ status: 'PENDING', end_date: expect.stringMatching(new RegExp(`^${at(5, 2).replace(' ', 'T')}`)), status_reason: expect.stringMatching(/^preempted: /) });
    expect(await hostsOf(lentId)).toEqual([{ host_id: hostId, end_ms: cutMs }]);
    // Booked at the cut, the lease still owes it: the regular lease waits for it at most the eviction bound, and the calendar shows it cut.
    expect(await latestCutOf(stack().db.pool, lentId)).toMatchObject({ endMs: cutMs });
    expect(await preemptedAmong(stack().db.pool, [lentId])).toEqual([lentId]);
    // Its lessee heard of the cut, as from the tell.
    await eventually(() => Promise.resolve(noticesOf(lentId, 'lease.preempting').length > 0 ? true : undefined));
    // The tell goes now, as the outbox sends it (the row still owed): the workflow, which applied that cut, ignores it.
    const outbox = new LeaseOutbox({ pool: stack().db.pool, client: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, log: pino({ level: 'silent' }), ...stack().config.outbox });
    try {
      outbox.tellPreemptedSoon([lentId]);
      await eventually(async () => ((await stack().db.pool.query('SELECT 1 FROM lease_preemptions WHERE lease_id = $1 AND told_at IS NOT NULL', [lentId])).rowCount === 1 ? true : undefined));
    } finally {
      await outbox.stop();
    }
    // Handled: a workflow task completed after the signal (its history in order, not a wait).
    await eventually(async () => {
      const history = await leaseHistoryEvents(stack(), lentId);
      const signalled = history.findIndex((e) => e.workflowExecutionSignaledEventAttributes?.signalName === leasePreempted.name);
      return signalled >= 0 && history.slice(signalled).some((e) => e.workflowTaskCompletedEventAttributes) ? true : undefined;
    });
    expect(noticesOf(lentId, 'lease.preempting')).toHaveLength(1);
    expect(await leaseOf(lentId)).toMatchObject({ end_date: updated.body.lease.end_date, status_reason: updated.body.lease.status_reason });
    expect(await hostsOf(lentId)).toEqual([{ host_id: hostId, end_ms: cutMs }]);
  });

  it('an update refused before the tell of a cut that leaves nothing of the lease answers that the lease was preempted, not the capacity it lacks', async () => {
    await insertHost(stack().db.pool, { name: 'owed-gone-1', capabilities: { pool: 'owed-gone' } });
    const lent = await asA('POST', '/v1/leases', { name: 'lent-owed-gone', start_date: at(6, 1), end_date: at(6, 3), reservations: [inPool('owed-gone', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    // A regular booking takes its whole window, committed with its tell held (its next try an hour away).
    const fromMs = Date.parse(`${at(6, 0).replace(' ', 'T')}Z`);
    const regular = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', 'owed-gone']) }));
    const needing = reservationContext({ reservation: regular, leaseReservations: [regular], startMs: fromMs, endMs: fromMs + 4 * 3_600_000 });
    const calendar = new HostCalendar(stack().db.pool, { cleaningMs: 0, randomChoice: false });
    await bookInTransaction(stack().db.pool, async (client) => {
      await calendar.bookWithin(client, needing, { preempt: true });
      await client.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [lentId]);
    }, { retryExclusion: true });
    const samePlace = JSON.stringify(['and', ['==', '$pool', 'owed-gone'], ['!=', '$pool', 'other']]);
    const updated = await asA('PUT', `/v1/leases/${lentId}`, { reservations: [{ id: lent.body.lease.reservations[0].id, resource_properties: samePlace }] });
    expect(updated).toEqual({ status: 409, body: { error_code: 409, error_name: 409, error_message: expect.stringMatching(/^Lease lent-owed-gone was preempted and has ended \(preempted: host needed by another lease from /) } });
    expect(await leaseOf(lentId)).toMatchObject({ status: 'TERMINATED', status_reason: expect.stringMatching(/^preempted: /) });
  });

  it('a lease booked at its owed cut by an update keeps the cut: once its earlier lease ends past the cut, it ends unstarted', async () => {
    await insertHost(stack().db.pool, { name: 'kept-1', capabilities: { pool: 'kept' } });
    let releaseRegular: () => void = () => undefined;
    holdRegularEnds = new Promise((resolve) => (releaseRegular = resolve));
    try {
      const base = Date.now();
      const earlier = await asA('POST', '/v1/leases', { name: 'kept-earlier', start_date: 'now', end_date: inSeconds(6, base), reservations: [inPool('kept')] });
      const lent = await asA('POST', '/v1/leases', { name: 'kept-lent', start_date: inSeconds(6, base), end_date: inSeconds(3600, base), reservations: [inPool('kept', { preemptible: true })] });
      expect([earlier.status, lent.status]).toEqual([201, 201]);
      const lentId = lent.body.lease.id as string;
      // A regular booking cuts it 10 s after its start, committed with its tell held (its next try an hour away).
      const cutMs = Date.parse(`${String(lent.body.lease.start_date).slice(0, 19)}Z`) + 10_000;
      const regular = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', 'kept']) }));
      const needing = reservationContext({ reservation: regular, leaseReservations: [regular], startMs: cutMs, endMs: cutMs + 3_600_000 });
      const calendar = new HostCalendar(stack().db.pool, { cleaningMs: 0, randomChoice: false });
      await bookInTransaction(stack().db.pool, async (client) => {
        await calendar.bookWithin(client, needing, { preempt: true });
        await client.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [lentId]);
      }, { retryExclusion: true });
      // Refused as it was, applied the cut, booked again at it.
      const samePlace = JSON.stringify(['and', ['==', '$pool', 'kept'], ['!=', '$pool', 'other']]);
      const updated = await asA('PUT', `/v1/leases/${lentId}`, { reservations: [{ id: lent.body.lease.reservations[0].id, resource_properties: samePlace }] });
      expect(updated.status).toBe(200);
      expect(Date.parse(`${String(updated.body.lease.end_date).slice(0, 19)}Z`)).toBe(cutMs);
      // Its earlier lease's end is held: it waits at its start, and its (cut) end passes meanwhile.
      await eventually(async () => ((await leaseOf(lentId)).status === 'STARTING' && Date.now() > cutMs ? true : undefined), 30_000);
      releaseRegular();
      const ended = await eventually(async () => {
        const now = await leaseOf(lentId);
        return now.status === 'TERMINATED' ? now : undefined;
      }, 30_000);
      // Never started on the host the regular lease holds from the cut.
      expect(Object.fromEntries(ended.events.map((e: { event_type: string; status: string }) => [e.event_type, e.status]))).toMatchObject({ start_lease: 'UNDONE', end_lease: 'DONE' });
      expect(ended.status_reason).toMatch(/^preempted: /);
    } finally {
      releaseRegular();
      holdRegularEnds = undefined;
    }
  });

  it('charges nothing for a preemptible lease whose whole window was taken before it started', async () => {
    const asC = apiClient(() => stack().url, { 'x-project-id': 'project-c', 'x-user-id': 'carol', 'x-roles': 'member' });
    const lent = await asC('POST', '/v1/leases', { name: 'lent-unused', start_date: at(32, 1), end_date: at(32, 2), reservations: [inPool('unused', { preemptible: true })] });
    expect(lent.status).toBe(201);
    const usage = async () => (await asC('GET', `/v1/usage?${new URLSearchParams({ from: at(32, 0), to: at(33, 0) }).toString()}`)).body.usage.groups as { booked: { host_hours: number } }[];
    expect((await usage()).map((g) => g.booked.host_hours)).toEqual([1]);
    expect((await asB('POST', '/v1/leases', { name: 'regular-unused', start_date: at(32, 0), end_date: at(32, 3), reservations: [inPool('unused')] })).status).toBe(201);
    const ended = await eventually(async () => {
      const now = await leaseOf(lent.body.lease.id, asC);
      return now.status === 'TERMINATED' ? now : undefined;
    });
    expect(ended.end_date).toBe(ended.start_date);
    expect((await usage()).reduce((sum, g) => sum + g.booked.host_hours, 0)).toBe(0);
  });

  it('ends at once a preemptible lease waiting for approval whose whole window a regular lease takes', async () => {
    const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-user-id': 'root', 'x-roles': 'admin' });
    expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { approval: [{ hosts_over: 0, timeout: 600 }] })).status).toBe(200);
    try {
      const lent = await asA('POST', '/v1/leases', { name: 'lent-appr', start_date: at(31, 1), end_date: at(31, 2), reservations: [inPool('appr', { preemptible: true })] });
      expect(lent.body.lease.status).toBe('PENDING_APPROVAL');
      const needing = await asB('POST', '/v1/leases', { name: 'regular-appr', start_date: at(31, 0), end_date: at(31, 3), reservations: [inPool('appr')] });
      expect(needing.status).toBe(201);
      const ended = await eventually(async () => {
        const now = await leaseOf(lent.body.lease.id);
        return now.status === 'TERMINATED' ? now : undefined;
      });
      expect(ended.status_reason).toBe(`preempted: host needed by another lease from ${at(31, 0)}`);
      expect(ended.approval).toMatchObject({ outcome: 'denied', answered_by: 'preempted' });
      expect(Object.fromEntries(ended.events.map((e: { event_type: string; status: string }) => [e.event_type, e.status]))).toMatchObject({ start_lease: 'UNDONE', end_lease: 'DONE' });
      expect(ended.end_date).toBe(ended.start_date);
      expect((await asAdmin('POST', `/v1/leases/${lent.body.lease.id}/approve`, {})).status).toBe(409);
    } finally {
      expect((await asAdmin('PUT', '/v1/projects/project-a/policy', { approval: null })).status).toBe(200);
    }
  });

  it('a regular lease that waits for approval never preempts: refused for capacity (409 with offers) when it fits only by preempting', async () => {
    const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-user-id': 'root', 'x-roles': 'admin' });
    const lent = await asA('POST', '/v1/leases', { name: 'lent-ask', start_date: at(33, 1), end_date: at(33, 3), reservations: [inPool('ask', { preemptible: true })] });
    expect(lent.status).toBe(201);
    expect((await asAdmin('PUT', '/v1/projects/project-b-secret/policy', { approval: [{ hosts_over: 0, timeout: 600 }] })).status).toBe(200);
    try {
      const asking = await asB('POST', '/v1/leases', { name: 'regular-ask', start_date: at(33, 2), end_date: at(33, 4), reservations: [inPool('ask')] });
      expect(asking.status).toBe(409);
      expect(asking.body).toMatchObject({ reason: 'capacity', offers: expect.any(Array) });
      // Held for approval it could not cut: its offers start after the preemptible lease.
      expect(asking.body.offers[0]).toMatchObject({ start_date: at(33, 3) });
      expect((await hostsOf(lent.body.lease.id)).map((r) => r.end_ms)).toEqual([Date.parse(`${at(33, 3).replace(' ', 'T')}:00Z`)]);
      expect((await stack().db.pool.query('SELECT 1 FROM lease_preemptions WHERE lease_id = $1', [lent.body.lease.id])).rowCount).toBe(0);
    } finally {
      expect((await asAdmin('PUT', '/v1/projects/project-b-secret/policy', { approval: null })).status).toBe(200);
    }
  });

  it('a regular lease starting sooner than the warning waits for the preempted lease\'s end, at most the eviction bound', async () => {
    let release: () => void = () => undefined;
    holdPreemptibleEnds = new Promise((resolve) => (release = resolve));
    try {
      const lent = await asA('POST', '/v1/leases', { name: 'lent-short', start_date: 'now', end_date: inSeconds(3600), reservations: [inPool('short', { preemptible: true })] });
      const lentId = lent.body.lease.id as string;
      await eventually(async () => ((await leaseOf(lentId)).status === 'ACTIVE' ? true : undefined));
      const needing = await asB('POST', '/v1/leases', { name: 'regular-short', start_date: inSeconds(5), end_date: inSeconds(600), reservations: [inPool('short')] });
      expect(needing.status).toBe(201);
      const needingId = needing.body.lease.id as string;
      const notice = await eventually(() => Promise.resolve(noticesOf(lentId, 'lease.preempting')[0]));
      expect(notice.body.payload).toMatchObject({ warning_short: true, warning_configured_seconds: 300 });
      // The preempted lease's end is held: the regular lease starts once the bound has passed, the other still ending.
      const started = await eventually(async () => ((await leaseOf(needingId, asB)).status === 'ACTIVE' ? true : undefined), 60_000);
      expect(started).toBe(true);
      expect((await leaseOf(lentId)).status).toBe('TERMINATING');
      // It did wait: the bound's timer (the eviction seconds, not the minute a start waits between looks).
      const timers = (await leaseHistoryEvents(stack(), needingId)).filter((e) => e.timerStartedEventAttributes);
      const seconds = timers.map((e) => Number(String(e.timerStartedEventAttributes!.startToFireTimeout!.seconds ?? 0)));
      expect(seconds.some((s) => s > 0 && s <= EVICTION_SECONDS)).toBe(true);
    } finally {
      release();
      holdPreemptibleEnds = undefined;
    }
    const lentEnded = await eventually(async () => {
      const leases = (await asA('GET', '/v1/leases')).body.leases as Array<{ name: string; status: string; status_reason?: string }>;
      const lease = leases.find((l) => l.name === 'lent-short');
      return lease?.status === 'TERMINATED' ? lease : undefined;
    });
    expect(lentEnded.status_reason).toMatch(/^preempted: host needed by another lease from /);
  });

  it('a regular lease waiting for a regular and a preempted earlier lease starts within the eviction bound once the regular one ended', async () => {
    const inSlot = (slot: string, fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$slot', slot]), ...fields });
    let releaseRegular: () => void = () => undefined;
    let releasePreemptible: () => void = () => undefined;
    holdRegularEnds = new Promise((resolve) => (releaseRegular = resolve));
    holdPreemptibleEnds = new Promise((resolve) => (releasePreemptible = resolve));
    try {
      const base = Date.now();
      const regular = await asA('POST', '/v1/leases', { name: 'mix-regular', start_date: 'now', end_date: inSeconds(8, base), reservations: [inSlot('r')] });
      const lent = await asA('POST', '/v1/leases', { name: 'mix-lent', start_date: 'now', end_date: inSeconds(3600, base), reservations: [inSlot('p', { preemptible: true })] });
      expect([regular.status, lent.status]).toEqual([201, 201]);
      const needing = await asB('POST', '/v1/leases', { name: 'mix-needing', start_date: inSeconds(8, base), end_date: inSeconds(3600, base), reservations: [inPool('mix', { min: 2, max: 2 })] });
      expect(needing.status).toBe(201);
      const needingId = needing.body.lease.id as string;
      // Both earlier leases' ends are held: the lease waits at its start for both.
      await eventually(async () => ((await leaseOf(needingId, asB)).status === 'STARTING' && (await leaseOf(regular.body.lease.id)).status === 'TERMINATING' ? true : undefined));
      releaseRegular();
      // The regular one ended; the preempted one is still ending: the bound (3 s) runs from now, not from the minute's recheck.
      const started = await eventually(async () => ((await leaseOf(needingId, asB)).status === 'ACTIVE' ? true : undefined), 30_000);
      expect(started).toBe(true);
      expect((await leaseOf(lent.body.lease.id)).status).toBe('TERMINATING');
    } finally {
      releaseRegular();
      releasePreemptible();
      holdRegularEnds = undefined;
      holdPreemptibleEnds = undefined;
    }
  });
});
