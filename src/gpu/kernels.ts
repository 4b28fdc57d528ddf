// The dispatch layer: one method per kernel, recording into a command encoder.
//
//   const batch = kernels.begin();
//   batch.rmsNorm(xb, x, gamma, T, d, eps);
//   batch.matmul(q, xb, wq, T);
//   ...
//   batch.submit();
//
// Each kernel's WGSL lives in shaders/; the weight-reading kernels (embedding, matmul, matvec) get
// the `load_weight` snippet of their weight's storage type (weight-formats.ts) and, for matmul and
// matvec, `load_x` and `load_bias` snippets composed in front of them (plus the matvec reduction). Per-dispatch parameters go into one
// uniform buffer per batch, one 256-byte slot per dispatch (the offset alignment WebGPU
// guarantees), written once in submit(). Browser-safe: no Node imports here.
import { isCpuAdapter, type GpuContext } from './device.ts';
import { matrixParts, type GpuMatrix, type GpuMatrixPart, type WeightDType } from './tensor.ts';
import type { RopePairing } from '../model/config.ts';
import { PipelineCache, type ShaderSpec } from './pipelines.ts';
import { checkWeightShape, isQuantized, weightByteSize, weightFormatWgsl, weightRunLength } from './weight-formats.ts';
import embeddingWgsl from '../../shaders/embedding.wgsl?raw';
import rmsnormWgsl from '../../shaders/rmsnorm.wgsl?raw';
import matmulWgsl from '../../shaders/matmul.wgsl?raw';
import matvecWgsl from '../../shaders/matvec.wgsl?raw';
import ropeWgsl from '../../shaders/rope.wgsl?raw';
import attentionWgsl from '../../shaders/attention.wgsl?raw';
import swigluWgsl from '../../shaders/swiglu.wgsl?raw';
import residualWgsl from '../../shaders/residual.wgsl?raw';
import kvCacheWgsl from '../../shaders/kv_cache.wgsl?raw';
import sinCosWgsl from '../../shaders/sin_cos.wgsl?raw';
import f16BitsWgsl from '../../shaders/f16_bits.wgsl?raw';
import onlineSoftmaxWgsl from '../../shaders/online_softmax.wgsl?raw';
import fusedMatvecWgsl from '../../shaders/fused_matvec.wgsl?raw';
import matmulTiledWgsl from '../../shaders/matmul_tiled.wgsl?raw';
import matmulOutputWgsl from '../../shaders/matmul_output.wgsl?raw';
import decodeAttentionWgsl from '../../shaders/decode_attention.wgsl?raw';
import decodeAttentionPassWgsl from '../../shaders/decode_attention_pass.wgsl?raw';
import decodeLayerWgsl from '../../shaders/decode_layer.wgsl?raw';

/** Element type of a KV cache: 'f16' packs two halves a u32 word (no shader-f16 needed). */
export type KvDType = 'f16' | 'f32';

/** Largest head dimension the attention kernels handle (per_workgroup's workgroup-memory query vector). */
export const ATTENTION_MAX_HEAD_DIM = 256;

// Workgroup shapes; each must match its shader's constants.
const ELEMENTWISE_WORKGROUP = 256; // embedding, rope, swiglu, residual: one invocation per element

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
const TILED_MATMUL_MIN_TOKENS = 32;

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

// Bindings where the composed snippets put the weight matrix and the bias (see the shaders).
const WEIGHT_BINDING = 3;
/** matmul.wgsl's second matrix (SWIGLU: W_up; PAIR: W2). */
const WEIGHT_UP_BINDING = 6;
/** matmul.wgsl's PAIR variant: y2 and b2. */
const PAIR_OUTPUT_BINDING = 7;
const PAIR_BIAS_BINDING = 8;
const BIAS_BINDING = 4;

/**
 * Bind groups the Kernels keep for batches (KernelBatch): a prefill makes about 12 a layer, so this
 * holds a few prefill shapes of a large model.
 */
const MAX_CACHED_BIND_GROUPS = 2048;

const UNIFORM_SLOT_BYTES = 256; // minUniformBufferOffsetAlignment is at most 256 on every device
const UNIFORM_SLOTS_PER_CHUNK = 128;

type WeightKernel = 'embedding' | 'matmul' | 'matvec';
const WEIGHT_KERNEL_SOURCES: Record<WeightKernel, string> = {
  embedding: embeddingWgsl,
  matmul: matmulWgsl,
  matvec: matvecWgsl,
};

// Kernels whose source does not depend on the weights.
const FIXED_KERNELS = {
  swiglu: { code: swigluWgsl, entryPoint: 'main' },
  add: { code: residualWgsl, entryPoint: 'add' },
  add_in_place: { code: residualWgsl, entryPoint: 'add_in_place' },
} satisfies Record<string, ShaderSpec>;
type FixedKernel = keyof typeof FIXED_KERNELS;

/**
 * Where a position-dependent kernel (rope, attention, the K/V write) finds the position of its
 * first token: 'uniform' is the dispatch's own parameter (a fresh one per dispatch), 'buffer' adds
 * a u32 read from a small storage buffer at POSITION_BINDING, which the reusable decode step
 * (KernelProgram) rewrites with queue.writeBuffer before each step, so its bind groups never change.
 */
export type PositionSource = 'uniform' | 'buffer';
const POSITION_BINDING = 8;

/** `fn start_pos() -> u32` for a kernel whose Params has a `start_pos` field. */
function positionWgsl(source: PositionSource): string {
  return source === 'buffer'
    ? `@group(0) @binding(${POSITION_BINDING}) var<storage, read> step_position: array<u32>;\n` +
        `fn start_pos() -> u32 { return params.start_pos + step_position[0]; }\n`
    : `fn start_pos() -> u32 { return params.start_pos; }\n`;
}

// Kernels that take a position, each compiled for both position sources.
// (Their sources include the snippets they call: sin_cos.wgsl, f16_bits.wgsl.)
const POSITIONAL_KERNELS = {
  rope: { code: `${sinCosWgsl}\n${ropeWgsl}`, entryPoint: 'main' },
  write_kv: { code: `${f16BitsWgsl}\n${kvCacheWgsl}`, entryPoint: 'write_kv' },
  write_kv_f32: { code: `${f16BitsWgsl}\n${kvCacheWgsl}`, entryPoint: 'write_kv_f32' },
} satisfies Record<string, ShaderSpec>;
type PositionalKernel = keyof typeof POSITIONAL_KERNELS;
const positionalKey = (name: PositionalKernel, source: PositionSource) => `${name}/pos_${source}`;
const positionalSpec = (name: PositionalKernel, source: PositionSource): ShaderSpec => ({
  code: `${positionWgsl(source)}\n${POSITIONAL_KERNELS[name].code}`,
  entryPoint: POSITIONAL_KERNELS[name].entryPoint,
});

/** `fn load_bias(r: u32) -> f32`: reads the bias binding, or is 0 for layers without bias. */
function biasWgsl(hasBias: boolean): string {
  return hasBias
    ? `@group(0) @binding(${BIAS_BINDING}) var<storage, read> bias: array<f32>;\n` +
        `fn load_bias(r: u32) -> f32 { return bias[r]; }\n`
    : `fn load_bias(r: u32) -> f32 { return 0.0; }\n`;
}

/**
 * `load_x(i)` / `load_x4(i)` over the activations at binding 2. Aligned (every row of x starts at a
 * multiple of 4 floats and load_x4 is only called at multiples of 4): x is read as vec4s.
 */
function activationWgsl(aligned: boolean): string {
  return aligned
    ? `@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;\n` +
        `fn load_x(i: u32) -> f32 { return x[i >> 2u][i & 3u]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { return x[i >> 2u]; }\n`
    : `@group(0) @binding(2) var<storage, read> x: array<f32>;\n` +
        `fn load_x(i: u32) -> f32 { return x[i]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]); }\n`;
}

/** matvec.wgsl's workgroup size: 64 / TEAM quads of 4 rows per workgroup. */
const MATVEC_WORKGROUP = 64;

/** Rows up to this many columns get one thread per quad of rows (see matvecPlan). */
const MATVEC_SOLO_COLS = 256;

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

/** `fn reduce_team(v, lid)` for matvec.wgsl (see there), and any directive it needs. */
function reduceTeamWgsl(plan: MatvecPlan): { directives: string; code: string } {
  let code = `const TEAM: u32 = ${plan.team}u;\n`;
  if (plan.reduction === 'none') {
    code += `fn reduce_team(v: vec4<f32>, lid: u32) -> vec4<f32> { return v; }\n`;
    return { directives: '', code };
  }
  if (plan.reduction === 'subgroup') {
    // A team is TEAM consecutive invocation indices, aligned, TEAM <= the subgroup size: within
    // one subgroup (subgroups are aligned runs of consecutive indices in 1-D workgroups).
    code += `fn reduce_team(v: vec4<f32>, lid: u32) -> vec4<f32> {
  var s = v;
  for (var mask = TEAM / 2u; mask > 0u; mask >>= 1u) { s += subgroupShuffleXor(s, mask); }
  return s;
}\n`;
    return { directives: 'enable subgroups;\n', code };
  }
  code += `var<workgroup> team_partials: array<vec4<f32>, ${MATVEC_WORKGROUP}>;
fn reduce_team(v: vec4<f32>, lid: u32) -> vec4<f32> {
  team_partials[lid] = v;
  workgroupBarrier();
  for (var stride = TEAM / 2u; stride > 0u; stride >>= 1u) {
    if (lid % TEAM < stride) { team_partials[lid] += team_partials[lid + stride]; }
    workgroupBarrier();
  }
  return team_partials[lid];
}\n`;
  return { directives: '', code };
}

/** What varies between pipelines of one weight kernel. */
interface WeightVariant {
  hasBias: boolean;
  /** matmul/matvec: cols is a multiple of 4 (vector loads of x and W). */
  aligned: boolean;
  plan?: MatvecPlan;
  /** matmul: its workgroup. */
  matmul?: MatmulShape;
  /** matmul/matvec: y += x·Wᵀ instead of y = x·Wᵀ. */
  accumulate?: boolean;
  /** matmul: y = silu(x·W_gateᵀ) * (x·W_upᵀ), W_up of the same dtype at WEIGHT_UP_BINDING. */
  swiglu?: boolean;
  /** matmul: also y2 = x·W2ᵀ (+ b2), W2 of the same dtype and shape at WEIGHT_UP_BINDING (matmulPair). */
  pair?: boolean;
  /** matvec: walk K a run (dot_run) at a time (Kernels.usesWeightRuns). */
  runs?: boolean;
}

function weightKernelKey(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): string {
  if (kernel === 'embedding') return `${kernel}/${dtype}`;
  let key = `${kernel}/${dtype}/${v.hasBias ? 'bias' : 'nobias'}/${v.aligned ? 'vec4' : 'scalar'}${v.accumulate ? '/acc' : ''}${v.swiglu ? '/swiglu' : ''}${v.pair ? '/pair' : ''}`;
  if (v.matmul) key += `/w${v.matmul.wx}x${v.matmul.wy}t${v.matmul.tokens}r${v.matmul.rowQuads ?? 1}${v.matmul.tiled ? '/tiled' : ''}`;
  if (v.runs) key += '/runs';
  return v.plan ? `${key}/team${v.plan.team}-${v.plan.reduction}` : key;
}

function weightKernelSpec(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): ShaderSpec {
  if (kernel === 'embedding') {
    return { code: `${weightFormatWgsl(dtype, WEIGHT_BINDING)}\n${WEIGHT_KERNEL_SOURCES[kernel]}`, entryPoint: 'main' };
  }
  let directives = '';
  let snippets = weightFormatWgsl(dtype, WEIGHT_BINDING, 0, v.aligned) + activationWgsl(v.aligned) + biasWgsl(v.hasBias);
  snippets += v.accumulate ? 'fn store_y(i: u32, v: f32) { y[i] = y[i] + v; }\n' : 'fn store_y(i: u32, v: f32) { y[i] = v; }\n';
  if (kernel === 'matvec') {
    const reduce = reduceTeamWgsl(v.plan ?? { team: 1, reduction: 'none' });
    directives = reduce.directives;
    snippets += reduce.code + `const USE_RUNS: bool = ${!!v.runs};\n`;
    const code = `${directives}${snippets}\n${WEIGHT_KERNEL_SOURCES[kernel]}`;
    return { code: unrollConstLoops(code, { RUN_VEC4S: weightRunLength(dtype) / 4 }), entryPoint: 'main' };
  }
  if (kernel === 'matmul') {
    const shape = v.matmul ?? matmulShape(false);
    const rowQuads = shape.rowQuads ?? 1;
    snippets += `const MATMUL_WX: u32 = ${shape.wx}u;\nconst MATMUL_WY: u32 = ${shape.wy}u;\nconst TOKENS: u32 = ${shape.tokens}u;\n`;
    snippets += `const ROW_QUADS: u32 = ${rowQuads}u;\nconst ROWS: u32 = ${4 * rowQuads}u;\n`;
    const second = !!(v.swiglu || v.pair);
    snippets += `const SWIGLU: bool = ${!!v.swiglu};\nconst PAIR: bool = ${!!v.pair};\nconst SECOND: bool = ${second};\n`;
    snippets += second
      ? renameWgsl(weightFormatWgsl(dtype, WEIGHT_UP_BINDING, 0, v.aligned), 'up')
      : 'fn load_weight4_up(i: u32) -> vec4<f32> { return vec4<f32>(); }\nfn load_weight_up(i: u32) -> f32 { return 0.0; }\n';
    snippets += v.pair
      ? `@group(0) @binding(${PAIR_OUTPUT_BINDING}) var<storage, read_write> y2: array<f32>;\nfn store_y2(i: u32, v: f32) { y2[i] = v; }\n` +
        (v.hasBias
          ? `@group(0) @binding(${PAIR_BIAS_BINDING}) var<storage, read> bias2: array<f32>;\nfn load_bias2(r: u32) -> f32 { return bias2[r]; }\n`
          : 'fn load_bias2(r: u32) -> f32 { return 0.0; }\n')
      : 'fn store_y2(i: u32, v: f32) {}\nfn load_bias2(r: u32) -> f32 { return 0.0; }\n';
    if (shape.tiled) {
      if (!v.aligned) throw new Error('the tiled matmul needs a multiple of 4 columns');
      return { code: `${directives}${snippets}\n${matmulOutputWgsl}\n${matmulTiledWgsl}`, entryPoint: 'main' };
    }
    const code = `${directives}${snippets}\n${matmulOutputWgsl}\n${WEIGHT_KERNEL_SOURCES[kernel]}`;
    return { code: unrollConstLoops(code, { TOKENS: shape.tokens, ROW_QUADS: rowQuads, ROWS: 4 * rowQuads }), entryPoint: 'main' };
  }
  return { code: `${directives}${snippets}\n${WEIGHT_KERNEL_SOURCES[kernel]}`, entryPoint: 'main' };
}

// ---- fused decode projections (fused_matvec.wgsl) ---------------------------------------------

/** fused_matvec.wgsl's modes (its MODE_* constants). */
export type FusedMatvecMode = 'store' | 'accumulate' | 'swiglu';
const FUSED_MODES: Record<FusedMatvecMode, number> = { store: 0, accumulate: 1, swiglu: 2 };
/** fused_matvec.wgsl MAX_SEGMENTS: row ranges one dispatch stacks. */
const FUSED_MAX_SEGMENTS = 8;
const FUSED_GAMMA_BINDING = 5;
const fusedWeightBinding = (s: number) => 10 + 2 * s;
const fusedBiasBinding = (s: number) => 11 + 2 * s;

