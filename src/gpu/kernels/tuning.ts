// Every device choice of the kernels (workgroup shapes, entry points, splits, which decode path)
// as one KernelTuning, computed from the device (CPU or GPU, subgroup size) and overridable per
// Kernels for tests and measurements. The rules live here; the measurements behind them in
// docs/tuning.md.
import type { WeightDType } from '../tensor.ts';
import { isQuantized } from '../weight-formats.ts';
import { headSlices, MAX_UNROLLED_SLICES } from './wgsl.ts';

/** An rmsnorm.wgsl entry point. */
export type RmsNormEntry = 'per_row' | 'per_workgroup';
/** An attention.wgsl entry point for a prefill or unfused decode. */
export type AttentionEntry = 'per_thread' | 'per_workgroup';

/** What the tuning is computed from. */
export interface DeviceTraits {
  /** A CPU implementation (SwiftShader, llvmpipe): loads and barriers are dear, dispatches too. */
  isCpu: boolean;
  /** The smallest subgroup size; 0 without the subgroups feature. */
  subgroupMinSize: number;
}

/**
 * The kernels' choices on one device. Functions where the choice depends on the sizes at hand;
 * `Kernels.create(ctx, { tuning })` replaces any of them (a constant: `() => value`).
 */
export interface KernelTuning {
  /** The prefill matmul's workgroup for T tokens of `dtype` rows, `aligned`: a multiple of 4 columns. */
  matmulShape(T: number, aligned: boolean, dtype: WeightDType): MatmulShape;
  /** matvec.wgsl's (and the fused matvec's) split of rows of `cols` weights. */
  matvecPlan(cols: number): MatvecPlan;
  /** fused_matvec.wgsl's quads a block and threads a workgroup. */
  fusedShape: FusedShape;
  /** Whether matrix-vector kernels walk quantized rows a run (dot_run) at a time. */
  weightRuns: boolean;
  /** rmsnorm.wgsl's entry point for rows of `dim` floats. */
  rmsNormPlan(dim: number): RmsNormEntry;
  /** attention.wgsl's entry point for `items` (token, head) pairs over at most `keys` keys. */
  attentionPlan(items: number, keys: number, headDim: number): AttentionEntry;
  /** Query heads a thread serves (a divisor of the GQA `group`): per_thread, decode attention, decode layer. */
  attentionHeads(group: number, headDim: number): number;
  /** Query tokens a per_thread thread serves in a prefill of T tokens. */
  attentionQueries(T: number, heads: number, headDim: number): number;
  /** attention.wgsl per_thread's threads a workgroup. */
  attentionThreads: number;
  /** Keys per chunk of the decode attention's split over the sequence. */
  decodeChunkKeys: number;
  /** decode_attention.wgsl's threads a workgroup. */
  decodeAttentionThreads: number;
  /** Whether a decode step runs a layer of `weights` weights as one decode_layer.wgsl dispatch (where it fits). */
  decodeLayer(weights: number): boolean;
  /** false: decode_layer.wgsl binds each layer's matrices, a dispatch a layer, never the shared f32 arena. */
  decodeArena: boolean;
  /** decode_layer.wgsl's threads (one workgroup). */
  decodeLayerWorkgroup: number;
  /** decode_layer.wgsl's quads of rows a block. */
  decodeLayerQuads: number;
}

/** The device's tuning, with the defined entries of `overrides` in place of the computed choices. */
export function kernelTuning(device: DeviceTraits, overrides: Partial<KernelTuning> = {}): KernelTuning {
  const { isCpu, subgroupMinSize } = device;
  const defined = Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) as Partial<KernelTuning>;
  return {
    matmulShape: (T, aligned, dtype) => matmulShape(isCpu, T, aligned, dtype),
    matvecPlan: (cols) => matvecPlan(cols, subgroupMinSize),
    fusedShape: fusedShape(isCpu),
    weightRuns: isCpu,
    rmsNormPlan: (dim) => rmsNormPlan(dim, isCpu),
    attentionPlan: (items, keys, headDim) => attentionPlan(items, keys, headDim, isCpu),
    attentionHeads: (group, headDim) => attentionHeadsPerThread(group, headDim, isCpu),
    attentionQueries: (T, heads, headDim) => attentionQueriesPerThread(T, heads, headDim, isCpu),
    attentionThreads: attentionThreadsPerWorkgroup(isCpu),
    decodeChunkKeys: isCpu ? DECODE_CHUNK_KEYS_CPU : DECODE_CHUNK_KEYS_GPU,
    decodeAttentionThreads: isCpu ? DECODE_ATTENTION_THREADS_CPU : DECODE_ATTENTION_THREADS_GPU,
    decodeLayer: (weights) => isCpu && weights <= DECODE_LAYER_MAX_WEIGHTS,
    decodeArena: true,
    decodeLayerWorkgroup: DECODE_LAYER_WORKGROUP,
    decodeLayerQuads: DECODE_LAYER_QUADS,
    ...defined,
  };
}

