/**
 * For tests against OpenStack: the core servers (PostgreSQL, Temporal) plus the loopback rig
 * (scripts/openstack/up.sh: idempotent; installs its packages the first time).
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT } from '../../src/paths';
import globalSetup from '../global-setup';
import globalTeardown from '../global-teardown';

declare global {
  var __LK_RIG_STARTED_HERE__: boolean | undefined;
}

export const RIG_DIR = process.env.LK_OPENSTACK_DIR ?? path.join(REPO_ROOT, '.data', 'openstack');

export default async function openStackSetup(): Promise<void> {
  await globalSetup();
  const started = Date.now();
  let output: string;
  try {
    output = execFileSync('bash', [path.join(REPO_ROOT, 'scripts', 'openstack', 'up.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  } catch (err) {
    await globalTeardown(); // jest runs no teardown after a failed setup: stop the servers started above
    throw err;
  }
  globalThis.__LK_RIG_STARTED_HERE__ = !/already up/.test(output);
  process.env.OS_CLIENT_CONFIG_FILE = path.join(RIG_DIR, 'clouds.yaml');
  process.stdout.write(`\nOpenStack rig ${globalThis.__LK_RIG_STARTED_HERE__ ? `up in ${Math.round((Date.now() - started) / 1000)} s` : 'was already up'}\n`);
}
