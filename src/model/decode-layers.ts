// The decode step of small models on CPU adapters: each layer in one dispatch of decode_layer.wgsl
// (the same math as the five dispatches a layer of decode-step.ts), its activations in one state
// buffer, and where every matrix fits one f32 arena, several layers a dispatch.
import {
  DECODE_LAYER_MAX_WEIGHTS,
  decodeLayerGroups,
  decodeLayerLayout,
  decodeLayerUnsupported,
  type DecodeArena,
  type DecodeLayerDims,
  type DecodeLayerLayout,
  type KernelRecorder,
} from '../gpu/kernels/index.ts';
import type { GpuMatrix } from '../gpu/tensor.ts';
import type { KvCache } from './kv-cache.ts';
import type { LlamaParts } from './forward.ts';
import type { LlamaShape } from './shape.ts';
import type { LlamaLayerWeights } from './weights.ts';

/**
 * The most bytes createDecodeArena copies the decode layers' matrices into. Only small models
 * take decode_layer.wgsl (DECODE_LAYER_MAX_WEIGHTS a layer), so this bounds the memory their decode
 * step adds to the weights (stories260K: ~1 MB).
 */
const MAX_DECODE_ARENA_BYTES = 64 * 1024 * 1024;

/** A layer's projections in the decode layer kernel's order (DECODE_LAYER_MATRICES). */
function layerMatrices(layer: LlamaLayerWeights): GpuMatrix[] {
  return [layer.wq, layer.wk, layer.wv, layer.wo, layer.wGate, layer.wUp, layer.wDown];
}

/** The sizes the decode layer kernel is compiled for. */
function decodeLayerDims(s: LlamaShape): DecodeLayerDims {
  return { dim: s.dim, qDim: s.qDim, kvDim: s.kvDim, ffn: s.ffn, headDim: s.attention.headDim, numLayers: s.layers };
}

/**
 * Why decode_layer.wgsl cannot run a model, or undefined where it can. The kernel runs the plain
 * Llama block with one attention shape for every layer (it is not extended: issue 30's plan), so
 * a family description with anything more (q/k norms, post-norms, another activation, an
 * embedding scale, a logit soft-cap, a layer without RoPE or with a RoPE table or window of its
 * own, partial or scaled rotation, attention soft-caps) takes the fused-matvec step instead, on
 * purpose (test/model/model-families.test.ts checks the fallback).
 */
export function decodeLayerRefusal(s: LlamaShape): string | undefined {
  const f = s.family;
  if (f.qkNorm) return 'q/k norms';
  if (f.postAttentionNorm || f.postFeedForwardNorm) return 'post-block norms';
  if (f.activation !== 'silu') return `the ${f.activation} activation`;
  if (f.embeddingScale !== undefined) return 'an embedding scale';
  if (f.finalLogitSoftcap !== undefined) return 'final-logit soft-capping';
  for (const layer of s.layerShapes) {
    if (!layer.rope) return 'layers without RoPE';
    if (layer.ropeTable !== 0) return 'RoPE tables per layer';
    if (layer.attention.slidingWindow !== s.attention.slidingWindow) return 'windows per layer';
    const unsupported = decodeLayerUnsupported(layer.attention, layer.attention.headDim);
    if (unsupported) return unsupported;
  }
  return undefined;
}

/** The decode layers' state buffer, and where it keeps what. */
export interface DecodeLayerState {
  readonly state: GPUBuffer;
  readonly layout: DecodeLayerLayout;
}

/**
 * For a decode step whose layers each run as one dispatch (Kernels.usesDecodeLayer, for every
 * layer): its state buffer (decodeLayerLayout), with RoPE's frequencies and every layer's norms
 * and biases copied in. Undefined: the step takes the five dispatches a layer.
 */
