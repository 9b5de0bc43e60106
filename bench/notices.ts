/**
 * `npm run bench:notices [N]`: does a webhook receiver slow leases down? N leases (default 100),
 * created by 8 clients, each starting at once and deleted after it is active, in these runs
 * (LK_BENCH_NOTICE_MODES, comma-separated, default all): `none`, no webhook; `live`, the project's
 * webhook on a live receiver; `dead`, the deployment's on one that accepts connections and never
 * answers (2 s time-out); `tarpit`, the live run while another project's 10 webhooks point at such a
 * receiver and a lease of its is renamed 25 times first (250 deliveries, the default 10 s time-out).
 * Prints create latency, start lag (when the start began minus when it was due, or created if later),
 * the project's lease.create notice latency (received minus the create's call) and delete latency
 * per run, and what the receivers got; writes bench/results/notices.json. Delivery runs in workflows
 * of its own on a task queue of its own, so neither receiver should cost the leases or the other
 * project's notices anything.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { runBenchmark, summary } from './common';
import { formatBlazarTimestamp } from '../src/domain/dates';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_NOTICE_LEASES ?? 100);
const CLIENTS = 8;
const HOSTS = 10;

const TARPIT_HOOKS = 10;
const TARPIT_RENAMES = 25;
const MODES = ['none', 'live', 'dead', 'tarpit'] as const;
type Mode = (typeof MODES)[number];

/** A receiver on 127.0.0.1: `live` answers 204 (and notes when each lease's lease.create came), `dead` holds every request open until closed. */
async function receiver(kind: 'live' | 'dead') {
  let received = 0;
  const held: http.ServerResponse[] = [];
  const created = new Map<string, number>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (kind === 'dead') {
        held.push(res);
        return;
      }
      received++;
      const notice = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { event_type: string; payload: { lease_id?: string } };
      if (notice.event_type === 'lease.create' && notice.payload.lease_id) created.set(notice.payload.lease_id, performance.now());
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received: () => received,
    held: () => held.length,
    /** When each lease's lease.create notice came (performance.now()). */
    created,
    close: async () => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function run(mode: Mode) {
  const target = mode === 'none' ? undefined : await receiver(mode === 'dead' ? 'dead' : 'live');
  const tarpit = mode === 'tarpit' ? await receiver('dead') : undefined;
  const env: Record<string, string> = { LK_NOTIFY_BEFORE_END: 'none' };
  // A short notice timeout keeps the dead receiver's retries busy during the run.
  if (mode === 'dead' && target) Object.assign(env, { LK_WEBHOOK_URLS: target.url, LK_NOTICE_TIMEOUT_MS: '2000' });
  // The project's own webhook (and the tarpit project's) are on loopback.
  if (mode === 'live' || mode === 'tarpit') env.LK_WEBHOOK_ALLOW_PRIVATE = 'true';
  const stack = await startTestStack({ env, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  try {
    for (let h = 0; h < HOSTS; h++) await insertHost(stack.db.pool, { name: `notice-bench-${mode}-${h}` });
    const api = apiClient(stack.url, { 'x-project-id': 'bench', 'x-user-id': 'bench', 'x-roles': 'member' });
    if (target && mode !== 'dead') {
      const put = await api('PUT', '/v1/projects/bench/webhooks', { webhooks: [{ url: target.url }] });
      if (put.status !== 200) throw new Error(`webhook: ${put.status} ${JSON.stringify(put.body)}`);
    }
    if (tarpit) await occupyTarpit(stack.url, tarpit);
    const createdAt = new Map<string, number>();
    const creates: number[] = [];
    const deletes: number[] = [];
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < COUNT) {
          const i = next++;
          const t = performance.now();
          const res = await api('POST', '/v1/leases', { name: `notice-${mode}-${i}`, start_date: 'now', end_date: formatBlazarTimestamp(Date.now() + 3_600_000) });
          creates.push(performance.now() - t);
          if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
          ids.push(res.body.lease.id);
          createdAt.set(res.body.lease.id, t);
        }
      }),
    );
    // Every lease active: its start's lag from the recorded event.
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { rows } = await stack.db.pool.query<{ n: string }>("SELECT count(*)::text AS n FROM leases WHERE status = 'ACTIVE' AND deleted_at IS NULL");
      if (Number(rows[0].n) === COUNT) break;
      if (Date.now() > deadline) throw new Error(`only ${rows[0].n} of ${COUNT} leases active after 120 s`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // "now" is the start of the minute (as Blazar's): the lag counts from when the lease was created, if later.
    const { rows: lags } = await stack.db.pool.query<{ lag: number }>(
      `SELECT (e->>'startedAt')::float8 - greatest((e->>'time')::float8, (document->>'createdMs')::float8) AS lag FROM leases, jsonb_array_elements(document->'events') e
       WHERE deleted_at IS NULL AND e->>'event_type' = 'start_lease'`,
    );
    next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < ids.length) {
          const id = ids[next++];
          const t = performance.now();
          const res = await api('DELETE', `/v1/leases/${id}`);
          deletes.push(performance.now() - t);
          if (res.status !== 204) throw new Error(`delete ${id}: ${res.status}`);
        }
      }),
    );
    // Each lease's lease.create notice at the project's webhook (live and tarpit runs): when it came after the create's call.
    const noticeDeadline = Date.now() + 120_000;
    while (mode !== 'none' && mode !== 'dead' && target && target.created.size < ids.length && Date.now() < noticeDeadline) await new Promise((resolve) => setTimeout(resolve, 200));
    const noticeLags = ids.flatMap((id) => (target?.created.has(id) ? [target.created.get(id)! - createdAt.get(id)!] : []));
    const result = {
      mode,
      createMs: summary(creates),
      startLagMs: summary(lags.map((r) => r.lag)),
      noticeMs: summary(noticeLags),
      deleteMs: summary(deletes),
      received: target?.received() ?? 0,
      ...(tarpit ? { tarpitHeld: tarpit.held() } : {}),
    };
    console.log(
      `${mode}: create p50 ${result.createMs.p50} ms p99 ${result.createMs.p99} ms · start lag p50 ${result.startLagMs.p50} ms p99 ${result.startLagMs.p99} ms · ` +
        `notice p50 ${result.noticeMs.p50} ms p99 ${result.noticeMs.p99} ms max ${result.noticeMs.max} ms (${result.noticeMs.n}) · delete p50 ${result.deleteMs.p50} ms p99 ${result.deleteMs.p99} ms · received ${result.received}` +
        (tarpit ? ` · tarpit holds ${tarpit.held()} deliveries` : ''),
    );
    return result;
  } finally {
    await stack.stop();
    await target?.close();
    await tarpit?.close();
  }
}

