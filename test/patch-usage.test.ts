/**
 * `npm run patches` counts, per patch, the running workflows of its type that started before it
 * (scripts/lib/patch-usage.ts): a lease workflow started here is counted while it runs, by its
 * start time, and no longer once it has stopped. Against the test run's Temporal, whose
 * visibility may lag: every look is polled, within bounds. Counts are compared around the
 * workflow's own start time, so that workflows left by other test files do not matter.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';
import { countRunningStartedBefore, patchCutoff, patchUsage } from '../scripts/lib/patch-usage';
import { leaseWorkflowId, leaseWorkflowType, type LeaseWorkflow } from '../workflows/lease/messages';
import { PATCHES, type WorkflowPatch } from '../workflows/patches';
import { eventually } from '../dev-stack/stack';
import { connectTestTemporal, testConfig } from '../dev-stack/temporal-connection';

describe('patch usage', () => {
  const config = testConfig();
  let temporal: Awaited<ReturnType<typeof connectTestTemporal>>;
  beforeAll(async () => {
    temporal = await connectTestTemporal(config);
  });
  afterAll(async () => {
    await temporal?.close();
  });

  it('takes the end of the patch day as its cutoff: a workflow started that day may predate the deploy', () => {
    expect(patchCutoff({ introduced: '2026-11-23' }).toISOString()).toBe('2026-11-24T00:00:00.000Z');
    expect(PATCHES.map((p) => patchCutoff(p).getTime())).not.toContain(NaN);
  });

  it('counts a running lease workflow by its start time, and no longer once it stopped', async () => {
    const { client } = temporal;
    const leaseId = randomUUID();
    // Nothing polls this task queue: the workflow stays Running, untouched, until terminated.
    const handle = await client.workflow.start<LeaseWorkflow>(leaseWorkflowType, {
      workflowId: leaseWorkflowId(leaseId),
      taskQueue: `patch-usage-${leaseId}`,
      args: [{ request: { id: leaseId, name: 'patch-usage', projectId: 'p', userId: 'u', start: 'now', end: 0, reservations: [], requestedMs: 0 }, requestHash: 'h' }],
    });
    const { startTime } = await handle.describe();
    const around = async () => {
      const before = await countRunningStartedBefore(client, leaseWorkflowType, startTime);
      const after = await countRunningStartedBefore(client, leaseWorkflowType, new Date(startTime.getTime() + 1_000));
      return after - before;
    };
    try {
      await eventually(async () => ((await around()) === 1 ? true : undefined), 15_000, 200, () => 'the started lease workflow was not counted');
      // A patch that came in the day the workflow started counts it (among any others still running).
      const sameDay: WorkflowPatch = { id: 'probe', workflowType: leaseWorkflowType, introduced: startTime.toISOString().slice(0, 10), oldBranch: 'x', oldHistories: 'none' };
      const [usage] = await patchUsage(client, [sameDay]);
      expect(usage.patch).toBe(sameDay);
      expect(usage.running).toBeGreaterThanOrEqual(1);
    } finally {
      await handle.terminate('patch usage test done');
    }
    await eventually(async () => ((await around()) === 0 ? true : undefined), 15_000, 200, () => 'the terminated lease workflow was still counted');
  });

  it('is what `npm run patches` lists: every patch with its count, on the configured Temporal (built script)', async () => {
    const run = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const env = { ...process.env, TEMPORAL_ADDRESS: config.temporal.address, TEMPORAL_NAMESPACE: config.temporal.namespace };
      const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'scripts', 'patches.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.on('exit', (code) => resolve({ code, output }));
    });
    expect(run.code).toBe(0);
    for (const patch of PATCHES) expect(run.output).toMatch(new RegExp(`^${patch.id} +${patch.introduced} +${patch.workflowType} +\\d+  `, 'm'));
  }, 30_000);
});
