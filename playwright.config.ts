// Browser tests (test/browser/*.spec.ts): Chromium with WebGPU (SwiftShader when there is no
// GPU) against the Vite dev server. Vitest never sees these: it runs test/**/*.test.ts only.
import { defineConfig } from '@playwright/test';
import { CHROMIUM_PATH, WEBGPU_ARGS } from './test/browser/chromium.ts';

const PORT = Number(process.env.PLAYWRIGHT_PORT ?? 4173);
const baseURL = `http://127.0.0.1:${PORT}`;

export default defineConfig({
  testDir: 'test/browser',
  testMatch: '**/*.spec.ts',
  // SwiftShader runs every shader on the CPU, and CI machines are small: one page at a time.
  workers: 1,
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: 0,
  timeout: 300_000,
  expect: { timeout: 120_000 },
  reporter: process.env.CI ? [['list'], ['html', { open: 'never' }]] : 'list',
  use: {
    baseURL,
    browserName: 'chromium',
    headless: true,
    launchOptions: { executablePath: CHROMIUM_PATH, args: WEBGPU_ARGS },
    actionTimeout: 60_000,
    navigationTimeout: 120_000,
    trace: 'retain-on-failure',
  },
  webServer: {
    command: `npx vite --config vite.config.ts --host 127.0.0.1 --port ${PORT} --strictPort`,
    url: `${baseURL}/test-pages/webgpu.html`,
    env: { WEBGPU_LLAMA_NO_RELOAD: '1' },
    reuseExistingServer: !process.env.CI,
    timeout: 120_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
