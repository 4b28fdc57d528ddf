// The kernels of src/gpu/kernels/, run in Chromium's WebGPU, agree with the CPU reference.
import { expect, test } from '@playwright/test';

interface KernelCheck {
  name: string;
  maxAbsError: number;
  maxAbsRef: number;
}

// f32 math in a different order than the CPU's: a few ulps of the output's scale. RoPE also
// differs by the GPU's sin/cos (WGSL bounds them absolutely, not in ulps).
function tolerance(name: string): number {
  return name.startsWith('rope') ? 2e-3 : 1e-4;
}

test('rmsNorm, matmul (f32/f16/bf16), rope and attention match the CPU reference', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto('/test-pages/kernels.html');
  await page.waitForFunction(() => 'runKernelChecks' in window);
  const checks: KernelCheck[] = await page.evaluate(() => (window as any).runKernelChecks());
  expect(pageErrors).toEqual([]);

  const names = checks.map((c) => c.name);
  for (const kernel of ['rmsNorm', 'matmul f32', 'matmul f16', 'matmul bf16', 'rope', 'attention']) {
    expect(names.some((n) => n.startsWith(kernel)), `a check of ${kernel}`).toBe(true);
  }
  for (const check of checks) {
    test.info().annotations.push({ type: check.name, description: `max |gpu - cpu| = ${check.maxAbsError.toExponential(2)}` });
    const scale = Math.max(1, check.maxAbsRef);
    expect(check.maxAbsRef, `${check.name}: the reference output is not all zeros`).toBeGreaterThan(0);
    expect(check.maxAbsError / scale, `${check.name}: max error ${check.maxAbsError} (scale ${scale})`).toBeLessThanOrEqual(
      tolerance(check.name),
    );
  }
});
