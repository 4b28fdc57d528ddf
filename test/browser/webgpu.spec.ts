// The browser gives us WebGPU: an adapter (SwiftShader on machines without a GPU), a device from
// src/gpu/device.ts, and a compute shader that computes the right numbers.
import { expect, test } from '@playwright/test';

test('navigator.gpu returns an adapter', async ({ page }) => {
  await page.goto('/test-pages/webgpu.html');
  const adapter = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? { vendor: a.info.vendor, architecture: a.info.architecture } : null;
  });
  expect(adapter).not.toBeNull();
  test.info().annotations.push({ type: 'adapter', description: JSON.stringify(adapter) });
});

test('acquireDevice gives a device on which a compute shader runs', async ({ page }) => {
  await page.goto('/test-pages/webgpu.html');
  await page.waitForFunction(() => 'webgpuSmoke' in window);
  const result = await page.evaluate(() => (window as any).webgpuSmoke());
  expect(result.mismatches).toBe(0);
  expect(result.sample).toEqual([-999, -997, -995, -993]);
  expect(result.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
  expect(result.limits.maxComputeInvocationsPerWorkgroup).toBeGreaterThanOrEqual(256);
  expect(typeof result.features.shaderF16).toBe('boolean');
});
