// Incremental detokenization (src/api/detokenize.ts) against the fake tokenizer: the text of
// decoding everything at once, characters split across byte tokens and across the prompt's end.
import { describe, expect, it } from 'vitest';
import { IncrementalDetokenizer } from '../../src/api/detokenize.ts';
import { EOS, FakeGenerator } from '../helpers/fake-generator.ts';

describe('IncrementalDetokenizer', () => {
  const tokenizer = new FakeGenerator().tokenizer;

  it('gives the text of decoding everything at once, for random token sequences', () => {
    let state = 12345;
    const random = (n: number) => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state % n;
    };
    const prompt = tokenizer.encode('Once upon a time €');
    for (let trial = 0; trial < 300; trial++) {
      const ids = Array.from({ length: 1 + random(12) }, () =>
        random(3) === 0 ? 3 + [0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xc3, 0xa9, 0x41][random(10)]! : 3 + 256 + random(tokenizer.vocabSize - 259),
      );
      const detok = new IncrementalDetokenizer(tokenizer, prompt);
      let text = '';
      for (const id of ids) {
        const delta = detok.push(id);
        expect(delta.endsWith('\uFFFD')).toBe(false);
        text += delta;
      }
      text += detok.flush();
      const full = tokenizer.decode([...prompt, ...ids], { skipSpecialTokens: true });
      const head = tokenizer.decode(prompt, { skipSpecialTokens: true });
      expect(text, JSON.stringify(ids)).toBe(full.slice(head.length));
    }
  });

  it('finishes a character the prompt ended inside of, and keeps an unfinished one out of the completion', () => {
    const byte = (b: number) => 3 + b;
    // 你 is E4 BD A0; 😀 is F0 9F 98 80.
    const cut = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xe4), byte(0xbd)]);
    expect(cut.push(byte(0xa0))).toBe('你');
    expect(cut.push(tokenizer.id('▁a'))).toBe(' a');
    const emoji = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xf0), byte(0x9f)]);
    expect(emoji.push(byte(0x98))).toBe('');
    expect(emoji.peek(byte(0x80))).toBe('😀');
    expect(emoji.push(byte(0x80))).toBe('😀');
    // Nothing finishes it: the prompt's U+FFFD is not the completion's.
    const left = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xe4), byte(0xbd)]);
    expect(left.peek(tokenizer.id('▁a'))).toBe(' a');
    expect(left.push(tokenizer.id('▁a'))).toBe(' a');
    expect(left.flush()).toBe('');
  });

  it('bounds the decode window when ids keep the text held back (lone continuation bytes, skipped special tokens)', () => {
    let widest = 0;
    const counting = Object.create(tokenizer, {
      decode: { value: (ids: readonly number[], options?: { skipSpecialTokens?: boolean }) => ((widest = Math.max(widest, ids.length)), tokenizer.decode(ids, options)) },
    }) as typeof tokenizer;
    const prompt = tokenizer.encode('x');
    const ids = [...Array(200).fill(tokenizer.id(0x80)), tokenizer.id('▁a'), ...Array(200).fill(EOS), tokenizer.id('▁a')];
    const detok = new IncrementalDetokenizer(counting, prompt);
    let text = '';
    for (const id of ids) text += detok.push(id);
    text += detok.flush();
    expect(text).toBe(tokenizer.decode([...prompt, ...ids], { skipSpecialTokens: true }).slice(tokenizer.decode(prompt, { skipSpecialTokens: true }).length));
    expect(text.endsWith(' a a')).toBe(true); // the space after the skipped run kept
    expect(widest).toBeLessThan(40);
    // Skipped ids do not count towards the bound: a character after 16 of them comes out whole.
    const after = new IncrementalDetokenizer(tokenizer, prompt);
    let euro = '';
    for (const id of [...Array(16).fill(EOS), tokenizer.id(0xe2), tokenizer.id(0x82), tokenizer.id(0xac)]) euro += after.push(id);
    expect(euro + after.flush()).toBe('€');
  });

  it('holds back an incomplete UTF-8 sequence', () => {
    const detok = new IncrementalDetokenizer(tokenizer, tokenizer.encode('x'));
    expect(detok.push(tokenizer.id('▁a'))).toBe(' a');
    expect(detok.push(tokenizer.id(0xe2))).toBe('');
    expect(detok.push(tokenizer.id(0x82))).toBe('');
    expect(detok.push(tokenizer.id(0xac))).toBe('€');
    expect(detok.push(tokenizer.id(0xe2))).toBe('');
    expect(detok.flush()).toBe('\uFFFD');
  });
});
