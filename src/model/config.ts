// One description of a model, whichever file it came from: its sizes (LlamaConfig) and its
// family's block (FamilyDescription), which the config readers below produce and every path reads
// (the weight plan, forward.ts, decode-step.ts, decode-layers.ts, the CPU reference).
import type { GatedActivation, RopePairing } from '../gpu/kernels/index.ts';
import type { GgufMetadata, GgufValue } from '../io/formats/gguf.ts';
import { f16ToF32, f32ToF16Bits } from './quantize.ts';

// The kernels own RopePairing and GatedActivation (src/gpu does not import from src/model); the config re-exports them.
export type { GatedActivation, RopePairing };

/** RoPE frequency scaling (Hugging Face `rope_scaling`), applied to the inverse-frequency table. */
export type RopeScaling =
  /** Positions divided by `factor`: every inverse frequency divided by it. */
  | { type: 'linear'; factor: number }
  /** Llama 3.1/3.2: long wavelengths divided by `factor`, short ones kept, a smooth ramp between. */
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalContextLength: number }
  /**
   * LongRoPE (Phi-3, `longrope` / `su`): inverse frequency i divided by shortFactor[i], or by
   * longFactor[i] when the loaded context (LlamaConfig.loadedContextLength) is longer than
   * originalContextLength, as llama.cpp and vLLM choose; cos and sin times attentionFactor.
   * One factor per rotated pair (rotaryDims / 2).
   */
  | { type: 'longrope'; shortFactor: number[]; longFactor: number[]; originalContextLength: number; attentionFactor: number };

/** RoPE of one layer. */
export interface LayerRope {
  /** rope_theta. */
  readonly theta: number;
  readonly scaling?: RopeScaling;
  /** GGUF rope_freqs.weight: per-frequency divisors ([rotaryDims / 2]), applied after `scaling`. */
  readonly freqFactors?: Float32Array<ArrayBuffer>;
  /** The leading dims of each head that rotate (even, <= headDim; the rest pass through). */
  readonly rotaryDims: number;
}

/** How one layer places its tokens: its RoPE (null: none, SmolLM3's NoPE layers) and its window. */
export interface LayerDescription {
  readonly rope: LayerRope | null;
  /** Each query sees at most this many keys (itself included); absent: all. */
  readonly slidingWindow?: number;
}

/**
 * A model family's block as data. Every field has the plain Llama value in LLAMA_FAMILY; a config
 * without `family` is that. No pass or kernel asks which architecture a model is: they read this.
 */
export interface FamilyDescription {
  /**
   * RMSNorm's weight offset: 0 gives x·w, 1 gives x·(1 + w) (Gemma). The upload folds it into the
   * norm weights (weights.ts: VectorSink adds it), so the kernels always compute x·w; the CPU
   * reference applies it itself to the file's weights.
   */
  readonly normWeightOffset: number;
  /** Gemma: a norm of the attention block's output before the residual add (post_attention_layernorm). */
  readonly postAttentionNorm: boolean;
  /** Gemma: a norm of the feed-forward block's output before the residual add (post_feedforward_layernorm). */
  readonly postFeedForwardNorm: boolean;
  /** Qwen3, Gemma 3: RMSNorm of each q and k head (weights [headDim]) before RoPE. */
  readonly qkNorm: boolean;
  readonly activation: GatedActivation;
  /** Attention score scale; absent: 1 / sqrt(headDim) (Gemma: query_pre_attn_scalar^-0.5). */
  readonly attentionScale?: number;
  /** Gemma 2: score = cap·tanh(score / cap) after the scale. */
  readonly attentionSoftcap?: number;
  /** Gemma 2: logits = cap·tanh(logits / cap). */
  readonly finalLogitSoftcap?: number;
  /** Gemma: the token embedding times this (sqrt(hidden), rounded to the checkpoint's dtype). */
  readonly embeddingScale?: number;
  /**
   * The file stores q, k, v as one matrix (Phi-3 qkv_proj / GGUF attn_qkv) and gate, up as one
   * (gate_up_proj / GGUF ffn_up of 2·ffn rows). openModel splits them by rows into the split
   * tensors (splitFusedTensors: byte ranges of the same file, no copy), so the passes see split
   * projections only.
   */
  readonly fusedQkv: boolean;
  readonly fusedGateUp: boolean;
  /**
   * Per-layer RoPE and window, when layers differ (SmolLM3, Gemma) or differ from the config's
   * defaults (partial rotation, LongRoPE); absent: every layer has LlamaConfig's ropeTheta,
   * ropeScaling, ropeFreqFactors, all of headDim, and slidingWindow. Read it with modelLayers().
   */
  readonly layers?: readonly LayerDescription[];
}

/** The plain Llama block (Llama 2/3, Mistral, Qwen2, SmolLM2). */
export const LLAMA_FAMILY: FamilyDescription = {
  normWeightOffset: 0,
  postAttentionNorm: false,
  postFeedForwardNorm: false,
  qkNorm: false,
  activation: 'silu',
  fusedQkv: false,
  fusedGateUp: false,
};

