// The fused path's batched decode step (createFusedBatchStep): several sequences, each prefilled
// into a slot of one KvCache, decoded together in rows of every composition and order. A row's
// logits are bitwise the same whatever runs beside it (and alone), close to forward()'s general
// pass on the sequence's own cache, and its K/V land in its slot only; a row pointed at another
// slot or position is far off.
import { describe, expect, it } from 'vitest';
import type { WeightDType } from '../../src/gpu/tensor.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import type { LlamaParts } from '../../src/model/forward.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import type { KvCache, KvDType } from '../../src/model/kv-cache.ts';
import type { BatchRow } from '../../src/model/batch-step.ts';
import { createFusedBatchStep, logitsStride } from '../../src/model/batch-step-fused.ts';
import { openModel, uploadLlamaWeights } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/index.ts';
import { generateModel } from '../../scripts/model-families.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { testGpu } from '../helpers/gpu.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { tempModels } from '../helpers/temp-models.ts';
import type { KernelTuning } from '../../src/gpu/kernels/index.ts';

const models = tempModels();
const STEPS = 3;
const SEQS = 8;

/** The model's parts (what the batched step records from); LlamaModel keeps them private. */
const partsOf = (model: LlamaModel) => (model as unknown as { parts: LlamaParts }).parts;

async function readBytes(device: GPUDevice, buffer: GPUBuffer, offset = 0, bytes = buffer.size - offset): Promise<Uint8Array> {
  const staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, bytes);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Uint8Array(staging.getMappedRange().slice(0));
  staging.destroy();
  return out;
}

/** Every layer's K and V bytes, [layer][slot] -> { k, v }. */
async function snapshot(device: GPUDevice, cache: KvCache): Promise<{ k: Uint8Array; v: Uint8Array }[][]> {
  const out: { k: Uint8Array; v: Uint8Array }[][] = [];
  for (let l = 0; l < cache.keys.length; l++) {
    const bytes = cache.slotBytes(l);
    const k = await readBytes(device, cache.keys[l]);
    const v = await readBytes(device, cache.values[l]);
    out.push(Array.from({ length: cache.slots }, (_, s) => ({ k: k.subarray(s * bytes, (s + 1) * bytes), v: v.subarray(s * bytes, (s + 1) * bytes) })));
  }
  return out;
}

const equalBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * Prefills SEQS sequences of different lengths (each in a one-slot cache, copied into slot
 * slotOf[i] of a cache of SEQS slots), then runs the batched step in several compositions.
 */
