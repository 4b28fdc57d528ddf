// A tokenizer.json built from a GGUF's `tokenizer.ggml.*` keys, so a GGUF model is tokenized by the
// same @huggingface/tokenizers code path as a Hugging Face folder.
//
// 'llama' (SentencePiece BPE): the GGUF has pieces, scores and token types but no merges. The merges
// are derived as Hugging Face's converter (transformers' SentencePieceExtractor) derives them:
// every split of a piece into two pieces that are both in the vocabulary is a merge; merges rank by
// the score of the piece they form, higher first (a stable sort), and the splits of one piece by
// (id of left, id of right). Normalizer, decoder and post_processor mirror the "legacy" Llama
// tokenizer.json (Prepend ▁, spaces -> ▁, byte fallback).
//
// With `tokenizer.ggml.add_space_prefix` false (Gemma's vocabularies) no ▁ is prepended and
// decoding strips no leading space, as Gemma's tokenizer.json does.
//
// 'gpt2' (byte-level BPE, Llama 3, Qwen2/Qwen3, SmolLM, SmolLM3, Phi-4-mini): vocabulary and
// `tokenizer.ggml.merges`, with the pre-tokenizer regex chosen by `tokenizer.ggml.pre` (llama.cpp's
// names: llama-bpe, smaug-bpe, qwen2, deepseek-r1-qwen, smollm, gpt-4o, gpt2, ...).
//
// The tokenizer_config built alongside carries the chat templates (`tokenizer.chat_template` as
// 'default', `tokenizer.chat_template.<name>` by name) and the bos/eos/unk/pad tokens' pieces, so
// templates see the same variables as from a Hugging Face folder.
import type { GgufMetadata, GgufValue } from '../io/formats/gguf.ts';
import { HfTokenizer } from './hf-tokenizer.ts';
import { checkGgufVocabulary, checkSentencePieceWork } from './tokenizer-limits.ts';

/** llama.cpp token types. */
export const TokenType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface GgufTokenizerParts {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  bosId: number | null;
  eosIds: number[];
  addBos: boolean;
  /** UNUSED tokens (converters' filler, e.g. Qwen2's [PADn]): llama.cpp decodes them to nothing. */
  unusedIds: number[];
  /** Ids of a piece listed again later: they decode as its last id. */
  aliasIds: Map<number, number>;
}

function stringArray(metadata: GgufMetadata, key: string): string[] {
  const v = metadata[key];
  if (!Array.isArray(v)) throw new Error(`GGUF metadata has no ${key}`);
  return v as string[];
}

function numberArray(metadata: GgufMetadata, key: string): number[] | undefined {
  const v = metadata[key];
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw new Error(`GGUF metadata ${key} is not an array`);
  return (v as GgufValue[]).map((x) => Number(x));
}

function optionalId(metadata: GgufMetadata, key: string, vocabSize: number): number | null {
  const v = metadata[key];
  if (typeof v !== 'number' && typeof v !== 'bigint') return null;
  const id = Number(v);
  return id >= 0 && id < vocabSize ? id : null;
}

function optionalBool(metadata: GgufMetadata, key: string): boolean | undefined {
  const v = metadata[key];
  return typeof v === 'boolean' ? v : undefined;
}

/**
 * Which added tokens eat the whitespace after them. Phi-3's tokenizer.json marks its chat tokens
 * (<|user|>, <|assistant|>, <|end|>, ..., and </s>) `rstrip`, so "<|user|>\nHi" encodes without the
 * newline; a GGUF has no such flag, and llama.cpp's vocabulary loader restores it for a model whose
 * general.name says phi-3 or phi3: every added token but <unk>, <s> and <|endoftext|>. Here also for
 * a SentencePiece vocabulary of architecture `phi3` whatever its name ("Phi 3.5 Mini Instruct"), as
 * its tokenizer.json has it (Phi-4-mini, also `phi3`, has a byte-level vocabulary without the flag).
 */
function phi3RightStrip(metadata: GgufMetadata, model: unknown): (token: string) => boolean {
  const name = typeof metadata['general.name'] === 'string' ? (metadata['general.name'] as string).toLowerCase() : '';
  const phi3 = (model === 'llama' && metadata['general.architecture'] === 'phi3') || name.includes('phi-3') || name.includes('phi3');
  if (!phi3) return () => false;
  return (token) => !['<unk>', '<s>', '<|endoftext|>'].includes(token);
}

