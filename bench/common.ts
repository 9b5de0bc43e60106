/** What every benchmark shares: its own servers, latency summaries, the machine line, the results file. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServers, startServersWithRig, stopServers, stopServersWithRig } from '../dev-stack/servers';
import type { Client as TemporalClient } from '@temporalio/client';
import { Client } from 'pg';
import type { ManagedProcess } from '../dev-stack/processes';
import { freePort } from '../dev-stack/ports';
import { startApiProcess, startWorkerProcess, type WorkerProcessTarget } from '../dev-stack/worker-process';
import { loadConfig } from '../src/config';
import { REPO_ROOT } from '../src/paths';

export function summary(values: number[]) {
  const sorted = values.map(Math.round).sort((a, b) => a - b);
  const at = (p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN);
  return { n: sorted.length, p50: at(50), p95: at(95), p99: at(99), max: sorted[sorted.length - 1] ?? NaN };
}

/** CPU seconds used so far and resident memory of a process, from /proc (Linux). */
export function processStats(pid: number): { cpuSeconds: number; rssMb: number; peakRssMb: number } {
  // Fields after the command name (which may contain spaces): utime and stime are the 12th and 13th.
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { cpuSeconds: Math.round((ticks / CLOCK_TICKS) * 10) / 10, rssMb: Math.round(kb('VmRSS') / 1024), peakRssMb: Math.round(kb('VmHWM') / 1024) };
}
const CLOCK_TICKS = 100; // USER_HZ on Linux

/** CPU seconds of a process, its exited children (reaped) and its live children: e.g. PostgreSQL and its backends. */
function processTreeCpuSeconds(pid: number): number {
  const ticksOf = (stat: string, fields: number[]) => {
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields.reduce((sum, i) => sum + Number(rest[i]), 0);
  };
  let ticks = ticksOf(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'), [11, 12, 13, 14]);
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) ticks += ticksOf(stat, [11, 12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks / CLOCK_TICKS;
}

/** A server the benchmark started (dev-stack/servers.ts), by process name; none when it uses an existing one. */
function ownServer(name: string): number | undefined {
  return globalThis.__LK_TEST_SERVERS__?.processes.find((p) => p.options.name === name)?.child.pid;
}

/** Which Temporal the benchmark runs against, for its results. */
export function temporalUnderTest(): string {
  if (!ownServer('temporal')) return `existing server at ${process.env.TEMPORAL_ADDRESS ?? '?'} (TEMPORAL_ADDRESS)`;
  return loadConfig().temporal.topology === 'server' ? 'temporal-server on PostgreSQL (LK_TEMPORAL=server)' : 'the CLI dev server on SQLite';
}

/**
 * Starts counting CPU seconds by process: this one (the clients, and the API and worker when they
 * run in it), each server the benchmark started (Temporal, Temporal's own PostgreSQL with
 * LK_TEMPORAL=server, leasekeeper's PostgreSQL, each with its children), and `others` (e.g. a
 * worker process). The returned function reads the seconds used since; a server the benchmark
 * did not start (TEMPORAL_ADDRESS, DATABASE_URL) is named as not measured.
 */
export function cpuMeter(others: Record<string, number> = {}): () => Record<string, number | string> {
  const pids: Record<string, number> = { ...others };
  const unmeasured: Record<string, string> = {};
  for (const [role, name, setting] of [['temporal', 'temporal', 'TEMPORAL_ADDRESS'], ['temporalDatabase', 'temporal-postgres', ''], ['postgres', 'postgres', 'DATABASE_URL']] as const) {
    const pid = ownServer(name);
    if (pid) pids[role] = pid;
    else if (setting) unmeasured[role] = `not measured (an existing server: ${setting})`;
  }
  const round = (seconds: number) => Math.round(seconds * 100) / 100;
  const before = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, processTreeCpuSeconds(pid)]));
  const self = process.cpuUsage();
  return () => {
    const used = process.cpuUsage(self);
    return {
      benchmarkProcess: round((used.user + used.system) / 1e6),
      ...Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, round(processTreeCpuSeconds(pid) - before[role])])),
      ...unmeasured,
    };
  };
}

/**
 * The real worker as its own process, `count` of them on the same task queue (`script`: a
 * benchmark's own worker entry, e.g. dist/bench/calendar-only-worker.js), and `apis` API
 * processes beside them (none unless asked), all stopped on Ctrl-C too; and a CPU meter that
 * counts them (`worker`, or `worker1`, `worker2`…, and `api1`…) beside the servers.
 */
