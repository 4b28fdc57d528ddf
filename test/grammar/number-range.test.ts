// numberRangeRules: the rules accept a string exactly when it is a plain JSON number (no exponent,
// no "-0", at most the allowed fraction digits) whose double satisfies every bound, as a validator
// reads it. Checked through XGrammar on every candidate of a window around the bounds (2 fraction
// digits, so the window is exhaustive), and on candidates at and next to random bounds (6 digits).
import { describe, expect, it } from 'vitest';
import { FRACTION_DIGITS, numberRangeRules, type NumberBounds } from '../../src/grammar/number-range.ts';
import { compileStructuredOutput } from '../../src/grammar/structured-output.ts';
import { grammarAccepts } from '../helpers/grammar-accepts.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { mulberry32 } from '../helpers/prng.ts';

/** The oracle: the shape the rules write, and the bounds checked on the double, as ajv does. */
function expected(text: string, integer: boolean, bounds: NumberBounds, digits: number): boolean {
  const shape = integer || digits === 0 ? /^-?(0|[1-9][0-9]*)$/ : new RegExp(`^-?(0|[1-9][0-9]*)(\\.[0-9]{1,${digits}})?$`);
  if (!shape.test(text) || /^-0(\.0+)?$/.test(text)) return false;
  const x = Number(text);
  return (
    (bounds.minimum === undefined || x >= bounds.minimum) &&
    (bounds.maximum === undefined || x <= bounds.maximum) &&
    (bounds.exclusiveMinimum === undefined || x > bounds.exclusiveMinimum) &&
    (bounds.exclusiveMaximum === undefined || x < bounds.exclusiveMaximum)
  );
}

/** Checks the rules against the oracle on each candidate; returns how many were accepted. */
async function check(integer: boolean, bounds: NumberBounds, candidates: Iterable<string>, digits = FRACTION_DIGITS): Promise<number> {
  const rules = numberRangeRules('num', integer, bounds, digits);
  expect(rules, JSON.stringify(bounds)).not.toBeNull();
  const grammar = await grammarAccepts(rules!, 'num');
  let accepted = 0;
  try {
    for (const text of candidates) {
      const want = expected(text, integer, bounds, digits);
      expect(await grammar.accepts(text), `${JSON.stringify(text)} with ${integer ? 'integer' : 'number'} ${JSON.stringify(bounds)}`).toBe(want);
      if (want) accepted++;
    }
  } finally {
    grammar.dispose();
  }
  return accepted;
}

/** The next double above a positive finite x. */
function nextDouble(x: number): number {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  view.setBigUint64(0, view.getBigUint64(0) + 1n);
  return view.getFloat64(0);
}

/** Malformed numbers every rule must refuse. */
const MALFORMED = ['', '-', '+1', '00', '01', '-01', '1.', '.5', '-.5', '1e1', '1E1', '-0', '-0.0', '0x1', ' 1', '1 ', '1.0.0', '--1'];

/** Every plain number with an integer part up to `maxInt` and up to `digits` fraction digits, both signs. */
function* window(maxInt: number, digits: number): Generator<string> {
  yield* MALFORMED;
  const fractions = [''];
  for (let d = 1; d <= digits; d++) for (let f = 0; f < 10 ** d; f++) fractions.push(`.${String(f).padStart(d, '0')}`);
  fractions.push(`.${'5'.repeat(digits + 1)}`); // one digit too many
  for (let i = 0; i <= maxInt; i++) for (const f of fractions) for (const sign of ['', '-']) yield `${sign}${i}${f}`;
}

const KEYWORDS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'] as const;
/** Bounds the window test draws from: integers, halves, quarters and decimals that are no exact double. */
const WINDOW_VALUES = [-12, -10, -7.5, -3, -2.25, -1, -0.3, -0.05, 0, 0.01, 0.1, 0.3, 0.5, 1, 2.25, 3, 7.75, 9.99, 10, 12];

function randomBounds(random: () => number, values: readonly number[]): NumberBounds {
  for (;;) {
    const bounds: NumberBounds = {};
    for (const k of KEYWORDS) if (random() < 0.45) bounds[k] = values[Math.floor(random() * values.length)]!;
    const lo = Math.max(bounds.minimum ?? -Infinity, bounds.exclusiveMinimum ?? -Infinity);
    const hi = Math.min(bounds.maximum ?? Infinity, bounds.exclusiveMaximum ?? Infinity);
    if (lo < hi) return bounds;
  }
}

