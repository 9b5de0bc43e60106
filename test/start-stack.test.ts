/**
 * `npm start` as a user runs it: the whole dev stack on its own ports and data dir, healthy,
 * Web UI served, and after SIGTERM no process of it left.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { json } from './support/http';
import { freePort } from './support/ports';

const START_SCRIPT = path.join(__dirname, '..', 'dist', 'scripts', 'start.js');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function processesUsing(marker: string): string[] {
  return fs.readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).flatMap((pid) => {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      return cmdline.includes(marker) ? [`${pid}: ${cmdline}`] : [];
    } catch {
      return [];
    }
  });
}

describe('npm start (dev stack)', () => {
  it('becomes healthy, serves the Web UI, and leaves no process behind on SIGTERM', async () => {
    expect(fs.existsSync(START_SCRIPT)).toBe(true); // `npm test` builds first
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-stack-'));
    fs.chmodSync(dataDir, 0o755);
    const ports = { api: await freePort(), temporal: await freePort(), ui: await freePort(), pg: await freePort() };
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      LK_DATA_DIR: dataDir,
      LK_API_PORT: String(ports.api),
      LK_TEMPORAL_PORT: String(ports.temporal),
      LK_TEMPORAL_UI_PORT: String(ports.ui),
      LK_PG_PORT: String(ports.pg),
    };
    delete env.DATABASE_URL; // start local servers, as on a fresh machine
    delete env.TEMPORAL_ADDRESS;

    const stack = spawn(process.execPath, [START_SCRIPT], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    stack.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    stack.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => stack.on('exit', (code) => resolve(code)));

    try {
      const started = Date.now();
      while (!output.includes('healthy after') && Date.now() - started < 90_000 && stack.exitCode === null) {
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(output).toContain('healthy after');

      const health = await fetch(`http://127.0.0.1:${ports.api}/healthz`);
      expect(health.status).toBe(200);
      expect((await json(health)).checks).toMatchObject({ temporal: { ok: true }, database: { ok: true } });

      const ui = await fetch(`http://127.0.0.1:${ports.ui}/`);
      expect(ui.status).toBe(200);
      expect(await ui.text()).toMatch(/<!doctype html>/i);

      const pidDir = path.join(dataDir, 'run');
      const pids = fs.readdirSync(pidDir).map((file) => Number(fs.readFileSync(path.join(pidDir, file), 'utf8').split(' ')[0]));
      expect(pids).toHaveLength(4); // postgres, temporal, worker, api
      expect(pids.every(alive)).toBe(true);

      stack.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(pids.filter(alive)).toEqual([]);
      expect(processesUsing(dataDir)).toEqual([]);
      expect(fs.readdirSync(pidDir)).toEqual([]);
    } finally {
      if (stack.exitCode === null) stack.kill('SIGKILL');
      for (const line of processesUsing(dataDir)) process.kill(Number(line.split(':')[0]), 'SIGKILL');
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
