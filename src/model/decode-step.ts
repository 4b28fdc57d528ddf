// The reusable decode step: one token's forward pass recorded once (LlamaModel.createDecodeStep)
// and encoded again for every token, its token and position read on the GPU. It runs forward()'s
// math with fused kernels, five dispatches a layer (recordDecodeStep), or on CPU adapters, for
// small models, one dispatch a layer or fewer (decode-layers.ts).
import {
  DECODE_RECORD_BYTES,
  DECODE_RECORD_SLOTS,
  type DecodeArena,
  type KernelProgram,
  type KernelRecorder,
} from '../gpu/kernels/index.ts';
import { decodeLayerState, recordDecodeLayers } from './decode-layers.ts';
import type { KvCache } from './kv-cache.ts';
import type { Activations, LlamaParts } from './forward.ts';
import type { LlamaShape } from './shape.ts';

/**
 * One decode step recorded once and encoded again for every token: the token is read from
 * `tokenIn` on the GPU and the position from a small buffer, so nothing is created per step.
 */
export interface DecodeStep {
  /** u32 at byte offset 0: the token the next encodeStep embeds (written on the GPU by a sampler, or by queue.writeBuffer). */
  readonly tokenIn: GPUBuffer; // usage STORAGE | COPY_DST | COPY_SRC
  /** f32 [vocab]: the logits of the last encoded step, once its commands have run. */
  readonly logits: GPUBuffer; // usage STORAGE | COPY_SRC | COPY_DST
  /** Dispatches one encodeStep records. */
  readonly dispatchCount: number;
  /**
   * Records one decode step (the token in tokenIn at `position`, its K/V written to the cache at
   * `position`, logits out) into `encoder`. The position is set by a 4-byte copy recorded in the
   * encoder ahead of the dispatches (from a table of every position), so several steps may be
   * encoded into one command buffer, in order. Creates no buffers, bind groups or pipelines, and
   * writes nothing through the queue: it only encodes that copy and the recorded dispatches.
   */
  encodeStep(encoder: GPUCommandEncoder, position: number): void;
  /**
   * Present when each step leaves the next one's position on the GPU (the step of one dispatch a
   * layer: its last layer adds 1 to the position it ran at). Then a run of n steps at positions
   * p .. p + n - 1 is one `setPosition(encoder, p, n)` followed by `encodeInPass` per step, all in one
   * compute pass with whatever else runs between them (the sampler): no pass and no copy a step.
   */
  readonly consecutive?: {
    /** Records the copy that starts a run of `steps` steps at `position` (outside a pass). */
    setPosition(encoder: GPUCommandEncoder, position: number, steps: number): void;
    /** Records one step, at the position the previous one left, into an open compute pass. */
    encodeInPass(pass: GPUComputePassEncoder): void;
  };
  /**
   * Present with `consecutive` where the step's last dispatch can also pick the next token
   * greedily: the argmax of the logits (the lowest id on ties), as the GPU sampler picks it at
   * temperature 0 with no bias, penalties or alternatives. A greedy sequence then needs no
   * sampler dispatch a step.
   */
  readonly greedy?: {
    /**
     * consecutive.encodeInPass, then the pick: its id to tokenIn (byte 0), where the next step
     * reads it, and its record to `records`.
     */
    encodeInPass(pass: GPUComputePassEncoder): void;
    /**
     * Records of `bytes` each from byte `offset` of `buffer` (u32 id, f32 logprob, then zeros):
     * the step at position p writes slot p mod `slots`.
     */
    records: { buffer: GPUBuffer; offset: number; bytes: number; slots: number };
  };
  /** Frees the step's buffers (not the cache's). */
  destroy(): void;
}

export interface DecodeStepOptions {
  /**
   * The fused kernels (default true: 5 dispatches a layer, see recordDecodeStep); false records
   * forward()'s unfused kernels instead (16 a layer), for benchmarks and tests.
   */
  fused?: boolean;
  /**
   * Ids the tokens may be chosen among: the first `vocabRows` logits (default all). A checkpoint's
   * lm_head may have padding rows past its tokenizer's last id (Qwen2: 151936 rows, 151665 ids);
   * the step's greedy pick (DecodeStep.greedy) chooses among all rows, so with fewer it is left out.
   */
  vocabRows?: number;
}

/** What createDecodeStep takes of its LlamaModel. */
export interface DecodeStepContext extends LlamaParts {
  /** New activations for one token, its logits kept on the GPU (no readback). */
  newActivations(): Activations;
  /** forward()'s unfused pass of the token in act.tokenIds at the u32 position in `position`. */
  recordForward(rec: KernelRecorder, act: Activations, cache: KvCache, position: GPUBuffer): void;
  /** The decode layers' matrices in one buffer (createDecodeArena), made on first use and kept by the model. */
  decodeArena(): DecodeArena | null;
}

