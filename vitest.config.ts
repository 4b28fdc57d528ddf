import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // SwiftShader runs every kernel on the CPU: generous per-test time, one GPU per worker.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
  },
});
