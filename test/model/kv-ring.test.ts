// Sliding-window layers' K/V rings (KvCache: a window layer keeps window + passTokens - 1 rows,
// position p at row p mod rows) against the full cache: the same logits, bit for bit, for
// prompts and decodes far past the window, prefills in passes, every decode path, f32 and f16.
import { describe, expect, it } from 'vitest';
import { LLAMA_FAMILY, modelLayers, type LayerDescription, type LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { KvCache } from '../../src/model/kv-cache.ts';
import type { KvDType } from '../../src/gpu/kernels/index.ts';
import { cacheRuns } from '../../src/model/forward.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { testGpu } from '../helpers/gpu.ts';
import { tempModels } from '../helpers/temp-models.ts';
import { GEMMA_FAMILIES, generateModel } from '../../scripts/model-families.ts';

const models = tempModels();

const rope = { theta: 10000, rotaryDims: 8 };
const local = (slidingWindow: number): LayerDescription => ({ rope, slidingWindow });
const global: LayerDescription = { rope };

/**
 * Gemma-3-like: local layers of windows 5 and 7 around a global one, sharp attention (a large
 * score scale, so that a wrong key or a wrong window shows).
 */
const perLayer: LlamaConfig = tinyConfig({
  hiddenSize: 20,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 8,
  numLayers: 4,
  contextLength: 64,
  family: { ...LLAMA_FAMILY, attentionScale: 1.5, layers: [local(5), local(7), global, local(5)] },
});
/** Mistral-like: one window (6) for every layer. */
const uniform: LlamaConfig = tinyConfig({ hiddenSize: 20, numHeads: 4, numKvHeads: 1, headDim: 8, numLayers: 2, contextLength: 64, slidingWindow: 6 });

async function readF32(device: GPUDevice, buffer: GPUBuffer, floats: number): Promise<Float32Array> {
  const staging = device.createBuffer({ size: floats * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, floats * 4);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange().slice(0));
  staging.destroy();
  return out;
}

describe('KvCache rings', () => {
  it('sizes window layers to window + passTokens - 1 rows, within the capacity', () => {
    expect(KvCache.layerRowsOf(perLayer, 64, 4)).toEqual([8, 10, 64, 8]);
    expect(KvCache.layerRowsOf(perLayer, 64, Infinity)).toEqual([64, 64, 64, 64]);
    expect(KvCache.layerRowsOf(perLayer, 9, 4)).toEqual([8, 9, 9, 8]);
    expect(KvCache.byteSizeOf(perLayer, 64, 'f32', 4)).toBe(2 * (8 + 10 + 64 + 8) * 2 * 8 * 4);
    expect(cacheRuns(5, 3)).toEqual([{ from: 0, row: 5, count: 3 }]);
    expect(cacheRuns(13, 4, 8)).toEqual([{ from: 0, row: 5, count: 3 }, { from: 3, row: 0, count: 1 }]);
    expect(cacheRuns(16, 4, 8)).toEqual([{ from: 0, row: 0, count: 4 }]);
  });

  it('a Gemma-3-like model at 32k costs about its global layers\' share (docs/architecture.md\'s table)', () => {
    const MiB = 2 ** 20;
    const gemma = (numLayers: number, numKvHeads: number, window: number): LlamaConfig => {
      const layers = Array.from({ length: numLayers }, (_, l) => ((l + 1) % 6 === 0 ? global : local(window)));
      return tinyConfig({ numLayers, numKvHeads, numHeads: numKvHeads, headDim: 256, family: { ...LLAMA_FAMILY, layers } });
    };
    expect(KvCache.byteSizeOf(gemma(26, 1, 512), 32768, 'f16') / MiB).toBeCloseTo(149.98, 2);
    expect(KvCache.byteSizeOf(gemma(26, 1, 512), 32768, 'f16', Infinity) / MiB).toBe(832);
    expect(KvCache.byteSizeOf(gemma(34, 4, 1024), 32768, 'f16') / MiB).toBeCloseTo(813.89, 2);
    const mistral = tinyConfig({ numLayers: 32, numKvHeads: 8, numHeads: 32, headDim: 128, slidingWindow: 4096 });
    expect(KvCache.byteSizeOf(mistral, 32768, 'f16') / MiB).toBeCloseTo(575.88, 2);
  });

  for (const [name, config] of [['per-layer windows 5, 7, none, 5', perLayer], ['one window of 6', uniform]] as const) {
    for (const kvDType of ['f32', 'f16'] as KvDType[]) {
      for (const chunkKeys of [undefined, 4]) {
        it(`${name}, ${kvDType}${chunkKeys ? ', decode attention in chunks of 4' : ''}: prefill in passes and every decode path equal the full cache bit for bit`, async () => {
          const ctx = await testGpu();
          const { gpu } = buildRandomModel(ctx, config, 'f32', 3);
          const model = await LlamaModel.create(ctx, config, gpu, { tuning: { decodeChunkKeys: chunkKeys, decodeLayer: () => true } });
          await expectRingEqualsFull(model, kvDType, 4, 30, 48);
          model.destroy();
        }, 60_000);
      }
    }
  }

  it('per-layer windows, f16, every prefill query on a workgroup (per_workgroup): equal the full cache bit for bit', async () => {
    const ctx = await testGpu();
    const { gpu } = buildRandomModel(ctx, perLayer, 'f32', 4);
    const model = await LlamaModel.create(ctx, perLayer, gpu, { tuning: { attentionPlan: () => 'per_workgroup' } });
    await expectRingEqualsFull(model, 'f16', 3, 20, 30);
    model.destroy();
  }, 60_000);

  for (const family of GEMMA_FAMILIES) {
    it(`${family} test model (q/k norms, soft-caps, local and global layers): rings equal the full cache bit for bit`, async () => {
      const dir = models.dir(`webgpu-llama-${family}-ring-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 7 });
      const generator = await models.load(dir, { weightStorage: 'f32', contextLength: 48 });
      const model = generator.model;
      expect(modelLayers(model.config).some((l) => l.slidingWindow === undefined)).toBe(true);
      // (Their variants compile slowly on the CPU adapter: one cache type each.)
      await expectRingEqualsFull(model, family === 'gemma2' ? 'f32' : 'f16', 3, 20, 32);
    }, 300_000);
  }
});

/**
 * `got` equal to `want` bit for bit. Compared as words first: toEqual over Gemma 3's 262144 logits a
 * position took seconds a test; it runs only to report a difference.
 */
function expectBitEqual(got: Float32Array, want: Float32Array, what: string): void {
  const [a, b] = [got, want].map((x) => new Uint32Array(x.buffer, x.byteOffset, x.length));
  if (a!.length === b!.length && a!.every((v, i) => v === b![i])) return;
  expect(Array.from(got), what).toEqual(Array.from(want));
  expect.unreachable(`${what}: bits differ (a -0 against 0, or NaNs)`);
}

/**
 * Runs a prompt of `promptLength` random tokens and decodes to `capacity` on caches with rings
 * (passes of passTokens) and without: forward() in passes (the ring's split by forward itself),
 * then forward() a token at a time, the reusable decode step (decode_layer.wgsl where the tuning
 * asks for it, with its ring feature, else the fused step) and forward()'s kernels as a step;
 * every logit of each path equal between the two, bit for bit.
 */
async function expectRingEqualsFull(model: LlamaModel, kvDType: KvDType, passTokens: number, promptLength: number, capacity: number): Promise<void> {
  const device = model.ctx.device;
  const config = model.config;
  const full = model.createKvCache(capacity, kvDType, Infinity);
  const ring = model.createKvCache(capacity, kvDType, passTokens);
  expect(full.ringed).toBe(false);
  expect(ring.ringed).toBe(true);
  expect(ring.byteSize).toBeLessThan(full.byteSize);
  const rand = mulberry32(11);
  const prompt = Array.from({ length: promptLength }, () => Math.floor(rand() * config.vocabSize));

  // The full cache in passes (explicitly); the ring given the whole prompt (forward splits it).
  const fullLogits: Float32Array[] = [];
  for (let s = 0; s < prompt.length; s += passTokens) fullLogits.push(await model.forward(prompt.slice(s, s + passTokens), s, full, { allLogits: true }));
  const ringLogits = await model.forward(prompt, 0, ring, { allLogits: true });
  const joined = new Float32Array(fullLogits.reduce((n, l) => n + l.length, 0));
  fullLogits.reduce((at, l) => (joined.set(l, at), at + l.length), 0);
  expectBitEqual(ringLogits, joined, 'prefill');
  // A pass longer than the ring takes is refused by the kernels, not run wrong.
  const l0 = ring.rings.findIndex((r) => r);
  const [window, rows] = [ring.windows[l0]!, ring.rows[l0]!];
  expect(rows).toBe(window + passTokens - 1);
  const [scratch, q] = [0, 1].map(() => device.createBuffer({ size: 4096, usage: GPUBufferUsage.STORAGE }));
  expect(() => model.kernels.begin().attention(
    { out: scratch!, q: q!, keys: ring.keys[l0]!, values: ring.values[l0]! },
    { T: passTokens + 1, startPos: promptLength },
    { heads: 1, kvHeads: 1, headDim: 8, slidingWindow: window, ring: ring.rings[l0]! },
    kvDType,
  )).toThrow(`ring of ${rows} K/V rows cannot take ${passTokens + 1} tokens`);
  scratch!.destroy();
  q!.destroy();

  // Decodes to the end of the context: forward() (uniform position), the fused step and
  // forward()'s kernels as a step (position buffer), each on a ring and a full cache.
  const caches = {
    ring: [ring, model.createKvCache(capacity, kvDType, passTokens), model.createKvCache(capacity, kvDType, passTokens)],
    full: [full, model.createKvCache(capacity, kvDType, Infinity), model.createKvCache(capacity, kvDType, Infinity)],
  };
  for (const c of [...caches.ring.slice(1), ...caches.full.slice(1)]) await model.forward(prompt, 0, c, { readBack: false });
  const steps = {
    ring: [model.createDecodeStep(caches.ring[1]!), model.createDecodeStep(caches.ring[2]!, { fused: false })],
    full: [model.createDecodeStep(caches.full[1]!), model.createDecodeStep(caches.full[2]!, { fused: false })],
  };
  let token = prompt[prompt.length - 1]!;
  for (let pos = prompt.length; pos < capacity; pos++) {
    token = (token * 31 + 7) % config.vocabSize;
    const got: Record<'ring' | 'full', Float32Array[]> = { ring: [], full: [] };
    for (const kind of ['ring', 'full'] as const) {
      got[kind].push(await model.forward([token], pos, caches[kind][0]!));
      for (const step of steps[kind]) {
        device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([token]));
        const encoder = device.createCommandEncoder();
        step.encodeStep(encoder, pos);
        device.queue.submit([encoder.finish()]);
        got[kind].push(await readF32(device, step.logits, config.vocabSize));
      }
    }
    for (let i = 0; i < 3; i++) expectBitEqual(got.ring[i]!, got.full[i]!, `${kvDType}, position ${pos}, path ${i}`);
  }
  for (const st of [...steps.ring, ...steps.full]) st.destroy();
  for (const c of [...caches.ring, ...caches.full]) c.destroy();
}
