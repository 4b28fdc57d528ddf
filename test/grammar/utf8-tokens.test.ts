// Well-formed UTF-8 in constrained output (utf8-tokens.ts, constraint.ts): the decoder's states
// against TextDecoder's strict reading, the per-token tables, and random walks that pick byte
// tokens (byte fallback) most of the time, through a string of bounded length and a negated
// class, where XGrammar alone lets malformed bytes through (their U+FFFD characters then break
// maxLength) and the constraint does not.
import Ajv2020 from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { compileStructuredOutput } from '../../src/grammar/structured-output.ts';
import { utf8Step, Utf8Tokens } from '../../src/grammar/utf8-tokens.ts';
import { byteLevelPiece } from '../../src/grammar/vocabulary.ts';
import { allowedIds } from '../helpers/grammar-walk.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { mulberry32 } from '../helpers/prng.ts';

/** Whether `bytes` is UTF-8 (`complete`) or the start of it, as TextDecoder reads strictly. */
function decodes(bytes: Uint8Array, complete: boolean): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: !complete });
    return true;
  } catch {
    return false;
  }
}

function run(bytes: Uint8Array): number {
  let state = 0;
  for (const byte of bytes) if (state >= 0) state = utf8Step(state, byte);
  return state;
}

describe('utf8Step', () => {
  it('agrees with TextDecoder on every sequence of one or two bytes and on random longer ones', () => {
    const check = (bytes: Uint8Array) => {
      const state = run(bytes);
      expect(state >= 0, `${[...bytes]} as a start`).toBe(decodes(bytes, false));
      expect(state === 0, `${[...bytes]} whole`).toBe(decodes(bytes, true));
    };
    for (let a = 0; a < 256; a++) {
      check(Uint8Array.of(a));
      for (let b = 0; b < 256; b++) check(Uint8Array.of(a, b));
    }
    const random = mulberry32(8);
    const lead = [0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0x80, 0x41];
    for (let i = 0; i < 20_000; i++) {
      const bytes = Uint8Array.from({ length: 3 + Math.floor(random() * 4) }, (_, k) => (k === 0 || random() < 0.2 ? lead[Math.floor(random() * lead.length)]! : 0x80 + Math.floor(random() * 64)));
      check(bytes);
    }
  });
});

describe('Utf8Tokens', () => {
  it('knows which tokens continue the output from each state, and where they leave it', () => {
    const pieces = [[0x61], [0xc3], [0xa9], [0xc3, 0xa9], [0xe4, 0xb8], [0xad, 0x61], [], [0xff]].map((b) => byteLevelPiece(Uint8Array.from(b)));
    const tokens = new Utf8Tokens(pieces);
    const allowed = (state: number) => [0, 1, 2, 3, 4, 5, 6, 7].filter((id) => (tokens.valid(state)[0]! >>> id) & 1);
    expect(allowed(0)).toEqual([0, 1, 3, 4, 6]); // "a", a lead byte, "é", the start of "中", no bytes
    expect(tokens.after(0, 1)).toBe(1);
    expect(allowed(1)).toEqual([2, 5, 6]); // those that start with a continuation byte
    expect(tokens.after(0, 4)).toBe(1);
    expect(tokens.after(1, 5)).toBe(0); // 中's last byte, then "a"
  });
});

describe('constrained output is UTF-8', () => {
  it('random walks through byte tokens give strings whose length and pattern validate', async () => {
    const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
    const eos = tokenizer.eosIds[0]!;
    const byteTokens = new Set<number>();
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const bytes = tokenizer.tokenBytes!(id);
      if (bytes?.length === 1 && bytes[0]! >= 0x80) byteTokens.add(id);
    }
    const ajv = new Ajv2020({ strict: false });
    const random = mulberry32(3);
    const mask = new Uint32Array(Math.ceil(vocabSize / 32));
    for (const schema of [{ type: 'string', minLength: 2, maxLength: 3 }, { type: 'string', pattern: '^[^x]{2,3}$' }]) {
      const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema, whitespace: { kind: 'compact' } });
      let nonAscii = 0;
      let stopped = 0;
      for (let walk = 0; walk < 150; walk++) {
        const constraint = await compiled.createConstraint([eos]);
        const ids: number[] = [];
        let done = false;
        for (let step = 0; step < 20 && !done; step++) {
          ids.push(...constraint.forced());
          await constraint.fillNextMask(mask);
          const allowed = allowedIds(mask, vocabSize);
          const bytes = allowed.filter((id) => byteTokens.has(id));
          const r = random();
          const pool = allowed.includes(eos) && r < 0.3 ? [eos] : bytes.length > 0 && r < 0.8 ? bytes : allowed;
          const id = pool[Math.floor(random() * pool.length)]!;
          expect(constraint.accept(id)).toBe(true);
          if (id === eos) done = true;
          else ids.push(id);
        }
        constraint.dispose();
        if (!done) continue;
        stopped++;
        const text = tokenizer.decode(ids);
        expect(text, 'no malformed bytes').not.toContain('\ufffd');
        if (/[^\x00-\x7f]/.test(text)) nonAscii++;
        expect(ajv.validate(schema, JSON.parse(text)), `${JSON.stringify(schema)}: ${text}`).toBe(true);
      }
      expect(stopped).toBeGreaterThan(100);
      expect(nonAscii, 'walks that wrote characters beyond ASCII').toBeGreaterThan(20);
    }
  });
});
