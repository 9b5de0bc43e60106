/**
 * GET /v1/usage against the real stack: leases booked through the API by two projects (in months
 * computed from today, never from the clock's seconds) and past leases written straight into the
 * leases table (ended, late-ended, failed, deleted), reported per project, month and resource
 * type, as JSON (valid against the OpenAPI description) and as CSV; members see only their own
 * project; malformed queries get Blazar's error body. A lender's hosts lent (issue 43) and its credit.
 */
import { randomUUID } from 'node:crypto';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { saveLease } from '../src/db/leases';
import { meteredLeaseBatches } from '../src/db/leases';
import { insertHostBooking, lenderRowsOf } from '../src/db/host-allocations';
import { insertLendings, markReturned } from '../src/db/host-lendings';
import { inTransaction } from '../src/db/transaction';
import type { Lease, LeaseEvent, Reservation } from '../src/domain/lease';
import type { UsageFigures } from '../src/domain/usage-report';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { insertHostBookingRows } from '../dev-stack/fixtures/lease-rows';
import { apiClient, eventually, useTestStack, type ApiCall } from '../dev-stack/stack';

const ALICE = { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' };
const BOB = { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' };
const ADMIN = { 'x-auth-token': 'admin' };
/** A project id a spreadsheet would run as a formula, with a comma and a quote to escape besides. */
const ODD_PROJECT = '=SUM(1,2)"x"';
const ODD = { 'x-project-id': ODD_PROJECT, 'x-user-id': 'odd', 'x-roles': 'member' };

const HOUR = 3_600_000;
const dateOf = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
const leaseDate = (ms: number) => `${new Date(ms).toISOString().slice(0, 23)}000`;
const monthOf = (ms: number) => new Date(ms).toISOString().slice(0, 7);
const figures = (fields: Partial<UsageFigures> = {}): UsageFigures => ({ host_hours: 0, vcpu_hours: 0, memory_gb_hours: 0, disk_gb_hours: 0, bandwidth_mbps_hours: 0, floating_ip_hours: 0, network_hours: 0, ...fields });
const query = (params: Record<string, string>) => `/v1/usage?${new URLSearchParams(params).toString()}`;
/** A group of regular leases only: charged as booked and used, no preemptible part. */
const regular = <G extends { booked: UsageFigures; used: UsageFigures; leases: number }>(group: G) => ({ ...group, charged: { booked: group.booked, used: group.used } });
/** The total of regular leases only: its preemptible part is zero. */
const regularTotal = (total: { booked: UsageFigures; used: UsageFigures; leases: number }) => ({ ...regular(total), preemptible: { booked: figures(), used: figures(), leases: 0 } });

/** Months from today's: the leases below are booked two and three months ahead, across a month end. */
const today = new Date();
const monthStart = (ahead: number) => Date.UTC(today.getUTCFullYear(), today.getUTCMonth() + ahead, 1);
const M2 = monthStart(2);
const M3 = monthStart(3);
const M4 = monthStart(4);
/** Alice's lease: one host from the 28th of the first month to the 3rd of the next. */
const A1 = { startMs: Date.UTC(new Date(M2).getUTCFullYear(), new Date(M2).getUTCMonth(), 28, 10), endMs: Date.UTC(new Date(M3).getUTCFullYear(), new Date(M3).getUTCMonth(), 3, 10) };
const A1_BEFORE_MONTH_END = (M3 - A1.startMs) / HOUR;
const A1_AFTER_MONTH_END = (A1.endMs - M3) / HOUR;
/** Bob's lease: two hosts for a day, the 10th of the first month. */
const B1 = { startMs: M2 + 9 * 24 * HOUR, endMs: M2 + 10 * 24 * HOUR };
const FUTURE = { from: dateOf(M2), to: dateOf(M4) };

/** A small RFC 4180 reader: quoted fields, doubled quotes, CRLF line ends. */
function parseCsv(text: string): string[][] {
  expect(text.endsWith('\r\n')).toBe(true);
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted && c === '"' && text[i + 1] === '"') {
      field += '"';
      i++;
    } else if (c === '"') {
      quoted = !quoted;
    } else if (!quoted && (c === ',' || c === '\r')) {
      row.push(field);
      field = '';
      if (c === '\r') {
        rows.push(row);
        row = [];
        i++; // the \n
      }
    } else {
      field += c;
    }
  }
  return rows;
}

