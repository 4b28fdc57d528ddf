// A small seeded random stream (xoshiro128**), so that a request with a `seed` draws the same
// numbers on every run and every host. State is per sequence: nothing is shared between requests.
//
// Streams: `createRandomStream(seed, stream)` gives independent streams for one seed. The choice
// j of a request (sequence j of a session) draws from stream j of the request's seed, so n choices
// with one seed differ from each other and each is reproducible on its own. The 128-bit xoshiro
// state is word-wise splitmix32(seed) XOR splitmix32(stream): two different (seed, stream) pairs
// start from different states (the four words would all have to collide).

export interface RandomStream {
  /** A float in [0, 1). */
  next(): number;
}

/** splitmix32: spreads a seed of any size over well-mixed 32-bit words. */
function splitmix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0;
  let z = state.s;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** Folds an integer seed (up to 2^53 in magnitude, negative allowed) into 32 bits without losing the high part. */
function foldSeed(seed: number): number {
  const whole = Math.trunc(seed);
  const low = whole % 0x100000000;
  const high = Math.floor(whole / 0x100000000);
  return (low ^ Math.imul(high | 0, 0x27d4eb2d)) | 0;
}

/**
 * The random stream `stream` (0, 1, 2, ...: the choice index) of `seed`. Non-integer seeds are
 * truncated; seeds must be finite.
 */
export function createRandomStream(seed: number, stream = 0): RandomStream {
  if (!Number.isFinite(seed)) throw new RangeError(`a random seed must be a finite number, got ${seed}`);
  if (!Number.isInteger(stream) || stream < 0) throw new RangeError(`a stream index must be a non-negative integer, got ${stream}`);
  const seedMixer = { s: foldSeed(seed) };
  // A different offset than the seed's, so that (seed a, stream b) and (seed b, stream a) differ.
  const streamMixer = { s: (foldSeed(stream) ^ 0x5bd1e995) | 0 };
  const s = new Uint32Array(4);
  for (let i = 0; i < 4; i++) s[i] = splitmix32(seedMixer) ^ rotl(splitmix32(streamMixer), 13);
  if ((s[0] | s[1] | s[2] | s[3]) === 0) s[0] = 1; // xoshiro's one forbidden state
  return {
    next() {
      // xoshiro128**
      const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
      const t = s[1] << 9;
      s[2] ^= s[0];
      s[3] ^= s[1];
      s[1] ^= s[2];
      s[0] ^= s[3];
      s[2] ^= t;
      s[3] = rotl(s[3], 11);
      return result / 0x100000000;
    },
  };
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** A seed for requests that give none: outputs then vary from request to request. */
export function randomSeed(): number {
  return Math.floor(Math.random() * 0x100000000);
}
