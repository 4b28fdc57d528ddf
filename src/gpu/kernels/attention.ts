// Attention: attention.wgsl (prefill per_thread / per_workgroup, and split_combine) and
// decode_attention.wgsl (one token, RoPE and the K/V append folded in), composed with the slice
// helpers of the head dimension and the cache's element type; and the planning of their dispatches.
// The batched decode attention (a batch of sequences) is attention-batch.ts.
import type { ShaderSpec } from '../pipelines.ts';
import { assertCount, assertDistinct, assertFits, checkSegments } from './checks.ts';
import { ropePairingCode, ropeParams, type KvDType, type RopeRotation } from './elementwise.ts';
import { ATTENTION_ITEMS_PER_WORKGROUP, type KernelTuning } from './tuning.ts';
import { paramStruct, type PlannedDispatch } from '../uniforms.ts';
import {
  headSlices,
  MAX_UNROLLED_SLICES,
  positionWgsl,
  SEGMENT_WGSL,
  takeWgslFunctions,
  unrollConstLoops,
  withPosition,
  withSegments,
  type PositionSource,
  type TokenSpan,
} from './wgsl.ts';
import attentionWgsl from '../../../shaders/attention.wgsl?raw';
import onlineSoftmaxWgsl from '../../../shaders/online_softmax.wgsl?raw';
import sinCosWgsl from '../../../shaders/sin_cos.wgsl?raw';
import f16BitsWgsl from '../../../shaders/f16_bits.wgsl?raw';
import decodeAttentionWgsl from '../../../shaders/decode_attention.wgsl?raw';
import decodeAttentionPassWgsl from '../../../shaders/decode_attention_pass.wgsl?raw';

/** Largest head dimension the attention kernels handle (per_workgroup's workgroup-memory query vector). */
export const ATTENTION_MAX_HEAD_DIM = 256;

/** How attention splits q, k and v into heads, and which keys each query sees. */
export interface AttentionHeads {
  /** Query heads. */
  readonly heads: number;
  /** Key/value heads (grouped-query attention when fewer than `heads`). */
  readonly kvHeads: number;
  readonly headDim: number;
  /** Each query sees at most this many of the latest positions (Mistral, Qwen2); undefined: all. */
  readonly slidingWindow?: number;
  /** score = q·k · scale (Gemma: query_pre_attn_scalar^-1/2); default 1 / sqrt(headDim). */
  readonly scale?: number;
  /** score = softcap · tanh(score / softcap), after scale, before the mask and softmax (Gemma 2); undefined: none. */
  readonly softcap?: number;
  /**
   * The caches are a ring (a sliding-window layer's, KvCache): the K/V of position p at row
   * p mod ring.rows, for a sequence of up to ring.positions positions. The kernels plan their
   * entries and chunks as for a cache of ring.positions rows, so the sums are the same as there.
   * Undefined: row p, the caches as long as the sequence.
   */
  readonly ring?: KvRing;
}

/** A sliding-window layer's K/V cache as a ring (AttentionHeads.ring). */
export interface KvRing {
  /** Rows of the caches: at least the window (and, for a prefill pass of T tokens, window + T - 1). */
  readonly rows: number;
  /** The positions the sequence may reach (the context): what a full cache would hold. */
  readonly positions: number;
}

/**
 * `fn kv_row(j: u32) -> u32`, the cache row of position j: j, or with a ring of `rows` rows j mod
 * rows; and the split decode attention's chunk slots (decode_attention.wgsl, split_combine):
 * `fn slot_chunk(slot, pos) -> u32`, the chunk of positions that work slot `slot` takes for the
 * query at pos, and `fn chunk_slot(c) -> u32`, the slot of chunk c. Without a ring a slot is its
 * chunk; with one there are params.num_chunks slots, enough for the chunks a window spans, and
 * chunk c takes slot c mod num_chunks (so the chunks are those, and in the order, of a full cache).
 * `fn chunk_limit(lo) -> u32`: the last chunk split_combine may read for a query whose first is lo.
 */
