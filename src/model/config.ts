// One description of a Llama-family model, whichever file it came from.
import type { GgufMetadata, GgufValue } from './formats/gguf.ts';

/** How RoPE pairs the dimensions of a head: llama.cpp's GGUF (rows of Wq/Wk permuted at conversion)
 * rotates adjacent pairs (x[2i], x[2i+1]); Hugging Face Llama rotates halves (x[i], x[i + d/2]). */
export type RopePairing = 'adjacent' | 'halves';

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
  const ropeScaling = c.rope_scaling as Json | null | undefined;
  if (ropeScaling) {
    const type = ropeScaling.rope_type ?? ropeScaling.type;
    if (type !== 'default') throw new Error(`Unsupported rope_scaling type ${JSON.stringify(type)} (config.json rope_scaling)`);
  }
  if (c.partial_rotary_factor !== undefined && c.partial_rotary_factor !== 1) {
    throw new Error(`Unsupported partial_rotary_factor ${JSON.stringify(c.partial_rotary_factor)}`);
  }

  const hiddenSize = hfNumber(c, 'hidden_size');
  const numHeads = hfNumber(c, 'num_attention_heads');
  const numKvHeads = hfNumber(c, 'num_key_value_heads', numHeads);
  const headDim = hfNumber(c, 'head_dim', hiddenSize / numHeads);
  let contextLength = hfNumber(c, 'max_position_embeddings', 2048);
  // Sliding-window attention equals full attention for sequences up to the window: cap the context.
  const slidingWindow = c.sliding_window;
  const usesSliding = architecture === 'qwen2' ? c.use_sliding_window === true : true;
  if (usesSliding && typeof slidingWindow === 'number' && slidingWindow > 0 && slidingWindow < contextLength) {
    contextLength = slidingWindow;
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
    ropeTheta: hfNumber(c, 'rope_theta', 10000),
    ropePairing: 'halves',
    tieWordEmbeddings: c.tie_word_embeddings === true,
    attentionBias: architecture === 'qwen2',
  };
  validateConfig(config, 'config.json');
  return config;
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
  const scaling = metadata[`${arch}.rope.scaling.type`];
  if (scaling !== undefined && scaling !== 'none') {
    throw new Error(`Unsupported RoPE scaling type '${String(scaling)}' (${arch}.rope.scaling.type)`);
  }
  const factor = metadata[`${arch}.rope.scaling.factor`];
  if (scaling === undefined && typeof factor === 'number' && factor !== 1 && factor !== 0) {
    throw new Error(`Unsupported RoPE scaling (${arch}.rope.scaling.factor = ${factor})`);
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
}
