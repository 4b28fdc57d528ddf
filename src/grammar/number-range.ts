// The JSON numbers within a schema's bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum)
// as EBNF rules. XGrammar's own range rules are wrong in both directions (measured on 0.1.27:
// `exclusiveMinimum: 0, maximum: 1` lets 0 and 1.2 through, `minimum: 0.5` takes any character as
// the decimal point, `maximum: 123` takes 129, `minimum: -5` takes a bare '-' and no negative
// number), so bounded numbers get these rules instead (schema-splice.ts).
//
// The language: an optional '-', an integer part without leading zeros and, for type number, an
// optional fraction of 1 to `fractionDigits` digits; no exponent, and no negative zero. A string is
// in it exactly when its value, read as a double the way a validator reads JSON (round to nearest,
// ties to even), satisfies every bound. So a bound that no written value can meet on its own side
// of the rounding (0.3 is stored as 0.29999999999999998890) behaves as the validator has it: with
// `maximum: 0.3`, "0.3" is in; with `exclusiveMaximum: 0.3` the largest is "0.299999".
// Browser code: nothing here may import Node modules.

/** Fraction digits a bounded number may have (XGrammar's own range rules allow 6 too). */
export const FRACTION_DIGITS = 6;

/** The bounds of a number schema (2020-12: the exclusive ones are numbers). */
export interface NumberBounds {
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
}

/**
 * EBNF rules for the numbers within `bounds`: the first rule is `name`, helper rules are named
 * `name_1`, `name_2`, ... Integers only when `integer`, else up to `fractionDigits` fraction
 * digits. Null when no such number exists (an empty range).
 */
export function numberRangeRules(name: string, integer: boolean, bounds: NumberBounds, fractionDigits = FRACTION_DIGITS): string | null {
  const digits = integer ? 0 : fractionDigits;
  const range = gridRange(bounds, digits);
  if (!range) return null;
  const rules = new RuleSet(name);
  const alternatives: string[] = [];
  const { lo, hi } = range;
  // Negative values, written as '-' and their magnitude (never zero, so never "-0").
  if (lo === null || lo < 0n) {
    const top = hi === null || hi >= 0n ? -1n : hi;
    if (lo === null || lo <= top) alternatives.push(`"-" ( ${magnitude(rules, -top, lo === null ? null : -lo, digits)} )`);
  }
  const bottom = lo === null || lo < 0n ? 0n : lo;
  if (hi === null || hi >= bottom) alternatives.push(magnitude(rules, bottom, hi, digits));
  return rules.text(alternatives.join(' | '));
}

/** Grid points: integers counting units of 10^-digits. */
interface GridRange {
  /** The smallest grid point in range; null: no lower bound. */
  lo: bigint | null;
  /** The largest; null: no upper bound. */
  hi: bigint | null;
}

/** The grid points whose doubles satisfy every bound; null when there are none. */
export function gridRange(bounds: NumberBounds, digits: number): GridRange | null {
  const scale = 10n ** BigInt(digits);
  let lo: bigint | null = null;
  let hi: bigint | null = null;
  const raise = (k: bigint) => (lo = lo === null || k > lo ? k : lo);
  const lower = (k: bigint) => (hi = hi === null || k < hi ? k : hi);
  if (bounds.minimum !== undefined) {
    // Number(v) >= b: v is at or above the lowest real that rounds to b.
    const r = roundsTo(bounds.minimum);
    raise(ceilAbove(r.down, scale, !r.included));
  }
  if (bounds.exclusiveMinimum !== undefined) {
    // Number(v) > b: v is above every real that rounds to b.
    const r = roundsTo(bounds.exclusiveMinimum);
    raise(ceilAbove(r.up, scale, r.included));
  }
  if (bounds.maximum !== undefined) {
    const r = roundsTo(bounds.maximum);
    lower(floorBelow(r.up, scale, !r.included));
  }
  if (bounds.exclusiveMaximum !== undefined) {
    const r = roundsTo(bounds.exclusiveMaximum);
    lower(floorBelow(r.down, scale, r.included));
  }
  if (lo !== null && hi !== null && lo > hi) return null;
  return { lo, hi };
}

/** An exact binary fraction n / d (d a power of two). */
interface Fraction {
  n: bigint;
  d: bigint;
}

