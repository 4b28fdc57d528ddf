// GGUF versions of a generated Hugging Face model folder (config.json, tokenizer.json,
// tokenizer_config.json, generation_config.json, one model.safetensors), written the way
// llama.cpp's convert_hf_to_gguf.py + llama-quantize would, through our writer (gguf-writer.ts)
// and our quantizers (src/model/quantize.ts):
//
// - general.architecture `llama` for Llama / Mistral, `qwen2` for Qwen2, with the {arch}.* keys
//   (context_length, embedding_length, block_count, feed_forward_length, attention.head_count(_kv),
//   attention.key_length / value_length, rope.dimension_count, rope.freq_base,
//   attention.layer_norm_rms_epsilon, vocab_size), and Llama 3-style `rope_scaling` as the
//   `rope_freqs.weight` tensor (per-frequency divisors) as the converter computes it.
// - For `llama` the Wq / Wk rows are permuted per head (the converter's `permute`) so that GGUF's
//   adjacent-pair RoPE equals Hugging Face's rotate-halves; `qwen2` (NeoX RoPE) is not permuted.
// - tokenizer.ggml.*: as gguf-tokenizer-metadata.ts writes them: SentencePiece-style folders (byte
//   fallback) as model `llama` with tokens / scores / token_type (and add_space_prefix false for
//   Gemma's); byte-level BPE folders as model `gpt2` with tokens / token_type / merges and the
//   `tokenizer.ggml.pre` llama.cpp names their pre-tokenizer by (`gpt-2` for the generated files,
//   `qwen2`, `llama-bpe`, `smaug-bpe`, `gpt-4o` for real ones); add_bos_token, BOS / EOS / EOT ids.
// - Storage types: 1-D tensors (norms, biases, rope_freqs) stay F32 as llama.cpp keeps them.
//   `f32` / `f16` / `q8_0` / `q4_0` / `q4_k` / `q6_k` store every matrix in that type (llama-quantize
//   --pure); `q4_k_m` is llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the output (or the tied
//   embedding) and for attn_v / ffn_down of the layers llama.cpp's use_more_bits picks.
//   Fallbacks as llama.cpp's llama_tensor_get_type: a matrix whose rows (ne[0]) are not a multiple
//   of 256 falls back from Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0; then if the rows are not a
//   multiple of that type's block either, to F16.
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { QuantDType } from '../src/gpu/tensor.ts';
import { memorySource } from '../src/io/files.ts';
import { readGgufHeader } from '../src/io/formats/gguf.ts';
import { QUANT_FORMATS } from '../src/gpu/weight-formats.ts';
import { f32ToF16Bits, quantizeValues } from '../src/model/quantize.ts';
import { GGML_TYPES, writeGgufFile, type GgufKv, type GgufStreamTensor } from './gguf-writer.ts';
import { tokenizerMetadata } from './gguf-tokenizer-metadata.ts';

export const GGUF_OUT_TYPES = ['f32', 'f16', 'q8_0', 'q4_0', 'q4_k', 'q6_k', 'q4_k_m'] as const;
export type GgufOutType = (typeof GGUF_OUT_TYPES)[number];
type Storage = 'f32' | 'f16' | QuantDType;

type Json = Record<string, unknown>;

/** Weights per block and bytes per block of a storage type (f32 and f16: blocks of one). */
function blockOf(storage: Storage): { blockSize: number; blockBytes: number } {
  if (storage === 'f32') return { blockSize: 1, blockBytes: 4 };
  if (storage === 'f16') return { blockSize: 1, blockBytes: 2 };
  return QUANT_FORMATS[storage];
}
const K_FALLBACK: Partial<Record<Storage, Storage>> = { q4_k: 'q5_0', q5_k: 'q5_1', q6_k: 'q8_0' };

/** llama.cpp's use_more_bits: the layers whose attn_v / ffn_down get more bits in the _M mixes. */
function useMoreBits(layer: number, layers: number): boolean {
  return layer < layers / 8 || layer >= (7 * layers) / 8 || (layer - Math.floor(layers / 8)) % 3 === 2;
}

