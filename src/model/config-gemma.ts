// ---------------------------------------------------------------------------------------------
// Gemma 2 and Gemma 3: the Llama block with x·(1 + w) norms, a norm after each block as well as
// before it, GeGLU, a scaled embedding, its own attention scale, soft-caps, and sliding-window
// layers interleaved with global ones (Gemma 3: on their own RoPE base). What each reader takes
// from its format is written beside it; test/model/gemma.test.ts checks each rule.
import type { GgufMetadata } from '../io/formats/gguf.ts';
import {
  LLAMA_FAMILY, MAX_DESCRIBED_LAYERS, modelLayers, roundToDType, validateConfig, type FamilyDescription, type LayerDescription, type LayerRope, type LlamaConfig,
} from './config.ts';
import { ggufNum, HF_ACTIVATIONS, hfCheckpointDType, hfNumber, hfRopeScaling, isObject, type Json } from './config-values.ts';

/** transformers' defaults where a Gemma config.json leaves a key out (Gemma2Config, Gemma3TextConfig). */
const GEMMA_DEFAULTS: Record<'gemma2' | 'gemma3', Json> = {
  gemma2: {
    vocab_size: 256000, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8,
    num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 8192, rms_norm_eps: 1e-6, rope_theta: 10000,
    query_pre_attn_scalar: 256, sliding_window: 4096, final_logit_softcapping: 30, attn_logit_softcapping: 50,
  },
  gemma3: {
    vocab_size: 262208, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8,
    num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 131072, rms_norm_eps: 1e-6, rope_theta: 1e6,
    rope_local_base_freq: 10000, query_pre_attn_scalar: 256, sliding_window: 4096, sliding_window_pattern: 6,
    final_logit_softcapping: null, attn_logit_softcapping: null,
  },
};

/** Which layers are sliding-window ones, from a window period as transformers and llama.cpp build it: layer i is global when (i + 1) % period == 0. */
function periodicSlidingLayers(layers: number, period: number): boolean[] {
  return Array.from({ length: layers }, (_, i) => period === 0 || (i + 1) % period !== 0);
}

/**
 * Gemma's layers differ (window, RoPE base), so its description lists them: a layer count no file
 * could hold the tensors of (a hostile header's 2^40) is refused here, naming it, before a list
 * that long is built.
 */
function describableLayers(n: number, where: string): void {
  if (!(Number.isSafeInteger(n) && n > 0 && n <= MAX_DESCRIBED_LAYERS)) throw new Error(`${where} = ${n}: not a layer count this runtime runs (1 .. ${MAX_DESCRIBED_LAYERS})`);
}

/** A positive soft-cap, or undefined for null / absent / 0 (no capping). */
function softcapValue(v: unknown, where: string): number | undefined {
  if (v === undefined || v === null || v === 0) return undefined;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) throw new Error(`${where} must be a positive number or null (got ${JSON.stringify(v)})`);
  return v;
}

/**
 * A Gemma 2 / Gemma 3 LlamaConfig from config.json (Gemma3ForConditionalGeneration: its
 * text_config), read as transformers reads it:
 * - norms x·(1 + w) (normWeightOffset 1, folded at upload); input, post-attention, pre- and
 *   post-feed-forward norms; Gemma 3: q_norm / k_norm;
 * - hidden_activation (default gelu_pytorch_tanh; hidden_act is not what Gemma's MLP reads);
 * - attention scale query_pre_attn_scalar^-0.5; attn_logit_softcapping and final_logit_softcapping
 *   (Gemma 2 defaults 50 and 30; Gemma 3 none);
 * - the embedding times sqrt(hidden_size) rounded to the checkpoint's dtype;
 * - layer_types ('sliding_attention' / 'full_attention'), else Gemma 3's sliding_window_pattern
 *   (default 6: layer i global when (i + 1) % 6 == 0), Gemma 2's alternation (even layers slide);
 *   the sliding layers see sliding_window keys (none when it is null);
 * - Gemma 3's RoPE per layer type: sliding layers rope_local_base_freq (default 10000) unscaled,
 *   global ones rope_theta (default 1e6) with rope_scaling; transformers 5's rope_parameters
 *   {sliding_attention, full_attention} in their place. Gemma 2: one RoPE for every layer.
 * Keys left out take Gemma2Config's / Gemma3TextConfig's defaults.
 */
