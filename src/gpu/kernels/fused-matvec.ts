// The decode projections of fused_matvec.wgsl: several matrices (or parts) stacked by rows in
// one dispatch, with RMSNorm, the residual add or SwiGLU folded in. block_dot is shared with the
// decode layer kernel.
import type { GpuContext } from '../device.ts';
import type { WeightDType } from '../tensor.ts';
import type { ShaderSpec } from '../pipelines.ts';
import { weightFormatWgsl, weightRunLength } from '../weight-formats.ts';
import type { FusedShape, KernelTuning, MatvecPlan } from './tuning.ts';
import { activationWgsl, reduceTeamWgsl } from './weights.ts';
import { assertDistinct, assertFits } from './checks.ts';
import { paramStruct, type PlannedDispatch } from '../uniforms.ts';
import { renameWgsl, takeWgslFunctions, unrollConstLoops } from './wgsl.ts';
import { gatedActivationWgsl, type GatedActivation } from './elementwise.ts';
import { batchRowsWgsl } from './batch-rows.ts';
import fusedMatvecWgsl from '../../../shaders/fused_matvec.wgsl?raw';
import fusedMatvecBatchWgsl from '../../../shaders/fused_matvec_batch.wgsl?raw';

// ---- fused decode projections (fused_matvec.wgsl) ---------------------------------------------

/** fused_matvec.wgsl's modes (its MODE_* constants). */
export type FusedMatvecMode = 'store' | 'accumulate' | 'swiglu';
export const FUSED_MODES: Record<FusedMatvecMode, number> = { store: 0, accumulate: 1, swiglu: 2 };
/** fused_matvec.wgsl MAX_SEGMENTS: row ranges one dispatch stacks. */
export const FUSED_MAX_SEGMENTS = 8;
export const FUSED_GAMMA_BINDING = 5;
export const fusedWeightBinding = (s: number) => 10 + 2 * s;
export const fusedBiasBinding = (s: number) => 11 + 2 * s;
/** The batched variant's rows buffer (batch-rows.ts). */
export const FUSED_BATCH_ROWS_BINDING = 3;

/**
 * A fused matvec over the rows of a batched decode step (fused_matvec_batch.wgsl): the row count
 * from `rows` (batch-rows.ts), row b's x at element b * xStride and y at b * yStride, up to maxRows.
 */
export interface FusedBatch {
  rows: GPUBuffer;
  xStride: number;
  yStride: number;
  maxRows: number;
}

/** One row range a fused dispatch computes: a matrix or one part of a split one. */
export interface FusedSegment {
  buffer: GPUBuffer;
  dtype: WeightDType;
  rows: number;
  /** First row of y it writes. */
  outRow: number;
  /** Its first row within the matrix (the bias index). */
  biasRow: number;
  bias?: GPUBuffer;
}

export type FusedVariant = {
  mode: FusedMatvecMode;
  norm: boolean;
  aligned: boolean;
  plan: MatvecPlan;
  shape: FusedShape;
  /** Per segment: its weights' storage, bias, and whether block_dot walks K by dot_run runs (Kernels.usesWeightRuns). */
  segments: { dtype: WeightDType; hasBias: boolean; runs: boolean }[];
  /** swiglu mode: the gate's activation (default silu). */
  activation?: GatedActivation;
  /** The batched variant's row strides of x and y, in floats (FusedBatch); undefined: one row. */
  batch?: { x: number; y: number };
};

export const fusedKey = (v: FusedVariant) =>
  `fused_matvec/${v.mode}/${v.norm ? 'norm' : 'plain'}/${v.aligned ? 'vec4' : 'scalar'}/team${v.plan.team}-${v.plan.reduction}/` +
  `q${v.shape.quads}w${v.shape.workgroup}/` +
  v.segments.map((g) => `${g.dtype}${g.hasBias ? '+bias' : ''}${g.runs ? '+runs' : ''}`).join(',') +
  (v.mode === 'swiglu' && v.activation === 'gelu_tanh' ? '/gelu_tanh' : '') +
  (v.batch ? `/batch_x${v.batch.x}_y${v.batch.y}` : '');

