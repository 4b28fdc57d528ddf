// The final hidden states of prompts, for embeddings: forward.ts's pass up to the final norm (no LM
// head), several passes recorded into one command buffer with one read-back of the rows asked for.
//
// Each pass writes its K/V into the cache at its positions, like a prefill; passes run in order, so
// a pass may go on from the positions an earlier pass of the same call wrote (a long input split
// into chunks), and a pass at position 0 starts a new sequence over whatever the cache held. The
// token ids of every pass are uploaded once and copied into the activations' token buffer before
// each pass (queue writes would all land before the first pass ran).
import type { KvCache } from './kv-cache.ts';
import { recordForward, type Activations, type LlamaParts } from './forward.ts';

/** One pass of a hidden-state run. */
export interface HiddenPass {
  readonly tokens: readonly number[];
  /** The first token's position. */
  readonly startPos: number;
  /** The pass's rows whose hidden states are read back: rowFrom .. rowFrom + rowCount - 1 (0: none). */
  readonly rowFrom: number;
  readonly rowCount: number;
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
    const T = p.tokens.length;
    if (T === 0) throw new Error('a hidden-state pass needs at least one token');
    if (T > act.tokens) throw new Error(`a pass of ${T} tokens exceeds the activations (${act.tokens})`);
    if (T > cache.maxPassTokens) throw new Error(`a pass of ${T} tokens exceeds what the cache's rings take in one pass (${cache.maxPassTokens})`);
    if (p.startPos + T > cache.capacity) throw new Error(`sequence of ${p.startPos + T} positions exceeds the KV cache (${cache.capacity})`);
    if (!(p.rowFrom >= 0 && p.rowCount >= 0 && p.rowFrom + p.rowCount <= T)) throw new Error(`rows ${p.rowFrom}..${p.rowFrom + p.rowCount - 1} are outside a pass of ${T} tokens`);
    tokenCount += T;
    rows += p.rowCount;
  }
  const device = model.ctx.device;
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
    let rowAt = 0;
    for (const p of passes) {
      const T = p.tokens.length;
      batch.copy(tokenIds, tokenAt * 4, act.tokenIds, 0, T * 4);
      cache.noteWritten(p.startPos + T);
      recordForward(batch, model, act, { T, startPos: p.startPos, cache, hiddenOnly: true }); // act.xb: [T, dim]
      if (p.rowCount > 0) batch.copy(act.xb, p.rowFrom * rowBytes, readback, rowAt * rowBytes, p.rowCount * rowBytes);
      tokenAt += T;
      rowAt += p.rowCount;
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
  }
}