export function kvRowWgsl(
  ringRows: number | undefined,
  /** A batched step's slots: kv_row adds `kv_slot_base`, the row's slot's first cache row (a private the kernel sets). */
  slotBase = false,
): string {
  const base = slotBase ? 'kv_slot_base + ' : '';
  if (ringRows === undefined) {
    return (
      `fn kv_row(j: u32) -> u32 { return ${base}j; }\n` +
      'fn slot_chunk(slot: u32, pos: u32) -> u32 { return slot; }\n' +
      'fn chunk_slot(c: u32) -> u32 { return c; }\nfn chunk_limit(lo: u32) -> u32 { return params.num_chunks - 1u; }\n'
    );
  }
  return (
    `fn kv_row(j: u32) -> u32 { return ${base}j % ${ringRows}u; }\n` +
    'fn slot_chunk(slot: u32, pos: u32) -> u32 {\n  let n = params.num_chunks;\n  let lo = first_key(pos) / params.chunk_keys;\n' +
    '  return lo + (slot + n - lo % n) % n;\n}\nfn chunk_slot(c: u32) -> u32 { return c % params.num_chunks; }\n' +
    'fn chunk_limit(lo: u32) -> u32 { return lo + params.num_chunks - 1u; }\n'
  );
}
export const ringKey = (ring: number | undefined) => (ring === undefined ? '' : `/ring${ring}`);

/** AttentionHeads and how RoPE rotates q and k: what the decode kernels, which rotate them themselves, take. */
export interface AttentionShape extends AttentionHeads, RopeRotation {}

export type AttentionVariant = {
  entry: 'per_thread' | 'per_workgroup' | 'split_combine';
  headDim: number;
  kvDType: KvDType;
  position?: PositionSource;
  /** per_thread: query heads of one token per thread (attentionHeadsPerThread); 1 for the other entries. */
  heads?: number;
  /** per_thread: query tokens per thread (attentionQueriesPerThread); 1 for the other entries. */
  queries?: number;
  /** per_thread: threads a workgroup (attentionThreadsPerWorkgroup); split_combine: 64. */
  threads?: number;
  /** The scores soft-capped at params.softcap (scoreCapWgsl). */
  softcap?: boolean;
  /** The caches' rows when they are a ring (kvRowWgsl). */
  ring?: number;
  /** A packed pass (TokenSpan.segments): first_key starts at the query's input (PACKED_FIRST_KEY_WGSL); no ring, uniform position. */
  packed?: boolean;
};
export const attentionKey = (v: AttentionVariant) =>
  `attention/${v.entry}/hd${v.headDim}/kv_${v.kvDType}/pos_${v.position ?? 'uniform'}/g${v.heads ?? 1}/q${v.queries ?? 1}/w${v.threads ?? ATTENTION_ITEMS_PER_WORKGROUP}` +
  (v.softcap ? '/softcap' : '') +
  ringKey(v.ring) +
  (v.packed ? '/packed' : '');

/**
 * The packed variant's `fn first_key(pos: u32) -> u32` (in place of online_softmax.wgsl's): the
 * first row of the query's input, token_segment[pos - start_pos()], or with a window the later of
 * that and the window's first row (rows and positions differ by the input's first row, so the
 * window's rule on rows is the same). Non-decreasing in pos, as per_thread's key loops require.
 */
export const PACKED_FIRST_KEY_WGSL =
  'fn first_key(pos: u32) -> u32 {\n  let segment = token_segment[pos - start_pos()];\n' +
  '  if (params.window == 0u || pos < params.window) {\n    return segment;\n  }\n' +
  '  return max(segment, pos + 1u - params.window);\n}\n';

/**
 * `fn cap_score(s: f32) -> f32`, which the attention kernels apply to every score (after the
 * scale, before the mask): with `softcap`, params.softcap · tanh(s / params.softcap) (Gemma 2;
 * the quotient clamped to ±15, where tanh is ±1 in f32, as some backends' tanh overflows to NaN
 * beyond); without, s as it is.
 */
export function scoreCapWgsl(softcap: boolean): string {
  return softcap
    ? 'fn cap_score(s: f32) -> f32 { return params.softcap * tanh(clamp(s / params.softcap, -15.0, 15.0)); }\n'
    : 'fn cap_score(s: f32) -> f32 { return s; }\n';
}
export const attentionSpec = (v: AttentionVariant): ShaderSpec => {
  const heads = v.heads ?? 1;
  const queries = v.queries ?? 1;
  if (v.packed && (v.ring !== undefined || (v.position ?? 'uniform') !== 'uniform' || v.entry === 'split_combine')) {
    throw new Error('packed attention: per_thread or per_workgroup, uniform position, no ring');
  }
  const softmax = v.packed ? `${SEGMENT_WGSL}${takeWgslFunctions(onlineSoftmaxWgsl, ['first_key']).rest}${PACKED_FIRST_KEY_WGSL}` : onlineSoftmaxWgsl;
  const code =
    `const HEAD_DIM: u32 = ${v.headDim}u;\nconst GROUP_HEADS: u32 = ${heads}u;\nconst QUERIES: u32 = ${queries}u;\n` +
    `const THREAD_WORKGROUP_SIZE: u32 = ${v.threads ?? ATTENTION_ITEMS_PER_WORKGROUP}u;\n` +
    `const HEADS: u32 = ${heads * queries}u;\n${attentionSliceWgsl(v.headDim % 4 === 0, v.kvDType)}${scoreCapWgsl(!!v.softcap)}` +
    `${positionWgsl(v.position ?? 'uniform')}\n${softmax}\n${kvRowWgsl(v.ring)}${attentionWgsl}`;
  // Unrolled: CPU devices index the slice arrays through memory otherwise. Measurements: docs/tuning.md#attention
  return { code: unrollAttentionLoops(code, v.headDim, heads * queries, { GROUP_HEADS: heads, QUERIES: queries }), entryPoint: v.entry };
};

