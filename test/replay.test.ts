/**
 * Every committed history under test/histories/ must replay against the current workflow code:
 * a change that would break leases already running fails here, before it reaches a worker.
 */
import fs from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { bundleWorkflowCode, Worker, type WorkflowBundle } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { WORKFLOWS_PATH } from '../worker/create-worker';
import { SCENARIOS } from './histories/record';
import { quietTemporalRuntime } from '../dev-stack/temporal-connection';

const HISTORY_DIR = path.join(__dirname, 'histories');
const histories = fs
  .readdirSync(HISTORY_DIR)
  .filter((file) => file.endsWith('.json'))
  .sort()
  .map((file) => ({ workflowId: file.replace(/\.json$/, ''), history: historyFromJSON(JSON.parse(fs.readFileSync(path.join(HISTORY_DIR, file), 'utf8'))) }));

const quiet = { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

describe('replay of recorded lease histories', () => {
  let current: WorkflowBundle;
  beforeAll(async () => {
    quietTemporalRuntime();
    current = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quiet });
  });

  it('has a recorded history for every scenario (older ones kept as <scenario>@<tag>.json)', () => {
    const scenarios = new Set(histories.map((h) => h.workflowId.split('@')[0]));
    expect([...scenarios].sort()).toEqual(Object.keys(SCENARIOS).sort());
    for (const { history } of histories) expect(history.events?.length).toBeGreaterThan(10);
  });

  it('replays every history against the current workflow code', async () => {
    const results: Array<[string, string | undefined]> = [];
    for await (const result of Worker.runReplayHistories({ workflowBundle: current }, histories)) {
      results.push([result.workflowId, result.error?.message]);
    }
    expect(results).toEqual(histories.map((h) => [h.workflowId, undefined]));
    // Replaying every history is pure CPU (22 s on a quiet machine): npm test runs it beside the rig
    // at idle priority, where it once outlasted the 60 s default; the bound only catches a hang.
  }, 300_000);

  it('fails replay with DeterminismViolationError when the workflow changes without a patch', async () => {
    const changed = await bundleWorkflowCode({ workflowsPath: require.resolve('./fixtures/changed-workflows'), logger: quiet });
    const whole = histories.find((h) => h.workflowId === 'whole-life')!;
    await expect(Worker.runReplayHistory({ workflowBundle: changed }, whole.history)).rejects.toBeInstanceOf(DeterminismViolationError);
  });
});