export interface LlamaConfig {
  architecture: string; // e.g. 'llama'
  vocabSize: number;
  hiddenSize: number; // d_model
  intermediateSize: number; // FFN hidden size
  numLayers: number;
  numHeads: number; // query heads
  numKvHeads: number; // key/value heads (grouped-query attention when < numHeads)
  headDim: number;
  contextLength: number; // max positions the model was configured for
  rmsNormEps: number;
  ropeTheta: number;
  ropePairing: RopePairing;
  tieWordEmbeddings: boolean; // LM head shares the token embedding matrix
  attentionBias: boolean; // Qwen2-style biases on q/k/v projections
  /** RoPE frequency scaling from config.json `rope_scaling` (absent: none). */
  ropeScaling?: RopeScaling;
  /** Per-frequency divisors of the inverse frequencies ([headDim / 2]): GGUF `rope_freqs.weight`
   * (how llama.cpp stores Llama 3.1-style scaling). Applied after `ropeScaling`. */
  ropeFreqFactors?: Float32Array<ArrayBuffer>;
  /** Mistral-style sliding-window attention: each query sees at most this many keys (itself
   * included). No effect on sequences no longer than the window. */
  slidingWindow?: number;
  /** The family's block (absent: LLAMA_FAMILY). Read it with familyOf(). */
  family?: FamilyDescription;
  /**
   * The positions the loaded model's KV cache holds (loadGenerator sets it): LongRoPE picks its
   * long factors when this is more than its original context. Absent: contextLength.
   */
  loadedContextLength?: number;
}

/** The config's family description (LLAMA_FAMILY when it has none). */
export function familyOf(config: LlamaConfig): FamilyDescription {
  return config.family ?? LLAMA_FAMILY;
}

/** Each layer's RoPE and window: the family's per-layer description, or the config's defaults for every layer. */
export function modelLayers(config: LlamaConfig): readonly LayerDescription[] {
  const layers = config.family?.layers;
  if (layers) return layers;
  const rope: LayerRope = {
    theta: config.ropeTheta,
    rotaryDims: config.headDim,
    ...(config.ropeScaling ? { scaling: config.ropeScaling } : {}),
    ...(config.ropeFreqFactors ? { freqFactors: config.ropeFreqFactors } : {}),
  };
  const layer: LayerDescription = config.slidingWindow !== undefined ? { rope, slidingWindow: config.slidingWindow } : { rope };
  return Array.from({ length: config.numLayers }, () => layer);
}

/** cos and sin's factor for a layer's RoPE (LongRoPE's attention factor; else 1). */
export function ropeMagnitude(rope: LayerRope): number {
  return rope.scaling?.type === 'longrope' ? rope.scaling.attentionFactor : 1;
}

// ---------------------------------------------------------------------------------------------
// Reading a LlamaConfig from the files. Anything this runtime does not implement is an error that
// names it, never a silently wrong model. A family is its architecture names here and the
// FamilyDescription its reader builds; nothing past the readers asks for the architecture.

/** Hugging Face `architectures` this runtime runs, and their `model_type`. */
const HF_ARCHITECTURES: Record<string, string> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
  Qwen3ForCausalLM: 'qwen3',
  SmolLM3ForCausalLM: 'smollm3',
  Phi3ForCausalLM: 'phi3',
  Gemma2ForCausalLM: 'gemma2',
  Gemma3ForCausalLM: 'gemma3',
  // The language model of a Gemma 3 image-text checkpoint (config under text_config; the vision
  // tower is not loaded: openModel says so).
  Gemma3ForConditionalGeneration: 'gemma3',
};

/** config.json model_type values of the families above, when `architectures` is absent. */
const HF_MODEL_TYPES: Record<string, string> = { gemma3_text: 'gemma3', gemma3: 'gemma3' };

type Json = Record<string, unknown>;

