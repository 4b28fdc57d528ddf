// The decode-layer path's batch step (createLayeredBatchStep): sequences prefilled into slots of
// one KvCache, decoded together in rows of several compositions and orders. Each row's logits are
// bit for bit the same whatever runs beside it and in which row, and match today's single-sequence
// DecodeStep on the same sequence; its K/V lands in its own slot's rows only, and its greedy pick
// and record are its logits' argmax.
import { describe, expect, it } from 'vitest';
import { LLAMA_FAMILY, type LayerDescription, type LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import type { KvCache } from '../../src/model/kv-cache.ts';
import type { KvDType } from '../../src/gpu/kernels/index.ts';
import type { BatchDecodeStep } from '../../src/model/batch-step.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { testGpu } from '../helpers/gpu.ts';
import { maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { tempModels } from '../helpers/temp-models.ts';
import { generateModel, type Family } from '../../scripts/model-families.ts';

const rope = { theta: 10000, rotaryDims: 8 };
const local = (slidingWindow: number): LayerDescription => ({ rope, slidingWindow });

const models = tempModels();

interface Case {
  name: string;
  /** A random-weight model of this config, or a generated family's test model. */
  config?: LlamaConfig;
  family?: Family;
  passTokens?: number;
  kvDTypes: KvDType[];
  /** Rows (as slots) of each run; RUNS by default. */
  runs?: number[][];
  /** Workgroups the rows are shared out over (LayeredBatchOptions.rowGroups). */
  rowGroups?: number;
}

const cases: Case[] = [
  {
    // 5 layers: two dispatches (the first embeds, the last computes the logits and the pick).
    name: 'Llama, GQA 6q/2kv, biases, 5 layers',
    config: tinyConfig({ intermediateSize: 60, numLayers: 5, attentionBias: true }),
    kvDTypes: ['f32'],
  },
  {
    // Windows per layer whose caches are rings (window + passTokens - 1 rows), sharp attention;
    // the rows over 3 workgroups (a row's workgroup changes with its index, its logits do not).
    name: 'windows 5, 7, none, 5 per layer, ring caches, rows in 3 workgroups',
    config: tinyConfig({
      hiddenSize: 20, numHeads: 4, numKvHeads: 2, headDim: 8, numLayers: 4, intermediateSize: 44,
      family: { ...LLAMA_FAMILY, attentionScale: 1.5, layers: [local(5), local(7), { rope }, local(5)] },
    }),
    passTokens: 4,
    kvDTypes: ['f16'],
    rowGroups: 3,
  },
  // The family features (their variants compile slowly on the CPU adapter: one cache type, fewer runs).
  // Gemma 2: attention and logit soft-caps, post-norms, GeGLU, the embedding scale, windows per layer.
  { name: 'gemma2 test model', family: 'gemma2', kvDTypes: ['f32'], runs: [[7, 6, 5, 4, 3, 2, 1, 0], [6, 3]] },
  // Phi-4-mini: partial rotation and LongRoPE's magnitude (each layer's RoPE), tied embeddings.
  { name: 'phi4 test model', family: 'phi4', kvDTypes: ['f16'], runs: [[7, 6, 5, 4, 3, 2, 1, 0], [6, 3]] },
];

const CAPACITY = 20;
const SLOTS = 8;
const STEPS = 3;
/** Rows (as slots) of each run: one row, all of them, in several orders and subsets. */
const RUNS = [[3], [0, 1, 2, 3, 4, 5, 6, 7], [5, 2, 7, 0], [7, 6, 5, 4, 3, 2, 1, 0], [1, 6, 3]];

async function read(device: GPUDevice, buffer: GPUBuffer, offset: number, bytes: number): Promise<ArrayBuffer> {
  const staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, bytes);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = staging.getMappedRange().slice(0);
  staging.destroy();
  return out;
}

/** The K and V bytes of every layer of `cache`, or of one slot of it. */
async function cacheBytes(device: GPUDevice, cache: KvCache, slot?: number): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for (let l = 0; l < cache.keys.length; l++) {
    for (const b of [cache.keys[l], cache.values[l]]) {
      const offset = slot === undefined ? 0 : cache.slotOffset(l, slot);
      const bytes = slot === undefined ? b.size : cache.slotBytes(l);
      out.push(new Uint8Array(await read(device, b, offset, bytes)));
    }
  }
  return out;
}

function argmaxLogprob(logits: Float32Array): { id: number; logprob: number } {
  let id = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[id]) id = i;
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - logits[id]);
  return { id, logprob: -Math.log(sum) };
}

