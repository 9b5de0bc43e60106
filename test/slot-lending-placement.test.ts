/**
 * The slot plugin's lend hook against a Placement and a Nova held in memory (issue 43), on the real
 * PostgreSQL: what the lender's inventory is after a lend whose answer was lost, a retry, an attempt
 * given up on, a put-back that fails; and which slots count as idle when Nova runs servers that
 * Placement does not see (shelved, or building before their claim).
 */
import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { HookContext, LentHosts } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { slotLendingsOfRequest } from '../src/db/quantity-lendings';
import { ConflictError, type NovaClient, type PlacementClient } from '../src/openstack';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { lendSlotsOnHost, reservationProviderName, reservationResourceClass } from '../src/resources/virtual-instance/nova-resources';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance, virtualInstancePlugin } from '../src/resources/virtual-instance';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
/** 2 slots of 4 vCPU on the host. */
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };
const HOST = 'lend-node';

type Inventory = { total: number; reserved: number; min_unit: number; max_unit: number; step_size: number; allocation_ratio: number };

/** The calls of Placement the slot plugin makes, on providers held in memory; a generation guards each write, as Placement's does. */
class MemoryPlacement {
  readonly providers = new Map<string, { uuid: string; name: string; generation: number; inventories: Record<string, Inventory>; usages: Record<string, number>; traits: string[] }>();
  /** When set, a write that raises some class's total fails (a Placement gone while putting slots back). */
  failRaises = false;
  /** Runs after each usage read (a test's hook: a server scheduled meanwhile). */
  afterUsageRead: () => void = () => undefined;
  /** Runs before each write (a test's hook: an attempt given up on meanwhile). */
  beforeWrite: () => void = () => undefined;

  add(name: string, inventories: Record<string, Inventory>, usages: Record<string, number> = {}) {
    const uuid = randomUUID();
    this.providers.set(uuid, { uuid, name, generation: 1, inventories, usages, traits: [] });
  }
  private byUuid(uuid: string) {
    const provider = this.providers.get(uuid);
    if (!provider) throw new Error(`no provider ${uuid}`);
    return provider;
  }
  private guard(uuid: string, generation: number) {
    this.beforeWrite();
    const provider = this.byUuid(uuid);
    if (provider.generation !== generation) throw new ConflictError('generation moved', { service: 'placement', method: 'PUT', url: `/resource_providers/${uuid}`, status: 409, code: 'placement.concurrent_update' } as never);
    return provider;
  }
  totalOf(name: string, resourceClass: string): number {
    return [...this.providers.values()].find((p) => p.name === name)?.inventories[resourceClass]?.total ?? 0;
  }
  listResourceProviders(query: { name?: string }) {
    return Promise.resolve([...this.providers.values()].filter((p) => p.name === query.name).map((p) => ({ uuid: p.uuid, name: p.name, generation: p.generation })));
  }
  createResourceProvider(): Promise<never> {
    return Promise.reject(new Error('the test made every provider'));
  }
  getInventories(uuid: string) {
    const provider = this.byUuid(uuid);
    return Promise.resolve({ inventories: structuredClone(provider.inventories), resource_provider_generation: provider.generation });
  }
  getProviderUsages(uuid: string) {
    const usages = { ...this.byUuid(uuid).usages };
    this.afterUsageRead();
    return Promise.resolve({ usages });
  }
  putInventories(uuid: string, generation: number, inventories: Record<string, Inventory>) {
    const provider = this.guard(uuid, generation);
    const raises = Object.entries(inventories).some(([rc, inv]) => inv.total > (provider.inventories[rc]?.total ?? 0));
    if (this.failRaises && raises) return Promise.reject(new Error('Placement is unreachable'));
    provider.inventories = structuredClone(inventories);
    provider.generation++;
    return Promise.resolve({ resource_provider_generation: provider.generation });
  }
  getProviderTraits(uuid: string) {
    return Promise.resolve({ traits: [...this.byUuid(uuid).traits] });
  }
  putProviderTraits(uuid: string, generation: number, traits: string[]) {
    const provider = this.guard(uuid, generation);
    provider.traits = [...traits];
    provider.generation++;
    return Promise.resolve({ resource_provider_generation: provider.generation });
  }
}

/**
 * The pool, but while `losing` is set a transaction's COMMIT goes through and its answer is lost (the caller sees an error);
 * `afterNextRead` runs once, right after the pool's next own query answered (another try acting meanwhile).
 */
