/**
 * Two projects, one run (`npm test`):
 * - core: against a throw-away PostgreSQL and Temporal dev server (test/global-setup.ts);
 * - openstack: additionally against the loopback OpenStack rig (test/support/openstack-setup.ts),
 *   which it brings up if it is not already running, and stops again if it started it.
 * Test files run one at a time, but the core files two at a time in test:quick and in npm test's
 * `core` run: one Temporal Runtime per process, and 2 cores.
 */
/**
 * `npm run test:quick` (LK_TEST_QUICK=1): the core tests but these, which start, kill and restart
 * whole processes (Temporal, PostgreSQL, workers) or throw many requests at the API, with two
 * workers (every core file has its own database and task queue). `npm test` runs them all.
 */
const SLOW_CORE_TESTS = [
  'worker-crash',
  'temporal-server-crash',
  'multi-process',
  'postgres-restart',
  'temporal-setup-errors',
  'start-stack',
  'hostile-input',
];
const quick = process.env.LK_TEST_QUICK === '1';
/**
 * `npm test` runs the core tests as two jest runs side by side (scripts/test-all.sh): LK_TEST_CORE_PART=slow
 * runs SLOW_CORE_TESTS alone, `rest` every other core file; unset, one run takes them all.
 */
const corePart = process.env.LK_TEST_CORE_PART;
const slowCorePaths = SLOW_CORE_TESTS.map((name) => `<rootDir>/test/${name}\\.test\\.ts$`);

/**
 * The suite was written before the protective defaults of a new deployment (7-day leases, 50 leases
 * per project: docs/operations.md): it keeps the earlier limits, for every stack and every process
 * it starts (they inherit the environment). test/fair-share-api.test.ts (its 'protective defaults' test)
 * holds a fresh config to the defaults; a test may still set its own.
 */
process.env.LK_MAX_LEASE_DURATION_DAYS ??= '365';
process.env.LK_MAX_LEASES ??= '1000000';

/**
 * The rig's tests that book none of its compute hosts (they read Nova at most, or use Keystone and
 * Neutron's floating IPs or network segments, which no other test reserves): `npm test` runs them beside the others
 * (project openstack-shared), while the rest take the hosts one file at a time (project openstack).
 */
const RIG_SHARED_TESTS = ['api-fuzz', 'keystone', 'keystone-auth', 'auth', 'errors', 'floating-ip-leases', 'network-segment-worker-crash', 'network-segment-blazarclient', 'import-chameleon-networks'];
const rigTestPath = (name) => `<rootDir>/test/openstack/${name}.test.ts`;

/**
 * ts-jest only transpiles (isolatedModules, tsconfig.jest.json): the build (`npm test` and
 * `test:quick` build first) and lint already type-check every file, and type-checking each test
 * file again in each jest run cost about as much CPU as running it.
 */
const common = {
  testEnvironment: 'node',
  transform: { '^.+\\.tsx?$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.jest.json' }] },
  testMatch: ['**/*.test.ts'],
};

module.exports = {
  // The core files have a database and task queue each: two at once (test:quick, and npm test's
  // core run, which would otherwise outlast the rig's). The rig's files share its hosts: one at a time.
  maxWorkers: quick || corePart === 'rest' ? 2 : 1,
  testSequencer: '<rootDir>/test/support/rig-late-sequencer.js',
  testTimeout: 60_000,
  reporters: ['default', '<rootDir>/test/support/summary-reporter.js'],
  projects: [
    {
      ...common,
      displayName: 'core',
      roots: ['<rootDir>/test'],
      ...(corePart === 'slow' ? { testMatch: SLOW_CORE_TESTS.map((name) => `<rootDir>/test/${name}.test.ts`) } : {}),
      testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/openstack/', ...(quick || corePart === 'rest' ? slowCorePaths : [])],
      globalSetup: '<rootDir>/test/global-setup.ts',
      globalTeardown: '<rootDir>/test/global-teardown.ts',
    },
    {
      ...common,
      displayName: 'openstack',
      roots: ['<rootDir>/test'],
      testMatch: ['<rootDir>/test/openstack/**/*.test.ts'],
      testPathIgnorePatterns: ['/node_modules/', ...RIG_SHARED_TESTS.map(rigTestPath)],
      globalSetup: '<rootDir>/test/support/openstack-setup.ts',
      globalTeardown: '<rootDir>/test/support/openstack-teardown.ts',
    },
    {
      ...common,
      displayName: 'openstack-shared',
      roots: ['<rootDir>/test'],
      testMatch: RIG_SHARED_TESTS.map(rigTestPath),
      globalSetup: '<rootDir>/test/support/openstack-setup.ts',
      globalTeardown: '<rootDir>/test/support/openstack-teardown.ts',
    },
  ],
};