describe('createLayeredBatchStep: a batch of sequences in slots, decode_layer.wgsl rows variant', () => {
  for (const { name, config: randomConfig, family, passTokens, kvDTypes, runs = RUNS, rowGroups } of cases) for (const kvDType of kvDTypes) {
    it(`${name}, ${kvDType} KV cache`, async () => {
      const ctx = await testGpu();
      let model: LlamaModel;
      if (family) {
        const dir = models.dir(`webgpu-llama-${family}-batch-`);
        generateModel({ family, shape: 'tiny', out: dir, seed: 7 });
        model = (await models.load(dir, { weightStorage: 'f32', contextLength: 48 })).model;
      } else {
        model = await LlamaModel.create(ctx, randomConfig!, buildRandomModel(ctx, randomConfig!, 'f32', 3).gpu);
      }
      const config = model.config;
      const device = model.ctx.device;
      const vocab = config.vocabSize;
      const rand = mulberry32(11);
      const randomTokens = (n: number) => Array.from({ length: n }, () => Math.floor(rand() * vocab));
      const cache = model.createKvCache(CAPACITY, kvDType, passTokens, SLOTS);
      const made = model.createLayeredBatchStep(cache, { maxRows: SLOTS, rowGroups });
      if (typeof made === 'string') throw new Error(made);
      const step: BatchDecodeStep = made;
      expect(step.dispatchCount).toBe(model.createDecodeStep(model.createKvCache(CAPACITY, kvDType, passTokens)).dispatchCount);
      expect(step.encodeInPass).toBeDefined();
      expect(step.greedy).toBeDefined();

      // Each slot's sequence: a prompt of its own length, prefilled in a one-slot cache, copied into
      // its slot; then STEPS tokens decoded by today's DecodeStep on that one-slot cache.
      const lengths = Array.from({ length: SLOTS }, (_, s) => 2 + ((s * 5) % 7));
      const tokens = lengths.map(() => randomTokens(STEPS));
      const single: Float32Array[][] = [];
      const singleCaches: KvCache[] = [];
      for (let s = 0; s < SLOTS; s++) {
        const own = model.createKvCache(CAPACITY, kvDType, passTokens);
        await model.forward(randomTokens(lengths[s]), 0, own, { readBack: false });
        const copy = device.createCommandEncoder();
        for (let l = 0; l < config.numLayers; l++) {
          const { keys, values, offset } = step.slotKv(l, s);
          copy.copyBufferToBuffer(own.keys[l], 0, keys, offset, cache.slotBytes(l));
          copy.copyBufferToBuffer(own.values[l], 0, values, offset, cache.slotBytes(l));
        }
        device.queue.submit([copy.finish()]);
        const ref = model.createDecodeStep(own);
        single.push([]);
        for (let k = 0; k < STEPS; k++) {
          device.queue.writeBuffer(ref.tokenIn, 0, new Uint32Array([tokens[s][k]]));
          const encoder = device.createCommandEncoder();
          ref.encodeStep(encoder, lengths[s] + k);
          device.queue.submit([encoder.finish()]);
          single[s].push(new Float32Array(await read(device, ref.logits, 0, vocab * 4)));
        }
        ref.destroy();
        singleCaches.push(own);
      }
      // The prefilled slots, restored before each run (a run's steps overwrite ring rows a later run reads).
      const snapshot = [...cache.keys, ...cache.values].map((b) => {
        const copy = device.createBuffer({ size: b.size, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
        const encoder = device.createCommandEncoder();
        encoder.copyBufferToBuffer(b, 0, copy, 0, b.size);
        device.queue.submit([encoder.finish()]);
        return copy;
      });
      const restore = () => {
        const encoder = device.createCommandEncoder();
        [...cache.keys, ...cache.values].forEach((b, i) => encoder.copyBufferToBuffer(snapshot[i], 0, b, 0, b.size));
        device.queue.submit([encoder.finish()]);
      };
      const prefilled = await cacheBytes(device, cache);

      /** Runs STEPS steps of `rows` (slots, with their own positions or `positions`), each row's logits per step. */
      const run = async (slots: number[], positions = slots.map((s) => lengths[s]), inPass = false) => {
        restore();
        step.setRows(slots.map((slot, r) => ({ slot, position: positions[r] })));
        const out: Float32Array[][] = slots.map(() => []);
        for (let k = 0; k < STEPS; k++) {
          slots.forEach((s, r) => device.queue.writeBuffer(step.rowToken(r).buffer, step.rowToken(r).offset, new Uint32Array([tokens[s][k]])));
          const encoder = device.createCommandEncoder();
          if (inPass) {
            const pass = encoder.beginComputePass();
            step.encodeInPass!(pass);
            pass.end();
          } else {
            step.encode(encoder);
          }
          device.queue.submit([encoder.finish()]);
          // Every row's logits, token and records, one read each.
          const n = slots.length;
          const { records } = step.greedy!;
          const logitsAll = await read(device, step.rowLogits(0).buffer, step.rowLogits(0).offset, step.rowLogits(n - 1).offset + vocab * 4);
          const tokensAll = new Uint32Array(await read(device, step.rowToken(0).buffer, step.rowToken(0).offset, step.rowToken(n - 1).offset + 4));
          const recordsAll = new DataView(await read(device, records.buffer, records.offset, n * records.slots * records.bytes));
          for (let r = 0; r < n; r++) {
            const { offset } = step.rowLogits(r);
            expect(offset % 256).toBe(0);
            const logits = new Float32Array(logitsAll, offset - step.rowLogits(0).offset, vocab);
            out[r].push(logits);
            // The greedy pick: the argmax to the row's token, its record at (r * slots + p mod slots).
            const want = argmaxLogprob(logits);
            expect(tokensAll[(step.rowToken(r).offset - step.rowToken(0).offset) / 4]).toBe(want.id);
            const at = (r * records.slots + ((positions[r] + k) % records.slots)) * records.bytes;
            expect(recordsAll.getUint32(at, true)).toBe(want.id);
            expect(recordsAll.getFloat32(at + 4, true)).toBeCloseTo(want.logprob, 4);
          }
        }
        return out;
      };

      const first: (Float32Array[] | undefined)[] = [];
      let scale = 1;
      for (const [i, slots] of runs.entries()) {
        const out = await run(slots, undefined, i % 2 === 1);
        for (const [r, s] of slots.entries()) {
          for (let k = 0; k < STEPS; k++) {
            // (b) today's single-sequence step gives the same logits: the same per-row code, bit for bit.
            expect(Array.from(out[r][k]), `slot ${s} step ${k} vs DecodeStep`).toEqual(Array.from(single[s][k]));
            scale = Math.max(scale, maxAbs(single[s][k]));
          }
          // (a) bit for bit the same in every run, whatever its row and the rows beside it.
          if (first[s]) for (let k = 0; k < STEPS; k++) expect(Array.from(out[r][k]), `slot ${s} step ${k}, run ${i}`).toEqual(Array.from(first[s]![k]));
          else first[s] = out[r];
        }
        // (c) the slots outside the run untouched; a slot in it holds what today's step wrote.
        const after = await cacheBytes(device, cache);
        const inRun = new Set(slots);
        for (let l = 0; l < config.numLayers; l++) {
          for (let s = 0; s < SLOTS; s++) {
            const lo = cache.slotOffset(l, s);
            const hi = lo + cache.slotBytes(l);
            for (const kv of [0, 1]) {
              const got = after[2 * l + kv].subarray(lo, hi);
              if (!inRun.has(s)) expect(got, `layer ${l} slot ${s} untouched`).toEqual(prefilled[2 * l + kv].subarray(lo, hi));
            }
          }
        }
        for (const s of inRun) {
          const own = await cacheBytes(device, singleCaches[s]);
          for (let l = 0; l < config.numLayers; l++) {
            const lo = cache.slotOffset(l, s);
            for (const kv of [0, 1]) expect(after[2 * l + kv].subarray(lo, lo + cache.slotBytes(l)), `layer ${l} slot ${s}`).toEqual(own[2 * l + kv]);
          }
        }
      }
      // A row in the wrong slot (slot 2's cache, slot 1's positions and tokens) misses by far: not
      // only the bitwise check, a tolerance of 1e-3 of the logits' scale would see it.
      const wrong = await run([2], [lengths[1]]);
      expect(maxAbsDiff(wrong[0][STEPS - 1], single[1][STEPS - 1])).toBeGreaterThan(1e-3 * scale);
      step.destroy();
      snapshot.forEach((b) => b.destroy());
      cache.destroy();
      singleCaches.forEach((c) => c.destroy());
      if (!family) model.destroy();
    }, 300_000);
  }

  it('refuses, with its reason, a model whose matrices the arena does not hold', async () => {
    const ctx = await testGpu();
    const config = tinyConfig({ intermediateSize: 60 });
    const { gpu } = buildRandomModel(ctx, config, 'f16', 3);
    const model = await LlamaModel.create(ctx, config, gpu);
    const cache = model.createKvCache(8, 'f16', undefined, 2);
    expect(model.createLayeredBatchStep(cache, { maxRows: 2 })).toMatch(/arena/);
    cache.destroy();
    gpu.destroy();
  });

  it('refuses a model off the decode-layer path; setRows checks its rows', async () => {
    const ctx = await testGpu();
    const config = tinyConfig({ intermediateSize: 60 });
    const off = await LlamaModel.create(ctx, config, buildRandomModel(ctx, config, 'f32', 3).gpu, { tuning: { decodeLayer: () => false } });
    const offCache = off.createKvCache(8, 'f16', undefined, 2);
    expect(off.createLayeredBatchStep(offCache, { maxRows: 2 })).toMatch(/decode-layer path/);
    const model = await LlamaModel.create(ctx, config, buildRandomModel(ctx, config, 'f32', 3).gpu);
    const cache = model.createKvCache(8, 'f16', undefined, 2);
    const step = model.createLayeredBatchStep(cache, { maxRows: 2 });
    if (typeof step === 'string') throw new Error(step);
    expect(() => step.setRows([{ slot: 0, position: 0 }, { slot: 0, position: 1 }])).toThrow(/two rows/);
    expect(() => step.setRows([{ slot: 2, position: 0 }])).toThrow(/slot 2/);
    expect(() => step.setRows([{ slot: 0, position: 8 }])).toThrow(/outside the KV cache/);
    expect(() => step.setRows([0, 1, 0].map((slot) => ({ slot, position: 0 })))).toThrow(/at most 2/);
    step.destroy();
    for (const c of [offCache, cache]) c.destroy();
    off.destroy();
    model.destroy();
  });
});
