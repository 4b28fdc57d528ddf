// One description of a model, whichever file it came from: its sizes (LlamaConfig) and its
// family's block (FamilyDescription), which the config readers (config-hf.ts, config-gguf.ts) produce and every path reads
// (the weight plan, forward.ts, decode-step.ts, decode-layers.ts, the CPU reference).
import type { GatedActivation, RopePairing } from '../gpu/kernels/index.ts';
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

/** The most layers a per-layer description is built for (far beyond any model: each layer is at least nine tensors). */
export const MAX_DESCRIBED_LAYERS = 1 << 16;

/**
 * Sets `family` on a config, with per-layer RoPE when a layer's differs from the config's defaults
 * (fewer rotated dims than the head, a layer without RoPE); a family equal to LLAMA_FAMILY with
 * no such layers is left out, so that Llama-layout configs stay as they were.
 */
export function setFamily(config: LlamaConfig, family: FamilyDescription, perLayer: { rotaryDims: number; usesRope?: boolean[]; windowed?: boolean[] }): void {
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

export function validateConfig(c: LlamaConfig, where: string): void {
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
