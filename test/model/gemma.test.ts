// Gemma 2 and Gemma 3: each rule of their config readers (Hugging Face config.json as transformers
// reads it, GGUF metadata as llama.cpp reads it), and their random-weight test models
// (scripts/model-families.ts: values real checkpoints do not have, sharp q/k) on the GPU against the
// float64 CPU reference: prefill and every decode path, past the sliding window, f32 and f16 KV
// caches, from the Hugging Face folder, from an image-text checkpoint's language model and from
// GGUF (scripts/gguf-from-hf.ts, llama.cpp's names and keys).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { QuantDType } from '../../src/gpu/tensor.ts';
import { memorySource } from '../../src/io/files.ts';
import { readGgufHeader, type GgufMetadata } from '../../src/io/formats/gguf.ts';
import { familyOf, modelLayers, roundToDType, type LlamaConfig } from '../../src/model/config.ts';
import { configFromGguf } from '../../src/model/config-gguf.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { fusedStepRefusal } from '../../src/model/decode-step.ts';
import { decodeLayerFeatures, decodeLayerRefusal } from '../../src/model/decode-layers.ts';
import { llamaShape } from '../../src/model/shape.ts';
import { hfNameFromGguf, languageModelTensorName } from '../../src/model/tensor-names.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import type { KvCache } from '../../src/model/kv-cache.ts';
import { openModel, uploadLlamaWeights } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/index.ts';
import { GEMMA_FAMILIES, GEMMA_REAL_CONFIGS, generateModel } from '../../scripts/model-families.ts';
import { writeGgufFromHf, type GgufOutType } from '../../scripts/gguf-from-hf.ts';
import { f16BitsToF32 } from '../reference/cpu-ops.ts';
import { dequantize } from '../reference/quant.ts';
import { maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { cpuLlamaWeights, readFolderTensors, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { buildSafetensors } from '../helpers/model-files.ts';

const models = tempModels();

/** Each layer as "theta/linear factor/window" (window 'full' for global layers). */
const layerSummary = (c: LlamaConfig) =>
  modelLayers(c).map((l) => `${l.rope?.theta}/${l.rope?.scaling?.type === 'linear' ? l.rope.scaling.factor : '-'}/${l.slidingWindow ?? 'full'}`);

describe('Gemma config.json, read as transformers reads it', () => {
  const gemma3 = GEMMA_REAL_CONFIGS.gemma3.config;
  const gemma2 = GEMMA_REAL_CONFIGS.gemma2.config;

  it('gemma-3-1b-it: x·(1 + w) norms, four norms and q/k norms, GeGLU, query_pre_attn_scalar, the bf16 embedding scale, 5 local layers : 1 global', () => {
    const c = configFromHf({ ...gemma3, transformers_version: '4.50.0.dev0' });
    expect(c).toMatchObject({
      architecture: 'gemma3', vocabSize: 262144, hiddenSize: 1152, intermediateSize: 6912, numLayers: 26, numHeads: 4, numKvHeads: 1,
      headDim: 256, contextLength: 32768, rmsNormEps: 1e-6, ropeTheta: 1e6, ropePairing: 'halves', tieWordEmbeddings: true, attentionBias: false,
    });
    expect(c.slidingWindow).toBeUndefined();
    const f = familyOf(c);
    expect({ ...f, layers: undefined }).toEqual({
      normWeightOffset: 1, postAttentionNorm: true, postFeedForwardNorm: true, qkNorm: true, activation: 'gelu_tanh',
      attentionScale: 1 / 16, embeddingScale: 34, fusedQkv: false, fusedGateUp: false, layers: undefined,
    });
    // sqrt(1152) = 33.94 is 34 in bf16 (as transformers' embed_scale.to(bfloat16)).
    expect(roundToDType(Math.sqrt(1152), 'bf16')).toBe(34);
    expect(layerSummary(c)).toEqual(Array.from({ length: 26 }, (_, i) => ((i + 1) % 6 === 0 ? '1000000/-/full' : '10000/-/512')));
  });

  it('gemma-2-2b-it: soft-caps 50 and 30, the window on even layers, one RoPE, the f32 embedding scale', () => {
    const c = configFromHf({ ...gemma2, transformers_version: '4.42.4' });
    expect(c).toMatchObject({ architecture: 'gemma2', vocabSize: 256000, hiddenSize: 2304, numLayers: 26, numHeads: 8, numKvHeads: 4, headDim: 256, ropeTheta: 10000, tieWordEmbeddings: true });
    expect({ ...familyOf(c), layers: undefined }).toEqual({
      normWeightOffset: 1, postAttentionNorm: true, postFeedForwardNorm: true, qkNorm: false, activation: 'gelu_tanh',
      attentionScale: 1 / 16, attentionSoftcap: 50, finalLogitSoftcap: 30, embeddingScale: 48, fusedQkv: false, fusedGateUp: false, layers: undefined,
    });
    expect(layerSummary(c)).toEqual(Array.from({ length: 26 }, (_, i) => (i % 2 === 0 ? '10000/-/4096' : '10000/-/full')));
    // Soft-caps set to null are off; hidden_act is not what Gemma's MLP reads.
    const uncapped = configFromHf({ ...gemma2, attn_logit_softcapping: null, final_logit_softcapping: null, hidden_act: 'silu' });
    expect(familyOf(uncapped)).toMatchObject({ activation: 'gelu_tanh' });
    expect(familyOf(uncapped).attentionSoftcap).toBeUndefined();
    expect(familyOf(uncapped).finalLogitSoftcap).toBeUndefined();
    // Left out, they take Gemma2Config's defaults.
    const { attn_logit_softcapping: _a, final_logit_softcapping: _f, ...bare } = gemma2;
    expect(familyOf(configFromHf(bare))).toMatchObject({ attentionSoftcap: 50, finalLogitSoftcap: 30 });
  });

  it('the config decides: query_pre_attn_scalar, the window, its pattern, the local base, the scaling, soft-caps, the dtype', () => {
    const c = configFromHf({
      ...gemma3, num_hidden_layers: 7, query_pre_attn_scalar: 24, sliding_window: 5, sliding_window_pattern: 3, rope_local_base_freq: 77,
      rope_scaling: { rope_type: 'linear', factor: 8 }, final_logit_softcapping: 7, attn_logit_softcapping: 9, torch_dtype: 'float16',
    });
    expect(familyOf(c)).toMatchObject({ attentionScale: 1 / Math.sqrt(24), attentionSoftcap: 9, finalLogitSoftcap: 7, embeddingScale: roundToDType(Math.sqrt(1152), 'f16') });
    expect(roundToDType(Math.sqrt(1152), 'f16')).not.toBe(34);
    expect(layerSummary(c)).toEqual(['77/-/5', '77/-/5', '1000000/8/full', '77/-/5', '77/-/5', '1000000/8/full', '77/-/5']);
    expect(c.ropeScaling).toEqual({ type: 'linear', factor: 8 });
    // layer_types wins over the pattern; Gemma 2 takes them too.
    const types = ['full_attention', 'sliding_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'full_attention'];
    expect(layerSummary(configFromHf({ ...gemma3, num_hidden_layers: 7, sliding_window_pattern: 3, layer_types: types })).map((s) => s.endsWith('full')))
      .toEqual(types.map((t) => t === 'full_attention'));
    expect(layerSummary(configFromHf({ ...gemma2, num_hidden_layers: 3, layer_types: ['full_attention', 'full_attention', 'sliding_attention'] })))
      .toEqual(['10000/-/full', '10000/-/full', '10000/-/4096']);
    // No pattern: 6. A window of null: the local layers attend to everything, on their own base still.
    const { sliding_window_pattern: _p, ...noPattern } = gemma3;
    expect(layerSummary(configFromHf({ ...noPattern, num_hidden_layers: 12 })).filter((s) => s.endsWith('full')).length).toBe(2);
    expect(layerSummary(configFromHf({ ...gemma3, num_hidden_layers: 3, sliding_window: null, sliding_window_pattern: 2 }))).toEqual(['10000/-/full', '1000000/-/full', '10000/-/full']);
    // No dtype in config.json: f32 here (openModel rounds to the embedding tensor's dtype then).
    const { torch_dtype: _d, ...noDtype } = gemma3;
    expect(familyOf(configFromHf(noDtype)).embeddingScale).toBe(Math.fround(Math.sqrt(1152)));
    expect(familyOf(configFromHf({ ...noDtype, dtype: 'bfloat16' })).embeddingScale).toBe(34);
  });

  it('transformers 5: rope_parameters per layer type', () => {
    const { rope_theta: _t, rope_local_base_freq: _l, rope_scaling: _s, ...rest } = gemma3;
    const c = configFromHf({
      ...rest, num_hidden_layers: 6, sliding_window_pattern: 3,
      rope_parameters: { full_attention: { rope_type: 'linear', factor: 4, rope_theta: 123456 }, sliding_attention: { rope_type: 'default', rope_theta: 55 } },
    });
    expect(layerSummary(c)).toEqual(['55/-/512', '55/-/512', '123456/4/full', '55/-/512', '55/-/512', '123456/4/full']);
    expect(c.ropeTheta).toBe(123456);
    // A per-type entry without rope_theta takes the legacy keys' defaults.
    const d = configFromHf({ ...rest, num_hidden_layers: 3, sliding_window_pattern: 3, rope_parameters: { full_attention: { rope_type: 'default' }, sliding_attention: { rope_type: 'default' } } });
    expect(layerSummary(d)).toEqual(['10000/-/512', '10000/-/512', '1000000/-/full']);
    expect(() => configFromHf({ ...rest, rope_parameters: { full_attention: { rope_type: 'yarn', factor: 4 } } })).toThrow(/yarn/);
  });

  it('Gemma3ForConditionalGeneration: the language model from text_config, with Gemma3TextConfig defaults for what it leaves out', () => {
    // gemma-3-4b-it's config.json (vision_config shortened).
    const c = configFromHf({
      architectures: ['Gemma3ForConditionalGeneration'], boi_token_index: 255999, eoi_token_index: 256000, eos_token_id: [1, 106],
      image_token_index: 262144, initializer_range: 0.02, mm_tokens_per_image: 256, model_type: 'gemma3',
      text_config: { hidden_size: 2560, intermediate_size: 10240, model_type: 'gemma3_text', num_hidden_layers: 34, rope_scaling: { factor: 8.0, rope_type: 'linear' }, sliding_window: 1024 },
      torch_dtype: 'bfloat16', transformers_version: '4.50.0.dev0',
      vision_config: { hidden_size: 1152, image_size: 896, model_type: 'siglip_vision_model', num_hidden_layers: 27, patch_size: 14 },
    });
    expect(c).toMatchObject({ architecture: 'gemma3', vocabSize: 262208, hiddenSize: 2560, numHeads: 8, numKvHeads: 4, headDim: 256, contextLength: 131072, ropeTheta: 1e6, tieWordEmbeddings: true });
    expect(familyOf(c)).toMatchObject({ attentionScale: 1 / 16, embeddingScale: roundToDType(Math.sqrt(2560), 'bf16'), qkNorm: true });
    expect(layerSummary(c).slice(0, 6)).toEqual(['10000/-/1024', '10000/-/1024', '10000/-/1024', '10000/-/1024', '10000/-/1024', '1000000/8/full']);
  });

  it('refusals name the feature', () => {
    expect(() => configFromHf({ ...gemma3, architectures: ['Gemma3ForCausalLM'], use_bidirectional_attention: true })).toThrow(/bidirectional attention/);
    expect(() => configFromHf({ architectures: ['Gemma3ForConditionalGeneration'], model_type: 'gemma3', vision_config: { hidden_size: 1152 } })).toThrow(/vision-only/);
    expect(() => configFromHf({ ...gemma3, hidden_activation: 'relu' })).toThrow(/hidden_activation/);
    expect(() => configFromHf({ ...gemma3, num_hidden_layers: 2, layer_types: ['sliding_attention', 'linear_attention'] })).toThrow(/linear-attention/);
    expect(() => configFromHf({ ...gemma3, num_hidden_layers: 2, layer_types: ['sliding_attention'] })).toThrow(/layer_types/);
    expect(() => configFromHf({ ...gemma3, sliding_window: 0 })).toThrow(/sliding_window/);
    expect(() => configFromHf({ ...gemma2, attn_logit_softcapping: -1 })).toThrow(/attn_logit_softcapping/);
    expect(() => configFromHf({ architectures: ['Gemma3TextModel'], model_type: 'gemma3_text' })).toThrow(/Unsupported model architecture Gemma3TextModel/);
    // A hostile layer count is refused before a description that long is built.
    expect(() => configFromHf({ ...gemma3, num_hidden_layers: 2 ** 40 })).toThrow(/num_hidden_layers = 1099511627776/);
  });

  it('without a dtype in config.json, the embedding scale is rounded to the embedding tensor\'s', async () => {
    for (const dtype of ['bf16', 'f32'] as const) {
      const dir = models.dir('webgpu-llama-gemma2-dtype-');
      const config = generateModel({ family: 'gemma2', shape: 'tiny', out: dir, seed: 4, dtype });
      const { torch_dtype: _d, ...rest } = config;
      writeFileSync(join(dir, 'config.json'), JSON.stringify(rest));
      const opened = await openModel(filesFromPath(dir));
      expect(familyOf(opened.config).embeddingScale, dtype).toBe(roundToDType(Math.sqrt(32), dtype));
    }
    expect(roundToDType(Math.sqrt(32), 'bf16')).toBe(5.65625);
  });

  it('an image-text checkpoint\'s language-model tensors take their causal-LM names; the rest are left out', () => {
    expect(languageModelTensorName('language_model.model.layers.0.self_attn.q_norm.weight')).toBe('model.layers.0.self_attn.q_norm.weight');
    expect(languageModelTensorName('model.language_model.embed_tokens.weight')).toBe('model.embed_tokens.weight');
    expect(languageModelTensorName('language_model.lm_head.weight')).toBe('lm_head.weight');
    expect(languageModelTensorName('lm_head.weight')).toBe('lm_head.weight');
    expect(languageModelTensorName('vision_tower.vision_model.embeddings.patch_embedding.bias')).toBeNull();
    expect(languageModelTensorName('model.vision_tower.vision_model.post_layernorm.weight')).toBeNull();
    expect(languageModelTensorName('multi_modal_projector.mm_input_projection_weight')).toBeNull();
  });
});

describe('Gemma GGUF metadata, read as llama.cpp reads it', () => {
  const base = (arch: string, layers: number, extra: Record<string, unknown> = {}): GgufMetadata => ({
    'general.architecture': arch, [`${arch}.embedding_length`]: 1152, [`${arch}.block_count`]: layers, [`${arch}.feed_forward_length`]: 6912,
    [`${arch}.attention.head_count`]: 4, [`${arch}.attention.head_count_kv`]: 1, [`${arch}.attention.key_length`]: 256, [`${arch}.attention.value_length`]: 256,
    [`${arch}.context_length`]: 32768, [`${arch}.attention.layer_norm_rms_epsilon`]: 1e-6, [`${arch}.rope.freq_base`]: 1e6, ...extra,
  }) as GgufMetadata;
  const names = ['token_embd.weight'];

  it('gemma3: norms already x·(1 + w), sqrtf(n_embd), 1/sqrt(key_length), the window pattern (default 6), rope.freq_base_swa (default 10000)', () => {
    const c = configFromGguf(base('gemma3', 12, { 'gemma3.attention.sliding_window': 512 }), 262144, names);
    expect(c).toMatchObject({ architecture: 'gemma3', ropePairing: 'halves', tieWordEmbeddings: true });
    expect(c.slidingWindow).toBeUndefined();
    expect({ ...familyOf(c), layers: undefined }).toEqual({
      normWeightOffset: 0, postAttentionNorm: true, postFeedForwardNorm: true, qkNorm: true, activation: 'gelu_tanh',
      attentionScale: Math.fround(1 / 16), embeddingScale: Math.fround(Math.sqrt(1152)), fusedQkv: false, fusedGateUp: false, layers: undefined,
    });
    expect(layerSummary(c)).toEqual(Array.from({ length: 12 }, (_, i) => ((i + 1) % 6 === 0 ? '1000000/-/full' : '10000/-/512')));
    // The file's pattern and local base; linear scaling on the global layers only.
    const d = configFromGguf(base('gemma3', 6, {
      'gemma3.attention.sliding_window': 5, 'gemma3.attention.sliding_window_pattern': 3, 'gemma3.rope.freq_base_swa': 77,
      'gemma3.rope.scaling.type': 'linear', 'gemma3.rope.scaling.factor': 8, 'gemma3.final_logit_softcapping': 4,
    }), 262144, names);
    expect(layerSummary(d)).toEqual(['77/-/5', '77/-/5', '1000000/8/full', '77/-/5', '77/-/5', '1000000/8/full']);
    expect(familyOf(d).finalLogitSoftcap).toBe(4);
    // One flag per layer.
    const e = configFromGguf(base('gemma3', 3, { 'gemma3.attention.sliding_window': 5, 'gemma3.attention.sliding_window_pattern': [false, true, true] }), 262144, names);
    expect(layerSummary(e)).toEqual(['1000000/-/full', '10000/-/5', '10000/-/5']);
    // No window key (or 0): every layer global.
    expect(layerSummary(configFromGguf(base('gemma3', 3), 262144, names))).toEqual(['1000000/-/full', '1000000/-/full', '1000000/-/full']);
    expect(layerSummary(configFromGguf(base('gemma3', 3, { 'gemma3.attention.sliding_window': 0 }), 262144, names)).every((s) => s.endsWith('full'))).toBe(true);
    // The 27B rule llama.cpp applies by layer count: 1/sqrt(n_embd / n_head).
    expect(familyOf(configFromGguf(base('gemma3', 62, { 'gemma3.attention.sliding_window': 1024 }), 262144, names)).attentionScale).toBe(Math.fround(1 / Math.sqrt(288)));
  });

  it('gemma2: soft-caps (defaults 50 and 30), the window (default 4096) on even layers, one RoPE', () => {
    const c = configFromGguf(base('gemma2', 4, { 'gemma2.rope.freq_base': 10000 }), 256000, names);
    expect({ ...familyOf(c), layers: undefined }).toMatchObject({ normWeightOffset: 0, qkNorm: false, attentionSoftcap: 50, finalLogitSoftcap: 30, attentionScale: Math.fround(1 / 16) });
    expect(layerSummary(c)).toEqual(['10000/-/4096', '10000/-/full', '10000/-/4096', '10000/-/full']);
    const d = configFromGguf(base('gemma2', 2, { 'gemma2.attention.sliding_window': 6, 'gemma2.attn_logit_softcapping': 2.5, 'gemma2.final_logit_softcapping': 3 }), 256000, names);
    expect(familyOf(d)).toMatchObject({ attentionSoftcap: 2.5, finalLogitSoftcap: 3 });
    expect(layerSummary(d)).toEqual(['1000000/-/6', '1000000/-/full']);
    expect(familyOf(configFromGguf(base('gemma2', 46), 256000, names)).attentionScale).toBe(Math.fround(1 / Math.sqrt(288)));
    expect(() => configFromGguf(base('gemma2', 2 ** 40), 256000, names)).toThrow(/block_count = 1099511627776/);
  });
});

/** Logits of the reusable decode step at each position after `prompt` (prefilled by forward()), for the tokens t → (31 t + 7) mod vocab. */
async function decodeStepLogits(model: LlamaModel, cache: KvCache, prompt: number[], steps: number, options: { fused?: boolean } = {}): Promise<{ tokens: number[]; logits: Float32Array[]; dispatches: number; layered: boolean }> {
  const device = model.ctx.device;
  const vocab = model.config.vocabSize;
  await model.forward(prompt, 0, cache);
  const step = model.createDecodeStep(cache, options);
  const staging = device.createBuffer({ size: vocab * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const tokens: number[] = [];
  const logits: Float32Array[] = [];
  try {
    let token = prompt[prompt.length - 1];
    for (let s = 0; s < steps; s++) {
      token = (token * 31 + 7) % vocab;
      tokens.push(token);
      device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([token]));
      const encoder = device.createCommandEncoder();
      step.encodeStep(encoder, prompt.length + s);
      encoder.copyBufferToBuffer(step.logits, 0, staging, 0, vocab * 4);
      device.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      logits.push(new Float32Array(staging.getMappedRange().slice(0)));
      staging.unmap();
    }
    return { tokens, logits, dispatches: step.dispatchCount, layered: step.consecutive !== undefined };
  } finally {
    staging.destroy();
    step.destroy();
  }
}

/** The CPU reference's logits of `prompt` then of each decode token, from a fresh cache. */
function referenceLogits(config: LlamaConfig, weights: CpuLlamaWeights, kvDType: 'f16' | 'f32', prompt: number[], tokens: number[]): Float32Array[] {
  const cpu = new CpuLlama(config, weights, 64, kvDType);
  const out = [cpu.forward(prompt, 0)];
  tokens.forEach((t, i) => out.push(cpu.forward([t], prompt.length + i)));
  return out;
}

// Past the window (5 for gemma3, 6 for gemma2) by the prompt alone, and further by the decode steps.
const PROMPT = Array.from({ length: 11 }, (_, i) => (i * 53 + 11) % 500);
const STEPS = 4;
const TEXT = 'Once upon a time, there was a tiny model. <start_of_turn>user\nHi!';
/** Relative to the largest |logit|: f32 sums in another order; far below what any rule gets wrong. */
const TOL = 2e-4;

describe('Gemma test models on the GPU vs the float64 CPU reference (Hugging Face folders)', () => {
  for (const family of GEMMA_FAMILIES) {
    it(`${family}: prefill and every decode path, past the window, f32 and f16 KV caches; each rule changes the answer`, async () => {
      const dir = models.dir(`webgpu-llama-${family}-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 7 });
      const generator = await models.load(dir, { weightStorage: 'f32' });
      const model = generator.model;
      const config = model.config;
      const weights = cpuLlamaWeights(config, await readFolderTensors(dir));
      const f = familyOf(config);
      expect(f.embeddingScale).toBe(roundToDType(Math.sqrt(config.hiddenSize), 'bf16'));
      expect(f.embeddingScale).not.toBe(Math.fround(Math.sqrt(config.hiddenSize)));

      // Every decode path runs Gemma: the fused step, forward()'s general pass, and the
      // decode-layer kernel (asked for, as on a CPU adapter) with every feature of the family, over
      // an arena of f32 matrices (with Gemma 2's small vocabulary the embedding and logits in its
      // dispatches too; Gemma 3's real one keeps them apart) and over the file's bf16 matrices (a
      // dispatch a layer, the embedding and logits on their own).
      const shape = llamaShape(config);
      expect(decodeLayerRefusal(shape)).toBeUndefined();
      expect(decodeLayerFeatures(shape)).toEqual({
        layerRope: family === 'gemma3' ? true : undefined, layerWindow: true, postNorms: true, geluTanh: true, embeddingScale: true,
        ...(family === 'gemma3' ? { qkNorm: true } : { attentionSoftcap: true, logitSoftcap: true }),
      });
      const fusedRuns = fusedStepRefusal(shape) === undefined;
      expect(fusedRuns).toBe(true);
      const opened = await openModel(filesFromPath(dir));
      const withTuning = async (decodeLayer: boolean, storage: 'f32' | 'source') =>
        LlamaModel.create(model.ctx, config, await uploadLlamaWeights(model.ctx, opened, undefined, { storage }), { tuning: { decodeLayer: () => decodeLayer } });
      const fusedModel = await withTuning(false, 'f32');
      const layerModels = [await withTuning(true, 'f32'), await withTuning(true, 'source')];

      for (const kvDType of ['f32', 'f16'] as const) {
        const cache = model.createKvCache(64, kvDType);
        try {
          const prefill = await model.forward(PROMPT, 0, cache, { allLogits: true });
          const expected = referenceLogits(config, weights, kvDType, PROMPT, []);
          const bound = TOL * Math.max(1, maxAbs(expected[0]));
          expect(maxAbsDiff(prefill, expected[0]), `${kvDType} prefill`).toBeLessThan(bound);
          // A prompt prefilled in two passes (the second past the window) ends on the same logits.
          const split = model.createKvCache(64, kvDType);
          try {
            await model.forward(PROMPT.slice(0, 4), 0, split);
            const last = await model.forward(PROMPT.slice(4), 4, split);
            expect(maxAbsDiff(last, prefill.subarray((PROMPT.length - 1) * config.vocabSize)), `${kvDType} split prefill`).toBeLessThan(bound);
          } finally {
            split.destroy();
          }
          const dispatches: number[] = [];
          for (const fused of [true, false]) {
            const stepCache = fusedModel.createKvCache(64, kvDType);
            try {
              const got = await decodeStepLogits(fusedModel, stepCache, PROMPT, STEPS, { fused });
              const want = referenceLogits(config, weights, kvDType, PROMPT, got.tokens);
              got.logits.forEach((l, i) => expect(maxAbsDiff(l, want[i + 1]), `${kvDType} fused ${fused} step ${i}`).toBeLessThan(bound));
              dispatches.push(got.dispatches);
              expect(got.layered).toBe(false);
            } finally {
              stepCache.destroy();
            }
          }
          // The fused step (fewer dispatches) where it runs the description, else the general pass.
          if (fusedRuns) expect(dispatches[0]).toBeLessThan(dispatches[1]);
          else expect(dispatches[0]).toBe(dispatches[1]);
          // Each also over caches whose window layers keep rings of window + 1 rows (passes of 2
          // tokens), which the prompt and steps wrap around (the ring feature).
          for (const [i, layerModel, passTokens] of [0, 1].flatMap((i) => [undefined, 2].map((p) => [i, layerModels[i], p] as const))) {
            const stepCache = layerModel.createKvCache(64, kvDType, passTokens);
            try {
              expect(stepCache.ringed).toBe(passTokens !== undefined);
              const got = await decodeStepLogits(layerModel, stepCache, PROMPT, STEPS);
              const want = referenceLogits(config, weights, kvDType, PROMPT, got.tokens);
              const what = `${kvDType} decode layer (${i === 0 ? 'f32 arena' : 'bf16'}${passTokens ? ', rings' : ''})`;
              got.logits.forEach((l, s) => expect(maxAbsDiff(l, want[s + 1]), `${what} step ${s}`).toBeLessThan(bound));
              expect(got.layered, what).toBe(true);
              // At most a dispatch a layer, the embedding and the logits (+ the soft-cap).
              expect(got.dispatches, what).toBeLessThanOrEqual(config.numLayers + 3);
              if (i === 0) expect(got.dispatches, what).toBeLessThan(config.numLayers);
            } finally {
              stepCache.destroy();
            }
          }
        } finally {
          cache.destroy();
        }
      }
      fusedModel.destroy();
      for (const m of layerModels) m.destroy();

      // Each rule matters on these weights: the reference without it gives other logits.
      const all = referenceLogits(config, weights, 'f32', PROMPT, [])[0];
      const differs = (change: Partial<typeof f>, layers?: LlamaConfig['family']) => {
        const other = { ...config, family: layers ?? { ...f, ...change } };
        return maxAbsDiff(referenceLogits(other, weights, 'f32', PROMPT, [])[0], all);
      };
      const min = 1e-2 * Math.max(1, maxAbs(all));
      expect(differs({ attentionScale: undefined }), 'attention scale').toBeGreaterThan(min);
      expect(differs({ embeddingScale: Math.fround(Math.sqrt(config.hiddenSize)) }), 'embedding scale rounding').toBeGreaterThan(1e-5);
      expect(differs({}, { ...f, layers: f.layers!.map((l) => ({ rope: l.rope })) }), 'window').toBeGreaterThan(min);
      if (family === 'gemma3') {
        const global = f.layers!.find((l) => l.slidingWindow === undefined)!.rope;
        expect(differs({}, { ...f, layers: f.layers!.map((l) => ({ ...l, rope: global })) }), 'local RoPE base').toBeGreaterThan(min);
        expect(differs({}, { ...f, layers: f.layers!.map((l) => (l.slidingWindow ? l : { ...l, rope: { ...l.rope!, scaling: undefined } })) }), 'global scaling').toBeGreaterThan(min);
      } else {
        expect(differs({ attentionSoftcap: undefined }), 'attention soft-cap').toBeGreaterThan(min);
        expect(differs({ finalLogitSoftcap: undefined }), 'final soft-cap').toBeGreaterThan(min);
        expect(maxAbs(all)).toBeLessThan(f.finalLogitSoftcap!);
      }
    });
  }
});


/** The tensors of a safetensors file with their bytes. */
function safetensorsTensors(path: string): { name: string; dtype: string; shape: number[]; data: Uint8Array }[] {
  const file = new Uint8Array(readFileSync(path));
  const n = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  return Object.entries(header)
    .filter(([k]) => k !== '__metadata__')
    .map(([name, t]) => ({ name, dtype: t.dtype, shape: t.shape, data: file.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]) }));
}

describe('a Gemma3ForConditionalGeneration checkpoint: its language model, the vision tower left out and said so', () => {
  it('loads as the causal model of the same weights, with a notice', async () => {
    const causal = models.dir('webgpu-llama-gemma3-causal-');
    const config = generateModel({ family: 'gemma3', shape: 'tiny', out: causal, seed: 8 });
    const both = models.dir('webgpu-llama-gemma3-mm-');
    for (const file of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) writeFileSync(join(both, file), readFileSync(join(causal, file)));
    const { architectures: _a, torch_dtype: dtype, ...text } = config;
    writeFileSync(join(both, 'config.json'), JSON.stringify({
      architectures: ['Gemma3ForConditionalGeneration'], model_type: 'gemma3', torch_dtype: dtype, image_token_index: 262144,
      text_config: { ...text, model_type: 'gemma3_text' },
      vision_config: { hidden_size: 8, model_type: 'siglip_vision_model', num_hidden_layers: 1, patch_size: 14 },
    }));
    // The pre-4.52 layout (language_model.model.*) for the language model, the vision tower with a bias.
    const tensors = safetensorsTensors(join(causal, 'model.safetensors')).map((t) => ({ ...t, name: `language_model.${t.name}` }));
    tensors.push(
      { name: 'vision_tower.vision_model.embeddings.patch_embedding.bias', dtype: 'F32', shape: [2], data: new Uint8Array(8) },
      { name: 'multi_modal_projector.mm_input_projection_weight', dtype: 'F32', shape: [2, 2], data: new Uint8Array(16) },
    );
    writeFileSync(join(both, 'model.safetensors'), buildSafetensors(tensors));

    const opened = await openModel(filesFromPath(both));
    expect(opened.notices).toHaveLength(1);
    expect(opened.notices[0]).toMatch(/image-text checkpoint \(Gemma3ForConditionalGeneration\).*vision tower and projector \(2 tensors\) are not.*text only/);
    expect(opened.tensors.has('model.layers.0.self_attn.q_norm.weight')).toBe(true);
    const warnings: string[] = [];
    const a = await models.load(causal, { weightStorage: 'f32' });
    const b = await models.load(both, { weightStorage: 'f32', onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual(opened.notices);
    expect(b.info.notices).toEqual(opened.notices);
    expect(a.info.notices).toBeUndefined();
    expect(b.model.config).toEqual(a.model.config);
    const ca = a.model.createKvCache(16, 'f32');
    const cb = b.model.createKvCache(16, 'f32');
    try {
      expect(Array.from(await b.model.forward(PROMPT, 0, cb))).toEqual(Array.from(await a.model.forward(PROMPT, 0, ca)));
    } finally {
      ca.destroy();
      cb.destroy();
    }
  });
});

/** The weights of a GGUF as CPU arrays (HF names as the config's family maps them), dequantized on the CPU, and the storage types found. */
async function cpuWeightsOfGguf(path: string, config: LlamaConfig): Promise<{ weights: CpuLlamaWeights; types: Set<string> }> {
  const bytes = new Uint8Array(readFileSync(path));
  const header = await readGgufHeader(memorySource('model.gguf', bytes));
  const byName = new Map<string, Float32Array>();
  const types = new Set<string>();
  for (const t of header.tensors) {
    const hf = hfNameFromGguf(t.name, familyOf(config));
    if (!hf) continue;
    types.add(t.type);
    const n = t.ne.reduce((x, y) => x * y, 1);
    const data = bytes.subarray(t.offset, t.offset + t.byteLength);
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    let values: Float32Array;
    if (t.type === 'F32') values = Float32Array.from({ length: n }, (_, i) => view.getFloat32(i * 4, true));
    else if (t.type === 'F16') values = Float32Array.from({ length: n }, (_, i) => f16BitsToF32(view.getUint16(i * 2, true)));
    else values = dequantize(t.type.toLowerCase() as QuantDType, data, n);
    byName.set(hf, values);
  }
  return { weights: cpuLlamaWeights(config, byName), types };
}

describe('Gemma GGUFs (llama.cpp names and keys, norms +1) vs the CPU reference', () => {
  for (const family of GEMMA_FAMILIES) {
    it(`${family}: F32 / F16 / Q8_0 GGUFs, prefill past the window and decode steps, read as llama.cpp reads them; the tokenizer as the folder's`, async () => {
      const dir = models.dir(`webgpu-llama-gguf-${family}-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 9 });
      const { config: hfConfig, tokenizer: hfTokenizer } = await openModel(filesFromPath(dir));
      const hfWeights = cpuLlamaWeights(hfConfig, await readFolderTensors(dir));
      // Gemma 3's 262144-row embedding makes each file slow to write and read: F32 and Q8_0 only.
      const types: GgufOutType[] = family === 'gemma3' ? ['f32', 'q8_0'] : ['f32', 'f16', 'q8_0'];
      for (const type of types) {
        const path = join(dir, `model-${type}.gguf`);
        await writeGgufFromHf(dir, path, type);
        const generator = await models.load(path);
        const model = generator.model;
        const c = model.config;
        const f = familyOf(c);
        // The GGUF's tokenizer (tokenizer.ggml.*) encodes as the folder's tokenizer.json.
        expect(generator.tokenizer.encode(TEXT), 'tokenizer').toEqual(hfTokenizer.encode(TEXT));
        // What the GGUF says, as llama.cpp reads it: the same layers, windows, bases and soft-caps;
        // norms already +1; sqrtf(n_embd); 1/sqrt(key_length) whatever query_pre_attn_scalar was.
        expect(layerSummary(c)).toEqual(layerSummary(hfConfig));
        expect(f).toMatchObject({ normWeightOffset: 0, embeddingScale: Math.fround(Math.sqrt(c.hiddenSize)), attentionScale: Math.fround(1 / Math.sqrt(c.headDim)) });
        expect(f.attentionScale).not.toBe(familyOf(hfConfig).attentionScale);
        expect(f.finalLogitSoftcap).toBe(familyOf(hfConfig).finalLogitSoftcap);
        expect(f.attentionSoftcap).toBe(familyOf(hfConfig).attentionSoftcap);
        // The reference: the GGUF's reading on the folder's weights (f32, f16: the same values; the
        // offset is the folder's), or on the file's own weights dequantized (Q8_0).
        let reference: CpuLlama;
        if (type === 'q8_0') {
          const { weights, types } = await cpuWeightsOfGguf(path, c);
          expect(types.has('Q8_0')).toBe(true);
          reference = new CpuLlama(c, weights, 64, 'f32');
        } else {
          reference = new CpuLlama({ ...c, family: { ...f, normWeightOffset: 1 } }, hfWeights, 64, 'f32');
        }
        const cache = model.createKvCache(64, 'f32');
        try {
          const gpu = await model.forward(PROMPT, 0, cache, { allLogits: true });
          const cpu = reference.forward(PROMPT, 0);
          const bound = TOL * Math.max(1, maxAbs(cpu));
          expect(maxAbsDiff(gpu, cpu), `${type} prefill`).toBeLessThan(bound);
          let token = PROMPT[PROMPT.length - 1];
          for (let s = 0; s < 2; s++) {
            token = (token * 31 + 7) % c.vocabSize;
            expect(maxAbsDiff(await model.forward([token], PROMPT.length + s, cache), reference.forward([token], PROMPT.length + s)), `${type} decode ${s}`).toBeLessThan(bound);
          }
        } finally {
          cache.destroy();
        }
      }
    });
  }
});

describe('quantized Gemma GGUFs (every block type the writer makes) vs the CPU reference on their dequantized weights', () => {
  // Gemma 2 at rows of 256 (whole K-quant super-blocks; its vocabulary stays 512).
  it('gemma2 at dims of 256: Q4_0, Q4_K_M (Q4_K and Q6_K)', async () => {
    const dir = models.dir('webgpu-llama-gguf-q-gemma2-');
    generateModel({ family: 'gemma2', shape: 'tiny', out: dir, seed: 10, overrides: { hidden_size: 256, intermediate_size: 256, head_dim: 64, num_hidden_layers: 2 } });
    const expected: Record<string, string[]> = { q4_0: ['Q4_0', 'F32'], q4_k_m: ['Q4_K', 'Q6_K', 'F32'] };
    for (const type of Object.keys(expected) as GgufOutType[]) {
      const path = join(dir, `model-${type}.gguf`);
      await writeGgufFromHf(dir, path, type);
      const model = (await models.load(path)).model;
      const c = model.config;
      const { weights, types } = await cpuWeightsOfGguf(path, c);
      expect([...types].sort(), type).toEqual([...expected[type]].sort());
      const reference = new CpuLlama(c, weights, 64, 'f32');
      const cache = model.createKvCache(64, 'f32');
      try {
        const cpu = reference.forward(PROMPT, 0);
        expect(maxAbsDiff(await model.forward(PROMPT, 0, cache, { allLogits: true }), cpu), type).toBeLessThan(TOL * Math.max(1, maxAbs(cpu)));
        const step = reference.forward([3], PROMPT.length);
        expect(maxAbsDiff(await model.forward([3], PROMPT.length, cache), step), `${type} decode`).toBeLessThan(TOL * Math.max(1, maxAbs(cpu)));
      } finally {
        cache.destroy();
      }
    }
  });
});
