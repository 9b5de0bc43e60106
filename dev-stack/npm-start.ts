/**
 * `npm start` run as a user runs it, for the tests of the dev stack: its own data dir and ports,
 * its output collected, and what it leaves behind findable by the data dir's path.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';
import { freePort, freePortPair, freeTemporalServerPort } from './ports';

export const START_SCRIPT = path.join(REPO_ROOT, 'dist', 'scripts', 'start.js');

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Processes whose command line mentions `marker` (e.g. the stack's data dir), as "pid: cmdline". */
export function processesUsing(marker: string): string[] {
  return fs.readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).flatMap((pid) => {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      return cmdline.includes(marker) ? [`${pid}: ${cmdline}`] : [];
    } catch {
      return [];
    }
  });
}

export interface DevStack {
  child: ChildProcess;
  dataDir: string;
  ports: { api: number; temporal: number; ui: number; pg: number; workerMetrics: number };
  apiUrl: string;
  output: () => string;
  exited: Promise<number | null>;
  /** Resolves once the output has `text`; fails with the output's end when `timeoutMs` passed or the stack exited first. */
  expectOutput: (text: string, timeoutMs: number) => Promise<void>;
  /** Kills whatever is left (after a failed test): the stack, then every process of its data dir; removes the data dir. */
  cleanUp: () => void;
}

export async function startDevStack(env: NodeJS.ProcessEnv): Promise<DevStack> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-stack-'));
  fs.chmodSync(dataDir, 0o755);
  // The Temporal port suits either topology (LK_TEMPORAL=server needs its neighbours free too).
  const ports = { api: await freePort(), temporal: await freeTemporalServerPort(), ui: await freePort(), pg: await freePort(), workerMetrics: await freePortPair() };
  const child = spawn(process.execPath, [START_SCRIPT], {
    env: {
      ...env,
      LK_DATA_DIR: dataDir,
      LK_API_PORT: String(ports.api),
      LK_TEMPORAL_PORT: String(ports.temporal),
      LK_TEMPORAL_UI_PORT: String(ports.ui),
      LK_PG_PORT: String(ports.pg),
      LK_WORKER_METRICS_PORT: String(ports.workerMetrics),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    dataDir,
    ports,
    apiUrl: `http://127.0.0.1:${ports.api}`,
    output: () => output,
    exited,
    async expectOutput(text, timeoutMs) {
      const started = Date.now();
      while (!output.includes(text) && Date.now() - started < timeoutMs && child.exitCode === null) await new Promise((r) => setTimeout(r, 200));
      if (output.includes(text)) return;
      const why = child.exitCode === null ? `not within ${timeoutMs} ms` : `the stack exited first (code ${child.exitCode})`;
      throw new Error(`npm start never printed "${text}": ${why}; its output ended:\n${output.slice(-4000)}`);
    },
    cleanUp() {
      if (child.exitCode === null) child.kill('SIGKILL');
      for (const line of processesUsing(dataDir)) process.kill(Number(line.split(':')[0]), 'SIGKILL');
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