describe('numberRangeRules', () => {
  it('accepts exactly the in-range numbers of a window around random bounds (2 fraction digits, exhaustive)', async () => {
    const random = mulberry32(7);
    for (let i = 0; i < 14; i++) {
      const integer = i % 3 === 0;
      const bounds = randomBounds(random, WINDOW_VALUES);
      expect(await check(integer, bounds, window(13, integer ? 0 : 2), 2)).toBeGreaterThan(0);
    }
  }, 120_000);

  it('accepts exactly the integers of a window around the bounds, one-sided and negative included', async () => {
    const cases: NumberBounds[] = [
      { minimum: -5 }, { maximum: -9 }, { exclusiveMaximum: -9 }, { maximum: 123 }, { minimum: -123, exclusiveMaximum: 1000 },
      { exclusiveMinimum: -100 }, { minimum: 99, maximum: 101 }, { minimum: -1000, maximum: -999 }, { exclusiveMinimum: 0, exclusiveMaximum: 10 },
      { minimum: 0.5, maximum: 3.5 }, { exclusiveMinimum: -0.5 }, { minimum: 1, exclusiveMinimum: 1 }, { minimum: 7, maximum: 7 },
    ];
    for (const bounds of cases) {
      const candidates = new Set(MALFORMED);
      for (let x = -1050; x <= 1050; x += x > -130 && x < 130 ? 1 : 7) candidates.add(String(x));
      for (const b of Object.values(bounds)) for (let d = -2; d <= 2; d++) candidates.add(String(Math.round(b) + d));
      expect(await check(true, bounds, candidates), JSON.stringify(bounds)).toBeGreaterThan(0);
    }
  }, 120_000);

  it('is exact next to random bounds of any size (6 fraction digits)', async () => {
    const random = mulberry32(11);
    const values: number[] = [];
    for (let i = 0; i < 40; i++) {
      const magnitude = 10 ** Math.floor(random() * 12 - 6);
      values.push(Number(((random() * 2 - 1) * magnitude).toPrecision(1 + Math.floor(random() * 9))));
    }
    values.push(0, 1e-7, -1e-7, 0.1, 0.3, 1e15, 2 ** 53, -(2 ** 53) + 0.5);
    for (let i = 0; i < 24; i++) {
      const integer = i % 4 === 0;
      const bounds = randomBounds(random, values);
      const candidates = new Set<string>(MALFORMED);
      for (const b of Object.values(bounds)) {
        for (const base of [b, Math.trunc(b)]) {
          for (const step of [1, 1e-6, 1e-5, 0.5]) {
            for (const k of [-2, -1, 0, 1, 2]) {
              const x = base + k * step;
              for (const text of [x.toFixed(6), x.toFixed(3), x.toFixed(0), String(x), x.toFixed(6).replace(/0+$/, '').replace(/\.$/, '')]) {
                if (!/e/.test(text)) candidates.add(text === '-0' ? '0' : text);
              }
            }
          }
        }
      }
      await check(integer, bounds, candidates);
    }
  }, 120_000);

  it('reaches the values next to an excluded bound, and the bound itself where it is included', async () => {
    expect(await check(false, { exclusiveMinimum: 0, maximum: 1 }, ['0.000001', '1', '1.000000', '0.999999', '0', '1.000001', '0.0000001'])).toBe(4);
    expect(await check(false, { exclusiveMaximum: 0.3 }, ['0.299999', '0.3', '-1000000000000.5'])).toBe(2);
    expect(await check(false, { maximum: 0.3 }, ['0.3', '0.300000', '0.300001'])).toBe(2);
    expect(await check(false, { minimum: 0.5, maximum: 2.25 }, ['0.5', '2.25', '0x5', '0,5', '2.250001', '0.499999'])).toBe(2);
    expect(await check(true, { minimum: 7, maximum: 7 }, ['7', '6', '8', '7.0'])).toBe(1);
    expect(await check(false, { minimum: -2.5, maximum: -2.5 }, ['-2.5', '-2.50', '-2.500001', '-2.499999'])).toBe(2);
  });

  it('follows the rounding of doubles at huge bounds', async () => {
    const big = `1${'0'.repeat(300)}`;
    // 10^300 + 1 is read as the double 1e300: inside `maximum: 1e300`, outside `exclusiveMaximum: 1e300`.
    expect(await check(true, { maximum: 1e300 }, [big, `${big.slice(0, -1)}1`, `2${'0'.repeat(300)}`, '-5'])).toBe(3);
    // 10^300 - 1 is read as 1e300 too: outside `exclusiveMaximum: 1e300`.
    expect(await check(true, { exclusiveMaximum: 1e300, minimum: 1e299 }, [big, '9'.repeat(300), `${'9'.repeat(10)}${'0'.repeat(290)}`, `1${'0'.repeat(299)}`])).toBe(2);
    expect(await check(false, { minimum: 2 ** 53 }, [String(2 ** 53), String(2 ** 53 - 1), `${2 ** 53 - 1}.9`, `${2 ** 53 - 1}.1`])).toBe(2);
  });

  it('is exact at the largest bounds, ±1e308: their doubles, the halfway points to the next ones, and a step past each', async () => {
    const exact = BigInt(1e308); // the double's value, 309 digits
    const next = BigInt(nextDouble(1e308));
    const half = (exact + next) / 2n; // 1e308's significand is even: the halfway point rounds to it
    const magnitudes = [exact - 1n, exact, exact + 1n, half - 1n, half, half + 1n, next, 10n ** 308n, 10n ** 308n - 1n, 2n * 10n ** 308n, 10n ** 307n, 10n ** 309n];
    const candidates = new Set<string>(MALFORMED);
    for (const m of magnitudes) for (const sign of ['', '-']) for (const fraction of ['', '.5']) candidates.add(`${sign}${m}${fraction}`);
    for (const integer of [true, false]) expect(await check(integer, { minimum: -1e308, maximum: 1e308 }, candidates)).toBeGreaterThan(10);
    await check(false, { exclusiveMinimum: -1e308, exclusiveMaximum: 1e308 }, candidates);
  }, 120_000);

  it('writes no digit repetition longer than 15 for bounds of any size: XGrammar builds each count apart, a token mask per position', () => {
    for (const integer of [true, false]) {
      const rules = numberRangeRules('n', integer, { minimum: -1e308, maximum: 1e308 })!;
      const counts = [...rules.matchAll(/\[0-9\]\{(\d+)(?:,(\d*))?\}/g)].flatMap((m) => [Number(m[1]), Number(m[2] || 0)]);
      expect(Math.max(...counts)).toBeLessThanOrEqual(15);
      expect(rules.length).toBeLessThan(60_000);
    }
  });

  it('compiles ±1e308 for a number and an integer on a 32,000-token vocabulary in well under a second', async () => {
    const { tokenizer, vocabSize } = grammarTokenizer('llama-2-tiny-random');
    for (const type of ['number', 'integer']) {
      const start = performance.now();
      await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema: { type, minimum: -1e308, maximum: 1e308 }, whitespace: { kind: 'compact' } });
      expect(performance.now() - start, type).toBeLessThan(1500); // ~0.1 s; the margin is for a loaded machine
    }
  }, 30_000);

  it('breaks ties as doubles do (to the even significand) where a candidate lies halfway between two doubles', async () => {
    // Above 2^53 doubles are 2 apart: 2^53 + 1 reads as 2^53 (even), 2^53 + 3 as 2^53 + 4.
    const p53 = 2n ** 53n;
    const integers = Array.from({ length: 12 }, (_, i) => String(p53 - 4n + BigInt(i)));
    // From 2^47 to 2^48 doubles are 2^-5 apart: halfway points have 6 fraction digits.
    const p47 = 2 ** 47;
    const sixths = Array.from({ length: 17 }, (_, i) => {
      const units = 2n ** 47n * 64n + BigInt(i - 8); // in 64ths
      return `${units / 64n}.${String((units % 64n) * 15_625n).padStart(6, '0')}`;
    });
    for (const b of [2 ** 53, 2 ** 53 + 2, 2 ** 53 + 4]) {
      for (const k of KEYWORDS) await check(true, { [k]: b }, integers);
    }
    for (const b of [p47, p47 + 2 ** -5, p47 - 2 ** -6, p47 + 2 ** -4]) {
      for (const k of KEYWORDS) await check(false, { [k]: b }, sixths);
    }
  });

  it('finds no number in an empty range', () => {
    expect(numberRangeRules('n', false, { minimum: 3, maximum: 2 })).toBeNull();
    expect(numberRangeRules('n', false, { exclusiveMinimum: 1, exclusiveMaximum: 1 })).toBeNull();
    expect(numberRangeRules('n', false, { minimum: 1, exclusiveMaximum: 1 })).toBeNull();
    expect(numberRangeRules('n', true, { minimum: 0.2, maximum: 0.8 })).toBeNull();
    expect(numberRangeRules('n', false, { exclusiveMinimum: 0, exclusiveMaximum: 1e-7 })).toBeNull();
    expect(numberRangeRules('n', false, { exclusiveMinimum: 0, exclusiveMaximum: 2e-7 }, 7)).not.toBeNull();
  });
});
