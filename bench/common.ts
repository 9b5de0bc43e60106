/** What every benchmark shares: its own servers, latency summaries, the machine line, the results file. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import globalSetup from '../test/global-setup';
import globalTeardown from '../test/global-teardown';
import { REPO_ROOT } from '../src/paths';

export function summary(values: number[]) {
  const sorted = values.map(Math.round).sort((a, b) => a - b);
  const at = (p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN);
  return { n: sorted.length, p50: at(50), p99: at(99), max: sorted[sorted.length - 1] ?? NaN };
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
export function processTreeCpuSeconds(pid: number): number {
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

/** The throw-away PostgreSQL server the benchmark runs against (test/global-setup.ts). */
export function postgresServerPid(): number {
  const proc = globalThis.__LK_TEST_SERVERS__?.processes.find((p) => p.options.name === 'postgres');
  if (!proc?.child.pid) throw new Error('no PostgreSQL server of this benchmark (DATABASE_URL set?)');
  return proc.child.pid;
}

/** The throw-away Temporal dev server the benchmark runs against (test/global-setup.ts). */
export function temporalServer(): { pid: number; dbFile: string } {
  const servers = globalThis.__LK_TEST_SERVERS__;
  const proc = servers?.processes.find((p) => p.options.name === 'temporal');
  if (!servers || !proc?.child.pid) throw new Error('no Temporal dev server of this benchmark (TEMPORAL_ADDRESS set?)');
  return { pid: proc.child.pid, dbFile: path.join(servers.tmpDir, 'temporal.db') };
}

/** Size of a SQLite database with its write-ahead log, in MB. */
export function sqliteMb(dbFile: string): number {
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

/** Runs a benchmark between a throw-away PostgreSQL and Temporal dev server, and saves its result. */
export function runBenchmark(name: string, body: () => Promise<Record<string, unknown>>): void {
  const stopEverything = async () => {
    for (const stop of extraStops) await stop().catch(() => undefined);
    await globalTeardown();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`${signal}: stopping the benchmark's servers`);
      void stopEverything().finally(() => process.exit(130));
    });
  }
  const main = async () => {
    await globalSetup();
    try {
      const result = { benchmark: name, date: new Date().toISOString(), machine: machine(), ...(await body()) };
      const out = path.join(REPO_ROOT, 'bench', 'results', `${name}.json`);
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
