// Device choices of the kernels (workgroup shapes, entry points, splits): the functions that make
// them from the device's properties and the sizes at hand.
import type { WeightDType } from '../tensor.ts';
import { isQuantized } from '../weight-formats.ts';
import { headSlices, MAX_UNROLLED_SLICES } from './wgsl.ts';

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
 * GPUs: shared-memory tiles (matmul_tiled.wgsl) for T >= 32 tokens and a multiple of 4 columns
 * (its vec4 copies); otherwise 16 x 4 threads of 4 tokens (64 rows x 16 tokens a workgroup). The
 * tiles read each weight once per 64 tokens where the register blocks read it once per 4: the
 * usual shape of a GPU matmul (not measured here: no GPU in the test machines). CPU devices: no
 * tiles (barriers are dear) and bigger register blocks: on SwiftShader every load is a per-lane
 * gather (~3 ns a float a core), dearer than the arithmetic, and a bigger block loads less per
 * product. f32 and f16 take 8 rows x 16 tokens a thread, in workgroups of 4 x 2 threads. Measured
 * on SwiftShader (2 cores), stories260K's 200-token prefill (rows of 32-172 weights, f32), medians
 * side by side in Chromium, the whole forward pass: 4 rows x 8 tokens 57.5 ms, 4 x 16 57.8, 8 x 12
 * 53.2, 8 x 16 52.3, 16 x 16 53.8 (Node: 4 x 8 76-81 vs 16 x 16 66-69 ms); its matmuls alone, 8 x
 * 16 in workgroups of 8 x 4 threads 26.8 ms, 8 x 1 24.9, 4 x 2 23.5, 2 x 2 24.7 (more, smaller
 * workgroups share a short prompt's work between the cores more evenly). Bigger blocks compile
 * slowly (their loops are unrolled): an f32 SwiGLU pass 0.4 s at 4 x 8, 0.9 s at 8 x 16, 3.4 s at
 * 16 x 16; with the K-quants' unpacking inlined for every row 1.2, 2.9 and 11 s. So quantized
 * weights keep 4 rows x 8 tokens. Earlier, with 4 rows a thread: 4 tokens ~66 ms, 8 ~50, 32 ~56;
 * a 16 x 16 tiled kernel 30-40x slower.
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
 * `subgroupMinSize` invocations (0: no subgroups feature).
 *
 * Measured on SwiftShader (the tests' CPU Vulkan; subgroups of 4), per dispatch, f32/f16 weights:
 * TEAM = 1 (every thread does 4 whole rows, no reduction) and subgroup teams of 2-4 were within
 * noise of each other for rows of 64-512 columns (64x64: ~0.06 ms; 512x64: 0.16 ms; the old
 * barrier kernel with TEAM = 4: 0.7 / 2.3 ms), subgroup teams of 4 were ahead on 4096 columns,
 * and barrier (workgroup-memory) reductions were always the slowest, 2-5x for TEAM = 16.
 * So: rows up to MATVEC_SOLO_COLS get a team of one; longer rows a team that gives each lane at
 * least 64 weights of each of its 4 rows (real GPUs need the threads to keep memory busy), up to
 * one subgroup (shuffle reduction, no barriers) when the device has subgroups, else up to the
 * workgroup (reduction in workgroup memory, the only path with barriers; SwiftShader has subgroups
 * and never takes it).
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
 * The fused matvec's shape on a device. GPUs: a quad per block and 64 threads (as matvec.wgsl).
 * CPU devices: 2 quads a thread and 16 threads a workgroup. Measured on SwiftShader (2 cores),
 * whole decode steps side by side in one process: stories260K (rows of 64 and 172 f32 weights)
 * 1 quad/64 threads ~2.6 ms, 1/16 ~2.5-2.7, 2/16 ~2.2-2.4, 4/16 +5%; SmolLM2-135M's shape
 * (f16, rows of 576 and 1536) 1/64 ~0.88 s, 1/16 ~0.98, 2/16 ~0.80, 4/16 ~0.78. SwiftShader runs
 * every SIMD group of a workgroup, idle or not, and every load a thread saves counts.
 */
export function fusedShape(isCpu: boolean): FusedShape {
  return isCpu ? { quads: 2, workgroup: 16 } : { quads: 1, workgroup: MATVEC_WORKGROUP };
}
/** The keys per chunk of the decode attention's split over the sequence (see Kernels.decodeAttentionChunkKeys). */
export const DECODE_CHUNK_KEYS_CPU = 1024;
export const DECODE_CHUNK_KEYS_GPU = 256;
/**
 * decode_attention.wgsl threads ((head, chunk) pairs) per workgroup. On CPU devices 8: measured on
 * SwiftShader (2 cores), stories260K (8 heads) decode: 64 threads ~3.3 ms/token, 16 or 8 ~2.8,
 * 4 ~2.8 (two workgroups), 2 ~3.6. A decode step has few (head, chunk) items, and SwiftShader
 * walks every SIMD group of a workgroup, idle or not. GPUs keep 64 (a full wave).
 */
export const DECODE_ATTENTION_THREADS_CPU = 8;
export const DECODE_ATTENTION_THREADS_GPU = 64;
// ---- rmsNorm and attention variants ---------------------------------------------------------

/** rmsnorm.wgsl `per_row`: token rows (one thread each) per workgroup. */
export const RMSNORM_ROWS_PER_WORKGROUP = 64;

/**
 * On GPUs, rows up to this many floats get rmsnorm.wgsl's `per_row` (one thread per row, no
 * barriers); longer ones `per_workgroup` (256 threads per row, a reduction in workgroup memory).
 * CPU devices (SwiftShader) always take `per_row`.
 *
 * Measured on SwiftShader (the tests' CPU Vulkan), per dispatch, vec4 rows, per_row vs per_workgroup:
 *   T=128 x dim 64 (stories260K prefill): ~1 ms vs ~95 ms
 *   T=16 x dim 2048: ~1.5 ms vs ~12 ms;  T=128 x dim 4096: ~10 ms vs ~110 ms
 *   T=1 x dim 64 .. 4096: both ~1 ms (dispatch overhead)
 * so per_row at every size there. On a GPU one thread per row leaves most of the device idle and
 * walks a long row serially; 1024 floats (256 vec4 loads) is about where a 256-thread reduction
 * pays for its two barriers per level. (That cutoff is not measured on a GPU yet.)
 */
export const RMSNORM_ROW_MAX_DIM = 1024;

/** Which rmsnorm.wgsl entry point normalizes rows of `dim` floats (see RMSNORM_ROW_MAX_DIM). */
export function rmsNormPlan(dim: number, isCpu: boolean): 'per_row' | 'per_workgroup' {
  return isCpu || dim <= RMSNORM_ROW_MAX_DIM ? 'per_row' : 'per_workgroup';
}

/** attention.wgsl `split_combine`'s threads a workgroup, and `per_thread`'s on GPUs. */
export const ATTENTION_ITEMS_PER_WORKGROUP = 64;

/**
 * attention.wgsl `per_thread`'s threads a workgroup. CPU devices: 16, so that a causal prefill's
 * threads, whose work grows with their tokens' positions, spread over more workgroups, which is
 * what the cores share. Measured in Chromium on SwiftShader (2 cores), stories260K's 200-token
 * prefill, its 5 attention passes: 1 token a thread 20.9 ms with 64 threads a workgroup, 20.5 with
 * 16; 2 tokens 17.0 / 16.2; 3 tokens 15.3 (16); 4 tokens 14.2 (16), 17.6 (8), ~19 (64: 4 workgroups).
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
 * at most `keys` cache rows each, on a device that `isCpu` (SwiftShader; Kernels.isCpuDevice).
 *
 * Measured on SwiftShader (the tests' CPU Vulkan), per dispatch, per_thread vs per_workgroup:
 *   prefill T=128 from 0, 8/4 heads, headDim 8 (stories260K):  ~8 ms   vs ~150-320 ms
 *   prefill T=32 from 0, 32/8 heads, headDim 64:               ~12 ms  vs ~300 ms
 *   decode T=1 at 512 keys, 8/4 heads, headDim 8:              ~0.8 ms vs ~6 ms
 *   decode T=1 at 256 keys, 32/8 heads, headDim 128:           ~13 ms  vs ~38 ms
 *   decode T=1 at 2048 keys, 32/8 heads, headDim 128:          ~93 ms  vs ~190 ms
 * so on a CPU device it is always per_thread. On a GPU one thread per (t, h) leaves the device
 * idle when there are few of them (decode: numHeads threads) and each walks a long context
 * serially, while per_workgroup spreads every query's keys over 64 threads; so GPUs take
 * per_workgroup for fewer than ATTENTION_WORKGROUP_MAX_ITEMS pairs over at least
 * ATTENTION_WORKGROUP_MIN_KEYS keys with heads of at least ATTENTION_WORKGROUP_MIN_HEAD_DIM
 * (not yet measured on a GPU: a conservative split that keeps the old kernel where it was built for).
 */
export function attentionPlan(items: number, keys: number, headDim: number, isCpu: boolean): 'per_thread' | 'per_workgroup' {
  if (isCpu) return 'per_thread';
  const longDecode =
    items < ATTENTION_WORKGROUP_MAX_ITEMS && keys >= ATTENTION_WORKGROUP_MIN_KEYS && headDim >= ATTENTION_WORKGROUP_MIN_HEAD_DIM;
  return longDecode ? 'per_workgroup' : 'per_thread';
}

/**
 * Query heads one thread of decode_attention.wgsl or attention.wgsl's per_thread serves (they
 * share one KV head, whose rows it loads once for all of them). GPUs: 1 (a light thread per head
 * keeps more of the device busy). CPU devices: the largest divisor of the GQA group whose slices
 * still unroll (HEADS x HEAD_SLICES up to MAX_UNROLLED_SLICES). Measured on SwiftShader (2 cores),
 * stories260K (8 heads on 4 KV heads, head_dim 8), 2 heads a thread: decode at position 300
 * ~230 -> ~130 us per layer; a 200-token prefill's attention ~38 -> ~21 ms.
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
/**
 * decode_layer.wgsl's threads (one workgroup) and quads of rows per block. One SIMD group of
 * SwiftShader's (4 lanes): its barriers are then nearly free. Measured in Chromium, stories260K
 * decode step at position 300, medians: 4 threads 2.25 ms, 8 2.39, 16 2.47.
 */
export const DECODE_LAYER_WORKGROUP = 4;
export const DECODE_LAYER_QUADS = 2;
/**
 * Layers with more weights than this keep the five dispatches on CPU adapters too: one workgroup
 * runs on one core, and past this the work, not the dispatches, is what costs. Measured in
 * Chromium (SwiftShader, 2 cores), 4-layer random f32 models, decode step at position 100, five
 * dispatches vs one a layer: 45K weights a layer 2.41 vs 1.45 ms, 181K 3.58 vs 3.47, 393K 6.80 vs
 * 7.45, 725K 10.9 vs 17.4. The same bound decides whether the token embedding and W_lm_head join
 * the decode layers' dispatches (LlamaModel.decodeArena).
 */
export const DECODE_LAYER_MAX_WEIGHTS = 1 << 18;
