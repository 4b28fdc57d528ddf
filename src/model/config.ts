// One description of a Llama-family model, whichever file it came from.
import type { RopePairing } from '../gpu/kernels/index.ts';
import type { GgufMetadata, GgufValue } from '../io/formats/gguf.ts';

// The kernels own RopePairing (src/gpu does not import from src/model); the config re-exports it.
export type { RopePairing };

/** RoPE frequency scaling (Hugging Face `rope_scaling`), applied to the inverse-frequency table. */
export type RopeScaling =
  /** Positions divided by `factor`: every inverse frequency divided by it. */
  | { type: 'linear'; factor: number }
  /** Llama 3.1/3.2: long wavelengths divided by `factor`, short ones kept, a smooth ramp between. */
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalContextLength: number };

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
}

// ---------------------------------------------------------------------------------------------
// Reading a LlamaConfig from the files. Anything this runtime does not implement is an error that
// names it, never a silently wrong model.


/** Hugging Face `architectures` this runtime runs, and their `model_type`. */
const HF_ARCHITECTURES: Record<string, string> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
};

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

/** A LlamaConfig from a Hugging Face config.json (Llama, Mistral, Qwen2). */
export function configFromHf(configJson: unknown): LlamaConfig {
  if (!configJson || typeof configJson !== 'object') throw new Error('config.json is not a JSON object');
  const c = configJson as Json;
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
  } else {
    throw new Error(`Unsupported model: config.json has no supported architectures (model_type ${modelType ?? 'missing'})`);
  }

  for (const key of ['num_local_experts', 'num_experts', 'n_routed_experts', 'moe_intermediate_size']) {
    if (c[key] !== undefined && c[key] !== null && c[key] !== 0) {
      throw new Error(`Unsupported model: mixture-of-experts (config.json ${key} = ${JSON.stringify(c[key])})`);
    }
  }
  const act = c.hidden_act ?? c.hidden_activation ?? 'silu';
  if (act !== 'silu') throw new Error(`Unsupported activation hidden_act = ${JSON.stringify(act)} (only silu)`);
  if (c.mlp_bias === true) throw new Error('Unsupported model: mlp_bias = true (biases on the MLP projections)');
  if (architecture !== 'qwen2' && c.attention_bias === true) {
    throw new Error('Unsupported model: attention_bias = true for a Llama model (bias on o_proj)');
  }
  // transformers 5 writes RoPE as one object, rope_parameters {rope_type, rope_theta, factor, ...},
  // in place of the top-level rope_theta and rope_scaling that earlier versions wrote.
  const ropeParameters = c.rope_parameters ?? undefined;
  if (ropeParameters !== undefined && (typeof ropeParameters !== 'object' || Array.isArray(ropeParameters))) {
    throw new Error(`config.json rope_parameters is not an object: ${JSON.stringify(ropeParameters)}`);
  }
  const rope = ropeParameters as Json | undefined;
  if (rope && Object.values(rope).some((v) => typeof v === 'object' && v !== null)) {
    throw new Error(`Unsupported config.json rope_parameters per layer type: ${JSON.stringify(rope)}`);
  }
  const ropeScaling = rope
    ? hfRopeScaling(rope.rope_type === undefined && rope.type === undefined ? { ...rope, rope_type: 'default' } : rope, 'rope_parameters')
    : hfRopeScaling(c.rope_scaling, 'rope_scaling');
  if (c.partial_rotary_factor !== undefined && c.partial_rotary_factor !== 1) {
    throw new Error(`Unsupported partial_rotary_factor ${JSON.stringify(c.partial_rotary_factor)}`);
  }

  const hiddenSize = hfNumber(c, 'hidden_size');
  const numHeads = hfNumber(c, 'num_attention_heads');
  const numKvHeads = hfNumber(c, 'num_key_value_heads', numHeads);
  const headDim = hfNumber(c, 'head_dim', hiddenSize / numHeads);
  const contextLength = hfNumber(c, 'max_position_embeddings', 2048);
  // Sliding-window attention equals full attention for sequences up to the window, but it is kept
  // even when no smaller than max_position_embeddings: a KV cache may be made longer than that
  // (loadModel's contextLength). Qwen2 configs carry a sliding_window that is off unless
  // use_sliding_window is true; HF's Llama ignores sliding_window altogether.
  const window = c.sliding_window;
  let usesSliding = architecture === 'qwen2' ? c.use_sliding_window === true : architecture === 'mistral';
  if (architecture === 'qwen2' && usesSliding) {
    // Qwen2 windows only the layers from max_window_layers on: all of them or none is supported.
    const numLayers = hfNumber(c, 'num_hidden_layers');
    const firstWindowed = hfNumber(c, 'max_window_layers', 28);
    if (firstWindowed >= numLayers) usesSliding = false;
    else if (firstWindowed > 0) {
      throw new Error(`Unsupported model: sliding-window attention on layers ${firstWindowed}.. only (config.json max_window_layers = ${firstWindowed}, use_sliding_window = true)`);
    }
  }
  let slidingWindow: number | undefined;
  if (usesSliding && window !== undefined && window !== null) {
    if (typeof window !== 'number' || !Number.isInteger(window) || window <= 0) {
      throw new Error(`config.json sliding_window must be a positive integer or null (got ${JSON.stringify(window)})`);
    }
    slidingWindow = window;
  }
  const config: LlamaConfig = {
    architecture,
    vocabSize: hfNumber(c, 'vocab_size'),
    hiddenSize,
    intermediateSize: hfNumber(c, 'intermediate_size'),
    numLayers: hfNumber(c, 'num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    contextLength,
    rmsNormEps: hfNumber(c, 'rms_norm_eps', 1e-6),
    ropeTheta: rope?.rope_theta !== undefined ? hfNumber(rope, 'rope_theta') : hfNumber(c, 'rope_theta', 10000),
    ropePairing: 'halves',
    tieWordEmbeddings: c.tie_word_embeddings === true,
    attentionBias: architecture === 'qwen2',
  };
  if (ropeScaling) config.ropeScaling = ropeScaling;
  if (slidingWindow !== undefined) config.slidingWindow = slidingWindow;
  validateConfig(config, 'config.json');
  return config;
}

