// The decode step of small models on CPU adapters: each layer in one dispatch of decode_layer.wgsl
// (the same math as the five dispatches a layer of decode-step.ts), its activations in one state
// buffer, and where every matrix fits one f32 arena, several layers a dispatch.
import {
  DECODE_LAYER_MAX_WEIGHTS,
  decodeLayerGroups,
  decodeLayerLayout,
  decodeLayerRowsLayout,
  decodeLayerUnsupported,
  type DecodeArena,
  type DecodeLayerDims,
  type DecodeLayerFeatures,
  type DecodeLayerLayout,
  type DecodeLayerRowsLayout,
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
 * The family features decode_layer.wgsl runs for this model (DecodeLayerFeatures; all off for a
 * Llama-layout model, whose shader, key and state layout are then the plain block's): q/k norms,
 * each layer's RoPE table, rotated dims and magnitude (where any layer differs from one full table
 * of magnitude 1; a layer without RoPE gets a table of zeros), each layer's window (where they
 * differ), the attention soft-cap, post-block norms, GeGLU, the embedding scale and the logit
 * soft-cap; and with a `cache` whose window layers keep rings (KvCache.rings), each layer's ring rows.
 */
export function decodeLayerFeatures(s: LlamaShape, cache?: KvCache): DecodeLayerFeatures {
  const f = s.family;
  const headDim = s.attention.headDim;
  const features: DecodeLayerFeatures = {};
  if (f.qkNorm) features.qkNorm = true;
  const ownRope = s.layerShapes.some(
    (l) => !l.rope || l.ropeTable !== 0 || (l.attention.rotaryDims ?? headDim) !== headDim || (l.attention.magnitude ?? 1) !== 1,
  );
  if (ownRope) features.layerRope = true;
  if (s.layerShapes.some((l) => l.attention.slidingWindow !== s.attention.slidingWindow)) features.layerWindow = true;
  if (s.attention.softcap !== undefined) features.attentionSoftcap = true;
  if (f.postAttentionNorm || f.postFeedForwardNorm) features.postNorms = true;
  if (f.activation === 'gelu_tanh') features.geluTanh = true;
  if (f.embeddingScale !== undefined) features.embeddingScale = true;
  if (f.finalLogitSoftcap !== undefined) features.logitSoftcap = true;
  if (cache?.ringed) features.ring = true;
  return features;
}

/**
 * Why decode_layer.wgsl cannot run a model, or undefined where it can. It runs the Llama block and
 * every feature of decodeLayerFeatures; what is left takes the fused-matvec step instead, on
 * purpose: another activation, a block with one post-norm but not the other, and an attention
 * scale, soft-cap or head count that differs between layers (the kernel reads those once for the
 * whole model). No family of FamilyDescription has these today.
 */
export function decodeLayerRefusal(s: LlamaShape): string | undefined {
  const f = s.family;
  if (f.activation !== 'silu' && f.activation !== 'gelu_tanh') return `the ${String(f.activation)} activation`;
  if (f.postAttentionNorm !== f.postFeedForwardNorm) return 'one post-block norm without the other';
  const features = decodeLayerFeatures(s);
  const a = s.attention;
  for (const layer of s.layerShapes) {
    const la = layer.attention;
    if (la.scale !== a.scale || la.softcap !== a.softcap) return 'attention scales or soft-caps per layer';
    if (la.heads !== a.heads || la.kvHeads !== a.kvHeads || la.headDim !== a.headDim || la.pairing !== a.pairing) return 'attention heads per layer';
    const unsupported = decodeLayerUnsupported(la, la.headDim, features);
    if (unsupported) return unsupported;
  }
  return undefined;
}

/** The decode layers' state buffer, and where it keeps what. */
export interface DecodeLayerState {
  readonly state: GPUBuffer;
  readonly layout: DecodeLayerLayout;
  /** With `rows` (decodeLayerState's maxRows): the rows variant's regions, after the layout's. */
  readonly rows?: DecodeLayerRowsLayout;
}

/**
 * For a decode step whose layers each run as one dispatch (Kernels.usesDecodeLayer, for every
 * layer): its state buffer (decodeLayerLayout), with RoPE's frequencies and every layer's norms
 * and biases copied in (and, where the cache keeps window layers' rings, KvCache.rings, each
 * layer's ring rows: the ring feature). Undefined: the step takes the five dispatches a layer.
 */