export async function measuredWorkers(
  stack: WorkerProcessTarget,
  count = 1,
  options: { script?: string; apis?: number; apiScript?: string } = {},
): Promise<{ workers: ManagedProcess[]; apis: Array<{ process: ManagedProcess; url: string }>; pids: number[]; cpuUsed: () => Record<string, number | string> }> {
  const workers = await Promise.all(Array.from({ length: count }, () => startWorkerProcess(stack, {}, options.script)));
  for (const worker of workers) stopOnExit(() => worker.stop());
  const apis = await Promise.all(
    Array.from({ length: options.apis ?? 0 }, async () => {
      const port = await freePort();
      const api = await startApiProcess(stack, port, {}, options.apiScript);
      stopOnExit(() => api.stop());
      return { process: api, url: `http://127.0.0.1:${port}` };
    }),
  );
  const pids = workers.map((worker) => worker.child.pid!);
  const roles = {
    ...Object.fromEntries(pids.map((pid, i) => [count === 1 ? 'worker' : `worker${i + 1}`, pid])),
    ...Object.fromEntries(apis.map((api, i) => [`api${i + 1}`, api.process.child.pid!])),
  };
  return { workers, apis, pids, cpuUsed: cpuMeter(roles) };
}

const eventMs = (time: { seconds?: { toNumber(): number } | number | null; nanos?: number | null } | null | undefined) =>
  Number(typeof time?.seconds === 'object' && time.seconds ? time.seconds.toNumber() : (time?.seconds ?? 0)) * 1000 + (time?.nanos ?? 0) / 1e6;

/**
 * From a workflow's history: when it was started, and when it first completed a workflow task
 * (it ran: handlers set, its first timer or activity scheduled), in epoch ms; undefined: not yet.
 */
export async function workflowRunningAt(client: TemporalClient, workflowId: string): Promise<{ startedMs: number; firstTaskMs?: number }> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const completed = events.find((e) => e.workflowTaskCompletedEventAttributes);
  return { startedMs: eventMs(events[0]?.eventTime), ...(completed ? { firstTaskMs: eventMs(completed.eventTime) } : {}) };
}

/** The Temporal server's process stats when the benchmark started it. */
export function temporalServerStats(): ReturnType<typeof processStats> | undefined {
  const pid = ownServer('temporal');
  return pid ? processStats(pid) : undefined;
}

/** Size of Temporal's storage in MB when the benchmark started it: the SQLite file, or its two PostgreSQL databases. */
export async function temporalStorageMb(): Promise<number | undefined> {
  const servers = globalThis.__LK_TEST_SERVERS__;
  if (!servers || !ownServer('temporal')) return undefined;
  if (!servers.temporalDatabaseUrl) return sqliteMb(path.join(servers.tmpDir, 'temporal.db'));
  const client = new Client({ connectionString: servers.temporalDatabaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ bytes: string }>("SELECT sum(pg_database_size(datname))::text AS bytes FROM pg_database WHERE datname IN ('temporal', 'temporal_visibility')");
    return Math.round(Number(rows[0].bytes) / 2 ** 20);
  } finally {
    await client.end();
  }
}

/** Size of a SQLite database with its write-ahead log, in MB. */
function sqliteMb(dbFile: string): number {
  const bytes = ['', '-wal', '-shm'].reduce((sum, suffix) => sum + (fs.existsSync(dbFile + suffix) ? fs.statSync(dbFile + suffix).size : 0), 0);
  return Math.round(bytes / 2 ** 20);
}

export function machine(): string {
  return `${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.cpus()[0]?.model ?? 'unknown cpu'}`;
}

/** What a benchmark started beside the shared servers (e.g. a worker process): stopped on Ctrl-C too. */
const extraStops = new Set<() => Promise<unknown>>();
export function stopOnExit(stop: () => Promise<unknown>): void {
  extraStops.add(stop);
}

/**
 * Runs a benchmark between a throw-away PostgreSQL and Temporal (the dev server; temporal-server
 * with LK_TEMPORAL=server; or the servers DATABASE_URL and TEMPORAL_ADDRESS name), and saves its result.
 */
export function runBenchmark(name: string, body: () => Promise<Record<string, unknown>>, options: { rig?: boolean } = {}): void {
  // With the rig: the loopback OpenStack too (brought up unless it runs, and stopped again if it was not).
  const setUp = options.rig ? startServersWithRig : startServers;
  const stopEverything = async () => {
    for (const stop of extraStops) await stop().catch(() => undefined);
    await (options.rig ? stopServersWithRig : stopServers)();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`${signal}: stopping the benchmark's servers`);
      void stopEverything().finally(() => process.exit(130));
    });
  }
  const main = async () => {
    await setUp();
    try {
      const result = { benchmark: name, date: new Date().toISOString(), machine: machine(), temporal: temporalUnderTest(), ...(await body()) };
      // One file per Temporal: the dev server's is the reference bench:report reads.
      const suffix = !ownServer('temporal') ? '-existing-temporal' : loadConfig().temporal.topology === 'server' ? '-temporal-server' : '';
      const out = path.join(REPO_ROOT, 'bench', 'results', `${name}${suffix}.json`);
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
      console.log(`results: ${path.relative(REPO_ROOT, out)}`);
    } finally {
      await stopEverything();
    }
  };
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
