/**
 * The lease workflows bundled for a worker: once by the build for production
 * (dist/workflow-bundle.js), and once per test run for every test worker (test/global-setup.ts).
 * Bundling takes seconds; a worker given the bundle starts without it.
 */
import { bundleWorkflowCode } from '@temporalio/worker';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';

export const WORKFLOWS_SOURCE = path.join(REPO_ROOT, 'workflows', 'index.ts');

/** Webpack's chatter hidden; its warnings and errors shown. */
const bundlerLog = { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: console.warn, error: console.error };

export async function bundleLeaseWorkflows(): Promise<string> {
  const { code } = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_SOURCE, logger: bundlerLog });
  return code;
}