export function decodeLayerState(model: LlamaParts, cache: KvCache, maxRows?: number): DecodeLayerState | undefined {
  const { shape: s, weights: w } = model;
  const dims = decodeLayerDims(s);
  if (decodeLayerRefusal(s) !== undefined) return undefined;
  if (!w.layers.every((layer) => model.kernels.usesDecodeLayer(dims, layerMatrices(layer)))) return undefined;
  // The norms and biases are copied into the state: weights uploaded without COPY_SRC (made by
  // hand rather than by uploadLlamaWeights) keep the five dispatches.
  const vectors = [
    w.outputNorm,
    ...w.layers.flatMap((layer) => [layer.attnNorm, layer.ffnNorm, layer.bq, layer.bk, layer.bv, layer.qNorm, layer.kNorm, layer.postAttnNorm, layer.postFfnNorm]),
    ...model.invFreqs,
  ];
  if (!vectors.every((b) => !b || b.usage & GPUBufferUsage.COPY_SRC)) return undefined;
  if (cache.keys.length !== s.layers) throw new Error(`the KV cache has ${cache.keys.length} layers, the model ${s.layers}`);
  const features = decodeLayerFeatures(s, cache);
  const layout = decodeLayerLayout(dims, features);
  // A batch of rows (batch-step-layers.ts): its rows' regions follow the constants.
  const rows = maxRows ? decodeLayerRowsLayout(dims, features, maxRows) : undefined;
  const fl = layout.features;
  const headDim = s.attention.headDim;
  if (features.qkNorm && !w.layers.every((layer) => layer.qNorm && layer.kNorm)) return undefined;
  if (features.postNorms && !w.layers.every((layer) => layer.postAttnNorm && layer.postFfnNorm)) return undefined;
  const device = model.ctx.device;
  const state = device.createBuffer({
    label: 'decode_state',
    size: (rows ?? layout).floats * 4,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  const encoder = device.createCommandEncoder({ label: 'decode state constants' });
  // One table for every layer; with layerRope each layer's own instead (below).
  if (!features.layerRope) encoder.copyBufferToBuffer(model.invFreq, 0, state, layout.freq * 4, (headDim / 2) * 4);
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
    if (!fl) return;
    // The features' constants (decodeLayerFeatureLayout): q/k norms, post-norms, the layer's RoPE
    // table (left zero without RoPE: cos 1, sin 0) and [window, rotary dims, magnitude, 0].
    if (features.qkNorm) {
      copy(layer.qNorm, fl.qNorm, headDim);
      copy(layer.kNorm, fl.kNorm, headDim);
    }
    if (features.postNorms) {
      copy(layer.postAttnNorm, fl.postAttn, s.dim);
      copy(layer.postFfnNorm, fl.postFfn, s.dim);
    }
    const ls = s.layerShapes[l];
    const rotary = ls.attention.rotaryDims ?? headDim;
    if (features.layerRope && ls.rope) copy(model.invFreqs[ls.ropeTable], fl.freq, rotary / 2);
    if (fl.ext >= 0) {
      const ext = new ArrayBuffer(16);
      new Uint32Array(ext, 0, 2).set([ls.attention.slidingWindow ?? 0, rotary]);
      new Float32Array(ext, 8, 1)[0] = ls.attention.magnitude ?? 1;
      new Uint32Array(ext, 12, 1)[0] = cache.rings[l]?.rows ?? 0;
      device.queue.writeBuffer(state, (base + fl.ext) * 4, ext);
    }
  });
  if (fl && fl.model >= 0) {
    const f = s.family;
    device.queue.writeBuffer(state, fl.model * 4, new Float32Array([f.embeddingScale ?? 1, s.attention.softcap ?? 0, f.finalLogitSoftcap ?? 0, 0]));
  }
  device.queue.submit([encoder.finish()]);
  return rows ? { state, layout, rows } : { state, layout };
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
  const features = decodeLayerFeatures(s, cache);
  const shape = { dims: decodeLayerDims(s), attention: s.attention, eps: s.eps, features };
  if (!arena?.embedding) rec.embedding(io.state, w.tokenEmbedding, io.tokenIds, 1, s.family.embeddingScale ?? 1);
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
  if (!arena?.lmHead) {
    rec.fusedMatvec(io.logits, io.state, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps: s.eps } });
    if (s.family.finalLogitSoftcap !== undefined) rec.softcap(io.logits, s.vocab, s.family.finalLogitSoftcap); // Gemma 2
  }
}
