// A TextTokenizer over @huggingface/tokenizers, from a tokenizer.json object (a Hugging Face
// folder's, or one built from GGUF keys by gguf-tokenizer.ts, so both go through the same code).
//
// BOS is handled here, not by the tokenizer.json post_processor: we always encode with
// add_special_tokens: false and prepend BOS ourselves when `addBos`. The post_processor is only
// consulted (when tokenizer_config has no add_bos_token) to learn whether the model's own
// template starts prompts with a BOS (Llama 3 does, Qwen2 does not), and what it appends after a
// text (`suffixIds`: Qwen3-Embedding's <|endoftext|>), which embeddings add and generation does not.
//
// EOS list: the caller's (GGUF: eos and eot ids), else generation_config eos_token_id (a number or
// a list), plus tokenizer_config eos_token, else config.json eos_token_id; then, whatever the source,
// every special token of the vocabulary whose text is a known end-of-turn / end-of-text marker
// (END_OF_GENERATION, the names llama.cpp's vocabulary loader treats as end-of-generation), in id
// order. So a Llama 3 folder without generation_config.json still stops on <|eot_id|>,
// <|end_of_text|> and <|eom_id|>, and a GGUF (eos id only) gets the same list as its folder.
//
// Decoding never applies clean_up_tokenization_spaces (" ." -> "."), whatever tokenizer_config
// says: decode(encode(text)) is text, and a GGUF decodes like its folder.
//
// Chat templates come from tokenizer_config `chat_template` (or the chatTemplate override), and
// the variables a template sees besides the conversation from its special token entries, as
// transformers' special_tokens_map holds them.
import { Tokenizer } from '@huggingface/tokenizers';
import { chatTemplatesFrom } from './chat-template.ts';
import { patchLibraryTokenizer } from './hf-tokenizers-adapter.ts';
import { pieceBytesReader } from './token-bytes.ts';
import { checkTokenizerJson } from './tokenizer-limits.ts';
import type { TextTokenizer } from './types.ts';

type Json = Record<string, unknown>;

export interface HfTokenizerSources {
  /** The parsed tokenizer.json. */
  tokenizerJson: Json;
  /** The parsed tokenizer_config.json, if any. */
  tokenizerConfig?: Json | null;
  /** The parsed generation_config.json, if any (its eos_token_id may be a list). */
  generationConfig?: Json | null;
  /** The parsed config.json, if any (bos_token_id / eos_token_id fallbacks). */
  modelConfig?: Json | null;
}

/** Settings decided by the caller instead of read from the config files (GGUF). */
export interface HfTokenizerOverrides {
  addBos?: boolean;
  bosId?: number | null;
  eosIds?: readonly number[];
  /** Ids that decode to no text at all (a GGUF's UNUSED filler tokens, as llama.cpp decodes them). */
  silentIds?: readonly number[];
  /**
   * Ids that stand for another id's piece (a GGUF vocabulary that lists a piece twice: the
   * tokenizer's vocabulary keeps one id per piece, and the others decode as that one).
   */
  aliasIds?: ReadonlyMap<number, number>;
  /** A Jinja chat template used instead of the model's own (chatTemplates becomes {default: it}). */
  chatTemplate?: string;
  /** TextTokenizer.suffixIds (a GGUF's EOS when tokenizer.ggml.add_eos_token). */
  suffixIds?: readonly number[];
}

/**
 * Token texts that end generation when they are special tokens of the vocabulary: llama.cpp's
 * end-of-generation names, and Gemma's `<eos>` (its EOS id where generation_config.json is missing
 * and tokenizer_config names <end_of_turn>).
 */
export const END_OF_GENERATION: readonly string[] = [
  '<|eot_id|>', '<|eom_id|>', '<|end_of_text|>', '<|im_end|>', '<|endoftext|>', '<|end|>', '<end_of_turn>', '<EOT>', '_<EOT>',
  '<｜end▁of▁sentence｜>', '<eos>',
];

function tokenContent(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object' && typeof (value as Json).content === 'string') return (value as Json).content as string;
  return undefined;
}