function losingCommits(pool: Pool): { pool: Pool; lose(on: boolean): void; afterNextRead(then: () => Promise<void>): void } {
  let losing = false;
  let afterRead: (() => Promise<void>) | undefined;
  const client = (real: PoolClient): PoolClient =>
    new Proxy(real, {
      get(target, key, receiver) {
        if (key !== 'query') {
          const value = Reflect.get(target, key, receiver) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        }
        return async (...args: unknown[]) => {
          const result = await (target.query as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          if (losing && args[0] === 'COMMIT') throw new Error('the connection broke after COMMIT');
          return result;
        };
      },
    });
  const wrapped = new Proxy(pool, {
    get(target, key, receiver) {
      if (key === 'connect') return async () => client(await target.connect());
      if (key === 'query') {
        return async (...args: unknown[]) => {
          const result = await (target.query as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          const then = afterRead;
          afterRead = undefined;
          if (then) await then();
          return result;
        };
      }
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { pool: wrapped, lose: (on) => (losing = on), afterNextRead: (then) => (afterRead = then) };
}

describe('the slot lend hook and the lender\'s Placement inventory', () => {
  const database = useMigratedTestDatabase();
  let placement: MemoryPlacement;
  let servers: Array<{ id: string; status: string; 'OS-EXT-SRV-ATTR:host'?: string | null }>;
  let commits: ReturnType<typeof losingCommits>;
  let lender: HookContext<never>;
  let progress: Array<Record<string, unknown> | undefined>;
  let resourceClass: string;

  const plugin = () =>
    virtualInstancePlugin({
      pool: commits.pool,
      settings: { cleaningMs: 0 },
      cloud: () => ({ placement: placement as unknown as PlacementClient, nova: { listServers: () => Promise.resolve(servers) } as unknown as NovaClient, glance: {} as never }),
    });
  const inventory = () => placement.totalOf(reservationProviderName(HOST), resourceClass);
  const lend = (count: number, lendingId = randomUUID(), ctx: HookContext<never> = lender) => plugin().lend!(ctx, { lendingId, count, untilMs: Date.now() + H });

  beforeEach(async () => {
    const { pool } = database();
    await pool.query('TRUNCATE host_allocations, quantity_allocations, quantity_lendings, capacity_providers, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
    await insertHost(pool, { name: HOST });
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: randomUUID(), name: HOST, host: HOST, capacity: CAPACITY, traits: [] }]);
    commits = losingCommits(pool);
    const params = virtualInstanceParams.parse({ vcpus: 4, memory_mb: 1024, disk_gb: 10, amount: 2, affinity: 'None', resource_properties: '' });
    const reservation = pendingReservation(VIRTUAL_INSTANCE, params);
    const now = Date.now();
    const ctx = reservationContext({ reservation, startMs: now - 60_000, endMs: now + 2 * H, leaseStatus: 'ACTIVE' });
    await new InstanceSlotCalendar(pool, { cleaningMs: 0 }).book(ctx, (await virtualInstance.describe(reservation, ctx.projectId)).spec);
    progress = [];
    lender = { ...ctx, reportProgress: (details) => progress.push(details), placementOf: () => Promise.resolve({ hosts: [] }), announce: () => Promise.resolve() };
    resourceClass = reservationResourceClass(reservation.id);
    placement = new MemoryPlacement();
    placement.add(reservationProviderName(HOST), { [resourceClass]: { total: 2, reserved: 0, min_unit: 1, max_unit: 1, step_size: 1, allocation_ratio: 1 } });
    servers = [];
  });
  afterEach(() => commits.lose(false));

  it('a lend whose commit\'s answer was lost answers the rows it committed and keeps the inventory lowered', async () => {
    const lendingId = randomUUID();
    commits.lose(true);
    expect((await lend(1, lendingId)).slots).toEqual([1]);
    commits.lose(false);
    expect((await slotLendingsOfRequest(database().pool, lendingId)).map((g) => g.slots)).toEqual([1]);
    expect(inventory()).toBe(1);
  });

  it('a try that finds every slot lent by an overlapping try of the same request answers that try\'s rows, not a 409', async () => {
    const lendingId = randomUUID();
    let twin: LentHosts | undefined;
    // This try has found nothing lent under its id; the other try lends both slots and commits right after.
    commits.afterNextRead(async () => {
      twin = await lend(2, lendingId);
    });
    const lent = await lend(2, lendingId);
    expect(twin?.slots).toEqual([2]);
    expect(lent).toEqual(twin);
    expect((await slotLendingsOfRequest(database().pool, lendingId)).map((g) => g.slots)).toEqual([2]);
    expect(inventory()).toBe(0);
  });

  it('a retried lend writes the inventory again: a host an abandoned attempt raised under the lending is lowered', async () => {
    const lendingId = randomUUID();
    expect((await lend(1, lendingId)).slots).toEqual([1]);
    expect(inventory()).toBe(1);
    // The attempt given up on puts the slot back after its retry committed.
    const [provider] = placement.providers.values();
    provider.inventories[resourceClass].total = 2;
    expect((await lend(1, lendingId)).slots).toEqual([1]);
    expect(inventory()).toBe(1);
  });

  it('an attempt given up on while it lowers a host neither lends nor puts back: its retry carries on from the lowered host', async () => {
    const lendingId = randomUUID();
    const given = new AbortController();
    placement.beforeWrite = () => given.abort(new Error('the attempt was given up on'));
    await expect(lend(1, lendingId, { ...lender, signal: given.signal })).rejects.toThrow('the attempt was given up on');
    placement.beforeWrite = () => undefined;
    expect((await database().pool.query('SELECT 1 FROM quantity_lendings')).rows).toEqual([]);
    expect(inventory()).toBe(1); // left lowered for the try carrying on
    expect((await lend(1, lendingId)).slots).toEqual([1]);
    expect(inventory()).toBe(1);
  });

  it('puts back what attempts all given up on left lowered (the workflow\'s put-back after a lend that lent nothing), never what is lent', async () => {
    const given = new AbortController();
    placement.beforeWrite = () => given.abort(new Error('the attempt was given up on'));
    await expect(lend(1, randomUUID(), { ...lender, signal: given.signal })).rejects.toThrow('the attempt was given up on');
    placement.beforeWrite = () => undefined;
    expect(inventory()).toBe(1);
    expect(await plugin().putBackFenced!(lender)).toEqual([HOST]);
    expect(inventory()).toBe(2);
    // With a slot lent, the put-back keeps it out.
    await lend(1);
    expect(await plugin().putBackFenced!(lender)).toEqual([HOST]);
    expect(inventory()).toBe(1);
  });

  it('a refused lend whose put-back fails answers the 409 with its idle slots, and reports the put-back', async () => {
    // A server Nova does not list yet holds a slot in Placement: of 2 asked, 1 is lowered, then put back (which fails).
    placement.providers.values().next().value!.usages[resourceClass] = 1;
    placement.failRaises = true;
    const refused = await refusal(lend(2));
    expect([refused.type, refused.details?.[0]]).toEqual(['LeaseConflict', { idle: 1 }]);
    expect(progress).toEqual([{ putBackFailed: 'Placement is unreachable' }]);
  });

  it('counts the servers Placement does not see as using slots: a shelved-offloaded server\'s and a building one\'s slots are not lent', async () => {
    // Neither holds an allocation: Placement sees both slots idle.
    servers = [
      { id: 'shelved', status: 'SHELVED_OFFLOADED', 'OS-EXT-SRV-ATTR:host': null },
      { id: 'failed', status: 'ERROR', 'OS-EXT-SRV-ATTR:host': null },
    ];
    const refused = await refusal(lend(2));
    expect([refused.type, refused.details?.[0]]).toEqual(['LeaseConflict', { idle: 1 }]);
    expect(inventory()).toBe(2);
    servers.push({ id: 'building', status: 'BUILD', 'OS-EXT-SRV-ATTR:host': null });
    expect((await refusal(lend(1))).details?.[0]).toEqual({ idle: 0 });
    expect(inventory()).toBe(2);
    servers = servers.filter((s) => s.id !== 'building');
    // The failed one holds none: one slot is lent.
    expect((await lend(1)).slots).toEqual([1]);
    expect(inventory()).toBe(1);
  });

  it('counts the slots that could be lent now for the lend suggestion: not lent, no server of the flavor on them', async () => {
    const idle = () => plugin().idleHosts!(lender);
    expect(await idle()).toBe(2);
    servers = [{ id: 'shelved', status: 'SHELVED_OFFLOADED', 'OS-EXT-SRV-ATTR:host': null }];
    expect(await idle()).toBe(1);
    await lend(1);
    expect(await idle()).toBe(0);
  });

  it('a host whose inventory is already as the lend would write it is still written under its generation: a server scheduled meanwhile is seen', async () => {
    const [provider] = placement.providers.values();
    provider.inventories[resourceClass].total = 1; // lowered by something else than this lend
    let scheduled = false;
    placement.afterUsageRead = () => {
      if (scheduled) return;
      scheduled = true;
      provider.usages[resourceClass] = 1;
      provider.generation++;
    };
    const host = { computeHost: HOST, hypervisorHostname: HOST, computeNodeUuid: randomUUID(), slots: 2, expected: 2 };
    // Read again after the write failed on the moved generation: one slot idle, not two.
    expect(await lendSlotsOnHost(placement as unknown as PlacementClient, host, lender.reservation.id, 1)).toEqual({ idle: 1, lent: 1 });
  });
});
