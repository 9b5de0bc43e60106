/**
 * `npm run bench:healing`: how long from a host failing to its replacement serving the lease, with
 * the loopback OpenStack. Each trial leases one host (start now), forces its compute service down
 * in Nova, and times: the host recorded failed (detection: the grace period plus up to one look),
 * and the replacement in the lease's aggregate (healing). Then the host is brought back and the
 * lease deleted. Two modes, LK_BENCH_TRIALS trials each (default 20): the monitor polling only, then
 * also woken by Nova's notifications (the rig's LK_NOVA_NOTIFICATIONS_URL; a look at the notice
 * and one just after the grace, instead of up to an interval later). LK_BENCH_HEALING_MODES
 * (`polling,notifications`) picks. The monitor's settings are the product's defaults unless
 * LK_HOST_MONITOR_INTERVAL_SECONDS and LK_HOST_FAIL_GRACE_SECONDS say otherwise.
 * Blazar for comparison: healing off by default; when on, a 60 s poll (or Nova notifications).
 * Writes bench/results/healing.json.
 */
import pino from 'pino';
import { loadConfig } from '../src/config';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { deleteAggregateNamed, uniqueName } from '../dev-stack/fixtures/openstack';
import { rigClients, rigEnv } from '../dev-stack/openstack-rig';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { enrolHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, startTestStack } from '../dev-stack/stack';
import { wakeHostMonitorOnNovaNotifications } from '../worker/host-monitor';
import { runBenchmark, summary } from './common';

const TRIALS = Number(process.env.LK_BENCH_TRIALS ?? 20);
const MODES = (process.env.LK_BENCH_HEALING_MODES ?? 'polling,notifications').split(',').map((mode) => mode.trim());
const HOSTS = ['fake-1', 'fake-2', 'fake-3'];
const CLOSED_PROJECT = 'leasekeeper-freepool';

runBenchmark(
  'healing',
  async () => {
    if (!Number.isInteger(TRIALS) || TRIALS < 1 || TRIALS > 200) throw new Error('LK_BENCH_TRIALS must be 1..200');
    if (MODES.length === 0 || MODES.some((mode) => mode !== 'polling' && mode !== 'notifications')) throw new Error('LK_BENCH_HEALING_MODES: polling, notifications or both (comma-separated)');
    const notificationsUrl = rigEnv().LK_NOVA_NOTIFICATIONS_URL;
    if (MODES.includes('notifications') && !notificationsUrl) throw new Error("the rig's env.sh has no LK_NOVA_NOTIFICATIONS_URL: bring the rig up afresh (down.sh, up.sh)");
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
    const results: Record<string, { detectionMs: ReturnType<typeof summary>; healingMs: ReturnType<typeof summary>; failureToReplacementMs: ReturnType<typeof summary> }> = {};
    let listening: { stop(): Promise<void> } | undefined;
    try {
      for (const host of HOSTS) hostIds.set(host, await enrolHost(api, host));
      for (const mode of MODES) {
        if (mode === 'notifications') {
          // As the worker does with LK_NOVA_NOTIFICATIONS_URL, beside the same monitor.
          let consuming!: () => void;
          const ready = new Promise<void>((resolve) => (consuming = resolve));
          listening = wakeHostMonitorOnNovaNotifications(stack.temporal.client, stack.config, notificationsUrl, pino({ level: 'warn' }), { onConsuming: () => consuming() });
          await ready;
        }
        const times = await trials(mode);
        await listening?.stop();
        listening = undefined;
        results[mode] = { detectionMs: summary(times.detection), healingMs: summary(times.healing), failureToReplacementMs: summary(times.total) };
      }
    } finally {
      await listening?.stop();
      if (forced) await admin.nova.updateService(forced, { forced_down: false }).catch(() => undefined);
      for (const lease of (await api('GET', '/v1/leases')).body?.leases ?? []) await api('DELETE', `/v1/leases/${lease.id}`);
      for (const id of hostIds.values()) await api('DELETE', `/v1/os-hosts/${id}`);
      await deleteAggregateNamed(admin, freepool);
      await deleteAggregateNamed(admin, failed);
      await stack.stop();
    }

    async function trials(mode: string): Promise<{ detection: number[]; healing: number[]; total: number[] }> {
      const detection: number[] = [];
      const healing: number[] = [];
      const total: number[] = [];
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
        console.log(`${mode} trial ${trial}: failed after ${Math.round(failedAt - downAt)} ms, replaced ${Math.round(replacedAt - failedAt)} ms later`);

        await admin.nova.updateService(forced, { forced_down: false });
        forced = undefined;
        await eventually(async () => ((await stateOf(host)) === 'up' && (await inAggregate(freepool, host)) ? true : undefined), budget, 100);
        const deleted = await api('DELETE', `/v1/leases/${lease.id}`);
        if (deleted.status !== 204) throw new Error(`trial ${trial}: delete answered ${deleted.status}`);
      }
      return { detection, healing, total };
    }

    const figures = {
      trials: TRIALS,
      monitor: { intervalSeconds: monitor.intervalMs / 1000, graceSeconds: monitor.graceMs / 1000 },
      // polling: Nova polled every interval; notifications: also woken by Nova's service.update (and once just after the grace).
      modes: results,
      blazar: 'healing off by default; when on, a 60 s poll of Nova (or its notifications), and only for reservations within the next 60 minutes',
    };
    console.log(JSON.stringify(figures, null, 2));
    return figures;
  },
  { rig: true },
);