/** The special tokens transformers' special_tokens_map lists, in its order. */
const SPECIAL_TOKEN_KEYS = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

/**
 * transformers' special_tokens_map from tokenizer_config: each special token that is set, as its
 * text (the config holds a string, an AddedToken object {content, ...} or null), and
 * additional_special_tokens when it lists any.
 */
export function specialTokensMap(tokenizerConfig: Json): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of SPECIAL_TOKEN_KEYS) {
    const text = tokenContent(tokenizerConfig[key]);
    if (text) out[key] = text;
  }
  const extra = tokenizerConfig.additional_special_tokens;
  if (Array.isArray(extra)) {
    const texts = extra.map(tokenContent).filter((t): t is string => t !== undefined);
    if (texts.length > 0) out.additional_special_tokens = texts;
  }
  return out;
}

function idList(value: unknown): number[] {
  if (typeof value === 'number') return [value];
  if (Array.isArray(value)) return value.filter((v): v is number => typeof v === 'number');
  return [];
}

/** tokenizer.json as @huggingface/tokenizers takes it: the keys it requires present (null when absent). */
export function libraryTokenizerJson(tokenizerJson: Json): Json {
  const json: Json = { ...tokenizerJson };
  for (const key of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) json[key] ??= null;
  json.added_tokens ??= [];
  return json;
}

