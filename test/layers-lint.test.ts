/**
 * The layer rule (eslint/layers.cjs) fails the lint on an import that runs upwards, and lets the
 * downward ones through: linted as if the code sat in the named file of the tree.
 */
import path from 'node:path';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const layers = require('../eslint/layers.cjs') as ESLint.Plugin;
const ROOT = path.resolve(__dirname, '..');

const eslint = new ESLint({
  cwd: ROOT,
  overrideConfigFile: true,
  overrideConfig: [{ files: ['**/*.ts'], languageOptions: { parser: tseslint.parser }, plugins: { layers }, rules: { 'layers/no-upward-import': 'error' } }],
});

async function problems(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: path.join(ROOT, file) });
  return result.messages.map((m) => m.message);
}

describe('the layer rule', () => {
  test.each([
    ['src/domain/probe.ts', "import { createPool } from '../db/pool';", 'src/domain may not import src/db'],
    ['src/db/probe.ts', "import { novaClient } from '../openstack/nova';", 'src/db may not import src/openstack'],
    ['src/resources/probe.ts', "import { createActivities } from '../../activities';", 'src/resources may not import activities'],
    ['src/openstack/probe.ts', "import { HostCalendar } from '../resources/physical-host/calendar';", 'src/openstack may not import src/resources'],
    ['src/api/probe.ts', "import { leaseWorkflow } from '../../workflows/lease/lease';", 'src/api may not import workflows'],
    ['src/api/probe.ts', "import { createActivities } from '../../activities';", 'src/api may not import activities'],
    ['workflows/lease/probe.ts', "import { createActivities } from '../../activities';", 'workflows may not import activities'],
    ['activities/probe.ts', "export { createApp } from '../src/api/app';", 'activities may not import src/api'],
    ['src/power/probe.ts', "import { listHosts } from '../db/hosts';", 'src/power may not import src/db'],
    ['src/openstack/probe.ts', "import { powerDriverFor } from '../power';", 'src/openstack may not import src/power'],
  ])('%s: %s fails', async (file, code, expected) => {
    const found = await problems(file, code);
    expect(found).toHaveLength(1);
    expect(found[0]).toContain(expected);
  });

  test.each([
    ['src/resources/probe.ts', "import { createPool } from '../db/pool';\nimport { invalidLease } from '../domain/lease';\nimport { loadConfig } from '../config';"],
    ['src/api/probe.ts', "import { admitLease } from '../../workflows/lease/messages';\nimport { HostCalendar } from '../resources/physical-host/calendar';"],
    ['workflows/lease/probe.ts', "import type { Activities } from '../../activities';\nimport { newLease } from '../../src/domain/lease';"],
    ['activities/probe.ts', "import { productionPlugins } from '../src/resources';"],
    ['src/resources/probe.ts', "import { powerDriverFor } from '../power';"],
    ['src/power/probe.ts', "import { IronicClient } from '../openstack/ironic';\nimport { missingPowerSetting } from '../domain/host-power';"],
    ['test/probe.ts', "import { createActivities } from '../activities';\nimport { leaseWorkflow } from '../workflows/lease/lease';"],
  ])('%s: downward imports pass', async (file, code) => {
    expect(await problems(file, code)).toEqual([]);
  });
});