/**
 * The prefill matmul's workgroup: wx x wy threads that each compute 4 rows x `tokens` tokens, with
 * matmul.wgsl (register blocks only) or, `tiled`, matmul_tiled.wgsl (16 x 16 threads of 4 x 4,
 * shared-memory tiles of 64 rows x 64 tokens).
 */
export interface MatmulShape {
  wx: number;
  wy: number;
  tokens: number;
  /** matmul.wgsl: 4-row blocks a thread (default 1). */
  rowQuads?: number;
  tiled?: boolean;
}

/** matmul_tiled.wgsl's shape (its constants: 64 x 64 tiles). */
export const TILED_MATMUL_SHAPE: MatmulShape = { wx: 16, wy: 16, tokens: 4, tiled: true };
/** Fewer tokens than this leave most of a 64-token tile idle: GPUs take matmul.wgsl then. */
export const TILED_MATMUL_MIN_TOKENS = 32;

/**
 * The prefill matmul's workgroup. GPUs: matmul_tiled.wgsl from 32 tokens (aligned rows), else 16 x 4
 * threads of 4 rows x 4 tokens. CPU devices: no tiles and bigger register blocks, 8 rows x 16 tokens
 * a thread in 4 x 2 (f32, f16), 4 x 8 in 16 x 4 for quantized rows (their unrolled unpacking
 * compiles slowly). Measurements: docs/tuning.md#matmul
 */
export function matmulShape(isCpu: boolean, T = Infinity, aligned = true, dtype: WeightDType = 'f32'): MatmulShape {
  if (isCpu) return isQuantized(dtype) ? { wx: 16, wy: 4, tokens: 8 } : { wx: 4, wy: 2, tokens: 16, rowQuads: 2 };
  return aligned && T >= TILED_MATMUL_MIN_TOKENS ? TILED_MATMUL_SHAPE : { wx: 16, wy: 4, tokens: 4 };
}

/** matvec.wgsl's workgroup size: 64 / TEAM quads of 4 rows per workgroup. */
export const MATVEC_WORKGROUP = 64;

/** Rows up to this many columns get one thread per quad of rows (see matvecPlan). */
export const MATVEC_SOLO_COLS = 256;

/** How matvec.wgsl splits a row: TEAM threads per quad of rows, and how their partial sums meet. */
export interface MatvecPlan {
  team: number;
  /** 'none' for a team of one; 'subgroup': shuffles within a subgroup; 'workgroup': workgroup memory and barriers. */
  reduction: 'none' | 'subgroup' | 'workgroup';
}

/**
 * The matvec split for rows of `cols` weights, on a device whose subgroups have at least
 * `subgroupMinSize` invocations (0: no subgroups feature): a team of one up to MATVEC_SOLO_COLS,
 * else a team that gives each lane at least 64 weights of each of its 4 rows, up to one subgroup
 * (shuffles) or, without subgroups, the workgroup (barriers). Measurements: docs/tuning.md#matvec
 */
export function matvecPlan(cols: number, subgroupMinSize: number): MatvecPlan {
  const maxTeam = subgroupMinSize > 0 ? Math.min(subgroupMinSize, MATVEC_WORKGROUP) : MATVEC_WORKGROUP;
  if (cols <= MATVEC_SOLO_COLS) return { team: 1, reduction: 'none' };
  let team = 1;
  while (team < maxTeam && team * 2 * 64 <= cols) team *= 2;
  if (team === 1) return { team: 1, reduction: 'none' };
  return { team, reduction: subgroupMinSize > 0 ? 'subgroup' : 'workgroup' };
}

/** How fused_matvec.wgsl hands out rows: quads (of 4 rows) per block (TEAM threads), threads per workgroup. */
export interface FusedShape {
  quads: number;
  workgroup: number;
}

/**
 * The fused matvec's shape: GPUs a quad per block and 64 threads (as matvec.wgsl); CPU devices 2
 * quads a thread and 16 threads a workgroup. Measurements: docs/tuning.md#fused-matvec
 */
export function fusedShape(isCpu: boolean): FusedShape {
  return isCpu ? { quads: 2, workgroup: 16 } : { quads: 1, workgroup: MATVEC_WORKGROUP };
}

/**
 * Keys per chunk of the decode attention's split over the sequence: CPU devices split late (a
 * dispatch costs more than a thread walking its keys), GPUs early. Measurements: docs/tuning.md#decode-attention
 */
export const DECODE_CHUNK_KEYS_CPU = 1024;
export const DECODE_CHUNK_KEYS_GPU = 256;
/** decode_attention.wgsl's threads ((head, chunk) pairs) a workgroup: few items a step on CPU devices, a wave on GPUs. */
export const DECODE_ATTENTION_THREADS_CPU = 8;
export const DECODE_ATTENTION_THREADS_GPU = 64;