/**
 * attention.wgsl's element type of q and the caches: vec4s when the head dimension is a multiple
 * of 4 (every head starts at a multiple of 4 floats), else single floats.
 */
export function attentionSliceWgsl(aligned: boolean, kvDType: KvDType, withQ = true, withStoreOut = true): string {
  const load1 = (name: string, buf: string) =>
    aligned
      ? `fn ${name}(i: u32) -> f32 { return ${buf}[i >> 2u][i & 3u]; }\n`
      : `fn ${name}(i: u32) -> f32 { return ${buf}[i]; }\n`;
  let cache: string;
  if (kvDType === 'f32') {
    cache =
      'alias KV = H;\n' +
      load1('load_k1', 'k_cache') +
      load1('load_v1', 'v_cache') +
      'fn load_k(i: u32) -> H { return k_cache[i]; }\nfn load_v(i: u32) -> H { return v_cache[i]; }\n';
  } else if (aligned) {
    // Four halves (one H) in two words.
    const f = (name: string, buf: string) =>
      `fn ${name}(i: u32) -> H { let w = ${buf}[i]; return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }\n` +
      `fn ${name}1(i: u32) -> f32 { return unpack2x16float(${buf}[i >> 2u][(i >> 1u) & 1u])[i & 1u]; }\n`;
    cache = 'alias KV = vec2<u32>;\n' + f('load_k', 'k_cache') + f('load_v', 'v_cache');
  } else {
    const f = (name: string, buf: string) =>
      `fn ${name}(i: u32) -> H { return unpack2x16float(${buf}[i >> 1u])[i & 1u]; }\n` +
      `fn ${name}1(i: u32) -> f32 { return ${name}(i); }\n`;
    cache = 'alias KV = u32;\n' + f('load_k', 'k_cache') + f('load_v', 'v_cache');
  }
  const loads = (withQ ? load1('load_q1', 'q') : '') + cache;
  if (!aligned) {
    return (
      `alias H = f32;\nconst WIDTH: u32 = 1u;\nfn hsum(v: H) -> f32 { return v; }\n${loads}${withStoreOut ? 'fn store_out(i: u32, v: H) { out[i] = v; }\n' : ''}`
    );
  }
  const store4 = (name: string, buf: string) =>
    `fn ${name}(i: u32, v: H) { ${buf}[i] = v.x; ${buf}[i + 1u] = v.y; ${buf}[i + 2u] = v.z; ${buf}[i + 3u] = v.w; }\n`;
  return (
    `alias H = vec4<f32>;\nconst WIDTH: u32 = 4u;\nfn hsum(v: H) -> f32 { return v.x + v.y + v.z + v.w; }\n${loads}` +
    (withStoreOut ? store4('store_out', 'out') : '')
  );
}

export type DecodeAttentionVariant = {
  headDim: number;
  kvDType: KvDType;
  position: PositionSource;
  split: boolean;
  threads: number;
  /** Query heads per thread (a divisor of the GQA group; see attentionHeadsPerThread). */
  heads: number;
} & DecodeAttentionFeatures;
/** What decode_attention.wgsl does beyond Llama's attention, each read from its params when on (decodeAttentionHelpersWgsl). */
export type DecodeAttentionFeatures = {
  /** The scores soft-capped at params.softcap. */
  softcap?: boolean;
  /** RoPE of params.rotary_dims elements a head, cos and sin times params.magnitude (else all of them, times 1). */
  rope?: boolean;
  /** q's and k's heads RMS-normalized before RoPE (gammas at DECODE_QK_NORM_BINDINGS, eps params.qk_eps). */
  qkNorm?: boolean;
  /** The caches' rows when they are a ring (kvRowWgsl). */
  ring?: number;
  /** A batched step's slots (kvRowWgsl's slotBase). */
  slotBase?: boolean;
};
/** decode_attention_pass.wgsl's qk_norm variant: the bindings of the q and k norms' gammas. */
export const DECODE_QK_NORM_BINDINGS = { q: 9, k: 10 } as const;
export const decodeAttentionKey = (v: DecodeAttentionVariant) =>
  `decode_attention/hd${v.headDim}/kv_${v.kvDType}/pos_${v.position}/${v.split ? 'split' : 'whole'}/t${v.threads}/g${v.heads}` +
  (v.softcap ? '/softcap' : '') +
  (v.rope ? '/rope_params' : '') +
  (v.qkNorm ? '/qk_norm' : '') +
  ringKey(v.ring);