export function gemmaConfigFromHf(top: Json, architecture: 'gemma2' | 'gemma3'): LlamaConfig {
  const given = isObject(top.text_config) ? top.text_config : top;
  const defaults = GEMMA_DEFAULTS[architecture];
  const c: Json = { ...defaults };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) c[k] = v;
  if (c.use_bidirectional_attention === true) {
    throw new Error('Unsupported model: bidirectional attention (config.json use_bidirectional_attention = true: an embedding model, not a causal one)');
  }
  const act = c.hidden_activation ?? 'gelu_pytorch_tanh';
  const activation = HF_ACTIVATIONS[String(act)];
  if (!activation) throw new Error(`Unsupported activation hidden_activation = ${JSON.stringify(act)} (supported: ${Object.keys(HF_ACTIVATIONS).join(', ')})`);
  if (c.attention_bias === true) throw new Error(`Unsupported model: attention_bias = true for a ${architecture} model`);
  if (c.mlp_bias === true) throw new Error('Unsupported model: mlp_bias = true (biases on the MLP projections)');

  const hiddenSize = hfNumber(c, 'hidden_size');
  const numLayers = hfNumber(c, 'num_hidden_layers');
  const numHeads = hfNumber(c, 'num_attention_heads');
  const numKvHeads = hfNumber(c, 'num_key_value_heads', numHeads);
  const headDim = hfNumber(c, 'head_dim', hiddenSize / numHeads);
  const contextLength = hfNumber(c, 'max_position_embeddings');
  describableLayers(numLayers, 'config.json num_hidden_layers');

  // Which layers slide.
  let sliding: boolean[];
  if (c.layer_types !== undefined && c.layer_types !== null) {
    const types = c.layer_types;
    if (!Array.isArray(types) || types.length !== numLayers || types.some((t) => t !== 'sliding_attention' && t !== 'full_attention')) {
      throw new Error(`config.json layer_types must be ${numLayers} of "sliding_attention" / "full_attention" (got ${JSON.stringify(types)})`);
    }
    sliding = types.map((t) => t === 'sliding_attention');
  } else if (architecture === 'gemma3') {
    const period = hfNumber(c, 'sliding_window_pattern');
    if (!Number.isInteger(period) || period < 1) throw new Error(`config.json sliding_window_pattern must be a positive integer (got ${period})`);
    sliding = periodicSlidingLayers(numLayers, period);
  } else {
    sliding = periodicSlidingLayers(numLayers, 2);
  }
  const window = c.sliding_window;
  if (window !== null && (typeof window !== 'number' || !Number.isInteger(window) || window <= 0)) {
    throw new Error(`config.json sliding_window must be a positive integer or null (got ${JSON.stringify(window)})`);
  }

  // RoPE of each layer type.
  const ropeParameters = c.rope_parameters;
  if (ropeParameters !== undefined && ropeParameters !== null && !isObject(ropeParameters)) {
    throw new Error(`config.json rope_parameters is not an object: ${JSON.stringify(ropeParameters)}`);
  }
  const perType = isObject(ropeParameters) && (isObject(ropeParameters.full_attention) || isObject(ropeParameters.sliding_attention));
  const ropeOf = (kind: 'full' | 'sliding'): LayerRope => {
    const typed = perType ? (ropeParameters as Json)[kind === 'full' ? 'full_attention' : 'sliding_attention'] : undefined;
    let params: Json | undefined;
    let key: string;
    let theta: number;
    if (typed !== undefined && typed !== null) {
      if (!isObject(typed)) throw new Error(`config.json rope_parameters.${kind}_attention is not an object`);
      params = typed;
      key = `rope_parameters.${kind}_attention`;
      const fallback = kind === 'sliding' && architecture === 'gemma3' ? hfNumber(c, 'rope_local_base_freq') : hfNumber(c, 'rope_theta');
      theta = typed.rope_theta !== undefined ? hfNumber(typed, 'rope_theta') : fallback;
    } else if (kind === 'sliding' && architecture === 'gemma3') {
      // transformers: the local layers' RoPE is the default one on rope_local_base_freq.
      return { theta: hfNumber(c, 'rope_local_base_freq'), rotaryDims: headDim };
    } else {
      params = isObject(ropeParameters) && !perType ? ropeParameters : (c.rope_scaling as Json | null | undefined) ?? undefined;
      key = isObject(ropeParameters) && !perType ? 'rope_parameters' : 'rope_scaling';
      theta = isObject(ropeParameters) && !perType && ropeParameters.rope_theta !== undefined ? hfNumber(ropeParameters, 'rope_theta') : hfNumber(c, 'rope_theta');
    }
    const source = params && params.rope_type === undefined && params.type === undefined ? { ...params, rope_type: 'default' } : params;
    const scaling = hfRopeScaling(source, key, { contextLength, originalContextLength: c.original_max_position_embeddings, rotaryDims: headDim });
    return { theta, rotaryDims: headDim, ...(scaling ? { scaling } : {}) };
  };
  const fullRope = ropeOf('full');
  const slidingRope = architecture === 'gemma3' || perType ? ropeOf('sliding') : fullRope;
  const layers: LayerDescription[] = sliding.map((s) => {
    if (!s) return { rope: fullRope };
    return window === null ? { rope: slidingRope } : { rope: slidingRope, slidingWindow: window as number };
  });

  const dtype = hfCheckpointDType(top) ?? 'f32';
  const attentionSoftcap = softcapValue(c.attn_logit_softcapping, 'config.json attn_logit_softcapping');
  const finalLogitSoftcap = softcapValue(c.final_logit_softcapping, 'config.json final_logit_softcapping');
  const queryScalar = hfNumber(c, 'query_pre_attn_scalar');
  if (!(queryScalar > 0)) throw new Error(`config.json query_pre_attn_scalar must be positive (got ${queryScalar})`);
  const family: FamilyDescription = {
    ...LLAMA_FAMILY,
    normWeightOffset: 1,
    postAttentionNorm: true,
    postFeedForwardNorm: true,
    qkNorm: architecture === 'gemma3',
    activation,
    attentionScale: 1 / Math.sqrt(queryScalar),
    ...(attentionSoftcap !== undefined ? { attentionSoftcap } : {}),
    ...(finalLogitSoftcap !== undefined ? { finalLogitSoftcap } : {}),
    embeddingScale: roundToDType(Math.sqrt(hiddenSize), dtype),
    layers,
  };
  const tied = given.tie_word_embeddings ?? top.tie_word_embeddings ?? true;
  const config: LlamaConfig = {
    architecture,
    vocabSize: hfNumber(c, 'vocab_size'),
    hiddenSize,
    intermediateSize: hfNumber(c, 'intermediate_size'),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    contextLength,
    rmsNormEps: hfNumber(c, 'rms_norm_eps'),
    ropeTheta: fullRope.theta,
    ropePairing: 'halves',
    tieWordEmbeddings: tied === true,
    attentionBias: false,
    family,
  };
  if (fullRope.scaling) config.ropeScaling = fullRope.scaling;
  validateConfig(config, 'config.json');
  return config;
}

