/**
 * Two projects, one run (`npm test`):
 * - core: against a throw-away PostgreSQL and Temporal dev server (test/global-setup.ts);
 * - openstack: additionally against the loopback OpenStack rig (test/support/openstack-setup.ts),
 *   which it brings up if it is not already running, and stops again if it started it.
 * Test files run one at a time: one Temporal Runtime per process, and 2 cores.
 */
const common = {
  testEnvironment: 'node',
  preset: 'ts-jest',
  testMatch: ['**/*.test.ts'],
};

module.exports = {
  maxWorkers: 1,
  testTimeout: 60_000,
  reporters: ['default', '<rootDir>/test/support/summary-reporter.js'],
  projects: [
    {
      ...common,
      displayName: 'core',
      roots: ['<rootDir>/test'],
      testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/openstack/'],
      globalSetup: '<rootDir>/test/global-setup.ts',
      globalTeardown: '<rootDir>/test/global-teardown.ts',
    },
    {
      ...common,
      displayName: 'openstack',
      roots: ['<rootDir>/test'],
      testMatch: ['<rootDir>/test/openstack/**/*.test.ts'],
      globalSetup: '<rootDir>/test/support/openstack-setup.ts',
      globalTeardown: '<rootDir>/test/support/openstack-teardown.ts',
    },
  ],
};
