// The seeded random numbers of sampling: Philox4x32-10 (philox.ts), counter-based, so the GPU
// sampler and this CPU stream give the same number for the same (seed, stream, step) on every
// host and adapter, with no state carried between steps on the GPU.
//
// Streams: `createRandomStream(seed, stream)` gives independent streams for one seed. The choice
// j of a request (sequence j of a session) draws from stream j of the request's seed, so n choices
// with one seed differ from each other and each is reproducible on its own. Step s of a sequence
// (its token index) uses counter (stream, s, 0, 0) under the key of the seed; `next()` returns the
// numbers of steps 0, 1, 2, ... in turn.
import { philoxKey, philoxUniform } from './philox.ts';

export interface RandomStream {
  /** A float in [0, 1). */
  next(): number;
}

/** A Philox stream that also tells its key, stream index and the step `next()` draws next. */
export interface PhiloxStream extends RandomStream {
  readonly key: readonly [number, number];
  readonly stream: number;
  /** The step whose number `next()` returns next. */
  step: number;
  /** The number of step `step`, without moving the stream. */
  at(step: number): number;
}

/**
 * The random stream `stream` (0, 1, 2, ...: the choice index; below 2^32) of `seed`. Non-integer
 * seeds are truncated; seeds must be finite.
 */
export function createRandomStream(seed: number, stream = 0): PhiloxStream {
  if (!Number.isFinite(seed)) throw new RangeError(`a random seed must be a finite number, got ${seed}`);
  if (!Number.isInteger(stream) || stream < 0 || stream >= 0x100000000) {
    throw new RangeError(`a stream index must be an integer in [0, 2^32), got ${stream}`);
  }
  const key = philoxKey(seed);
  return {
    key,
    stream,
    step: 0,
    at(step: number) {
      return philoxUniform(key, stream, step);
    },
    next() {
      return philoxUniform(key, stream, this.step++);
    },
  };
}

/** A seed for requests that give none: outputs then vary from request to request. */
export function randomSeed(): number {
  return Math.floor(Math.random() * 0x100000000);
}