/** rmsnorm.wgsl `per_row`: token rows (one thread each) per workgroup. */
export const RMSNORM_ROWS_PER_WORKGROUP = 64;

/**
 * On GPUs, rows up to this many floats get rmsnorm.wgsl's `per_row` (one thread per row, no
 * barriers), longer ones `per_workgroup` (256 threads a row); CPU devices always `per_row`.
 * Measurements: docs/tuning.md#rmsnorm
 */
export const RMSNORM_ROW_MAX_DIM = 1024;

/** Which rmsnorm.wgsl entry point normalizes rows of `dim` floats (see RMSNORM_ROW_MAX_DIM). */
export function rmsNormPlan(dim: number, isCpu: boolean): 'per_row' | 'per_workgroup' {
  return isCpu || dim <= RMSNORM_ROW_MAX_DIM ? 'per_row' : 'per_workgroup';
}

/** attention.wgsl `split_combine`'s threads a workgroup, and `per_thread`'s on GPUs. */
export const ATTENTION_ITEMS_PER_WORKGROUP = 64;

/**
 * attention.wgsl `per_thread`'s threads a workgroup: 16 on CPU devices, so that a causal prefill's
 * uneven threads spread over more workgroups (what the cores share). Measurements: docs/tuning.md#attention-threads
 */
export function attentionThreadsPerWorkgroup(isCpu: boolean): number {
  return isCpu ? 16 : ATTENTION_ITEMS_PER_WORKGROUP;
}

/**
 * (token, head) pairs below which a long-context attention goes to `per_workgroup`, and the keys
 * (and head dims) from which it does: see attentionPlan.
 */
export const ATTENTION_WORKGROUP_MAX_ITEMS = 64;
export const ATTENTION_WORKGROUP_MIN_KEYS = 1024;
export const ATTENTION_WORKGROUP_MIN_HEAD_DIM = 64;

/**
 * Which attention.wgsl entry point runs an attention of `items` = T * numHeads query vectors over
 * at most `keys` cache rows each: always per_thread on CPU devices; on GPUs per_workgroup (64
 * threads a query) for a long decode of few items and heads of at least 64, where one thread a
 * query would leave the device idle. Measurements: docs/tuning.md#attention
 */
export function attentionPlan(items: number, keys: number, headDim: number, isCpu: boolean): 'per_thread' | 'per_workgroup' {
  if (isCpu) return 'per_thread';
  const longDecode =
    items < ATTENTION_WORKGROUP_MAX_ITEMS && keys >= ATTENTION_WORKGROUP_MIN_KEYS && headDim >= ATTENTION_WORKGROUP_MIN_HEAD_DIM;
  return longDecode ? 'per_workgroup' : 'per_thread';
}

/**
 * Query heads one thread of decode_attention.wgsl or attention.wgsl's per_thread serves (they
 * share one KV head, whose rows it loads once for all). GPUs: 1. CPU devices: the largest divisor
 * of the GQA group whose slices still unroll. Measurements: docs/tuning.md#attention-heads
 */
export function attentionHeadsPerThread(group: number, headDim: number, isCpu: boolean): number {
  if (!isCpu) return 1;
  const slices = headSlices(headDim);
  for (let heads = group; heads > 1; heads--) {
    if (group % heads === 0 && heads * slices <= MAX_UNROLLED_SLICES) return heads;
  }
  return 1;
}

/**
 * Query tokens one thread of attention.wgsl's per_thread serves for a prefill of T tokens (each
 * K/V row it loads serves all of them). GPUs: 1. CPU devices, where the loads cost most: as many as
 * still unroll (tokens x heads x slices up to MAX_UNROLLED_SLICES), at most 4.
 */
export function attentionQueriesPerThread(T: number, heads: number, headDim: number, isCpu: boolean): number {
  if (!isCpu || T < 2) return 1;
  const slices = headSlices(headDim);
  for (let queries = 4; queries > 1; queries--) {
    if (queries * heads * slices <= MAX_UNROLLED_SLICES) return queries;
  }
  return 1;
}

/**
 * decode_layer.wgsl's threads (one workgroup: one SIMD group of SwiftShader's, whose barriers are
 * then nearly free) and quads of rows a block. Measurements: docs/tuning.md#decode-layer
 */
export const DECODE_LAYER_WORKGROUP = 4;
export const DECODE_LAYER_QUADS = 2;
/**
 * Layers with more weights than this keep the five dispatches on CPU adapters too (one workgroup
 * runs on one core: past this the work, not the dispatches, is what costs); the same bound decides
 * whether the embedding and W_lm_head join the decode layers' arena. Measurements: docs/tuning.md#decode-layer
 */
export const DECODE_LAYER_MAX_WEIGHTS = 1 << 18;
