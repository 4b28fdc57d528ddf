// The `tokenizer.ggml.*` metadata llama.cpp's convert_hf_to_gguf.py writes for a Hugging Face
// tokenizer.json (read there to learn what it writes; nothing copied), for gguf-from-hf.ts and the
// tokenizer tests:
//
// - SentencePiece-style files (BPE with byte_fallback: Llama 2, Phi-3, Gemma) as model `llama`:
//   tokens, scores and token types. The converter takes scores and types from tokenizer.model; a
//   folder without one gets scores that rank the pieces as the tokenizer.json's merges do (the
//   first merge forming a piece decides its rank), which is all a reader needs to rebuild the same
//   merges. Types: `<0xNN>` BYTE, the unk token UNKNOWN, added tokens CONTROL when special or when
//   they look special (the converter's does_token_look_special), else USER_DEFINED.
//   `add_space_prefix` false where the normalizer prepends no ▁ (Gemma), as the Gemma converters write.
// - Byte-level BPE files as model `gpt2`: tokens, types (added tokens as above) and merges, with
//   `tokenizer.ggml.pre` named by what the pre-tokenizer does, as the converter's hash of a test
//   encoding names it: Llama 3's split with ignore_merges `llama-bpe`, without it `smaug-bpe`
//   (SmolLM3's file), Qwen2's `qwen2` (Qwen2.5, Qwen3), GPT-4o's `gpt-4o` (Phi-4-mini), digits then
//   GPT-2 `smollm`, GPT-2's own `gpt2`.
// - Ids the model's vocab_size has beyond the file's tokens: `[PADn]`, UNUSED.
// - bos / eos / unk / pad ids from tokenizer_config's tokens (config.json's ids where it names none),
//   add_bos_token / add_eos_token (tokenizer_config, else whether the post_processor puts a special
//   token first), the chat template as tokenizer.chat_template.
import { SPLIT_PATTERNS, TokenType } from '../src/tokenizer/gguf-tokenizer.ts';
import type { GgufKv } from './gguf-writer.ts';

type Json = Record<string, unknown>;

export interface TokenizerMetadataSources {
  tokenizerJson: Json;
  tokenizerConfig: Json;
  /** config.json: vocab_size (the token list is padded to it), bos/eos ids where tokenizer_config names none. */
  modelConfig?: Json;
  /** generation_config.json: a second end-of-generation id is written as the EOT token. */
  generationConfig?: Json;
  /** The chat template, where it is not tokenizer_config's string (chat_template.jinja). */
  chatTemplate?: string;
  /** SentencePiece scores and types by id, where the caller has the model's own (a type left out: as derived here). */
  sentencePiece?: { scores: number[]; types: (number | undefined)[] };
}

/** llama.cpp's convert_hf_to_gguf.py `does_token_look_special`. */
export function looksSpecial(token: string): boolean {
  return (
    ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(token) ||
    (token.startsWith('<|') && token.endsWith('|>')) ||
    (token.startsWith('<｜') && token.endsWith('｜>')) ||
    (token.startsWith('<start_of_') && token.endsWith('>')) ||
    (token.startsWith('<end_of_') && token.endsWith('>'))
  );
}

function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object' && typeof (value as Json).content === 'string') return (value as Json).content as string;
  return undefined;
}

function firstId(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (Array.isArray(value) && typeof value[0] === 'number') return value[0];
  return undefined;
}

function pretokenizerSteps(preTokenizer: unknown): Json[] {
  if (!preTokenizer || typeof preTokenizer !== 'object') return [];
  const p = preTokenizer as Json;
  return p.type === 'Sequence' ? ((p.pretokenizers as Json[]) ?? []) : [p];
}