/** The tarpit project: 10 webhooks on the tarpit and a lease renamed 25 times (250 deliveries that never get an answer), until the tarpit holds some. */
async function occupyTarpit(url: string, tarpit: Awaited<ReturnType<typeof receiver>>): Promise<void> {
  const api = apiClient(url, { 'x-project-id': 'tarpit', 'x-user-id': 'tarpit', 'x-roles': 'member' });
  const put = await api('PUT', '/v1/projects/tarpit/webhooks', { webhooks: Array.from({ length: TARPIT_HOOKS }, (_, i) => ({ url: `${tarpit.url}?hook=${i}` })) });
  if (put.status !== 200) throw new Error(`tarpit webhooks: ${put.status} ${JSON.stringify(put.body)}`);
  const later = (hours: number) => formatBlazarTimestamp(Date.now() + hours * 3_600_000);
  const lease = await api('POST', '/v1/leases', { name: 'tarpit-0', start_date: later(24), end_date: later(48), reservations: [{ resource_type: 'physical:host', min: 1, max: 1 }] });
  if (lease.status !== 201) throw new Error(`tarpit lease: ${lease.status} ${JSON.stringify(lease.body)}`);
  for (let i = 1; i <= TARPIT_RENAMES; i++) {
    const renamed = await api('PUT', `/v1/leases/${lease.body.lease.id}`, { name: `tarpit-${i}` });
    if (renamed.status !== 200) throw new Error(`rename ${i}: ${renamed.status}`);
  }
  const deadline = Date.now() + 30_000;
  while (tarpit.held() < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
}

runBenchmark('notices', async () => {
  if (!Number.isInteger(COUNT) || COUNT < 1 || COUNT > 10_000) throw new Error('lease count must be 1..10000');
  const modes = (process.env.LK_BENCH_NOTICE_MODES ?? MODES.join(',')).split(',').map((mode) => mode.trim());
  const unknown = modes.filter((mode) => !(MODES as readonly string[]).includes(mode));
  if (unknown.length) throw new Error(`LK_BENCH_NOTICE_MODES: unknown ${unknown.join(', ')} (expected ${MODES.join(', ')})`);
  const runs = [];
  for (const mode of modes as Mode[]) runs.push(await run(mode));
  return { leases: COUNT, clients: CLIENTS, runs };
});