/** SentencePiece merges from pieces and scores, exactly as transformers' converter orders them. */
export function mergesFromScores(tokens: readonly string[], scores: readonly number[]): [string, string][] {
  const vocab = new Map<string, number>();
  tokens.forEach((t, i) => vocab.set(t, i)); // a duplicate piece keeps its last id, as a Python dict would
  const candidates: { left: string; right: string; score: number }[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < tokens.length; i++) {
    const piece = tokens[i];
    if (seen.has(piece)) continue; // dict iteration visits each piece once, at its first position
    seen.add(piece);
    const score = scores[vocab.get(piece)!];
    const chars = Array.from(piece); // split by code points, as Python slices strings
    if (chars.length < 2) continue;
    const local: { left: string; right: string; l: number; r: number }[] = [];
    for (let k = 1; k < chars.length; k++) {
      const left = chars.slice(0, k).join('');
      const right = chars.slice(k).join('');
      const l = vocab.get(left);
      const r = vocab.get(right);
      if (l !== undefined && r !== undefined) local.push({ left, right, l, r });
    }
    local.sort((a, b) => a.l - b.l || a.r - b.r);
    for (const m of local) candidates.push({ left: m.left, right: m.right, score });
  }
  // Array.prototype.sort is stable: equal scores keep their order.
  candidates.sort((a, b) => b.score - a.score);
  return candidates.map((c) => [c.left, c.right]);
}

/** GPT-2 style pre-tokenizer regexes, by `tokenizer.ggml.pre` (exported for the GGUF converter script). */
const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** tiktoken's o200k_base (GPT-4o), which Phi-4-mini's tokenizer.json splits with: case runs, contractions attached. */
const GPT4O_PATTERN =
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" +
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" +
  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

export const SPLIT_PATTERNS = { llama3: LLAMA3_PATTERN, qwen2: QWEN2_PATTERN, gpt4o: GPT4O_PATTERN } as const;

interface ByteLevelParts {
  preTokenizer: unknown;
  normalizer: unknown;
  decoder: unknown;
  ignoreMerges: boolean;
}

/**
 * Pre-tokenizer, normalizer, decoder and ignore_merges of the family's own tokenizer.json, by
 * `tokenizer.ggml.pre` (Llama 3's and Qwen2's are the files Meta and Qwen ship, field for field).
 */
function byteLevelPreTokenizer(pre: string): ByteLevelParts {
  const split = (pattern: string, trimOffsets: boolean) => ({
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: trimOffsets, use_regex: false },
    ],
  });
  const gpt2Decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  switch (pre) {
    case 'llama3':
    case 'llama-v3':
    case 'llama-bpe':
      return { preTokenizer: split(LLAMA3_PATTERN, true), normalizer: null, decoder: gpt2Decoder, ignoreMerges: true };
    case 'smaug-bpe':
      // Llama 3's split without ignore_merges: llama.cpp's converter names so the Llama 3 vocabularies
      // whose tokenizer.json lacks `ignore_merges` (SmolLM3's, Smaug's), and llama.cpp reads it so.
      return { preTokenizer: split(LLAMA3_PATTERN, true), normalizer: null, decoder: gpt2Decoder, ignoreMerges: false };
    case 'gpt-4o':
      // Phi-4-mini (llama.cpp's name for the o200k split).
      return {
        preTokenizer: split(GPT4O_PATTERN, false),
        normalizer: null,
        decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
        ignoreMerges: false,
      };
    case 'qwen2':
    case 'deepseek-r1-qwen':
      return {
        preTokenizer: split(QWEN2_PATTERN, false),
        normalizer: { type: 'NFC' },
        decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
        ignoreMerges: false,
      };
    case 'smollm':
    case 'starcoder':
    case 'refact':
      // Every digit its own word first (SmolLM's and StarCoder's tokenizer.json: Digits with
      // individual_digits; llama.cpp: \p{N} before GPT-2's pattern), then GPT-2's byte level.
      return {
        preTokenizer: {
          type: 'Sequence',
          pretokenizers: [
            { type: 'Digits', individual_digits: true },
            { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
          ],
        },
        normalizer: null,
        decoder: gpt2Decoder,
        ignoreMerges: false,
      };
    case 'default':
    case 'gpt2':
    case 'gpt-2':
      return {
        preTokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
        normalizer: null,
        decoder: gpt2Decoder,
        ignoreMerges: false,
      };
    default:
      throw new Error(`Unsupported GGUF pre-tokenizer '${pre}' (tokenizer.ggml.pre)`);
  }
}

