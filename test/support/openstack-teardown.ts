import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT } from '../../src/paths';
import globalTeardown from '../global-teardown';

export default async function openStackTeardown(): Promise<void> {
  // Stop the rig only if this run started it: a developer's running rig stays up.
  if (globalThis.__LK_RIG_STARTED_HERE__) {
    execFileSync('bash', [path.join(REPO_ROOT, 'scripts', 'openstack', 'down.sh')], { stdio: 'inherit' });
  }
  await globalTeardown();
}
