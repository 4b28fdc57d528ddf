// Seeded random walks through a compiled structure: at each step the forced tokens, then a random
// token the mask allows (the stop token, one that closes a string or a container, or one without
// letters and digits, more often than chance, so that walks reach separators like "@" and end);
// the text of each walk that stopped; and the check that a schema's walks that stop are valid.
import { expect } from 'vitest';
import { compileStructuredOutput, type CompiledStructuredOutput } from '../../src/grammar/structured-output.ts';
import type { HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { allowedIds } from './grammar-walk.ts';

export interface WalkOptions {
  walks: number;
  /** Steps before a walk is given up (it counts as not stopped). */
  maxSteps: number;
  random: () => number;
  /** The text of a walk's tokens (default: the tokenizer's decode). */
  text?: (ids: readonly number[]) => string;
}

/** The texts of the walks that stopped. */
export async function randomWalks(compiled: CompiledStructuredOutput, tokenizer: HfTokenizer, vocabSize: number, options: WalkOptions): Promise<string[]> {
  const eos = tokenizer.eosIds[0]!;
  const closing = new Uint8Array(vocabSize);
  const punctuation = new Uint8Array(vocabSize);
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    if (tokenizer.isSpecial(id)) continue;
    const text = new TextDecoder().decode(tokenizer.tokenBytes!(id));
    if (/["}\]]/.test(text)) closing[id] = 1;
    if (!/[\p{L}\p{N}]/u.test(text)) punctuation[id] = 1;
  }
  const { random } = options;
  const mask = new Uint32Array(Math.ceil(vocabSize / 32));
  const texts: string[] = [];
  for (let walk = 0; walk < options.walks; walk++) {
    const constraint = await compiled.createConstraint([eos]);
    const ids: number[] = [];
    let stopped = false;
    for (let step = 0; step < options.maxSteps && !stopped; step++) {
      ids.push(...constraint.forced());
      await constraint.fillNextMask(mask);
      const allowed = allowedIds(mask, vocabSize);
      expect(allowed.length, `a token is allowed after ${JSON.stringify(tokenizer.decode(ids))}`).toBeGreaterThan(0);
      let pool = allowed;
      const r = random();
      const preferred = (flags: Uint8Array) => {
        const some = allowed.filter((id) => flags[id] === 1);
        if (some.length > 0) pool = some;
      };
      if (allowed.includes(eos) && r < 0.5) pool = [eos];
      else if (r < 0.65) preferred(closing);
      else if (r < 0.85) preferred(punctuation);
      const id = pool[Math.floor(random() * pool.length)]!;
      expect(constraint.accept(id)).toBe(true);
      if (id === eos) stopped = true;
      else ids.push(id);
    }
    constraint.dispose();
    if (stopped) texts.push(options.text ? options.text(ids) : tokenizer.decode(ids));
  }
  return texts;
}

/**
 * Compiles `schema` (compact JSON), walks it, and expects at least 5 walks to stop and every
 * stopped text to parse and validate with `validate` (ajv's), each failure labelled `label`.
 */
export async function expectSchemaWalksValid(
  schema: Record<string, unknown>,
  validate: (schema: Record<string, unknown>, value: unknown) => boolean,
  label: string,
  tokenizer: HfTokenizer,
  vocabSize: number,
  options: WalkOptions,
): Promise<void> {
  const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema, whitespace: { kind: 'compact' } });
  const texts = await randomWalks(compiled, tokenizer, vocabSize, options);
  expect(texts.length, `${label}: walks that stopped`).toBeGreaterThanOrEqual(5);
  for (const text of texts) {
    let value: unknown;
    expect(() => (value = JSON.parse(text)), `${label}: ${text}`).not.toThrow();
    expect(validate(schema, value), `${label}: ${text}`).toBe(true);
  }
}