/** The tokenizer.json (and settings) a GGUF's tokenizer.ggml.* keys describe. */
export function ggufTokenizerParts(metadata: GgufMetadata): GgufTokenizerParts {
  const model = metadata['tokenizer.ggml.model'];
  if (typeof model !== 'string') throw new Error('GGUF metadata has no tokenizer (tokenizer.ggml.model)');
  const tokens = stringArray(metadata, 'tokenizer.ggml.tokens');
  const rawMerges = metadata['tokenizer.ggml.merges'];
  checkGgufVocabulary(tokens, Array.isArray(rawMerges) ? rawMerges : undefined);
  const n = tokens.length;
  const types = numberArray(metadata, 'tokenizer.ggml.token_type') ?? new Array<number>(n).fill(TokenType.NORMAL);
  if (types.length !== n) throw new Error('GGUF tokenizer.ggml.token_type does not match tokenizer.ggml.tokens in length');

  const bosId = optionalId(metadata, 'tokenizer.ggml.bos_token_id', n);
  const eosId = optionalId(metadata, 'tokenizer.ggml.eos_token_id', n);
  const eotId = optionalId(metadata, 'tokenizer.ggml.eot_token_id', n);
  const eomId = optionalId(metadata, 'tokenizer.ggml.eom_token_id', n);
  let unkId = optionalId(metadata, 'tokenizer.ggml.unknown_token_id', n);
  const padId = optionalId(metadata, 'tokenizer.ggml.padding_token_id', n);
  const eosIds = [eosId, eotId, eomId].filter((id): id is number => id !== null);

  // The vocabulary. A piece listed twice keeps its last id, as llama.cpp's token_to_id map and
  // transformers' GGUF converter (a dict) do; its other ids decode as that piece (aliasIds).
  const vocab: Record<string, number> = Object.create(null); // '__proto__' is a plain key
  for (let i = 0; i < n; i++) vocab[tokens[i]] = i;
  const aliasIds = new Map<number, number>();
  for (let i = 0; i < n; i++) if (vocab[tokens[i]] !== i) aliasIds.set(i, vocab[tokens[i]]);

  // Special and user-defined tokens are "added tokens": matched whole in the text, never split.
  const rstrip = phi3RightStrip(metadata, model);
  const addedTokens: Record<string, unknown>[] = [];
  for (let i = 0; i < n; i++) {
    const t = types[i];
    const special = t === TokenType.CONTROL || t === TokenType.UNKNOWN;
    if (!special && t !== TokenType.USER_DEFINED) continue;
    if (tokens[i].length === 0) continue;
    addedTokens.push({ id: i, content: tokens[i], single_word: false, lstrip: false, rstrip: rstrip(tokens[i]), normalized: false, special });
  }

  const bosToken = bosId !== null ? tokens[bosId] : null;
  const eosToken = eosId !== null ? tokens[eosId] : null;
  const bos = bosId !== null && bosToken !== null ? { token: bosToken, id: bosId } : null;
  const eos = eosId !== null && eosToken !== null ? { token: eosToken, id: eosId } : null;
  const addEos = optionalBool(metadata, 'tokenizer.ggml.add_eos_token') ?? false;

  let tokenizerJson: Record<string, unknown>;
  let addBos: boolean;
  if (model === 'llama') {
    const scores = numberArray(metadata, 'tokenizer.ggml.scores');
    if (!scores || scores.length !== n) throw new Error('GGUF SentencePiece tokenizer has no tokenizer.ggml.scores of the vocabulary length');
    checkSentencePieceWork(tokens);
    if (unkId === null) unkId = types.indexOf(TokenType.UNKNOWN) >= 0 ? types.indexOf(TokenType.UNKNOWN) : null;
    const addSpacePrefix = optionalBool(metadata, 'tokenizer.ggml.add_space_prefix') ?? true;
    addBos = optionalBool(metadata, 'tokenizer.ggml.add_bos_token') ?? true;
    const normalizers: unknown[] = [];
    if (addSpacePrefix) normalizers.push({ type: 'Prepend', prepend: '\u2581' });
    normalizers.push({ type: 'Replace', pattern: { String: ' ' }, content: '\u2581' });
    const decoders: unknown[] = [
      { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
      { type: 'ByteFallback' },
      { type: 'Fuse' },
    ];
    if (addSpacePrefix) decoders.push({ type: 'Strip', content: ' ', start: 1, stop: 0 });
    tokenizerJson = {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: addedTokens,
      normalizer: { type: 'Sequence', normalizers },
      pre_tokenizer: null,
      post_processor: affixTemplate(addBos ? bos : null, addEos ? eos : null),
      decoder: { type: 'Sequence', decoders },
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: unkId !== null ? tokens[unkId] : null,
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: true,
        byte_fallback: true,
        ignore_merges: false,
        vocab,
        merges: mergesFromScores(tokens, scores),
      },
    };
  } else if (model === 'gpt2') {
    if (!Array.isArray(rawMerges)) throw new Error('GGUF byte-level BPE tokenizer has no tokenizer.ggml.merges');
    const merges = (rawMerges as string[]).map((m) => {
      const space = m.indexOf(' ', 1);
      if (space < 0) throw new Error(`GGUF tokenizer.ggml.merges entry ${JSON.stringify(m)} is not "left right"`);
      return [m.slice(0, space), m.slice(space + 1)];
    });
    const pre = typeof metadata['tokenizer.ggml.pre'] === 'string' ? (metadata['tokenizer.ggml.pre'] as string) : 'default';
    const { preTokenizer, normalizer, decoder, ignoreMerges } = byteLevelPreTokenizer(pre);
    addBos = optionalBool(metadata, 'tokenizer.ggml.add_bos_token') ?? ignoreMerges; // llama3: yes; others: no
    tokenizerJson = {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: addedTokens,
      normalizer,
      pre_tokenizer: preTokenizer,
      post_processor: affixTemplate(addBos ? bos : null, addEos ? eos : null),
      decoder,
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: unkId !== null ? tokens[unkId] : null,
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: false,
        byte_fallback: false,
        ignore_merges: ignoreMerges,
        vocab,
        merges,
      },
    };
  } else {
    throw new Error(`Unsupported GGUF tokenizer model '${model}' (tokenizer.ggml.model): supported are llama, gpt2`);
  }
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos && eos !== null,
    bos_token: bosToken,
    eos_token: eosToken,
    unk_token: unkId !== null ? tokens[unkId] : null,
    pad_token: padId !== null ? tokens[padId] : null,
    clean_up_tokenization_spaces: false,
    legacy: true,
  };
  const chatTemplates = ggufChatTemplates(metadata);
  if (chatTemplates.length > 0) tokenizerConfig.chat_template = chatTemplates;
  const unusedIds = types.flatMap((t, i) => (t === TokenType.UNUSED ? [i] : []));
  return { tokenizerJson, tokenizerConfig, bosId, eosIds: [...new Set(eosIds)], addBos, unusedIds, aliasIds };
}

