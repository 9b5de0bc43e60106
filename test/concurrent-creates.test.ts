/**
 * Every create raced against itself (issue 39, point 5): the same request sent 8 times at once.
 * One is made and the others are Blazar's 409 (or, for a lease with an Idempotency-Key, the same
 * lease for all; for a PUT that replaces a project's policy or webhooks, the same answer for all):
 * never a 5xx, and one row. Nova and Neutron are in-process fakes that hold every copy at the last
 * look-up before the write until all have got there, so that each copy passes the checks and only
 * the database's unique constraint can tell the second from the first (as `npm start`'s own
 * enrolment met a client's: 500, and the loser took the winner's host out of the pool aggregate).
 */
import { randomUUID } from 'node:crypto';
import type { Request, Response } from 'express';
import fc from 'fast-check';
import { DatabaseError } from 'pg';
import pino from 'pino';
import { errorHandler } from '../src/api/errors';
import type { OpenStackClients } from '../src/openstack';
import type { Aggregate, Hypervisor } from '../src/openstack/nova';
import { NotFoundError } from '../src/openstack/errors';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, deleteAllLeases, inSeconds, useTestStack, type ApiCall } from '../dev-stack/stack';

const COPIES = 8;
const ADMIN = { 'x-auth-token': 'admin' };

/** Holds each caller until `count` have arrived, then lets all (and any later one) through. */
class Gate {
  private waiting: Array<() => void> = [];
  private open = false;
  constructor(private readonly count: number) {}
  arrive(): Promise<void> {
    if (this.open) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      if (this.waiting.length < this.count) return;
      this.open = true;
      for (const go of this.waiting.splice(0)) go();
    });
  }
}

/** Nova's hypervisors and aggregates, in memory; `gate` holds enrolments at their last look-up (the compute service's zone). */
class FakeNova {
  gate?: Gate;
  readonly aggregates: Aggregate[] = [];
  private nextId = 1;

  hypervisor(name: string): Hypervisor {
    return { id: `hv-${name}`, hypervisor_hostname: name, state: 'up', status: 'enabled', host_ip: '127.0.0.1', hypervisor_type: 'fake', hypervisor_version: 1, service: { host: name, id: `svc-${name}`, disabled_reason: null }, vcpus: 8, memory_mb: 16_384, local_gb: 100, servers: [] };
  }
  listHypervisors(filter: { hypervisor_hostname_pattern?: string }) {
    const name = filter.hypervisor_hostname_pattern ?? '';
    return Promise.resolve(name.startsWith('race-') ? [this.hypervisor(name)] : []);
  }
  async listServices(filter: { host?: string }) {
    await this.gate?.arrive();
    return [{ id: `svc-${filter.host}`, binary: 'nova-compute', host: filter.host, zone: 'nova', status: 'enabled', state: 'up', updated_at: null, disabled_reason: null }];
  }
  listAggregates() {
    return Promise.resolve(this.aggregates.map((a) => ({ ...a, hosts: [...a.hosts] })));
  }
  createAggregate(request: { name: string }) {
    let aggregate = this.aggregates.find((a) => a.name === request.name);
    if (!aggregate) {
      const id = this.nextId++;
      aggregate = { id, uuid: randomUUID(), name: request.name, availability_zone: null, hosts: [], metadata: {}, created_at: '', updated_at: null, deleted_at: null, deleted: false };
      this.aggregates.push(aggregate);
    }
    return Promise.resolve({ ...aggregate, hosts: [...aggregate.hosts] });
  }
  private find(id: number | string): Aggregate {
    const aggregate = this.aggregates.find((a) => a.id === Number(id));
    if (!aggregate) throw new NotFoundError(`aggregate ${id} not found`, { service: 'compute', method: 'GET', url: `/os-aggregates/${id}`, status: 404 });
    return aggregate;
  }
  getAggregate(id: number | string) {
    return Promise.resolve({ ...this.find(id), hosts: [...this.find(id).hosts] });
  }
  setAggregateMetadata(id: number | string, metadata: Record<string, string>) {
    Object.assign(this.find(id).metadata, metadata);
    return this.getAggregate(id);
  }
  addHostToAggregate(id: number | string, host: string) {
    const aggregate = this.find(id);
    if (!aggregate.hosts.includes(host)) aggregate.hosts.push(host);
    return this.getAggregate(id);
  }
  removeHostFromAggregate(id: number | string, host: string) {
    const aggregate = this.find(id);
    aggregate.hosts = aggregate.hosts.filter((h) => h !== host);
    return this.getAggregate(id);
  }
}

const NETWORK_ID = randomUUID();
const SUBNET_ID = randomUUID();

