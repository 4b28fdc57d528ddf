// The weight-reading kernels: embedding.wgsl, matmul.wgsl (+ matmul_tiled.wgsl) and matvec.wgsl,
// each composed with the `load_weight` snippet of its weight's storage type (weight-formats.ts)
// and, for matmul and matvec, `load_x`, `load_bias` and `store_y` (plus matvec's team reduction).
import type { GpuMatrix, WeightDType } from '../tensor.ts';
import type { ShaderSpec } from '../pipelines.ts';
import { weightFormatWgsl, weightRunLength } from '../weight-formats.ts';
import { matmulShape, MATVEC_WORKGROUP, type MatmulShape, type MatvecPlan } from './tuning.ts';
import { paramStruct } from '../uniforms.ts';
import { renameWgsl, unrollConstLoops } from './wgsl.ts';
import { gatedActivationWgsl, type GatedActivation } from './elementwise.ts';
import embeddingWgsl from '../../../shaders/embedding.wgsl?raw';
import matmulWgsl from '../../../shaders/matmul.wgsl?raw';
import matvecWgsl from '../../../shaders/matvec.wgsl?raw';
import matmulTiledWgsl from '../../../shaders/matmul_tiled.wgsl?raw';
import matmulOutputWgsl from '../../../shaders/matmul_output.wgsl?raw';

// Bindings where the composed snippets put the weight matrix and the bias (see the shaders).
export const WEIGHT_BINDING = 3;
/** matmul.wgsl's second matrix (SWIGLU: W_up; PAIR: W2). */
export const WEIGHT_UP_BINDING = 6;
/** matmul.wgsl's PAIR variant: y2 and b2. */
export const PAIR_OUTPUT_BINDING = 7;
export const PAIR_BIAS_BINDING = 8;
export const BIAS_BINDING = 4;
export type WeightKernel = 'embedding' | 'matmul' | 'matvec';
/** One projection of a pair (KernelRecorder.matmulPair): y = x·Wᵀ (+ bias). */
export interface Projection {
  y: GPUBuffer;
  W: GpuMatrix;
  bias?: GPUBuffer;
}
export const WEIGHT_KERNEL_SOURCES: Record<WeightKernel, string> = {
  embedding: embeddingWgsl,
  matmul: matmulWgsl,
  matvec: matvecWgsl,
};
/** `fn load_bias(r: u32) -> f32`: reads the bias binding, or is 0 for layers without bias. */
export function biasWgsl(hasBias: boolean): string {
  return hasBias
    ? `@group(0) @binding(${BIAS_BINDING}) var<storage, read> bias: array<f32>;\n` +
        `fn load_bias(r: u32) -> f32 { return bias[r]; }\n`
    : `fn load_bias(r: u32) -> f32 { return 0.0; }\n`;
}

/**
 * `load_x(i)` / `load_x4(i)` over the activations at binding 2. Aligned (every row of x starts at a
 * multiple of 4 floats and load_x4 is only called at multiples of 4): x is read as vec4s.
 */
export function activationWgsl(aligned: boolean): string {
  return aligned
    ? `@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;\n` +
        `fn load_x(i: u32) -> f32 { return x[i >> 2u][i & 3u]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { return x[i >> 2u]; }\n`
    : `@group(0) @binding(2) var<storage, read> x: array<f32>;\n` +
        `fn load_x(i: u32) -> f32 { return x[i]; }\n` +
        `fn load_x4(i: u32) -> vec4<f32> { return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]); }\n`;
}

/** `fn reduce_team(v, lid)` for matvec.wgsl (see there), and any directive it needs. */
export function reduceTeamWgsl(plan: MatvecPlan): { directives: string; code: string } {
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
export interface WeightVariant {
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
  /** matmul with swiglu: the gate's activation (default silu). */
  activation?: GatedActivation;
  /** matmul: also y2 = x·W2ᵀ (+ b2), W2 of the same dtype and shape at WEIGHT_UP_BINDING (matmulPair). */
  pair?: boolean;
  /** matvec: walk K a run (dot_run) at a time (Kernels.usesWeightRuns). */
  runs?: boolean;
}

export function weightKernelKey(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): string {
  if (kernel === 'embedding') return `${kernel}/${dtype}`;
  let key = `${kernel}/${dtype}/${v.hasBias ? 'bias' : 'nobias'}/${v.aligned ? 'vec4' : 'scalar'}${v.accumulate ? '/acc' : ''}${v.swiglu ? '/swiglu' : ''}${v.pair ? '/pair' : ''}`;
  if (v.matmul) key += `/w${v.matmul.wx}x${v.matmul.wy}t${v.matmul.tokens}r${v.matmul.rowQuads ?? 1}${v.matmul.tiled ? '/tiled' : ''}`;
  if (v.runs) key += '/runs';
  if (v.swiglu && v.activation === 'gelu_tanh') key += '/gelu_tanh';
  return v.plan ? `${key}/team${v.plan.team}-${v.plan.reduction}` : key;
}

export function weightKernelSpec(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): ShaderSpec {
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
    snippets += gatedActivationWgsl(v.activation ?? 'silu');
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

/** embedding.wgsl's Params. */
export const EMBEDDING_PARAMS = paramStruct({ T: 'u32', cols: 'u32', vocab: 'u32', first_row: 'u32', part_rows: 'u32', scale: 'f32' });
/** matmul_output.wgsl's Params (matmul.wgsl and matmul_tiled.wgsl). */
export const MATMUL_PARAMS = paramStruct({ T: 'u32', rows: 'u32', cols: 'u32', row_offset: 'u32', y_stride: 'u32' });
/** matvec.wgsl's Params. */
export const MATVEC_PARAMS = paramStruct({ rows: 'u32', cols: 'u32', row_offset: 'u32' });