/**
 * What decode_attention.wgsl's attend_item needs besides its buffers (see the head of that file):
 * the slice helpers, online_softmax.wgsl, sin_cos.wgsl, f16_bits.wgsl, and the cache's element
 * type's qf_h / kf_h / qkv_h / round_kv / store_kv_row. The kernel that includes it declares
 * `params`, `k_cache`, `v_cache`, `out` (or, with withStoreOut false, its own store_out), load_qkv,
 * load_inv_freq, start_pos, store_partial and store_ml.
 */
export function decodeAttentionHelpersWgsl(
  headDim: number,
  heads: number,
  kvDType: KvDType,
  withStoreOut = true,
  /** The features on (decode_attention_pass.wgsl's params hold their values); none: the decode layer kernel's. */
  features: DecodeAttentionFeatures = {},
): string {
  const aligned = headDim % 4 === 0;
  // (q comes from qkv: no load_q1.)
  let code = `const HEAD_DIM: u32 = ${headDim}u;\nconst HEADS: u32 = ${heads}u;\n` + attentionSliceWgsl(aligned, kvDType, false, withStoreOut);
  code += scoreCapWgsl(!!features.softcap);
  // RoPE's rotated elements a head and factor: the params', or all of them and 1 (folded away).
  code += features.rope
    ? 'fn rope_dims() -> u32 { return params.rotary_dims; }\nfn rope_magnitude() -> f32 { return params.magnitude; }\n'
    : 'fn rope_dims() -> u32 { return HEAD_DIM; }\nfn rope_magnitude() -> f32 { return 1.0; }\n';
  // The per-head q/k norm's weights and eps, or none (its code is then compiled out).
  const { q, k } = DECODE_QK_NORM_BINDINGS;
  code += features.qkNorm
    ? `const QK_NORM: bool = true;\n@group(0) @binding(${q}) var<storage, read> q_norm_gamma: array<f32>;\n` +
      `@group(0) @binding(${k}) var<storage, read> k_norm_gamma: array<f32>;\n` +
      'fn q_gamma(e: u32) -> f32 { return q_norm_gamma[e]; }\nfn k_gamma(e: u32) -> f32 { return k_norm_gamma[e]; }\n' +
      'fn qk_eps() -> f32 { return params.qk_eps; }\n'
    : 'const QK_NORM: bool = false;\nfn q_gamma(e: u32) -> f32 { return 1.0; }\nfn k_gamma(e: u32) -> f32 { return 1.0; }\n' +
      'fn qk_eps() -> f32 { return 0.0; }\n';
  code += `${onlineSoftmaxWgsl}\n${sinCosWgsl}\n${f16BitsWgsl}\n${kvRowWgsl(features.ring, features.slotBase)}`;
  code += 'fn pack_f16(a: f32, b: f32) -> u32 { return f16_bits(a) | (f16_bits(b) << 16u); }\n';
  if (aligned) {
    code +=
      'fn qf_h(e: u32) -> H { return H(qf[e], qf[e + 1u], qf[e + 2u], qf[e + 3u]); }\n' +
      'fn kf_h(e: u32) -> H { return H(kf[e], kf[e + 1u], kf[e + 2u], kf[e + 3u]); }\n' +
      'fn qkv_h(i: u32) -> H { return H(load_qkv(i), load_qkv(i + 1u), load_qkv(i + 2u), load_qkv(i + 3u)); }\n';
  } else {
    code += 'fn qf_h(e: u32) -> H { return qf[e]; }\nfn kf_h(e: u32) -> H { return kf[e]; }\nfn qkv_h(i: u32) -> H { return load_qkv(i); }\n';
  }
  if (kvDType === 'f32') {
    code +=
      'fn round_kv(x: H) -> H { return x; }\n' +
      'fn store_kv_row(e0: u32) { for (var i = 0u; i < HEAD_SLICES; i++) { k_cache[e0 / WIDTH + i] = k_cur[i]; v_cache[e0 / WIDTH + i] = v_cur[i]; } }\n';
  } else if (aligned) {
    code +=
      'fn round_kv(x: H) -> H { return H(unpack2x16float(pack_f16(x.x, x.y)), unpack2x16float(pack_f16(x.z, x.w))); }\n' +
      'fn store_kv_row(e0: u32) {\n  for (var i = 0u; i < HEAD_SLICES; i++) {\n' +
      '    k_cache[e0 / 4u + i] = vec2<u32>(pack_f16(k_cur[i].x, k_cur[i].y), pack_f16(k_cur[i].z, k_cur[i].w));\n' +
      '    v_cache[e0 / 4u + i] = vec2<u32>(pack_f16(v_cur[i].x, v_cur[i].y), pack_f16(v_cur[i].z, v_cur[i].w));\n  }\n}\n';
  } else {
    // Single floats: a cache word holds two of them (e0 and HEAD_DIM are even).
    code +=
      'fn round_kv(x: H) -> H { return unpack2x16float(f16_bits(x)).x; }\n' +
      'fn store_kv_row(e0: u32) {\n  for (var i = 0u; i < HEAD_SLICES; i += 2u) {\n' +
      '    k_cache[(e0 + i) / 2u] = pack_f16(k_cur[i], k_cur[i + 1u]);\n    v_cache[(e0 + i) / 2u] = pack_f16(v_cur[i], v_cur[i + 1u]);\n  }\n}\n';
  }
  return code;
}