/** The batched variant's x: activationWgsl's loads at the row's x_base (a multiple of 4 when aligned). */
function batchActivationWgsl(aligned: boolean): string {
  return aligned
    ? `@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;\n` +
        `fn load_x(i: u32) -> f32 { return x[(x_base + i) >> 2u][i & 3u]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { return x[(x_base + i) >> 2u]; }\n`
    : `@group(0) @binding(2) var<storage, read> x: array<f32>;\n` +
        `fn load_x(i: u32) -> f32 { return x[x_base + i]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { let j = x_base + i; return vec4<f32>(x[j], x[j + 1u], x[j + 2u], x[j + 3u]); }\n`;
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
export function blockDotWgsl(
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

/** Where fused_matvec.wgsl's main starts a row's work (its sums of x², dot products and writes). */
const ROW_START = '  var acc: array<vec4<f32>, QUADS>;\n';
/** Where its emit finds the output row. */
const EMIT_ROW = 'let o = info.z + r;';
/** Its entry point's attribute, left behind when main is taken out. */
const ENTRY = '@compute @workgroup_size(WORKGROUP_SIZE)\n';

/**
 * fused_matvec.wgsl with its main's per-row part in a loop over the batch's rows (each at x_base
 * and y_base, fused_matvec_batch.wgsl) and emit writing at y_base: the same code as one row's, so
 * that a row's sums in a batch are the one-row kernel's.
 */
function batchFusedMatvecWgsl(): string {
  const { rest: withEmit, taken: main } = takeWgslFunctions(fusedMatvecWgsl, ['main']);
  const { rest, taken: emit } = takeWgslFunctions(withEmit, ['emit']);
  const at = main.indexOf(ROW_START);
  const end = main.lastIndexOf('}');
  if (at < 0 || !emit.includes(EMIT_ROW) || !rest.includes(ENTRY)) {
    throw new Error("fused_matvec.wgsl: its main or emit no longer reads as fusedMatvecSpec's batch expects");
  }
  const rowLoop = '  let rows = batch_count();\n  for (var b = 0u; b < rows; b++) {\n    x_base = b * X_STRIDE;\n    y_base = b * Y_STRIDE;\n';
  return (
    rest.replace(ENTRY, '') +
    emit.replace(EMIT_ROW, 'let o = y_base + info.z + r;') +
    `${ENTRY}${main.slice(0, at)}${rowLoop}${main.slice(at, end)}  }\n}\n`
  );
}

export function fusedMatvecSpec(v: FusedVariant): ShaderSpec {
  const reduce = reduceTeamWgsl(v.plan);
  let code = `${reduce.directives}const MODE: u32 = ${FUSED_MODES[v.mode]}u;\nconst NORM: bool = ${v.norm};\n`;
  code += `const QUADS: u32 = ${v.shape.quads}u;\nconst WORKGROUP_SIZE: u32 = ${v.shape.workgroup}u;\n`;
  code += `const SEGMENTS: u32 = ${v.segments.length}u;\n${reduce.code}${v.batch ? batchActivationWgsl(v.aligned) : activationWgsl(v.aligned)}`;
  code += gatedActivationWgsl(v.activation ?? 'silu');
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
  if (v.batch) {
    code += `const X_STRIDE: u32 = ${v.batch.x}u;\nconst Y_STRIDE: u32 = ${v.batch.y}u;\n${batchRowsWgsl(FUSED_BATCH_ROWS_BINDING)}`;
    return { code: unrollConstLoops(`${code}\n${fusedMatvecBatchWgsl}\n${batchFusedMatvecWgsl()}`, unroll), entryPoint: 'main' };
  }
  return { code: unrollConstLoops(`${code}\n${fusedMatvecWgsl}`, unroll), entryPoint: 'main' };
}

/** fused_matvec.wgsl's Params: seg holds MAX_SEGMENTS vec4s (first block, rows, first output row, first bias row). */
export const FUSED_MATVEC_PARAMS = paramStruct({ cols: 'u32', total_blocks: 'u32', eps: 'f32', seg: 'u32[]' });

/** What planFusedMatvec reads of the device's kernels (KernelRegistry has it). */
export interface FusedMatvecKernels {
  readonly ctx: GpuContext;
  readonly tuning: KernelTuning;
  matvecPlan(cols: number): MatvecPlan;
  usesWeightRuns(dtype: WeightDType): boolean;
  fusedMatvecPipeline(variant: FusedVariant): GPUComputePipeline;
}

/**
 * The dispatches of a fused matvec over `segments` (row ranges of y, each a matrix or a part): as
 * many segments a dispatch as the device's storage bindings (and MAX_SEGMENTS) allow.
 */
export function planFusedMatvec(
  kernels: FusedMatvecKernels,
  mode: FusedMatvecMode,
  y: GPUBuffer,
  x: GPUBuffer,
  cols: number,
  segments: FusedSegment[],
  norm: { gamma: GPUBuffer; eps: number } | undefined,
  /** swiglu mode: the gate's activation. */
  activation: GatedActivation = 'silu',
  /** The rows of a batched decode step (fused_matvec_batch.wgsl); undefined: one row. */
  batch?: FusedBatch,
): PlannedDispatch[] {
  if (batch) {
    if (!(Number.isInteger(batch.maxRows) && batch.maxRows >= 1)) throw new Error(`fused matvec batch maxRows must be >= 1, got ${batch.maxRows}`);
    if (batch.xStride < cols || (cols % 4 === 0 && batch.xStride % 4 !== 0)) throw new Error(`fused matvec batch xStride ${batch.xStride} does not fit rows of ${cols}`);
    assertFits(x, ((batch.maxRows - 1) * batch.xStride + cols) * 4, 'fused matvec x');
    assertDistinct(batch.rows, [y, x], 'fused matvec batch rows');
  }
  assertFits(x, cols * 4, 'fused matvec x');
  if (norm) assertFits(norm.gamma, cols * 4, 'fused matvec gamma');
  assertDistinct(y, [x, norm?.gamma, ...segments.flatMap((g) => [g.buffer, g.bias])], 'fused matvec');
  const aligned = cols % 4 === 0;
  const plan = kernels.matvecPlan(cols);
  // Storage buffers one dispatch may bind: y, x, gamma, then a weight (and bias) per segment.
  const budget = kernels.ctx.limits.maxStorageBuffersPerShaderStage - (norm ? 3 : 2) - (batch ? 1 : 0);
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
  const preferred = kernels.tuning.fusedShape;
  // A workgroup holds whole teams (the workgroup reduction's teams can be the whole workgroup).
  const shape = { ...preferred, workgroup: Math.max(preferred.workgroup, plan.team) };
  const dispatches: PlannedDispatch[] = [];
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
      segments: group.map((g) => ({ dtype: g.dtype, hasBias: !!g.bias, runs: kernels.usesWeightRuns(g.dtype) })),
      activation: mode === 'swiglu' ? activation : undefined,
      ...(batch ? { batch: { x: batch.xStride, y: batch.yStride } } : {}),
    };
    const buffers: Record<number, GPUBuffer> = { 1: y, 2: x };
    if (batch) buffers[FUSED_BATCH_ROWS_BINDING] = batch.rows;
    if (norm) buffers[FUSED_GAMMA_BINDING] = norm.gamma;
    group.forEach((g, s) => {
      buffers[fusedWeightBinding(s)] = g.buffer;
      if (g.bias) buffers[fusedBiasBinding(s)] = g.bias;
    });
    dispatches.push({
      pipeline: kernels.fusedMatvecPipeline(variant),
      params: FUSED_MATVEC_PARAMS.pack({ cols, total_blocks: blocks, eps: norm?.eps ?? 0, seg }),
      buffers,
      workgroups: Math.ceil((blocks * plan.team) / shape.workgroup),
    });
  }
  return dispatches;
}
