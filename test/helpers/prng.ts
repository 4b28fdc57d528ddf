// mulberry32 lives with the model generator (scripts/prng.ts), which must not import from test/.
import { mulberry32 } from '../../scripts/prng.ts';

export { mulberry32 };

/** n floats uniform in [-scale, scale), the same for the same seed. */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() * 2 - 1) * scale;
  return out;
}