/**
 * An attention kernel's slice and head loops (and `extra` ones) unrolled, where its `heads` slots
 * of a head's slices are few enough (MAX_UNROLLED_SLICES).
 */
export function unrollAttentionLoops(source: string, headDim: number, heads: number, extra: Record<string, number> = {}): string {
  const slices = headSlices(headDim);
  if (slices * heads > MAX_UNROLLED_SLICES) return source;
  return unrollConstLoops(source, { HEAD_SLICES: slices, HEADS: heads, ...extra });
}

/** decode_attention_pass.wgsl: decode_attention.wgsl as a dispatch of its own. */
export function decodeAttentionSpec(v: DecodeAttentionVariant): ShaderSpec {
  const aligned = v.headDim % 4 === 0;
  let code = `const THREADS: u32 = ${v.threads}u;\n` + decodeAttentionHelpersWgsl(v.headDim, v.heads, v.kvDType, true, v) + positionWgsl(v.position);
  code += 'fn load_qkv(i: u32) -> f32 { return qkv[i]; }\nfn load_inv_freq(d: u32) -> f32 { return inv_freq[d]; }\n';
  // The partials binding exists only in the split variant (a layout 'auto' binding must be bound).
  if (v.split) {
    code +=
      '@group(0) @binding(5) var<storage, read_write> partials: array<f32>;\n' +
      (aligned
        ? 'fn store_partial(i: u32, v: H) { partials[i] = v.x; partials[i + 1u] = v.y; partials[i + 2u] = v.z; partials[i + 3u] = v.w; }\n'
        : 'fn store_partial(i: u32, v: H) { partials[i] = v; }\n') +
      'fn store_ml(i: u32, m: f32, l: f32) { partials[i] = m; partials[i + 1u] = l; }\n';
  } else {
    code += 'fn store_partial(i: u32, v: H) {}\nfn store_ml(i: u32, m: f32, l: f32) {}\n';
  }
  const source = `${code}\n${decodeAttentionWgsl}\n${decodeAttentionPassWgsl}`;
  return { code: unrollAttentionLoops(source, v.headDim, v.heads), entryPoint: 'main' };
}

/** attention.wgsl's Params (chunk_keys and num_chunks: split_combine only). */
export const ATTENTION_PARAMS = paramStruct({
  T: 'u32',
  start_pos: 'u32',
  num_heads: 'u32',
  num_kv_heads: 'u32',
  head_dim: 'u32',
  scale: 'f32',
  window: 'u32',
  chunk_keys: 'u32',
  num_chunks: 'u32',
  softcap: 'f32',
});
/** decode_attention_pass.wgsl's Params. */
export const DECODE_ATTENTION_PARAMS = paramStruct({
  start_pos: 'u32',
  num_heads: 'u32',
  num_kv_heads: 'u32',
  head_dim: 'u32',
  scale: 'f32',
  window: 'u32',
  chunk_keys: 'u32',
  num_chunks: 'u32',
  pairing: 'u32',
  softcap: 'f32',
  rotary_dims: 'u32',
  magnitude: 'f32',
  qk_eps: 'f32',
});

