/**
 * `npm start` as a user runs it: the whole dev stack on its own ports and data dir, healthy,
 * Web UI served, and after SIGTERM no process of it left. (With the loopback OpenStack:
 * test/openstack/start-with-rig.test.ts.)
 */
import fs from 'node:fs';
import path from 'node:path';
import { alive, processesUsing, START_SCRIPT, startDevStack } from './support/dev-stack';
import { json } from './support/http';

describe('npm start (dev stack)', () => {
  it('becomes healthy, serves the Web UI, and leaves no process behind on SIGTERM', async () => {
    expect(fs.existsSync(START_SCRIPT)).toBe(true); // `npm test` builds first
    const env: NodeJS.ProcessEnv = { ...process.env, LK_OPENSTACK: 'none' };
    delete env.DATABASE_URL; // start local servers, as on a fresh machine
    delete env.TEMPORAL_ADDRESS;
    const stack = await startDevStack(env);
    try {
      expect(await stack.waitForOutput('healthy after', 90_000)).toBe(true);
      expect(stack.output()).toContain('OpenStack: none (LK_OPENSTACK=none)');

      const health = await fetch(`${stack.apiUrl}/healthz`);
      expect(health.status).toBe(200);
      expect((await json(health)).checks).toMatchObject({ temporal: { ok: true }, database: { ok: true } });

      const ui = await fetch(`http://127.0.0.1:${stack.ports.ui}/`);
      expect(ui.status).toBe(200);
      expect(await ui.text()).toMatch(/<!doctype html>/i);

      // The calendar page, as printed: built, with the development sign-in.
      expect(stack.output()).toContain(`Calendar page:    ${stack.apiUrl}/calendar/`);
      const page = await fetch(`${stack.apiUrl}/calendar/`);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain('<script type="module" src="calendar.js">');
      expect(await json(await fetch(`${stack.apiUrl}/calendar/settings`))).toEqual({ auth_strategy: 'noauth', default_project_id: 'admin' });

      const pidDir = path.join(stack.dataDir, 'run');
      const pids = fs.readdirSync(pidDir).map((file) => Number(fs.readFileSync(path.join(pidDir, file), 'utf8').split(' ')[0]));
      expect(pids).toHaveLength(4); // postgres, temporal, worker, api
      expect(pids.every(alive)).toBe(true);

      stack.child.kill('SIGTERM');
      expect(await stack.exited).toBe(0);
      expect(pids.filter(alive)).toEqual([]);
      expect(processesUsing(stack.dataDir)).toEqual([]);
      expect(fs.readdirSync(pidDir)).toEqual([]);
    } finally {
      stack.cleanUp();
    }
  }, 120_000);

  it('refuses an LK_OPENSTACK it does not know, naming the choices', async () => {
    const stack = await startDevStack({ ...process.env, LK_OPENSTACK: 'devstack' });
    try {
      expect(await stack.exited).toBe(2);
      expect(stack.output()).toContain('start refused: LK_OPENSTACK="devstack": expected "none" (no cloud) or "rig" (the loopback OpenStack)');
    } finally {
      stack.cleanUp();
    }
  });
});
