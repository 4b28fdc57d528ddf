/** mulberry32: a tiny deterministic PRNG giving floats in [0, 1), so every test run sees the same inputs. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n floats uniform in [-scale, scale), the same for the same seed. */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() * 2 - 1) * scale;
  return out;
}