/**
 * config.json `rope_scaling` or `rope_parameters` (`key`): null, type 'default', 'linear' or
 * 'llama3'; other types are errors.
 */
function hfRopeScaling(value: unknown, key: string): RopeScaling | undefined {
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
    default:
      throw new Error(`Unsupported rope_scaling type ${JSON.stringify(type)} (config.json ${key}): supported are default, linear, llama3`);
  }
}

/** GGUF `general.architecture` values this runtime runs. */
const GGUF_ARCHITECTURES = ['llama', 'qwen2'];

function ggufNum(metadata: GgufMetadata, key: string, fallback?: number): number {
  const v: GgufValue | undefined = metadata[key];
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new Error(`GGUF metadata has no ${key}`);
  }
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return Number(v);
  throw new Error(`GGUF metadata ${key} is not a number`);
}

/**
 * A LlamaConfig from GGUF metadata. `tokenCount` is the vocabulary size when known (defaults to the
 * length of `tokenizer.ggml.tokens`, then `{arch}.vocab_size`); `tensorNames` (the GGUF tensor
 * names) decides tied embeddings: tied when there is no `output.weight`.
 */
export function configFromGguf(metadata: GgufMetadata, tokenCount?: number, tensorNames?: Iterable<string>): LlamaConfig {
  const arch = metadata['general.architecture'];
  if (typeof arch !== 'string') throw new Error('GGUF metadata has no general.architecture');
  if (!GGUF_ARCHITECTURES.includes(arch)) {
    throw new Error(`Unsupported GGUF architecture '${arch}': supported are ${GGUF_ARCHITECTURES.join(', ')}`);
  }
  const experts = ggufNum(metadata, `${arch}.expert_count`, 0);
  if (experts > 0) throw new Error(`Unsupported model: mixture-of-experts (${arch}.expert_count = ${experts})`);
  // RoPE scaling: 'linear' (positions divided by the factor) is a table change; Llama 3.1-style
  // scaling comes as the rope_freqs.weight tensor (read by openModel into ropeFreqFactors).
  // As llama.cpp reads them: the type defaults to linear; the factor comes from rope.scaling.factor
  // or, in files from before that key, rope.scale_linear; a factor of 0 (or none) means 1.
  const scaling = metadata[`${arch}.rope.scaling.type`] ?? 'linear';
  const factorKey = metadata[`${arch}.rope.scaling.factor`] !== undefined ? `${arch}.rope.scaling.factor` : `${arch}.rope.scale_linear`;
  const factorValue = metadata[factorKey] ?? 0;
  let ropeScaling: RopeScaling | undefined;
  if (scaling === 'linear') {
    if (typeof factorValue !== 'number' || !(factorValue >= 0)) throw new Error(`GGUF metadata ${factorKey} must be a number >= 0 (got ${String(factorValue)})`);
    if (factorValue !== 0 && factorValue !== 1) ropeScaling = { type: 'linear', factor: factorValue };
  } else if (scaling !== 'none') {
    throw new Error(`Unsupported RoPE scaling type '${String(scaling)}' (${arch}.rope.scaling.type)`);
  }
  if (metadata[`${arch}.rope.scaling.attn_factor`] !== undefined) {
    throw new Error(`Unsupported RoPE scaling (${arch}.rope.scaling.attn_factor)`);
  }
  const hiddenSize = ggufNum(metadata, `${arch}.embedding_length`);
  const numHeads = ggufNum(metadata, `${arch}.attention.head_count`);
  const numKvHeads = ggufNum(metadata, `${arch}.attention.head_count_kv`, numHeads);
  const headDim = ggufNum(metadata, `${arch}.attention.key_length`, hiddenSize / numHeads);
  const valueDim = ggufNum(metadata, `${arch}.attention.value_length`, headDim);
  if (valueDim !== headDim) throw new Error(`Unsupported model: value head size ${valueDim} differs from key head size ${headDim}`);
  const ropeDims = ggufNum(metadata, `${arch}.rope.dimension_count`, headDim);
  if (ropeDims !== headDim) {
    throw new Error(`Unsupported partial RoPE: ${arch}.rope.dimension_count = ${ropeDims} but the head size is ${headDim}`);
  }
  const tokens = metadata['tokenizer.ggml.tokens'];
  const vocabSize = tokenCount ?? (Array.isArray(tokens) ? tokens.length : ggufNum(metadata, `${arch}.vocab_size`));
  let tieWordEmbeddings = false;
  if (tensorNames) {
    tieWordEmbeddings = true;
    for (const name of tensorNames) if (name === 'output.weight') tieWordEmbeddings = false;
  }
  const config: LlamaConfig = {
    architecture: arch,
    vocabSize,
    hiddenSize,
    intermediateSize: ggufNum(metadata, `${arch}.feed_forward_length`),
    numLayers: ggufNum(metadata, `${arch}.block_count`),
    numHeads,
    numKvHeads,
    headDim,
    contextLength: ggufNum(metadata, `${arch}.context_length`, 2048),
    rmsNormEps: ggufNum(metadata, `${arch}.attention.layer_norm_rms_epsilon`, 1e-5),
    ropeTheta: ggufNum(metadata, `${arch}.rope.freq_base`, 10000),
    // llama.cpp's converter permutes Wq/Wk rows for 'llama' ("normal" rope); qwen2 uses NeoX rope.
    ropePairing: arch === 'llama' ? 'adjacent' : 'halves',
    tieWordEmbeddings,
    attentionBias: arch === 'qwen2',
  };
  if (ropeScaling) config.ropeScaling = ropeScaling;
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
}

/** Sets GGUF `rope_freqs.weight` (per-frequency divisors) on a config, checking its length. */
export function withRopeFreqFactors(config: LlamaConfig, factors: Float32Array<ArrayBuffer>): LlamaConfig {
  if (factors.length !== config.headDim / 2) {
    throw new Error(`rope_freqs.weight has ${factors.length} values; head size ${config.headDim} needs ${config.headDim / 2}`);
  }
  for (const f of factors) if (!(f > 0) || !Number.isFinite(f)) throw new Error(`rope_freqs.weight holds a non-positive or non-finite factor (${f})`);
  config.ropeFreqFactors = factors;
  return config;
}