const CHAT_TEMPLATE_KEY = 'tokenizer.chat_template';

/** The GGUF's chat templates as tokenizer_config lists them: [{name, template}], 'default' first. */
function ggufChatTemplates(metadata: GgufMetadata): { name: string; template: string }[] {
  const out: { name: string; template: string }[] = [];
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== 'string') continue;
    if (key === CHAT_TEMPLATE_KEY) out.unshift({ name: 'default', template: value });
    else if (key.startsWith(`${CHAT_TEMPLATE_KEY}.`)) out.push({ name: key.slice(CHAT_TEMPLATE_KEY.length + 1), template: value });
  }
  return out;
}

/**
 * The post_processor of a GGUF's tokenizer.json: BOS before a text when the file adds one, and
 * EOS after it when it says `tokenizer.ggml.add_eos_token` (llama.cpp appends it then; embedding
 * models such as Qwen3-Embedding's GGUFs ask for it). null: neither.
 */
function affixTemplate(bos: { token: string; id: number } | null, eos: { token: string; id: number } | null): unknown {
  if (bos === null && eos === null) return null;
  const around = (typeId: number, id: string) => [
    ...(bos ? [{ SpecialToken: { id: bos.token, type_id: typeId } }] : []),
    { Sequence: { id, type_id: typeId } },
    ...(eos ? [{ SpecialToken: { id: eos.token, type_id: typeId } }] : []),
  ];
  const special = (t: { token: string; id: number }) => ({ [t.token]: { id: t.token, ids: [t.id], tokens: [t.token] } });
  return {
    type: 'TemplateProcessing',
    single: around(0, 'A'),
    pair: [...around(0, 'A'), ...around(1, 'B')],
    special_tokens: { ...(bos ? special(bos) : {}), ...(eos ? special(eos) : {}) },
  };
}

/** A TextTokenizer from GGUF metadata; `chatTemplate` replaces the file's chat templates. */
export function tokenizerFromGguf(metadata: GgufMetadata, options: { chatTemplate?: string } = {}): HfTokenizer {
  const parts = ggufTokenizerParts(metadata);
  return new HfTokenizer(
    { tokenizerJson: parts.tokenizerJson, tokenizerConfig: parts.tokenizerConfig },
    {
      addBos: parts.addBos,
      bosId: parts.bosId,
      eosIds: parts.eosIds,
      silentIds: parts.unusedIds,
      aliasIds: parts.aliasIds,
      chatTemplate: options.chatTemplate,
    },
  );
}