/** One external network with one subnet, nothing using any address; `gate` holds enrolments at their last look-up (ports). */
class FakeNeutron {
  gate?: Gate;
  getNetwork(id: string) {
    if (id !== NETWORK_ID) return Promise.reject(new NotFoundError(`network ${id} not found`, { service: 'network', method: 'GET', url: `/networks/${id}`, status: 404 }));
    return Promise.resolve({ id, name: 'public', project_id: 'admin', status: 'ACTIVE', admin_state_up: true, shared: false, subnets: [SUBNET_ID], 'router:external': true });
  }
  getSubnet(id: string) {
    return Promise.resolve({ id, name: 'public', network_id: NETWORK_ID, project_id: 'admin', cidr: '203.0.113.0/24', ip_version: 4, gateway_ip: '203.0.113.1', enable_dhcp: false, allocation_pools: [{ start: '203.0.113.2', end: '203.0.113.99' }], dns_nameservers: [], host_routes: [] });
  }
  listFloatingIps() {
    return Promise.resolve([]);
  }
  async listPorts() {
    await this.gate?.arrive();
    return [];
  }
  /** A physical network `physnet1` whose tenant range is 100-199 (network segment enrolment). */
  listNetworkSegmentRanges() {
    return Promise.resolve([{ id: 'range-1', network_type: 'vlan', physical_network: 'physnet1', minimum: 100, maximum: 199, shared: true }]);
  }
  async findNetworksBySegment() {
    await this.gate?.arrive();
    return [];
  }
}

const statuses = (answers: ApiCall[]) => answers.map((a) => a.status).sort((a, b) => a - b);

/** Every refusal is Blazar's error body, saying what exists rather than any SQL. */
function expectBlazarConflicts(answers: ApiCall[]): void {
  for (const answer of answers.filter((a) => a.status >= 400)) {
    expect(answer.body).toEqual({ error_code: 409, error_message: expect.any(String), error_name: 409 });
    expect(answer.body.error_message).not.toMatch(/duplicate key|constraint|violates|_key\b|_pkey\b/i);
  }
}

