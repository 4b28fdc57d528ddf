// Every use of @huggingface/tokenizers beyond its documented API (new Tokenizer, encode, decode,
// token_to_id, id_to_token, get_vocab) is in this file.
//
// Why: the library (pinned, and bundled into the browser build) has no option for two things we
// need, so a built Tokenizer is patched through fields of its model and decoder objects, which
// its typings declare but its index does not export (tokenizers 0.2.0, src/core/):
//   - its ByteFallback decoder drops a leading U+FEFF, which the Rust tokenizers keep
//     (keepByteOrderMarks: the decoder's `text_decoder`, and a Sequence decoder's `decoders`);
//   - its BPE merge loop is slow on long words (speedUpLongWords: the model's `bpe`, `merges`,
//     `bpe_ranks`, `max_length_to_cache`, `end_of_word_suffix`, `continuing_subword_suffix`);
//   - its BPE word cache is bounded by words only, 10,000 of up to 255 characters with their
//     pieces, ~40 MiB of words no text repeats (boundWordCache: the model's `cache`).
// Each patch checks the shape it needs and otherwise leaves the tokenizer as the library built it
// (correct, without the fix or the speed-up). So that an upgrade that renames or removes a field
// does not lose a patch silently, test/tokenizer/hf-tokenizers-adapter.test.ts checks real
// tokenizers with libraryInternalsProblems, which names every field that no longer fits.
import type { Tokenizer } from '@huggingface/tokenizers';
import { BoundedLru } from './bounded-lru.ts';
import { longWordBpe } from './long-word-bpe.ts';

type Json = Record<string, unknown>;

/** The parts of the library's BPE model this reads or replaces; bpe_ranks only tells it apart. */
export interface LibraryBpeModel {
  bpe(token: string): string[];
  merges: [string, string][];
  bpe_ranks: Map<string, number>;
  max_length_to_cache: number;
  end_of_word_suffix?: string | null;
  continuing_subword_suffix?: string | null;
}

