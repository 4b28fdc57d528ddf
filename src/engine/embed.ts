// Embeddings on the GPU: the inputs run through the model in the working cache as prefill passes
// up to the final norm, never through the LM head; the hidden states the pooling needs are read
// back (each input's last token's, first's, or every token's for the mean) and pooled and
// normalised on the CPU in float64.
//
// Short inputs are packed: consecutive inputs that each fit a pass go back to back into one pass
// of at most min(the prefill's chunk, the group's tokens, the cache) tokens (hidden-states.ts's packed
// passes), each at positions from 0 and attending only to its own rows, so the weights are read
// once for all of them. An input longer than a pass runs on its own from position 0, split into
// passes of the chunk as a prompt is; so do all inputs where the working cache has rings (a
// sliding-window layer's ring holds one sequence). Many passes go into one command buffer with one
// read-back (a group of at most EMBED_GROUP_TOKENS tokens), the next group recorded and submitted
// while the GPU runs the one before; while other sequences decode, passes and groups are smaller
// and each group waits for the one before, so the decode rounds run between them.
//
// Attention never crosses inputs. What the working cache held for chat requests is saved first by
// the prefix cache when worth it (as a prompt that shares nothing with it would), and the prefix
// cache then holds nothing of it, so no later request reuses an embedding's K/V.
//
// The caller (LlamaGenerator.embed) holds admission and the lane, and has checked the inputs.
import type { LlamaModel, HiddenPass, RowRun } from '../model/llama.ts';
import type { KvCache } from '../model/kv-cache.ts';
import type { PrefixCache } from './prefix-cache.ts';
import type { EmbeddingInfo } from './types.ts';

/** Tokens whose passes one command buffer takes at most (measured: docs/performance.md#embeddings). */
export const EMBED_GROUP_TOKENS = 256;
/** Groups submitted and not yet read back, while no sequence decodes (then: one at a time, each awaited). */
const MAX_GROUPS_IN_FLIGHT = 2;
/** Bytes of hidden states one group reads back at most (mean pooling reads every token's). */
const MAX_GROUP_READBACK_BYTES = 64 * 1024 * 1024;

/** What embedding asks of the generator. */
export interface EmbedHost {
  readonly model: LlamaModel;
  readonly workingCache: KvCache;
  readonly prefix: PrefixCache;
  /** Throws once the model is unloaded or the signal aborts. */
  checkLive(signal: AbortSignal | undefined): void;
  /** Tokens a pass takes: the prefill's chunk (fewer while sequences decode). */
  passTokens(): number;
  /** Tokens a command buffer takes: EMBED_GROUP_TOKENS, fewer while sequences decode. */
  groupTokens(): number;
  /** Whether sequences decode now: then each group is awaited before the next is recorded, so their rounds run between. */
  busy(): boolean;
}

/** Checks embed() inputs (RangeErrors naming the input): non-empty, ids in the vocabulary, within the context. */
export function checkEmbedInputs(inputs: readonly (readonly number[])[], vocabSize: number, capacity: number): void {
  if (!Array.isArray(inputs) || inputs.length === 0) throw new RangeError('embed() needs at least one input');
  inputs.forEach((tokens, i) => {
    if (!Array.isArray(tokens) || tokens.length === 0) throw new RangeError(`input ${i} has no tokens`);
    if (tokens.length > capacity) throw new RangeError(`input ${i} has ${tokens.length} tokens; the context holds ${capacity}`);
    for (const id of tokens) {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw new RangeError(`input ${i}: token id ${id} is outside the vocabulary (0..${vocabSize - 1})`);
    }
  });
}

/** A planned pass and, for each of its runs of rows, the input the run belongs to. */
interface PlannedPass extends HiddenPass {
  readonly owners: readonly number[];
}

/** The rows the pooling reads of an input's n tokens at row `at` of a pass (first, last: whether they hold its first and last token). */
function pooledRows(pooling: EmbeddingInfo['pooling'], at: number, n: number, first: boolean, last: boolean): RowRun[] {
  if (pooling === 'mean') return [{ from: at, count: n }];
  if (pooling === 'cls') return first ? [{ from: at, count: 1 }] : [];
  return last ? [{ from: at + n - 1, count: 1 }] : [];
}

/** The passes of one input on its own: chunks of `chunk` tokens from position 0. */
function inputPasses(tokens: readonly number[], input: number, chunk: number, pooling: EmbeddingInfo['pooling']): PlannedPass[] {
  const passes: PlannedPass[] = [];
  const T = tokens.length;
  for (let start = 0; start < T; start += chunk) {
    const part = tokens.slice(start, start + chunk);
    const rows = pooledRows(pooling, 0, part.length, start === 0, start + part.length === T);
    passes.push({ tokens: part, startPos: start, rows, owners: rows.map(() => input) });
  }
  return passes;
}

