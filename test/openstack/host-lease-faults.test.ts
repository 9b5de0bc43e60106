/**
 * A host lease with Nova misbehaving: every call from the activities to Nova goes through a
 * fault-injecting proxy. Passing faults (500/503, hangs, connection resets, an answer lost after
 * Nova acted) during the start and the end are retried and the lease still gets ACTIVE and then
 * TERMINATED, every host where it belongs; a permanent failure puts the lease in ERROR with the
 * reason, and the host that had moved goes back to the pool.
 */
import { openStackClients } from '../../src/openstack';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { FaultProxy } from '../support/fault-proxy';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { rigClients, rigCredentials, rigEnv, uniqueName } from './support';

const HOSTS = ['fake-2', 'fake-3'];
const AGGREGATE_ACTION = /\/os-aggregates\/\d+\/action$/;

describe('host leases through Nova faults', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const hostIds: string[] = [];
  let proxy: FaultProxy;

  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  const lease = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  const stack = useTestStack(
    () => {
      // The activities' Nova is the proxy; a short client timeout turns a hang into a retryable time-out.
      const throughProxy = openStackClients({ credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { compute: proxy.url } }, timeoutMs: 3_000 });
      return {
        env: { LK_FREEPOOL_AGGREGATE: freepool },
        withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => throughProxy, freepool })],
        openstack: () => admin, // enrolment (os-hosts) goes straight to Nova
      };
    },
    {
      beforeStop: async () => {
        proxy?.clear();
        await deleteAllLeases(api);
        for (const id of hostIds) await api('DELETE', `/v1/os-hosts/${id}`);
        for (const aggregate of await admin.nova.listAggregates()) {
          if (aggregate.name !== freepool && !aggregate.metadata?.['leasekeeper:reservation']) continue;
          if (aggregate.name !== freepool && !aggregate.hosts.some((h) => HOSTS.includes(h))) continue;
          for (const host of aggregate.hosts) await admin.nova.removeHostFromAggregate(aggregate.id, host).catch(() => undefined);
          await admin.nova.deleteAggregate(aggregate.id).catch(() => undefined);
        }
      },
    },
  );
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    for (const name of HOSTS) hostIds.push(await enrolHost(api, name));
  });
  afterAll(async () => {
    await proxy?.stop();
  });

  it('retries passing faults during the start and the end, and the lease completes with the hosts in place', async () => {
    // Each fault costs one retry of the same activity, with exponential backoff (1 s, 2 s, 4 s…).
    proxy.inject({ method: 'POST', path: /\/os-aggregates$/, fault: { kind: 'status', status: 503 }, times: 1 });
    proxy.inject({ method: 'GET', path: /\/os-aggregates$/, fault: { kind: 'hang' }, times: 1 });
    // Nova adds the host but the answer comes too late: the retry must see it is already there.
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes: 'add_host', fault: { kind: 'delay', ms: 4_000 }, times: 1 });
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes: 'remove_host', fault: { kind: 'reset' }, times: 1 });

    const created = await api('POST', '/v1/leases', {
      name: uniqueName('faulty'),
      start_date: inSeconds(2),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ min: 2, max: 2, before_end: '' })],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const { aggregate } = created.body.lease.reservations[0];
    await eventually(async () => ((await lease(id)).status === 'ACTIVE' ? true : undefined), 120_000);
    expect((await aggregateNamed(aggregate))?.hosts.sort()).toEqual(HOSTS);
    expect((await aggregateNamed(freepool))?.hosts).toEqual([]);
    const startFaults = proxy.injected();
    expect(startFaults).toBe(4);

    proxy.inject({ method: 'GET', path: /\/servers\/detail/, fault: { kind: 'status', status: 503 }, times: 1 });
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes: 'remove_host', fault: { kind: 'status', status: 500 }, times: 1 });
    proxy.inject({ method: 'DELETE', path: /\/os-aggregates\/\d+$/, fault: { kind: 'hang' }, times: 1 });
    expect((await api('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await lease(id)).status === 'TERMINATED' ? true : undefined), 120_000);
    expect(proxy.injected() - startFaults).toBe(3);
    expect((await aggregateNamed(freepool))?.hosts.sort()).toEqual(HOSTS);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
  }, 240_000);

  it('a permanent failure puts the lease in ERROR with the reason, and the host that had moved goes back to the pool', async () => {
    proxy.clear();
    // Nova refuses fake-3 for good (a 4xx cannot succeed by trying again); fake-2 moves first.
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes: '"host":"fake-3"', fault: { kind: 'status', status: 400 }, times: Infinity });
    const created = await api('POST', '/v1/leases', {
      name: uniqueName('doomed'),
      start_date: inSeconds(2),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ min: 2, max: 2 })],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const failed = await eventually(async () => {
      const current = await lease(id);
      return current.status === 'ERROR' ? current : undefined;
    }, 120_000);
    expect(failed.status_reason).toMatch(/^start failed: .*injected fault/);
    expect(failed.reservations[0].status).toBe('error');
    expect((await aggregateNamed(freepool))?.hosts.sort()).toEqual(HOSTS);
    expect(await aggregateNamed(created.body.lease.reservations[0].aggregate)).toBeUndefined();
    // The hosts are free again: a new lease can have them.
    proxy.clear();
    const next = await api('POST', '/v1/leases', {
      name: uniqueName('after-error'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ min: 2, max: 2 })],
    });
    expect(next.status).toBe(201);
  }, 240_000);
});
