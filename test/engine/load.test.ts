// How Hugging Face weights are stored on the GPU (LoadOptions.weightStorage): f32 and bf16 files
// become packed f16 by default, or Q8_0 / Q4_0 blocks quantized while streaming; the GPU forward
// pass matches CpuLlama on the weights as stored. Plus the memory check before allocation, the
// progress counts and info.storage. (The memory plan of a real-shape model, without loading:
// test/engine/memory.test.ts.)
import { beforeAll, describe, expect, it } from 'vitest';
import { isCpuAdapter, type GpuContext } from '../../src/gpu/device.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { filesFromMemory } from '../../src/io/files.ts';
import { loadGenerator, type LoadOptions } from '../../src/engine/load.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { openModel, uploadLlamaWeights, type LoadProgress } from '../../src/engine/open-model.ts';
import { requiredTensors } from '../../src/model/weights.ts';
import type { KvCache } from '../../src/model/kv-cache.ts';
import { pairQuantBlocks } from '../../src/gpu/weight-formats.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildSafetensors, STORIES_GGUF, STORIES_HF } from '../helpers/model-files.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { CpuLlama, type CpuLayerWeights, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../reference/cpu-ops.ts';
import { quantizeValues as quantize } from '../../src/model/quantize.ts';
import { dequantize } from '../reference/quant.ts';
import { expectForwardMatchesReference } from '../helpers/compare.ts';

type FileDType = 'F32' | 'BF16';
type Stored = 'f16' | 'f32' | 'q8_0' | 'q4_0';

// Hidden and FFN sizes are multiples of 32 (rows of whole Q8_0 / Q4_0 blocks); the 1100-token
// vocabulary makes the embedding (70400 weights) longer than one conversion step (65536).
const SHAPES = { hidden: 64, ffn: 96, heads: 4, kvHeads: 2, vocab: 1100, layers: 2 };

/** What the GPU holds for values stored in the file as `file` and on the GPU as `stored`. */
function held(values: Float32Array, file: FileDType, stored: Stored): Float32Array {
  const source = file === 'BF16' ? values.map((v) => bf16BitsToF32(f32ToBf16Bits(v))) : values;
  if (stored === 'f32') return source;
  if (stored === 'f16') return source.map((v) => f16BitsToF32(f32ToF16Bits(Math.max(-65504, Math.min(65504, v)))));
  return dequantize(stored, quantize(stored, source), source.length);
}

/** A random tiny Llama as an in-memory Hugging Face folder, and its weights as the GPU holds them. */
function randomHfModel(file: FileDType, stored: Stored, options: { tied?: boolean; seed?: number } = {}) {
  const rand = mulberry32(options.seed ?? 3);
  const s = SHAPES;
  const headDim = s.hidden / s.heads;
  const specs: { name: string; dtype: FileDType; shape: number[]; data: Uint8Array }[] = [];
  const encode = (values: Float32Array, dtype: FileDType): Uint8Array =>
    dtype === 'F32' ? new Uint8Array(values.slice().buffer) : new Uint8Array(Uint16Array.from(values, f32ToBf16Bits).buffer);
  const matrix = (name: string, rows: number, cols: number): Float32Array => {
    const values = Float32Array.from({ length: rows * cols }, () => (rand() * 2 - 1) / Math.sqrt(cols));
    specs.push({ name, dtype: file, shape: [rows, cols], data: encode(values, file) });
    return held(values, file, stored);
  };
  const vector = (name: string, n: number): Float32Array => {
    const values = Float32Array.from({ length: n }, () => 1 + (rand() * 2 - 1) * 0.2);
    specs.push({ name, dtype: 'F32', shape: [n], data: encode(values, 'F32') });
    return values;
  };
  const tokenEmbedding = matrix('model.embed_tokens.weight', s.vocab, s.hidden);
  const layers: CpuLayerWeights[] = [];
  for (let l = 0; l < s.layers; l++) {
    const p = `model.layers.${l}.`;
    layers.push({
      attnNorm: vector(`${p}input_layernorm.weight`, s.hidden),
      wq: matrix(`${p}self_attn.q_proj.weight`, s.heads * headDim, s.hidden),
      wk: matrix(`${p}self_attn.k_proj.weight`, s.kvHeads * headDim, s.hidden),
      wv: matrix(`${p}self_attn.v_proj.weight`, s.kvHeads * headDim, s.hidden),
      wo: matrix(`${p}self_attn.o_proj.weight`, s.hidden, s.heads * headDim),
      ffnNorm: vector(`${p}post_attention_layernorm.weight`, s.hidden),
      wGate: matrix(`${p}mlp.gate_proj.weight`, s.ffn, s.hidden),
      wUp: matrix(`${p}mlp.up_proj.weight`, s.ffn, s.hidden),
      wDown: matrix(`${p}mlp.down_proj.weight`, s.hidden, s.ffn),
    });
  }
  const outputNorm = vector('model.norm.weight', s.hidden);
  const lmHead = options.tied ? tokenEmbedding : matrix('lm_head.weight', s.vocab, s.hidden);
  const cpu: CpuLlamaWeights = { tokenEmbedding, layers, outputNorm, lmHead };
  const config = {
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: s.hidden, intermediate_size: s.ffn,
    num_hidden_layers: s.layers, num_attention_heads: s.heads, num_key_value_heads: s.kvHeads, vocab_size: s.vocab,
    max_position_embeddings: 64, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: !!options.tied,
  };
  const vocab = Object.fromEntries(Array.from({ length: s.vocab }, (_, i) => [`t${i}`, i]));
  const tokenizerJson = {
    version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: 'BPE', vocab, merges: [], unk_token: null },
  };
  /** The folder, with `tensors` as its safetensors. */
  const folder = (tensors = specs) => filesFromMemory('random-hf', {
    'config.json': JSON.stringify(config),
    'tokenizer.json': JSON.stringify(tokenizerJson),
    'model.safetensors': buildSafetensors(tensors),
  });
  return { files: () => folder(), folder, cpu, specs };
}

