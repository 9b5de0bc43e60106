/** Tests run against real services started once for the whole run (test/global-setup.ts). */
module.exports = {
  testEnvironment: 'node',
  preset: 'ts-jest',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  // One Temporal Runtime per process: running test files serially avoids the SDK's
  // known ShutdownError when several files share a Runtime, and suits 2 cores.
  maxWorkers: 1,
  testTimeout: 60_000,
  reporters: ['default', '<rootDir>/test/support/summary-reporter.js'],
};