/** llama.cpp's `tokenizer.ggml.pre` for a byte-level tokenizer.json, by what its pre-tokenizer does. */
export function byteLevelPreName(tokenizerJson: Json): string {
  const steps = pretokenizerSteps(tokenizerJson.pre_tokenizer);
  const model = tokenizerJson.model as Json;
  const split = steps.find((s) => s.type === 'Split');
  const regex = split ? ((split.pattern as Json | undefined)?.Regex as string | undefined) : undefined;
  if (regex === SPLIT_PATTERNS.llama3) return model.ignore_merges === true ? 'llama-bpe' : 'smaug-bpe';
  if (regex === SPLIT_PATTERNS.qwen2) return 'qwen2';
  if (regex === SPLIT_PATTERNS.gpt4o) return 'gpt-4o';
  const byteLevel = steps.find((s) => s.type === 'ByteLevel');
  if (!split && byteLevel?.use_regex === true) {
    const digits = steps.find((s) => s.type === 'Digits');
    if (!digits && steps.length === 1) return 'gpt-2'; // llama.cpp's name (it refuses 'gpt2')
    if (digits?.individual_digits === true && steps.length === 2 && steps[0] === digits) return 'smollm';
  }
  throw new Error(`no llama.cpp pre-tokenizer name for this tokenizer.json's pre_tokenizer: ${JSON.stringify(tokenizerJson.pre_tokenizer).slice(0, 200)}`);
}

/**
 * Scores that rank SentencePiece pieces as the tokenizer.json's merges do: the piece the first
 * merge forms scores highest; pieces no merge forms (characters, bytes, added tokens) score 0.
 */
export function scoresFromMerges(tokens: readonly string[], merges: readonly [string, string][]): number[] {
  const rank = new Map<string, number>();
  merges.forEach(([left, right], i) => {
    const piece = left + right;
    if (!rank.has(piece)) rank.set(piece, i);
  });
  return tokens.map((t) => (rank.has(t) ? -1 - rank.get(t)! : 0));
}

