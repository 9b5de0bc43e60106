/** Prebuilds the workflow bundle the worker loads in production (dist/workflow-bundle.js). */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';
import { bundleLeaseWorkflows } from '../dev-stack/workflow-bundle';

async function main(): Promise<void> {
  const code = await bundleLeaseWorkflows();
  const out = path.join(REPO_ROOT, 'dist', 'workflow-bundle.js');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, code);
  console.log(`workflow bundle: ${path.relative(REPO_ROOT, out)} (${(code.length / 1024).toFixed(0)} KiB)`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