export function decodeLayerState(model: LlamaParts, cache: KvCache): DecodeLayerState | undefined {
  const { shape: s, weights: w } = model;
  const dims = decodeLayerDims(s);
  if (decodeLayerRefusal(s) !== undefined) return undefined;
  if (!w.layers.every((layer) => model.kernels.usesDecodeLayer(dims, layerMatrices(layer)))) return undefined;
  // The norms and biases are copied into the state: weights uploaded without COPY_SRC (made by
  // hand rather than by uploadLlamaWeights) keep the five dispatches.
  const vectors = [w.outputNorm, ...w.layers.flatMap((layer) => [layer.attnNorm, layer.ffnNorm, layer.bq, layer.bk, layer.bv])];
  if (!vectors.every((b) => !b || b.usage & GPUBufferUsage.COPY_SRC)) return undefined;
  if (cache.keys.length !== s.layers) throw new Error(`the KV cache has ${cache.keys.length} layers, the model ${s.layers}`);
  const layout = decodeLayerLayout(dims);
  const device = model.ctx.device;
  const state = device.createBuffer({
    label: 'decode_state',
    size: layout.floats * 4,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  const encoder = device.createCommandEncoder({ label: 'decode state constants' });
  encoder.copyBufferToBuffer(model.invFreq, 0, state, layout.freq * 4, (s.attention.headDim / 2) * 4);
  encoder.copyBufferToBuffer(w.outputNorm, 0, state, layout.outNorm * 4, s.dim * 4);
  w.layers.forEach((layer, l) => {
    const base = layout.consts + l * layout.constsStride;
    const copy = (src: GPUBuffer | undefined, at: number, floats: number) => {
      if (src) encoder.copyBufferToBuffer(src, 0, state, (base + at) * 4, floats * 4);
    };
    // Layer l's constants: [γ_attn | γ_ffn | bq | bk | bv]; missing biases stay zero (a new buffer is zeroed).
    copy(layer.attnNorm, 0, s.dim);
    copy(layer.ffnNorm, s.dim, s.dim);
    copy(layer.bq, 2 * s.dim, s.qDim);
    copy(layer.bk, 2 * s.dim + s.qDim, s.kvDim);
    copy(layer.bv, 2 * s.dim + s.qDim + s.kvDim, s.kvDim);
  });
  device.queue.submit([encoder.finish()]);
  return { state, layout };
}

/**
 * The decode layers' matrices copied into one f32 buffer, for decode_layer.wgsl's dispatches of
 * several layers; with the token embedding and W_lm_head where each is no bigger than a layer
 * (the layer kernel runs on one core: a large vocabulary's logits go faster on their own). Null
 * where a matrix is not f32, is split, cannot be copied (made without COPY_SRC), or the copy
 * would pass MAX_DECODE_ARENA_BYTES: the step then takes a dispatch a layer.
 */
export function createDecodeArena(model: LlamaParts): DecodeArena | null {
  const w = model.weights;
  const copyable = (m: GpuMatrix) => m.dtype === 'f32' && !m.parts && (m.buffer.usage & GPUBufferUsage.COPY_SRC) !== 0;
  const matrices = w.layers.flatMap(layerMatrices);
  if (!model.kernels.tuning.decodeArena || !matrices.every(copyable)) return null;
  const small = (m: GpuMatrix) => copyable(m) && m.rows * m.cols <= DECODE_LAYER_MAX_WEIGHTS && m.cols === model.shape.dim;
  const extras = [w.tokenEmbedding, w.lmHead].filter(small);
  const offsets = new Map<GpuMatrix, number>();
  let floats = 0;
  for (const m of [...matrices, ...extras]) {
    if (offsets.has(m)) continue; // tied embeddings: one copy
    offsets.set(m, floats);
    floats += Math.ceil((m.rows * m.cols) / 4) * 4;
  }
  if (floats * 4 > MAX_DECODE_ARENA_BYTES) return null;
  const device = model.ctx.device;
  const buffer = device.createBuffer({ label: 'decode_arena', size: floats * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder({ label: 'decode arena' });
  for (const [m, offset] of offsets) encoder.copyBufferToBuffer(m.buffer, 0, buffer, offset * 4, m.rows * m.cols * 4);
  device.queue.submit([encoder.finish()]);
  const at = (m: GpuMatrix) => offsets.get(m)!;
  const extra = (m: GpuMatrix) => (small(m) ? { offset: at(m), rows: m.rows } : undefined);
  return {
    buffer,
    layers: w.layers.map((layer) => layerMatrices(layer).map(at)),
    embedding: extra(w.tokenEmbedding),
    lmHead: extra(w.lmHead),
  };
}

/** The buffers a decode-layer step reads its token from and writes its results to. */
export interface DecodeLayerIo {
  /** u32 [1]: the token to embed; with `greedy`, the next token is written back here. */
  readonly tokenIds: GPUBuffer;
  /** f32 [vocab]. */
  readonly logits: GPUBuffer;
  /** x and the layer activations (decodeLayerState). */
  readonly state: GPUBuffer;
}

/**
 * Records one decode step with decode_layer.wgsl, x in `io.state` from the embedding to the logits.
 * With an `arena` (createDecodeArena), a dispatch runs up to four layers, the first one also the
 * embedding and the last the logits when the arena holds those matrices: stories260K's step is
 * then two dispatches rather than seven. Without, a dispatch a layer. `greedy` (arena with
 * W_lm_head only) ends the step with the argmax of the logits written to io.tokenIds.
 */
export function recordDecodeLayers(
  rec: KernelRecorder,
  model: LlamaParts,
  arena: DecodeArena | null,
  io: DecodeLayerIo,
  cache: KvCache,
  greedy: boolean,
): void {
  const { shape: s, weights: w } = model;
  const shape = { dims: decodeLayerDims(s), attention: s.attention, eps: s.eps };
  if (!arena?.embedding) rec.embedding(io.state, w.tokenEmbedding, io.tokenIds, 1);
  if (arena) {
    const hasBias = w.layers.some((layer) => layer.bq || layer.bk || layer.bv);
    const maxStorage = model.ctx.limits.maxStorageBuffersPerShaderStage;
    for (const [first, count] of decodeLayerGroups(s.layers, maxStorage, !!arena.embedding, !!arena.lmHead)) {
      const embedFrom = first === 0 && arena.embedding ? io.tokenIds : undefined;
      const logits = first + count === s.layers && arena.lmHead ? io.logits : undefined;
      const greedyTo = greedy && logits ? io.tokenIds : undefined;
      rec.decodeLayers(io.state, { arena, embedFrom, logits, greedyTo, hasBias }, { first, count }, shape, cache);
    }
  } else {
    w.layers.forEach((layer, l) => {
      const hasBias = !!(layer.bq || layer.bk || layer.bv);
      rec.decodeLayers(io.state, { matrices: layerMatrices(layer), hasBias }, { first: l, count: 1 }, shape, cache);
    });
  }
  if (!arena?.lmHead) rec.fusedMatvec(io.logits, io.state, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps: s.eps } });
}