function hfNumber(config: Json, key: string, fallback?: number): number {
  const v = config[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new Error(`config.json has no ${key}`);
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`config.json ${key} is not a number: ${JSON.stringify(v)}`);
  return v;
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Throws naming a feature this runtime does not run, found anywhere in config.json (the top level,
 * `text_config`): mixture of experts, linear-attention layers (Qwen3-Next, Qwen3.5), mRoPE, or a
 * vision-only checkpoint. Called first, so that the error names the feature rather than the
 * architecture, and before any weight is read.
 */
export function refuseUnsupportedHfFeatures(c: Json): void {
  const parts: [string, Json][] = [['', c]];
  if (isObject(c.text_config)) parts.push(['text_config.', c.text_config]);
  for (const [at, part] of parts) {
    for (const key of ['num_local_experts', 'num_experts', 'n_routed_experts', 'moe_intermediate_size', 'num_experts_per_tok']) {
      if (part[key] !== undefined && part[key] !== null && part[key] !== 0) {
        throw new Error(`Unsupported model: mixture-of-experts (config.json ${at}${key} = ${JSON.stringify(part[key])})`);
      }
    }
    const layerTypes = Array.isArray(part.layer_types) ? (part.layer_types as unknown[]).map(String) : [];
    const linear = layerTypes.find((t) => /linear/.test(t));
    if (linear) throw new Error(`Unsupported model: linear-attention layers (config.json ${at}layer_types has "${linear}")`);
    for (const key of ['full_attention_interval', 'linear_num_key_heads', 'linear_num_value_heads', 'linear_conv_kernel_dim']) {
      if (part[key] !== undefined && part[key] !== null) {
        throw new Error(`Unsupported model: linear-attention layers (config.json ${at}${key} = ${JSON.stringify(part[key])})`);
      }
    }
    if (part.use_mrope === true) throw new Error(`Unsupported model: mRoPE (config.json ${at}use_mrope = true)`);
    for (const key of ['rope_scaling', 'rope_parameters']) {
      const r = part[key];
      if (isObject(r) && (r.mrope_section !== undefined || r.type === 'mrope' || r.rope_type === 'mrope')) {
        throw new Error(`Unsupported model: mRoPE (config.json ${at}${key}.mrope_section)`);
      }
    }
  }
  const architectures = Array.isArray(c.architectures) ? (c.architectures as unknown[]).map(String) : [];
  const visionOnly = (isObject(c.vision_config) || architectures.some((a) => /Vision(Model|Encoder)/.test(a)) || /vision/.test(String(c.model_type ?? '')))
    && !isObject(c.text_config) && c.vocab_size === undefined;
  if (visionOnly) {
    throw new Error(`Unsupported model: a vision-only checkpoint (${architectures.join(', ') || String(c.model_type)}), with no language model`);
  }
}

/** A LlamaConfig from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3, SmolLM3, Phi-3). */
export function configFromHf(configJson: unknown): LlamaConfig {
  if (!configJson || typeof configJson !== 'object') throw new Error('config.json is not a JSON object');
  const c = configJson as Json;
  refuseUnsupportedHfFeatures(c);
  const architectures = Array.isArray(c.architectures) ? (c.architectures as unknown[]).map(String) : [];
  const modelType = typeof c.model_type === 'string' ? c.model_type : undefined;
  let architecture: string | undefined;
  if (architectures.length > 0) {
    const known = architectures.find((a) => a in HF_ARCHITECTURES);
    if (!known) {
      throw new Error(
        `Unsupported model architecture ${architectures.join(', ')}: supported are ${Object.keys(HF_ARCHITECTURES).join(', ')}`,
      );
    }
    architecture = HF_ARCHITECTURES[known];
  } else if (modelType && Object.values(HF_ARCHITECTURES).includes(modelType)) {
    architecture = modelType;
  } else if (modelType && modelType in HF_MODEL_TYPES) {
    architecture = HF_MODEL_TYPES[modelType];
  } else {
    throw new Error(`Unsupported model: config.json has no supported architectures (model_type ${modelType ?? 'missing'})`);
  }
  if (architecture === 'gemma2' || architecture === 'gemma3') return gemmaConfigFromHf(c, architecture);

  const act = c.hidden_act ?? c.hidden_activation ?? 'silu';
  const activation = HF_ACTIVATIONS[String(act)];
  if (!activation) throw new Error(`Unsupported activation hidden_act = ${JSON.stringify(act)} (supported: ${Object.keys(HF_ACTIVATIONS).join(', ')})`);
  if (c.mlp_bias === true) throw new Error('Unsupported model: mlp_bias = true (biases on the MLP projections)');
  if (architecture !== 'qwen2' && c.attention_bias === true) {
    throw new Error(`Unsupported model: attention_bias = true for a ${architecture} model (bias on o_proj)`);
  }
  // transformers 5 writes RoPE as one object, rope_parameters {rope_type, rope_theta, factor, ...},
  // in place of the top-level rope_theta and rope_scaling that earlier versions wrote.
  const ropeParameters = c.rope_parameters ?? undefined;
  if (ropeParameters !== undefined && (typeof ropeParameters !== 'object' || Array.isArray(ropeParameters))) {
    throw new Error(`config.json rope_parameters is not an object: ${JSON.stringify(ropeParameters)}`);
  }
  const rope = ropeParameters as Json | undefined;
  if (rope && Object.values(rope).some((v) => isObject(v))) {
    throw new Error(`Unsupported config.json rope_parameters per layer type: ${JSON.stringify(rope)}`);
  }

  const hiddenSize = hfNumber(c, 'hidden_size');
  const numLayers = hfNumber(c, 'num_hidden_layers');
  const numHeads = hfNumber(c, 'num_attention_heads');
  const numKvHeads = hfNumber(c, 'num_key_value_heads', numHeads);
  const headDim = hfNumber(c, 'head_dim', hiddenSize / numHeads);
  const contextLength = hfNumber(c, 'max_position_embeddings', 2048);
  // transformers: the rotated dims are int(head_dim * partial_rotary_factor).
  const partial = rope?.partial_rotary_factor ?? c.partial_rotary_factor ?? 1;
  if (typeof partial !== 'number' || !(partial > 0 && partial <= 1)) throw new Error(`config.json partial_rotary_factor must be in (0, 1] (got ${JSON.stringify(partial)})`);
  const rotaryDims = Math.floor(headDim * partial);
  if (rotaryDims % 2 !== 0 || rotaryDims === 0) throw new Error(`Unsupported partial_rotary_factor ${partial}: ${rotaryDims} rotated dims of a head of ${headDim} is not a positive even number`);
  const scalingSource = rope
    ? (rope.rope_type === undefined && rope.type === undefined ? { ...rope, rope_type: 'default' } : rope)
    : c.rope_scaling;
  const ropeScaling = hfRopeScaling(scalingSource, rope ? 'rope_parameters' : 'rope_scaling', {
    contextLength,
    originalContextLength: c.original_max_position_embeddings,
    rotaryDims,
  });

  // Sliding-window attention equals full attention for sequences up to the window, but it is kept
  // even when no smaller than max_position_embeddings: a KV cache may be made longer than that
  // (loadModel's contextLength). Qwen2 / Qwen3 / SmolLM3 configs carry a sliding_window that is off
  // unless use_sliding_window is true; Mistral and Phi-3 use theirs (transformers' Phi3Attention
  // passes config.sliding_window); HF's Llama ignores sliding_window altogether.
  const window = c.sliding_window;
  const switched = architecture === 'qwen2' || architecture === 'qwen3' || architecture === 'smollm3';
  let usesSliding = switched ? c.use_sliding_window === true : architecture === 'mistral' || architecture === 'phi3';
  // Which layers slide (transformers' layer_types): the config's list when it has one, else the
  // layers from max_window_layers on.
  let windowed: boolean[] | undefined;
  if (switched && usesSliding) {
    const types = c.layer_types;
    if (types !== undefined && types !== null) {
      if (!Array.isArray(types) || types.length !== numLayers || types.some((t) => t !== 'full_attention' && t !== 'sliding_attention')) {
        throw new Error(`config.json layer_types must be ${numLayers} of "full_attention" / "sliding_attention" (got ${JSON.stringify(types).slice(0, 200)})`);
      }
      windowed = types.map((t) => t === 'sliding_attention');
    } else {
      const firstWindowed = hfNumber(c, 'max_window_layers', 28);
      if (firstWindowed > 0 && firstWindowed < numLayers && !(Number.isSafeInteger(numLayers) && numLayers <= MAX_DESCRIBED_LAYERS)) {
        throw new Error(`Unsupported model: sliding-window attention on layers ${firstWindowed}.. of ${numLayers}`);
      }
      if (firstWindowed > 0 && Number.isSafeInteger(numLayers) && numLayers <= MAX_DESCRIBED_LAYERS) {
        windowed = Array.from({ length: numLayers }, (_, l) => l >= firstWindowed);
      }
    }
    if (windowed && !windowed.some(Boolean)) usesSliding = false;
    if (windowed?.every(Boolean)) windowed = undefined;
  }
  let slidingWindow: number | undefined;
  if (usesSliding && window !== undefined && window !== null) {
    if (typeof window !== 'number' || !Number.isInteger(window) || window <= 0) {
      throw new Error(`config.json sliding_window must be a positive integer or null (got ${JSON.stringify(window)})`);
    }
    slidingWindow = window;
  }
  const ropeTheta = rope?.rope_theta !== undefined ? hfNumber(rope, 'rope_theta') : hfNumber(c, 'rope_theta', 10000);

  // SmolLM3: no_rope_layers[l] = 1 when layer l USES RoPE (transformers' SmolLM3Attention.use_rope);
  // missing, transformers builds it from no_rope_layer_interval (every interval-th layer without).
  let usesRope: boolean[] | undefined;
  if (architecture === 'smollm3' && (c.no_rope_layers !== undefined || (Number.isSafeInteger(numLayers) && numLayers > 0 && numLayers <= MAX_DESCRIBED_LAYERS))) {
    const interval = hfNumber(c, 'no_rope_layer_interval', 4);
    const list = c.no_rope_layers ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % interval !== 0 ? 1 : 0));
    if (!Array.isArray(list) || list.length !== numLayers || list.some((v) => v !== 0 && v !== 1)) {
      throw new Error(`config.json no_rope_layers must be ${numLayers} values of 0 or 1 (got ${JSON.stringify(list)})`);
    }
    usesRope = list.map((v) => v === 1);
  }
  const family: FamilyDescription = {
    ...LLAMA_FAMILY,
    activation,
    qkNorm: architecture === 'qwen3',
    fusedQkv: architecture === 'phi3',
    fusedGateUp: architecture === 'phi3',
  };
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
    rmsNormEps: hfNumber(c, 'rms_norm_eps', 1e-6),
    ropeTheta,
    ropePairing: 'halves',
    tieWordEmbeddings: c.tie_word_embeddings === true,
    attentionBias: architecture === 'qwen2',
  };
  if (ropeScaling) config.ropeScaling = ropeScaling;
  if (slidingWindow !== undefined) config.slidingWindow = slidingWindow;
  setFamily(config, family, { rotaryDims, usesRope, windowed });
  validateConfig(config, 'config.json');
  return config;
}

