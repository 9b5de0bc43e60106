import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import layers from './eslint/layers.cjs';

const nodeBuiltins = [
  'assert', 'buffer', 'child_process', 'cluster', 'crypto', 'dgram', 'dns', 'events', 'fs', 'fs/promises',
  'http', 'http2', 'https', 'net', 'os', 'path', 'perf_hooks', 'process', 'readline', 'stream', 'timers',
  'tls', 'url', 'util', 'v8', 'vm', 'worker_threads', 'zlib',
];

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', '.data/', '**/*.js', 'eslint.config.mjs', 'eslint/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { layers },
    rules: {
      'layers/no-upward-import': 'error',
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    // Workflow code is replayed deterministically inside the Temporal sandbox:
    // no Node built-ins, no I/O libraries and no zod (validation belongs at the edge).
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: [
          ...nodeBuiltins.map((name) => ({ name, message: 'Node built-ins are not allowed in workflow code.' })),
          ...nodeBuiltins.map((name) => ({ name: `node:${name}`, message: 'Node built-ins are not allowed in workflow code.' })),
          { name: 'zod', message: 'Validate at the edge (API, activity inputs), not in workflows.' },
          { name: 'pg', message: 'No I/O in workflows: use an activity.' },
          { name: 'express', message: 'No I/O in workflows.' },
          { name: 'pino', message: 'Use the workflow logger (log from @temporalio/workflow).' },
        ],
        patterns: [
          { group: ['**/src/db/**', '**/src/api/**', '**/activities', '**/activities/**', '**/worker/**'], allowTypeImports: true, message: 'Workflows may import only types from I/O modules.' },
        ],
      }],
    },
  },
  {
    // The local stack, its servers and the data seeded into it are dev-stack/'s: benchmarks and scripts never reach into the tests.
    files: ['bench/**/*.ts', 'scripts/**/*.ts', 'dev-stack/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{ group: ['**/test', '**/test/**'], message: 'Use dev-stack/ (the stack, its servers, its fixtures): test/ holds the tests and their own helpers.' }],
      }],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      // Tests assert on loosely typed JSON bodies.
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
    },
  },
);
