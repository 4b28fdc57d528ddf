// GGUF files with quantized weights, end to end: a random tiny Llama written as an in-memory GGUF
// whose matrices are ggml blocks (our quantizer, test/reference/quant.ts), opened with openModel,
// uploaded as raw blocks with uploadLlamaWeights, run by LlamaModel, and compared with CpuLlama on
// the dequantized weights. Plus the loader's refusals (unsupported types, quantized vectors).
import { describe, expect, it } from 'vitest';
import type { WeightDType } from '../../src/gpu/tensor.ts';
import { isQuantized } from '../../src/gpu/weight-formats.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { filesFromMemory, memorySource } from '../../src/io/files.ts';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { openModel, uploadLlamaWeights } from '../../src/engine/open-model.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildGguf, tinyLlamaGgufKvs, type GgufKv, type GgufTensorSpec } from '../helpers/model-files.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { tinyConfig } from '../helpers/random-model.ts';
import { CpuLlama, type CpuLayerWeights, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { f16BitsToF32, f32ToF16Bits } from '../reference/cpu-ops.ts';
import { quantizeValues as quantize } from '../../src/model/quantize.ts';
import { dequantize } from '../reference/quant.ts';
import { maxAbsDiff } from '../helpers/compare.ts';

const GGML_TYPE: Record<WeightDType, number> = {
  f32: 0, f16: 1, bf16: 30, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, q4_k: 12, q5_k: 13, q6_k: 14,
};

/** Storage type of each matrix of the file (by GGUF short name: token_embd, output, attn_q, ...). */
type Storage = Record<'token_embd' | 'output' | 'attn_q' | 'attn_k' | 'attn_v' | 'attn_output' | 'ffn_gate' | 'ffn_up' | 'ffn_down', WeightDType>;

/** A random Llama as a GGUF (matrices stored per `storage`) and the weights its blocks hold, for CpuLlama. */
function quantizedGguf(config: LlamaConfig, storage: Storage, seed: number): { file: Uint8Array; cpu: CpuLlamaWeights } {
  const rand = mulberry32(seed);
  const tensors: GgufTensorSpec[] = [];
  const matrix = (name: string, kind: keyof Storage, rows: number, cols: number): Float32Array => {
    const values = new Float32Array(rows * cols);
    for (let i = 0; i < values.length; i++) values[i] = (rand() * 2 - 1) / Math.sqrt(cols);
    const dtype = storage[kind];
    let data: Uint8Array;
    let held: Float32Array;
    if (isQuantized(dtype)) {
      data = quantize(dtype, values);
      held = dequantize(dtype, data, rows * cols);
    } else if (dtype === 'f16') {
      const bits = Uint16Array.from(values, f32ToF16Bits);
      data = new Uint8Array(bits.buffer);
      held = Float32Array.from(bits, f16BitsToF32);
    } else if (dtype === 'f32') {
      data = new Uint8Array(values.buffer);
      held = values;
    } else {
      throw new Error(`test helper: no ${dtype}`);
    }
    tensors.push({ name, ne: [cols, rows], ggmlType: GGML_TYPE[dtype], data });
    return held;
  };
  const vector = (name: string, n: number): Float32Array => {
    const values = Float32Array.from({ length: n }, () => 1 + (rand() * 2 - 1) * 0.2);
    tensors.push({ name, ne: [n], ggmlType: 0, data: new Uint8Array(values.buffer) });
    return values;
  };
  const c = config;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const tokenEmbedding = matrix('token_embd.weight', 'token_embd', c.vocabSize, c.hiddenSize);
  const layers: CpuLayerWeights[] = [];
  for (let l = 0; l < c.numLayers; l++) {
    const p = `blk.${l}.`;
    layers.push({
      attnNorm: vector(`${p}attn_norm.weight`, c.hiddenSize),
      wq: matrix(`${p}attn_q.weight`, 'attn_q', q, c.hiddenSize),
      wk: matrix(`${p}attn_k.weight`, 'attn_k', kv, c.hiddenSize),
      wv: matrix(`${p}attn_v.weight`, 'attn_v', kv, c.hiddenSize),
      wo: matrix(`${p}attn_output.weight`, 'attn_output', c.hiddenSize, q),
      ffnNorm: vector(`${p}ffn_norm.weight`, c.hiddenSize),
      wGate: matrix(`${p}ffn_gate.weight`, 'ffn_gate', c.intermediateSize, c.hiddenSize),
      wUp: matrix(`${p}ffn_up.weight`, 'ffn_up', c.intermediateSize, c.hiddenSize),
      wDown: matrix(`${p}ffn_down.weight`, 'ffn_down', c.hiddenSize, c.intermediateSize),
    });
  }
  const outputNorm = vector('output_norm.weight', c.hiddenSize);
  const lmHead = c.tieWordEmbeddings ? tokenEmbedding : matrix('output.weight', 'output', c.vocabSize, c.hiddenSize);

  const kvs = tinyLlamaGgufKvs(c);
  return { file: buildGguf(kvs, tensors), cpu: { tokenEmbedding, layers, outputNorm, lmHead } };
}

const all = (dtype: WeightDType): Storage => ({
  token_embd: dtype, output: dtype, attn_q: dtype, attn_k: dtype, attn_v: dtype, attn_output: dtype,
  ffn_gate: dtype, ffn_up: dtype, ffn_down: dtype,
});

// K-quant rows need 256 columns: hidden and ffn sizes of 256; the 32-block types get 64 / 96.
const K_SHAPES = { hiddenSize: 256, intermediateSize: 256, numHeads: 4, numKvHeads: 2, headDim: 64, vocabSize: 67, numLayers: 2 };
const SMALL_SHAPES = { hiddenSize: 64, intermediateSize: 96, numHeads: 4, numKvHeads: 2, headDim: 16, vocabSize: 61, numLayers: 2 };

// `limit`: the upload sees a maxStorageBufferBindingSize that small, and splits the matrices over
// it into buffers of whole rows (row bytes 68 and 102 for Q8_0 here: parts not 4-byte multiples).
const cases: { name: string; config: LlamaConfig; storage: Storage; limit?: number }[] = [
  { name: 'Q8_0 throughout', config: tinyConfig(SMALL_SHAPES), storage: all('q8_0') },
  { name: 'Q4_0 throughout, tied embeddings (a quantized LM head)', config: tinyConfig({ ...SMALL_SHAPES, tieWordEmbeddings: true }), storage: all('q4_0') },
  {
    name: 'Q4_K_M-style mix: Q4_K, Q6_K for attn_v / ffn_down / output, Q8_0 embeddings',
    config: tinyConfig(K_SHAPES),
    storage: { ...all('q4_k'), attn_v: 'q6_k', ffn_down: 'q6_k', output: 'q6_k', token_embd: 'q8_0' },
  },
  {
    name: 'Q5_K_M-style mix with the 32-block fallbacks: Q5_K, Q6_K, Q5_0, Q5_1, Q4_1, F16',
    config: tinyConfig(K_SHAPES),
    storage: { ...all('q5_k'), attn_v: 'q6_k', ffn_down: 'q5_0', output: 'q5_1', attn_k: 'q4_1', token_embd: 'f16' },
  },
  { name: 'Q8_0 throughout, split over a 1000-byte buffer limit', config: tinyConfig(SMALL_SHAPES), storage: all('q8_0'), limit: 1000 },
  {
    name: 'Q4_K_M-style mix, split over a 2000-byte buffer limit',
    config: tinyConfig(K_SHAPES),
    storage: { ...all('q4_k'), attn_v: 'q6_k', ffn_down: 'q6_k', output: 'q6_k', token_embd: 'q8_0' },
    limit: 2000,
  },
];

describe('GGUF with quantized weights: GPU forward vs CPU reference on the dequantized weights', () => {
  for (const { name, config, storage, limit } of cases) {
    it(name, async () => {
      const gpu = await testGpu();
      const ctx = limit ? { ...gpu, limits: { ...gpu.limits, maxStorageBufferBindingSize: limit } } : gpu;
      const { file, cpu } = quantizedGguf(config, storage, 5);
      const opened = await openModel(filesFromMemory('q', { 'q.gguf': file }, 'q.gguf'));
      expect(opened.config).toMatchObject({ hiddenSize: config.hiddenSize, vocabSize: config.vocabSize, tieWordEmbeddings: config.tieWordEmbeddings });
      expect(opened.tensors.get('model.layers.0.self_attn.v_proj.weight')!.dtype).toBe(storage.attn_v);
      const weights = await uploadLlamaWeights(ctx, opened, undefined, { chunkSize: 999 });
      expect(weights.layers[1].wDown).toMatchObject({ dtype: storage.ffn_down, rows: config.hiddenSize, cols: config.intermediateSize });
      if (limit) {
        for (const m of [weights.tokenEmbedding, weights.lmHead, weights.layers[1].wDown]) {
          expect(m.parts!.length).toBeGreaterThan(1);
          for (const p of m.parts!) expect(p.buffer.size).toBeLessThanOrEqual(limit);
        }
      }
      const model = await LlamaModel.create(ctx, opened.config, weights);
      const cache = model.createKvCache(16);
      const reference = new CpuLlama(opened.config, cpu, 16);
      try {
        const rand = mulberry32(9);
        const prompt = Array.from({ length: 6 }, () => Math.floor(rand() * config.vocabSize));
        const gpuAll = await model.forward(prompt, 0, cache, { allLogits: true });
        const cpuAll = reference.forward(prompt, 0);
        const scale = Math.max(1, ...cpuAll.map(Math.abs));
        expect(maxAbsDiff(gpuAll, cpuAll)).toBeLessThan(2e-4 * scale);
        for (let step = 0; step < 2; step++) {
          const token = (prompt[step] * 31 + 7) % config.vocabSize;
          const gpuStep = await model.forward([token], prompt.length + step, cache);
          const cpuStep = reference.forward([token], prompt.length + step);
          expect(maxAbsDiff(gpuStep, cpuStep)).toBeLessThan(2e-4 * scale);
        }
      } finally {
        cache.destroy();
        model.destroy();
      }
    });
  }
});

describe('GGUF with quantized weights: the decode step with a dispatch per layer vs forward()', () => {
  // Every quantized type in decode_layer.wgsl's projections, walked by runs (CPU adapters) and 4 at
  // a time. (The five-dispatch step's fused kernels are checked per type in
  // test/gpu/kernels/fused-matvec.test.ts.)
  const picked = cases.filter((c) => !c.limit && c.name !== 'Q4_0 throughout, tied embeddings (a quantized LM head)');
  for (const { name, config, storage } of picked) {
    it(name, async () => {
      const ctx = await testGpu();
      const { file } = quantizedGguf(config, storage, 5);
      const opened = await openModel(filesFromMemory('q', { 'q.gguf': file }, 'q.gguf'));
      const weights = await uploadLlamaWeights(ctx, opened, undefined, { chunkSize: 999 });
      const model = await LlamaModel.create(ctx, opened.config, weights);
      const device = ctx.device;
      const vocabBytes = config.vocabSize * 4;
      const staging = device.createBuffer({ size: vocabBytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const prompt = [3, 1, 4, 1, 5];
      try {
        const forwardCache = model.createKvCache(16);
        await model.forward(prompt, 0, forwardCache);
        const want = await model.forward([7], prompt.length, forwardCache);
        for (const [layer, runs] of [[true, true], [true, false]] as const) {
          // A model of its own for each tuning (its kernels' choices are fixed at creation).
          const tuned = await LlamaModel.create(ctx, opened.config, await uploadLlamaWeights(ctx, opened, undefined, { chunkSize: 999 }), {
            tuning: { decodeLayer: () => layer, weightRuns: runs },
          });
          const cache = tuned.createKvCache(16);
          await tuned.forward(prompt, 0, cache, { readBack: false });
          const step = tuned.createDecodeStep(cache);
          expect(step.dispatchCount).toBe(2 + config.numLayers * (layer ? 1 : 5));
          device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([7]));
          const encoder = device.createCommandEncoder();
          step.encodeStep(encoder, prompt.length);
          encoder.copyBufferToBuffer(step.logits, 0, staging, 0, vocabBytes);
          device.queue.submit([encoder.finish()]);
          await staging.mapAsync(GPUMapMode.READ);
          const got = new Float32Array(staging.getMappedRange().slice(0));
          staging.unmap();
          expect(maxAbsDiff(got, want), `layer ${layer}, runs ${runs}`).toBeLessThan(1e-3 * Math.max(1, ...want.map(Math.abs)));
          step.destroy();
          cache.destroy();
          tuned.destroy();
        }
        forwardCache.destroy();
      } finally {
        staging.destroy();
        model.destroy();
      }
    });
  }
});

describe('GGUF quantized tensors: what the loader refuses', () => {
  const arch = { 'general.architecture': { type: 'string', value: 'llama' } } satisfies Record<string, GgufKv>;

  it('reads the byte sizes of the quantized types', async () => {
    const file = buildGguf(arch, [
      { name: 'a', ne: [64, 3], ggmlType: 8, data: new Uint8Array(34 * 6) },
      { name: 'b', ne: [256, 2], ggmlType: 12, data: new Uint8Array(144 * 2) },
      { name: 'c', ne: [256, 1], ggmlType: 14, data: new Uint8Array(210) },
      { name: 'd', ne: [32, 5], ggmlType: 2, data: new Uint8Array(18 * 5) },
    ]);
    const header = await readGgufHeader(memorySource('q.gguf', file));
    expect(header.tensors.map((t) => [t.type, t.byteLength])).toEqual([['Q8_0', 204], ['Q4_K', 288], ['Q6_K', 210], ['Q4_0', 90]]);
  });

  it('names the tensor whose rows are not whole blocks', async () => {
    const file = buildGguf(arch, [{ name: 'blk.0.attn_q.weight', ne: [48, 2], ggmlType: 8, data: new Uint8Array(102) }]);
    await expect(readGgufHeader(memorySource('q.gguf', file))).rejects.toThrow(/blk\.0\.attn_q\.weight.*Q8_0.*48/);
  });

  it('refuses a quantized vector before allocating anything', async () => {
    const ctx = await testGpu();
    const config = tinyConfig(SMALL_SHAPES);
    const { file } = quantizedGguf(config, all('q8_0'), 3);
    const opened = await openModel(filesFromMemory('q', { 'q.gguf': file }, 'q.gguf'));
    const tensors = new Map(opened.tensors);
    const norm = tensors.get('model.norm.weight')!;
    tensors.set(norm.name, { ...norm, dtype: 'q8_0' });
    let created = 0;
    const device = new Proxy(ctx.device, {
      get(target, prop) {
        if (prop === 'createBuffer') return (d: GPUBufferDescriptor) => (created++, target.createBuffer(d));
        const v = Reflect.get(target, prop);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    await expect(uploadLlamaWeights({ ...ctx, device }, { ...opened, tensors })).rejects.toThrow(/model\.norm\.weight.*output_norm\.weight.*q8_0/);
    expect(created).toBe(0);
  });
});