/** The storage of one GGUF tensor for an output type (with llama.cpp's fallbacks). */
export function ggufTensorStorage(type: GgufOutType, name: string, ne: number[], layers: number, tied: boolean): Storage {
  if (ne.length === 1 || name === 'rope_freqs.weight') return 'f32';
  let storage: Storage;
  if (type === 'q4_k_m') {
    storage = 'q4_k';
    const layer = /^blk\.(\d+)\./.exec(name);
    if (name === 'output.weight' || (tied && name === 'token_embd.weight')) storage = 'q6_k';
    else if (layer && /\.(attn_v|ffn_down)\.weight$/.test(name) && useMoreBits(Number(layer[1]), layers)) storage = 'q6_k';
  } else {
    storage = type;
  }
  if (ne[0] % blockOf(storage).blockSize !== 0) storage = K_FALLBACK[storage] ?? storage;
  if (ne[0] % blockOf(storage).blockSize !== 0) storage = 'f16';
  return storage;
}

function storageBytes(storage: Storage, elements: number): number {
  const { blockSize, blockBytes } = blockOf(storage);
  return (elements / blockSize) * blockBytes;
}

/** Encodes f32 values (whole rows) as `storage`. */
function encode(storage: Storage, values: Float32Array): Uint8Array {
  if (storage === 'f32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (storage === 'f16') {
    const out = new Uint16Array(values.length);
    for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]);
    return new Uint8Array(out.buffer);
  }
  return quantizeValues(storage, values);
}

/** llama.cpp convert_hf_to_gguf LlamaModel.permute: per head, rows [halves] -> [interleaved pairs]. */
export function permuteRows(w: Float32Array, rows: number, cols: number, heads: number): Float32Array {
  const out = new Float32Array(w.length);
  const headRows = rows / heads;
  const half = headRows / 2;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < half; j++) {
      for (let s = 0; s < 2; s++) {
        const src = (h * headRows + s * half + j) * cols;
        const dst = (h * headRows + 2 * j + s) * cols;
        out.set(w.subarray(src, src + cols), dst);
      }
    }
  }
  return out;
}

/** The converter's rope_freqs for Llama 3-style `rope_scaling` (divisors of each inverse frequency). */
export function llama3RopeFactors(config: Json, headDim: number): number[] {
  const s = config.rope_scaling as Json;
  const base = config.rope_theta as number;
  const factor = s.factor as number;
  const low = (s.low_freq_factor as number) ?? 1;
  const high = (s.high_freq_factor as number) ?? 4;
  const old = (s.original_max_position_embeddings as number) ?? 8192;
  const lowWavelen = old / low;
  const highWavelen = old / high;
  const factors: number[] = [];
  for (let i = 0; i < headDim; i += 2) {
    const freq = 1 / Math.pow(base, Math.fround(i / headDim));
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) factors.push(1);
    else if (wavelen > lowWavelen) factors.push(factor);
    else {
      const smooth = (old / wavelen - low) / (high - low);
      factors.push(1 / ((1 - smooth) / factor + smooth));
    }
  }
  return factors;
}

const HF_TO_GGUF_LAYER: Record<string, string> = {
  input_layernorm: 'attn_norm', 'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v',
  'self_attn.o_proj': 'attn_output', post_attention_layernorm: 'ffn_norm', 'mlp.gate_proj': 'ffn_gate', 'mlp.up_proj': 'ffn_up',
  'mlp.down_proj': 'ffn_down',
  // Qwen3's per-head norms; Phi-3's fused projections (gate and up in one ffn_up of 2·ffn rows).
  'self_attn.q_norm': 'attn_q_norm', 'self_attn.k_norm': 'attn_k_norm', 'self_attn.qkv_proj': 'attn_qkv', 'mlp.gate_up_proj': 'ffn_up',
};

/** llama.cpp's names of a Gemma block's norms (post_attention_layernorm is its own norm there, not the one before the MLP). */
const GEMMA_TO_GGUF_LAYER: Record<string, string> = {
  ...HF_TO_GGUF_LAYER, post_attention_layernorm: 'post_attention_norm', pre_feedforward_layernorm: 'ffn_norm', post_feedforward_layernorm: 'post_ffw_norm',
};

