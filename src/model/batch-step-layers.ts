// The batch decode step of the decode-layer path (CPU adapters, small models): the step of
// decode-layers.ts for up to maxRows sequences at once, each row in its own slot of a KvCache with
// slots, in the same few dispatches: decode_layer.wgsl's rows variant (decode_layer_rows.wgsl)
// runs each phase for every row in turn, so a weight block read for row 1 comes from cache for the
// others, and one pipeline serves every row count (read from the state on the GPU).
import { DECODE_RECORD_BYTES, DECODE_RECORD_SLOTS, DECODE_ROWS_TOKEN_STRIDE, decodeLayerGroups, decodeRowsLogitsStride, type DecodeArena } from '../gpu/kernels/index.ts';
import { BATCH_TOKEN_STRIDE_BYTES, type BatchDecodeStep, type BatchRow, type RowRegion } from './batch-step.ts';
import { decodeLayerFeatures, decodeLayerRefusal, decodeLayerState } from './decode-layers.ts';
import type { LlamaParts } from './forward.ts';
import type { KvCache } from './kv-cache.ts';

/** What createLayeredBatchStep takes of its LlamaModel. */
export interface LayeredBatchModel extends LlamaParts {
  /** The decode layers' matrices in one buffer (createDecodeArena), made on first use and kept by the model. */
  decodeArena(): DecodeArena | null;
}

export interface LayeredBatchOptions {
  /** Most rows a step runs. */
  maxRows: number;
  /** Ids the tokens may be chosen among (DecodeStepOptions.vocabRows): with fewer than the vocabulary, no greedy pick. */
  vocabRows?: number;
  /**
   * Workgroups the rows are shared out over (row r in workgroup r mod rowGroups, at most maxRows;
   * default 1): with more, a CPU adapter runs groups of rows on several cores, each group reading
   * the weights once.
   */
  rowGroups?: number;
}

/**
 * A BatchDecodeStep over `cache`'s slots with decode_layer.wgsl's rows variant, or why it cannot
 * run the model: it takes what decodeLayerState takes (the decode-layer path), with every matrix,
 * the token embedding and W_lm_head in the f32 arena (so that the embedding and the logits of every
 * row join the layers' dispatches).
 */
export function createLayeredBatchStep(model: LayeredBatchModel, cache: KvCache, options: LayeredBatchOptions): BatchDecodeStep | string {
  const { maxRows } = options;
  if (!(Number.isInteger(maxRows) && maxRows >= 1)) throw new Error(`maxRows must be an integer >= 1, got ${maxRows}`);
  if (BATCH_TOKEN_STRIDE_BYTES !== DECODE_ROWS_TOKEN_STRIDE * 4) throw new Error('the rows variant\'s token stride is not BATCH_TOKEN_STRIDE_BYTES');
  const s = model.shape;
  const refusal = decodeLayerRefusal(s);
  if (refusal) return `the decode layer kernel does not run ${refusal}`;
  // The path's conditions first (the state is small), so that a model off the path never makes the arena.
  const layered = decodeLayerState(model, cache, maxRows);
  if (!layered) return 'the model does not take the decode-layer path (not a CPU adapter, layers too large, or weights without COPY_SRC)';
  const arena = model.decodeArena();
  if (!arena?.embedding || !arena.lmHead) {
    layered.state.destroy();
    return arena
      ? 'the token embedding or W_lm_head is larger than a layer: not in the arena'
      : 'the decode layers\' matrices are not in an f32 arena (not f32, split, or too large)';
  }
  const rows = layered.rows!;
  const device = model.ctx.device;
  const vocab = arena.lmHead.rows;
  const logitsStride = decodeRowsLogitsStride(vocab);
  const tokens = device.createBuffer({
    label: 'batch_tokens',
    size: maxRows * BATCH_TOKEN_STRIDE_BYTES,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
  });
  const logits = device.createBuffer({
    label: 'batch_logits',
    size: maxRows * logitsStride * 4,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  // The greedy pick chooses among every row of W_lm_head: with fewer ids allowed, none.
  const greedy = (options.vocabRows ?? s.vocab) >= vocab;
  const features = decodeLayerFeatures(s, cache);
  const shape = {
    dims: { dim: s.dim, qDim: s.qDim, kvDim: s.kvDim, ffn: s.ffn, headDim: s.attention.headDim, numLayers: s.layers },
    attention: s.attention,
    eps: s.eps,
    features,
    rows: maxRows,
    rowGroups: Math.min(options.rowGroups ?? 1, maxRows),
  };
  const hasBias = model.weights.layers.some((layer) => layer.bq || layer.bk || layer.bv);
  const program = model.kernels.program('batch decode step');
  for (const [first, count] of decodeLayerGroups(s.layers, model.ctx.limits.maxStorageBuffersPerShaderStage, true, true)) {
    const last = first + count === s.layers;
    const weights = {
      arena,
      embedFrom: first === 0 ? tokens : undefined,
      logits: last ? logits : undefined,
      greedyTo: last && greedy ? tokens : undefined,
      hasBias,
    };
    program.decodeLayers(layered.state, weights, { first, count }, shape, cache);
  }
  program.seal();
  const control = new Uint32Array(4 + 4 * maxRows);
  const check = (r: number) => {
    if (!(Number.isInteger(r) && r >= 0 && r < maxRows)) throw new RangeError(`row ${r} is outside 0..${maxRows - 1}`);
  };
  return {
    maxRows,
    slots: cache.slots,
    slotKv: (l, slot) => ({ keys: cache.keys[l], values: cache.values[l], offset: cache.slotOffset(l, slot) }),
    setRows(batch: readonly BatchRow[]): void {
      if (batch.length > maxRows) throw new Error(`${batch.length} rows, the step runs at most ${maxRows}`);
      const seen = new Set<number>();
      control.fill(0);
      control[0] = batch.length;
      batch.forEach(({ slot, position }, r) => {
        cache.slotOffset(0, slot); // throws outside the slots
        if (seen.has(slot)) throw new Error(`slot ${slot} is in two rows`);
        seen.add(slot);
        if (!(Number.isInteger(position) && position >= 0 && position < cache.capacity)) {
          throw new Error(`row ${r}'s position ${position} is outside the KV cache (0 .. ${cache.capacity - 1})`);
        }
        control.set([position, slot, slot * cache.capacity, 0], 4 + 4 * r);
      });
      // The count and the rows' control vec4s are contiguous in the state (decodeLayerRowsLayout).
      device.queue.writeBuffer(layered.state, rows.count * 4, control, 0, 4 + 4 * batch.length);
    },
    encode: (encoder) => program.encode(encoder),
    encodeInPass: program.dispatchesOnly ? (pass) => program.encodeInPass(pass) : undefined,
    rowLogits(r: number): RowRegion {
      check(r);
      return { buffer: logits, offset: r * logitsStride * 4 };
    },
    rowToken(r: number): RowRegion {
      check(r);
      return { buffer: tokens, offset: r * BATCH_TOKEN_STRIDE_BYTES };
    },
    greedy: greedy
      ? { records: { buffer: layered.state, offset: rows.records * 4, bytes: DECODE_RECORD_BYTES, slots: DECODE_RECORD_SLOTS } }
      : undefined,
    dispatchCount: program.dispatchCount,
    destroy(): void {
      program.destroy();
      for (const b of [layered.state, tokens, logits]) b.destroy();
    },
  };
}