export class HfTokenizer implements TextTokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  readonly addBos: boolean;
  readonly suffixIds: readonly number[];
  readonly chatTemplates: Readonly<Record<string, string>>;
  readonly templateVariables: Readonly<Record<string, unknown>>;
  private readonly tokenizer: Tokenizer;
  private readonly specialIds: Set<number>;
  private readonly silentIds: ReadonlySet<number>;
  private readonly aliasIds: ReadonlyMap<number, number>;
  /** Reads a vocabulary piece's bytes. */
  private readonly pieceBytes: (piece: string) => Uint8Array;

  constructor(sources: HfTokenizerSources, overrides: HfTokenizerOverrides = {}) {
    const { tokenizerJson } = sources;
    const tokenizerConfig = sources.tokenizerConfig ?? {};
    const generationConfig = sources.generationConfig ?? {};
    const modelConfig = sources.modelConfig ?? {};
    checkTokenizerJson(tokenizerJson);
    const json = libraryTokenizerJson(tokenizerJson);
    this.tokenizer = new Tokenizer(json, { ...tokenizerConfig });
    // A leading BOM kept in decoding, and long BPE words through our merge loop.
    patchLibraryTokenizer(this.tokenizer);

    const addedTokens = (json.added_tokens as { id: number; content: string; special?: boolean }[]) ?? [];
    this.pieceBytes = pieceBytesReader(json, new Set(addedTokens.map((t) => t.content)));
    this.specialIds = new Set(addedTokens.filter((t) => t.special).map((t) => t.id));
    this.silentIds = new Set(overrides.silentIds ?? []);
    this.aliasIds = overrides.aliasIds ?? new Map();

    let maxId = -1;
    for (const [, id] of this.tokenizer.get_vocab(true)) if (id > maxId) maxId = id;
    for (const t of addedTokens) if (t.id > maxId) maxId = t.id;
    for (const [id] of this.aliasIds) if (id > maxId) maxId = id;
    this.vocabSize = maxId + 1;

    const toId = (content: string | undefined): number | undefined =>
      content === undefined ? undefined : this.tokenizer.token_to_id(content);

    // What the post_processor puts before and after a text (normally [BOS] or nothing, and nothing).
    const { prefix, suffix } = this.templateParts();

    let bosId: number | null | undefined = overrides.bosId;
    if (bosId === undefined) {
      bosId =
        toId(tokenContent(tokenizerConfig.bos_token)) ??
        (prefix.length === 1 ? prefix[0] : undefined) ??
        idList(generationConfig.bos_token_id)[0] ??
        idList(modelConfig.bos_token_id)[0] ??
        null;
    }
    this.bosId = bosId;

    let addBos = overrides.addBos;
    if (addBos === undefined) {
      if (typeof tokenizerConfig.add_bos_token === 'boolean') addBos = tokenizerConfig.add_bos_token;
      else addBos = prefix.length > 0 && prefix[0] === bosId;
    }
    this.addBos = addBos && bosId !== null;

    let eosIds = overrides.eosIds ? [...overrides.eosIds] : undefined;
    if (!eosIds) {
      eosIds = idList(generationConfig.eos_token_id);
      const fromTokenizer = toId(tokenContent(tokenizerConfig.eos_token));
      if (fromTokenizer !== undefined) eosIds.push(fromTokenizer);
      if (eosIds.length === 0) eosIds.push(...idList(modelConfig.eos_token_id));
    }
    const named = addedTokens
      .filter((t) => t.special && END_OF_GENERATION.includes(t.content))
      .map((t) => t.id)
      .sort((a, b) => a - b);
    this.eosIds = [...new Set([...eosIds, ...named])];
    const configEos = tokenizerConfig.add_eos_token === true ? toId(tokenContent(tokenizerConfig.eos_token)) : undefined;
    this.suffixIds = overrides.suffixIds ? [...overrides.suffixIds] : suffix.length > 0 ? suffix : configEos !== undefined ? [configEos] : [];
    for (const id of this.eosIds) this.specialIds.add(id);
    if (this.bosId !== null) this.specialIds.add(this.bosId);

    this.chatTemplates =
      overrides.chatTemplate !== undefined ? { default: overrides.chatTemplate } : chatTemplatesFrom(tokenizerConfig.chat_template);
    this.templateVariables = specialTokensMap(tokenizerConfig);
  }

  /** Ids the tokenizer.json post_processor adds before and after the text of a single sequence. */
  private templateParts(): { prefix: number[]; suffix: number[] } {
    try {
      const withSpecial = this.tokenizer.encode('a', { add_special_tokens: true }).ids;
      const without = this.tokenizer.encode('a', { add_special_tokens: false }).ids;
      for (let start = 0; start + without.length <= withSpecial.length; start++) {
        if (without.every((id, i) => withSpecial[start + i] === id)) return { prefix: withSpecial.slice(0, start), suffix: withSpecial.slice(start + without.length) };
      }
    } catch {
      // No usable post_processor: nothing around the text.
    }
    return { prefix: [], suffix: [] };
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const ids = text.length > 0 ? this.tokenizer.encode(text, { add_special_tokens: false }).ids : [];
    const addBos = (options.addBos ?? this.addBos) && this.bosId !== null;
    return addBos ? [this.bosId as number, ...ids] : ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    let list = this.silentIds.size > 0 ? ids.filter((id) => !this.silentIds.has(id)) : [...ids];
    if (options.skipSpecialTokens) list = list.filter((id) => !this.specialIds.has(id));
    // After the filters: an alias is special or not by its own type, as llama.cpp reads it.
    if (this.aliasIds.size > 0) list = list.map((id) => this.aliasIds.get(id) ?? id);
    if (list.length === 0) return '';
    return this.tokenizer.decode(list, { skip_special_tokens: options.skipSpecialTokens ?? false, clean_up_tokenization_spaces: false });
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }

  tokenBytes(id: number): Uint8Array | undefined {
    const piece = this.idToToken(id);
    if (piece === undefined) return undefined;
    if (this.silentIds.has(id)) return new Uint8Array(0);
    return this.pieceBytes(piece);
  }

  /** The token string of an id (vocabulary piece), or undefined. */
  idToToken(id: number): string | undefined {
    return this.tokenizer.id_to_token(this.aliasIds.get(id) ?? id);
  }

  /** The id of a token string, or undefined. */
  tokenToId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }
}

/** A TextTokenizer from the parsed files of a Hugging Face folder. */
export function createHfTokenizer(sources: HfTokenizerSources, overrides: HfTokenizerOverrides = {}): HfTokenizer {
  return new HfTokenizer(sources, overrides);
}
