// Comparing GPU results with the CPU reference.
import { expect } from 'vitest';
import type { KvCache } from '../../src/model/kv-cache.ts';
import type { LlamaModel } from '../../src/model/llama.ts';
import type { CpuLlama } from '../reference/cpu-llama.ts';

/** Largest |a[i]|. */
export function maxAbs(a: Float32Array): number {
  let m = 0;
  for (const v of a) m = Math.max(m, Math.abs(v));
  return m;
}

/** Largest |a[i] - b[i]|; a NaN anywhere counts as Infinity, so it can never pass a tolerance. */
export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return Number.isNaN(m) ? Infinity : m;
}

/**
 * Fails unless every |actual - expected| is within relTol x the largest |expected| (floored at
 * 1e-6), naming the worst element. RELTOL in the environment tightens or loosens the default.
 */
export function expectClose(actual: Float32Array, expected: Float32Array, relTol = Number(process.env.RELTOL ?? 1e-4)): void {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  let worstAt = -1;
  for (let i = 0; i < actual.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (!(err <= worst)) {
      worst = Number.isNaN(err) ? Infinity : err;
      worstAt = i;
    }
  }
  const tol = relTol * Math.max(maxAbs(expected), 1e-6);
  if (!(worst <= tol)) {
    throw new Error(`max abs err ${worst} at [${worstAt}] (got ${actual[worstAt]}, want ${expected[worstAt]}) exceeds ${tol}`);
  }
}

/**
 * The check every forward-pass test makes: the GPU prefill of `prompt` (the logits of every
 * position), then `decodeSteps` single tokens continuing from `cache`, each against the CPU
 * reference on the same tokens, within `tol` × the largest |prefill logit| (at least 1). The
 * decode tokens follow from the last prompt token (t → (31 t + 7) mod vocab).
 */
export async function expectForwardMatchesReference(
  model: LlamaModel,
  cache: KvCache,
  reference: CpuLlama,
  prompt: readonly number[],
  { decodeSteps = 4, tol = 2e-4, label = '' }: { decodeSteps?: number; tol?: number; label?: string } = {},
): Promise<void> {
  const vocab = model.config.vocabSize;
  const gpuAll = await model.forward(prompt, 0, cache, { allLogits: true });
  const cpuAll = reference.forward([...prompt], 0);
  const bound = tol * Math.max(1, maxAbs(cpuAll));
  expect(maxAbsDiff(gpuAll, cpuAll), `${label} prefill`.trim()).toBeLessThan(bound);
  let token = prompt[prompt.length - 1];
  for (let step = 0; step < decodeSteps; step++) {
    const pos = prompt.length + step;
    token = (token * 31 + 7) % vocab;
    expect(maxAbsDiff(await model.forward([token], pos, cache), reference.forward([token], pos)), `${label} decode ${step}`.trim()).toBeLessThan(bound);
  }
}
