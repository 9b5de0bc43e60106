/**
 * `npm run bench:healing`: how long from a host failing to its replacement serving the lease, with
 * the loopback OpenStack. Each trial leases one host (start now), forces its compute service down
 * in Nova, and times: the host recorded failed (detection: the grace period plus up to one look),
 * and the replacement in the lease's aggregate (healing). Then the host is brought back and the
 * lease deleted. The monitor's settings are the product's defaults unless LK_HOST_MONITOR_INTERVAL_SECONDS
 * and LK_HOST_FAIL_GRACE_SECONDS say otherwise. LK_BENCH_TRIALS (default 20).
 * Blazar for comparison: healing off by default; when on, a 60 s poll (or Nova notifications).
 * Writes bench/results/healing.json.
 */
import { loadConfig } from '../src/config';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { deleteAggregateNamed, rigClients, uniqueName } from '../test/openstack/support';
import { blazarHostReservation } from '../test/support/builders';
import { enrolHost } from '../test/support/hosts';
import { apiClient, eventually, inSeconds, startTestStack } from '../test/support/stack';
import { runBenchmark, summary } from './common';

const TRIALS = Number(process.env.LK_BENCH_TRIALS ?? 20);
const HOSTS = ['fake-1', 'fake-2', 'fake-3'];
const CLOSED_PROJECT = 'leasekeeper-freepool';

runBenchmark(
  'healing',
  async () => {
    if (!Number.isInteger(TRIALS) || TRIALS < 1 || TRIALS > 200) throw new Error('LK_BENCH_TRIALS must be 1..200');
    const admin = rigClients('leasekeeper-admin');
    const freepool = uniqueName('freepool');
    const failed = uniqueName('failed');
    const monitor = loadConfig().hostMonitor;
    const stack = await startTestStack({
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_FAILED_AGGREGATE: failed },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool, failedAggregate: failed, endAggregates: { closedProjectId: CLOSED_PROJECT } })],
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => admin.nova }, freepool, failed: { name: failed, closedProjectId: CLOSED_PROJECT } }),
      openstack: () => admin,
    });
    const api = apiClient(stack.url);
    const hostIds = new Map<string, string>();
    let forced: string | undefined;
    const stateOf = async (host: string) => (await api('GET', `/v1/os-hosts/${hostIds.get(host)}`)).body.host.state as string;
    const inAggregate = async (aggregate: string, host: string) => ((await admin.nova.listAggregates()).find((a) => a.name === aggregate)?.hosts ?? []).includes(host);
    const serviceOf = async (host: string) => (await admin.nova.listServices({ binary: 'nova-compute', host }))[0].id;
    const detection: number[] = [];
    const healing: number[] = [];
    const total: number[] = [];
    try {
      for (const host of HOSTS) hostIds.set(host, await enrolHost(api, host));
      for (let trial = 1; trial <= TRIALS; trial++) {
        const created = await api('POST', '/v1/leases', { name: `heal-${trial}`, start_date: 'now', end_date: inSeconds(3600), reservations: [blazarHostReservation()] });
        if (created.status !== 201) throw new Error(`trial ${trial}: create answered ${created.status} ${JSON.stringify(created.body)}`);
        const lease = created.body.lease;
        const aggregate: string = lease.reservations[0].aggregate;
        const [host] = lease.reservations[0].hosts as string[];
        await eventually(async () => ((await api('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 60_000);

        forced = await serviceOf(host);
        const downAt = performance.now();
        await admin.nova.updateService(forced, { forced_down: true });
        const budget = monitor.graceMs + monitor.intervalMs * 3 + 60_000;
        await eventually(async () => ((await stateOf(host)) === 'failed' ? true : undefined), budget, 50);
        const failedAt = performance.now();
        const replacement = await eventually(async () => {
          const hosts = (await api('GET', `/v1/leases/${lease.id}`)).body.lease.reservations[0].hosts as string[];
          return hosts[0] !== host ? hosts[0] : undefined;
        }, budget, 50);
        await eventually(async () => ((await inAggregate(aggregate, replacement)) ? true : undefined), 60_000, 50);
        const replacedAt = performance.now();
        detection.push(failedAt - downAt);
        healing.push(replacedAt - failedAt);
        total.push(replacedAt - downAt);
        console.log(`trial ${trial}: failed after ${Math.round(failedAt - downAt)} ms, replaced ${Math.round(replacedAt - failedAt)} ms later`);

        await admin.nova.updateService(forced, { forced_down: false });
        forced = undefined;
        await eventually(async () => ((await stateOf(host)) === 'up' && (await inAggregate(freepool, host)) ? true : undefined), budget, 100);
        const deleted = await api('DELETE', `/v1/leases/${lease.id}`);
        if (deleted.status !== 204) throw new Error(`trial ${trial}: delete answered ${deleted.status}`);
      }
    } finally {
      if (forced) await admin.nova.updateService(forced, { forced_down: false }).catch(() => undefined);
      for (const lease of (await api('GET', '/v1/leases')).body?.leases ?? []) await api('DELETE', `/v1/leases/${lease.id}`);
      for (const id of hostIds.values()) await api('DELETE', `/v1/os-hosts/${id}`);
      await deleteAggregateNamed(admin, freepool);
      await deleteAggregateNamed(admin, failed);
      await stack.stop();
    }
    const figures = {
      trials: TRIALS,
      monitor: { intervalSeconds: monitor.intervalMs / 1000, graceSeconds: monitor.graceMs / 1000, source: 'polling Nova (notifications: not built yet)' },
      detectionMs: summary(detection),
      healingMs: summary(healing),
      failureToReplacementMs: summary(total),
      blazar: 'healing off by default; when on, a 60 s poll of Nova (or its notifications), and only for reservations within the next 60 minutes',
    };
    console.log(JSON.stringify(figures, null, 2));
    return figures;
  },
  { rig: true },
);