/** GPU logits (prefill of 6 tokens, then 2 decode steps) vs CpuLlama's, within 2e-4 of the logit scale. */
async function expectMatchesReference(generator: LlamaGenerator, config: LlamaConfig, cpu: CpuLlamaWeights): Promise<void> {
  const cache = generator.model.createKvCache(16);
  try {
    const rand = mulberry32(9);
    const prompt = Array.from({ length: 6 }, () => Math.floor(rand() * config.vocabSize));
    await expectForwardMatchesReference(generator.model, cache, new CpuLlama(config, cpu, 16), prompt, { decodeSteps: 2 });
  } finally {
    cache.destroy();
  }
}

describe('Hugging Face weights on the GPU', () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await testGpu();
  });

  const cases: { file: FileDType; stored: Stored; option?: LoadOptions['weightStorage']; tied?: boolean; kv?: 'f32' }[] = [
    { file: 'F32', stored: 'f16' },
    { file: 'BF16', stored: 'f16', tied: true },
    { file: 'F32', stored: 'q8_0', option: 'q8_0', kv: 'f32' },
    { file: 'BF16', stored: 'q4_0', option: 'q4_0', tied: true },
    { file: 'F32', stored: 'q4_0', option: 'q4_0' },
  ];
  for (const { file, stored, option, tied, kv } of cases) {
    it(`${file} file, weightStorage ${option ?? '(default)'}${tied ? ', tied embeddings' : ''}${kv ? `, ${kv} KV cache` : ''}: stored as ${stored}, matches CpuLlama on those weights`, async () => {
      const { files, cpu } = randomHfModel(file, stored, { tied });
      const events: LoadProgress[] = [];
      const generator = await loadGenerator(ctx, files(), {
        weightStorage: option,
        contextLength: 16,
        kvCacheDType: kv,
        onProgress: (p) => events.push(p),
      });
      try {
        const config = generator.model.config;
        const required = requiredTensors(config);
        // info.storage: every tensor, matrices in the chosen type, vectors f32, sizes adding up.
        const storage = generator.info.storage!;
        expect(storage.weightStorage).toBe(option ?? 'f16');
        expect(Object.keys(storage.tensors).sort()).toEqual(required.map((r) => r.name).sort());
        let sum = 0;
        for (const { name, shape } of required) {
          const n = shape.reduce((a, b) => a * b, 1);
          const bytesPerBlock = { f16: 64, f32: 128, q8_0: 34, q4_0: 18 }[stored];
          const expected = shape.length === 1 ? { dtype: 'f32', bytes: 4 * n } : { dtype: stored, bytes: Math.ceil(((n / 32) * bytesPerBlock) / 4) * 4 };
          expect(storage.tensors[name], name).toEqual(expected);
          sum += expected.bytes;
        }
        expect(storage.weightBytes).toBe(sum);
        expect(storage.totalBytes).toBe(storage.weightBytes + storage.kvCacheBytes + storage.activationBytes);
        // The KV cache: f16 (half of f32) on GPUs, f32 on CPU adapters, unless kvCacheDType says.
        const kvWant = kv ?? (isCpuAdapter(ctx.adapter) ? 'f32' : 'f16');
        expect(storage.kvCacheDType).toBe(kvWant);
        const kvBytes = 2 * config.numLayers * 16 * config.numKvHeads * config.headDim * (kvWant === 'f32' ? 4 : 2);
        expect(storage.kvCacheBytes).toBe(kvBytes);
        const cache = (generator as unknown as { cache: KvCache }).cache;
        expect(cache.kvDType).toBe(kvWant);
        expect(cache.byteSize).toBe(kvBytes);
        expect(generator.model.weights.layers[1].wDown.dtype).toBe(stored);
        // Progress: tensors count up to the total, bytes to the file's tensor bytes.
        const last = events[events.length - 1];
        expect(last.phase).toBe('upload');
        expect(last).toMatchObject({ loadedTensors: required.length, totalTensors: required.length });
        expect(last.loadedBytes).toBe(last.totalBytes);
        for (let i = 1; i < events.length; i++) expect(events[i].loadedTensors).toBeGreaterThanOrEqual(events[i - 1].loadedTensors);

        await expectMatchesReference(generator, config, cpu);
      } finally {
        generator.destroy();
      }
    });
  }

  it("'f32' and 'source' keep f32 files exact; the conversion is the same whatever the chunk edges", async () => {
    const { files, cpu, specs } = randomHfModel('F32', 'f32');
    for (const weightStorage of ['f32', 'source'] as const) {
      const generator = await loadGenerator(ctx, files(), { weightStorage, contextLength: 16 });
      try {
        expect(generator.info.storage!.tensors['model.embed_tokens.weight'].dtype).toBe('f32');
        await expectMatchesReference(generator, generator.model.config, cpu);
      } finally {
        generator.destroy();
      }
    }
    // Odd chunk sizes put read edges inside elements and blocks: the GPU bytes do not change.
    const opened = await openModel(files());
    const read = async (chunkSize: number) => {
      const weights = await uploadLlamaWeights(ctx, opened, undefined, { chunkSize, storage: 'q4_0' });
      try {
        return await readBuffer(ctx, weights.tokenEmbedding.buffer);
      } finally {
        weights.destroy();
      }
    };
    const a = await read(4093);
    const b = await read(1 << 22);
    expect(Buffer.compare(Buffer.from(a), Buffer.from(b))).toBe(0);
    const emb = specs.find((s) => s.name === 'model.embed_tokens.weight')!;
    // The file's Q4_0 blocks, stored as the GPU's pairs of blocks.
    const values = new Float32Array(emb.data.slice().buffer);
    const expected = pairQuantBlocks('q4_0', quantize('q4_0', values), values.length / 32);
    expect(Buffer.compare(Buffer.from(a.subarray(0, expected.length)), Buffer.from(expected))).toBe(0);
  });

  it('clamps f32 values beyond the f16 range to ±65504, with one warning counting them', async () => {
    const { specs, folder } = randomHfModel('F32', 'f16');
    const q = specs.find((s) => s.name === 'model.layers.0.self_attn.q_proj.weight')!;
    const values = new Float32Array(q.data.buffer, q.data.byteOffset, q.data.byteLength / 4);
    values[5] = 1e6;
    values[70] = -Infinity;
    values[71] = 65519; // rounds to 65504: in range
    const edited = await openModel(folder(specs));
    const warnings: string[] = [];
    const weights = await uploadLlamaWeights(ctx, edited, undefined, { storage: 'f16', onWarning: (m) => warnings.push(m) });
    try {
      expect(warnings).toEqual([expect.stringMatching(/^2 weights beyond the f16 range were clamped to ±65504/)]);
      const halves = new Uint16Array((await readBuffer(ctx, weights.layers[0].wq.buffer)).buffer);
      expect(halves[5]).toBe(0x7bff);
      expect(halves[70]).toBe(0xfbff);
      expect(halves[71]).toBe(0x7bff);
    } finally {
      weights.destroy();
    }
  });

  it('stories260K (f32 folder) with q8_0: rows of 172 stay f16, and the first greedy token matches f32', async () => {
    const greedy = async (weightStorage: LoadOptions['weightStorage']) => {
      const generator = await loadGenerator(ctx, filesFromPath(STORIES_HF), { weightStorage, contextLength: 64 });
      try {
        const prompt = generator.tokenizer.encode('Once upon a time');
        const tokens: number[] = [];
        for await (const t of generator.generate({ promptTokens: prompt, maxTokens: 12, sampling: { temperature: 0, topP: 1 }, stopTokenIds: [] })) tokens.push(t);
        return { tokens, storage: generator.info.storage!, text: generator.tokenizer.decode(tokens) };
      } finally {
        generator.destroy();
      }
    };
    const exact = await greedy('f32');
    const q8 = await greedy('q8_0');
    expect(q8.storage.tensors['model.layers.0.mlp.down_proj.weight'].dtype).toBe('f16');
    expect(q8.storage.tensors['model.layers.0.mlp.up_proj.weight'].dtype).toBe('q8_0');
    expect(q8.storage.tensors['model.embed_tokens.weight'].dtype).toBe('q8_0');
    expect(q8.storage.weightBytes).toBeLessThan(exact.storage.weightBytes / 3);
    expect(q8.tokens[0]).toBe(exact.tokens[0]);
    expect(q8.text).toMatch(/^[\w ,.'"!?\n-]+$/);
  });

  it('GGUF files keep their tensor types whatever weightStorage says', async () => {
    const opened = await openModel(filesFromPath(STORIES_GGUF));
    const generator = await loadGenerator(ctx, filesFromPath(STORIES_GGUF), { weightStorage: 'q4_0', contextLength: 16 });
    try {
      const storage = generator.info.storage!;
      expect(storage.weightStorage).toBe('source');
      for (const { name, shape } of requiredTensors(opened.config)) {
        expect(storage.tensors[name].dtype, name).toBe(shape.length === 1 ? 'f32' : opened.tensors.get(name)!.dtype);
      }
    } finally {
      generator.destroy();
    }
  });

  it('refuses a model over the memory budget, or a tensor over the buffer limit, before allocating anything', async () => {
    let created = 0;
    const device = new Proxy(ctx.device, {
      get(target, prop) {
        if (prop === 'createBuffer') return (d: GPUBufferDescriptor) => (created++, target.createBuffer(d));
        const v = Reflect.get(target, prop);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const counting = { ...ctx, device };
    const { files } = randomHfModel('F32', 'f16');
    await expect(loadGenerator(counting, files(), { memoryBudgetBytes: 100_000, contextLength: 16 })).rejects.toThrow(
      /Model random-hf needs \d+ bytes \([\d.]+ MiB\) of GPU memory but the budget allows 100000 bytes .*weights .*KV cache/,
    );
    // A limit under one row (64 f32 weights, 256 bytes): the matrices cannot even be split.
    const tiny = { ...counting, limits: { ...ctx.limits, maxStorageBufferBindingSize: 200 } };
    await expect(loadGenerator(tiny, files(), { weightStorage: 'f32' })).rejects.toThrow(
      /Tensor model\.embed_tokens\.weight needs a 281600-byte GPU buffer \(f32\); this device allows at most 200 bytes per storage buffer \(maxStorageBufferBindingSize\)/,
    );
    await expect(loadGenerator(counting, files(), { weightStorage: 'q3' as never })).rejects.toThrow(/Unknown weight storage "q3"/);
    expect(created).toBe(0);
    const small = { ...counting, limits: { ...ctx.limits, maxStorageBufferBindingSize: 100_000 } };
    // The same tensor as q4_0 fits (and the budget that refused nothing else is enough).
    const generator = await loadGenerator(small, files(), { weightStorage: 'q4_0', memoryBudgetBytes: 10_000_000, contextLength: 16 });
    expect(generator.info.storage!.tensors['model.embed_tokens.weight']).toEqual({ dtype: 'q4_0', bytes: 1100 * 2 * 18 });
    generator.destroy();
  });
});

describe('the prefix cache options', () => {
  it('size the saved prefixes: by default the KV cache, within the memory budget; explicit sizes and false as given; bad values refused', async () => {
    const ctx = await testGpu();
    const load = (options: LoadOptions) => loadGenerator(ctx, filesFromPath(STORIES_GGUF), { contextLength: 64, ...options });
    const loaded = async (options: LoadOptions) => {
      const g = await load(options);
      const result = { storage: g.info.storage!, stats: g.prefixCacheStats };
      g.destroy();
      return result;
    };
    const byDefault = await loaded({});
    expect(byDefault.storage.prefixCacheBytes).toBe(byDefault.storage.kvCacheBytes);
    expect(byDefault.stats.enabled).toBe(true);
    expect((await loaded({ prefixCacheBytes: 12345 })).storage.prefixCacheBytes).toBe(12345);
    const off = await loaded({ prefixCache: false });
    expect([off.storage.prefixCacheBytes, off.stats.enabled]).toEqual([0, false]);
    // Within a budget: what the model leaves of it.
    const budget = byDefault.storage.totalBytes + 1000;
    expect((await loaded({ memoryBudgetBytes: budget })).storage.prefixCacheBytes).toBe(1000);
    await expect(load({ memoryBudgetBytes: budget, prefixCacheBytes: 5000 })).rejects.toThrow(/prefixCacheBytes 5000 .* does not fit in memoryBudgetBytes/);
    await expect(load({ prefixCacheBytes: -1 })).rejects.toThrow(/prefixCacheBytes must be a whole number of bytes >= 0, got -1/);
    await expect(load({ prefixCache: 'yes' as never })).rejects.toThrow(/prefixCache must be true or false/);
  });
});

describe('sequences at once', () => {
  it('8 by default (their slots within 512 MiB), as asked, within the memory budget (1 where fewer than 2 slots fit); bad values refused', async () => {
    const ctx = await testGpu();
    const load = (options: LoadOptions) => loadGenerator(ctx, filesFromPath(STORIES_GGUF), { contextLength: 64, ...options });
    const loaded = async (options: LoadOptions) => {
      const g = await load(options);
      const result = { storage: g.info.storage!, concurrent: g.maxConcurrentSequences, slots: g.slotStats };
      g.destroy();
      return result;
    };
    const byDefault = await loaded({});
    expect([byDefault.storage.maxConcurrentSequences, byDefault.concurrent, byDefault.slots.made]).toEqual([8, 8, 8]);
    expect((await loaded({ maxConcurrentSequences: 3 })).concurrent).toBe(3);
    const serial = await loaded({ maxConcurrentSequences: 1 });
    expect([serial.concurrent, serial.slots.bytes]).toEqual([1, 0]);
    // A budget with room for the prefix cache and three slots beside the model.
    const { totalBytes, kvCacheBytes, prefixCacheBytes } = byDefault.storage;
    const three = totalBytes + prefixCacheBytes + 3 * kvCacheBytes + 10;
    expect((await loaded({ memoryBudgetBytes: three, prefixCacheBytes })).concurrent).toBe(3);
    expect((await loaded({ memoryBudgetBytes: totalBytes + prefixCacheBytes + kvCacheBytes, prefixCacheBytes })).concurrent).toBe(1);
    for (const bad of [0, 1.5, 2000, NaN]) {
      await expect(load({ maxConcurrentSequences: bad })).rejects.toThrow(/maxConcurrentSequences must be an integer in 1..1024/);
    }
  });
});

describe('matrices over the buffer limits, split into buffers of whole rows', () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await testGpu();
  });

  // A 4 KiB limit (the device's real limits are untouched: only the upload and plan read ctx.limits)
  // splits the embedding (1100 rows) and the FFN matrices into ragged parts.
  const LIMIT = 4096;
  const cases: { file: FileDType; stored: Stored; option: LoadOptions['weightStorage']; tied?: boolean }[] = [
    { file: 'F32', stored: 'f32', option: 'f32' },
    { file: 'BF16', stored: 'f16', option: 'f16', tied: true },
    { file: 'F32', stored: 'q8_0', option: 'q8_0' },
  ];
  for (const { file, stored, option, tied } of cases) {
    it(`${file} file as ${stored}${tied ? ', tied embeddings' : ''}: every part within the limit, matches CpuLlama`, async () => {
      const { files, cpu } = randomHfModel(file, stored, { tied });
      const limited = { ...ctx, limits: { ...ctx.limits, maxStorageBufferBindingSize: LIMIT } };
      const generator = await loadGenerator(limited, files(), { weightStorage: option, contextLength: 16 });
      try {
        const { weights, config } = generator.model;
        const embedding = weights.tokenEmbedding;
        expect(embedding.parts!.length).toBeGreaterThan(2);
        expect(embedding.parts!.reduce((n, p) => n + p.rows, 0)).toBe(config.vocabSize);
        expect(weights.layers[0].wDown.parts!.length).toBeGreaterThan(1);
        const storage = generator.info.storage!;
        let sum = 0;
        for (const [name, t] of Object.entries(storage.tensors)) {
          for (const p of t.parts ?? [t]) expect(p.bytes, name).toBeLessThanOrEqual(LIMIT);
          sum += t.bytes;
        }
        expect(storage.weightBytes).toBe(sum);
        await expectMatchesReference(generator, config, cpu);
      } finally {
        generator.destroy();
      }
    });
  }
});

async function readBuffer(ctx: GpuContext, buffer: GPUBuffer): Promise<Uint8Array> {
  const { device } = ctx;
  const staging = device.createBuffer({ size: buffer.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, buffer.size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Uint8Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out;
}