/** What planAttention and planDecodeAttention read of the device's kernels (KernelRegistry has it). */
export interface AttentionKernels {
  readonly ctx: { readonly limits: { readonly maxStorageBuffersPerShaderStage: number } };
  readonly tuning: KernelTuning;
  attentionPipeline(variant: AttentionVariant): GPUComputePipeline;
  decodeAttentionPipeline(variant: DecodeAttentionVariant): GPUComputePipeline;
}

/** Throws unless `shape`'s heads are ones the attention kernels take. */
export function checkAttentionShape(shape: AttentionHeads, what: string): void {
  const { heads, kvHeads, headDim } = shape;
  assertCount(heads, `${what} numHeads`);
  assertCount(kvHeads, `${what} numKvHeads`);
  assertCount(headDim, `${what} headDim`);
  if (heads % kvHeads !== 0) throw new Error(`attention numHeads (${heads}) must be a multiple of numKvHeads (${kvHeads})`);
  if (headDim > ATTENTION_MAX_HEAD_DIM) throw new Error(`attention headDim ${headDim} exceeds the supported ${ATTENTION_MAX_HEAD_DIM}`);
  for (const [value, name] of [[shape.scale, 'scale'], [shape.softcap, 'softcap']] as const) {
    if (value !== undefined && !(Number.isFinite(value) && value > 0)) throw new Error(`${what} ${name} must be a positive number, got ${value}`);
  }
  if (shape.slidingWindow !== undefined) assertCount(shape.slidingWindow, 'attention slidingWindow');
}

/**
 * Throws unless `ring` can take a pass of T tokens: its rows hold the T new positions and, with a
 * window, the window's keys before the first of them (window + T - 1 rows), so that no row a
 * query reads is overwritten by the pass.
 */
export function checkRing(ring: KvRing, T: number, window: number | undefined, what: string): void {
  assertCount(ring.rows, `${what} ring.rows`);
  assertCount(ring.positions, `${what} ring.positions`);
  const needed = window === undefined ? T : window + T - 1;
  if (ring.rows < needed) {
    throw new Error(`${what}: a ring of ${ring.rows} K/V rows cannot take ${T} tokens` + (window === undefined ? '' : ` with a window of ${window} (needs ${needed})`));
  }
}

/** Throws unless `shape`'s ring (if any) can take a pass of T tokens: a ring needs a window. */
export function checkShapeRing(shape: AttentionHeads, T: number, what: string): void {
  if (!shape.ring) return;
  if (shape.slidingWindow === undefined) throw new Error(`${what}: a ring K/V cache needs a sliding window`);
  checkRing(shape.ring, T, shape.slidingWindow, what);
}

/** The scores' parameters of `shape` (attention.wgsl's and decode_attention_pass.wgsl's Params). */
export function scoreParams(shape: AttentionHeads): { scale: number; softcap: number } {
  return { scale: shape.scale ?? 1 / Math.sqrt(shape.headDim), softcap: shape.softcap ?? 0 };
}

