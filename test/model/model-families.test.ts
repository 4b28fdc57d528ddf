// The families of issue 30 (Qwen3, SmolLM3, Phi-3.5, Phi-4-mini) on sharp random-weight models in
// Hugging Face layout (scripts/model-families.ts): the published configs read into their
// descriptions; the GPU's teacher-forced logits on every path (forward()'s general pass, the
// reusable decode step with the fused kernels, and with the decode-layer kernel, asked for as on a
// CPU adapter, with the family's features) against the float64 CPU reference, on f32 and f16 KV
// caches, past Phi's original context and past its window, from the Hugging Face folder and from
// its GGUF conversion (llama.cpp's names and layout); each family's feature shown to change the
// answer; and the refusals of what the runtime does not run, before any weight is read.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { familyOf, LLAMA_FAMILY, modelLayers, type LlamaConfig } from '../../src/model/config.ts';
import { configFromGguf } from '../../src/model/config-gguf.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { openModel, uploadLlamaWeights, type OpenedModel } from '../../src/engine/open-model.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { layerInverseFrequencies } from '../../src/model/rope-frequencies.ts';
import { llamaShape } from '../../src/model/shape.ts';
import { fusedStepRefusal } from '../../src/model/decode-step.ts';
import { decodeLayerFeatures, decodeLayerRefusal } from '../../src/model/decode-layers.ts';
import type { DecodeLayerFeatures } from '../../src/gpu/kernels/index.ts';
import { filesFromPath } from '../../src/node/index.ts';
import { generateModel, REAL_CONFIGS, type Family } from '../../scripts/model-families.ts';
import { writeGgufFromHf } from '../../scripts/gguf-from-hf.ts';
import { testGpu } from '../helpers/gpu.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { cpuLlamaWeights, readFolderTensors, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';

const models = tempModels();

describe('published configs of the issue 30 families', () => {
  it('Qwen3-0.6B: q/k norms, head_dim 128 apart from hidden / heads, tied, no window', () => {
    const c = configFromHf(REAL_CONFIGS.qwen3.config);
    expect(c).toMatchObject({ architecture: 'qwen3', hiddenSize: 1024, numHeads: 16, numKvHeads: 8, headDim: 128, ropeTheta: 1e6, tieWordEmbeddings: true, attentionBias: false, contextLength: 40960 });
    expect(c.slidingWindow).toBeUndefined();
    expect(c.family).toEqual({ ...LLAMA_FAMILY, qkNorm: true });
  });

  it('SmolLM3-3B: every 4th layer without RoPE (no_rope_layers: 1 means the layer uses it)', () => {
    const c = configFromHf(REAL_CONFIGS.smollm3.config);
    expect(c).toMatchObject({ architecture: 'smollm3', numLayers: 36, headDim: 128, ropeTheta: 5e6, tieWordEmbeddings: true });
    const layers = modelLayers(c);
    expect(layers.map((l, i) => (l.rope ? -1 : i)).filter((i) => i >= 0)).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35]);
    expect(layers[0].rope).toEqual({ theta: 5e6, rotaryDims: 128 });
    // Without the list, transformers builds the same one from no_rope_layer_interval.
    const { no_rope_layers: _list, ...rest } = REAL_CONFIGS.smollm3.config;
    expect(modelLayers(configFromHf(rest))).toEqual(layers);
  });

  it('Phi-3.5-mini: fused projections, LongRoPE with the attention factor from the context ratio, its window', () => {
    const c = configFromHf(REAL_CONFIGS.phi3.config);
    expect(c).toMatchObject({ architecture: 'phi3', headDim: 96, numKvHeads: 32, contextLength: 131072, slidingWindow: 262144, tieWordEmbeddings: false });
    expect(familyOf(c)).toMatchObject({ fusedQkv: true, fusedGateUp: true, qkNorm: false, activation: 'silu' });
    const s = c.ropeScaling;
    expect(s?.type).toBe('longrope');
    if (s?.type !== 'longrope') return;
    expect(s.originalContextLength).toBe(4096);
    // factor 131072 / 4096 = 32: sqrt(1 + ln 32 / ln 4096).
    expect(s.attentionFactor).toBeCloseTo(Math.sqrt(1 + Math.log(32) / Math.log(4096)), 12);
    expect(s.shortFactor.length).toBe(48);
  });

  it('Phi-4-mini: 3/4 of each head rotates, GQA, tied', () => {
    const c = configFromHf(REAL_CONFIGS.phi4.config);
    expect(c).toMatchObject({ architecture: 'phi3', headDim: 128, numHeads: 24, numKvHeads: 8, tieWordEmbeddings: true });
    expect(modelLayers(c).every((l) => l.rope?.rotaryDims === 96)).toBe(true);
  });

  it('LongRoPE picks its long factors when the loaded context passes the original one (llama.cpp, vLLM)', () => {
    const c = configFromHf({ ...REAL_CONFIGS.phi3.config, rope_scaling: { type: 'longrope', short_factor: Array(48).fill(1), long_factor: Array(48).fill(4) } });
    const rope = modelLayers(c)[0].rope!;
    const short = layerInverseFrequencies(rope, 4096);
    const long = layerInverseFrequencies(rope, 4097);
    short.forEach((f, i) => expect(long[i]).toBeCloseTo(f / 4, 12));
    // θ_i = 10000^(-2i/96).
    expect(short[1]).toBeCloseTo(Math.pow(10000, -2 / 96), 7);
  });
});

