// A fake generator that embeds: FakeGenerator (its tokenizer, info, generation) with
// `info.embedding` and an embed() whose vector is a pure function of the token ids (fakeVector),
// so tests compute what a request must return. It records every call and can wait or fail.
import type { EmbeddingInfo } from '../../src/engine/types.ts';
import { FakeGenerator, sleep, type FakeGeneratorOptions } from './fake-generator.ts';

export interface EmbeddingFakeOptions extends FakeGeneratorOptions {
  /** The model's embedding settings; null: the model cannot embed (no info, no embed()). */
  embedding?: Partial<EmbeddingInfo> | null;
  /** Ids the tokenizer's post-processor appends (TextTokenizer.suffixIds). */
  suffixIds?: number[];
  /** Milliseconds embed() takes (an abort ends the wait). */
  embedDelayMs?: number;
  /** embed() throws this. */
  embedError?: Error;
}

/** The default: 8 components, normalised, last-token pooling, not Matryoshka. */
export const FAKE_EMBEDDING: EmbeddingInfo = { pooling: 'last', normalize: true, dimensions: 8, matryoshka: false, source: 'generative' };

/** The fake model's vector of `tokens`: each component a sum over positions of a sine of (id, position, component), then L2-normalised when `normalize`. */
export function fakeVector(tokens: readonly number[], dimensions: number, normalize: boolean): Float32Array {
  const out = new Float32Array(dimensions);
  for (let j = 0; j < dimensions; j++) {
    let sum = 0;
    tokens.forEach((id, p) => (sum += Math.sin((id + 1) * (j + 1) * 0.37 + p * 0.11)));
    out[j] = sum;
  }
  if (normalize) {
    const norm = Math.hypot(...out);
    if (norm > 0) for (let j = 0; j < dimensions; j++) out[j] = out[j]! / norm;
  }
  return out;
}

export class EmbeddingFakeGenerator extends FakeGenerator {
  /** Every embed() call's inputs, in order. */
  readonly embedCalls: number[][][] = [];
  embed?: (inputs: readonly (readonly number[])[], options?: { signal?: AbortSignal }) => Promise<Float32Array[]>;

  constructor(options: EmbeddingFakeOptions = {}) {
    super(options);
    if (options.suffixIds) Object.assign(this.tokenizer, { suffixIds: options.suffixIds });
    if (options.embedding === null) return;
    const info: EmbeddingInfo = { ...FAKE_EMBEDDING, ...options.embedding };
    Object.assign(this.info, { embedding: info });
    this.embed = async (inputs, embedOptions = {}) => {
      this.embedCalls.push(inputs.map((ids) => [...ids]));
      if (options.embedDelayMs) await sleep(options.embedDelayMs, embedOptions.signal);
      embedOptions.signal?.throwIfAborted();
      if (options.embedError) throw options.embedError;
      return inputs.map((ids) => fakeVector(ids, info.dimensions, info.normalize));
    };
  }
}

/** An embedding fake as the `{ generator }` engine the API handler takes. */
export function embeddingEngine(options: EmbeddingFakeOptions = {}): { generator: EmbeddingFakeGenerator } {
  return { generator: new EmbeddingFakeGenerator(options) };
}

/** A base64 embedding (little-endian float32) back as numbers. */
export function decodeBase64Vector(text: string): Float32Array {
  const bytes = Uint8Array.from(Buffer.from(text, 'base64'));
  const view = new DataView(bytes.buffer);
  return Float32Array.from({ length: bytes.length / 4 }, (_, i) => view.getFloat32(i * 4, true));
}