/** The most layers a per-layer description is built for (far beyond any model: each layer is at least nine tensors). */
const MAX_DESCRIBED_LAYERS = 1 << 16;

/** config.json activations and what they are. */
const HF_ACTIVATIONS: Record<string, GatedActivation> = {
  silu: 'silu',
  swish: 'silu',
  gelu_pytorch_tanh: 'gelu_tanh',
  gelu_tanh: 'gelu_tanh',
};

/**
 * Sets `family` on a config, with per-layer RoPE when a layer's differs from the config's defaults
 * (fewer rotated dims than the head, a layer without RoPE); a family equal to LLAMA_FAMILY with
 * no such layers is left out, so that Llama-layout configs stay as they were.
 */
function setFamily(config: LlamaConfig, family: FamilyDescription, perLayer: { rotaryDims: number; usesRope?: boolean[]; windowed?: boolean[] }): void {
  const { rotaryDims, usesRope } = perLayer;
  // windowed: the layers config.slidingWindow applies to (absent: every layer).
  const windowed = config.slidingWindow !== undefined ? perLayer.windowed : undefined;
  let layers: LayerDescription[] | undefined;
  // A layer count no file could hold the tensors of (a hostile header's 2^40) builds no list: the
  // tensor check refuses the model, naming the count (requiredTensors).
  const describable = Number.isSafeInteger(config.numLayers) && config.numLayers > 0 && config.numLayers <= MAX_DESCRIBED_LAYERS;
  if (windowed && !describable) throw new Error(`Unsupported model: sliding windows per layer over ${config.numLayers} layers`);
  if (describable && (rotaryDims !== config.headDim || usesRope?.some((u) => !u) || windowed?.some((w) => !w))) {
    const rope: LayerRope = {
      theta: config.ropeTheta,
      rotaryDims,
      ...(config.ropeScaling ? { scaling: config.ropeScaling } : {}),
      ...(config.ropeFreqFactors ? { freqFactors: config.ropeFreqFactors } : {}),
    };
    layers = Array.from({ length: config.numLayers }, (_, l) => {
      const layer: LayerDescription = { rope: usesRope && !usesRope[l] ? null : rope };
      return config.slidingWindow !== undefined && (!windowed || windowed[l]) ? { ...layer, slidingWindow: config.slidingWindow } : layer;
    });
    // The layers say which slide; config.slidingWindow would say every layer does.
    if (windowed) delete config.slidingWindow;
  }
  const plain = (Object.keys(LLAMA_FAMILY) as (keyof FamilyDescription)[]).every((k) => family[k] === LLAMA_FAMILY[k]);
  if (plain && !layers && Object.keys(family).length === Object.keys(LLAMA_FAMILY).length) return;
  config.family = layers ? { ...family, layers } : family;
}