/** The reals that round to the double x: from `down` to `up`, the ends included when x's significand is even. */
function roundsTo(x: number): { down: Fraction; up: Fraction; included: boolean } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(x));
  const bits = view.getBigUint64(0);
  const field = Number(bits >> 52n);
  const fraction = bits & ((1n << 52n) - 1n);
  // |x| = m * 2^e exactly.
  const m = field === 0 ? fraction : fraction | (1n << 52n);
  const e = field === 0 ? -1074 : field - 1075;
  const up = scaled(2n * m + 1n, e - 1);
  // Below a power of two the next double down is half as far away.
  const down = field > 1 && fraction === 0n ? scaled(4n * m - 1n, e - 2) : scaled(2n * m - 1n, e - 1);
  const included = m % 2n === 0n;
  return x < 0 || Object.is(x, -0) ? { down: negate(up), up: negate(down), included } : { down, up, included };
}

function scaled(n: bigint, exponent: number): Fraction {
  return exponent >= 0 ? { n: n << BigInt(exponent), d: 1n } : { n, d: 1n << BigInt(-exponent) };
}

function negate(f: Fraction): Fraction {
  return { n: -f.n, d: f.d };
}

/** The smallest k with k / scale >= f (> f when `strict`). */
function ceilAbove(f: Fraction, scale: bigint, strict: boolean): bigint {
  const { q, exact } = divide(f.n * scale, f.d);
  if (exact) return strict ? q + 1n : q;
  return q + 1n; // q is the floor
}

/** The largest k with k / scale <= f (< f when `strict`). */
function floorBelow(f: Fraction, scale: bigint, strict: boolean): bigint {
  const { q, exact } = divide(f.n * scale, f.d);
  if (exact) return strict ? q - 1n : q;
  return q;
}

/** Floor division of n by a positive d, and whether it was exact. */
function divide(n: bigint, d: bigint): { q: bigint; exact: boolean } {
  let q = n / d; // truncates toward zero
  const exact = q * d === n;
  if (!exact && n < 0n) q -= 1n;
  return { q, exact };
}

/**
 * The non-negative numbers from grid point `a` to `b` (null: unbounded), written without a sign:
 * an integer part, then a fraction of 1 to `digits` digits where allowed.
 */
function magnitude(rules: RuleSet, a: bigint, b: bigint | null, digits: number): string {
  if (digits === 0) return integers(rules, a, b);
  const scale = 10n ** BigInt(digits);
  const pad = (k: bigint) => k.toString().padStart(digits, '0');
  const nines = '9'.repeat(digits);
  const [ia, da] = [a / scale, pad(a % scale)];
  const anyFraction = `( "." [0-9]{1,${digits}} )?`;
  if (b !== null && b / scale === ia) return `"${ia}" ${fraction(rules, da, pad(b % scale))}`;
  const alternatives: string[] = [];
  // The first integer part where its fractions are cut below, the last where they are cut above,
  // and every integer between with any fraction.
  let first = ia;
  if (BigInt(da) !== 0n) {
    alternatives.push(`"${ia}" ${fraction(rules, da, nines)}`);
    first = ia + 1n;
  }
  let last: bigint | null = b === null ? null : b / scale;
  let cut: string | undefined;
  if (b !== null && pad(b % scale) !== nines) {
    cut = `"${b / scale}" ${fraction(rules, '0'.repeat(digits), pad(b % scale))}`;
    last = b / scale - 1n;
  }
  if (last === null || first <= last) alternatives.push(`( ${integers(rules, first, last)} ) ${anyFraction}`);
  if (cut) alternatives.push(cut);
  return alternatives.join(' | ');
}

/** Integers from a to b (null: unbounded), a >= 0, without leading zeros. */
function integers(rules: RuleSet, a: bigint, b: bigint | null): string {
  const low = a.toString();
  const high = b?.toString();
  if (high !== undefined && high.length === low.length) return digitRange(rules, low, high, 'exact');
  const alternatives = [digitRange(rules, low, '9'.repeat(low.length), 'exact')];
  // Every length strictly between: a non-zero digit, then any.
  const longest = high === undefined ? undefined : high.length - 1;
  if (longest === undefined) alternatives.push(`[1-9] [0-9]{${low.length},}`);
  else if (longest > low.length) alternatives.push(`[1-9] ${rules.digits(low.length, longest - 1)}`);
  if (high !== undefined) alternatives.push(digitRange(rules, `1${'0'.repeat(high.length - 1)}`, high, 'exact'));
  return alternatives.join(' | ');
}

/** A fraction whose digits, padded with zeros to lo's length, lie from lo to hi: "" (when lo is 0) or "." and 1+ digits. */
function fraction(rules: RuleSet, lo: string, hi: string): string {
  const digits = digitRange(rules, lo, hi, 'prefix');
  return /^0*$/.test(lo) ? `( "." ( ${digits} ) )?` : `"." ( ${digits} )`;
}

/**
 * Digit strings from lo to hi (strings of one length n, lo <= hi), as EBNF alternatives, not empty.
 * 'exact': strings of length n. 'prefix': strings of 1 to n digits, compared padded with zeros on
 * the right (fraction digits). Each position where a bound still applies is a rule of its own.
 */
