import { describe, expect, it } from 'vitest';
import { testGpu } from './helpers/gpu.ts';

describe('device acquisition', () => {
  it('reports features and limits it read from the adapter', async () => {
    const ctx = await testGpu();
    expect(typeof ctx.features.shaderF16).toBe('boolean');
    expect(typeof ctx.features.subgroups).toBe('boolean');
    expect(ctx.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(ctx.limits.maxComputeInvocationsPerWorkgroup).toBeGreaterThanOrEqual(256);
    expect(ctx.device.limits.maxStorageBufferBindingSize).toBe(ctx.limits.maxStorageBufferBindingSize);
  });
});
