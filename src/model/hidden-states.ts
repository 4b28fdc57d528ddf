// The final hidden states of prompts, for embeddings: forward.ts's pass up to the final norm (no LM
// head), several passes recorded into one command buffer with one read-back of the rows asked for.
//
// Each pass writes its K/V into the cache at its positions, like a prefill; passes run in order, so
// a pass may go on from the positions an earlier pass of the same call wrote (a long input split
// into chunks), and a pass at position 0 starts a new sequence over whatever the cache held. The
// token ids of every pass (and the packed passes' segment starts) are uploaded once and copied into
// the activations' buffers before each pass (queue writes would all land before the first pass ran).
//
// A packed pass (HiddenPass.inputs) holds several whole inputs back to back from cache row 0: each
// input's tokens take positions from 0 and attend only to its own rows (ForwardPass.segments, the
// packed variants of rope and attention), so every input's hidden states are those of a pass of
// its own, and the weights are read once for all of them.
import type { KvCache } from './kv-cache.ts';
import { recordForward, type Activations, type LlamaParts } from './forward.ts';

/** Consecutive rows of a pass: from .. from + count - 1. */
export interface RowRun {
  readonly from: number;
  readonly count: number;
}

/** One pass of a hidden-state run. */
export interface HiddenPass {
  readonly tokens: readonly number[];
  /** The first token's position (cache row); 0 for a packed pass. */
  readonly startPos: number;
  /** The pass's rows whose hidden states are read back, run after run in this order (none: nothing read). */
  readonly rows: readonly RowRun[];
  /**
   * A packed pass: the token counts of the whole inputs it holds back to back (summing to the
   * pass's tokens), each at positions from 0 and attending only to its own rows. The cache must
   * have no rings (KvCache.rings: a sliding-window layer's ring takes one sequence).
   */
  readonly inputs?: readonly number[];
}

/** For each token of a packed pass of inputs of these lengths, the row its input starts at. */
export function segmentStarts(inputs: readonly number[]): Uint32Array<ArrayBuffer> {
  const starts = new Uint32Array(inputs.reduce((a, n) => a + n, 0));
  let row = 0;
  for (const n of inputs) {
    starts.fill(row, row, row + n);
    row += n;
  }
  return starts;
}

/** Throws unless `p` is a pass runHiddenPasses can run over `cache` with activations of `actTokens` tokens. */
function checkPass(p: HiddenPass, actTokens: number, cache: KvCache): void {
  const T = p.tokens.length;
  if (T === 0) throw new Error('a hidden-state pass needs at least one token');
  if (T > actTokens) throw new Error(`a pass of ${T} tokens exceeds the activations (${actTokens})`);
  if (T > cache.maxPassTokens) throw new Error(`a pass of ${T} tokens exceeds what the cache's rings take in one pass (${cache.maxPassTokens})`);
  if (p.startPos + T > cache.capacity) throw new Error(`sequence of ${p.startPos + T} positions exceeds the KV cache (${cache.capacity})`);
  for (const r of p.rows) {
    if (!(Number.isInteger(r.from) && Number.isInteger(r.count) && r.from >= 0 && r.count >= 0 && r.from + r.count <= T)) {
      throw new Error(`rows ${r.from}..${r.from + r.count - 1} are outside a pass of ${T} tokens`);
    }
  }
  if (p.inputs) {
    if (p.startPos !== 0) throw new Error('a packed pass starts at row 0');
    if (cache.rings.some((r) => r)) throw new Error('a packed pass needs a cache without rings');
    if (!p.inputs.every((n) => Number.isInteger(n) && n > 0) || p.inputs.reduce((a, n) => a + n, 0) !== T) {
      throw new Error(`a packed pass's inputs (${p.inputs.join(', ')}) must be positive and sum to its ${T} tokens`);
    }
  }
}

/**
 * Records `passes` in order over `cache` into one batch (activations `act`, sized for the longest
 * pass) and returns the rows asked for, one after the other, [rows, hiddenSize] f32: the final
 * norm's output (what the LM head would read). Resolves once the GPU has run the passes.
 */
export async function runHiddenPasses(model: LlamaParts, act: Activations, passes: readonly HiddenPass[], cache: KvCache): Promise<Float32Array> {
  const dim = model.shape.dim;
  const rowBytes = dim * 4;
  let tokenCount = 0;
  let rows = 0;
  for (const p of passes) {
    checkPass(p, act.tokens, cache);
    tokenCount += p.tokens.length;
    for (const r of p.rows) rows += r.count;
  }
  const device = model.ctx.device;
  // The packed passes' segment starts, uploaded once and copied into act.segments before each.
  const starts = Uint32Array.from(passes.flatMap((p) => (p.inputs ? Array.from(segmentStarts(p.inputs)) : [])));
  const segmentIds = starts.length > 0
    ? device.createBuffer({ label: 'hidden_segments', size: starts.byteLength, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST })
    : undefined;
  if (segmentIds) device.queue.writeBuffer(segmentIds, 0, starts);
  const tokenIds = device.createBuffer({ label: 'hidden_tokens', size: tokenCount * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  const readback = device.createBuffer({ label: 'hidden_readback', size: Math.max(4, rows * rowBytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const all = new Uint32Array(tokenCount);
  let at = 0;
  for (const p of passes) {
    all.set(p.tokens, at);
    at += p.tokens.length;
  }
  device.queue.writeBuffer(tokenIds, 0, all);
  // The same kernels as any prefill pass: a pass's hidden states do not depend on how it was split.
  const batch = model.kernels.begin({ prefill: true });
  try {
    let tokenAt = 0;
    let segmentAt = 0;
    let rowAt = 0;
    for (const p of passes) {
      const T = p.tokens.length;
      batch.copy(tokenIds, tokenAt * 4, act.tokenIds, 0, T * 4);
      if (p.inputs) {
        batch.copy(segmentIds!, segmentAt * 4, act.segments, 0, T * 4);
        segmentAt += T;
      }
      cache.noteWritten(p.startPos + T);
      recordForward(batch, model, act, { T, startPos: p.startPos, cache, hiddenOnly: true, segments: p.inputs ? act.segments : undefined }); // act.xb: [T, dim]
      for (const r of p.rows) {
        if (r.count > 0) batch.copy(act.xb, r.from * rowBytes, readback, rowAt * rowBytes, r.count * rowBytes);
        rowAt += r.count;
      }
      tokenAt += T;
    }
    batch.submit();
    // No rows (the middle of a long input): it resolves once the GPU is done with the passes.
    if (rows === 0) {
      await device.queue.onSubmittedWorkDone();
      return new Float32Array(0);
    }
    await readback.mapAsync(GPUMapMode.READ);
    const out = new Float32Array(readback.getMappedRange().slice(0));
    readback.unmap();
    return out;
  } finally {
    batch.discard();
    // Legal right after submit: the buffers are freed once the submitted work is done with them.
    tokenIds.destroy();
    readback.destroy();
    segmentIds?.destroy();
  }
}