describe('concurrent duplicates of every create: one made, the rest 409 (or the same answer), never a 5xx', () => {
  const nova = new FakeNova();
  const neutron = new FakeNeutron();
  const stack = useTestStack(
    {
      plugins: [new RecordingPlugin()],
      env: { LK_WEBHOOK_ALLOW_PRIVATE: 'true' },
      openstack: () => ({ nova, neutron }) as unknown as OpenStackClients,
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url, ADMIN)) },
  );
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const count = async (sql: string, params: unknown[]) => Number((await stack().db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${sql}`, params)).rows[0].n);
  const copies = (send: () => Promise<ApiCall>) => Promise.all(Array.from({ length: COPIES }, send));

  it('POST /v1/os-hosts: one host enrolled, in the pool aggregate; the other copies 409', async () => {
    nova.gate = new Gate(COPIES);
    const answers = await copies(() => asAdmin('POST', '/v1/os-hosts', { name: 'race-host-1' }));
    expect(statuses(answers)).toEqual([201, ...Array<number>(COPIES - 1).fill(409)]);
    expectBlazarConflicts(answers);
    expect(answers.find((a) => a.status === 409)?.body.error_message).toContain('race-host-1');
    expect(await count('hosts WHERE hypervisor_hostname = $1', ['race-host-1'])).toBe(1);
    // The losers undid nothing of the winner's: the host stays in the reservable pool aggregate.
    const freepool = nova.aggregates.find((a) => a.name === stack().config.inventory.freepoolAggregate);
    expect(freepool?.hosts).toEqual(['race-host-1']);
  });

  it('POST /v1/floatingips: one address enrolled; the other copies 409', async () => {
    neutron.gate = new Gate(COPIES);
    const answers = await copies(() => asAdmin('POST', '/v1/floatingips', { floating_network_id: NETWORK_ID, floating_ip_address: '203.0.113.150' }));
    expect(statuses(answers)).toEqual([201, ...Array<number>(COPIES - 1).fill(409)]);
    expectBlazarConflicts(answers);
    expect(await count('floating_ips WHERE floating_ip_address = $1', ['203.0.113.150'])).toBe(1);
  });

  it('POST /v1/networks: one segment enrolled; the other copies 409', async () => {
    neutron.gate = new Gate(COPIES);
    const answers = await copies(() => asAdmin('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: '250' }));
    expect(statuses(answers)).toEqual([201, ...Array<number>(COPIES - 1).fill(409)]);
    expectBlazarConflicts(answers);
    expect(await count('network_segments WHERE physical_network = $1 AND segment_id = $2', ['physnet1', '250'])).toBe(1);
  });

  it('POST /v1/os-hosts/{id}/maintenance: one window booked; the other copies 409', async () => {
    const hostId = await insertHost(stack().db.pool, { name: 'race-maintained' });
    const window = { start_date: inSeconds(86_400).slice(0, 16), end_date: inSeconds(90_000).slice(0, 16), reason: 'firmware' };
    const answers = await copies(() => asAdmin('POST', `/v1/os-hosts/${hostId}/maintenance`, window));
    expect(statuses(answers)).toEqual([201, ...Array<number>(COPIES - 1).fill(409)]);
    expectBlazarConflicts(answers);
    expect(await count('host_maintenance WHERE host_id = $1', [hostId])).toBe(1);
    const made = answers.find((a) => a.status === 201)!.body.maintenance.id as string;
    expect((await asAdmin('DELETE', `/v1/maintenance/${made}`)).status).toBe(204);
  });

  it('PUT /v1/projects/{id}/policy: the same policy for every copy, one row', async () => {
    const answers = await copies(() => asAdmin('PUT', '/v1/projects/race-project/policy', { max_hosts: 3 }));
    expect(statuses(answers)).toEqual(Array<number>(COPIES).fill(200));
    expect(new Set(answers.map((a) => JSON.stringify(a.body.policy.project)))).toEqual(new Set([JSON.stringify({ max_hosts: 3 })]));
    expect(await count('project_policies WHERE project_id = $1', ['race-project'])).toBe(1);
  });

  it('PUT /v1/projects/{id}/webhooks: one webhook for every copy, one row', async () => {
    const answers = await copies(() => asAdmin('PUT', '/v1/projects/race-project/webhooks', { webhooks: [{ url: 'http://127.0.0.1:9/race-hook', secret: 'a-secret-of-the-race-project' }] }));
    expect(statuses(answers)).toEqual(Array<number>(COPIES).fill(200));
    expect(new Set(answers.map((a) => a.body.webhooks[0].id as string)).size).toBe(1);
    expect(await count('project_webhooks WHERE project_id = $1', ['race-project'])).toBe(1);
  });

  it('fuzzed: random creates, each sent 2 to 8 times at once, are never a 5xx and make one record at most', async () => {
    nova.gate = undefined;
    neutron.gate = undefined;
    const hostId = await insertHost(stack().db.pool, { name: 'race-fuzz-maintained' });
    const hoursAhead = (hours: number) => inSeconds(hours * 3_600).slice(0, 16);
    const create = fc.oneof(
      fc.record({ kind: fc.constant('host' as const), name: fc.constantFrom('race-fuzz-a', 'race-fuzz-b', 'nowhere', ''), capabilities: fc.dictionary(fc.constantFrom('rack', 'gpu', 'x'.repeat(70)), fc.constantFrom('1', 'a100')) }),
      fc.record({ kind: fc.constant('floating IP' as const), address: fc.constantFrom('203.0.113.200', '203.0.113.201', '203.0.113.5', 'not-an-address'), network: fc.constantFrom(NETWORK_ID, NETWORK_ID, randomUUID()) }),
      fc.record({ kind: fc.constant('maintenance' as const), fromHours: fc.integer({ min: 24, max: 30 }), hours: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant('lease' as const), name: fc.constantFrom('fuzz-a', 'fuzz-b', 'fuzz-c'), key: fc.option(fc.constantFrom('key-1', 'key-2', 'key-3'), { nil: undefined }), byWorkflow: fc.boolean(), hours: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant('policy' as const), project: fc.constantFrom('fuzz-p1', 'fuzz-p2'), maxHosts: fc.integer({ min: 0, max: 5 }) }),
      fc.record({ kind: fc.constant('webhooks' as const), project: fc.constantFrom('fuzz-p1', 'fuzz-p2'), urls: fc.subarray(['http://127.0.0.1:9/a', 'http://127.0.0.1:9/b']) }),
    );
    type Create = typeof create extends fc.Arbitrary<infer T> ? T : never;
    const send = (c: Create): Promise<ApiCall> => {
      switch (c.kind) {
        case 'host':
          return asAdmin('POST', '/v1/os-hosts', { name: c.name, ...c.capabilities });
        case 'floating IP':
          return asAdmin('POST', '/v1/floatingips', { floating_network_id: c.network, floating_ip_address: c.address });
        case 'maintenance':
          return asAdmin('POST', `/v1/os-hosts/${hostId}/maintenance`, { start_date: hoursAhead(c.fromHours), end_date: hoursAhead(c.fromHours + c.hours), reason: 'fuzz' });
        case 'lease':
          return asAdmin('POST', '/v1/leases', { name: c.name, start_date: hoursAhead(24), end_date: hoursAhead(24 + c.hours), reservations: c.byWorkflow ? [{ resource_type: 'test:recording' }] : [] }, c.key ? { 'idempotency-key': c.key } : {});
        case 'policy':
          return asAdmin('PUT', `/v1/projects/${c.project}/policy`, { max_hosts: c.maxHosts });
        case 'webhooks':
          return asAdmin('PUT', `/v1/projects/${c.project}/webhooks`, { webhooks: c.urls.map((url) => ({ url })) });
      }
    };
    const tried = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(create, fc.integer({ min: 2, max: COPIES }), async (c, copies) => {
        const answers = await Promise.all(Array.from({ length: copies }, () => send(c)));
        for (const answer of answers) {
          tried.set(answer.status, (tried.get(answer.status) ?? 0) + 1);
          expect(answer.status).toBeLessThan(500);
          if (answer.status >= 400) expect(answer.body).toEqual({ error_code: answer.status, error_message: expect.any(String), error_name: answer.status });
        }
        const made = answers.filter((a) => a.status === 201);
        // One lease for every copy with one key; else one record made at most (a PUT replaces: 200, never 201).
        if (c.kind === 'lease' && c.key) expect(new Set(made.map((a) => a.body.lease.id as string)).size).toBeLessThanOrEqual(1);
        else expect(made.length).toBeLessThanOrEqual(1);
      }),
      { numRuns: 40 },
    );
    // Refusals and successes both came up: the fuzzing reached the writes, not only the checks.
    expect([...tried.keys()]).toEqual(expect.arrayContaining([200, 201, 409]));
    for (const window of (await asAdmin('GET', '/v1/maintenance')).body.maintenance as Array<{ id: string }>) await asAdmin('DELETE', `/v1/maintenance/${window.id}`);
  });

  describe('POST /v1/leases', () => {
    const lease = (name: string, reservations: unknown[]) => ({ name, start_date: inSeconds(86_400).slice(0, 16), end_date: inSeconds(90_000).slice(0, 16), reservations });
    const ADMITTED_BY_API: unknown[] = []; // no reservations: every one books in the calendar alone
    const ADMITTED_BY_WORKFLOW = [{ resource_type: 'test:recording', keys: [] }];

    it.each([
      ['admitted by the API', ADMITTED_BY_API],
      ['admitted by its workflow', ADMITTED_BY_WORKFLOW],
    ])('with one Idempotency-Key (%s): one lease, answered to every copy', async (_how, reservations) => {
      const name = `race-key-${randomUUID().slice(0, 8)}`;
      const key = randomUUID();
      const answers = await copies(() => asAdmin('POST', '/v1/leases', lease(name, reservations), { 'idempotency-key': key }));
      expect(statuses(answers)).toEqual(Array<number>(COPIES).fill(201));
      expect(new Set(answers.map((a) => a.body.lease.id as string)).size).toBe(1);
      expect(await count('leases WHERE name = $1', [name])).toBe(1);
    });

    it.each([
      ['admitted by the API', ADMITTED_BY_API],
      ['admitted by its workflow', ADMITTED_BY_WORKFLOW],
    ])('without a key, one name (%s): one lease; the other copies 409', async (_how, reservations) => {
      const name = `race-name-${randomUUID().slice(0, 8)}`;
      const answers = await copies(() => asAdmin('POST', '/v1/leases', lease(name, reservations)));
      expect(statuses(answers)).toEqual([201, ...Array<number>(COPIES - 1).fill(409)]);
      expectBlazarConflicts(answers);
      expect(await count('leases WHERE name = $1 AND deleted_at IS NULL', [name])).toBe(1);
    });
  });
});

describe('a duplicate no store names', () => {
  it("is still Blazar's 409, saying no SQL, rather than a 500", () => {
    const err = Object.assign(new DatabaseError('duplicate key value violates unique constraint "some_table_some_key"', 0, 'error'), { code: '23505', constraint: 'some_table_some_key', severity: 'ERROR' });
    const sent: { status?: number; body?: unknown } = {};
    const res = {
      locals: {},
      headersSent: false,
      status(code: number) {
        sent.status = code;
        return res;
      },
      json(body: unknown) {
        sent.body = body;
        return res;
      },
      setHeader: () => res,
    };
    errorHandler(pino({ level: 'silent' }))(err, { method: 'POST', path: '/v1/anything' } as Request, res as unknown as Response, () => undefined);
    expect(sent).toEqual({ status: 409, body: { error_code: 409, error_message: expect.stringContaining('exists already'), error_name: 409 } });
    expect(JSON.stringify(sent.body)).not.toMatch(/duplicate key|constraint|some_table/);
  });
});