function digitRange(rules: RuleSet, lo: string, hi: string, mode: 'exact' | 'prefix'): string {
  const n = lo.length;
  const any = (q: number) => (mode === 'exact' ? rules.digits(n - q, n - q) : rules.digits(0, n - q));
  // Whether the strings from position q on are all strings: no bound applies there any more.
  const free = (q: number, tl: boolean, th: boolean) => (!tl || /^0*$/.test(lo.slice(q))) && (!th || /^9*$/.test(hi.slice(q)));
  const names = new Map<string, string>();

  /** Alternatives that begin with a digit at position q < n. */
  const alternatives = (q: number, tl: boolean, th: boolean): string[] => {
    const min = tl ? Number(lo[q]) : 0;
    const max = th ? Number(hi[q]) : 9;
    const result: string[] = [];
    let from = min;
    let to = max;
    if (tl && !free(q + 1, true, th && min === max)) {
      result.push(`"${min}" ${rest(q + 1, true, th && min === max)}`.trimEnd());
      from = min + 1;
    }
    if (th && max >= from && !free(q + 1, tl && max === min, true)) {
      result.push(`"${max}" ${rest(q + 1, tl && max === min, true)}`.trimEnd());
      to = max - 1;
    }
    if (from <= to) result.push(`${digitClass(from, to)} ${any(q + 1)}`.trimEnd());
    return result;
  };

  /** The strings after position q: nothing, a free repetition, or the rule for (q, tl, th). */
  const rest = (q: number, tl: boolean, th: boolean): string => {
    if (free(q, tl, th)) return any(q);
    const key = `${q} ${tl} ${th}`;
    let name = names.get(key);
    if (name === undefined) {
      name = rules.reserve();
      names.set(key, name);
      const empty = mode === 'prefix' && (!tl || /^0*$/.test(lo.slice(q)));
      rules.define(name, [...(empty ? ['""'] : []), ...alternatives(q, tl, th)].join(' | '));
    }
    return name;
  };

  return alternatives(0, true, true).join(' | ');
}

function digitClass(from: number, to: number): string {
  if (from === 0 && to === 9) return '[0-9]';
  return from === to ? `"${from}"` : `[${from}-${to}]`;
}


/**
 * Digit repetitions up to this long are XGrammar's `{min,max}`, which it unzips into sequences;
 * longer ones are chains of rules shared by the whole range. Past 15 XGrammar builds a repetition
 * of its own for each distinct count, and a token mask for each of its positions: a bound of 309
 * digits has ~300 counts, which took 6-64 s and 0.7 GB of wasm memory on Llama 3.2's vocabulary
 * (every 1-3 digit number a token); the chains take ~0.25 s.
 */
const SHORT_DIGITS = 15;

/** The rules being written: `name` and its numbered helpers. */
class RuleSet {
  private readonly lines: string[] = [];
  private count = 0;
  /** The longest digit chains written so far. */
  private exact = 0;
  private upTo = 0;

  constructor(private readonly name: string) {}

  reserve(): string {
    return `${this.name}_${++this.count}`;
  }

  /**
   * Digit strings of min to max digits, or nothing for none. Up to SHORT_DIGITS as XGrammar's
   * repetition; longer ones through one shared chain of rules, each a digit and the next rule.
   */
  digits(min: number, max: number): string {
    if (max === 0) return '';
    if (max <= SHORT_DIGITS) return min === max ? `[0-9]{${min}}` : `[0-9]{${min},${max}}`;
    return [this.chain('d', min), this.chain('u', max - min)].filter((part) => part !== '').join(' ');
  }

  /** `d`: a rule for exactly k digits; `u`: for up to k digits. Each chain's rules are written once. */
  private chain(kind: 'd' | 'u', k: number): string {
    if (k === 0) return '';
    const written = kind === 'd' ? this.exact : this.upTo;
    for (let i = written + 1; i <= k; i++) {
      const next = i === 1 ? '' : ` ${this.name}_${kind}${i - 1}`;
      this.define(`${this.name}_${kind}${i}`, kind === 'd' ? `[0-9]${next}` : `"" | [0-9]${next}`);
    }
    if (kind === 'd') this.exact = Math.max(this.exact, k);
    else this.upTo = Math.max(this.upTo, k);
    return `${this.name}_${kind}${k}`;
  }

  define(name: string, body: string): void {
    this.lines.push(`${name} ::= ${body}`);
  }

  /** All rules, `name ::= body` first. */
  text(body: string): string {
    return [`${this.name} ::= ${body}`, ...this.lines].join('\n');
  }
}
