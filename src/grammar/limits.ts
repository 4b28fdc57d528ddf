// The bounds on what a request may ask to compile. XGrammar's compile is one synchronous wasm call
// that nothing can interrupt, and input nested too deeply overflows the wasm stack, which breaks
// the module for good; so inputs are measured here first and refused with a message that names the
// limit. Measured on Qwen2.5's 151,665-token vocabulary (docs/structured-output.md, "Limits").

/** Bytes of a JSON schema, a grammar or a structural tag (as JSON). */
export const MAX_TEXT_BYTES = 64 * 1024;

/** Characters of a regex. */
export const MAX_REGEX_CHARS = 4 * 1024;

/** The largest count a regex repetition may have (`a{10000}`); XGrammar misreads counts past 2^31. */
export const MAX_REPEAT = 10_000;

/** Strings of a choice, and their bytes in all. */
export const MAX_CHOICES = 1024;
export const MAX_CHOICE_BYTES = 64 * 1024;

/**
 * Nesting: JSON levels of a schema or structural tag (following each local $ref once), groups of
 * a regex or grammar. The wasm stack overflowed at 56 levels of nested object schemas, 64 of
 * nested additionalProperties, 80 of nested arrays, 48 $ref hops and 256 groups.
 */
export const MAX_DEPTH = 32;

/** Properties of one object schema: the grammar of optional properties grows with their square. */
export const MAX_PROPERTIES = 256;

/** Characters of whitespace in a row (JsonWhitespace 'any'); each one is a state of every separator. */
export const MAX_WHITESPACE_RUN = 32;

/**
 * The compile time a structure may be estimated to take, in milliseconds; estimates are measured
 * on a vocabulary of COST_VOCAB tokens and scale with the vocabulary (a mask is work per token).
 * Most structures estimate at 0: the estimate counts what was measured to cost (char-cost.ts and
 * its callers), not the structure's size. The bound lets a structure take a few seconds once (it
 * is cached per model), never a hang.
 */
export const MAX_COST = 3000;
export const COST_VOCAB = 152_000;

/**
 * How the estimate scales with the vocabulary: less than in proportion, since a smaller vocabulary
 * holds more of the tokens that go on through a class (llama-2's 32,000 are mostly English: a
 * pattern [a-z]{0,100} took 0.2 s there, 0.4 s on Qwen2.5's 151,936).
 */
const VOCAB_EXPONENT = 0.75;

/** The estimate for a vocabulary of `vocabSize` tokens, in whole milliseconds. */
export function scaledCost(cost: number, vocabSize: number): number {
  return Math.round(cost * Math.max(1 / 64, (vocabSize / COST_VOCAB) ** VOCAB_EXPONENT));
}

/** UTF-8 length of a string, without encoding it. */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** Whether a string has a lone surrogate (no UTF-8 for it: the tokenizer would write U+FFFD). */
export function hasLoneSurrogate(text: string): boolean {
  return /[\uD800-\uDFFF]/u.test(text);
}

/**
 * Characters the shortest output of a part of a structure may require (a count of repetitions, a
 * minItems, a long literal). Once a sequence enters such a part the grammar forces its text, and
 * XGrammar's jump-forward builds all of it at once, whatever the tokens left: `"a"{1000000}` took
 * 2.5 s and 90 MiB of wasm memory at the first step, an array of 10,000 required items 7.6 s and
 * 1.8 GiB before it aborted.
 */
export const MAX_REQUIRED_CHARS = 4096;