/**
 * config.json `rope_scaling` or `rope_parameters` (`key`): null, type 'default', 'linear',
 * 'llama3' or 'longrope' / 'su' (Phi-3; its factor and original context as transformers'
 * _compute_longrope_parameters reads them); other types are errors.
 */
function hfRopeScaling(
  value: unknown,
  key: string,
  model: { contextLength: number; originalContextLength: unknown; rotaryDims: number },
): RopeScaling | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw new Error(`config.json ${key} is not an object: ${JSON.stringify(value)}`);
  const r = value as Json;
  const type = r.rope_type ?? r.type;
  const num = (name: string, fallback?: number): number => {
    const v = r[name] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      throw new Error(`config.json ${key}.${name} must be a number for ${key} type ${JSON.stringify(type)} (got ${JSON.stringify(r[name])})`);
    }
    return v;
  };
  switch (type) {
    case 'default':
      return undefined;
    case 'linear': {
      const factor = num('factor');
      if (factor <= 0) throw new Error(`config.json ${key}.factor must be positive (got ${factor})`);
      return factor === 1 ? undefined : { type: 'linear', factor };
    }
    case 'llama3': {
      const scaling: RopeScaling = {
        type: 'llama3',
        factor: num('factor'),
        lowFreqFactor: num('low_freq_factor'),
        highFreqFactor: num('high_freq_factor'),
        originalContextLength: num('original_max_position_embeddings'),
      };
      if (!(scaling.factor > 0 && scaling.lowFreqFactor > 0 && scaling.originalContextLength > 0 && scaling.highFreqFactor > scaling.lowFreqFactor)) {
        throw new Error(`config.json ${key} (llama3) has invalid parameters: ${JSON.stringify(r)}`);
      }
      return scaling;
    }
    case 'longrope':
    case 'su': {
      const factors = (name: string): number[] => {
        const list = r[name];
        if (!Array.isArray(list) || list.length !== model.rotaryDims / 2 || list.some((v) => typeof v !== 'number' || !(v > 0) || !Number.isFinite(v))) {
          throw new Error(`config.json ${key}.${name} must be ${model.rotaryDims / 2} positive numbers (one per rotated pair), got ${JSON.stringify(list)}`);
        }
        return list as number[];
      };
      // transformers: with a top-level original_max_position_embeddings (Phi-3), factor =
      // max_position_embeddings / it; without, the original is max_position_embeddings and the
      // factor rope_scaling.factor. attention_factor: given, or sqrt(1 + ln(factor) / ln(original)), 1 for factor <= 1.
      const top = model.originalContextLength ?? r.original_max_position_embeddings;
      let original: number;
      let factor: number;
      if (top !== undefined && top !== null) {
        if (typeof top !== 'number' || !Number.isInteger(top) || top <= 0) throw new Error(`config.json original_max_position_embeddings must be a positive integer (got ${JSON.stringify(top)})`);
        original = top;
        factor = model.contextLength / original;
      } else {
        original = model.contextLength;
        factor = num('factor', 1);
      }
      const given = r.attention_factor;
      let attentionFactor: number;
      if (given !== undefined && given !== null) attentionFactor = num('attention_factor');
      else attentionFactor = factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original));
      return { type: 'longrope', shortFactor: factors('short_factor'), longFactor: factors('long_factor'), originalContextLength: original, attentionFactor };
    }
    default:
      throw new Error(`Unsupported rope_scaling type ${JSON.stringify(type)} (config.json ${key}): supported are default, linear, llama3, longrope`);
  }
}

/** GGUF `general.architecture` values this runtime runs. */
const GGUF_ARCHITECTURES = ['llama', 'qwen2', 'qwen3', 'smollm3', 'phi3', 'gemma2', 'gemma3'];

/** GGUF architectures whose converter keeps Hugging Face's rotate-halves RoPE (llama.cpp's NEOX type); the others are permuted to adjacent pairs. */
const GGUF_NEOX = ['qwen2', 'qwen3', 'phi3', 'gemma2', 'gemma3'];

/** GGUF architectures known to be what this runtime refuses, with the feature that is why. */
const GGUF_REFUSED: Record<string, string> = {
  qwen3next: 'linear-attention layers (Qwen3-Next)',
  qwen35: 'linear-attention layers (Qwen3.5)',
  qwen35moe: 'linear-attention layers and mixture-of-experts (Qwen3.5)',
  qwen2moe: 'mixture-of-experts',
  qwen3moe: 'mixture-of-experts',
  qwen2vl: 'mRoPE (Qwen2-VL)',
  qwen25vl: 'mRoPE (Qwen2.5-VL)',
  qwen3vl: 'mRoPE (Qwen3-VL)',
  clip: 'a vision-only checkpoint (a multimodal projector, mmproj)',
};

function ggufNum(metadata: GgufMetadata, key: string, fallback?: number): number {
  const v: GgufValue | undefined = metadata[key];
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new Error(`GGUF metadata has no ${key}`);
  }
  const n = typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : undefined;
  if (n === undefined) throw new Error(`GGUF metadata ${key} is not a number`);
  if (!Number.isFinite(n)) throw new Error(`GGUF metadata ${key} is not a finite number (${n})`);
  return n;
}

/**
 * A LlamaConfig from GGUF metadata. `tokenCount` is the vocabulary size when known (defaults to the
 * length of `tokenizer.ggml.tokens`, then `{arch}.vocab_size`); `tensorNames` (the GGUF tensor
 * names) decides tied embeddings (tied when there is no `output.weight`) and fused projections
 * (`attn_qkv`; `ffn_up` without `ffn_gate`). LongRoPE's factors are tensors: openModel reads them
 * into the config (withLongRopeFactors).
 */