async function checkBatchStep(model: LlamaModel, config: LlamaConfig, kvDType: KvDType, passTokens: number | undefined, tolerance: number) {
  const device = model.ctx.device;
  const vocab = config.vocabSize;
  const capacity = 20;
  const batchCache = model.createKvCache(capacity, kvDType, passTokens, SEQS);
  const refCaches = Array.from({ length: SEQS }, () => model.createKvCache(capacity, kvDType, passTokens));
  const slotOf = [3, 0, 6, 1, 7, 2, 5, 4];
  const lengths = Array.from({ length: SEQS }, (_, i) => 2 + ((i * 5) % 8));
  const token = (i: number, k: number) => (i * 17 + k * 5 + 3) % vocab;
  for (let i = 0; i < SEQS; i++) {
    const prompt = Array.from({ length: lengths[i] }, (_, j) => (i * 31 + j * 7 + 1) % vocab);
    await model.forward(prompt, 0, refCaches[i]);
    const encoder = device.createCommandEncoder();
    for (let l = 0; l < config.numLayers; l++) {
      const bytes = batchCache.slotBytes(l);
      encoder.copyBufferToBuffer(refCaches[i].keys[l], 0, batchCache.keys[l], batchCache.slotOffset(l, slotOf[i]), bytes);
      encoder.copyBufferToBuffer(refCaches[i].values[l], 0, batchCache.values[l], batchCache.slotOffset(l, slotOf[i]), bytes);
    }
    device.queue.submit([encoder.finish()]);
  }

  const step = createFusedBatchStep(partsOf(model), batchCache, { maxRows: SEQS });
  if (typeof step === 'string') throw new Error(step);
  const chunks = Math.ceil(capacity / model.kernels.decodeAttentionChunkKeys()) > 1;
  const softcap = config.family?.finalLogitSoftcap !== undefined ? 1 : 0;
  const postNorms = config.family?.postAttentionNorm ? 4 : 0;
  // The single fused step's dispatches, and two more: the greedy pick and the rows' next positions.
  expect(step.dispatchCount).toBe(2 + config.numLayers * ((chunks ? 6 : 5) + postNorms) + softcap + 2);
  const greedy = step.greedy!;
  expect(greedy.records.bytes).toBe(16);
  const stride = logitsStride(vocab);
  const staging = device.createBuffer({ size: SEQS * stride * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });

  // Nothing is created after the step is: setRows writes through the queue, encode only encodes.
  let created = 0;
  const originals = { createBuffer: device.createBuffer, createBindGroup: device.createBindGroup };
  const counting = <T>(fn: () => T): T => {
    device.createBuffer = (...args) => (created++, originals.createBuffer.apply(device, args));
    device.createBindGroup = (...args) => (created++, originals.createBindGroup.apply(device, args));
    try {
      return fn();
    } finally {
      Object.assign(device, originals);
    }
  };

  /**
   * Runs sequences `seqs` as rows 0.. in that order for STEPS steps from their prompts' ends:
   * logits by `${seq}:${step}`. `inPass`: each step into an open compute pass; `onePass`: every
   * step in one pass of one submit (the rows' tokens then those of step 0 and the greedy picks
   * after it; only the last step's logits are read). `checkGreedy`: checks the greedy picks.
   */
  const run = async (seqs: number[], options: { rows?: BatchRow[]; inPass?: boolean; onePass?: boolean; checkGreedy?: boolean } = {}) => {
    const { rows = seqs.map((i) => ({ slot: slotOf[i], position: lengths[i] })), inPass = false, onePass = false } = options;
    const got = new Map<string, Float32Array>();
    counting(() => step.setRows(rows));
    for (let k = 0; k < (onePass ? 1 : STEPS); k++) {
      seqs.forEach((i, r) => {
        const at = step.rowToken(r);
        device.queue.writeBuffer(at.buffer, at.offset, new Uint32Array([token(i, onePass ? 0 : k)]));
      });
      const encoder = device.createCommandEncoder();
      counting(() => {
        if (onePass || inPass) {
          const pass = encoder.beginComputePass();
          for (let n = 0; n < (onePass ? STEPS : 1); n++) step.encodeInPass!(pass);
          pass.end();
        } else {
          step.encode(encoder);
        }
      });
      seqs.forEach((_, r) => {
        const at = step.rowLogits(r);
        encoder.copyBufferToBuffer(at.buffer, at.offset, staging, r * stride * 4, vocab * 4);
      });
      device.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      const all = new Float32Array(staging.getMappedRange().slice(0));
      staging.unmap();
      seqs.forEach((i, r) => got.set(`${i}:${onePass ? STEPS - 1 : k}`, all.slice(r * stride, r * stride + vocab)));
      // The greedy pick: each row's argmax (lowest id on ties) in its token and its record, with its log-softmax.
      if (options.checkGreedy) {
        for (const [r, i] of seqs.entries()) {
          const logits = got.get(`${i}:${k}`)!;
          let id = 0;
          for (let t = 1; t < vocab; t++) if (logits[t] > logits[id]) id = t;
          let sum = 0;
          for (const l of logits) sum += Math.exp(l - logits[id]);
          const at = step.rowToken(r);
          expect(new Uint32Array((await readBytes(device, at.buffer, at.offset, 4)).buffer)[0]).toBe(id);
          const slot = (rows[r].position + k) % greedy.records.slots;
          const record = new DataView((await readBytes(device, greedy.records.buffer, greedy.records.offset + (r * greedy.records.slots + slot) * 16, 16)).buffer);
          expect(record.getUint32(0, true)).toBe(id);
          expect(record.getFloat32(4, true)).toBeCloseTo(-Math.log(sum), 4);
        }
      }
    }
    return got;
  };

  // (c) First, three rows from the prefilled state: the other slots' K/V untouched, the three
  // slots' only at the rows of the positions they ran.
  const before = await snapshot(device, batchCache);
  const three = [6, 1, 4];
  const firstThree = await run(three);
  const after = await snapshot(device, batchCache);
  const rowBytes = batchCache.rowBytes;
  for (let l = 0; l < config.numLayers; l++) {
    for (let i = 0; i < SEQS; i++) {
      const s = slotOf[i];
      const written = new Set<number>();
      if (three.includes(i)) for (let k = 0; k < STEPS; k++) written.add((lengths[i] + k) % batchCache.rows[l]);
      for (const which of ['k', 'v'] as const) {
        const [a, b] = [before[l][s][which], after[l][s][which]];
        for (let row = 0; row < batchCache.rows[l]; row++) {
          const same = equalBytes(a.subarray(row * rowBytes, (row + 1) * rowBytes), b.subarray(row * rowBytes, (row + 1) * rowBytes));
          expect(same, `layer ${l} ${which} slot ${s} (sequence ${i}) row ${row}`).toBe(!written.has(row));
        }
      }
    }
  }

  // (b) Each sequence alone (B = 1) against forward()'s general pass on its own cache.
  const alone = new Map<string, Float32Array>();
  for (let i = 0; i < SEQS; i++) {
    const got = await run([i], { checkGreedy: i === 0 });
    for (let k = 0; k < STEPS; k++) {
      const want = await model.forward([token(i, k)], lengths[i] + k, refCaches[i]);
      expectClose(got.get(`${i}:${k}`)!, want, tolerance);
      alone.set(`${i}:${k}`, got.get(`${i}:${k}`)!);
    }
  }
  // (a) Bitwise the same in every composition and order (and with the steps in an open pass).
  const compositions: { seqs: number[]; inPass?: boolean; checkGreedy?: boolean }[] = [
    { seqs: [5, 2, 7, 0, 3, 6, 1, 4] },
    { seqs: [0, 1, 2, 3, 4, 5, 6, 7], inPass: true },
    { seqs: [7, 3], checkGreedy: true },
    { seqs: [2, 4, 1, 0, 6] },
  ];
  const check = (got: Map<string, Float32Array>, what: string) => {
    for (const [key, logits] of got) expect(equalBytes(new Uint8Array(logits.buffer), new Uint8Array(alone.get(key)!.buffer)), `${what}: ${key}`).toBe(true);
  };
  check(firstThree, 'rows 6, 1, 4 (first)');
  for (const { seqs, inPass, checkGreedy } of compositions) check(await run(seqs, { inPass, checkGreedy }), `rows ${seqs.join(', ')}`);
  expect(created).toBe(0);

  // Negative checks: a row in another sequence's slot, or one position off, is far from its logits.
  const scale = Math.max(1, maxAbs(alone.get('2:0')!));
  const wrongSlot = await run([2], { rows: [{ slot: slotOf[5], position: lengths[2] }] });
  expect(maxAbsDiff(wrongSlot.get('2:0')!, alone.get('2:0')!)).toBeGreaterThan(50 * tolerance * scale);
  const wrongPosition = await run([2], { rows: [{ slot: slotOf[2], position: lengths[2] + 1 }] });
  expect(maxAbsDiff(wrongPosition.get('2:0')!, alone.get('2:0')!)).toBeGreaterThan(50 * tolerance * scale);

  // Steps in one pass (positions advanced on the GPU, each step embedding the token the one before
  // picked) equal the same steps one submit each.
  const onePass = await run([1, 5], { onePass: true });
  const separate = new Map<string, Float32Array>();
  step.setRows([1, 5].map((i) => ({ slot: slotOf[i], position: lengths[i] })));
  [1, 5].forEach((i, r) => device.queue.writeBuffer(step.rowToken(r).buffer, step.rowToken(r).offset, new Uint32Array([token(i, 0)])));
  for (let k = 0; k < STEPS; k++) {
    const encoder = device.createCommandEncoder();
    step.encode(encoder);
    device.queue.submit([encoder.finish()]);
  }
  for (const [r, i] of [1, 5].entries()) {
    const at = step.rowLogits(r);
    const bytes = await readBytes(device, at.buffer, at.offset, vocab * 4);
    separate.set(`${i}:${STEPS - 1}`, new Float32Array(bytes.buffer));
  }
  for (const [key, logits] of onePass) expect(equalBytes(new Uint8Array(logits.buffer), new Uint8Array(separate.get(key)!.buffer)), `one pass: ${key}`).toBe(true);
  expect(created).toBe(0);

  // A row run past the cache's last position writes no K/V (its row would be the next slot's
  // first; a split's last chunk may reach past the capacity).
  const past = await snapshot(device, batchCache);
  step.setRows([{ slot: slotOf[2], position: capacity - 1 }]);
  for (let k = 0; k < 3; k++) {
    const encoder = device.createCommandEncoder();
    step.encode(encoder);
    device.queue.submit([encoder.finish()]);
  }
  const pastAfter = await snapshot(device, batchCache);
  for (let l = 0; l < config.numLayers; l++) {
    for (let slot = 0; slot < SEQS; slot++) {
      if (slot === slotOf[2]) continue;
      expect(equalBytes(past[l][slot].k, pastAfter[l][slot].k) && equalBytes(past[l][slot].v, pastAfter[l][slot].v), `layer ${l} slot ${slot}`).toBe(true);
    }
  }

  expect(() => step.setRows([{ slot: 0, position: 1 }, { slot: 0, position: 2 }])).toThrow(/two rows/);
  expect(() => step.setRows([{ slot: SEQS, position: 1 }])).toThrow(/slot/);
  expect(() => step.setRows([{ slot: 0, position: capacity }])).toThrow(/outside the KV cache/);
  step.destroy();
  staging.destroy();
  batchCache.destroy();
  refCaches.forEach((c) => c.destroy());
}