describe('GET /v1/usage', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const asAlice = apiClient(() => stack().url, ALICE);
  const asBob = apiClient(() => stack().url, BOB);
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const asOdd = apiClient(() => stack().url, ODD);
  let validateAnswer: (path: string, answer: ApiCall) => void;

  /** A past lease written straight into the table, as its workflow would have left it. */
  async function pastLease(projectId: string, fields: { start: string; end: string; status: Lease['status']; events: Array<Omit<LeaseEvent, 'id' | 'time'> & { time: string }>; footprint: Reservation['footprint']; deletedAt?: string }): Promise<string> {
    const id = randomUUID();
    const startMs = Date.parse(`${fields.start}Z`);
    const lease: Lease = {
      id, name: `past-${id.slice(0, 8)}`, projectId, userId: 'someone', startMs, endMs: Date.parse(`${fields.end}Z`), status: fields.status,
      reservations: [{ id: randomUUID(), resource_type: 'physical:host', status: 'deleted', params: {}, footprint: fields.footprint }],
      events: fields.events.map((e) => ({ ...e, id: randomUUID(), time: Date.parse(`${e.time}Z`) })),
      createdMs: startMs - 86_400_000, updatedMs: startMs, version: 5,
    };
    expect(await saveLease(stack().db.pool, lease)).toBe('saved');
    if (fields.deletedAt) await stack().db.pool.query("UPDATE leases SET deleted_at = $2::timestamptz, status = 'DELETED' WHERE id = $1", [id, `${fields.deletedAt}Z`]);
    return id;
  }
  const past: Record<string, string> = {};

  beforeAll(async () => {
    for (const name of ['usage-host-1', 'usage-host-2', 'usage-host-3']) await insertHost(stack().db.pool, { name });
    const alices = await asAlice('POST', '/v1/leases', { name: 'a1', start_date: dateOf(A1.startMs), end_date: dateOf(A1.endMs), reservations: [hostReservation()] });
    const bobs = await asBob('POST', '/v1/leases', { name: 'b1', start_date: dateOf(B1.startMs), end_date: dateOf(B1.endMs), reservations: [hostReservation({ min: 2, max: 2 })] });
    expect([alices.status, bobs.status]).toEqual([201, 201]);

    // March 2024, project-a: ended (used from 00:30), deleted mid-way, failed at its start, deleted before the month, ended an hour late just into it.
    const done = (type: LeaseEvent['event_type'], time: string, more: Pick<LeaseEvent, 'startedAt' | 'finishedAt'> = {}) => ({ event_type: type, time, status: 'DONE' as const, ...more });
    past.ended = await pastLease('project-a', { start: '2024-03-10T00:00', end: '2024-03-12T00:00', status: 'TERMINATED', footprint: { hosts: 2 }, events: [done('start_lease', '2024-03-10T00:00', { finishedAt: Date.UTC(2024, 2, 10, 0, 30) }), done('end_lease', '2024-03-12T00:00')] });
    past.deleted = await pastLease('project-a', { start: '2024-03-20T00:00', end: '2024-03-25T00:00', status: 'ACTIVE', footprint: { vcpus: 8 }, deletedAt: '2024-03-21T06:00', events: [done('start_lease', '2024-03-20T00:00'), { event_type: 'end_lease', time: '2024-03-25T00:00', status: 'UNDONE' }] });
    past.failed = await pastLease('project-a', { start: '2024-03-05T00:00', end: '2024-03-06T00:00', status: 'ERROR', footprint: { hosts: 3 }, events: [{ event_type: 'start_lease', time: '2024-03-05T00:00', status: 'ERROR' }, { event_type: 'end_lease', time: '2024-03-06T00:00', status: 'UNDONE' }] });
    past.deletedBefore = await pastLease('project-a', { start: '2024-02-10T00:00', end: '2024-03-05T00:00', status: 'ACTIVE', footprint: { hosts: 1 }, deletedAt: '2024-02-20T00:00', events: [done('start_lease', '2024-02-10T00:00'), { event_type: 'end_lease', time: '2024-03-05T00:00', status: 'UNDONE' }] });
    past.lateEnd = await pastLease('project-a', { start: '2024-02-27T00:00', end: '2024-03-01T00:00', status: 'TERMINATED', footprint: { hosts: 1 }, events: [done('start_lease', '2024-02-27T00:00'), done('end_lease', '2024-03-01T00:00', { startedAt: Date.UTC(2024, 2, 1, 1) })] });
    past.odd = await pastLease(ODD_PROJECT, { start: '2024-03-01T00:00', end: '2024-03-02T00:00', status: 'TERMINATED', footprint: { hosts: 1 }, events: [done('start_lease', '2024-03-01T00:00'), done('end_lease', '2024-03-02T00:00')] });

    // Answers are checked against the API's own description of them.
    const doc = (await (await fetch(`${stack().url}/v1/openapi.json`)).json()) as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema({ ...doc, $id: 'openapi' });
    validateAnswer = (path, answer) => {
      expect(Object.keys(doc.paths['/v1/usage'].get.responses)).toContain(String(answer.status));
      const validate = ajv.getSchema(`openapi#/paths/${path.replace(/\//g, '~1')}/get/responses/${answer.status}/content/application~1json/schema`)!;
      expect({ status: answer.status, errors: validate(answer.body) ? null : validate.errors }).toEqual({ status: answer.status, errors: null });
    };
  });

  const usage = async (api: typeof asAlice, params: Record<string, string>): Promise<ApiCall> => {
    const answer = await api('GET', query(params));
    validateAnswer('/v1/usage', answer);
    return answer;
  };

  it("shows a member their own project's pending lease as hosts × hours booked, nothing used", async () => {
    const hours = A1_BEFORE_MONTH_END + A1_AFTER_MONTH_END;
    const answer = await usage(asAlice, FUTURE);
    expect(answer).toEqual({
      status: 200,
      body: {
        usage: {
          from: leaseDate(M2), to: leaseDate(M4), group_by: ['project'], preemptible_charge_factor: 0.25,
          groups: [regular({ project_id: 'project-a', booked: figures({ host_hours: hours }), used: figures(), leases: 1 })],
          total: regularTotal({ booked: figures({ host_hours: hours }), used: figures(), leases: 1 }),
        },
      },
    });
    expect((await usage(asAlice, { ...FUTURE, project_id: 'project-a' })).body).toEqual(answer.body);
  });

  it("refuses a member another project's usage with Blazar's error body", async () => {
    expect(await usage(asAlice, { ...FUTURE, project_id: 'project-b' })).toEqual({ status: 403, body: { error_code: 403, error_name: 403, error_message: "only admins can see other projects' usage" } });
    expect((await usage(asBob, FUTURE)).body.usage.groups).toEqual([regular({ project_id: 'project-b', booked: figures({ host_hours: 48 }), used: figures(), leases: 1 })]);
  });

  it('shows an admin every project, or one, and splits by month at the month end', async () => {
    const a = figures({ host_hours: A1_BEFORE_MONTH_END + A1_AFTER_MONTH_END });
    expect((await usage(asAdmin, FUTURE)).body.usage.groups).toEqual([
      regular({ project_id: 'project-a', booked: a, used: figures(), leases: 1 }),
      regular({ project_id: 'project-b', booked: figures({ host_hours: 48 }), used: figures(), leases: 1 }),
    ]);
    expect((await usage(asAdmin, { ...FUTURE, project_id: 'project-b' })).body.usage.groups.map((g: { project_id: string }) => g.project_id)).toEqual(['project-b']);

    const byMonth = (await usage(asAdmin, { ...FUTURE, group_by: 'project,month' })).body.usage;
    expect(byMonth.group_by).toEqual(['project', 'month']);
    expect(byMonth.groups).toEqual([
      regular({ project_id: 'project-a', month: monthOf(M2), booked: figures({ host_hours: A1_BEFORE_MONTH_END }), used: figures(), leases: 1 }),
      regular({ project_id: 'project-a', month: monthOf(M3), booked: figures({ host_hours: A1_AFTER_MONTH_END }), used: figures(), leases: 1 }),
      regular({ project_id: 'project-b', month: monthOf(M2), booked: figures({ host_hours: 48 }), used: figures(), leases: 1 }),
    ]);
    expect(byMonth.total).toEqual(regularTotal({ booked: figures({ host_hours: A1_BEFORE_MONTH_END + A1_AFTER_MONTH_END + 48 }), used: figures(), leases: 2 }));

    expect((await usage(asAdmin, { ...FUTURE, group_by: 'month,resource_type' })).body.usage.groups).toEqual([
      regular({ month: monthOf(M2), resource_type: 'physical:host', booked: figures({ host_hours: A1_BEFORE_MONTH_END + 48 }), used: figures(), leases: 2 }),
      regular({ month: monthOf(M3), resource_type: 'physical:host', booked: figures({ host_hours: A1_AFTER_MONTH_END }), used: figures(), leases: 1 }),
    ]);
    // A window that ends at the month end keeps only what lies before it.
    expect((await usage(asAdmin, { from: FUTURE.from, to: dateOf(M3), project_id: 'project-a' })).body.usage.total.booked).toEqual(figures({ host_hours: A1_BEFORE_MONTH_END }));
  });

  it('takes a deleted pending lease out of what is booked', async () => {
    const created = await asAlice('POST', '/v1/leases', { name: 'a2', start_date: dateOf(M3 + 9 * 24 * HOUR), end_date: dateOf(M3 + 10 * 24 * HOUR), reservations: [hostReservation()] });
    expect(created.status).toBe(201);
    const before = A1_BEFORE_MONTH_END + A1_AFTER_MONTH_END;
    expect((await usage(asAlice, FUTURE)).body.usage.total).toEqual(regularTotal({ booked: figures({ host_hours: before + 24 }), used: figures(), leases: 2 }));
    expect((await asAlice('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
    const after = await eventually(async () => {
      const { total } = (await usage(asAlice, FUTURE)).body.usage;
      return total.leases === 1 ? total : undefined;
    });
    expect(after).toEqual(regularTotal({ booked: figures({ host_hours: before }), used: figures(), leases: 1 }));
  });

  it('counts past leases by what they used: ended, deleted, ended late into the window; not those failed at start or deleted before', async () => {
    const march = { from: '2024-03-01 00:00', to: '2024-04-01 00:00' };
    const answer = (await usage(asAlice, { ...march, group_by: 'project,month' })).body.usage;
    // Ended: 2 hosts booked 48 h, used 47.5 h. Deleted after 30 h: 8 vCPUs booked and used 30 h. Ended an hour late: 1 host used 1 h.
    expect(answer.groups).toEqual([
      regular({ project_id: 'project-a', month: '2024-03', booked: figures({ host_hours: 96, vcpu_hours: 240 }), used: figures({ host_hours: 96, vcpu_hours: 240 }), leases: 3 }),
    ]);
    // The reader pages by (project, id): every lease that may count, once, whatever the batch size.
    const ids = async (projectId?: string) => {
      const seen: string[] = [];
      for await (const batch of meteredLeaseBatches(stack().db.pool, { projectId, span: { startMs: Date.UTC(2024, 2, 1), endMs: Date.UTC(2024, 3, 1) } }, 2)) {
        expect(batch.length).toBeLessThanOrEqual(2);
        seen.push(...batch.map((m) => m.lease.id));
      }
      return seen;
    };
    const projectA = [past.ended, past.deleted, past.failed, past.lateEnd];
    expect((await ids('project-a')).sort()).toEqual([...projectA].sort());
    expect((await ids()).sort()).toEqual([...projectA, past.odd].sort());
  });

  it('answers CSV with the same figures, quoting and neutralising what a spreadsheet would run', async () => {
    const json = (await usage(asAdmin, { ...FUTURE, group_by: 'project,month' })).body.usage;
    const res = await fetch(`${stack().url}${query({ ...FUTURE, group_by: 'project,month' })}`, { headers: { ...ADMIN, accept: 'text/csv' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    const [header, ...lines] = parseCsv(await res.text());
    const names = Object.keys(figures());
    const columns = (prefix: string) => [...names.map((f) => `${prefix}booked_${f}`), ...names.map((f) => `${prefix}used_${f}`)];
    expect(header).toEqual(['project_id', 'month', ...columns(''), 'leases', ...columns('charged_'), ...columns('preemptible_'), 'preemptible_leases', 'lent_host_hours', 'borrowed_credit_hours']);
    const figuresAt = (fields: string[], from: number) => Object.fromEntries(names.map((f, i) => [f, Number(fields[from + i])]));
    const parsed = lines.map((fields) => ({
      project_id: fields[0],
      month: fields[1],
      booked: figuresAt(fields, 2),
      used: figuresAt(fields, 2 + names.length),
      leases: Number(fields[2 + 2 * names.length]),
      charged: { booked: figuresAt(fields, 3 + 2 * names.length), used: figuresAt(fields, 3 + 3 * names.length) },
      // No preemptible lease nor lending here: those parts are zeros, and the JSON leaves them out.
      preemptible: fields.slice(3 + 4 * names.length).map(Number),
    }));
    expect(parsed).toEqual(json.groups.map((g: object) => ({ ...g, preemptible: new Array(2 * names.length + 3).fill(0) })));

    const odd = await fetch(`${stack().url}${query({ from: '2024-03-01 00:00', to: '2024-04-01 00:00' })}`, { headers: { ...ODD, accept: 'text/csv' } });
    const text = await odd.text();
    expect(text.split('\r\n')[1]).toBe(`"'=SUM(1,2)""x""",24,0,0,0,0,0,0,24,0,0,0,0,0,0,1,24,0,0,0,0,0,0,24,0,0,0,0,0,0,${'0,'.repeat(16)}0`);
    expect(parseCsv(text)[1][0]).toBe(`'${ODD_PROJECT}`);
    expect((await usage(asOdd, { from: '2024-03-01 00:00', to: '2024-04-01 00:00' })).body.usage.groups[0].project_id).toBe(ODD_PROJECT); // JSON says it as it is
  });

  it("shows a lender's hosts lent and, once back, its credit for the borrowed hours, taken off its charged host-hours", async () => {
    const pool = stack().db.pool;
    const hostId = await insertHost(pool, { name: 'usage-lent-host' });
    const at = (day: number, hour: number) => Date.UTC(2024, 5, day, hour);
    const done = (type: LeaseEvent['event_type'], time: string) => ({ event_type: type, time, status: 'DONE' as const });
    // June 2024: project-l's lease holds one host for 48 h; lends it twice, both back.
    const leaseId = await pastLease('project-l', { start: '2024-06-10T00:00', end: '2024-06-12T00:00', status: 'TERMINATED', footprint: { hosts: 1 }, events: [done('start_lease', '2024-06-10T00:00'), done('end_lease', '2024-06-12T00:00')] });
    await insertHostBookingRows(pool, [{ hostId, lease: { id: leaseId, projectId: 'project-l', startMs: at(10, 0), endMs: at(12, 0) } as Lease }]);
    const reservationId = (await pool.query<{ id: string }>('SELECT reservation_id::text AS id FROM host_allocations WHERE lease_id = $1', [leaseId])).rows[0].id;
    const lend = (fromMs: number, untilMs: number) =>
      inTransaction(pool, async (client) => (await insertLendings(client, { lendingId: randomUUID(), reservationId, leaseId, projectId: 'project-l', hosts: await lenderRowsOf(client, reservationId, [hostId]), fromMs, untilMs }))[0]);
    // 12 h lent, 8 h of it borrowed as recorded at its return.
    const first = await lend(at(10, 6), at(10, 18));
    await inTransaction(pool, (client) => markReturned(client, [{ id: first.id, borrowedMs: 8 * HOUR }], at(10, 18)));
    // 6 h lent, a borrower's 2 h in it, back with nothing recorded: summed from the borrower's row.
    const second = await lend(at(11, 0), at(11, 6));
    await inTransaction(pool, (client) =>
      insertHostBooking(client, { hostId, reservationId: randomUUID(), leaseId: randomUUID(), projectId: 'project-x', fromMs: at(11, 1), endMs: at(11, 3), leadMs: 0, cleaningMs: 0, unbounded: false, bookingKey: 'borrower', preemptible: true, lentBy: { id: second.id, during: second.during } }),
    );
    await pool.query("UPDATE host_lendings SET returned_at = $2::timestamptz WHERE id = $1", [second.id, new Date(at(11, 6)).toISOString()]);

    const june = { from: '2024-06-01 00:00', to: '2024-07-01 00:00', project_id: 'project-l' };
    const credited = 48 - 10 * 0.25;
    const lender = {
      project_id: 'project-l', booked: figures({ host_hours: 48 }), used: figures({ host_hours: 48 }), leases: 1,
      charged: { booked: figures({ host_hours: credited }), used: figures({ host_hours: credited }) }, lent: { host_hours: 18 }, borrowed_credit_hours: 2.5,
    };
    const report = (await usage(asAdmin, june)).body.usage;
    expect(report.groups).toEqual([lender]);
    expect(report.total).toMatchObject({ lent: { host_hours: 18 }, borrowed_credit_hours: 2.5, charged: lender.charged });
    // Before the second came back, within its window: lent as far as it went, credited for the first only.
    const firstDay = (await usage(asAdmin, { ...june, to: '2024-06-11 03:00' })).body.usage.groups[0];
    expect(firstDay).toMatchObject({ lent: { host_hours: 15 }, borrowed_credit_hours: 2, charged: { booked: figures({ host_hours: 27 - 2 }) } });

    const csv = await fetch(`${stack().url}${query(june)}`, { headers: { ...ADMIN, accept: 'text/csv' } });
    expect(parseCsv(await csv.text())[1].slice(-2)).toEqual(['18', '2.5']);
  });

  it('defaults to this month so far, per project', async () => {
    const before = Date.now();
    const answer = await usage(asAlice, {});
    const after = Date.now();
    expect(answer.status).toBe(200);
    const { from, to, group_by: groupBy } = answer.body.usage;
    const monthStarts = [before, after].map((ms) => leaseDate(Date.UTC(new Date(ms).getUTCFullYear(), new Date(ms).getUTCMonth(), 1)));
    expect(monthStarts).toContain(from);
    const toMs = Date.parse(`${(to as string).slice(0, 23)}Z`);
    expect(toMs).toBeGreaterThanOrEqual(before);
    expect(toMs).toBeLessThanOrEqual(after);
    expect(groupBy).toEqual(['project']);
  });

  it.each([
    [{ group_by: 'hosts' }, 'group_by: unknown "hosts": expected a comma-separated list of resource_type, project, month'],
    [{ group_by: 'project,project' }, 'group_by: each of resource_type, project, month at most once'],
    [{ group_by: '' }, 'group_by: unknown "": expected a comma-separated list of resource_type, project, month'],
    [{ detail: 'true' }, 'unknown field(s) "detail"'],
    [{ from: 'tomorrow' }, 'tomorrow is an invalid date. Required format: %Y-%m-%d %H:%M. from: expected "YYYY-MM-DD HH:MM" (UTC)'],
    [{ from: '2031-01-02 00:00', to: '2031-01-01 00:00' }, 'to: must be after from (2031-01-02T00:00:00.000000)'],
    [{ from: '2031-01-01 00:00', to: '2031-01-01 00:00' }, 'to: must be after from (2031-01-01T00:00:00.000000)'],
    [{ from: '2999-01-01 00:00' }, 'to: must be after from (2999-01-01T00:00:00.000000); to is now unless given'],
    [{ from: '2020-01-01 00:00', to: '2031-01-01 00:00' }, 'to: at most ten years after from'],
  ])('refuses %j with a 400 naming the problem', async (params, message) => {
    expect(await usage(asAlice, params)).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: message } });
  });
});