export function configFromGguf(metadata: GgufMetadata, tokenCount?: number, tensorNames?: Iterable<string>): LlamaConfig {
  const arch = metadata['general.architecture'];
  if (typeof arch !== 'string') throw new Error('GGUF metadata has no general.architecture');
  if (arch in GGUF_REFUSED) throw new Error(`Unsupported model: ${GGUF_REFUSED[arch]} (GGUF architecture '${arch}')`);
  const experts = ggufNum(metadata, `${arch}.expert_count`, 0);
  if (experts > 0) throw new Error(`Unsupported model: mixture-of-experts (${arch}.expert_count = ${experts})`);
  if (metadata[`${arch}.rope.dimension_sections`] !== undefined) throw new Error(`Unsupported model: mRoPE (${arch}.rope.dimension_sections)`);
  if (metadata[`${arch}.full_attention_interval`] !== undefined) throw new Error(`Unsupported model: linear-attention layers (${arch}.full_attention_interval)`);
  if (!GGUF_ARCHITECTURES.includes(arch)) {
    throw new Error(`Unsupported GGUF architecture '${arch}': supported are ${GGUF_ARCHITECTURES.join(', ')}`);
  }
  const names = new Set(tensorNames ?? []);
  // RoPE scaling: 'linear' (positions divided by the factor) is a table change; Llama 3.1-style
  // scaling comes as the rope_freqs.weight tensor (read by openModel into ropeFreqFactors), and
  // LongRoPE as rope_factors_long / _short (withLongRopeFactors).
  // As llama.cpp reads them: the type defaults to linear; the factor comes from rope.scaling.factor
  // or, in files from before that key, rope.scale_linear; a factor of 0 (or none) means 1.
  const scaling = metadata[`${arch}.rope.scaling.type`] ?? 'linear';
  const factorKey = metadata[`${arch}.rope.scaling.factor`] !== undefined ? `${arch}.rope.scaling.factor` : `${arch}.rope.scale_linear`;
  const factorValue = metadata[factorKey] ?? 0;
  const longRope = names.has('rope_factors_long.weight') || names.has('rope_factors_short.weight');
  let ropeScaling: RopeScaling | undefined;
  if (scaling === 'linear') {
    if (typeof factorValue !== 'number' || !(factorValue >= 0)) throw new Error(`GGUF metadata ${factorKey} must be a number >= 0 (got ${String(factorValue)})`);
    if (factorValue !== 0 && factorValue !== 1 && !longRope) ropeScaling = { type: 'linear', factor: factorValue };
  } else if (scaling !== 'none' && !(scaling === 'longrope' || scaling === 'su')) {
    throw new Error(`Unsupported RoPE scaling type '${String(scaling)}' (${arch}.rope.scaling.type)`);
  }
  const attnFactor = metadata[`${arch}.rope.scaling.attn_factor`];
  if (attnFactor !== undefined && !longRope && attnFactor !== 1) {
    throw new Error(`Unsupported RoPE scaling (${arch}.rope.scaling.attn_factor without LongRoPE factors)`);
  }
  const hiddenSize = ggufNum(metadata, `${arch}.embedding_length`);
  const numHeads = ggufNum(metadata, `${arch}.attention.head_count`);
  const numKvHeads = ggufNum(metadata, `${arch}.attention.head_count_kv`, numHeads);
  const headDim = ggufNum(metadata, `${arch}.attention.key_length`, hiddenSize / numHeads);
  const valueDim = ggufNum(metadata, `${arch}.attention.value_length`, headDim);
  if (valueDim !== headDim) throw new Error(`Unsupported model: value head size ${valueDim} differs from key head size ${headDim}`);
  const rotaryDims = ggufNum(metadata, `${arch}.rope.dimension_count`, headDim);
  if (!Number.isInteger(rotaryDims) || rotaryDims <= 0 || rotaryDims > headDim || rotaryDims % 2 !== 0) {
    throw new Error(`Unsupported partial RoPE: ${arch}.rope.dimension_count = ${rotaryDims} for a head size of ${headDim} (needs an even number up to it)`);
  }
  const contextLength = ggufNum(metadata, `${arch}.context_length`, 2048);
  if (longRope) {
    const original = ggufNum(metadata, `${arch}.rope.scaling.original_context_length`);
    const factor = contextLength / original;
    // The converter writes attn_factor; a file without it gets transformers' default.
    const attentionFactor = attnFactor !== undefined ? ggufNum(metadata, `${arch}.rope.scaling.attn_factor`)
      : factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original));
    // The factors themselves are tensors, read by openModel (withLongRopeFactors); ones until then.
    const ones = Array.from({ length: rotaryDims / 2 }, () => 1);
    ropeScaling = { type: 'longrope', shortFactor: ones, longFactor: ones, originalContextLength: original, attentionFactor };
  }
  const tokens = metadata['tokenizer.ggml.tokens'];
  const vocabSize = tokenCount ?? (Array.isArray(tokens) ? tokens.length : ggufNum(metadata, `${arch}.vocab_size`));
  const tieWordEmbeddings = tensorNames !== undefined && !names.has('output.weight');
  const window = metadata[`${arch}.attention.sliding_window`];
  const config: LlamaConfig = {
    architecture: arch,
    vocabSize,
    hiddenSize,
    intermediateSize: ggufNum(metadata, `${arch}.feed_forward_length`),
    numLayers: ggufNum(metadata, `${arch}.block_count`),
    numHeads,
    numKvHeads,
    headDim,
    contextLength,
    rmsNormEps: ggufNum(metadata, `${arch}.attention.layer_norm_rms_epsilon`, 1e-5),
    ropeTheta: ggufNum(metadata, `${arch}.rope.freq_base`, 10000),
    // llama.cpp's converter permutes Wq/Wk rows for the "normal" rope architectures; the NEOX ones are not permuted.
    ropePairing: GGUF_NEOX.includes(arch) ? 'halves' : 'adjacent',
    tieWordEmbeddings,
    attentionBias: arch === 'qwen2',
  };
  if (ropeScaling) config.ropeScaling = ropeScaling;
  // llama.cpp runs phi3 files without their window (it warns "Phi SWA is currently disabled"):
  // that is what a phi3 GGUF means, whatever its attention.sliding_window says.
  if (window !== undefined && window !== 0 && arch !== 'phi3') config.slidingWindow = ggufNum(metadata, `${arch}.attention.sliding_window`);
  // SmolLM3: llama.cpp has no key for its RoPE-less layers; it skips RoPE on every 4th layer
  // (n_no_rope_layer_step = 4), as transformers' default no_rope_layer_interval.
  const usesRope = arch === 'smollm3' && config.numLayers <= MAX_DESCRIBED_LAYERS ? Array.from({ length: config.numLayers }, (_, l) => (l + 1) % 4 !== 0) : undefined;
  const fusedQkv = [...names].some((n) => /^blk\.\d+\.attn_qkv\.weight$/.test(n));
  const fusedGateUp = tensorNames !== undefined && arch === 'phi3' && ![...names].some((n) => /^blk\.\d+\.ffn_gate\.weight$/.test(n));
  setFamily(config, { ...LLAMA_FAMILY, qkNorm: arch === 'qwen3', fusedQkv, fusedGateUp }, { rotaryDims, usesRope });
  if (arch === 'gemma2' || arch === 'gemma3') {
    config.family = gemmaGgufFamily(metadata, arch, config);
    delete config.slidingWindow;
  }
  validateConfig(config, 'GGUF metadata');
  return config;
}

