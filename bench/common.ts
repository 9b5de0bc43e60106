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

export function machine(): string {
  return `${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.cpus()[0]?.model ?? 'unknown cpu'}`;
}

/** Runs a benchmark between a throw-away PostgreSQL and Temporal dev server, and saves its result. */
export function runBenchmark(name: string, body: () => Promise<Record<string, unknown>>): void {
  const main = async () => {
    await globalSetup();
    try {
      const result = { benchmark: name, date: new Date().toISOString(), machine: machine(), ...(await body()) };
      const out = path.join(REPO_ROOT, 'bench', 'results', `${name}.json`);
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
      console.log(`results: ${path.relative(REPO_ROOT, out)}`);
    } finally {
      await globalTeardown();
    }
  };
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