/** The patches a freshly built library Tokenizer gets (HfTokenizer applies them to its own). */
export function patchLibraryTokenizer(tokenizer: Tokenizer): void {
  keepByteOrderMarks(tokenizer.decoder);
  // Long BPE words take our merge loop (long-word-bpe.ts): with no pre-tokenizer, or a Metaspace
  // one that does not split (SentencePiece style: Llama 2, Mistral), the whole prompt is one
  // word; byte-level tokenizers split prompts into words, but a run of letters or digits with no
  // space is one word however long.
  speedUpLongWords(tokenizer.model);
  boundWordCache(tokenizer.model);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'no class'})`;
  return typeof value;
}

/** The library's models and decoders are Callables: functions with fields. */
const isObjectLike = (value: unknown): value is Json => (typeof value === 'object' && value !== null) || typeof value === 'function';
const isPair = (p: unknown) => Array.isArray(p) && p.length === 2 && typeof p[0] === 'string' && typeof p[1] === 'string';
const nullableString = (value: unknown) => value === undefined || value === null || typeof value === 'string';

/** What keeps `model` from being the BPE model speedUpLongWords patches: one line per field, naming it; [] when it fits. */
export function bpeModelProblems(model: unknown, where = 'model'): string[] {
  if (!isObjectLike(model)) return [`${where}: expected the BPE model, found ${describe(model)}`];
  const m = model;
  const checks: [field: string, fits: boolean, expected: string][] = [
    ['bpe', typeof m.bpe === 'function', 'a function (the merge loop)'],
    // The first pair stands for all (a Llama 3 vocabulary has 280K).
    ['merges', Array.isArray(m.merges) && (m.merges.length === 0 || isPair(m.merges[0])), 'an array of [string, string] pairs'],
    ['bpe_ranks', m.bpe_ranks instanceof Map, 'a Map'],
    ['max_length_to_cache', typeof m.max_length_to_cache === 'number', 'a number'],
    // Present (string, null or undefined): a renamed suffix field would read as "no suffix".
    ['end_of_word_suffix', 'end_of_word_suffix' in m && nullableString(m.end_of_word_suffix), 'a field holding a string, null or undefined'],
    ['continuing_subword_suffix', 'continuing_subword_suffix' in m && nullableString(m.continuing_subword_suffix), 'a field holding a string, null or undefined'],
  ];
  return checks.filter(([, fits]) => !fits).map(([field, , expected]) => `${where}.${field}: expected ${expected}, found ${field in m ? describe(m[field]) : 'no such field'}`);
}

function isLibraryBpeModel(model: unknown): model is LibraryBpeModel {
  return bpeModelProblems(model).length === 0;
}

/**
 * Routes the library BPE model's long words (those it does not cache) through longWordBpe.
 * Returns whether it did: not for other models, or BPE models with word suffixes.
 */
export function speedUpLongWords(model: unknown): boolean {
  if (!isLibraryBpeModel(model) || model.end_of_word_suffix || model.continuing_subword_suffix) return false;
  const own = model.bpe.bind(model);
  const cacheLimit = model.max_length_to_cache;
  // Built at the first long word, so byte-level vocabularies (Llama 3: 280K merges), which may
  // never see one, never pay for the tables.
  let fast: ((word: string) => string[]) | undefined;
  model.bpe = (token: string) => (token.length < cacheLimit ? own(token) : (fast ??= longWordBpe(model.merges))(token));
  return true;
}

/**
 * The words the BPE model keeps with their pieces, as many as the library keeps (10,000), and at
 * most this many characters of words and pieces together: ~8-12 MiB, where prompts of words no
 * text repeats (250-letter runs: ~4 KiB each with their pieces) filled the library's cache with
 * ~40 MiB. Real text's words take a few characters each and stay far below.
 */
export const WORD_CACHE = { words: 10_000, characters: 1 << 20 };

/** The word cache the library's BPE model calls (get, put, clear), bounded by WORD_CACHE. */
export class BoundedWordCache extends BoundedLru<string, string[]> {
  constructor() {
    super(WORD_CACHE.words, WORD_CACHE.characters);
  }

  put(word: string, pieces: string[]): void {
    this.set(word, pieces, pieces.reduce((sum, piece) => sum + piece.length, word.length));
  }
}

/** What keeps `model.cache` from being the word cache boundWordCache replaces; [] when it fits. */
export function wordCacheProblems(model: unknown, where = 'model'): string[] {
  const cache = isObjectLike(model) ? model.cache : undefined;
  const fits = isObjectLike(cache) && ['get', 'put', 'clear'].every((method) => typeof cache[method] === 'function');
  return fits ? [] : [`${where}.cache: expected the word cache (get, put, clear), found ${isObjectLike(model) && 'cache' in model ? describe(cache) : 'no such field'}`];
}

/**
 * Replaces the BPE model's word cache by one bounded by WORD_CACHE's words and characters.
 * Returns whether it did (not for a model without such a cache).
 */
export function boundWordCache(model: unknown): boolean {
  if (!isLibraryBpeModel(model) || wordCacheProblems(model).length > 0) return false;
  (model as unknown as { cache: BoundedWordCache }).cache = new BoundedWordCache();
  return true;
}

/**
 * The library's ByteFallback decoder fuses byte tokens with a default TextDecoder, which drops a
 * leading U+FEFF (EF BB BF); the Rust tokenizers keep it. Swap in a decoder that keeps it, in a
 * Sequence decoder's parts too.
 */
export function keepByteOrderMarks(decoder: unknown): void {
  if (!isObjectLike(decoder)) return;
  const d = decoder as { text_decoder?: unknown; decoders?: unknown[] };
  if (d.text_decoder instanceof TextDecoder && !d.text_decoder.ignoreBOM) {
    d.text_decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  }
  if (Array.isArray(d.decoders)) d.decoders.forEach(keepByteOrderMarks);
}

/**
 * What keeps the library's decoder objects from the shape keepByteOrderMarks patches, read against
 * the tokenizer.json decoder they were built from: a ByteFallback decoder must hold its
 * TextDecoder in `text_decoder`, a Sequence its parts in `decoders`. One line per field; [] when
 * they fit.
 */
export function decoderProblems(decoder: unknown, spec: unknown, where = 'decoder'): string[] {
  if (!spec || typeof spec !== 'object') return [];
  if (!isObjectLike(decoder)) return [`${where}: expected the decoder for ${(spec as Json).type}, found ${describe(decoder)}`];
  const d = decoder;
  const type = (spec as Json).type;
  if (type === 'ByteFallback' && !(d.text_decoder instanceof TextDecoder)) {
    return [`${where}.text_decoder (ByteFallback): expected a TextDecoder, found ${'text_decoder' in d ? describe(d.text_decoder) : 'no such field'}`];
  }
  if (type === 'Sequence') {
    const parts = Array.isArray((spec as Json).decoders) ? ((spec as Json).decoders as unknown[]) : [];
    if (!Array.isArray(d.decoders) || d.decoders.length !== parts.length) {
      return [`${where}.decoders (Sequence): expected an array of ${parts.length}, found ${'decoders' in d ? describe(d.decoders) : 'no such field'}`];
    }
    const built = d.decoders as unknown[];
    return parts.flatMap((part, i) => decoderProblems(built[i], part, `${where}.decoders[${i}]`));
  }
  return [];
}

/**
 * Every field the patches rely on that a library Tokenizer built from `tokenizerJson` lacks or
 * holds in another shape, each line naming it (`model.max_length_to_cache: ...`); [] when all fit.
 * For tests: the patches themselves skip quietly what does not fit.
 */
export function libraryInternalsProblems(tokenizer: Tokenizer, tokenizerJson: Json): string[] {
  const problems: string[] = [];
  const spec = tokenizerJson.model as Json | undefined;
  if (!('model' in tokenizer)) problems.push('Tokenizer.model: no such field');
  else if (spec?.type === 'BPE' || (spec?.type === undefined && spec?.merges !== undefined)) {
    problems.push(...bpeModelProblems(tokenizer.model, 'Tokenizer.model'), ...wordCacheProblems(tokenizer.model, 'Tokenizer.model'));
  }
  if (!('decoder' in tokenizer)) problems.push('Tokenizer.decoder: no such field');
  else problems.push(...decoderProblems(tokenizer.decoder, tokenizerJson.decoder, 'Tokenizer.decoder'));
  return problems;
}