/** llama.cpp's architecture name for a config.json model_type (Mistral converts as llama). */
const GGUF_ARCH: Record<string, string> = { qwen2: 'qwen2', qwen3: 'qwen3', smollm3: 'smollm3', phi3: 'phi3', gemma2: 'gemma2', gemma3_text: 'gemma3' };
/** The architectures whose converter permutes Wq / Wk rows to adjacent pairs (llama.cpp's "normal" RoPE). */
const PERMUTED = ['llama', 'smollm3'];

export function ggufNameFromHf(name: string, gemma = false): string {
  if (name === 'model.embed_tokens.weight') return 'token_embd.weight';
  if (name === 'model.norm.weight') return 'output_norm.weight';
  if (name === 'lm_head.weight') return 'output.weight';
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(name);
  const part = m && (gemma ? GEMMA_TO_GGUF_LAYER : HF_TO_GGUF_LAYER)[m[2]];
  if (!m || !part) throw new Error(`no GGUF name for ${name}`);
  return `blk.${m[1]}.${part}.${m[3]}`;
}

/**
 * The gemma2 / gemma3 keys llama.cpp's converter writes: attention.sliding_window, the soft-caps
 * (gemma2 both; gemma3 the final one when it has one), rope.freq_base_swa (gemma3's local base),
 * linear rope scaling, and for gemma3 a window period other than llama.cpp's default 6 as
 * attention.sliding_window_pattern. What llama.cpp cannot represent (gemma2 layers other than
 * its alternation, a gemma3 layout no period gives) is refused.
 */
function gemmaKvs(arch: 'gemma2' | 'gemma3', config: Json): Record<string, GgufKv> {
  const kvs: Record<string, GgufKv> = {};
  const layers = config.num_hidden_layers as number;
  const f32 = (value: number): GgufKv => ({ type: 'f32', value });
  if (config.sliding_window !== null && config.sliding_window !== undefined) kvs[`${arch}.attention.sliding_window`] = { type: 'u32', value: config.sliding_window as number };
  const final = config.final_logit_softcapping;
  const attn = config.attn_logit_softcapping;
  const types = config.layer_types as string[] | undefined;
  const slides = (period: number) => Array.from({ length: layers }, (_, i) => (i + 1) % period !== 0);
  const same = (a: boolean[], b: boolean[]) => a.every((v, i) => v === b[i]);
  if (arch === 'gemma2') {
    if (typeof attn === 'number') kvs['gemma2.attn_logit_softcapping'] = f32(attn);
    if (typeof final === 'number') kvs['gemma2.final_logit_softcapping'] = f32(final);
    if (types && !same(types.map((t) => t === 'sliding_attention'), slides(2))) throw new Error('GGUF writer: llama.cpp runs gemma2 with the window on even layers only');
  } else {
    if (typeof attn === 'number') throw new Error('GGUF writer: llama.cpp has no attention soft-cap for gemma3');
    if (typeof final === 'number') kvs['gemma3.final_logit_softcapping'] = f32(final);
    kvs['gemma3.rope.freq_base'] = f32((config.rope_theta as number | undefined) ?? 1e6);
    kvs['gemma3.rope.freq_base_swa'] = f32((config.rope_local_base_freq as number | undefined) ?? 10000);
    const sliding = types ? types.map((t) => t === 'sliding_attention') : slides((config.sliding_window_pattern as number | undefined) ?? 6);
    const period = [6, ...Array.from({ length: layers + 1 }, (_, p) => p + 1)].find((p) => same(sliding, slides(p)));
    if (period === undefined) throw new Error('GGUF writer: no window period gives these layer_types');
    if (period !== 6) kvs['gemma3.attention.sliding_window_pattern'] = { type: 'u32', value: period };
  }
  const scaling = config.rope_scaling as Json | null | undefined;
  if (scaling && scaling.rope_type === 'linear') {
    kvs[`${arch}.rope.scaling.type`] = { type: 'string', value: 'linear' };
    kvs[`${arch}.rope.scaling.factor`] = f32(scaling.factor as number);
  }
  return kvs;
}

const STORIES_GGUF = fileURLToPath(new URL('../public/models/stories260K/stories260K.gguf', import.meta.url));

/**
 * tokenizer.ggml.* for a folder's tokenizer.json (gguf-tokenizer-metadata.ts). A SentencePiece file
 * grown from stories260K's takes that GGUF's scores and types for its pieces, lower scores for the
 * generated ones in id order; any other (Gemma's, Phi-3's) gets scores from its merges.
 */