/** The dispatch of a prefill attention (see KernelRecorder.attention), checked; none for T = 0. */
export function planAttention(
  kernels: AttentionKernels,
  buffers: { out: GPUBuffer; q: GPUBuffer; keys: GPUBuffer; values: GPUBuffer },
  tokens: TokenSpan,
  shape: AttentionHeads,
  kvDType: KvDType,
  /** A prefill pass: the entry chosen as for a long one, whatever T (KernelRecorder.prefill). */
  prefill = false,
): PlannedDispatch | undefined {
  const { out, q, keys: kCache, values: vCache } = buffers;
  const { T, startPos, position, segments } = tokens;
  const { heads: numHeads, kvHeads: numKvHeads, headDim, slidingWindow } = shape;
  assertCount(T, 'attention T', 0);
  assertCount(startPos, 'attention startPos', 0);
  checkAttentionShape(shape, 'attention');
  if (T === 0) return undefined;
  assertDistinct(out, [q, kCache, vCache], 'attention');
  assertFits(out, T * numHeads * headDim * 4, 'attention out');
  assertFits(q, T * numHeads * headDim * 4, 'attention q');
  if (kvDType === 'f16' && (numKvHeads * headDim) % 2 !== 0) {
    throw new Error(`attention: an f16 KV cache needs an even K/V row (numKvHeads * headDim = ${numKvHeads * headDim})`);
  }
  const rowBytes = numKvHeads * headDim * (kvDType === 'f16' ? 2 : 4);
  checkShapeRing(shape, T, 'attention');
  const ring = shape.ring;
  if (segments) {
    checkSegments(segments, [out], T, position, 'attention');
    if (ring) throw new Error('attention: a packed pass (segments) over a ring K/V cache is not supported');
  }
  assertFits(kCache, (ring ? ring.rows : startPos + T) * rowBytes, 'attention kCache');
  assertFits(vCache, (ring ? ring.rows : startPos + T) * rowBytes, 'attention vCache');
  const items = T * numHeads;
  // The most keys any query sees: with a GPU position, as many as the cache holds (a ring: as a
  // full cache of its positions would, so that both take the same entry).
  const lastRow = position ? (ring ? ring.positions : Math.floor(Math.min(kCache.size, vCache.size) / rowBytes)) : startPos + T;
  const keys = Math.min(lastRow, slidingWindow ?? Infinity);
  const tuning = kernels.tuning;
  const entry = tuning.attentionPlan(prefill ? Infinity : items, keys, headDim);
  const heads = entry === 'per_thread' ? tuning.attentionHeads(numHeads / numKvHeads, headDim) : 1;
  const queries = entry === 'per_thread' ? tuning.attentionQueries(T, heads, headDim) : 1;
  const threads = Math.ceil(T / queries) * (numHeads / heads);
  const workgroup = tuning.attentionThreads;
  const source = position ? 'buffer' : 'uniform';
  return {
    pipeline: kernels.attentionPipeline({
      entry,
      headDim,
      kvDType,
      position: source,
      heads,
      queries,
      threads: entry === 'per_thread' ? workgroup : undefined,
      softcap: shape.softcap !== undefined,
      ring: ring?.rows,
      ...(segments ? { packed: true } : {}),
    }),
    params: ATTENTION_PARAMS.pack({
      T,
      start_pos: startPos,
      num_heads: numHeads,
      num_kv_heads: numKvHeads,
      head_dim: headDim,
      ...scoreParams(shape),
      window: slidingWindow ?? 0,
      chunk_keys: 0,
      num_chunks: 0,
    }),
    buffers: withSegments(withPosition({ 1: out, 2: q, 3: kCache, 4: vCache }, position), segments),
    workgroups: entry === 'per_thread' ? Math.ceil(threads / workgroup) : items,
  };
}

/**
 * The dispatches of a decode attention (see KernelRecorder.decodeAttention), checked:
 * decode_attention.wgsl, and split_combine after it when the keys split into several chunks.
 */