/** A GPU's choices (as tuning.ts makes them there): teams of 4 lanes reduced in workgroup memory, a quad a block, a head a thread. */
const GPU_LIKE: Partial<KernelTuning> = {
  matvecPlan: () => ({ team: 4, reduction: 'workgroup' }),
  fusedShape: { quads: 1, workgroup: 64 },
  attentionHeads: () => 1,
  decodeAttentionThreads: 64,
  weightRuns: false,
};

const tiny: { name: string; config: LlamaConfig; dtype: WeightDType; passTokens?: number; chunkKeys?: number; kvDType: KvDType; tuning?: Partial<KernelTuning> }[] = [
  { name: 'GQA 6q/2kv, head_dim 4, f32 weights, f16 KV', config: tinyConfig(), dtype: 'f32', kvDType: 'f16' },
  {
    name: 'GQA 4q/1kv, head_dim 8, biases, bf16, window 5 in rings of 8 rows, f32 KV, attention in chunks of 5',
    config: tinyConfig({ hiddenSize: 20, numHeads: 4, numKvHeads: 1, headDim: 8, attentionBias: true, numLayers: 3, slidingWindow: 5 }),
    dtype: 'bf16',
    passTokens: 4,
    chunkKeys: 5,
    kvDType: 'f32',
  },
  {
    name: 'MHA 3 heads, head_dim 6, adjacent, tied, f16 weights and KV, attention in chunks of 5',
    config: tinyConfig({ hiddenSize: 18, numHeads: 3, numKvHeads: 3, headDim: 6, ropePairing: 'adjacent', tieWordEmbeddings: true, intermediateSize: 37, vocabSize: 53 }),
    dtype: 'f16',
    chunkKeys: 5,
    kvDType: 'f16',
  },
  {
    name: 'GQA 6q/2kv, f16 weights, f32 KV, a GPU\'s choices (teams reduced across a workgroup, barriers in the row loop)',
    config: tinyConfig({ hiddenSize: 32, intermediateSize: 64 }),
    dtype: 'f16',
    chunkKeys: 8,
    kvDType: 'f32',
    tuning: GPU_LIKE,
  },
];