async function tokenizerKvs(dir: string, config: Json): Promise<Record<string, GgufKv>> {
  const read = (name: string): Json | undefined => {
    try {
      return JSON.parse(readFileSync(join(dir, name), 'utf8')) as Json;
    } catch {
      return undefined; // optional
    }
  };
  const tokenizerJson = read('tokenizer.json');
  if (!tokenizerJson) throw new Error(`${dir} has no readable tokenizer.json`);
  const tokenizerConfig = read('tokenizer_config.json') ?? {};
  let chatTemplate: string | undefined;
  try {
    chatTemplate = readFileSync(join(dir, 'chat_template.jinja'), 'utf8');
  } catch {
    // optional: tokenizer_config's chat_template, if any
  }
  const sources = { tokenizerJson, tokenizerConfig, modelConfig: config, generationConfig: read('generation_config.json'), chatTemplate };
  const model = tokenizerJson.model as { vocab: Record<string, number>; byte_fallback?: boolean };
  if (model.byte_fallback) {
    const sentencePiece = await storiesScores(model.vocab, config.vocab_size as number);
    if (sentencePiece) return tokenizerMetadata({ ...sources, sentencePiece });
  }
  return tokenizerMetadata(sources);
}

/** stories260K's scores and types for a vocabulary grown from its pieces; undefined for another vocabulary. */
async function storiesScores(vocab: Record<string, number>, vocabSize: number): Promise<{ scores: number[]; types: (number | undefined)[] } | undefined> {
  const stories = readFileSync(STORIES_GGUF);
  const header = await readGgufHeader(memorySource('stories260K.gguf', new Uint8Array(stories.buffer, stories.byteOffset, stories.byteLength)));
  const baseTokens = header.metadata['tokenizer.ggml.tokens'] as string[];
  const baseScores = header.metadata['tokenizer.ggml.scores'] as number[];
  const baseTypes = header.metadata['tokenizer.ggml.token_type'] as number[];
  if (baseTokens.some((t, i) => vocab[t] !== i)) return undefined;
  const scores = new Array<number>(vocabSize);
  const types = new Array<number | undefined>(vocabSize); // stories260K's, then as derived (NORMAL, or an added token's)
  let lowest = Math.min(...baseScores);
  for (let i = 0; i < vocabSize; i++) {
    if (i < baseTokens.length) {
      scores[i] = baseScores[i];
      types[i] = baseTypes[i];
    } else {
      scores[i] = --lowest;
    }
  }
  return { scores, types };
}

interface SafetensorsEntry {
  name: string;
  dtype: string;
  shape: number[];
  offset: number; // absolute
  byteLength: number;
}

function safetensorsEntries(path: string): SafetensorsEntry[] {
  const fd = openSync(path, 'r');
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const json = Buffer.alloc(n);
    readSync(fd, json, 0, n, 8);
    const header = JSON.parse(json.toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
    return Object.entries(header)
      .filter(([k]) => k !== '__metadata__')
      .map(([name, t]) => ({ name, dtype: t.dtype, shape: t.shape, offset: 8 + n + t.data_offsets[0], byteLength: t.data_offsets[1] - t.data_offsets[0] }));
  } finally {
    closeSync(fd);
  }
}

/** Reads `count` elements from element `start` of a tensor as f32. */
function readElements(fd: number, t: SafetensorsEntry, start: number, count: number): Float32Array {
  const bytesPer = t.dtype === 'F32' ? 4 : 2;
  const buf = Buffer.alloc(count * bytesPer);
  readSync(fd, buf, 0, buf.length, t.offset + start * bytesPer);
  const out = new Float32Array(count);
  if (t.dtype === 'F32') {
    for (let i = 0; i < count; i++) out[i] = buf.readFloatLE(i * 4);
  } else if (t.dtype === 'BF16') {
    const u32 = new Uint32Array(out.buffer);
    for (let i = 0; i < count; i++) u32[i] = buf.readUInt16LE(i * 2) << 16;
  } else {
    throw new Error(`${t.name}: unsupported safetensors dtype ${t.dtype}`);
  }
  return out;
}

const CHUNK_ELEMENTS = 1 << 20;

export interface GgufWriteResult {
  path: string;
  bytes: number;
  /** The storage chosen per GGUF tensor name. */
  storage: Record<string, Storage>;
}