describe('refused at load, naming the feature, before any weight is read', () => {
  /** Opens a folder holding only config.json: a refusal must come before anything else is missed. */
  async function openConfig(config: Record<string, unknown>): Promise<unknown> {
    const dir = models.dir('webgpu-llama-refuse-');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return openModel(filesFromPath(dir));
  }
  const qwen3 = REAL_CONFIGS.qwen3.config;

  it('mixture of experts (Qwen3-MoE)', async () => {
    await expect(openConfig({ ...qwen3, architectures: ['Qwen3MoeForCausalLM'], model_type: 'qwen3_moe', num_experts: 128, num_experts_per_tok: 8, moe_intermediate_size: 768 }))
      .rejects.toThrow(/mixture-of-experts/);
  });

  it('linear-attention layers (Qwen3-Next, Qwen3.5)', async () => {
    await expect(openConfig({ ...qwen3, architectures: ['Qwen3NextForCausalLM'], model_type: 'qwen3_next', full_attention_interval: 4 })).rejects.toThrow(/linear-attention.*full_attention_interval/);
    await expect(openConfig({
      architectures: ['Qwen3_5ForConditionalGeneration'], model_type: 'qwen3_5',
      text_config: { ...qwen3, layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'] },
      vision_config: { depth: 24 },
    })).rejects.toThrow(/linear-attention.*text_config\.layer_types/);
  });

  it('mRoPE (Qwen2-VL style rope_scaling, use_mrope)', async () => {
    await expect(openConfig({ ...qwen3, rope_scaling: { type: 'mrope', mrope_section: [16, 24, 24] } })).rejects.toThrow(/mRoPE/);
    await expect(openConfig({ ...qwen3, use_mrope: true })).rejects.toThrow(/mRoPE/);
  });

  it('a vision-only checkpoint', async () => {
    await expect(openConfig({ architectures: ['SiglipVisionModel'], model_type: 'siglip_vision_model', hidden_size: 1152, num_hidden_layers: 27 }))
      .rejects.toThrow(/vision-only/);
  });

  it('GGUF: experts, linear attention, mRoPE, a projector', () => {
    const base = { 'qwen3.embedding_length': 64, 'qwen3.block_count': 2, 'qwen3.feed_forward_length': 128, 'qwen3.attention.head_count': 4 };
    expect(() => configFromGguf({ 'general.architecture': 'qwen3moe', ...base }, 100)).toThrow(/mixture-of-experts/);
    expect(() => configFromGguf({ 'general.architecture': 'qwen3', ...base, 'qwen3.expert_count': 8 }, 100)).toThrow(/mixture-of-experts/);
    expect(() => configFromGguf({ 'general.architecture': 'qwen3next', ...base }, 100)).toThrow(/linear-attention/);
    expect(() => configFromGguf({ 'general.architecture': 'qwen3', ...base, 'qwen3.rope.dimension_sections': [16, 24, 24, 0] }, 100)).toThrow(/mRoPE/);
    expect(() => configFromGguf({ 'general.architecture': 'clip' }, 100)).toThrow(/vision-only/);
    expect(configFromGguf({ 'general.architecture': 'qwen3', ...base }, 100).family?.qkNorm).toBe(true);
  });
});

describe('config values a file may carry', () => {
  const qwen = REAL_CONFIGS.qwen3.config;
  const phi = REAL_CONFIGS.phi3.config;
  const layers = (c: LlamaConfig) => modelLayers(c).map((l) => l.slidingWindow ?? 0);

  it('Qwen layer_types decide which layers slide, as transformers reads it; else max_window_layers', () => {
    const base = { ...qwen, num_hidden_layers: 4, use_sliding_window: true, sliding_window: 8 };
    expect(layers(configFromHf({ ...base, layer_types: ['full_attention', 'sliding_attention', 'full_attention', 'sliding_attention'] }))).toEqual([0, 8, 0, 8]);
    expect(layers(configFromHf({ ...base, max_window_layers: 2 }))).toEqual([0, 0, 8, 8]);
    expect(layers(configFromHf({ ...base, max_window_layers: 0 }))).toEqual([8, 8, 8, 8]);
    expect(layers(configFromHf({ ...base, max_window_layers: 4 }))).toEqual([0, 0, 0, 0]);
    // use_sliding_window false: transformers sets sliding_window to None, whatever layer_types says.
    expect(layers(configFromHf({ ...base, use_sliding_window: false, layer_types: ['sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention'] }))).toEqual([0, 0, 0, 0]);
    expect(() => configFromHf({ ...base, layer_types: ['full_attention'] })).toThrow(/layer_types must be 4/);
    expect(() => configFromHf({ ...base, layer_types: ['full_attention', 'chunked_attention', 'full_attention', 'full_attention'] })).toThrow(/layer_types/);
  });

  it('a LongRoPE attention factor that is not a positive finite number is refused', () => {
    expect(() => configFromHf({ ...phi, original_max_position_embeddings: 1 })).toThrow(/attention factor/);
    expect(() => configFromHf({ ...phi, rope_scaling: { ...(phi.rope_scaling as object), attention_factor: 0 } })).toThrow(/attention factor/);
    expect(() => configFromHf({ ...phi, rope_scaling: { ...(phi.rope_scaling as object), attention_factor: -3 } })).toThrow(/attention factor/);
  });

  it('GGUF: non-finite numbers are refused naming the key; phi3 runs without its window, as llama.cpp', () => {
    const base = { 'phi3.embedding_length': 64, 'phi3.block_count': 2, 'phi3.feed_forward_length': 128, 'phi3.attention.head_count': 4, 'phi3.context_length': 128 };
    expect(() => configFromGguf({ 'general.architecture': 'phi3', ...base, 'phi3.rope.freq_base': NaN }, 100)).toThrow(/phi3\.rope\.freq_base is not a finite number/);
    expect(() => configFromGguf({ 'general.architecture': 'phi3', ...base, 'phi3.attention.layer_norm_rms_epsilon': Infinity }, 100)).toThrow(/layer_norm_rms_epsilon is not a finite number/);
    const windowed = configFromGguf({ 'general.architecture': 'phi3', ...base, 'phi3.attention.sliding_window': 16 }, 100);
    expect(layers(windowed).every((w) => w === 0)).toBe(true);
  });

  it('a sliding window past 2^31 - 1 is refused, naming it', () => {
    expect(() => configFromHf({ ...REAL_CONFIGS.mistral.config, sliding_window: 2 ** 40 })).toThrow(/sliding window must be a positive integer up to/);
  });
});

/** A family's tiny test model: the folder, its config as loaded for `capacity` positions, its weights for the reference. */
async function familyModel(family: Family, capacity: number, overrides?: Record<string, unknown>) {
  const dir = models.dir(`webgpu-llama-fam-${family}-`);
  generateModel({ family, shape: 'tiny', out: dir, seed: 31, dtype: 'f32', overrides });
  const opened = await openModel(filesFromPath(dir));
  opened.config.loadedContextLength = capacity;
  const cpu = cpuLlamaWeights(opened.config, await readFolderTensors(dir));
  return { dir, opened, config: opened.config, cpu };
}

/** Teacher-forced logits of `tokens` on the reference, a prefill of `prefill` then one token at a time. */
function referenceLogits(config: LlamaConfig, cpu: CpuLlamaWeights, tokens: number[], prefill: number, kvDType: 'f16' | 'f32'): Float32Array[] {
  const ref = new CpuLlama(config, cpu, tokens.length, kvDType);
  const out: Float32Array[] = [];
  const all = ref.forward(tokens.slice(0, prefill), 0);
  for (let t = 0; t < prefill; t++) out.push(all.subarray(t * config.vocabSize, (t + 1) * config.vocabSize));
  for (let p = prefill; p < tokens.length; p++) out.push(ref.forward([tokens[p]], p));
  return out;
}

/** What each family's test shows: the decode-layer kernel's features it takes, and the feature that must change the answer. */
const CASES: { family: Family; decodeLayer: DecodeLayerFeatures; feature: string; without: (c: LlamaConfig) => LlamaConfig }[] = [
  { family: 'qwen3', decodeLayer: { qkNorm: true }, feature: 'q/k norms', without: (c) => ({ ...c, family: { ...familyOf(c), qkNorm: false } }) },
  {
    family: 'smollm3', decodeLayer: { layerRope: true }, feature: 'RoPE-less layers',
    without: (c) => ({ ...c, family: { ...familyOf(c), layers: undefined } }),
  },
  { family: 'phi3', decodeLayer: { layerRope: true }, feature: 'the sliding window', without: (c) => ({ ...c, slidingWindow: undefined }) },
  {
    family: 'phi4', decodeLayer: { layerRope: true }, feature: 'partial rotation',
    without: (c) => ({ ...c, family: { ...familyOf(c), layers: modelLayers(c).map((l) => ({ ...l, rope: l.rope && { ...l.rope, rotaryDims: c.headDim, scaling: undefined } })) } }),
  },
];

/**
 * Holds `opened` on the GPU to `want`, the reference's teacher-forced logits of `tokens`, within
 * `tol`: its general pass (a prefill of `prefill` tokens, every position's logits, then single
 * tokens), its reusable decode step with the fused kernels, and its reusable decode step with the
 * decode-layer kernel asked for on every layer (as on a CPU adapter), both after the same prefill.
 */
async function expectEveryPath(opened: OpenedModel, kvDType: 'f16' | 'f32', tokens: number[], prefill: number, want: Float32Array[], tol: number): Promise<void> {
  const config = opened.config;
  const capacity = tokens.length;
  const ctx = await testGpu();
  const staging = ctx.device.createBuffer({ size: config.vocabSize * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  try {
    for (const decodeLayer of [false, true]) {
      const model = await LlamaModel.create(ctx, config, await uploadLlamaWeights(ctx, opened), { tuning: { decodeLayer: () => decodeLayer } });
      const forwardCache = model.createKvCache(capacity, kvDType);
      const stepCache = model.createKvCache(capacity, kvDType);
      try {
        if (!decodeLayer) {
          // forward(): the prefill's every position, then single tokens.
          const all = await model.forward(tokens.slice(0, prefill), 0, forwardCache, { allLogits: true });
          for (let t = 0; t < prefill; t++) expect(maxAbsDiff(all.subarray(t * config.vocabSize, (t + 1) * config.vocabSize), want[t]), `prefill ${t}`).toBeLessThan(tol);
          for (let p = prefill; p < capacity; p++) expect(maxAbsDiff(await model.forward([tokens[p]], p, forwardCache), want[p]), `forward ${p}`).toBeLessThan(tol);
        }
        // The reusable decode step over the same prefill.
        await model.forward(tokens.slice(0, prefill), 0, stepCache, { readBack: false });
        const step = model.createDecodeStep(stepCache);
        if (decodeLayer) {
          // decode_layer.wgsl, taken: it leaves the next position in its state; a dispatch a layer at most, and the embedding and logits.
          expect(step.consecutive, 'the decode-layer kernel').toBeDefined();
          expect(step.dispatchCount).toBeLessThanOrEqual(config.numLayers + 2);
        } else {
          expect(step.consecutive).toBeUndefined();
          // The fused kernels: 5 dispatches a layer (6 with the attention split), the embedding and the logits.
          expect(step.dispatchCount).toBeLessThanOrEqual(2 + 6 * config.numLayers);
        }
        const path = decodeLayer ? 'decode layer' : 'fused step';
        for (let p = prefill; p < capacity; p++) {
          ctx.device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([tokens[p]]));
          const encoder = ctx.device.createCommandEncoder();
          step.encodeStep(encoder, p);
          encoder.copyBufferToBuffer(step.logits, 0, staging, 0, config.vocabSize * 4);
          ctx.device.queue.submit([encoder.finish()]);
          await staging.mapAsync(GPUMapMode.READ);
          const got = new Float32Array(staging.getMappedRange().slice(0));
          staging.unmap();
          expect(maxAbsDiff(got, want[p]), `${path} ${p}`).toBeLessThan(tol);
        }
        step.destroy();
      } finally {
        forwardCache.destroy();
        stepCache.destroy();
        model.destroy();
      }
    }
  } finally {
    staging.destroy();
  }
}

/** Tokens past the window (phi3: 24), past LongRoPE's original context (16), past a NoPE layer's reach; the first 30 a prefill. */
const CAPACITY = 40;
const PREFILL = 30;
const testTokens = (config: LlamaConfig) => Array.from({ length: CAPACITY }, (_, i) => (i * 97 + 13) % Math.min(config.vocabSize, 5000));

describe('GPU paths against the float64 CPU reference, teacher-forced', () => {
  for (const { family, decodeLayer, feature, without } of CASES) {
    for (const kvDType of ['f32', 'f16'] as const) {
      it(`${family}, ${kvDType} KV cache: general pass, fused decode step, decode layer (${Object.keys(decodeLayer).join(', ')})`, async () => {
        const { opened, config, cpu } = await familyModel(family, CAPACITY);
        const shape = llamaShape(config);
        expect(fusedStepRefusal(shape)).toBeUndefined();
        expect(decodeLayerRefusal(shape)).toBeUndefined();
        expect(decodeLayerFeatures(shape)).toEqual(decodeLayer);
        const tokens = testTokens(config);
        const want = referenceLogits(config, cpu, tokens, PREFILL, kvDType);
        const tol = 3e-4 * Math.max(1, ...want.map(maxAbs));
        // The feature changes the answer (so the comparison would catch its absence).
        const other = referenceLogits(without(config), cpu, tokens, PREFILL, kvDType);
        expect(Math.max(...want.map((w, i) => maxAbsDiff(w, other[i]))), feature).toBeGreaterThan(30 * tol);
        await expectEveryPath(opened, kvDType, tokens, PREFILL, want, tol);
      });
    }
  }

  // The same models converted to GGUF (F32: the same weights) with llama.cpp's names, keys and
  // (SmolLM3: permuted q/k rows, adjacent pairs) layout, held to the reference of the Hugging Face
  // folder: an independent check of the GGUF reading (fused attn_qkv / ffn_up split at load,
  // rope_factors_* tensors, attn_factor and the original context from the keys).
  for (const family of ['qwen3', 'smollm3', 'phi3', 'phi4'] as const) {
    it(`${family} GGUF, f16 KV cache: every path against the reference of the Hugging Face folder`, async () => {
      // SmolLM3: llama.cpp's fixed NoPE pattern (every 4th layer), all GGUF can say.
      const { dir, config, cpu } = await familyModel(family, CAPACITY, family === 'smollm3' ? { no_rope_layers: [1, 1, 1, 0] } : undefined);
      const path = join(dir, 'model.gguf');
      await writeGgufFromHf(dir, path, 'f32');
      const opened = await openModel(filesFromPath(path));
      opened.config.loadedContextLength = CAPACITY;
      expect(modelLayers(opened.config).map((l) => l.rope?.rotaryDims ?? 0)).toEqual(modelLayers(config).map((l) => l.rope?.rotaryDims ?? 0));
      // llama.cpp runs a phi3 GGUF without its sliding window, and so does the reader: the
      // reference is the folder's model without it (Phi-3's window of 24 bites in these 40 positions).
      const phi = family === 'phi3' || family === 'phi4';
      if (phi) expect(modelLayers(opened.config).every((l) => l.slidingWindow === undefined)).toBe(true);
      const ggufConfig = phi ? withoutWindows(config) : config;
      const tokens = testTokens(config);
      const want = referenceLogits(ggufConfig, cpu, tokens, PREFILL, 'f16');
      await expectEveryPath(opened, 'f16', tokens, PREFILL, want, 3e-4 * Math.max(1, ...want.map(maxAbs)));
      if (family === 'phi3') {
        const windowed = referenceLogits(config, cpu, tokens, PREFILL, 'f16');
        expect(Math.max(...want.map((row, i) => maxAbsDiff(row, windowed[i]!)))).toBeGreaterThan(1e-2);
      }
    });
  }

  it('phi3: the short and the long factors give other answers (the reference, loaded for 16 and 64 positions)', async () => {
    const { config, cpu } = await familyModel('phi3', 16);
    const tokens = Array.from({ length: 12 }, (_, i) => (i * 37 + 5) % config.vocabSize);
    const short = new CpuLlama(config, cpu, 16, 'f32').forward(tokens, 0);
    const long = new CpuLlama({ ...config, loadedContextLength: 64 }, cpu, 16, 'f32').forward(tokens, 0);
    expect(maxAbsDiff(short, long)).toBeGreaterThan(1e-2 * maxAbs(short));
  });
});

describe('the loader', () => {
  it('sets the loaded context on the config; LongRoPE models load with short or long factors by it', async () => {
    const dir = models.dir('webgpu-llama-fam-phi3-load-');
    generateModel({ family: 'phi3', shape: 'tiny', out: dir, seed: 3, dtype: 'f32' });
    const shortLoad = await models.load(dir, { contextLength: 16, kvCacheDType: 'f32', weightStorage: 'f32' });
    const longLoad = await models.load(dir, { contextLength: 17, kvCacheDType: 'f32', weightStorage: 'f32' });
    expect(shortLoad.model.config.loadedContextLength).toBe(16);
    expect(longLoad.model.config.loadedContextLength).toBe(17);
    const cpu = cpuLlamaWeights(shortLoad.model.config, await readFolderTensors(dir));
    const tokens = Array.from({ length: 10 }, (_, i) => (i * 37 + 5) % 512);
    const outputs: Float32Array[] = [];
    for (const [generator, capacity] of [[shortLoad, 16], [longLoad, 17]] as const) {
      const model = generator.model;
      const cache = model.createKvCache(capacity, 'f32');
      try {
        const gpu = await model.forward(tokens, 0, cache, { allLogits: true });
        expectClose(gpu, new CpuLlama(model.config, cpu, capacity, 'f32').forward(tokens, 0), 3e-4);
        outputs.push(gpu);
      } finally {
        cache.destroy();
      }
    }
    // One more position of context switches the factors: other logits for the same tokens.
    expect(maxAbsDiff(outputs[0], outputs[1])).toBeGreaterThan(1e-2 * maxAbs(outputs[0]));
  });
});

/** The config with no sliding window on any layer. */
function withoutWindows(config: LlamaConfig): LlamaConfig {
  const family = familyOf(config);
  const layers = family.layers?.map(({ slidingWindow: _window, ...layer }) => layer);
  return { ...config, slidingWindow: undefined, family: layers ? { ...family, layers } : family };
}