describe('createFusedBatchStep: rows of any composition, bitwise as alone', () => {
  for (const { name, config, dtype, passTokens, chunkKeys, kvDType, tuning } of tiny) {
    it(name, async () => {
      const ctx = await testGpu();
      const { gpu } = buildRandomModel(ctx, config, dtype, 5);
      const model = await LlamaModel.create(ctx, config, gpu, { tuning: { decodeChunkKeys: chunkKeys, ...tuning } });
      await checkBatchStep(model, config, kvDType, passTokens, kvDType === 'f16' ? 1e-3 : 3e-5);
    });
  }

  const families = [
    { family: 'gemma2', what: 'post norms, GeGLU, embedding scale, soft-caps, rings', storage: 'f32' },
    { family: 'gemma3', what: 'post norms, GeGLU, embedding scale, q/k norms, per-layer RoPE, rings', storage: 'f32' },
    { family: 'phi4', what: 'partial rotation, LongRoPE, Q8_0 weights', storage: 'q8_0' },
  ] as const;
  for (const { family, what, storage } of families) {
    it(`${family} (tiny): ${what}`, async () => {
      const dir = models.dir(`webgpu-llama-batch-${family}-`);
      // A small vocabulary (Gemma 3's real one, 262144, makes the logits most of the time).
      generateModel({ family, shape: 'tiny', out: dir, seed: 7, overrides: { vocab_size: 512 } });
      const ctx = await testGpu();
      const opened = await openModel(filesFromPath(dir));
      const tuning: Partial<KernelTuning> = { decodeChunkKeys: 5 };
      const model = await LlamaModel.create(ctx, opened.config, await uploadLlamaWeights(ctx, opened, undefined, { storage }), { tuning });
      expect(partsOf(model).weights.layers[0].wq.dtype).toBe(storage);
      await checkBatchStep(model, opened.config, 'f32', 4, 3e-5);
      model.destroy();
    });
  }
});
