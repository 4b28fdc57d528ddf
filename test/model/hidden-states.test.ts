// LlamaModel.hiddenStates (src/model/hidden-states.ts): passes up to the final norm, recorded
// together, the rows asked for read back, packed passes of several inputs; against
// CpuLlama.hiddenStates, and without the LM head.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig, type RandomModel } from '../helpers/random-model.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';

const config = tinyConfig({ vocabSize: 97, contextLength: 64, tieWordEmbeddings: false });
const D = config.hiddenSize;
let ctx: GpuContext;
let built: RandomModel;
let model: LlamaModel;

beforeAll(async () => {
  ctx = await testGpu();
  built = buildRandomModel(ctx, config, 'f32', 4);
  model = await LlamaModel.create(ctx, config, built.gpu);
});

afterAll(() => model?.destroy());

describe('hiddenStates', () => {
  it('passes of two sequences, one split in two at positions 0 and 5: the rows asked for, as the float64 reference', async () => {
    const cache = model.createKvCache(32, 'f32');
    try {
      const a = [5, 9, 13, 21, 40, 41, 60, 7];
      const b = [3, 88, 12];
      const rows = await model.hiddenStates(
        [
          { tokens: a.slice(0, 5), startPos: 0, rows: [{ from: 1, count: 4 }] }, // a's rows 1..4
          { tokens: a.slice(5), startPos: 5, rows: [{ from: 0, count: 3 }] }, // a's rows 5..7 (over a's first pass)
          { tokens: b, startPos: 0, rows: [{ from: 2, count: 1 }] }, // b's last row (over a's cache rows)
          { tokens: [50, 51], startPos: 0, rows: [] }, // nothing read
        ],
        cache,
      );
      expect(rows.length).toBe(8 * D);
      const wantA = new CpuLlama(config, built.cpu, 32, 'f32').hiddenStates(a, 0);
      const wantB = new CpuLlama(config, built.cpu, 32, 'f32').hiddenStates(b, 0);
      const want = [...wantA.subarray(1 * D, 8 * D), ...wantB.subarray(2 * D, 3 * D)];
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(rows[i]! - want[i]!));
      expect(worst).toBeLessThan(1e-4);
    } finally {
      cache.destroy();
    }
  });

  it('a packed pass of three inputs (and a plain one after it): each input as the float64 reference of it alone', async () => {
    const cache = model.createKvCache(32, 'f32');
    try {
      const inputs = [[5, 9, 13, 21], [3], [88, 12, 40, 41, 60, 7, 2]];
      const rows = await model.hiddenStates(
        [
          { tokens: inputs.flat(), startPos: 0, inputs: inputs.map((t) => t.length), rows: [{ from: 0, count: 4 }, { from: 4, count: 1 }, { from: 9, count: 3 }] },
          { tokens: [50, 51], startPos: 0, rows: [{ from: 1, count: 1 }] },
        ],
        cache,
      );
      const ref = (tokens: number[]) => new CpuLlama(config, built.cpu, 32, 'f32').hiddenStates(tokens, 0);
      const want = [...ref(inputs[0]!), ...ref(inputs[1]!), ...ref(inputs[2]!).subarray(4 * D), ...ref([50, 51]).subarray(D)];
      expect(rows.length).toBe(want.length);
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(rows[i]! - want[i]!));
      expect(worst).toBeLessThan(1e-4);
    } finally {
      cache.destroy();
    }
  });

  it('never touches the LM head: with its buffer destroyed, no validation error', async () => {
    const cache = model.createKvCache(16, 'f32');
    const other = buildRandomModel(ctx, config, 'f32', 4);
    const headless = await LlamaModel.create(ctx, config, other.gpu);
    try {
      other.gpu.lmHead.buffer.destroy();
      ctx.device.pushErrorScope('validation');
      const rows = await headless.hiddenStates([{ tokens: [4, 5, 6], startPos: 0, rows: [{ from: 2, count: 1 }] }], cache);
      expect(await ctx.device.popErrorScope()).toBeNull();
      expect(rows.length).toBe(D);
      // The same pass through forward() does read it.
      ctx.device.pushErrorScope('validation');
      await headless.forward([4, 5, 6], 0, cache, { readBack: false });
      expect(await ctx.device.popErrorScope()).not.toBeNull();
    } finally {
      headless.destroy();
      cache.destroy();
    }
  });

  it('refuses passes it cannot run: empty, past the cache, rows outside the pass', async () => {
    const cache = model.createKvCache(8, 'f32');
    try {
      await expect(model.hiddenStates([{ tokens: [], startPos: 0, rows: [] }], cache)).rejects.toThrow(/at least one token/);
      await expect(model.hiddenStates([{ tokens: [1, 2], startPos: 7, rows: [{ from: 0, count: 1 }] }], cache)).rejects.toThrow(/exceeds the KV cache/);
      await expect(model.hiddenStates([{ tokens: [1, 2], startPos: 0, rows: [{ from: 1, count: 2 }] }], cache)).rejects.toThrow(/outside a pass of 2 tokens/);
      await expect(model.hiddenStates([{ tokens: [1, 2, 3], startPos: 0, rows: [], inputs: [1, 1] }], cache)).rejects.toThrow(/sum to its 3 tokens/);
      await expect(model.hiddenStates([{ tokens: [1, 2], startPos: 1, rows: [], inputs: [1, 1] }], cache)).rejects.toThrow(/row 0/);
    } finally {
      cache.destroy();
    }
  });
});
