/**
 * Lent hosts at the ends of their lender and borrower (issue 43), against the real PostgreSQL and a
 * Nova in memory: the lender's snapshot and end act on the hosts in its aggregate and never touch a
 * lent host's servers (a borrower of its own project has servers there too); a borrower's snapshot
 * images only its own project's servers on the host it borrows, its `delete` end deletes only its own project's servers on the host it
 * borrows (a server its lender had scheduled before lending it comes back with the host), and its
 * `recycle` end waits for and deletes only its own.
 */
import { randomUUID } from 'node:crypto';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { leaseAggregateFor, lendHostsOut } from '../src/resources/physical-host/aggregates';
import { lenderRowsOf } from '../src/db/host-allocations';
import { insertLendings } from '../src/db/host-lendings';
import { inTransaction } from '../src/db/transaction';
import type { NovaClient } from '../src/openstack';
import type { EndContext, HookContext, ReservationContext } from '../src/domain/resource-plugin';
import type { PhysicalHostParams } from '../src/resources/physical-host/params';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { FakeNova, glance } from './support/fake-nova';
import type { Pool } from '../src/db/pool';

const H = 3_600_000;

describe('the ends of a lender and a borrower on lent hosts', () => {
  const database = useMigratedTestDatabase();
  let nova: FakeNova;
  let lender: ReservationContext<never>;
  let borrower: ReservationContext<never>;
  let hostNames: string[];
  let hostIds: string[];

  const hookContext = (ctx: ReservationContext<never>, params: Partial<PhysicalHostParams>): EndContext<PhysicalHostParams> => ({
    ...(ctx as ReservationContext<PhysicalHostParams>),
    reservation: { ...ctx.reservation, params: { ...(ctx.reservation.params as PhysicalHostParams), ...params } },
    leaseStatus: 'ACTIVE',
    reportProgress: () => undefined,
    placementOf: () => Promise.resolve({ hosts: [] }),
    announce: () => Promise.resolve(),
    started: true,
  });
  const plugin = () =>
    physicalHostPlugin({ pool: database().pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => ({ nova: nova as unknown as NovaClient, glance }), freepool: 'pool' });
  const context = (project: string, preemptible: boolean, fromMs: number, toMs: number, min: number) => {
    const reservation = pendingReservation('physical:host', { min, max: min, hypervisor_properties: '', resource_properties: '', before_end: 'default', on_end: 'delete', preemptible });
    return reservationContext({ reservation, startMs: fromMs, endMs: toMs, projectId: project, leaseStatus: 'ACTIVE' });
  };

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, host_capabilities, hosts RESTART IDENTITY CASCADE');
    hostNames = [`end-a-${randomUUID().slice(0, 6)}`, `end-b-${randomUUID().slice(0, 6)}`];
    hostIds = [await insertHost(pool, { name: hostNames[0] }), await insertHost(pool, { name: hostNames[1] })];
    const calendar = new HostCalendar(pool, { cleaningMs: 0, randomChoice: false });
    const now = Date.now();
    // The lender (project p) holds both hosts and lends the second; a preemptible lease of project q borrows it.
    lender = context('p', false, now - H, now + 9 * H, 2);
    await calendar.book(lender);
    await inTransaction(pool, async (client) =>
      insertLendings(client, { lendingId: randomUUID(), reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', hosts: await lenderRowsOf(client, lender.reservation.id, [hostIds[1]]), fromMs: now - H, untilMs: now + 4 * H }),
    );
    borrower = context('q', true, now - H / 2, now + 3 * H, 1);
    expect((await calendar.book(borrower)).map((h) => h.id)).toEqual([hostIds[1]]);
    nova = new FakeNova();
    nova.aggregate('pool', []);
    const zoneOf = (ctx: ReservationContext<never>) => leaseAggregateFor(ctx.reservation.id).availabilityZone;
    nova.aggregate(leaseAggregateFor(lender.reservation.id).name, [hostNames[0]], { 'leasekeeper:reservation': lender.reservation.id, 'leasekeeper:lease': lender.leaseId }, zoneOf(lender));
    nova.aggregate(leaseAggregateFor(borrower.reservation.id).name, [hostNames[1]], { 'leasekeeper:reservation': borrower.reservation.id, 'leasekeeper:lease': borrower.leaseId }, zoneOf(borrower));
    nova.servers = [
      { id: 'lender-own', name: 'own', host: hostNames[0], project: 'p' },
      { id: 'borrower-own', name: 'borrowed', host: hostNames[1], project: 'q' },
      // Scheduled by the lender before it lent the host: it landed there after the fence.
      { id: 'lender-stray', name: 'stray', host: hostNames[1], project: 'p' },
    ];
  });

  it("images only the servers on the lender's own hosts before its end, never a borrower's", async () => {
    await plugin().beforeEnd!(hookContext(lender, { before_end: 'snapshot' }));
    expect(nova.imaged).toEqual(['lender-own']);
  });

  it("images only the borrower's own servers on the host it borrows", async () => {
    await plugin().beforeEnd!(hookContext(borrower, { before_end: 'snapshot' }));
    expect(nova.imaged).toEqual(['borrower-own']);
  });

  it("ends the lender on the hosts of its aggregate, every server on the host it lends and the borrower's aggregate untouched", async () => {
    expect(await plugin().end(hookContext(lender, { on_end: 'delete' }))).toEqual({});
    // lender-stray is of the lender's project, as a borrower of its own project's servers would be: not the lender's to delete.
    expect(nova.servers.map((s) => s.id).sort()).toEqual(['borrower-own', 'lender-stray']);
    const where = Object.fromEntries(nova.aggregates.map((a) => [a.name, a.hosts]));
    expect(where).toEqual({ pool: [hostNames[0]], [leaseAggregateFor(borrower.reservation.id).name]: [hostNames[1]] });
  });

  it("deletes only the borrower's own servers on the host it borrows, and gives the host back to the pool", async () => {
    expect(await plugin().end(hookContext(borrower, { on_end: 'delete' }))).toEqual({});
    expect(nova.servers.map((s) => s.id).sort()).toEqual(['lender-own', 'lender-stray']);
    expect(nova.aggregates.find((a) => a.name === 'pool')?.hosts).toEqual([hostNames[1]]);
  });

  it("recycles a borrowed host once the borrower's own servers are gone, its lender's stray server left to come back with it", async () => {
    const recycle = () => plugin().end(hookContext(borrower, { on_end: 'recycle' }));
    expect((await recycle()).waitingFor).toMatch(/waiting for the last servers on end-b-\w+ \(1 server\(s\), deleted at /);
    await nova.deleteServer('borrower-own'); // the borrower deletes its own
    expect(await recycle()).toEqual({});
    expect(nova.servers.map((s) => s.id).sort()).toEqual(['lender-own', 'lender-stray']);
    expect(nova.aggregates.find((a) => a.name === 'pool')?.hosts).toEqual([hostNames[1]]);
  });

  it('puts every host it fenced back into the lease when Nova fails in the middle of a lend', async () => {
    nova.failListingOn = hostNames[0];
    const move = { reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', hosts: [hostNames[0]], freepool: 'pool', progress: () => undefined };
    await expect(lendHostsOut(nova as unknown as NovaClient, move, [hostNames[0]], 1)).rejects.toThrow('Nova is down');
    const where = Object.fromEntries(nova.aggregates.map((a) => [a.name, a.hosts]));
    expect(where[leaseAggregateFor(lender.reservation.id).name]).toEqual([hostNames[0]]);
    expect(where.pool).toEqual([]);
  });

  it("takes a returned host back from its borrower's zone past the bound, cut or not, so that the lender never waits on the borrower", async () => {
    await plugin().returnLentHosts!(hookContext(lender, {}), [hostIds[1]]);
    const where = Object.fromEntries(nova.aggregates.map((a) => [a.name, a.hosts]));
    expect(where[leaseAggregateFor(lender.reservation.id).name].sort()).toEqual([...hostNames].sort());
    expect(where[leaseAggregateFor(borrower.reservation.id).name]).toEqual([]);
  });
});

describe('a lend given up on half way (its attempt timed out)', () => {
  const database = useMigratedTestDatabase();

  /** A lender of `count` hosts, all in its aggregate in `nova`; its plugin works on `pool` (the test database's unless given). */
  async function lenderOf(count: number, pool: Pool = database().pool) {
    await database().pool.query('TRUNCATE host_allocations, host_lendings, host_capabilities, hosts RESTART IDENTITY CASCADE');
    const names = Array.from({ length: count }, (_, i) => `half-${i}-${randomUUID().slice(0, 6)}`);
    const ids: string[] = [];
    for (const name of names) ids.push(await insertHost(database().pool, { name }));
    const now = Date.now();
    const reservation = pendingReservation('physical:host', { min: count, max: count, hypervisor_properties: '', resource_properties: '', before_end: 'default', on_end: 'delete', preemptible: false });
    const lender = reservationContext({ reservation, startMs: now - H, endMs: now + 9 * H, projectId: 'p', leaseStatus: 'ACTIVE' }) as ReservationContext<PhysicalHostParams>;
    await new HostCalendar(database().pool, { cleaningMs: 0, randomChoice: false }).book(lender);
    const nova = new FakeNova();
    nova.aggregate('pool', []);
    const aggregate = leaseAggregateFor(lender.reservation.id);
    nova.aggregate(aggregate.name, [...names], { 'leasekeeper:reservation': lender.reservation.id }, aggregate.availabilityZone);
    const plugin = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => ({ nova: nova as unknown as NovaClient, glance }), freepool: 'pool' });
    const hookContext = (signal?: AbortSignal): HookContext<PhysicalHostParams> => ({
      ...lender,
      reportProgress: () => undefined,
      placementOf: () => Promise.resolve({ hosts: [] }),
      announce: () => Promise.resolve(),
      ...(signal ? { signal } : {}),
    });
    const request = { lendingId: randomUUID(), count, untilMs: now + 4 * H };
    const where = () => Object.fromEntries(nova.aggregates.map((a) => [a.name, [...a.hosts].sort()]));
    const lendingRows = async () => (await database().pool.query<{ lending_id: string; host_id: string }>('SELECT lending_id::text, host_id::text FROM host_lendings ORDER BY host_id')).rows;
    return { names, ids, lender, nova, aggregate, plugin, hookContext, request, where, lendingRows };
  }

  /**
   * The test database's pool, but `onQuery` sees each statement once it ran, the pool's own and its
   * clients' (`inTransaction`), and may throw (a reply lost after the statement took effect) or act
   * before the caller goes on (another try committing meanwhile).
   */
  function poolWatching(onQuery: (sql: string, inTransaction: boolean) => void | Promise<void>): Pool {
    const pool = database().pool;
    const bind = <T extends object>(target: T, key: string | symbol) => {
      const value: unknown = Reflect.get(target, key);
      return typeof value === 'function' ? value.bind(target) : value;
    };
    const watched = (target: object, query: unknown, inTransaction: boolean) => async (...args: unknown[]) => {
      const result: unknown = await (query as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      if (typeof args[0] === 'string') await onQuery(args[0], inTransaction);
      return result;
    };
    return new Proxy(pool, {
      get: (target, key) =>
        key === 'query'
          ? watched(target, Reflect.get(target, 'query'), false)
          : key !== 'connect'
          ? bind(target, key)
          : async () => {
              const client = await target.connect();
              return new Proxy(client, { get: (c, k) => (k === 'query' ? watched(c, Reflect.get(c, 'query'), true) : bind(c, k)) });
            },
    });
  }

  it('keeps the hosts fenced when the calendar committed the lend but the reply was lost: the lending id holds them lent', async () => {
    let lending = false;
    const lossy = poolWatching((sql) => {
      if (sql.includes('INSERT INTO host_lendings')) lending = true;
      if (sql === 'COMMIT' && lending) {
        lending = false;
        throw new Error('the connection was lost after COMMIT');
      }
    });
    const { names, ids, aggregate, plugin, hookContext, request, where, lendingRows } = await lenderOf(2, lossy);
    await expect(plugin.lend!(hookContext(), request)).rejects.toThrow('the connection was lost after COMMIT');
    expect((await lendingRows()).map((g) => g.host_id)).toEqual(ids);
    expect(where()).toEqual({ pool: [...names].sort(), [aggregate.name]: [] });
    // The retry (or the workflow's reconcile) answers them as lent.
    expect((await plugin.lend!(hookContext(), request)).hosts.map((h) => h.name)).toEqual(names);
  });

  it('lends no more than an overlapping try of the same request lent first, and puts back the hosts it fenced beside it', async () => {
    let overlap: (() => Promise<void>) | undefined;
    const racing = poolWatching(async (sql, inTransaction) => {
      // This try has found nothing lent under its id; the other try commits right after, before this one reads its candidates.
      if (!inTransaction && sql.includes('g.lending_id = $1') && overlap) {
        const other = overlap;
        overlap = undefined;
        await other();
      }
    });
    const { names, ids, lender, nova, aggregate, plugin, hookContext, request, where, lendingRows } = await lenderOf(4, racing);
    const lend = { ...request, count: 2 };
    overlap = async () => {
      for (const host of names.slice(0, 2)) {
        await nova.addHostToAggregate(nova.aggregates.find((a) => a.name === 'pool')!.id, host);
        await nova.removeHostFromAggregate(nova.aggregates.find((a) => a.name === aggregate.name)!.id, host);
      }
      const calendar = new HostCalendar(database().pool, { cleaningMs: 0, randomChoice: false });
      await calendar.lend({ lendingId: lend.lendingId, reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', hostIds: ids.slice(0, 2), fromMs: Date.now(), untilMs: lend.untilMs });
    };
    const lent = await plugin.lend!(hookContext(), lend);
    expect(overlap).toBeUndefined(); // the other try did commit in between
    expect(lent.hosts.map((h) => h.name)).toEqual(names.slice(0, 2));
    expect(await lendingRows()).toEqual(ids.slice(0, 2).map((id) => ({ lending_id: lend.lendingId, host_id: id })));
    expect(where()).toEqual({ pool: names.slice(0, 2).sort(), [aggregate.name]: names.slice(2).sort() });
  });

  it('a try given up on after fencing its last host neither lends nor puts back: the try carrying on does', async () => {
    const { names, nova, aggregate, plugin, hookContext, request, where, lendingRows } = await lenderOf(2);
    const givenUp = new AbortController();
    nova.afterListing = (host) => {
      if (host === names[1]) givenUp.abort(new Error('the attempt timed out'));
    };
    await expect(plugin.lend!(hookContext(givenUp.signal), request)).rejects.toThrow('the attempt timed out');
    expect(await lendingRows()).toEqual([]);
    expect(where()).toEqual({ pool: [...names].sort(), [aggregate.name]: [] });
  });

  it('stops fencing, leaves what it fenced fenced, and its retry carries on from there under the same lending id', async () => {
    const pool = database().pool;
    const { names, nova, aggregate, plugin, hookContext, request, where } = await lenderOf(3);

    // The server gives the attempt up while it looks at its second host.
    const givenUp = new AbortController();
    nova.afterListing = (host) => {
      if (host === names[1]) givenUp.abort(new Error('the attempt timed out'));
    };
    await expect(plugin.lend!(hookContext(givenUp.signal), request)).rejects.toThrow('the attempt timed out');
    expect(where()).toEqual({ pool: [names[0], names[1]], [aggregate.name]: [names[2]] });
    expect((await pool.query('SELECT 1 FROM host_lendings')).rows).toEqual([]);

    // The retry: no move back and forth for the two fenced, one look at each; the third fenced now.
    nova.afterListing = undefined;
    nova.moves.length = 0;
    const lent = await plugin.lend!(hookContext(), request);
    expect(lent.hosts.map((h) => h.name).sort()).toEqual([...names].sort());
    expect(nova.moves).toEqual([`add ${names[2]}`, `remove ${names[2]}`]);
    expect(where()).toEqual({ pool: [...names].sort(), [aggregate.name]: [] });
    // Once lent, the same lending id answers what it lent, with no Nova call.
    nova.moves.length = 0;
    expect((await plugin.lend!(hookContext(), request)).hosts).toEqual(lent.hosts);
    expect(nova.moves).toEqual([]);
  });
});