/** The tokenizer.ggml.* key-value pairs (and tokenizer.chat_template) for a tokenizer.json. */
export function tokenizerMetadata(sources: TokenizerMetadataSources): Record<string, GgufKv> {
  const { tokenizerJson, tokenizerConfig } = sources;
  const modelConfig = sources.modelConfig ?? {};
  const generationConfig = sources.generationConfig ?? {};
  const model = tokenizerJson.model as { vocab: Record<string, number>; merges?: ([string, string] | string)[]; byte_fallback?: boolean; unk_token?: string | null };
  const added = (tokenizerJson.added_tokens as { id: number; content: string; special: boolean }[] | undefined) ?? [];
  const merges = (model.merges ?? []).map((m): [string, string] => {
    if (typeof m !== 'string') return [m[0], m[1]];
    const space = m.indexOf(' ', 1);
    return [m.slice(0, space), m.slice(space + 1)];
  });

  // The model's vocab_size rows, as the converter writes them: ids past them (Gemma 3's image
  // token) are left out; without a vocab_size, every id of the file.
  let count = typeof modelConfig.vocab_size === 'number' ? modelConfig.vocab_size : 0;
  if (typeof modelConfig.vocab_size !== 'number') {
    for (const id of Object.values(model.vocab)) count = Math.max(count, id + 1);
    for (const t of added) count = Math.max(count, t.id + 1);
  }
  const tokens = new Array<string>(count);
  const types = new Array<number>(count).fill(TokenType.NORMAL);
  for (const [piece, id] of Object.entries(model.vocab)) if (id < count) tokens[id] = piece;
  const sentencePiece = model.byte_fallback === true;
  const unkText = tokenText(tokenizerConfig.unk_token) ?? model.unk_token ?? undefined;
  if (sentencePiece) {
    for (let id = 0; id < count; id++) {
      if (tokens[id] !== undefined && /^<0x[0-9A-F]{2}>$/.test(tokens[id])) types[id] = TokenType.BYTE;
      if (tokens[id] !== undefined && tokens[id] === unkText) types[id] = TokenType.UNKNOWN;
    }
  }
  for (const t of added) {
    if (t.id >= count) continue;
    tokens[t.id] = t.content;
    if (types[t.id] !== TokenType.UNKNOWN) types[t.id] = t.special || looksSpecial(t.content) ? TokenType.CONTROL : TokenType.USER_DEFINED;
  }
  for (let id = 0; id < count; id++) {
    if (tokens[id] === undefined) {
      tokens[id] = `[PAD${id}]`;
      types[id] = TokenType.UNUSED;
    }
  }

  const kvs: Record<string, GgufKv> = {};
  if (sentencePiece) {
    const given = sources.sentencePiece;
    kvs['tokenizer.ggml.model'] = { type: 'string', value: 'llama' };
    kvs['tokenizer.ggml.tokens'] = { type: 'string[]', value: tokens };
    kvs['tokenizer.ggml.scores'] = { type: 'f32[]', value: given?.scores ?? scoresFromMerges(tokens, merges) };
    kvs['tokenizer.ggml.token_type'] = { type: 'i32[]', value: types.map((t, id) => given?.types[id] ?? t) };
    if (!prependsSpace(tokenizerJson.normalizer)) kvs['tokenizer.ggml.add_space_prefix'] = { type: 'bool', value: false };
  } else {
    kvs['tokenizer.ggml.model'] = { type: 'string', value: 'gpt2' };
    kvs['tokenizer.ggml.pre'] = { type: 'string', value: byteLevelPreName(tokenizerJson) };
    kvs['tokenizer.ggml.tokens'] = { type: 'string[]', value: tokens };
    kvs['tokenizer.ggml.token_type'] = { type: 'i32[]', value: types };
    kvs['tokenizer.ggml.merges'] = { type: 'string[]', value: merges.map(([l, r]) => `${l} ${r}`) };
  }

  const idOf = (key: string, configKey: string): number | undefined => {
    const text = tokenText(tokenizerConfig[key]);
    const id = text !== undefined ? tokens.indexOf(text) : -1;
    return id >= 0 ? id : firstId(modelConfig[configKey]);
  };
  const bos = idOf('bos_token', 'bos_token_id');
  const eos = idOf('eos_token', 'eos_token_id');
  const unk = unkText !== undefined && tokens.indexOf(unkText) >= 0 ? tokens.indexOf(unkText) : undefined;
  const pad = idOf('pad_token', 'pad_token_id');
  if (bos !== undefined) kvs['tokenizer.ggml.bos_token_id'] = { type: 'u32', value: bos };
  if (eos !== undefined) kvs['tokenizer.ggml.eos_token_id'] = { type: 'u32', value: eos };
  if (unk !== undefined) kvs['tokenizer.ggml.unknown_token_id'] = { type: 'u32', value: unk };
  if (pad !== undefined) kvs['tokenizer.ggml.padding_token_id'] = { type: 'u32', value: pad };
  // A second end-of-generation id of generation_config (Llama 3's <|eot_id|>) is the EOT token.
  const generationEos = Array.isArray(generationConfig.eos_token_id) ? (generationConfig.eos_token_id as number[]) : [];
  const eot = generationEos.find((id) => id !== eos);
  if (eot !== undefined) kvs['tokenizer.ggml.eot_token_id'] = { type: 'u32', value: eot };
  kvs['tokenizer.ggml.add_bos_token'] = { type: 'bool', value: typeof tokenizerConfig.add_bos_token === 'boolean' ? tokenizerConfig.add_bos_token : startsWithSpecial(tokenizerJson.post_processor) };
  kvs['tokenizer.ggml.add_eos_token'] = { type: 'bool', value: tokenizerConfig.add_eos_token === true };
  const template = sources.chatTemplate ?? (typeof tokenizerConfig.chat_template === 'string' ? tokenizerConfig.chat_template : undefined);
  if (template !== undefined) kvs['tokenizer.chat_template'] = { type: 'string', value: template };
  return kvs;
}

/** Whether a normalizer prepends ▁ (Llama 2's legacy files do; Gemma's do not). */
function prependsSpace(normalizer: unknown): boolean {
  if (!normalizer || typeof normalizer !== 'object') return false;
  const n = normalizer as Json;
  if (n.type === 'Prepend') return n.prepend === '\u2581';
  if (n.type === 'Sequence') return ((n.normalizers as unknown[]) ?? []).some(prependsSpace);
  return false;
}

/** Whether a TemplateProcessing post_processor puts a special token before the text (a BOS). */
function startsWithSpecial(postProcessor: unknown): boolean {
  if (!postProcessor || typeof postProcessor !== 'object') return false;
  const p = postProcessor as Json;
  if (p.type === 'Sequence') return ((p.processors as unknown[]) ?? []).some(startsWithSpecial);
  if (p.type !== 'TemplateProcessing' || !Array.isArray(p.single)) return false;
  return (p.single[0] as Json | undefined)?.SpecialToken !== undefined;
}