/** One row range a fused dispatch computes: a matrix or one part of a split one. */
interface FusedSegment {
  buffer: GPUBuffer;
  dtype: WeightDType;
  rows: number;
  /** First row of y it writes. */
  outRow: number;
  /** Its first row within the matrix (the bias index). */
  biasRow: number;
  bias?: GPUBuffer;
}

type FusedVariant = {
  mode: FusedMatvecMode;
  norm: boolean;
  aligned: boolean;
  plan: MatvecPlan;
  shape: FusedShape;
  /** Per segment: its weights' storage, bias, and whether block_dot walks K by dot_run runs (Kernels.usesWeightRuns). */
  segments: { dtype: WeightDType; hasBias: boolean; runs: boolean }[];
};

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

const fusedKey = (v: FusedVariant) =>
  `fused_matvec/${v.mode}/${v.norm ? 'norm' : 'plain'}/${v.aligned ? 'vec4' : 'scalar'}/team${v.plan.team}-${v.plan.reduction}/` +
  `q${v.shape.quads}w${v.shape.workgroup}/` +
  v.segments.map((g) => `${g.dtype}${g.hasBias ? '+bias' : ''}${g.runs ? '+runs' : ''}`).join(',');

/**
 * A snippet's module-scope names (functions, variables, constants) suffixed with `_${suffix}`, so
 * that several weight-format snippets can live in one module.
 */
function renameWgsl(code: string, suffix: string): string {
  const names = new Set<string>();
  for (const m of code.matchAll(/\bfn\s+(\w+)/g)) names.add(m[1]);
  for (const m of code.matchAll(/\bvar<[^>]*>\s+(\w+)/g)) names.add(m[1]);
  for (const m of code.matchAll(/^const\s+(\w+)/gm)) names.add(m[1]);
  return code.replace(/\b\w+\b/g, (w) => (names.has(w) ? `${w}_${suffix}` : w));
}

/**
 * `fn block_dot_${name}(base, r0, last_row, lane) -> array<vec4<f32>, QUADS>`: lane's part of the
 * dot products of rows r0 .. r0 + 4 QUADS - 1 (rows past last_row re-read it; their sums are not
 * stored) of the matrix that starts at element `base` (0 unless several share one buffer) of the
 * weight snippet renamed with suffix `s${name}` (`loaderSuffix` names another) with the vector that `loadIn4(k)` /
 * `loadIn(k)` read, over K = `cols` (a WGSL expression), the lanes TEAM apart. With `runs`, K goes a
 * run at a time (dot_run; the run's RUN_VEC4S loop is added to `unroll`). Shared by the fused matvec
 * and the decode layer kernel.
 */
function blockDotWgsl(
  name: string,
  dtype: WeightDType,
  runs: boolean,
  cols: string,
  loadIn4: string,
  loadIn: string,
  unroll: Record<string, number>,
  loaderSuffix = `_s${name}`,
): string {
  const [w4, w1] = [`load_weight4${loaderSuffix}`, `load_weight${loaderSuffix}`];
  let code = `fn block_dot_${name}(base: u32, r0: u32, last_row: u32, lane: u32) -> array<vec4<f32>, QUADS> {
  let cols = ${cols};
  var w: array<u32, 4u * QUADS>;
  for (var q = 0u; q < QUADS; q++) {
    w[4u * q] = base + min(r0 + 4u * q, last_row) * cols;
    w[4u * q + 1u] = base + min(r0 + 4u * q + 1u, last_row) * cols;
    w[4u * q + 2u] = base + min(r0 + 4u * q + 2u, last_row) * cols;
    w[4u * q + 3u] = base + min(r0 + 4u * q + 3u, last_row) * cols;
  }
  var acc: array<vec4<f32>, QUADS>;
`;
  if (runs) {
    // K a run at a time (the lanes take whole runs; quantized rows are whole runs): the input of
    // the run loaded once, dot_run per row.
    const run = weightRunLength(dtype);
    unroll[`RUN_VEC4S_s${name}`] = run / 4;
    return code + `  for (var k = lane * ${run}u; k < cols; k += TEAM * ${run}u) {
    var xs: array<vec4<f32>, RUN_VEC4S_s${name}>;
    for (var u = 0u; u < RUN_VEC4S_s${name}; u++) {
      xs[u] = ${loadIn4}(k + 4u * u);
    }
    for (var q = 0u; q < QUADS; q++) {
      acc[q] += vec4<f32>(dot_run_s${name}(w[4u * q] + k, xs), dot_run_s${name}(w[4u * q + 1u] + k, xs),
                          dot_run_s${name}(w[4u * q + 2u] + k, xs), dot_run_s${name}(w[4u * q + 3u] + k, xs));
    }
  }
  return acc;
}\n`;
  }
  return code + `  let k_vec_end = cols & ~3u;
  for (var k = lane * 4u; k < k_vec_end; k += TEAM * 4u) {
    let xn = ${loadIn4}(k);
    for (var q = 0u; q < QUADS; q++) {
      acc[q] += xn * mat4x4<f32>(${w4}(w[4u * q] + k), ${w4}(w[4u * q + 1u] + k), ${w4}(w[4u * q + 2u] + k), ${w4}(w[4u * q + 3u] + k));
    }
  }
  for (var k = k_vec_end + lane; k < cols; k += TEAM) {
    let xn = ${loadIn}(k);
    for (var q = 0u; q < QUADS; q++) {
      acc[q] += xn * vec4<f32>(${w1}(w[4u * q] + k), ${w1}(w[4u * q + 1u] + k), ${w1}(w[4u * q + 2u] + k), ${w1}(w[4u * q + 3u] + k));
    }
  }
  return acc;
}\n`;
}

function fusedMatvecSpec(v: FusedVariant): ShaderSpec {
  const reduce = reduceTeamWgsl(v.plan);
  let code = `${reduce.directives}const MODE: u32 = ${FUSED_MODES[v.mode]}u;\nconst NORM: bool = ${v.norm};\n`;
  code += `const QUADS: u32 = ${v.shape.quads}u;\nconst WORKGROUP_SIZE: u32 = ${v.shape.workgroup}u;\n`;
  code += `const SEGMENTS: u32 = ${v.segments.length}u;\n${reduce.code}${activationWgsl(v.aligned)}`;
  if (v.norm) {
    code += v.aligned
      ? `@group(0) @binding(${FUSED_GAMMA_BINDING}) var<storage, read> gamma: array<vec4<f32>>;\n` +
        `fn load_gamma4(k: u32) -> vec4<f32> { return gamma[k >> 2u]; }\nfn load_gamma(k: u32) -> f32 { return gamma[k >> 2u][k & 3u]; }\n`
      : `@group(0) @binding(${FUSED_GAMMA_BINDING}) var<storage, read> gamma: array<f32>;\n` +
        `fn load_gamma4(k: u32) -> vec4<f32> { return vec4<f32>(gamma[k], gamma[k + 1u], gamma[k + 2u], gamma[k + 3u]); }\n` +
        `fn load_gamma(k: u32) -> f32 { return gamma[k]; }\n`;
  } else {
    code += `fn load_gamma4(k: u32) -> vec4<f32> { return vec4<f32>(1.0); }\nfn load_gamma(k: u32) -> f32 { return 1.0; }\n`;
  }
  let dotCases = '';
  let biasCases = '';
  const unroll: Record<string, number> = { QUADS: v.shape.quads };
  v.segments.forEach((g, s) => {
    code += renameWgsl(weightFormatWgsl(g.dtype, fusedWeightBinding(s), 0, v.aligned), `s${s}`);
    code += g.hasBias
      ? `@group(0) @binding(${fusedBiasBinding(s)}) var<storage, read> bias_s${s}: array<f32>;\nfn bias_${s}(r: u32) -> f32 { return bias_s${s}[r]; }\n`
      : `fn bias_${s}(r: u32) -> f32 { return 0.0; }\n`;
    dotCases += `    case ${s}u: { return block_dot_${s}(0u, r0, last_row, lane); }\n`;
    biasCases += `    case ${s}u: { return bias_${s}(r); }\n`;
    code += blockDotWgsl(`${s}`, g.dtype, g.runs, 'params.cols', 'load_xn4', 'load_xn', unroll);
  });
  code += `fn block_dot(s: u32, r0: u32, last_row: u32, lane: u32) -> array<vec4<f32>, QUADS> {\n  switch (s) {\n${dotCases}    default: { return array<vec4<f32>, QUADS>(); }\n  }\n}\n`;
  code += `fn seg_bias(s: u32, r: u32) -> f32 {\n  switch (s) {\n${biasCases}    default: { return 0.0; }\n  }\n}\n`;
  return { code: unrollConstLoops(`${code}\n${fusedMatvecWgsl}`, unroll), entryPoint: 'main' };
}

/** The keys per chunk of the decode attention's split over the sequence (see Kernels.decodeAttentionChunkKeys). */
const DECODE_CHUNK_KEYS_CPU = 1024;
const DECODE_CHUNK_KEYS_GPU = 256;
/**
 * decode_attention.wgsl threads ((head, chunk) pairs) per workgroup. On CPU devices 8: measured on
 * SwiftShader (2 cores), stories260K (8 heads) decode: 64 threads ~3.3 ms/token, 16 or 8 ~2.8,
 * 4 ~2.8 (two workgroups), 2 ~3.6. A decode step has few (head, chunk) items, and SwiftShader
 * walks every SIMD group of a workgroup, idle or not. GPUs keep 64 (a full wave).
 */
const DECODE_ATTENTION_THREADS_CPU = 8;
const DECODE_ATTENTION_THREADS_GPU = 64;

// ---- rmsNorm and attention variants ---------------------------------------------------------

/** rmsnorm.wgsl `per_row`: token rows (one thread each) per workgroup. */
const RMSNORM_ROWS_PER_WORKGROUP = 64;

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

/** The element type prefix of rmsnorm.wgsl: vec4 loads when every row starts 16-byte aligned. */
function rmsNormWidthWgsl(aligned: boolean): string {
  return aligned
    ? `alias V = vec4<f32>;\nconst WIDTH: u32 = 4u;\nfn hsum(v: V) -> f32 { return v.x + v.y + v.z + v.w; }\n`
    : `alias V = f32;\nconst WIDTH: u32 = 1u;\nfn hsum(v: V) -> f32 { return v; }\n`;
}

type RmsNormVariant = { entry: 'per_row' | 'per_workgroup'; aligned: boolean };
const rmsNormKey = (v: RmsNormVariant) => `rmsnorm/${v.entry}/${v.aligned ? 'vec4' : 'scalar'}`;
const rmsNormSpec = (v: RmsNormVariant): ShaderSpec => ({
  code: `${rmsNormWidthWgsl(v.aligned)}\n${rmsnormWgsl}`,
  entryPoint: v.entry,
});

/** attention.wgsl `split_combine`'s threads a workgroup, and `per_thread`'s on GPUs. */
const ATTENTION_ITEMS_PER_WORKGROUP = 64;

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
const ATTENTION_WORKGROUP_MAX_ITEMS = 64;
const ATTENTION_WORKGROUP_MIN_KEYS = 1024;
const ATTENTION_WORKGROUP_MIN_HEAD_DIM = 64;

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

type AttentionVariant = {
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
};
const attentionKey = (v: AttentionVariant) =>
  `attention/${v.entry}/hd${v.headDim}/kv_${v.kvDType}/pos_${v.position ?? 'uniform'}/g${v.heads ?? 1}/q${v.queries ?? 1}/w${v.threads ?? ATTENTION_ITEMS_PER_WORKGROUP}`;
const attentionSpec = (v: AttentionVariant): ShaderSpec => {
  const heads = v.heads ?? 1;
  const queries = v.queries ?? 1;
  const code =
    `const HEAD_DIM: u32 = ${v.headDim}u;\nconst GROUP_HEADS: u32 = ${heads}u;\nconst QUERIES: u32 = ${queries}u;\n` +
    `const THREAD_WORKGROUP_SIZE: u32 = ${v.threads ?? ATTENTION_ITEMS_PER_WORKGROUP}u;\n` +
    `const HEADS: u32 = ${heads * queries}u;\n${attentionSliceWgsl(v.headDim % 4 === 0, v.kvDType)}` +
    `${positionWgsl(v.position ?? 'uniform')}\n${onlineSoftmaxWgsl}\n${attentionWgsl}`;
  // Measured on SwiftShader, stories260K prefill of 200 tokens (head_dim 8): attention 76 -> 38 ms unrolled.
  return { code: unrollAttentionLoops(code, v.headDim, heads * queries, { GROUP_HEADS: heads, QUERIES: queries }), entryPoint: v.entry };
};

/**
 * attention.wgsl's element type of q and the caches: vec4s when the head dimension is a multiple
 * of 4 (every head starts at a multiple of 4 floats), else single floats.
 */