/** Writes `out` (a .gguf path) from the generated folder `dir` in the output type `type`. */
export async function writeGgufFromHf(dir: string, out: string, type: GgufOutType): Promise<GgufWriteResult> {
  if (!GGUF_OUT_TYPES.includes(type)) throw new Error(`GGUF type must be one of ${GGUF_OUT_TYPES.join(', ')} (got ${type})`);
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Json;
  const arch = GGUF_ARCH[String(config.model_type)] ?? 'llama';
  const gemma = arch === 'gemma2' || arch === 'gemma3';
  const hidden = config.hidden_size as number;
  const heads = config.num_attention_heads as number;
  const kvHeads = (config.num_key_value_heads as number | undefined) ?? heads;
  const headDim = (config.head_dim as number | undefined) ?? hidden / heads;
  const layers = config.num_hidden_layers as number;
  const tied = config.tie_word_embeddings === true;
  const rotaryDims = Math.floor(headDim * ((config.partial_rotary_factor as number | undefined) ?? 1));
  if (arch === 'smollm3') {
    // llama.cpp has no key for SmolLM3's RoPE-less layers: it leaves RoPE out of every 4th layer.
    const list = (config.no_rope_layers as number[] | undefined) ?? [];
    if (list.some((v, l) => v !== ((l + 1) % 4 === 0 ? 0 : 1))) {
      throw new Error(`GGUF writer: smollm3 no_rope_layers ${JSON.stringify(list)} is not llama.cpp's fixed pattern (every 4th layer without RoPE)`);
    }
  }

  const kvs: Record<string, GgufKv> = {
    'general.architecture': { type: 'string', value: arch },
    // Not the model type: llama.cpp keys per-token attributes on the name (a name containing
    // "phi3" makes it look up Phi-3's <unk>, <s>, </s> and <|endoftext|>, and refuse the file
    // without them: "error loading model vocabulary: unordered_map::at: key not found").
    'general.name': { type: 'string', value: 'random weights (webgpu-llama generate-models)' },
    'general.file_type': { type: 'u32', value: { f32: 0, f16: 1, q4_0: 2, q8_0: 7, q4_k: 14, q4_k_m: 15, q6_k: 18 }[type] },
    'general.quantization_version': { type: 'u32', value: 2 },
    'general.alignment': { type: 'u32', value: 32 },
    [`${arch}.vocab_size`]: { type: 'u32', value: config.vocab_size as number },
    [`${arch}.context_length`]: { type: 'u32', value: config.max_position_embeddings as number },
    [`${arch}.embedding_length`]: { type: 'u32', value: hidden },
    [`${arch}.block_count`]: { type: 'u32', value: layers },
    [`${arch}.feed_forward_length`]: { type: 'u32', value: config.intermediate_size as number },
    [`${arch}.attention.head_count`]: { type: 'u32', value: heads },
    [`${arch}.attention.head_count_kv`]: { type: 'u32', value: kvHeads },
    [`${arch}.attention.key_length`]: { type: 'u32', value: headDim },
    [`${arch}.attention.value_length`]: { type: 'u32', value: headDim },
    [`${arch}.rope.dimension_count`]: { type: 'u32', value: rotaryDims },
    [`${arch}.rope.freq_base`]: { type: 'f32', value: (config.rope_theta as number | undefined) ?? 10000 },
    [`${arch}.attention.layer_norm_rms_epsilon`]: { type: 'f32', value: config.rms_norm_eps as number },
    ...(gemma ? gemmaKvs(arch, config) : {}),
    ...(await tokenizerKvs(dir, config)),
  };
  if (arch === 'phi3') {
    // As the converter writes Phi-3: the sliding window, and LongRoPE's original context and
    // attention factor sqrt(1 + ln(scale) / ln(original)) with scale = max / original positions.
    const original = config.original_max_position_embeddings as number | undefined;
    if (typeof config.sliding_window === 'number') kvs['phi3.attention.sliding_window'] = { type: 'u32', value: config.sliding_window };
    if (original !== undefined) {
      const scale = (config.max_position_embeddings as number) / original;
      kvs['phi3.rope.scaling.original_context_length'] = { type: 'u32', value: original };
      kvs['phi3.rope.scaling.attn_factor'] = { type: 'f32', value: scale <= 1 ? 1 : Math.sqrt(1 + Math.log(scale) / Math.log(original)) };
    }
  }

  const stPath = join(dir, 'model.safetensors');
  const entries = safetensorsEntries(stPath);
  const fd = openSync(stPath, 'r');
  const storage: Record<string, Storage> = {};
  try {
    const tensors: GgufStreamTensor[] = [];
    const scaling = config.rope_scaling as Json | null | undefined;
    if (arch === 'llama' && scaling && scaling.rope_type === 'llama3') {
      const factors = Float32Array.from(llama3RopeFactors(config, headDim));
      storage['rope_freqs.weight'] = 'f32';
      tensors.push({ name: 'rope_freqs.weight', ne: [factors.length], ggmlType: GGML_TYPES.f32, byteLength: factors.byteLength, write: (emit) => emit(new Uint8Array(factors.buffer)) });
    } else if (gemma && scaling && scaling.rope_type === 'linear') {
      // Written by gemmaKvs (rope.scaling.type / factor).
    } else if (arch === 'phi3' && scaling && (scaling.type === 'longrope' || scaling.type === 'su' || scaling.rope_type === 'longrope')) {
      for (const [which, key] of [['long', 'long_factor'], ['short', 'short_factor']] as const) {
        const factors = Float32Array.from(scaling[key] as number[]);
        if (factors.length !== rotaryDims / 2) throw new Error(`GGUF writer: ${key} has ${factors.length} values for ${rotaryDims} rotated dims`);
        const name = `rope_factors_${which}.weight`;
        storage[name] = 'f32';
        tensors.push({ name, ne: [factors.length], ggmlType: GGML_TYPES.f32, byteLength: factors.byteLength, write: (emit) => emit(new Uint8Array(factors.buffer)) });
      }
    } else if (scaling && scaling.rope_type !== undefined && scaling.rope_type !== 'default') {
      throw new Error(`GGUF writer: rope_scaling ${JSON.stringify(scaling)} is not written`);
    }
    // llama.cpp's order: token_embd first, then the layers, then output_norm / output.
    const order = (n: string) => (n === 'model.embed_tokens.weight' ? -1 : n.startsWith('model.layers.') ? 0 : 1);
    const sorted = [...entries].sort((a, b) => {
      const d = order(a.name) - order(b.name);
      if (d) return d;
      const la = /^model\.layers\.(\d+)\./.exec(a.name);
      const lb = /^model\.layers\.(\d+)\./.exec(b.name);
      return la && lb ? Number(la[1]) - Number(lb[1]) : 0;
    });
    for (const t of sorted) {
      const name = ggufNameFromHf(t.name, gemma);
      // The converter adds Gemma's 1 to its norm weights (x·(1 + w) stored as x·w').
      const shift = gemma && t.name.endsWith('norm.weight') ? 1 : 0;
      const ne = [...t.shape].reverse();
      const elements = t.shape.reduce((a, b) => a * b, 1);
      const s = ggufTensorStorage(type, name, ne, layers, tied);
      storage[name] = s;
      const cols = ne[0];
      const rows = elements / cols;
      const permuteHeads = PERMUTED.includes(arch) ? (/\.attn_q\.weight$/.test(name) ? heads : /\.attn_k\.weight$/.test(name) ? kvHeads : 0) : 0;
      tensors.push({
        name,
        ne,
        ggmlType: GGML_TYPES[s],
        byteLength: storageBytes(s, elements),
        write(emit) {
          if (permuteHeads) {
            emit(encode(s, permuteRows(readElements(fd, t, 0, elements), rows, cols, permuteHeads)));
            return;
          }
          const rowsPerChunk = Math.max(1, Math.floor(CHUNK_ELEMENTS / cols));
          for (let r = 0; r < rows; r += rowsPerChunk) {
            const n = Math.min(rowsPerChunk, rows - r);
            const values = readElements(fd, t, r * cols, n * cols);
            if (shift) for (let i = 0; i < values.length; i++) values[i] += shift;
            emit(encode(s, values));
          }
        },
      });
    }
    const bytes = writeGgufFile(out, kvs, tensors);
    return { path: out, bytes, storage };
  } finally {
    closeSync(fd);
  }
}
