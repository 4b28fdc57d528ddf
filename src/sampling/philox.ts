// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The number for (key, counter) is a pure function of both, so the GPU
// sampler (shaders/sample.wgsl, the same function in WGSL) and the CPU sampler draw the same
// number for step s of a sequence without carrying any state from step to step.
//
// Our use: key = the request's seed folded to two u32 words; counter = (stream = choice index,
// step = token index in the sequence, 0, 0); u = (first output word >> 8) * 2^-24, a float in
// [0, 1) that f32 represents exactly, so WGSL and TypeScript agree bit for bit.

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** The high 32 bits of the 64-bit product a * b (u32 operands), from 16-bit halves (WGSL has no u64). */
export function mulHi32(a: number, b: number): number {
  const al = a & 0xffff;
  const ah = a >>> 16;
  const bl = b & 0xffff;
  const bh = b >>> 16;
  const ll = al * bl;
  const lh = al * bh;
  const hl = ah * bl;
  const hh = ah * bh;
  const mid = (ll >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (hh + (lh >>> 16) + (hl >>> 16) + (mid >>> 16)) >>> 0;
}

/** Philox4x32 with 10 rounds: four u32 words of output for a counter of four words and a key of two. */
export function philox4x32(counter: ArrayLike<number>, key: ArrayLike<number>): Uint32Array {
  let c0 = counter[0] >>> 0;
  let c1 = counter[1] >>> 0;
  let c2 = counter[2] >>> 0;
  let c3 = counter[3] >>> 0;
  let k0 = key[0] >>> 0;
  let k1 = key[1] >>> 0;
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      k0 = (k0 + W0) >>> 0;
      k1 = (k1 + W1) >>> 0;
    }
    const hi0 = mulHi32(M0, c0);
    const lo0 = Math.imul(M0, c0) >>> 0;
    const hi1 = mulHi32(M1, c2);
    const lo1 = Math.imul(M1, c2) >>> 0;
    c0 = (hi1 ^ c1 ^ k0) >>> 0;
    c1 = lo1;
    c2 = (hi0 ^ c3 ^ k1) >>> 0;
    c3 = lo0;
  }
  return Uint32Array.of(c0, c1, c2, c3);
}

/**
 * The Philox key of a seed: the integer part of `seed` (up to 2^53 in magnitude, negative allowed)
 * as a 64-bit two's complement integer, low word first. -1 gives [0xffffffff, 0xffffffff].
 */
export function philoxKey(seed: number): [number, number] {
  if (!Number.isFinite(seed)) throw new RangeError(`a random seed must be a finite number, got ${seed}`);
  const whole = Math.trunc(seed);
  const high = Math.floor(whole / 0x100000000); // exact: division by a power of two
  const low = whole - high * 0x100000000; // in [0, 2^32)
  return [low >>> 0, high >>> 0];
}

/** A float in [0, 1) from the first output word: its top 24 bits times 2^-24 (exact in f32). */
export function philoxUniform(key: readonly [number, number], stream: number, step: number): number {
  const word = philox4x32([stream, step, 0, 0], key)[0];
  return (word >>> 8) * 2 ** -24;
}