export function planDecodeAttention(
  kernels: AttentionKernels,
  buffers: { out: GPUBuffer; qkv: GPUBuffer; keys: GPUBuffer; values: GPUBuffer; invFreq: GPUBuffer },
  at: Omit<TokenSpan, 'T'>,
  shape: AttentionShape,
  kvDType: KvDType,
  split: { chunkKeys: number; partials: GPUBuffer } | undefined,
  qkNorm?: { q: GPUBuffer; k: GPUBuffer; eps: number },
): PlannedDispatch[] {
  const { out, qkv, keys: kCache, values: vCache, invFreq } = buffers;
  const { startPos, position } = at;
  const { heads: numHeads, kvHeads: numKvHeads, headDim, pairing, slidingWindow } = shape;
  assertCount(startPos, 'decodeAttention startPos', 0);
  if (at.segments) throw new Error('decodeAttention: a packed pass (segments) runs the prefill attention');
  checkAttentionShape(shape, 'decodeAttention');
  if (headDim % 2 !== 0) throw new Error(`decodeAttention headDim must be even (RoPE pairs), got ${headDim}`);
  if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
  const { rotaryDims, magnitude } = ropeParams(shape, headDim, 'decodeAttention');
  const qDim = numHeads * headDim;
  const kvDim = numKvHeads * headDim;
  assertDistinct(out, [qkv, kCache, vCache, invFreq, split?.partials, qkNorm?.q, qkNorm?.k], 'decodeAttention');
  assertDistinct(kCache, [vCache, qkv, qkNorm?.q, qkNorm?.k], 'decodeAttention');
  assertDistinct(vCache, [qkNorm?.q, qkNorm?.k], 'decodeAttention');
  if (qkNorm) {
    assertFits(qkNorm.q, headDim * 4, 'decodeAttention qkNorm.q');
    assertFits(qkNorm.k, headDim * 4, 'decodeAttention qkNorm.k');
    if (!(Number.isFinite(qkNorm.eps) && qkNorm.eps >= 0)) throw new Error(`decodeAttention qkNorm.eps must be a number >= 0, got ${qkNorm.eps}`);
  }
  assertFits(out, qDim * 4, 'decodeAttention out');
  assertFits(qkv, (qDim + 2 * kvDim) * 4, 'decodeAttention qkv');
  assertFits(invFreq, (rotaryDims / 2) * 4, 'decodeAttention invFreq');
  const rowBytes = kvDim * (kvDType === 'f16' ? 2 : 4);
  checkShapeRing(shape, 1, 'decodeAttention');
  const ring = shape.ring;
  assertFits(kCache, (ring ? ring.rows : startPos + 1) * rowBytes, 'decodeAttention kCache');
  assertFits(vCache, (ring ? ring.rows : startPos + 1) * rowBytes, 'decodeAttention vCache');
  // The positions the chunks cover: the cache's rows, or a ring's positions (as a full cache's).
  const rows = ring ? ring.positions : Math.floor(Math.min(kCache.size, vCache.size) / rowBytes);
  if (split) assertCount(split.chunkKeys, 'decodeAttention chunkKeys');
  // Storage buffers: out, qkv, the caches, invFreq, and the position, partials and gammas when
  // bound. Where the split's partials would pass the device's limit (qkNorm with a position
  // buffer: 9 of the 8 WebGPU promises), the keys go unsplit, one chunk, one dispatch.
  const unsplit = 5 + (position ? 1 : 0) + (qkNorm ? 2 : 0);
  const maxStorage = kernels.ctx.limits.maxStorageBuffersPerShaderStage;
  if (unsplit > maxStorage) throw new Error(`decodeAttention binds ${unsplit} storage buffers, the device ${maxStorage}`);
  const chunkKeys = split && unsplit < maxStorage ? split.chunkKeys : rows;
  const positionChunks = Math.ceil(rows / chunkKeys);
  if (positionChunks > 1 && !split) throw new Error('decodeAttention: several chunks need a partials buffer');
  // A ring's work slots: as many as the chunks a window's keys span, at least 2 where a full cache
  // splits (so that split_combine sums the same chunks in the same order: kvRowWgsl).
  const chunks =
    ring && positionChunks > 1 ? Math.min(positionChunks, Math.max(2, Math.ceil((slidingWindow! - 1) / chunkKeys) + 1)) : positionChunks;
  if (split) assertFits(split.partials, numHeads * chunks * (headDim + 2) * 4, 'decodeAttention partials');
  const { scale, softcap } = scoreParams(shape);
  const attention = { num_heads: numHeads, num_kv_heads: numKvHeads, head_dim: headDim, scale, window: slidingWindow ?? 0, softcap };
  const features: DecodeAttentionFeatures = {
    softcap: shape.softcap !== undefined,
    rope: rotaryDims !== headDim || magnitude !== 1,
    qkNorm: !!qkNorm,
    ring: ring?.rows,
  };
  const source = position ? 'buffer' : 'uniform';
  const threads = kernels.tuning.decodeAttentionThreads;
  const heads = kernels.tuning.attentionHeads(numHeads / numKvHeads, headDim);
  const bound: Record<number, GPUBuffer> = { 1: out, 2: qkv, 3: kCache, 4: vCache, 6: invFreq };
  if (chunks > 1 && split) bound[5] = split.partials;
  if (qkNorm) {
    bound[DECODE_QK_NORM_BINDINGS.q] = qkNorm.q;
    bound[DECODE_QK_NORM_BINDINGS.k] = qkNorm.k;
  }
  const dispatches: PlannedDispatch[] = [
    {
      pipeline: kernels.decodeAttentionPipeline({ headDim, kvDType, position: source, split: chunks > 1, threads, heads, ...features }),
      params: DECODE_ATTENTION_PARAMS.pack({
        start_pos: startPos,
        ...attention,
        chunk_keys: chunkKeys,
        num_chunks: chunks,
        pairing: ropePairingCode(pairing),
        rotary_dims: rotaryDims,
        magnitude,
        qk_eps: qkNorm?.eps ?? 0,
      }),
      buffers: withPosition(bound, position),
      workgroups: Math.ceil(((numHeads / heads) * chunks) / threads),
    },
  ];
  if (chunks > 1 && split) {
    dispatches.push({
      pipeline: kernels.attentionPipeline({ entry: 'split_combine', headDim, kvDType, position: source, ring: ring?.rows }),
      params: ATTENTION_PARAMS.pack({ T: 1, start_pos: startPos, ...attention, chunk_keys: chunkKeys, num_chunks: chunks }),
      buffers: withPosition({ 1: out, 5: split.partials }, position),
      workgroups: Math.ceil((numHeads * headDim) / ATTENTION_ITEMS_PER_WORKGROUP),
    });
  }
  return dispatches;
}