function validateConfig(c: LlamaConfig, where: string): void {
  const ints: (keyof LlamaConfig)[] = ['vocabSize', 'hiddenSize', 'intermediateSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'contextLength'];
  for (const key of ints) {
    const v = c[key] as number;
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${where}: ${key} must be a positive integer (got ${v})`);
  }
  if (c.numHeads % c.numKvHeads !== 0) {
    throw new Error(`${where}: ${c.numHeads} attention heads are not a multiple of ${c.numKvHeads} key/value heads`);
  }
  if (c.headDim % 2 !== 0) throw new Error(`${where}: head size ${c.headDim} is odd (RoPE needs pairs)`);
  if (c.rmsNormEps <= 0 || !Number.isFinite(c.rmsNormEps)) throw new Error(`${where}: rms_norm_eps must be positive (got ${c.rmsNormEps})`);
  if (c.ropeTheta <= 0 || !Number.isFinite(c.ropeTheta)) throw new Error(`${where}: rope_theta must be positive (got ${c.ropeTheta})`);
  if (c.ropeFreqFactors && c.ropeFreqFactors.length !== c.headDim / 2) {
    throw new Error(`${where}: ${c.ropeFreqFactors.length} RoPE frequency factors for head size ${c.headDim} (needs ${c.headDim / 2})`);
  }
  const checkWindow = (w: number | undefined, what: string) => {
    if (w !== undefined && !(Number.isInteger(w) && w > 0 && w <= MAX_WINDOW)) {
      throw new Error(`${where}: ${what} sliding window must be a positive integer up to ${MAX_WINDOW} (got ${w})`);
    }
  };
  const checkScaling = (s: RopeScaling | undefined, what: string) => {
    if (s?.type !== 'longrope') return;
    if (!(Number.isInteger(s.originalContextLength) && s.originalContextLength > 0)) {
      throw new Error(`${where}: ${what} LongRoPE original context must be a positive integer (got ${s.originalContextLength})`);
    }
    if (!(s.attentionFactor > 0 && Number.isFinite(s.attentionFactor))) {
      throw new Error(`${where}: ${what} LongRoPE attention factor must be a positive finite number (got ${s.attentionFactor})`);
    }
  };
  checkWindow(c.slidingWindow, 'the');
  checkScaling(c.ropeScaling, 'the');
  // The per-layer description when there is one (the defaults are the config's, checked above).
  const layers = c.family?.layers ?? [];
  if (c.family?.layers && layers.length !== c.numLayers) throw new Error(`${where}: ${layers.length} layer descriptions for ${c.numLayers} layers`);
  for (const [l, layer] of layers.entries()) {
    const r = layer.rope;
    if (r) {
      if (!Number.isInteger(r.rotaryDims) || r.rotaryDims <= 0 || r.rotaryDims > c.headDim || r.rotaryDims % 2 !== 0) {
        throw new Error(`${where}: layer ${l} rotates ${r.rotaryDims} dims of a head of ${c.headDim} (needs an even number up to it)`);
      }
      if (!(r.theta > 0) || !Number.isFinite(r.theta)) throw new Error(`${where}: layer ${l} rope_theta must be positive (got ${r.theta})`);
      if (r.freqFactors && r.freqFactors.length !== r.rotaryDims / 2) throw new Error(`${where}: layer ${l} has ${r.freqFactors.length} RoPE frequency factors for ${r.rotaryDims} rotated dims`);
      const s = r.scaling;
      checkScaling(s, `layer ${l}`);
      if (s?.type === 'longrope' && (s.shortFactor.length !== r.rotaryDims / 2 || s.longFactor.length !== r.rotaryDims / 2)) {
        throw new Error(`${where}: LongRoPE factors (${s.shortFactor.length} short, ${s.longFactor.length} long) for ${r.rotaryDims} rotated dims (needs ${r.rotaryDims / 2} each)`);
      }
    }
    checkWindow(layer.slidingWindow, `layer ${l}`);
  }
}

/** The largest sliding window a config may name (the kernels count positions in 32 bits). */
const MAX_WINDOW = 2 ** 31 - 1;

/** The config with every layer's RoPE changed by `change` (the per-layer description, when there is one, and the defaults). */
function updateRope(config: LlamaConfig, change: (rope: LayerRope) => LayerRope): void {
  const layers = config.family?.layers;
  if (layers && config.family) {
    config.family = { ...config.family, layers: layers.map((layer) => (layer.rope ? { ...layer, rope: change(layer.rope) } : layer)) };
  }
}

/** Sets GGUF `rope_freqs.weight` (per-frequency divisors) on a config, checking its length. */
export function withRopeFreqFactors(config: LlamaConfig, factors: Float32Array<ArrayBuffer>): LlamaConfig {
  if (factors.length !== config.headDim / 2) {
    throw new Error(`rope_freqs.weight has ${factors.length} values; head size ${config.headDim} needs ${config.headDim / 2}`);
  }
  for (const f of factors) if (!(f > 0) || !Number.isFinite(f)) throw new Error(`rope_freqs.weight holds a non-positive or non-finite factor (${f})`);
  config.ropeFreqFactors = factors;
  updateRope(config, (rope) => ({ ...rope, freqFactors: factors }));
  return config;
}

/**
 * Sets GGUF LongRoPE factors (`rope_factors_short.weight`, `rope_factors_long.weight`; a file with
 * one uses it for both) on a config that configFromGguf read as LongRoPE, checking their lengths.
 */
export function withLongRopeFactors(config: LlamaConfig, short: Float32Array | undefined, long: Float32Array | undefined): LlamaConfig {
  const scaling = config.ropeScaling;
  if (scaling?.type !== 'longrope') throw new Error('LongRoPE factors for a model without LongRoPE');
  const rotaryDims = modelLayers(config).find((l) => l.rope)?.rope?.rotaryDims ?? config.headDim;
  const check = (name: string, f: Float32Array | undefined): number[] | undefined => {
    if (!f) return undefined;
    if (f.length !== rotaryDims / 2) throw new Error(`${name} has ${f.length} values; ${rotaryDims} rotated dims need ${rotaryDims / 2}`);
    for (const v of f) if (!(v > 0) || !Number.isFinite(v)) throw new Error(`${name} holds a non-positive or non-finite factor (${v})`);
    return Array.from(f);
  };
  const s = check('rope_factors_short.weight', short);
  const l = check('rope_factors_long.weight', long);
  const next: RopeScaling = { ...scaling, shortFactor: s ?? l ?? scaling.shortFactor, longFactor: l ?? s ?? scaling.longFactor };
  config.ropeScaling = next;
  updateRope(config, (rope) => ({ ...rope, scaling: next }));
  return config;
}

// ---------------------------------------------------------------------------------------------
// Gemma 2 and Gemma 3: the Llama block with x·(1 + w) norms, a norm after each block as well as
// before it, GeGLU, a scaled embedding, its own attention scale, soft-caps, and sliding-window
// layers interleaved with global ones (Gemma 3: on their own RoPE base). What each reader takes
// from its format is written beside it; test/model/gemma.test.ts checks each rule.

/** A checkpoint dtype name (config.json torch_dtype / dtype, or a safetensors dtype). */
export type CheckpointDType = 'f32' | 'f16' | 'bf16';

/** `value` rounded to `dtype` (round to nearest even), as torch's `tensor(value).to(dtype)`. */
export function roundToDType(value: number, dtype: CheckpointDType): number {
  if (dtype === 'f16') return f16ToF32(f32ToF16Bits(value));
  const f = Math.fround(value);
  if (dtype === 'f32') return f;
  const view = new DataView(new ArrayBuffer(4));
  view.setFloat32(0, f, true);
  const bits = view.getUint32(0, true);
  view.setUint32(0, ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) << 16, true);
  return view.getFloat32(0, true);
}

/** config.json's dtype (transformers 5 `dtype`, earlier `torch_dtype`), where it names one this reads. */
export function hfCheckpointDType(c: Json): CheckpointDType | undefined {
  const parts = isObject(c.text_config) ? [c.text_config, c] : [c];
  for (const part of parts) {
    const v = part.dtype ?? part.torch_dtype;
    if (v === 'bfloat16') return 'bf16';
    if (v === 'float16') return 'f16';
    if (v === 'float32') return 'f32';
  }
  return undefined;
}

/**
 * The Gemma embedding scale: sqrt(hidden_size) rounded to the checkpoint's dtype, as transformers
 * multiplies (Gemma3TextScaledWordEmbedding: embed_scale.to(weight.dtype); Gemma 2: a tensor of
 * hidden_states' dtype). Sets it on a config that has one (openModel calls it with the embedding
 * tensor's dtype when config.json names none).
 */
export function withEmbeddingScaleDType(config: LlamaConfig, dtype: CheckpointDType): LlamaConfig {
  if (config.family?.embeddingScale !== undefined) {
    config.family = { ...config.family, embeddingScale: roundToDType(Math.sqrt(config.hiddenSize), dtype) };
  }
  return config;
}

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
function gemmaConfigFromHf(top: Json, architecture: 'gemma2' | 'gemma3'): LlamaConfig {
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
function gemmaGgufFamily(metadata: GgufMetadata, arch: 'gemma2' | 'gemma3', config: LlamaConfig): FamilyDescription {
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