/**
 * Why the fused step (recordDecodeStep) cannot run a model, or undefined where it can. It runs
 * every feature of a FamilyDescription today (q/k norms and RoPE inside decode_attention, a
 * zero-frequency table for layers without RoPE, post-block norms, GeGLU, the embedding scale, the
 * logit soft-cap); a feature the fused kernels lack goes here, and such a model's reusable step
 * records forward()'s general pass instead (one token, the same kernels as a prefill), on purpose.
 */
export function fusedStepRefusal(s: LlamaShape): string | undefined {
  void s;
  return undefined;
}

/**
 * A reusable decode step over `cache` (see DecodeStep): its activations, position buffer, uniform
 * parameters and bind groups are made here, once.
 */
export function createDecodeStep(model: DecodeStepContext, cache: KvCache, options: DecodeStepOptions = {}): DecodeStep {
  const device = model.ctx.device;
  const act = model.newActivations();
  // Every position once, so that a step's position is a 4-byte copy recorded in the encoder (in
  // order with the dispatches) rather than a queue write: steps can share one command buffer.
  const positions = device.createBuffer({
    label: 'decode_positions',
    size: Math.max(4, cache.capacity * 4),
    usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(positions, 0, Uint32Array.from({ length: cache.capacity }, (_, i) => i));
  const s = model.shape;
  const a = s.attention;
  const storage = (label: string, floats: number) =>
    device.createBuffer({ label, size: Math.max(4, floats * 4), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const program = model.kernels.program('decode step');
  // Small models on CPU adapters: a layer in one dispatch, its activations in one state buffer.
  const layered = (options.fused ?? true) && decodeLayerState(model, cache);
  let greedyProgram: KernelProgram | undefined;
  let position: GPUBuffer | undefined;
  let qkv: GPUBuffer | undefined;
  let partials: GPUBuffer | undefined;
  let positionTarget: { buffer: GPUBuffer; offset: number };
  if (layered) {
    const arena = model.decodeArena();
    const io = { tokenIds: act.tokenIds, logits: act.logits, state: layered.state };
    recordDecodeLayers(program, model, arena, io, cache, false);
    // The greedy pick needs the logits in the layers' last dispatch, over every row.
    if (arena?.lmHead && (options.vocabRows ?? s.vocab) >= s.vocab) {
      greedyProgram = model.kernels.program('decode step, greedy');
      recordDecodeLayers(greedyProgram, model, arena, io, cache, true);
      greedyProgram.seal();
    }
    positionTarget = { buffer: layered.state, offset: layered.layout.pos * 4 };
  } else {
    position = device.createBuffer({ label: 'decode_position', size: 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    qkv = storage('qkv', (a.heads + 2 * a.kvHeads) * a.headDim);
    // Long caches split the attention over the sequence (flash-decoding): chunks of chunkKeys rows.
    const chunkKeys = model.kernels.decodeAttentionChunkKeys();
    const chunks = Math.ceil(cache.capacity / chunkKeys);
    partials = chunks > 1 ? storage('attention_partials', a.heads * chunks * (a.headDim + 2)) : undefined;
    if ((options.fused ?? true) && fusedStepRefusal(s) === undefined) {
      recordDecodeStep(program, model, act, { qkv, position, split: partials && { chunkKeys, partials } }, cache);
    } else {
      model.recordForward(program, act, cache, position);
    }
    positionTarget = { buffer: position, offset: 0 };
  }
  program.seal();
  const capacity = cache.capacity;
  const setPosition = (encoder: GPUCommandEncoder, pos: number, steps = 1): void => {
    const last = pos + steps - 1;
    if (!Number.isInteger(pos) || !Number.isInteger(steps) || pos < 0 || steps < 1 || last >= capacity) {
      throw new Error(`decode positions ${pos} .. ${last} are outside the KV cache (0 .. ${capacity - 1})`);
    }
    cache.noteWritten(pos + steps);
    encoder.copyBufferToBuffer(positions, pos * 4, positionTarget.buffer, positionTarget.offset, 4);
  };
  return {
    tokenIn: act.tokenIds,
    logits: act.logits,
    dispatchCount: program.dispatchCount,
    encodeStep(encoder: GPUCommandEncoder, pos: number): void {
      setPosition(encoder, pos);
      program.encode(encoder);
    },
    // decode_layer.wgsl advances the position on the last layer.
    consecutive: layered && program.dispatchesOnly ? { setPosition, encodeInPass: (pass) => program.encodeInPass(pass) } : undefined,
    greedy:
      layered && greedyProgram?.dispatchesOnly
        ? {
            encodeInPass: (pass) => greedyProgram.encodeInPass(pass),
            records: { buffer: layered.state, offset: layered.layout.records * 4, bytes: DECODE_RECORD_BYTES, slots: DECODE_RECORD_SLOTS },
          }
        : undefined,
    destroy(): void {
      program.destroy();
      greedyProgram?.destroy();
      for (const b of [position, positions, qkv, partials, layered ? layered.state : undefined]) b?.destroy();
      act.destroy();
    },
  };
}

/** The fused step's own buffers. */
interface FusedStepBuffers {
  /** f32 [q | k | v]: one token's projections, [(heads + 2 kvHeads) * headDim]. */
  readonly qkv: GPUBuffer;
  /** u32: the step's position. */
  readonly position: GPUBuffer;
  /** The attention's partial results when it is split over the sequence in chunks of chunkKeys rows. */
  readonly split: { chunkKeys: number; partials: GPUBuffer } | undefined;
}

/**
 * Records one decode step with the fused kernels, per layer:
 *   qkv = rmsnorm(x)·[Wq; Wk; Wv]ᵀ + [bq; bk; bv]          (one fused_matvec pass)
 *   cache[p] = (rope(k), v); a = attention(rope(q), K, V)  (decode_attention: one pass, or
 *                                                          split over the sequence + combine; q/k
 *                                                          per-head norms before RoPE inside it)
 *   x += a·Woᵀ                                            (fused_matvec, accumulate)
 *   h = act(rmsnorm(x)·W_gateᵀ) * (rmsnorm(x)·W_upᵀ)      (fused_matvec, SwiGLU or GeGLU)
 *   x += h·W_downᵀ                                        (fused_matvec, accumulate)
 * then logits = rmsnorm(x)·W_lm_headᵀ in one pass. A family with post-block norms writes a
 * block's output to blockOut, norms it in place and adds it (three dispatches for one). A layer
 * without RoPE rotates by the zero table (ropeTables): cos 1, sin 0, q and k as they are.
 */
function recordDecodeStep(rec: KernelRecorder, model: LlamaParts, act: Activations, step: FusedStepBuffers, cache: KvCache): void {
  const { shape: s, weights: w } = model;
  const family = s.family;
  const eps = s.eps;
  rec.embedding(act.x, w.tokenEmbedding, act.tokenIds, 1, family.embeddingScale ?? 1); // x: [dim]
  const activation = family.activation;
  for (let l = 0; l < s.layers; l++) {
    const layer = w.layers[l];
    const qkv = [
      { W: layer.wq, bias: layer.bq },
      { W: layer.wk, bias: layer.bk },
      { W: layer.wv, bias: layer.bv },
    ];
    rec.fusedMatvec(step.qkv, act.x, qkv, { norm: { gamma: layer.attnNorm, eps } }); // qkv: [qDim + 2 kvDim]
    const { attention: la, ropeTable } = s.layerShapes[l];
    const attention = { out: act.attnOut, qkv: step.qkv, keys: cache.keys[l], values: cache.values[l], invFreq: model.invFreqs[ropeTable] };
    const qkNorm = layer.qNorm && layer.kNorm ? { q: layer.qNorm, k: layer.kNorm, eps } : undefined;
    const ring = cache.rings[l];
    rec.decodeAttention(attention, { startPos: 0, position: step.position }, ring ? { ...la, ring } : la, cache.kvDType, step.split, qkNorm); // attnOut: [qDim]
    if (layer.postAttnNorm) {
      rec.fusedMatvec(act.blockOut, act.attnOut, [{ W: layer.wo }]);
      rec.rmsNorm(act.blockOut, act.blockOut, layer.postAttnNorm, 1, s.dim, eps);
      rec.add(act.x, act.x, act.blockOut, s.dim);
    } else {
      rec.fusedMatvec(act.x, act.attnOut, [{ W: layer.wo }], { accumulate: true });
    }
    // ffnHidden: [ffn]
    const swiglu = { norm: { gamma: layer.ffnNorm, eps }, scratch: { gate: act.gate, up: act.up }, ...(activation !== 'silu' ? { activation } : {}) };
    rec.fusedSwiglu(act.ffnHidden, act.x, layer.wGate, layer.wUp, swiglu);
    if (layer.postFfnNorm) {
      rec.fusedMatvec(act.blockOut, act.ffnHidden, [{ W: layer.wDown }]);
      rec.rmsNorm(act.blockOut, act.blockOut, layer.postFfnNorm, 1, s.dim, eps);
      rec.add(act.x, act.x, act.blockOut, s.dim);
    } else {
      rec.fusedMatvec(act.x, act.ffnHidden, [{ W: layer.wDown }], { accumulate: true });
    }
  }
  rec.fusedMatvec(act.logits, act.x, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps } }); // logits: [vocab]
  if (family.finalLogitSoftcap !== undefined) rec.softcap(act.logits, s.vocab, family.finalLogitSoftcap); // Gemma 2
}
