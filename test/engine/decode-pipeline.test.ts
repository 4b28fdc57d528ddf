// How the decode pipeline sizes its batches of steps (one read-back per batch).
import { describe, expect, it } from 'vitest';
import { batchSteps, MAX_BATCH_STEPS, TARGET_BATCH_MS } from '../../src/engine/decode-pipeline.ts';

describe('batchSteps', () => {
  it('doubles from one step up to the cap while the step time is unknown', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 50].map((i) => batchSteps(i, undefined))).toEqual([1, 2, 4, 8, 16, 32, 32, 32, 32].map((n) => Math.min(n, MAX_BATCH_STEPS)));
  });

  it('fits a batch in the target time once a step is timed, never below one step', () => {
    expect(batchSteps(10, TARGET_BATCH_MS / 5)).toBe(5);
    expect(batchSteps(10, TARGET_BATCH_MS / 5.5)).toBe(5);
    expect(batchSteps(10, TARGET_BATCH_MS * 3)).toBe(1);
    expect(batchSteps(1, TARGET_BATCH_MS / 100)).toBe(2); // still growing
    expect(batchSteps(10, 1e-6)).toBe(MAX_BATCH_STEPS);
  });
});