/** One packed pass of the whole inputs from .. to - 1, back to back from row 0 (one input: its plain pass). */
function packedPass(inputs: readonly (readonly number[])[], from: number, to: number, pooling: EmbeddingInfo['pooling']): PlannedPass {
  if (to - from === 1) return inputPasses(inputs[from]!, from, Infinity, pooling)[0]!;
  const tokens: number[] = [];
  const rows: RowRun[] = [];
  const owners: number[] = [];
  const lengths: number[] = [];
  for (let i = from; i < to; i++) {
    const input = inputs[i]!;
    for (const run of pooledRows(pooling, tokens.length, input.length, true, true)) {
      rows.push(run);
      owners.push(i);
    }
    tokens.push(...input);
    lengths.push(input.length);
  }
  return { tokens, startPos: 0, rows, owners, inputs: lengths };
}

/** The rows a pass reads back. */
const rowCount = (pass: HiddenPass) => pass.rows.reduce((n, r) => n + r.count, 0);

/** Scales `v` to unit L2 length (a zero vector stays zero). */
function normalized(v: Float64Array): Float64Array {
  let ss = 0;
  for (const x of v) ss += x * x;
  const norm = Math.sqrt(ss);
  if (norm > 0) for (let i = 0; i < v.length; i++) v[i] /= norm;
  return v;
}

/** The pooled vectors of `inputs` (see the top of this file). */
export async function embedInputs(
  host: EmbedHost,
  embedding: Pick<EmbeddingInfo, 'pooling' | 'normalize'>,
  inputs: readonly (readonly number[])[],
  signal: AbortSignal | undefined,
): Promise<Float32Array[]> {
  const dim = host.model.config.hiddenSize;
  const sums = inputs.map(() => new Float64Array(dim));
  const counts = new Array<number>(inputs.length).fill(0);
  // The chat's K/V is saved before the working cache is written (when worth it); then it holds nothing.
  await host.prefix.prepare([], false);
  const cache = host.workingCache;
  // A ring holds one sequence's latest positions: packed inputs would evict each other's keys.
  const pack = !cache.rings.some((r) => r);
  const accumulate = (group: readonly PlannedPass[], hidden: Float32Array) => {
    let at = 0;
    for (const pass of group) {
      pass.rows.forEach((run, k) => {
        const input = pass.owners[k]!;
        const sum = sums[input]!;
        for (let r = 0; r < run.count; r++, at += dim) {
          for (let i = 0; i < dim; i++) sum[i] += hidden[at + i]!;
        }
        counts[input]! += run.count;
      });
    }
  };
  const inFlight: Promise<void>[] = [];
  let next = 0; // the next input to plan
  let pending: PlannedPass[] = [];
  while (next < inputs.length || pending.length > 0) {
    host.checkLive(signal);
    const chunk = Math.max(1, Math.min(host.passTokens(), cache.maxPassTokens));
    const budget = Math.max(chunk, host.groupTokens());
    // A packed pass takes at most this many tokens of whole inputs (its rows start at 0).
    const packTokens = Math.min(chunk, host.groupTokens(), cache.capacity);
    // A group: whole passes, up to the token budget and the read-back limit.
    const group: PlannedPass[] = [];
    let tokens = 0;
    let rows = 0;
    for (;;) {
      if (pending.length === 0 && next < inputs.length) {
        let end = next;
        for (let packed = 0; pack && end < inputs.length && packed + inputs[end]!.length <= packTokens; end++) packed += inputs[end]!.length;
        pending = end > next ? [packedPass(inputs, next, end, embedding.pooling)] : inputPasses(inputs[next]!, next, chunk, embedding.pooling);
        next = Math.max(end, next + 1);
      }
      const pass = pending[0];
      if (!pass) break;
      const passRows = rowCount(pass);
      const fits = tokens + pass.tokens.length <= budget && (rows + passRows) * dim * 4 <= MAX_GROUP_READBACK_BYTES;
      if (group.length > 0 && !fits) break;
      group.push(pending.shift()!);
      tokens += pass.tokens.length;
      rows += passRows;
    }
    // Submitted now; read once the next group is queued behind it (the CPU records one while the GPU runs the other).
    const read = host.model.hiddenStates(group, cache).then((hidden) => accumulate(group, hidden));
    inFlight.push(read);
    read.catch(() => {}); // awaited below; a failure must not go unhandled meanwhile
    while (inFlight.length > (host.busy() ? 0 : MAX_GROUPS_IN_FLIGHT - 1)) await inFlight.shift();
  }
  await Promise.all(inFlight);
  return sums.map((sum, i) => {
    const n = counts[i]!;
    for (let k = 0; k < dim; k++) sum[k] /= n;
    return Float32Array.from(embedding.normalize ? normalized(sum) : sum);
  });
}