function attentionSliceWgsl(aligned: boolean, kvDType: KvDType, withQ = true, withStoreOut = true): string {
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

type DecodeAttentionVariant = {
  headDim: number;
  kvDType: KvDType;
  position: PositionSource;
  split: boolean;
  threads: number;
  /** Query heads per thread (a divisor of the GQA group; see attentionHeadsPerThread). */
  heads: number;
};
const decodeAttentionKey = (v: DecodeAttentionVariant) =>
  `decode_attention/hd${v.headDim}/kv_${v.kvDType}/pos_${v.position}/${v.split ? 'split' : 'whole'}/t${v.threads}/g${v.heads}`;

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
 * What decode_attention.wgsl's attend_item needs besides its buffers (see the head of that file):
 * the slice helpers, online_softmax.wgsl, sin_cos.wgsl, f16_bits.wgsl, and the cache's element
 * type's qf_h / kf_h / qkv_h / round_kv / store_kv_row. The kernel that includes it declares
 * `params`, `k_cache`, `v_cache`, `out` (or, with withStoreOut false, its own store_out), load_qkv,
 * load_inv_freq, start_pos, store_partial and store_ml.
 */
function decodeAttentionHelpersWgsl(headDim: number, heads: number, kvDType: KvDType, withStoreOut = true): string {
  const aligned = headDim % 4 === 0;
  // (q comes from qkv: no load_q1.)
  let code = `const HEAD_DIM: u32 = ${headDim}u;\nconst HEADS: u32 = ${heads}u;\n` + attentionSliceWgsl(aligned, kvDType, false, withStoreOut);
  code += `${onlineSoftmaxWgsl}\n${sinCosWgsl}\n${f16BitsWgsl}\n`;
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
function unrollAttentionLoops(source: string, headDim: number, heads: number, extra: Record<string, number> = {}): string {
  const slices = headSlices(headDim);
  if (slices * heads > MAX_UNROLLED_SLICES) return source;
  return unrollConstLoops(source, { HEAD_SLICES: slices, HEADS: heads, ...extra });
}

/** decode_attention_pass.wgsl: decode_attention.wgsl as a dispatch of its own. */
function decodeAttentionSpec(v: DecodeAttentionVariant): ShaderSpec {
  const aligned = v.headDim % 4 === 0;
  let code = `const THREADS: u32 = ${v.threads}u;\n` + decodeAttentionHelpersWgsl(v.headDim, v.heads, v.kvDType) + positionWgsl(v.position);
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

// ---- the decode layer in one dispatch (decode_layer.wgsl) ----

/** A layer's seven projections in decode_layer.wgsl's order: weight binding 10 + index, snippet suffix `s${name}`. */
export const DECODE_LAYER_MATRICES = ['q', 'k', 'v', 'o', 'g', 'u', 'd'] as const;
const DECODE_LAYER_WEIGHT_BINDING = 10;
/** decode_layer.wgsl's other bindings: the f32 arena, the first slot's K cache (V at + 1, the next slot's K at + 2), the token and the logits. */
const DECODE_LAYER_ARENA_BINDING = 2;
const DECODE_LAYER_CACHE_BINDING = 3;
const DECODE_LAYER_TOKENS_BINDING = 17;
const DECODE_LAYER_LOGITS_BINDING = 18;
/** Storage buffers decode_layer.wgsl binds with a binding per matrix: st, the two caches, the seven weights. */
export const DECODE_LAYER_STORAGE_BUFFERS = 10;
/** Most layers one decode_layer.wgsl dispatch runs (its Params fit a 256-byte uniform slot up to 6). */
export const DECODE_LAYER_MAX_SLOTS = 4;
/**
 * decode_layer.wgsl's threads (one workgroup) and quads of rows per block. One SIMD group of
 * SwiftShader's (4 lanes): its barriers are then nearly free. Measured in Chromium, stories260K
 * decode step at position 300, medians: 4 threads 2.25 ms, 8 2.39, 16 2.47.
 */
const DECODE_LAYER_WORKGROUP = 4;
const DECODE_LAYER_QUADS = 2;
/**
 * Layers with more weights than this keep the five dispatches on CPU adapters too: one workgroup
 * runs on one core, and past this the work, not the dispatches, is what costs. Measured in
 * Chromium (SwiftShader, 2 cores), 4-layer random f32 models, decode step at position 100, five
 * dispatches vs one a layer: 45K weights a layer 2.41 vs 1.45 ms, 181K 3.58 vs 3.47, 393K 6.80 vs
 * 7.45, 725K 10.9 vs 17.4. The same bound decides whether the token embedding and W_lm_head join
 * the decode layers' dispatches (LlamaModel.decodeArena).
 */
export const DECODE_LAYER_MAX_WEIGHTS = 1 << 18;

/** The sizes decode_layer.wgsl is compiled for. */
export interface DecodeLayerDims {
  dim: number;
  qDim: number;
  kvDim: number;
  ffn: number;
  headDim: number;
  numLayers: number;
}

/** Where decode_layer.wgsl's state buffer keeps what (float indices, each a multiple of 4). */
export interface DecodeLayerLayout {
  x: number;
  qkv: number;
  att: number;
  h: number;
  pos: number;
  freq: number;
  /** γ_out, the final norm's weights (read where the logits join a decode layer dispatch). */
  outNorm: number;
  /** Layer l's [γ_attn | γ_ffn | bq | bk | bv] starts at consts + l * constsStride. */
  consts: number;
  constsStride: number;
  /**
   * The greedy steps' records (decodeLayers `greedyTo`): DECODE_RECORD_SLOTS of 4 words each, u32
   * id, f32 logprob, 0, 0; the step at position p writes slot p mod DECODE_RECORD_SLOTS.
   */
  records: number;
  /** Floats in the buffer. */
  floats: number;
}

/** Record slots in the decode layers' state: a batch of steps may take this many before the first is overwritten. */
export const DECODE_RECORD_SLOTS = 32;
/** Bytes of one greedy record in the decode layers' state. */
export const DECODE_RECORD_BYTES = 16;

const up4 = (n: number) => Math.ceil(n / 4) * 4;

export function decodeLayerLayout(d: DecodeLayerDims): DecodeLayerLayout {
  const qkvRows = d.qDim + 2 * d.kvDim;
  const x = 0;
  const qkv = x + up4(d.dim);
  const att = qkv + up4(qkvRows);
  const h = att + up4(d.qDim);
  const pos = h + up4(d.ffn);
  const freq = pos + 4;
  const outNorm = freq + up4(d.headDim / 2);
  const consts = outNorm + up4(d.dim);
  const constsStride = up4(2 * d.dim + qkvRows);
  const records = consts + d.numLayers * constsStride;
  return { x, qkv, att, h, pos, freq, outNorm, consts, constsStride, records, floats: records + (DECODE_RECORD_SLOTS * DECODE_RECORD_BYTES) / 4 };
}

/**
 * Every matrix of a small model's decode step in one f32 buffer, so that one decode_layer.wgsl
 * dispatch can run several layers (a binding per matrix would take seven a layer): each matrix
 * starts at an element offset, a multiple of 4.
 */
export interface DecodeArena {
  buffer: GPUBuffer;
  /** Per model layer, the first elements of its seven matrices (DECODE_LAYER_MATRICES order). */
  layers: readonly (readonly number[])[];
  /** The token embedding and W_lm_head ([rows, dim] each), when the arena holds them. */
  embedding?: { offset: number; rows: number };
  lmHead?: { offset: number; rows: number };
}

/**
 * How decode_layer.wgsl's dispatches share out `numLayers` layers over an arena: [first layer,
 * count] each, in order. A dispatch binds st, the arena, two caches a layer, the token (`embed`:
 * the first dispatch reads it; `logits`: the last may write it, greedy) and the logits (`logits`:
 * the last), at most `maxStorageBuffers`.
 */
export function decodeLayerGroups(numLayers: number, maxStorageBuffers: number, embed: boolean, logits: boolean): [number, number][] {
  const io = (first: boolean, last: boolean) => ((first && embed) || (last && logits) ? 1 : 0) + (last && logits ? 1 : 0);
  const slots = (first: boolean, last: boolean) => Math.min(DECODE_LAYER_MAX_SLOTS, Math.floor((maxStorageBuffers - 2 - io(first, last)) / 2));
  const groups: [number, number][] = [];
  for (let first = 0; first < numLayers; ) {
    const left = numLayers - first;
    // Not the last: leave at least one layer for a last dispatch (it may have less room).
    const count = left <= slots(first === 0, true) ? left : Math.min(slots(first === 0, false), left - 1);
    if (count < 1) throw new Error(`decode_layer.wgsl cannot bind a layer's caches within ${maxStorageBuffers} storage buffers`);
    groups.push([first, count]);
    first += count;
  }
  return groups;
}

type DecodeLayerVariant = {
  dims: DecodeLayerDims;
  heads: number;
  kvDType: KvDType;
  /** Per projection (DECODE_LAYER_MATRICES order): its storage, and whether it walks runs. Undefined: the f32 arena. */
  matrices: { dtype: WeightDType; runs: boolean }[] | undefined;
  hasBias: boolean;
  workgroup: number;
  quads: number;
  /** Layers in the dispatch (1 with a binding per matrix). */
  slots: number;
  /** Sets x to the token's embedding first (arena only). */
  embed: boolean;
  /** Ends with the logits of this many rows of W_lm_head (arena only); 0: none. */
  logitsRows: number;
  /** Then picks the next token from them (argmax): to the token binding and a record in st. */
  greedy: boolean;
};
const decodeLayerKey = (v: DecodeLayerVariant) =>
  `decode_layer/d${v.dims.dim}/q${v.dims.qDim}/kv${v.dims.kvDim}/f${v.dims.ffn}/hd${v.dims.headDim}/n${v.dims.numLayers}/g${v.heads}/kv_${v.kvDType}/` +
  `${v.matrices ? v.matrices.map((m) => `${m.dtype}${m.runs ? '+runs' : ''}`).join(',') : 'arena'}/${v.hasBias ? 'bias' : 'nobias'}/w${v.workgroup}q${v.quads}` +
  `/s${v.slots}${v.embed ? '/embed' : ''}${v.logitsRows ? `/logits${v.logitsRows}` : ''}${v.greedy ? '/greedy' : ''}`;

/**
 * Whether decode_layer.wgsl can run a layer of these sizes and projections (DECODE_LAYER_MATRICES
 * order): sizes in whole vec4s, whole matrices (no parts), and enough storage bindings.
 */
export function decodeLayerFits(d: DecodeLayerDims, matrices: readonly GpuMatrix[], maxStorageBuffers: number): boolean {
  return (
    decodeLayerSizesFit(d) &&
    matrices.length === DECODE_LAYER_MATRICES.length &&
    matrices.every((m) => !m.parts) &&
    maxStorageBuffers >= DECODE_LAYER_STORAGE_BUFFERS
  );
}

/** Whether decode_layer.wgsl can take these sizes: whole vec4s, and a head the attention takes. */
function decodeLayerSizesFit(d: DecodeLayerDims): boolean {
  return [d.dim, d.qDim, d.kvDim, d.ffn, d.headDim].every((n) => n > 0 && n % 4 === 0) && d.headDim <= ATTENTION_MAX_HEAD_DIM;
}

/**
 * Takes the named module-scope functions out of WGSL `code` (each from `fn name(` to its closing
 * brace; braces in // comments do not count): the rest, and the functions taken.
 */
function takeWgslFunctions(code: string, names: readonly string[]): { rest: string; taken: string } {
  let rest = code;
  let taken = '';
  for (const name of names) {
    const start = rest.search(new RegExp(`\\bfn ${name}\\s*\\(`));
    if (start < 0) continue;
    let depth = 0;
    let end = -1;
    for (let i = rest.indexOf('{', start); i < rest.length; i++) {
      if (rest.startsWith('//', i)) i = rest.indexOf('\n', i);
      else if (rest[i] === '{') depth++;
      else if (rest[i] === '}' && --depth === 0) {
        end = i + 1;
        break;
      }
    }
    if (end < 0) throw new Error(`unbalanced braces in WGSL function ${name}`);
    taken += `${rest.slice(start, end)}\n`;
    rest = rest.slice(0, start) + rest.slice(end);
  }
  return { rest, taken };
}

/** The functions of the decode attention that touch the K/V caches (attentionSliceWgsl, decodeAttentionHelpersWgsl, online_softmax.wgsl, decode_attention.wgsl). */
const CACHE_FUNCTIONS = ['load_k', 'load_v', 'load_k1', 'load_v1', 'store_kv_row', 'attend_row', 'attend_item'];

/**
 * decode_layer.wgsl's attention over the caches of each of its `slots` layers, from the decode
 * attention's source: with one slot, k_cache / v_cache; with several, the functions that touch
 * the caches once per slot (suffix c<slot>, over its own pair of bindings), so that each layer's
 * loads name their buffer at compile time (SwiftShader makes a run-time choice between buffers a
 * masked branch per load, which took a third more time a step). `fn attend_slot(slot, item)` runs
 * attend_item for the slot's layer.
 */
function decodeLayerAttentionWgsl(source: string, slots: number): string {
  const caches = (s: number) =>
    (['k', 'v'] as const)
      .map((b, i) => `@group(0) @binding(${DECODE_LAYER_CACHE_BINDING + 2 * s + i}) var<storage, read_write> ${b}_cache: array<KV>;\n`)
      .join('');
  if (slots === 1) return `${source}\n${caches(0)}fn attend_slot(slot: u32, item: u32) { attend_item(item); }\n`;
  const { rest, taken } = takeWgslFunctions(source, CACHE_FUNCTIONS);
  let code = rest;
  let cases = '';
  for (let s = 0; s < slots; s++) {
    code += renameWgsl(caches(s) + taken, `c${s}`);
    cases += `    case ${s}u: { attend_item_c${s}(item); }\n`;
  }
  return `${code}fn attend_slot(slot: u32, item: u32) {\n  switch (slot) {\n${cases}    default: {}\n  }\n}\n`;
}

/** decode_layer.wgsl with its snippets (see the head of that file). */
function decodeLayerSpec(v: DecodeLayerVariant): ShaderSpec {
  const d = v.dims;
  const layout = decodeLayerLayout(d);
  let code =
    `const WG: u32 = ${v.workgroup}u;\nconst QUADS: u32 = ${v.quads}u;\nconst TEAM: u32 = 1u;\nconst LAYER_SLOTS: u32 = ${v.slots}u;\n` +
    `const DIM: u32 = ${d.dim}u;\nconst Q_DIM: u32 = ${d.qDim}u;\nconst KV_DIM: u32 = ${d.kvDim}u;\nconst FFN: u32 = ${d.ffn}u;\n` +
    `const X0: u32 = ${layout.x}u;\nconst QKV0: u32 = ${layout.qkv}u;\nconst ATT0: u32 = ${layout.att}u;\nconst H0: u32 = ${layout.h}u;\n` +
    `const POS0: u32 = ${layout.pos}u;\nconst FREQ0: u32 = ${layout.freq}u;\nconst OUT0: u32 = ${layout.outNorm}u;\nconst HAS_BIAS: bool = ${v.hasBias};\n` +
    `const EMBED: bool = ${v.embed};\nconst LOGITS: bool = ${v.logitsRows > 0};\nconst GREEDY: bool = ${v.greedy};\n` +
    decodeLayerAttentionWgsl(`${decodeAttentionHelpersWgsl(d.headDim, v.heads, v.kvDType, false)}\n${decodeAttentionWgsl}\n`, v.slots);
  // Each projection's K and the vector it multiplies (decode_layer.wgsl's loaders).
  const inputs: Record<(typeof DECODE_LAYER_MATRICES)[number], [string, string]> = {
    q: ['DIM', 'attn'], k: ['DIM', 'attn'], v: ['DIM', 'attn'], o: ['Q_DIM', 'att'], g: ['DIM', 'ffn'], u: ['DIM', 'ffn'], d: ['FFN', 'h'],
  };
  const unroll: Record<string, number> = { QUADS: v.quads };
  const matrices = v.matrices;
  if (matrices) {
    if (v.slots !== 1 || v.embed || v.logitsRows) throw new Error('decode_layer.wgsl: several layers, the embedding and the logits need the arena');
    DECODE_LAYER_MATRICES.forEach((name, i) => {
      const m = matrices[i];
      const [cols, input] = inputs[name];
      code += renameWgsl(weightFormatWgsl(m.dtype, DECODE_LAYER_WEIGHT_BINDING + i, 0, true), `s${name}`);
      code += blockDotWgsl(name, m.dtype, m.runs, cols, `load_in4_${input}`, `load_in_${input}`, unroll);
    });
  } else {
    code += weightFormatWgsl('f32', DECODE_LAYER_ARENA_BINDING, 0, true);
    DECODE_LAYER_MATRICES.forEach((name) => {
      const [cols, input] = inputs[name];
      code += blockDotWgsl(name, 'f32', false, cols, `load_in4_${input}`, `load_in_${input}`, unroll, '');
    });
  }
  if (v.greedy && !v.logitsRows) throw new Error('decode_layer.wgsl: a greedy pick needs the logits');
  if (v.embed || v.greedy) {
    code += `@group(0) @binding(${DECODE_LAYER_TOKENS_BINDING}) var<storage, ${v.greedy ? 'read_write' : 'read'}> tokens: array<u32>;\n`;
  }
  code += v.embed ? decodeEmbeddingWgsl() : 'fn embed_token(lid: u32) {}\n';
  if (v.logitsRows > 0) {
    code += blockDotWgsl('lm', 'f32', false, 'DIM', 'load_in4_out', 'load_in_out', unroll, '') + decodeLogitsWgsl(v.logitsRows);
  } else {
    code += 'fn project_logits(lid: u32) {}\n';
  }
  code += v.greedy ? decodeGreedyWgsl(layout.records) : 'fn pick_greedy(lid: u32) {}\n';
  const source = unrollAttentionLoops(`${code}\n${decodeLayerWgsl}`, d.headDim, v.heads);
  return { code: unrollConstLoops(source, unroll), entryPoint: 'main' };
}

/** decode_layer.wgsl's EMBED phase: x = E[token] from the arena (0 past its rows), as embedding.wgsl does. */
function decodeEmbeddingWgsl(): string {
  return `fn embed_token(lid: u32) {
  let token = tokens[0];
  for (var k = lid * 4u; k < DIM; k += WG * 4u) {
    var e = vec4<f32>(0.0);
    if (token < params.emb_rows) { e = load_weight4(params.emb + token * DIM + k); }
    st[(X0 + k) >> 2u] = e;
  }
}
`;
}

/** decode_layer.wgsl's LOGITS phase: logits = s·(x∘γ_out)·W_lm_headᵀ, W_lm_head [rows, DIM] in the arena. */
function decodeLogitsWgsl(rows: number): string {
  return `@group(0) @binding(${DECODE_LAYER_LOGITS_BINDING}) var<storage, read_write> logits: array<f32>;
const LOGIT_ROWS: u32 = ${rows}u;
fn project_logits(lid: u32) {
  let s = rms_scale();
  for (var b = lid; b < (LOGIT_ROWS + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    let r0 = b * ROWS_PER_BLOCK;
    let acc = block_dot_lm(params.lm, r0, LOGIT_ROWS - 1u, 0u);
    for (var q = 0u; q < QUADS; q++) {
      let r = r0 + 4u * q;
      let y = acc[q] * s;
      if (r < LOGIT_ROWS) { logits[r] = y.x; }
      if (r + 1u < LOGIT_ROWS) { logits[r + 1u] = y.y; }
      if (r + 2u < LOGIT_ROWS) { logits[r + 2u] = y.z; }
      if (r + 3u < LOGIT_ROWS) { logits[r + 3u] = y.w; }
    }
  }
}
`;
}

/**
 * decode_layer.wgsl's GREEDY phase, after LOGITS: the next token as the GPU sampler picks it at
 * temperature 0 without bias, penalties or alternatives (sample.wgsl): the argmax of the logits,
 * the lowest id on ties, and its log-softmax log(exp(l_max) / Σ exp(l)) = -log Σ exp(l - l_max).
 * Each thread keeps a running maximum and sum over ids lid, lid + WG, ... (in ascending order, so
 * a strict > keeps the lowest id); thread 0 merges them in thread order.
 */
function decodeGreedyWgsl(records: number): string {
  return `const RECORD0: u32 = ${records}u;
const RECORD_SLOTS: u32 = ${DECODE_RECORD_SLOTS}u;
var<workgroup> greedy_max: array<f32, WG>;
var<workgroup> greedy_sum: array<f32, WG>;
var<workgroup> greedy_id: array<u32, WG>;
fn pick_greedy(lid: u32) {
  var m = -3.0e38; // not -inf: exp(l - m) stays 0 for l = -inf
  var sum = 0.0;
  var id = 0u;
  for (var r = lid; r < LOGIT_ROWS; r += WG) {
    let l = logits[r];
    if (l > m) {
      sum = sum * exp(m - l) + 1.0;
      m = l;
      id = r;
    } else {
      sum += exp(l - m);
    }
  }
  greedy_max[lid] = m;
  greedy_sum[lid] = sum;
  greedy_id[lid] = id;
  workgroupBarrier();
  if (lid == 0u) {
    for (var t = 1u; t < WG; t++) {
      let mt = greedy_max[t];
      if (mt > m) {
        sum = sum * exp(m - mt) + greedy_sum[t];
        m = mt;
        id = greedy_id[t];
      } else {
        sum += greedy_sum[t] * exp(mt - m);
        if (mt == m) { id = min(id, greedy_id[t]); }
      }
    }
    tokens[0] = id;
    st[RECORD0 / 4u + start_pos() % RECORD_SLOTS] = vec4<f32>(bitcast<f32>(id), -log(sum), 0.0, 0.0);
  }
}
`;
}

/** Slices a head's vector takes in the attention kernels: vec4s when the head dimension allows, else floats. */
function headSlices(headDim: number): number {
  return headDim % 4 === 0 ? headDim / 4 : headDim;
}

/** Unrolled copies of a slice loop's body up to which unrollConstLoops is used (beyond, the code grows more than the loop costs). */
const MAX_UNROLLED_SLICES = 16;

/**
 * Unrolls every `for (var v = 0u; v < NAME; v++) { ... }` loop of a shader whose bound NAME is in
 * `counts`, nested ones included, into one copy of the body per value, with v a constant. Why:
 * SwiftShader does not unroll them, and a function-scope array indexed by a loop variable goes
 * through memory lane by lane. Measured on SwiftShader, stories260K decode (head_dim 8: 2 slices):
 * ~3.3 -> ~3.1 ms/token.
 */
export function unrollConstLoops(code: string, counts: Record<string, number>): string {
  const loop = /for \(var (\w+) = 0u; \1 < (\w+); \1\+\+\) \{/g;
  let out = '';
  let from = 0;
  for (let m = loop.exec(code); m; m = loop.exec(code)) {
    const count = counts[m[2]];
    if (count === undefined || m.index < from) continue;
    const bodyStart = m.index + m[0].length;
    let depth = 1;
    let end = bodyStart;
    for (; depth > 0; end++) {
      if (end >= code.length) throw new Error(`unrollConstLoops: unbalanced braces after ${m[0]}`);
      if (code[end] === '{') depth++;
      else if (code[end] === '}') depth--;
    }
    const body = unrollConstLoops(code.slice(bodyStart, end - 1), counts);
    const name = new RegExp(`\\b${m[1]}\\b`, 'g');
    out += code.slice(from, m.index) + Array.from({ length: count }, (_, k) => `{${body.replace(name, `${k}u`)}}`).join(' ');
    from = end;
    loop.lastIndex = end;
  }
  return out + code.slice(from);
}

export interface KernelsOptions {
  /** Weight storage types whose embedding/matmul/matvec pipelines compile up front; the rest compile on first use. */
  weightDTypes?: WeightDType[];
  /** Caps workgroups per grid dimension below the device's limit (tests use it to exercise the 2-D folding). */
  maxWorkgroupsPerDimension?: number;
  /** Compile with createComputePipelineAsync (default true); false uses createComputePipeline. */
  asyncCompile?: boolean;
}

/** The compiled kernels of one device. Record work with begin(). */
export class Kernels {
  private readonly bindGroupLayouts = new Map<GPUComputePipeline, GPUBindGroupLayout>();

  private constructor(
    readonly ctx: GpuContext,
    /** Compiled pipelines by kernel and variant. */
    readonly pipelines: PipelineCache,
    /** Grid dimensions are capped at this many workgroups; larger dispatches fold into 2-D. */
    readonly maxWorkgroupsPerDimension: number,
  ) {}

  /**
   * Compiles the pipelines up front (createComputePipelineAsync), so WGSL errors
   * surface here with the compiler's messages. Weight-format variants not listed in
   * options.weightDTypes, and the bias variants, compile on first use.
   */
  static async create(ctx: GpuContext, options: KernelsOptions = {}): Promise<Kernels> {
    const deviceMax = ctx.device.limits.maxComputeWorkgroupsPerDimension;
    const kernels = new Kernels(
      ctx,
      new PipelineCache(ctx.device, { async: options.asyncCompile }),
      Math.min(deviceMax, options.maxWorkgroupsPerDimension ?? deviceMax),
    );
    const compiling: Promise<unknown>[] = [];
    for (const name of Object.keys(FIXED_KERNELS) as FixedKernel[]) {
      compiling.push(kernels.pipelines.prepare(name, () => FIXED_KERNELS[name]));
    }
    for (const name of Object.keys(POSITIONAL_KERNELS) as PositionalKernel[]) {
      compiling.push(kernels.pipelines.prepare(positionalKey(name, 'uniform'), () => positionalSpec(name, 'uniform')));
    }
    for (const entry of ['per_row', 'per_workgroup'] as const) {
      for (const aligned of [true, false]) {
        const v = { entry, aligned };
        compiling.push(kernels.pipelines.prepare(rmsNormKey(v), () => rmsNormSpec(v)));
      }
    }
    for (const dtype of options.weightDTypes ?? []) {
      const variants: [WeightKernel, WeightVariant][] = [
        ['embedding', { hasBias: false, aligned: false }],
        ['matmul', { hasBias: false, aligned: true, matmul: kernels.matmulShape(Infinity, true, dtype) }],
        // The prefill's residual-add (Wo, W_down) and feed-forward-input (W_gate, W_up) variants.
        ['matmul', { hasBias: false, aligned: true, matmul: kernels.matmulShape(Infinity, true, dtype), accumulate: true }],
        ['matmul', { hasBias: false, aligned: true, matmul: kernels.matmulShape(Infinity, true, dtype), swiglu: true }],
        // ... and its K and V projections (matmulPair).
        ['matmul', { hasBias: false, aligned: true, matmul: kernels.matmulShape(Infinity, true, dtype), pair: true }],
      ];
      // Quantized rows are whole blocks (multiples of 32 weights): their matmuls are always aligned.
      if (!isQuantized(dtype)) variants.push(['matmul', { hasBias: false, aligned: false, matmul: kernels.matmulShape(Infinity, false, dtype) }]);
      for (const [kernel, variant] of variants) {
        compiling.push(
          kernels.pipelines.prepare(weightKernelKey(kernel, dtype, variant), () => weightKernelSpec(kernel, dtype, variant)),
        );
      }
    }
    await Promise.all(compiling);
    return kernels;
  }

  /** Starts recording dispatches into one command encoder. */
  begin(): KernelBatch {
    return new KernelBatch(this);
  }

  /** The parameter slots KernelBatches share, one batch at a time (see KernelBatch); undefined while one holds them. */
  private batchUniforms: UniformArena | undefined;
  private batchUniformsHeld = false;
  /** Bind groups of the batches that recorded with the shared slots, by pipeline, slot and buffers, least recently used first. */
  private readonly bindGroupCache = new Map<string, GPUBindGroup>();
  private readonly objectIds = new WeakMap<object, number>();

  /** @internal The shared parameter slots, emptied, for one KernelBatch (undefined while another holds them). */
  leaseBatchUniforms(): UniformArena | undefined {
    if (this.batchUniformsHeld) return undefined;
    this.batchUniformsHeld = true;
    this.batchUniforms ??= new UniformArena(this.ctx.device);
    this.batchUniforms.reset();
    return this.batchUniforms;
  }

  /** @internal Called by the KernelBatch holding the shared slots once it is submitted or discarded. */
  releaseBatchUniforms(): void {
    this.batchUniformsHeld = false;
  }

  /**
   * @internal The bind group of (pipeline, uniform slot, buffers), made by `create` the first time.
   * Keyed by object identity: a destroyed buffer's entries are never hit again and age out.
   */
  cachedBindGroup(
    pipeline: GPUComputePipeline,
    slot: { buffer: GPUBuffer; offset: number },
    buffers: Record<number, GPUBuffer>,
    create: () => GPUBindGroup,
  ): GPUBindGroup {
    let key = `${this.objectId(pipeline)}|${this.objectId(slot.buffer)}@${slot.offset}`;
    for (const [binding, buffer] of Object.entries(buffers)) key += `|${binding}:${this.objectId(buffer)}`;
    let group = this.bindGroupCache.get(key);
    if (group) {
      this.bindGroupCache.delete(key); // most recently used goes last
    } else {
      group = create();
      if (this.bindGroupCache.size >= MAX_CACHED_BIND_GROUPS) {
        this.bindGroupCache.delete(this.bindGroupCache.keys().next().value!);
      }
    }
    this.bindGroupCache.set(key, group);
    return group;
  }

  private objectId(o: object): number {
    let id = this.objectIds.get(o);
    if (id === undefined) {
      id = ++this.lastObjectId;
      this.objectIds.set(o, id);
    }
    return id;
  }
  private lastObjectId = 0;

  /**
   * Starts recording a KernelProgram: dispatches whose parameters and bind groups are made once
   * and that are then encoded into any number of command encoders (the reusable decode step).
   */
  program(label = 'kernel program'): KernelProgram {
    return new KernelProgram(this, label);
  }

  /** @internal The pipeline of a fixed kernel. */
  fixedPipeline(name: FixedKernel): GPUComputePipeline {
    return this.pipelines.get(name, () => FIXED_KERNELS[name]);
  }

  /** @internal The pipeline of a position-dependent kernel for one position source. */
  positionalPipeline(name: PositionalKernel, source: PositionSource): GPUComputePipeline {
    return this.pipelines.get(positionalKey(name, source), () => positionalSpec(name, source));
  }

  /** @internal A decode_attention.wgsl pipeline (compiled on first use). */
  decodeAttentionPipeline(variant: DecodeAttentionVariant): GPUComputePipeline {
    return this.pipelines.get(decodeAttentionKey(variant), () => decodeAttentionSpec(variant));
  }

  /** @internal A decode_layer.wgsl pipeline (compiled on first use). */
  decodeLayerPipeline(variant: DecodeLayerVariant): GPUComputePipeline {
    return this.pipelines.get(decodeLayerKey(variant), () => decodeLayerSpec(variant));
  }

  /** @internal A fused_matvec.wgsl pipeline (compiled on first use). */
  fusedMatvecPipeline(variant: FusedVariant): GPUComputePipeline {
    return this.pipelines.get(fusedKey(variant), () => fusedMatvecSpec(variant));
  }

  /**
   * Keys per chunk of the decode attention's split over the sequence: a cache of more rows takes
   * decode_attention + split_combine (two dispatches), a smaller one decode_attention alone.
   * CPU devices (SwiftShader) split late: there a thread per head walking its keys is cheap and
   * every dispatch costs ~15 µs; GPUs split early, since one thread per head leaves them idle.
   */
  decodeAttentionChunkKeys(): number {
    return this.decodeChunkKeysOverride ?? (this.isCpuDevice ? DECODE_CHUNK_KEYS_CPU : DECODE_CHUNK_KEYS_GPU);
  }

  /** @internal Forces the decode attention's chunk length (tests). */
  decodeChunkKeysOverride: number | undefined;

  /** @internal Forces the fused matvec's shape (tests, measurements). */
  fusedShapeOverride: FusedShape | undefined;

  /**
   * Whether the matrix-vector kernels walk `dtype`'s rows a run at a time (dot_run, see
   * weight-formats.ts): the quantized types on CPU adapters, where every load costs and a block's
   * scales are then read once. GPUs keep neighbouring lanes on neighbouring words (coalesced
   * loads). Measured on SwiftShader, matvec 4096 x 2048 side by side: 1.2x (Q8_0) to 3.7x (Q4_K).
   */
  usesWeightRuns(dtype: WeightDType): boolean {
    return (this.weightRunsOverride ?? this.isCpuDevice) && weightRunLength(dtype) > 4;
  }

  /** @internal Forces usesWeightRuns on or off (tests, measurements). */
  weightRunsOverride: boolean | undefined;

  /** @internal Forces decode_attention's query heads per thread (tests; must divide the GQA group). */
  attentionHeadsOverride: number | undefined;

  /** @internal Forces attention.wgsl per_thread's query tokens per thread (tests, measurements). */
  attentionQueriesOverride: number | undefined;

  /**
   * Whether a decode step runs each layer as one dispatch (decode_layer.wgsl) rather than five:
   * on CPU adapters, for layers of at most DECODE_LAYER_MAX_WEIGHTS weights that the kernel can
   * take (see decodeLayerFits). Measured on SwiftShader, stories260K decode step at position 300
   * (7 dispatches instead of 27): Node 2.35 -> 1.71 ms, Chromium (median) 3.78 -> 2.25 ms.
   */
  usesDecodeLayer(dims: DecodeLayerDims, matrices: readonly GpuMatrix[]): boolean {
    if (!decodeLayerFits(dims, matrices, this.ctx.limits.maxStorageBuffersPerShaderStage)) return false;
    if (this.decodeLayerOverride !== undefined) return this.decodeLayerOverride;
    const weights = matrices.reduce((n, m) => n + m.rows * m.cols, 0);
    return this.isCpuDevice && weights <= DECODE_LAYER_MAX_WEIGHTS;
  }

  /** @internal Forces usesDecodeLayer on (where the kernel fits) or off (tests, measurements). */
  decodeLayerOverride: boolean | undefined;

  /** @internal false: decode_layer.wgsl binds each layer's matrices, a dispatch a layer, even where they could share an arena (tests, measurements). */
  decodeArenaOverride: boolean | undefined;

  /** @internal Forces decode_layer.wgsl's workgroup size (measurements). */
  decodeLayerWorkgroupOverride: number | undefined;

  /** @internal An rmsnorm.wgsl pipeline (compiled up front by create()). */
  rmsNormPipeline(variant: RmsNormVariant): GPUComputePipeline {
    return this.pipelines.get(rmsNormKey(variant), () => rmsNormSpec(variant));
  }

  /** @internal An attention.wgsl pipeline for one head dimension (compiled on first use). */
  attentionPipeline(variant: AttentionVariant): GPUComputePipeline {
    return this.pipelines.get(attentionKey(variant), () => attentionSpec(variant));
  }

  /** Whether the device is a CPU implementation (SwiftShader, llvmpipe), where barriers are very slow. */
  get isCpuDevice(): boolean {
    this.cpuDevice ??= isCpuAdapter(this.ctx.adapter);
    return this.cpuDevice;
  }
  private cpuDevice: boolean | undefined;

  /** @internal Forces every rmsNorm onto one entry point (benchmarks and tests). */
  rmsNormPlanOverride: 'per_row' | 'per_workgroup' | undefined;

  /** @internal Forces every attention onto one entry point (benchmarks and tests). */
  attentionPlanOverride: 'per_thread' | 'per_workgroup' | undefined;

  /** @internal The pipeline of a weight-reading kernel for one storage type (compiled on first use). */
  weightPipeline(kernel: WeightKernel, dtype: WeightDType, variant: WeightVariant): GPUComputePipeline {
    return this.pipelines.get(weightKernelKey(kernel, dtype, variant), () => weightKernelSpec(kernel, dtype, variant));
  }

  /** @internal The prefill matmul's shape on this device for T tokens (matmulShape); a tiled override needs aligned columns. */
  matmulShape(T = Infinity, aligned = true, dtype: WeightDType = 'f32'): MatmulShape {
    const shape = this.matmulShapeOverride ?? matmulShape(this.isCpuDevice, T, aligned, dtype);
    return shape.tiled && !aligned ? matmulShape(false, T, false) : shape;
  }

  /** @internal Forces matmul.wgsl's workgroup (tests, measurements). */
  matmulShapeOverride: MatmulShape | undefined;

  /** @internal The matvec split for rows of `cols` weights on this device (matvecPlan). */
  matvecPlan(cols: number): MatvecPlan {
    if (this.matvecPlanOverride) return this.matvecPlanOverride;
    return matvecPlan(cols, this.ctx.features.subgroups ? this.subgroupMinSize() : 0);
  }

  /** @internal Forces every matvec onto one split (benchmarks and tests). */
  matvecPlanOverride: MatvecPlan | undefined;

  /** The smallest subgroup size the adapter reports; 4, the least WebGPU allows, when it does not say. */
  private subgroupMinSize(): number {
    const info = (this.ctx.device as GPUDevice & { adapterInfo?: { subgroupMinSize?: number } }).adapterInfo;
    const size = info?.subgroupMinSize;
    return typeof size === 'number' && size >= 4 ? size : 4;
  }

  /** @internal A pipeline's (auto) bind group layout, looked up once. */
  bindGroupLayout(pipeline: GPUComputePipeline): GPUBindGroupLayout {
    let layout = this.bindGroupLayouts.get(pipeline);
    if (!layout) {
      layout = pipeline.getBindGroupLayout(0);
      this.bindGroupLayouts.set(pipeline, layout);
    }
    return layout;
  }

  /**
   * @internal Spreads `workgroups` over a grid of at most maxWorkgroupsPerDimension per side. The
   * shaders recover the flat index as wg.y * num_workgroups.x + wg.x and skip indices past the end.
   */
  grid(workgroups: number): [number, number] {
    const max = this.maxWorkgroupsPerDimension;
    const x = Math.min(workgroups, max);
    const y = Math.ceil(workgroups / x);
    if (y > max) throw new Error(`dispatch of ${workgroups} workgroups exceeds the ${max} x ${max} grid`);
    return [x, y];
  }
}

/** A uniform value: plain numbers are u32; wrap f32 fields with f32(). */
type UniformValue = number | { f32: number };
const f32 = (value: number): UniformValue => ({ f32: value });

/** 256-byte uniform slots for one batch, in chunks of GPU buffers filled on the CPU until submit. */
class UniformArena {
  private readonly chunks: { buffer: GPUBuffer; data: ArrayBuffer; used: number }[] = [];
  /** The chunk being filled. */
  private current = 0;

  constructor(private readonly device: GPUDevice) {}

  /** Reserves a slot holding `values` (4 bytes each, in order); returns where it lives. */
  alloc(values: UniformValue[]): { buffer: GPUBuffer; offset: number; size: number } {
    let chunk = this.chunks[this.current];
    if (chunk && chunk.used === chunk.data.byteLength) chunk = this.chunks[++this.current];
    if (!chunk) {
      const size = UNIFORM_SLOT_BYTES * UNIFORM_SLOTS_PER_CHUNK;
      chunk = {
        buffer: this.device.createBuffer({
          label: 'kernel params',
          size,
          usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
        }),
        data: new ArrayBuffer(size),
        used: 0,
      };
      this.chunks.push(chunk);
    }
    const offset = chunk.used;
    const view = new DataView(chunk.data, offset, UNIFORM_SLOT_BYTES);
    values.forEach((v, i) => {
      if (typeof v === 'number') view.setUint32(i * 4, v, true);
      else view.setFloat32(i * 4, v.f32, true);
    });
    chunk.used += UNIFORM_SLOT_BYTES;
    return { buffer: chunk.buffer, offset, size: UNIFORM_SLOT_BYTES };
  }

  /** Queues the slot contents; queue writes land before the next submit's commands run. */
  upload(): void {
    for (const c of this.chunks) if (c.used > 0) this.device.queue.writeBuffer(c.buffer, 0, c.data, 0, c.used);
  }

  /**
   * Empties the slots for the next batch, keeping the buffers: the same slots come back in the
   * same order. Legal once the previous contents were uploaded (queue writes copy at once, and
   * land after the work submitted before them).
   */
  reset(): void {
    for (const c of this.chunks) c.used = 0;
    this.current = 0;
  }

  /** Legal right after submit: the buffers are freed once the submitted work is done with them. */
  destroy(): void {
    for (const c of this.chunks) c.buffer.destroy();
  }
}

function assertCount(value: number, what: string, min = 1): void {
  if (!Number.isInteger(value) || value < min || value > 0xffffffff) {
    throw new Error(`${what} must be an integer >= ${min}, got ${value}`);
  }
}

function assertFits(buffer: GPUBuffer, bytes: number, what: string): void {
  if (buffer.size < bytes) throw new Error(`${what}: buffer '${buffer.label}' has ${buffer.size} bytes, needs ${bytes}`);
}

/**
 * The two matrices of a matmul.wgsl SECOND pass (matmulSwiglu, matmulPair), unsplit and of one
 * shape (the callers check that): positive sizes, the storage's block shape, buffers that hold them.
 */
function checkSecondPassWeights(kernel: string, ...pair: [GpuMatrix, string][]): void {
  for (const [W, what] of pair) {
    assertCount(W.rows, `${kernel} ${what}.rows`);
    assertCount(W.cols, `${kernel} ${what}.cols`);
    checkWeightShape(W.dtype, W.rows, W.cols, `${kernel} ${what}`);
    checkParts(W, `${kernel} ${what}`); // (unsplit: the one part is the whole buffer)
  }
}

/**
 * The row ranges of a weight matrix (one for an unsplit matrix), checked: consecutive, covering
 * every row, each buffer holding its rows.
 */
function checkParts(W: GpuMatrix, what: string): GpuMatrixPart[] {
  const parts = matrixParts(W);
  let next = 0;
  for (const part of parts) {
    if (part.firstRow !== next || !Number.isInteger(part.rows) || part.rows < 1) {
      throw new Error(`${what}: parts must be consecutive non-empty row ranges (part at row ${part.firstRow}, expected ${next})`);
    }
    assertFits(part.buffer, weightByteSize(W.dtype, part.rows * W.cols), what);
    next += part.rows;
  }
  if (next !== W.rows) throw new Error(`${what}: parts cover ${next} of ${W.rows} rows`);
  return parts;
}

function assertDistinct(output: GPUBuffer, inputs: (GPUBuffer | undefined)[], what: string): void {
  if (inputs.includes(output)) {
    throw new Error(`${what}: the output buffer '${output.label}' is also an input; use a separate buffer`);
  }
}

/**
 * The kernels' dispatch methods, checked and planned once; where the dispatches go is the
 * subclass's: KernelBatch encodes them at once into one command encoder, KernelProgram keeps them
 * (with their parameters and bind groups) to encode again and again.
 */
export abstract class KernelRecorder {
  /** The dispatches' parameters: one uniform slot each. */
  protected uniformSlots: UniformArena | undefined;

  constructor(
    protected readonly kernels: Kernels,
    /** Label of the bind groups (and passes) it makes. */
    protected readonly label?: string,
  ) {}

  /** The dispatches' parameters: one uniform slot each (made on the first dispatch). */
  protected get uniforms(): UniformArena {
    this.uniformSlots ??= new UniformArena(this.kernels.ctx.device);
    return this.uniformSlots;
  }

  /**
   * out[t, :] = E[tokens[t], :] (f32 [T, table.cols]). Token ids past the table give zero rows.
   * A split table (GpuMatrix.parts) takes one dispatch per part, each writing the tokens in its rows.
   */
  embedding(out: GPUBuffer, table: GpuMatrix, tokens: GPUBuffer, T: number): void {
    assertCount(T, 'embedding T', 0);
    if (T === 0) return;
    assertFits(out, T * table.cols * 4, 'embedding out');
    assertFits(tokens, T * 4, 'embedding tokens');
    checkWeightShape(table.dtype, table.rows, table.cols, 'embedding table');
    const parts = checkParts(table, 'embedding table');
    const n = T * table.cols;
    const pipeline = this.kernels.weightPipeline('embedding', table.dtype, { hasBias: false, aligned: false });
    for (const part of parts) {
      this.dispatch(
        pipeline,
        [T, table.cols, table.rows, part.firstRow, part.rows],
        { 1: out, 2: tokens, [WEIGHT_BINDING]: part.buffer },
        Math.ceil(n / ELEMENTWISE_WORKGROUP),
      );
    }
  }

  /** out[t, i] = x[t, i] / sqrt(mean(x[t, :]^2) + eps) * gamma[i]. out must not be x. */
  rmsNorm(out: GPUBuffer, x: GPUBuffer, gamma: GPUBuffer, T: number, dim: number, eps: number): void {
    assertCount(T, 'rmsNorm T', 0);
    assertCount(dim, 'rmsNorm dim');
    if (T === 0) return;
    assertDistinct(out, [x, gamma], 'rmsNorm');
    assertFits(out, T * dim * 4, 'rmsNorm out');
    assertFits(x, T * dim * 4, 'rmsNorm x');
    assertFits(gamma, dim * 4, 'rmsNorm gamma');
    // A multiple of 4 floats per row: every row starts 16-byte aligned, so the rows are read as vec4s.
    const entry = this.kernels.rmsNormPlanOverride ?? rmsNormPlan(dim, this.kernels.isCpuDevice);
    const pipeline = this.kernels.rmsNormPipeline({ entry, aligned: dim % 4 === 0 });
    const workgroups = entry === 'per_row' ? Math.ceil(T / RMSNORM_ROWS_PER_WORKGROUP) : T;
    this.dispatch(pipeline, [T, dim, f32(eps)], { 1: out, 2: x, 3: gamma }, workgroups);
  }

  /**
   * y[T, W.rows] = x[T, W.cols]·Wᵀ (+ bias); with `accumulate`, y += that (the residual add
   * folded in). One token goes to matvec.wgsl (threads of 4 rows, see matvecPlan), more to the
   * register-blocked matmul.wgsl (threads of 4 rows x 4 tokens; on CPU devices bigger blocks) or, on GPUs from
   * 32 tokens, the shared-memory tiles of matmul_tiled.wgsl (matmulShape). y must not be x.
   */
  matmul(y: GPUBuffer, x: GPUBuffer, W: GpuMatrix, T: number, bias?: GPUBuffer, options: { accumulate?: boolean } = {}): void {
    const accumulate = options.accumulate ?? false;
    assertCount(T, 'matmul T', 0);
    assertCount(W.rows, 'matmul W.rows');
    assertCount(W.cols, 'matmul W.cols');
    if (T === 0) return;
    checkWeightShape(W.dtype, W.rows, W.cols, 'matmul W');
    const parts = checkParts(W, 'matmul W');
    assertDistinct(y, [x, ...parts.map((p) => p.buffer), bias], 'matmul');
    assertFits(y, T * W.rows * 4, 'matmul y');
    assertFits(x, T * W.cols * 4, 'matmul x');
    if (bias) assertFits(bias, W.rows * 4, 'matmul bias');

    // A multiple of 4 columns: every row of x and W starts 16-byte aligned, so both are read as vec4s.
    const aligned = W.cols % 4 === 0;
    // A split W (GpuMatrix.parts): one dispatch per row range, writing its columns of y.
    for (const part of parts) {
      const buffers: Record<number, GPUBuffer> = { 1: y, 2: x, [WEIGHT_BINDING]: part.buffer };
      if (bias) buffers[BIAS_BINDING] = bias;
      if (T === 1) {
        const plan = this.kernels.matvecPlan(W.cols);
        const workgroups = Math.ceil((Math.ceil(part.rows / 4) * plan.team) / MATVEC_WORKGROUP);
        const runs = this.kernels.usesWeightRuns(W.dtype);
        const pipeline = this.kernels.weightPipeline('matvec', W.dtype, { hasBias: !!bias, aligned, plan, accumulate, runs });
        this.dispatch(pipeline, [part.rows, W.cols, part.firstRow], buffers, workgroups);
      } else {
        const shape = this.kernels.matmulShape(T, aligned, W.dtype);
        const pipeline = this.kernels.weightPipeline('matmul', W.dtype, { hasBias: !!bias, aligned, matmul: shape, accumulate });
        this.dispatch(pipeline, [T, part.rows, W.cols, part.firstRow, W.rows], buffers, this.matmulGrid(shape, part.rows, T, 'matmul'));
      }
    }
  }

  /**
   * The feed-forward's input for T tokens: out[T, rows] = silu(x·W_gateᵀ) * (x·W_upᵀ), in one
   * pass (matmul.wgsl SWIGLU) when T > 1 and neither matrix is split; otherwise the two
   * projections go to `scratch` and swiglu() combines them (T = 1: fusedSwiglu). out must not be x.
   */
  matmulSwiglu(out: GPUBuffer, x: GPUBuffer, wGate: GpuMatrix, wUp: GpuMatrix, T: number, scratch: { gate: GPUBuffer; up: GPUBuffer }): void {
    assertCount(T, 'matmulSwiglu T', 0);
    if (T === 0) return;
    if (wGate.rows !== wUp.rows || wGate.cols !== wUp.cols) {
      throw new Error(`matmulSwiglu: W_gate [${wGate.rows}, ${wGate.cols}] and W_up [${wUp.rows}, ${wUp.cols}] differ`);
    }
    if (T === 1 || wGate.parts || wUp.parts || wGate.dtype !== wUp.dtype) {
      if (T === 1) {
        this.fusedSwiglu(out, x, wGate, wUp, { scratch });
        return;
      }
      this.matmul(scratch.gate, x, wGate, T);
      this.matmul(scratch.up, x, wUp, T);
      this.swiglu(out, scratch.gate, scratch.up, T * wGate.rows);
      return;
    }
    checkSecondPassWeights('matmulSwiglu', [wGate, 'W_gate'], [wUp, 'W_up']);
    assertDistinct(out, [x, wGate.buffer, wUp.buffer], 'matmulSwiglu');
    assertFits(out, T * wGate.rows * 4, 'matmulSwiglu out');
    assertFits(x, T * wGate.cols * 4, 'matmulSwiglu x');
    const aligned = wGate.cols % 4 === 0;
    const shape = this.kernels.matmulShape(T, aligned, wGate.dtype);
    const pipeline = this.kernels.weightPipeline('matmul', wGate.dtype, { hasBias: false, aligned, matmul: shape, swiglu: true });
    this.dispatch(
      pipeline,
      [T, wGate.rows, wGate.cols, 0, wGate.rows],
      { 1: out, 2: x, [WEIGHT_BINDING]: wGate.buffer, [WEIGHT_UP_BINDING]: wUp.buffer },
      this.matmulGrid(shape, wGate.rows, T, 'matmulSwiglu'),
    );
  }

  /**
   * Two projections of the same x for T tokens in one pass (matmul.wgsl PAIR): y1 = x·W1ᵀ (+ b1)
   * and y2 = x·W2ᵀ (+ b2), each X load serving both: the prefill's K and V (on SwiftShader, where
   * loads are what costs, 6% of stories260K's prefill). W1 and W2 of one shape and storage, whole,
   * biases both or neither; otherwise (and for T = 1) two matmul() calls.
   */
  matmulPair(y1: GPUBuffer, y2: GPUBuffer, x: GPUBuffer, W1: GpuMatrix, W2: GpuMatrix, T: number, b1?: GPUBuffer, b2?: GPUBuffer): void {
    assertCount(T, 'matmulPair T', 0);
    if (T === 0) return;
    const same = W1.rows === W2.rows && W1.cols === W2.cols && W1.dtype === W2.dtype && !W1.parts && !W2.parts && !b1 === !b2;
    if (T === 1 || !same) {
      this.matmul(y1, x, W1, T, b1);
      this.matmul(y2, x, W2, T, b2);
      return;
    }
    checkSecondPassWeights('matmulPair', [W1, 'W1'], [W2, 'W2']);
    assertDistinct(y1, [y2, x, W1.buffer, W2.buffer, b1, b2], 'matmulPair');
    assertDistinct(y2, [x, W1.buffer, W2.buffer, b1, b2], 'matmulPair');
    assertFits(y1, T * W1.rows * 4, 'matmulPair y1');
    assertFits(y2, T * W1.rows * 4, 'matmulPair y2');
    assertFits(x, T * W1.cols * 4, 'matmulPair x');
    if (b1 && b2) {
      assertFits(b1, W1.rows * 4, 'matmulPair b1');
      assertFits(b2, W1.rows * 4, 'matmulPair b2');
    }
    const aligned = W1.cols % 4 === 0;
    const shape = this.kernels.matmulShape(T, aligned, W1.dtype);
    const pipeline = this.kernels.weightPipeline('matmul', W1.dtype, { hasBias: !!b1, aligned, matmul: shape, pair: true });
    const buffers: Record<number, GPUBuffer> = { 1: y1, 2: x, [WEIGHT_BINDING]: W1.buffer, [WEIGHT_UP_BINDING]: W2.buffer, [PAIR_OUTPUT_BINDING]: y2 };
    if (b1 && b2) {
      buffers[BIAS_BINDING] = b1;
      buffers[PAIR_BIAS_BINDING] = b2;
    }
    this.dispatch(pipeline, [T, W1.rows, W1.cols, 0, W1.rows], buffers, this.matmulGrid(shape, W1.rows, T, 'matmulPair'));
  }

  /** matmul.wgsl's 2-D grid for `rows` outputs of T tokens (it does not fold into 2-D like the 1-D kernels). */
  private matmulGrid(shape: MatmulShape, rows: number, T: number, what: string): [number, number] {
    const groupsX = Math.ceil(rows / (4 * (shape.rowQuads ?? 1) * shape.wx));
    const groupsY = Math.ceil(T / (shape.tokens * shape.wy));
    const max = this.kernels.maxWorkgroupsPerDimension;
    if (groupsX > max || groupsY > max) throw new Error(`${what} of ${T} x ${rows} outputs exceeds the dispatch grid`);
    return [groupsX, groupsY];
  }

  /** Rotates x [T, numHeads, headDim] in place; token t is at position startPos + t. */
  rope(
    x: GPUBuffer,
    T: number,
    numHeads: number,
    headDim: number,
    startPos: number,
    invFreq: GPUBuffer,
    pairing: RopePairing,
    /** A u32 added to startPos on the GPU (see PositionSource); for KernelProgram's reusable steps. */
    position?: GPUBuffer,
  ): void {
    assertCount(T, 'rope T', 0);
    assertCount(numHeads, 'rope numHeads');
    assertCount(headDim, 'rope headDim');
    assertCount(startPos, 'rope startPos', 0);
    if (headDim % 2 !== 0) throw new Error(`rope headDim must be even, got ${headDim}`);
    if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
    if (T === 0) return;
    assertDistinct(x, [invFreq], 'rope');
    assertFits(x, T * numHeads * headDim * 4, 'rope x');
    assertFits(invFreq, (headDim / 2) * 4, 'rope invFreq');
    const pairs = T * numHeads * (headDim / 2);
    this.dispatch(
      this.kernels.positionalPipeline('rope', position ? 'buffer' : 'uniform'),
      [T, numHeads, headDim, startPos, pairing === 'adjacent' ? 0 : 1],
      withPosition({ 1: x, 2: invFreq }, position),
      Math.ceil(pairs / ELEMENTWISE_WORKGROUP),
    );
  }

  /**
   * Causal grouped-query attention of q [T, numHeads, headDim] over the caches
   * [rows, numKvHeads, headDim], which must already hold positions 0 .. startPos + T - 1.
   * Writes out [T, numHeads, headDim]. With a slidingWindow W, the query at position p attends
   * only to the keys at positions (p - W, p] (Mistral / Qwen2 `sliding_window`); without, to 0 ..= p.
   * One thread per (token, head) or one workgroup per (token, head): see attentionPlan.
   * kvDType: the caches' element type ('f16': two halves a u32 word, as writeKv stores them).
   * With `position` (a u32 on the GPU, see PositionSource), the first token is at startPos plus
   * that value: the caches are then only checked to hold startPos + T rows, the kernel variant is
   * planned for as many keys as the caches hold, and the dispatch grid does not depend on it.
   */
  attention(
    out: GPUBuffer,
    q: GPUBuffer,
    kCache: GPUBuffer,
    vCache: GPUBuffer,
    T: number,
    startPos: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    slidingWindow?: number,
    kvDType: KvDType = 'f32',
    position?: GPUBuffer,
  ): void {
    assertCount(T, 'attention T', 0);
    assertCount(startPos, 'attention startPos', 0);
    assertCount(numHeads, 'attention numHeads');
    assertCount(numKvHeads, 'attention numKvHeads');
    assertCount(headDim, 'attention headDim');
    if (numHeads % numKvHeads !== 0) {
      throw new Error(`attention numHeads (${numHeads}) must be a multiple of numKvHeads (${numKvHeads})`);
    }
    if (slidingWindow !== undefined) assertCount(slidingWindow, 'attention slidingWindow');
    if (headDim > ATTENTION_MAX_HEAD_DIM) {
      throw new Error(`attention headDim ${headDim} exceeds the supported ${ATTENTION_MAX_HEAD_DIM}`);
    }
    if (T === 0) return;
    assertDistinct(out, [q, kCache, vCache], 'attention');
    assertFits(out, T * numHeads * headDim * 4, 'attention out');
    assertFits(q, T * numHeads * headDim * 4, 'attention q');
    if (kvDType === 'f16' && (numKvHeads * headDim) % 2 !== 0) {
      throw new Error(`attention: an f16 KV cache needs an even K/V row (numKvHeads * headDim = ${numKvHeads * headDim})`);
    }
    const rowBytes = numKvHeads * headDim * (kvDType === 'f16' ? 2 : 4);
    assertFits(kCache, (startPos + T) * rowBytes, 'attention kCache');
    assertFits(vCache, (startPos + T) * rowBytes, 'attention vCache');
    const items = T * numHeads;
    // The most keys any query sees: with a GPU position, as many as the cache holds.
    const lastRow = position ? Math.floor(Math.min(kCache.size, vCache.size) / rowBytes) : startPos + T;
    const keys = Math.min(lastRow, slidingWindow ?? Infinity);
    const isCpu = this.kernels.isCpuDevice;
    const entry = this.kernels.attentionPlanOverride ?? attentionPlan(items, keys, headDim, isCpu);
    const heads = entry === 'per_thread' ? this.kernels.attentionHeadsOverride ?? attentionHeadsPerThread(numHeads / numKvHeads, headDim, isCpu) : 1;
    const queries =
      entry === 'per_thread' ? this.kernels.attentionQueriesOverride ?? attentionQueriesPerThread(T, heads, headDim, isCpu) : 1;
    const threads = Math.ceil(T / queries) * (numHeads / heads);
    const workgroup = attentionThreadsPerWorkgroup(isCpu);
    this.dispatch(
      this.kernels.attentionPipeline({
        entry,
        headDim,
        kvDType,
        position: position ? 'buffer' : 'uniform',
        heads,
        queries,
        threads: entry === 'per_thread' ? workgroup : undefined,
      }),
      [T, startPos, numHeads, numKvHeads, headDim, f32(1 / Math.sqrt(headDim)), slidingWindow ?? 0],
      withPosition({ 1: out, 2: q, 3: kCache, 4: vCache }, position),
      entry === 'per_thread' ? Math.ceil(threads / workgroup) : items,
    );
  }

  /**
   * Writes rows startRow .. startRow + T - 1 of the caches kCache and vCache from the f32 rows k and
   * v [T, rowElems]. 'f16' caches (the default) hold two halves a u32 word, rounded to nearest
   * even (rowElems must be even); 'f32' caches the floats as they are. With `position` (a u32 on
   * the GPU, see PositionSource) the rows start at startRow plus that value; the caches are then
   * only checked to hold startRow + T rows.
   */
  writeKv(
    kCache: GPUBuffer,
    vCache: GPUBuffer,
    k: GPUBuffer,
    v: GPUBuffer,
    T: number,
    startRow: number,
    rowElems: number,
    options: { kvDType?: KvDType; position?: GPUBuffer } = {},
  ): void {
    const kvDType = options.kvDType ?? 'f16';
    assertCount(T, 'writeKv T', 0);
    assertCount(startRow, 'writeKv startRow', 0);
    assertCount(rowElems, 'writeKv rowElems');
    if (kvDType === 'f16' && rowElems % 2 !== 0) throw new Error(`writeKv: an f16 KV cache row must be even, got ${rowElems} elements`);
    if (T === 0) return;
    assertDistinct(kCache, [vCache, k, v], 'writeKv');
    assertDistinct(vCache, [k, v], 'writeKv');
    assertFits(k, T * rowElems * 4, 'writeKv k');
    assertFits(v, T * rowElems * 4, 'writeKv v');
    const elemBytes = kvDType === 'f16' ? 2 : 4;
    assertFits(kCache, (startRow + T) * rowElems * elemBytes, 'writeKv kCache');
    assertFits(vCache, (startRow + T) * rowElems * elemBytes, 'writeKv vCache');
    // f16: one thread per word (two halves); f32: one per float.
    const rowLen = kvDType === 'f16' ? rowElems / 2 : rowElems;
    const n = T * rowLen;
    const source = options.position ? 'buffer' : 'uniform';
    const buffers: Record<number, GPUBuffer> =
      kvDType === 'f16' ? { 1: k, 2: v, 3: kCache, 4: vCache } : { 1: k, 2: v, 5: kCache, 6: vCache };
    this.dispatch(
      this.kernels.positionalPipeline(kvDType === 'f16' ? 'write_kv' : 'write_kv_f32', source),
      [n, startRow, rowLen],
      withPosition(buffers, options.position),
      Math.ceil(n / ELEMENTWISE_WORKGROUP),
    );
  }

  /**
   * Decode (one token) projection through matrices stacked by rows, with RMSNorm and the residual
   * add folded in (fused_matvec.wgsl): y = [W_0·x' + b_0; W_1·x' + b_1; ...] where x' = x, or
   * rmsnorm(x)·γ with `norm`; with `accumulate`, y += that instead (x += W·a). Every matrix has
   * x's length of columns. Split matrices (GpuMatrix.parts) and their biases are stacked as row
   * ranges; one dispatch takes as many as the device's storage-buffer bindings (and 8) allow.
   * y must not be x (or a weight or bias).
   */
  fusedMatvec(
    y: GPUBuffer,
    x: GPUBuffer,
    matrices: { W: GpuMatrix; bias?: GPUBuffer }[],
    options: { norm?: { gamma: GPUBuffer; eps: number }; accumulate?: boolean } = {},
  ): void {
    if (matrices.length === 0) throw new Error('fusedMatvec needs at least one matrix');
    const cols = matrices[0].W.cols;
    const segments: FusedSegment[] = [];
    let outRow = 0;
    for (const [i, { W, bias }] of matrices.entries()) {
      const what = `fusedMatvec W[${i}]`;
      assertCount(W.rows, `${what}.rows`);
      if (W.cols !== cols) throw new Error(`${what} has ${W.cols} columns, the others ${cols}`);
      checkWeightShape(W.dtype, W.rows, W.cols, what);
      if (bias) assertFits(bias, W.rows * 4, `${what} bias`);
      for (const part of checkParts(W, what)) {
        segments.push({ buffer: part.buffer, dtype: W.dtype, rows: part.rows, outRow: outRow + part.firstRow, biasRow: part.firstRow, bias });
      }
      outRow += W.rows;
    }
    assertFits(y, outRow * 4, 'fusedMatvec y');
    this.recordFused(options.accumulate ? 'accumulate' : 'store', y, x, cols, segments, options.norm);
  }

  /**
   * Decode (one token) feed-forward input: out = silu(x'·W_gateᵀ) * (x'·W_upᵀ), x' = x or
   * rmsnorm(x)·γ with `norm`, in one dispatch (fused_matvec.wgsl MODE_SWIGLU). A split W_gate or
   * W_up (GpuMatrix.parts) takes the two projections into `scratch` and swiglu() instead.
   */
  fusedSwiglu(
    out: GPUBuffer,
    x: GPUBuffer,
    wGate: GpuMatrix,
    wUp: GpuMatrix,
    options: { norm?: { gamma: GPUBuffer; eps: number }; scratch?: { gate: GPUBuffer; up: GPUBuffer } } = {},
  ): void {
    if (wGate.rows !== wUp.rows || wGate.cols !== wUp.cols) {
      throw new Error(`fusedSwiglu: W_gate [${wGate.rows}, ${wGate.cols}] and W_up [${wUp.rows}, ${wUp.cols}] differ`);
    }
    if (wGate.parts || wUp.parts) {
      const scratch = options.scratch;
      if (!scratch) throw new Error('fusedSwiglu: a split W_gate or W_up needs scratch buffers');
      this.fusedMatvec(scratch.gate, x, [{ W: wGate }], { norm: options.norm });
      this.fusedMatvec(scratch.up, x, [{ W: wUp }], { norm: options.norm });
      this.swiglu(out, scratch.gate, scratch.up, wGate.rows);
      return;
    }
    for (const [W, what] of [[wGate, 'W_gate'], [wUp, 'W_up']] as const) {
      assertCount(W.rows, `fusedSwiglu ${what}.rows`);
      checkWeightShape(W.dtype, W.rows, W.cols, `fusedSwiglu ${what}`);
      checkParts(W, `fusedSwiglu ${what}`);
    }
    assertFits(out, wGate.rows * 4, 'fusedSwiglu out');
    const segment = (W: GpuMatrix): FusedSegment => ({ buffer: W.buffer, dtype: W.dtype, rows: W.rows, outRow: 0, biasRow: 0 });
    this.recordFused('swiglu', out, x, wGate.cols, [segment(wGate), segment(wUp)], options.norm);
  }

  private recordFused(
    mode: FusedMatvecMode,
    y: GPUBuffer,
    x: GPUBuffer,
    cols: number,
    segments: FusedSegment[],
    norm: { gamma: GPUBuffer; eps: number } | undefined,
  ): void {
    assertFits(x, cols * 4, 'fused matvec x');
    if (norm) assertFits(norm.gamma, cols * 4, 'fused matvec gamma');
    assertDistinct(y, [x, norm?.gamma, ...segments.flatMap((g) => [g.buffer, g.bias])], 'fused matvec');
    const aligned = cols % 4 === 0;
    const plan = this.kernels.matvecPlan(cols);
    // Storage buffers one dispatch may bind: y, x, gamma, then a weight (and bias) per segment.
    const budget = this.kernels.ctx.limits.maxStorageBuffersPerShaderStage - (norm ? 3 : 2);
    const groups: FusedSegment[][] = [];
    if (mode === 'swiglu') {
      if (budget < 2) throw new Error('fused matvec: the device binds too few storage buffers');
      groups.push(segments);
    } else {
      let group: FusedSegment[] = [];
      let used = 0;
      for (const g of segments) {
        const cost = g.bias ? 2 : 1;
        if (cost > budget) throw new Error('fused matvec: the device binds too few storage buffers');
        if (group.length === FUSED_MAX_SEGMENTS || used + cost > budget) {
          groups.push(group);
          group = [];
          used = 0;
        }
        group.push(g);
        used += cost;
      }
      groups.push(group);
    }
    const preferred = this.kernels.fusedShapeOverride ?? fusedShape(this.kernels.isCpuDevice);
    // A workgroup holds whole teams (the workgroup reduction's teams can be the whole workgroup).
    const shape = { ...preferred, workgroup: Math.max(preferred.workgroup, plan.team) };
    for (const group of groups) {
      const seg: number[] = [];
      let blocks = 0;
      for (const [s, g] of group.entries()) {
        seg.push(blocks, g.rows, g.outRow, g.biasRow);
        // swiglu: the grid covers W_gate's blocks only (each thread computes W_up's same rows).
        if (mode !== 'swiglu' || s === 0) blocks += Math.ceil(g.rows / (4 * shape.quads));
      }
      // Unused slots (and W_up in swiglu mode) start past every block: no thread picks them.
      if (mode === 'swiglu') seg[4] = 0xffffffff;
      while (seg.length < 4 * FUSED_MAX_SEGMENTS) seg.push(0xffffffff, 1, 0, 0);
      const variant: FusedVariant = {
        mode,
        norm: !!norm,
        aligned,
        plan,
        shape,
        segments: group.map((g) => ({ dtype: g.dtype, hasBias: !!g.bias, runs: this.kernels.usesWeightRuns(g.dtype) })),
      };
      const buffers: Record<number, GPUBuffer> = { 1: y, 2: x };
      if (norm) buffers[FUSED_GAMMA_BINDING] = norm.gamma;
      group.forEach((g, s) => {
        buffers[fusedWeightBinding(s)] = g.buffer;
        if (g.bias) buffers[fusedBiasBinding(s)] = g.bias;
      });
      this.dispatch(
        this.kernels.fusedMatvecPipeline(variant),
        [cols, blocks, f32(norm?.eps ?? 0), 0, ...seg],
        buffers,
        Math.ceil((blocks * plan.team) / shape.workgroup),
      );
    }
  }

  /**
   * Decode (one token) attention straight from a fused Q/K/V projection qkv = [q | k | v], with
   * RoPE and the K/V append folded in (decode_attention.wgsl): q and k rotated to the position
   * (startPos plus the u32 in `position`, see PositionSource), the token's (rope(k), v) written to
   * its cache row, and out [numHeads, headDim] = attention over the cache rows up to it. With
   * `split` (chunks = ceil(cache rows / chunkKeys) > 1) the keys are split over the sequence and
   * combined in a second dispatch (attention.wgsl split_combine); partials holds
   * numHeads * chunks * (headDim + 2) floats. The grids depend on the cache size, not the position.
   */
  decodeAttention(
    out: GPUBuffer,
    qkv: GPUBuffer,
    kCache: GPUBuffer,
    vCache: GPUBuffer,
    startPos: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    rope: { invFreq: GPUBuffer; pairing: RopePairing },
    slidingWindow: number | undefined,
    kvDType: KvDType,
    split?: { chunkKeys: number; partials: GPUBuffer },
    position?: GPUBuffer,
  ): void {
    assertCount(startPos, 'decodeAttention startPos', 0);
    assertCount(numHeads, 'decodeAttention numHeads');
    assertCount(numKvHeads, 'decodeAttention numKvHeads');
    assertCount(headDim, 'decodeAttention headDim');
    if (numHeads % numKvHeads !== 0) {
      throw new Error(`attention numHeads (${numHeads}) must be a multiple of numKvHeads (${numKvHeads})`);
    }
    if (headDim % 2 !== 0) throw new Error(`decodeAttention headDim must be even (RoPE pairs), got ${headDim}`);
    if (headDim > ATTENTION_MAX_HEAD_DIM) throw new Error(`attention headDim ${headDim} exceeds the supported ${ATTENTION_MAX_HEAD_DIM}`);
    if (rope.pairing !== 'adjacent' && rope.pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(rope.pairing)}`);
    if (slidingWindow !== undefined) assertCount(slidingWindow, 'attention slidingWindow');
    const qDim = numHeads * headDim;
    const kvDim = numKvHeads * headDim;
    assertDistinct(out, [qkv, kCache, vCache, rope.invFreq, split?.partials], 'decodeAttention');
    assertDistinct(kCache, [vCache, qkv], 'decodeAttention');
    assertFits(out, qDim * 4, 'decodeAttention out');
    assertFits(qkv, (qDim + 2 * kvDim) * 4, 'decodeAttention qkv');
    assertFits(rope.invFreq, (headDim / 2) * 4, 'decodeAttention invFreq');
    const rowBytes = kvDim * (kvDType === 'f16' ? 2 : 4);
    assertFits(kCache, (startPos + 1) * rowBytes, 'decodeAttention kCache');
    assertFits(vCache, (startPos + 1) * rowBytes, 'decodeAttention vCache');
    const rows = Math.floor(Math.min(kCache.size, vCache.size) / rowBytes);
    const chunkKeys = split ? split.chunkKeys : rows;
    assertCount(chunkKeys, 'decodeAttention chunkKeys');
    const chunks = Math.ceil(rows / chunkKeys);
    if (chunks > 1 && !split) throw new Error('decodeAttention: several chunks need a partials buffer');
    if (split) assertFits(split.partials, numHeads * chunks * (headDim + 2) * 4, 'decodeAttention partials');
    const scale = f32(1 / Math.sqrt(headDim));
    const window = slidingWindow ?? 0;
    const source = position ? 'buffer' : 'uniform';
    const isCpu = this.kernels.isCpuDevice;
    const threads = isCpu ? DECODE_ATTENTION_THREADS_CPU : DECODE_ATTENTION_THREADS_GPU;
    const heads = this.kernels.attentionHeadsOverride ?? attentionHeadsPerThread(numHeads / numKvHeads, headDim, isCpu);
    const buffers: Record<number, GPUBuffer> = { 1: out, 2: qkv, 3: kCache, 4: vCache, 6: rope.invFreq };
    if (chunks > 1 && split) buffers[5] = split.partials;
    this.dispatch(
      this.kernels.decodeAttentionPipeline({ headDim, kvDType, position: source, split: chunks > 1, threads, heads }),
      [startPos, numHeads, numKvHeads, headDim, scale, window, chunkKeys, chunks, rope.pairing === 'adjacent' ? 0 : 1],
      withPosition(buffers, position),
      Math.ceil(((numHeads / heads) * chunks) / threads),
    );
    if (chunks > 1 && split) {
      this.dispatch(
        this.kernels.attentionPipeline({ entry: 'split_combine', headDim, kvDType, position: source }),
        [1, startPos, numHeads, numKvHeads, headDim, scale, window, chunkKeys, chunks],
        withPosition({ 1: out, 5: split.partials }, position),
        Math.ceil((numHeads * headDim) / ATTENTION_ITEMS_PER_WORKGROUP),
      );
    }
  }

  /**
   * Decode layers first .. first + count - 1 (one token) in one dispatch (decode_layer.wgsl): with
   * x, qkv, a, h, the position, RoPE's frequencies, γ_out and the layers' norms and biases in
   * `state` as decodeLayerLayout(dims) lays them out, x += attention and feed-forward of each layer
   * in turn, the token's K/V appended to its caches at the position. The matrices (Wq, Wk, Wv, Wo,
   * W_gate, W_up, W_down: DECODE_LAYER_MATRICES) are one layer's, whole (see decodeLayerFits), each
   * bound on its own; or every layer's in an f32 arena, which also lets the dispatch start with x =
   * E[tokens[0]] (`embedFrom`) and end with the logits (`logits`) when the arena holds those
   * matrices, and then write their argmax to `greedyTo` (u32 at byte 0) and its record to the state
   * (decodeLayerLayout's records; embedFrom and greedyTo, when both are given, are one buffer).
   * The last layer's dispatch leaves the next position in the state.
   */
  decodeLayers(
    state: GPUBuffer,
    weights: { matrices: readonly GpuMatrix[] } | { arena: DecodeArena; embedFrom?: GPUBuffer; logits?: GPUBuffer; greedyTo?: GPUBuffer },
    first: number,
    count: number,
    dims: DecodeLayerDims,
    caches: { keys: readonly GPUBuffer[]; values: readonly GPUBuffer[] },
    attention: { numHeads: number; numKvHeads: number; pairing: RopePairing; slidingWindow: number | undefined; kvDType: KvDType },
    eps: number,
    hasBias: boolean,
  ): void {
    const { numHeads, numKvHeads, pairing, slidingWindow, kvDType } = attention;
    const maxStorage = this.kernels.ctx.limits.maxStorageBuffersPerShaderStage;
    assertCount(first, 'decodeLayers first', 0);
    assertCount(count, 'decodeLayers count');
    if (first + count > dims.numLayers) throw new Error(`decodeLayers: layers ${first} .. ${first + count - 1} of ${dims.numLayers}`);
    if (numHeads * dims.headDim !== dims.qDim || numKvHeads * dims.headDim !== dims.kvDim || numHeads % numKvHeads !== 0) {
      throw new Error(`decodeLayers: ${numHeads} heads on ${numKvHeads} KV heads of ${dims.headDim} do not make q ${dims.qDim}, kv ${dims.kvDim}`);
    }
    if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
    if (slidingWindow !== undefined) assertCount(slidingWindow, 'decodeLayers slidingWindow');
    if (!decodeLayerSizesFit(dims)) throw new Error('decodeLayers: these sizes do not fit decode_layer.wgsl (see decodeLayerFits)');
    const shapes: [number, number][] = [
      [dims.qDim, dims.dim], [dims.kvDim, dims.dim], [dims.kvDim, dims.dim], [dims.dim, dims.qDim],
      [dims.ffn, dims.dim], [dims.ffn, dims.dim], [dims.dim, dims.ffn],
    ];
    const layout = decodeLayerLayout(dims);
    assertFits(state, layout.floats * 4, 'decodeLayers state');
    const buffers: Record<number, GPUBuffer> = { 1: state };
    const rowBytes = dims.kvDim * (kvDType === 'f16' ? 2 : 4);
    let rows = Infinity;
    for (let s = 0; s < count; s++) {
      const [k, v] = [caches.keys[first + s], caches.values[first + s]];
      if (!k || !v) throw new Error(`decodeLayers: no KV cache for layer ${first + s}`);
      assertDistinct(k, [v, state], 'decodeLayers');
      assertDistinct(v, [state], 'decodeLayers');
      rows = Math.min(rows, Math.floor(Math.min(k.size, v.size) / rowBytes));
      buffers[DECODE_LAYER_CACHE_BINDING + 2 * s] = k;
      buffers[DECODE_LAYER_CACHE_BINDING + 2 * s + 1] = v;
    }
    assertCount(rows, 'decodeLayers cache rows');
    // Per slot: its constants in the state and its matrices' first elements in the arena.
    const slots: number[] = [];
    let variantWeights: DecodeLayerVariant['matrices'];
    let embed = false;
    let logitsRows = 0;
    let greedy = false;
    const io = [0, 0, 0]; // emb, emb_rows, lm
    if ('matrices' in weights) {
      const { matrices } = weights;
      if (count !== 1) throw new Error('decodeLayers: a binding per matrix takes one layer a dispatch');
      if (!decodeLayerFits(dims, matrices, maxStorage)) {
        throw new Error('decodeLayers: these sizes or matrices do not fit decode_layer.wgsl (see decodeLayerFits)');
      }
      matrices.forEach((W, i) => {
        const [r, c] = shapes[i];
        const what = `decodeLayers W_${DECODE_LAYER_MATRICES[i]}`;
        if (W.rows !== r || W.cols !== c) throw new Error(`${what} is [${W.rows}, ${W.cols}], expected [${r}, ${c}]`);
        checkWeightShape(W.dtype, W.rows, W.cols, what);
        buffers[DECODE_LAYER_WEIGHT_BINDING + i] = W.buffer;
      });
      assertDistinct(state, matrices.map((m) => m.buffer), 'decodeLayers');
      variantWeights = matrices.map((m) => ({ dtype: m.dtype, runs: this.kernels.usesWeightRuns(m.dtype) }));
      slots.push(layout.consts + first * layout.constsStride, 0, 0, 0, 0, 0, 0, 0);
    } else {
      const { arena, embedFrom, logits, greedyTo } = weights;
      if (embedFrom && greedyTo && embedFrom !== greedyTo) throw new Error('decodeLayers: embedFrom and greedyTo must be one buffer (one binding)');
      const tokens = embedFrom ?? greedyTo;
      if (count > DECODE_LAYER_MAX_SLOTS) throw new Error(`decodeLayers: at most ${DECODE_LAYER_MAX_SLOTS} layers a dispatch, got ${count}`);
      const floats = arena.buffer.size / 4;
      const inArena = (offset: number, elements: number, what: string) => {
        if (!Number.isInteger(offset) || offset < 0 || offset % 4 !== 0 || offset + elements > floats) {
          throw new Error(`decodeLayers: ${what} at element ${offset} (${elements} elements) is not in the arena of ${floats}`);
        }
      };
      for (let s = 0; s < count; s++) {
        const offsets = arena.layers[first + s];
        if (!offsets || offsets.length !== DECODE_LAYER_MATRICES.length) throw new Error(`decodeLayers: the arena has no matrices for layer ${first + s}`);
        offsets.forEach((o, i) => inArena(o, shapes[i][0] * shapes[i][1], `layer ${first + s} W_${DECODE_LAYER_MATRICES[i]}`));
        slots.push(layout.consts + (first + s) * layout.constsStride, ...offsets);
      }
      buffers[DECODE_LAYER_ARENA_BINDING] = arena.buffer;
      assertDistinct(state, [arena.buffer], 'decodeLayers');
      if (tokens) {
        assertFits(tokens, 4, 'decodeLayers tokens');
        buffers[DECODE_LAYER_TOKENS_BINDING] = tokens;
      }
      if (embedFrom) {
        if (!arena.embedding) throw new Error('decodeLayers: the arena holds no token embedding');
        assertCount(arena.embedding.rows, 'decodeLayers embedding rows');
        inArena(arena.embedding.offset, arena.embedding.rows * dims.dim, 'the token embedding');
        embed = true;
        io[0] = arena.embedding.offset;
        io[1] = arena.embedding.rows;
      }
      if (logits) {
        if (!arena.lmHead) throw new Error('decodeLayers: the arena holds no W_lm_head');
        assertCount(arena.lmHead.rows, 'decodeLayers lm_head rows');
        inArena(arena.lmHead.offset, arena.lmHead.rows * dims.dim, 'W_lm_head');
        assertFits(logits, arena.lmHead.rows * 4, 'decodeLayers logits');
        assertDistinct(logits, [state, arena.buffer, tokens], 'decodeLayers');
        buffers[DECODE_LAYER_LOGITS_BINDING] = logits;
        logitsRows = arena.lmHead.rows;
        io[2] = arena.lmHead.offset;
      }
      if (greedyTo) {
        if (!logits) throw new Error('decodeLayers: a greedy pick needs the logits');
        if (first + count !== dims.numLayers) throw new Error('decodeLayers: only the last layer\'s dispatch picks the next token');
        greedy = true;
      }
      const bound = Object.keys(buffers).length;
      if (bound > maxStorage) throw new Error(`decodeLayers: ${bound} storage buffers, the device binds ${maxStorage} (see decodeLayerGroups)`);
    }
    const heads = this.kernels.attentionHeadsOverride ?? attentionHeadsPerThread(numHeads / numKvHeads, dims.headDim, this.kernels.isCpuDevice);
    const variant: DecodeLayerVariant = {
      dims,
      heads,
      kvDType,
      matrices: variantWeights,
      hasBias,
      workgroup: this.kernels.decodeLayerWorkgroupOverride ?? DECODE_LAYER_WORKGROUP,
      quads: DECODE_LAYER_QUADS,
      slots: count,
      embed,
      logitsRows,
      greedy,
    };
    const scale = f32(1 / Math.sqrt(dims.headDim));
    const advance = first + count === dims.numLayers ? 1 : 0;
    this.dispatch(
      this.kernels.decodeLayerPipeline(variant),
      [0, numHeads, numKvHeads, dims.headDim, scale, slidingWindow ?? 0, rows, 1, pairing === 'adjacent' ? 0 : 1, f32(eps), advance, io[0], io[1], io[2], 0, 0, ...slots],
      buffers,
      1,
    );
  }

  /** out[i] = silu(gate[i]) * up[i] for i < n. out must not be gate or up. */
  swiglu(out: GPUBuffer, gate: GPUBuffer, up: GPUBuffer, n: number): void {
    assertCount(n, 'swiglu n', 0);
    if (n === 0) return;
    assertDistinct(out, [gate, up], 'swiglu');
    for (const [b, what] of [[out, 'out'], [gate, 'gate'], [up, 'up']] as const) assertFits(b, n * 4, `swiglu ${what}`);
    this.dispatch(this.kernels.fixedPipeline('swiglu'), [n], { 1: out, 2: gate, 3: up }, Math.ceil(n / ELEMENTWISE_WORKGROUP));
  }

  /** out[i] = a[i] + b[i] for i < n. out may be a or b (in-place residual add), not both. */
  add(out: GPUBuffer, a: GPUBuffer, b: GPUBuffer, n: number): void {
    assertCount(n, 'add n', 0);
    if (n === 0) return;
    for (const [buf, what] of [[out, 'out'], [a, 'a'], [b, 'b']] as const) assertFits(buf, n * 4, `add ${what}`);
    const workgroups = Math.ceil(n / ELEMENTWISE_WORKGROUP);
    if (out !== a && out !== b) {
      this.dispatch(this.kernels.fixedPipeline('add'), [n], { 1: out, 2: a, 3: b }, workgroups);
      return;
    }
    if (a === b) throw new Error("add: out, a and b are one buffer (x += x); use a separate output buffer");
    // In place: the output is bound once, read_write, as the accumulator (addition commutes).
    const other = out === a ? b : a;
    this.dispatch(this.kernels.fixedPipeline('add_in_place'), [n], { 4: out, 3: other }, workgroups);
  }

  /** Records encoder.copyBufferToBuffer (offsets and size multiples of 4), in order with the dispatches. */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void {
    if (srcOffset % 4 || dstOffset % 4 || byteSize % 4) {
      throw new Error(`copy offsets and size must be multiples of 4 (got ${srcOffset}, ${dstOffset}, ${byteSize})`);
    }
    if (byteSize === 0) return;
    assertFits(src, srcOffset + byteSize, 'copy src');
    assertFits(dst, dstOffset + byteSize, 'copy dst');
    this.assertWritable();
    this.recordCopy(src, srcOffset, dst, dstOffset, byteSize);
  }

  /** Records one dispatch of `pipeline` with `params` in its uniform (binding 0) and `buffers` bound. */
  protected dispatch(
    pipeline: GPUComputePipeline,
    params: UniformValue[],
    buffers: Record<number, GPUBuffer>,
    workgroups: number | [number, number],
  ): void {
    this.assertWritable();
    const bindGroup = this.bindGroup(pipeline, this.uniforms.alloc(params), buffers, this.label);
    const [x, y] = typeof workgroups === 'number' ? this.kernels.grid(workgroups) : workgroups;
    this.recordDispatch(pipeline, bindGroup, x, y);
  }

  /** Throws when nothing more may be recorded (submitted, sealed). */
  protected abstract assertWritable(): void;

  protected abstract recordDispatch(pipeline: GPUComputePipeline, bindGroup: GPUBindGroup, x: number, y: number): void;

  protected abstract recordCopy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void;

  /** A bind group of `pipeline`: the uniform slot at binding 0, then `buffers` by binding. */
  protected bindGroup(
    pipeline: GPUComputePipeline,
    slot: { buffer: GPUBuffer; offset: number; size: number },
    buffers: Record<number, GPUBuffer>,
    label?: string,
  ): GPUBindGroup {
    const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: slot }];
    for (const [binding, buffer] of Object.entries(buffers)) entries.push({ binding: Number(binding), resource: { buffer } });
    return this.kernels.ctx.device.createBindGroup({ label, layout: this.kernels.bindGroupLayout(pipeline), entries });
  }
}

/** Adds the position buffer at POSITION_BINDING when there is one. */
function withPosition(buffers: Record<number, GPUBuffer>, position: GPUBuffer | undefined): Record<number, GPUBuffer> {
  return position ? { ...buffers, [POSITION_BINDING]: position } : buffers;
}

/**
 * Dispatches recorded into one command encoder, submitted together. One batch at a time records
 * with the Kernels' shared parameter slots (Kernels.leaseBatchUniforms): a batch that repeats an
 * earlier one's dispatches (the same pipelines over the same buffers: a prefill after the first)
 * gets its bind groups from the Kernels' cache and creates nothing. A batch recorded while
 * another holds them gets slots of its own.
 */
export class KernelBatch extends KernelRecorder {
  private readonly device: GPUDevice;
  private readonly rawEncoder: GPUCommandEncoder;
  /** The compute pass the dispatches go into, kept open between consecutive dispatches. */
  private pass: GPUComputePassEncoder | undefined;
  private done = false;
  private sharedUniforms = false;

  constructor(kernels: Kernels) {
    super(kernels);
    this.device = kernels.ctx.device;
    this.rawEncoder = this.device.createCommandEncoder({ label: 'kernel batch' });
  }

  // Taken at the first dispatch, so that a batch whose first call fails its checks holds nothing.
  protected override get uniforms(): UniformArena {
    if (!this.uniformSlots) {
      const shared = this.kernels.leaseBatchUniforms();
      this.sharedUniforms = shared !== undefined;
      this.uniformSlots = shared ?? new UniformArena(this.device);
    }
    return this.uniformSlots;
  }

  /** The command encoder, for recording other commands in order with the dispatches. */
  get encoder(): GPUCommandEncoder {
    this.endPass();
    return this.rawEncoder;
  }

  /** Writes the dispatch parameters, finishes the encoder and submits it. The batch is done after this. */
  submit(): void {
    this.assertWritable();
    this.endPass();
    this.uniformSlots?.upload();
    this.device.queue.submit([this.rawEncoder.finish()]);
    this.finish();
  }

  /** Ends the batch without submitting it (after a failed recording), freeing its parameter slots. No-op once submitted. */
  discard(): void {
    if (this.done) return;
    this.endPass();
    this.finish();
  }

  private finish(): void {
    if (this.sharedUniforms) this.kernels.releaseBatchUniforms();
    else this.uniformSlots?.destroy();
    this.done = true;
  }

  protected override bindGroup(
    pipeline: GPUComputePipeline,
    slot: { buffer: GPUBuffer; offset: number; size: number },
    buffers: Record<number, GPUBuffer>,
    label?: string,
  ): GPUBindGroup {
    // Only the shared slots repeat; a private arena's are new buffers every time.
    if (!this.sharedUniforms) return super.bindGroup(pipeline, slot, buffers, label);
    return this.kernels.cachedBindGroup(pipeline, slot, buffers, () => super.bindGroup(pipeline, slot, buffers, label));
  }

  protected recordCopy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void {
    this.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, byteSize);
  }

  protected recordDispatch(pipeline: GPUComputePipeline, bindGroup: GPUBindGroup, x: number, y: number): void {
    this.pass ??= this.rawEncoder.beginComputePass({ label: 'kernels' });
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, bindGroup);
    this.pass.dispatchWorkgroups(x, y);
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = undefined;
  }

  protected assertWritable(): void {
    if (this.done) throw new Error('this KernelBatch was already submitted; start another with kernels.begin()');
  }
}

type ProgramCommand =
  | { kind: 'dispatch'; pipeline: GPUComputePipeline; bindGroup: GPUBindGroup; x: number; y: number }
  | { kind: 'copy'; src: GPUBuffer; srcOffset: number; dst: GPUBuffer; dstOffset: number; byteSize: number };

/**
 * Dispatches recorded once and encoded many times: each dispatch's parameters get a uniform slot
 * and a bind group when it is recorded, and `encode` only sets pipelines and bind groups and
 * dispatches, creating nothing. Whatever varies between encodings must live in buffers the kernels
 * read (the position: PositionSource 'buffer'), written with queue.writeBuffer before each submit.
 */
export class KernelProgram extends KernelRecorder {
  private readonly commands: ProgramCommand[] = [];
  private sealed = false;

  /** Dispatches per encode. */
  get dispatchCount(): number {
    return this.commands.filter((c) => c.kind === 'dispatch').length;
  }

  /** Ends recording and queues the parameters (once); encode() seals the program if this was not called. */
  seal(): void {
    if (this.sealed) return;
    this.uniforms.upload();
    this.sealed = true;
  }

  /** Encodes every recorded command, in order, into `encoder` (one compute pass per run of dispatches). */
  encode(encoder: GPUCommandEncoder): void {
    this.seal();
    let pass: GPUComputePassEncoder | undefined;
    for (const c of this.commands) {
      if (c.kind === 'dispatch') {
        pass ??= encoder.beginComputePass({ label: this.label });
        pass.setPipeline(c.pipeline);
        pass.setBindGroup(0, c.bindGroup);
        pass.dispatchWorkgroups(c.x, c.y);
      } else {
        pass?.end();
        pass = undefined;
        encoder.copyBufferToBuffer(c.src, c.srcOffset, c.dst, c.dstOffset, c.byteSize);
      }
    }
    pass?.end();
  }

  /** Whether encodeInPass may take the program: it recorded dispatches only, no copies. */
  get dispatchesOnly(): boolean {
    return this.commands.every((c) => c.kind === 'dispatch');
  }

  /** Encodes the recorded dispatches into an open compute pass (a program of dispatches only). */
  encodeInPass(pass: GPUComputePassEncoder): void {
    if (!this.dispatchesOnly) throw new Error(`program ${this.label} records copies: use encode()`);
    this.seal();
    for (const c of this.commands) {
      if (c.kind !== 'dispatch') continue;
      pass.setPipeline(c.pipeline);
      pass.setBindGroup(0, c.bindGroup);
      pass.dispatchWorkgroups(c.x, c.y);
    }
  }

  /** Frees the parameter buffers (legal once the last submit that used the program is queued). */
  destroy(): void {
    this.uniforms.destroy();
  }

  protected recordCopy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void {
    this.commands.push({ kind: 'copy', src, srcOffset, dst, dstOffset, byteSize });
  }

  protected recordDispatch(pipeline: GPUComputePipeline, bindGroup: GPUBindGroup, x: number, y: number): void {
    this.commands.push({ kind: 'dispatch', pipeline, bindGroup, x, y });
  }

  protected assertWritable(): void {
    if (this.sealed) throw new Error('this KernelProgram is sealed; record into a new one');
  }
}