/**
 * The family of a GGUF `gemma2` / `gemma3` file, as llama.cpp reads it (llama-model.cpp's hparams
 * for the two architectures, its gemma2 / gemma3 graphs):
 * - norms x·w: llama.cpp's converter has already added 1 to every `*norm.weight` (normWeightOffset 0);
 * - the embedding times sqrtf(n_embd) in f32;
 * - the attention scale 1/sqrt(key_length), or 1/sqrt(embedding_length / head_count) for the
 *   layer count llama.cpp takes for the 27B models (46 for gemma2, 62 for gemma3): llama.cpp
 *   reads no query_pre_attn_scalar, so that is what a GGUF means, whatever the source config said;
 * - gemma2: attn_logit_softcapping (default 50) on every layer, final_logit_softcapping (default
 *   30); a window of attention.sliding_window (default 4096) on the even layers; one RoPE;
 * - gemma3: final_logit_softcapping when present (llama.cpp's converter writes it only when the
 *   model has one); the window only when attention.sliding_window is present and not 0, then on
 *   the layers attention.sliding_window_pattern (a period, default 6, or one flag per layer)
 *   makes local, which take rope.freq_base_swa (default 10000) without the scaling.
 */
export function gemmaGgufFamily(metadata: GgufMetadata, arch: 'gemma2' | 'gemma3', config: LlamaConfig): FamilyDescription {
  const num = (key: string, fallback?: number) => ggufNum(metadata, `${arch}.${key}`, fallback);
  const layerCount = config.numLayers;
  describableLayers(layerCount, `GGUF metadata ${arch}.block_count`);
  const large = arch === 'gemma2' ? layerCount === 46 : layerCount === 62;
  const attentionScale = Math.fround(1 / Math.sqrt(large ? Math.floor(config.hiddenSize / config.numHeads) : config.headDim));
  const globalRope: LayerRope = {
    theta: config.ropeTheta,
    rotaryDims: modelLayers(config)[0]?.rope?.rotaryDims ?? config.headDim,
    ...(config.ropeScaling ? { scaling: config.ropeScaling } : {}),
  };
  let sliding: boolean[];
  let window: number | undefined;
  let localRope = globalRope;
  if (arch === 'gemma2') {
    window = num('attention.sliding_window', 4096);
    sliding = periodicSlidingLayers(layerCount, 2);
  } else {
    const w = metadata[`${arch}.attention.sliding_window`];
    window = w === undefined ? undefined : num('attention.sliding_window');
    if (window === 0) window = undefined;
    const pattern = metadata[`${arch}.attention.sliding_window_pattern`];
    if (window === undefined) sliding = Array.from({ length: layerCount }, () => false);
    else if (Array.isArray(pattern)) {
      if (pattern.length !== layerCount) throw new Error(`GGUF metadata ${arch}.attention.sliding_window_pattern has ${pattern.length} flags for ${layerCount} layers`);
      sliding = pattern.map((v) => v === true || v === 1 || v === 1n);
    } else {
      sliding = periodicSlidingLayers(layerCount, pattern === undefined ? 6 : num('attention.sliding_window_pattern'));
    }
    localRope = { theta: num('rope.freq_base_swa', 10000), rotaryDims: globalRope.rotaryDims };
  }
  const layers: LayerDescription[] = sliding.map((s) => (s ? { rope: localRope, ...(window !== undefined ? { slidingWindow: window } : {}) } : { rope: globalRope }));
  const attentionSoftcap = arch === 'gemma2' ? softcapValue(num('attn_logit_softcapping', 50), `GGUF metadata ${arch}.attn_logit_softcapping`) : undefined;
  const finalLogitSoftcap = softcapValue(num('final_logit_softcapping', arch === 'gemma2' ? 30 : 0), `GGUF metadata ${arch}.final_logit_softcapping`);
  return {
    ...LLAMA_FAMILY,
    postAttentionNorm: true,
    postFeedForwardNorm: true,
    qkNorm: arch === 'gemma3',
    activation: 'gelu_tanh',
    attentionScale,
    ...(attentionSoftcap !== undefined ? { attentionSoftcap } : {}),
    ...(finalLogitSoftcap !== undefined ? { finalLogitSoftcap } : {}),
    embeddingScale: Math.fround(Math.sqrt(config.hiddenSize)),
    layers,
  };
}
