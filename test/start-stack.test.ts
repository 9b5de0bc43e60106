/**
 * `npm start` as a user runs it, on either Temporal topology: the whole dev stack on its own ports
 * and data dir, healthy, Web UI served, a lease run, and after SIGTERM no process of it left.
 * (With the loopback OpenStack: test/openstack/start-with-rig.test.ts.)
 */
import fs from 'node:fs';
import path from 'node:path';
import { localUrl, withClient } from '../dev-stack/postgres-local';
import { alive, processesUsing, START_SCRIPT, startDevStack } from '../dev-stack/npm-start';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { json } from '../dev-stack/http';
import { apiClient, eventually, inSeconds } from '../dev-stack/stack';

describe('npm start (dev stack)', () => {
  // dev: the CLI's dev server (the default); server: temporal-server on PostgreSQL and the Web UI server.
  it.each([
    { topology: 'dev', processes: ['api', 'postgres', 'temporal', 'worker'] },
    { topology: 'server', processes: ['api', 'postgres', 'temporal', 'temporal-ui', 'worker'] },
  ])('with LK_TEMPORAL=$topology: becomes healthy, serves the Web UI, runs a lease, and leaves no process behind on SIGTERM', async ({ topology, processes }) => {
    expect(fs.existsSync(START_SCRIPT)).toBe(true); // `npm test` builds first
    const env: NodeJS.ProcessEnv = { ...process.env, LK_OPENSTACK: 'none', LK_TEMPORAL: topology };
    delete env.DATABASE_URL; // start local servers, as on a fresh machine
    delete env.TEMPORAL_ADDRESS;
    const stack = await startDevStack(env);
    try {
      await stack.expectOutput('healthy after', 90_000);
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

      // A lease runs on this Temporal: the namespace and its search attributes are there.
      const api = apiClient(stack.apiUrl);
      const created = await api('POST', '/v1/leases', { name: `on-${topology}`, start_date: 'now', end_date: inSeconds(600) });
      expect(created.status).toBe(201);
      await eventually(async () => ((await api('GET', `/v1/leases/${created.body.lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 30_000, 250);

      // The worker's metrics, where the start printed them: the lease's start is counted.
      expect(stack.output()).toContain(`http://127.0.0.1:${stack.ports.workerMetrics}/metrics (worker`);
      const workerMetrics = await (await fetch(`http://127.0.0.1:${stack.ports.workerMetrics}/metrics`)).text();
      expect(workerMetrics).toMatch(/^leasekeeper_lease_event_lag_seconds_count\{event="start_lease"\} 1$/m);

      // The Web UI sees it: its API lists the lease's workflow (what the operator's browser shows).
      const listed = await json(await fetch(`http://127.0.0.1:${stack.ports.ui}/api/v1/namespaces/default/workflows?query=${encodeURIComponent(`WorkflowId="${leaseWorkflowId(created.body.lease.id)}"`)}`));
      expect(listed.executions.map((run: { execution: { workflowId: string } }) => run.execution.workflowId)).toEqual([leaseWorkflowId(created.body.lease.id)]);

      const pidDir = path.join(stack.dataDir, 'run');
      const pidFiles = fs.readdirSync(pidDir).sort();
      expect(pidFiles).toEqual(processes.map((name) => `${name}.pid`).sort());
      const pids = pidFiles.map((file) => Number(fs.readFileSync(path.join(pidDir, file), 'utf8').split(' ')[0]));
      expect(pids.every(alive)).toBe(true);
      const temporalCommand = fs.readFileSync(`/proc/${pids[pidFiles.indexOf('temporal.pid')]}/cmdline`, 'utf8').split('\0')[0];
      expect(path.basename(temporalCommand)).toBe(topology === 'server' ? 'temporal-server' : 'temporal');
      if (topology === 'server') {
        // Temporal's own databases, beside leasekeeper's on the stack's PostgreSQL.
        const { rows } = await withClient(localUrl(stack.ports.pg, 'postgres'), (pg) =>
          pg.query("SELECT datname FROM pg_database WHERE datname LIKE 'temporal%' OR datname = 'leasekeeper' ORDER BY datname"),
        );
        expect(rows.map((row) => row.datname)).toEqual(['leasekeeper', 'temporal', 'temporal_visibility']);
      }

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
