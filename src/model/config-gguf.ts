// A LlamaConfig from GGUF metadata (configFromGguf), and what it refuses.
import type { GgufMetadata } from '../io/formats/gguf.ts';
import { LLAMA_FAMILY, MAX_DESCRIBED_LAYERS, setFamily, validateConfig, type LlamaConfig, type RopeScaling } from './config.ts';
import { gemmaGgufFamily } from './config-gemma.ts';
import { ggufNum } from './config-values.ts';

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
