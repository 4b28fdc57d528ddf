// A small seeded random stream (xoshiro128**), so that a request with a `seed` draws the same
// numbers on every run and every host. State is per request: nothing is shared between requests.

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
  const low = seed % 0x100000000;
  const high = Math.floor(seed / 0x100000000);
  return (low ^ Math.imul(high | 0, 0x27d4eb2d)) | 0;
}

export function createRandomStream(seed: number): RandomStream {
  const mixer = { s: foldSeed(seed) };
  const s = new Uint32Array([splitmix32(mixer), splitmix32(mixer), splitmix32(mixer), splitmix32(mixer)]);
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
