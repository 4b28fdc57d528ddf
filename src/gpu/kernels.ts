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
import type { GpuContext } from './device.ts';
import { matrixParts, type GpuMatrix, type GpuMatrixPart, type WeightDType } from './tensor.ts';
import type { RopePairing } from '../model/config.ts';
import { PipelineCache, type ShaderSpec } from './pipelines.ts';
import { checkWeightShape, isQuantized, weightByteSize, weightFormatWgsl } from './weight-formats.ts';
import embeddingWgsl from '../../shaders/embedding.wgsl?raw';
import rmsnormWgsl from '../../shaders/rmsnorm.wgsl?raw';
import matmulWgsl from '../../shaders/matmul.wgsl?raw';
import matvecWgsl from '../../shaders/matvec.wgsl?raw';
import ropeWgsl from '../../shaders/rope.wgsl?raw';
import attentionWgsl from '../../shaders/attention.wgsl?raw';
import swigluWgsl from '../../shaders/swiglu.wgsl?raw';
import residualWgsl from '../../shaders/residual.wgsl?raw';
import kvCacheWgsl from '../../shaders/kv_cache.wgsl?raw';

/** Element type of a KV cache: 'f16' packs two halves a u32 word (no shader-f16 needed). */
export type KvDType = 'f16' | 'f32';

/** Largest head dimension the attention kernels handle (per_workgroup's workgroup-memory query vector). */
export const ATTENTION_MAX_HEAD_DIM = 256;

// Workgroup shapes; each must match its shader's constants.
const ELEMENTWISE_WORKGROUP = 256; // embedding, rope, swiglu, residual: one invocation per element
// matmul.wgsl: a 16x4 workgroup of threads that each compute 4 rows x 4 tokens.
const MATMUL_WORKGROUP_ROWS = 64;
const MATMUL_WORKGROUP_TOKENS = 16;

// Bindings where the composed snippets put the weight matrix and the bias (see the shaders).
const WEIGHT_BINDING = 3;
const BIAS_BINDING = 4;

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
  rope: { code: ropeWgsl, entryPoint: 'main' },
  swiglu: { code: swigluWgsl, entryPoint: 'main' },
  add: { code: residualWgsl, entryPoint: 'add' },
  add_in_place: { code: residualWgsl, entryPoint: 'add_in_place' },
  write_kv: { code: kvCacheWgsl, entryPoint: 'write_kv' },
} satisfies Record<string, ShaderSpec>;
type FixedKernel = keyof typeof FIXED_KERNELS;

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
}

function weightKernelKey(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): string {
  if (kernel === 'embedding') return `${kernel}/${dtype}`;
  const key = `${kernel}/${dtype}/${v.hasBias ? 'bias' : 'nobias'}/${v.aligned ? 'vec4' : 'scalar'}`;
  return v.plan ? `${key}/team${v.plan.team}-${v.plan.reduction}` : key;
}

function weightKernelSpec(kernel: WeightKernel, dtype: WeightDType, v: WeightVariant): ShaderSpec {
  if (kernel === 'embedding') {
    return { code: `${weightFormatWgsl(dtype, WEIGHT_BINDING)}\n${WEIGHT_KERNEL_SOURCES[kernel]}`, entryPoint: 'main' };
  }
  let directives = '';
  let snippets = weightFormatWgsl(dtype, WEIGHT_BINDING, 0, v.aligned) + activationWgsl(v.aligned) + biasWgsl(v.hasBias);
  if (kernel === 'matvec') {
    const reduce = reduceTeamWgsl(v.plan ?? { team: 1, reduction: 'none' });
    directives = reduce.directives;
    snippets += reduce.code;
  }
  return { code: `${directives}${snippets}\n${WEIGHT_KERNEL_SOURCES[kernel]}`, entryPoint: 'main' };
}

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

/** attention.wgsl `per_thread`: (token, head) pairs (one thread each) per workgroup. */
const ATTENTION_ITEMS_PER_WORKGROUP = 64;

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

type AttentionVariant = { entry: 'per_thread' | 'per_workgroup'; headDim: number; kvDType: KvDType };
const attentionKey = (v: AttentionVariant) => `attention/${v.entry}/hd${v.headDim}/kv_${v.kvDType}`;
const attentionSpec = (v: AttentionVariant): ShaderSpec => ({
  code: `const HEAD_DIM: u32 = ${v.headDim}u;\n${attentionSliceWgsl(v.headDim % 4 === 0, v.kvDType)}\n${attentionWgsl}`,
  entryPoint: v.entry,
});

/**
 * attention.wgsl's element type of q and the caches: vec4s when the head dimension is a multiple
 * of 4 (every head starts at a multiple of 4 floats), else single floats.
 */
function attentionSliceWgsl(aligned: boolean, kvDType: KvDType): string {
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
  const loads = load1('load_q1', 'q') + cache;
  if (!aligned) {
    return `alias H = f32;\nconst WIDTH: u32 = 1u;\nfn hsum(v: H) -> f32 { return v; }\n${loads}fn store_out(i: u32, v: H) { out[i] = v; }\n`;
  }
  return (
    `alias H = vec4<f32>;\nconst WIDTH: u32 = 4u;\nfn hsum(v: H) -> f32 { return v.x + v.y + v.z + v.w; }\n${loads}` +
    `fn store_out(i: u32, v: H) { out[i] = v.x; out[i + 1u] = v.y; out[i + 2u] = v.z; out[i + 3u] = v.w; }\n`
  );
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
    for (const entry of ['per_row', 'per_workgroup'] as const) {
      for (const aligned of [true, false]) {
        const v = { entry, aligned };
        compiling.push(kernels.pipelines.prepare(rmsNormKey(v), () => rmsNormSpec(v)));
      }
    }
    for (const dtype of options.weightDTypes ?? []) {
      const variants: [WeightKernel, WeightVariant][] = [
        ['embedding', { hasBias: false, aligned: false }],
        ['matmul', { hasBias: false, aligned: true }],
      ];
      // Quantized rows are whole blocks (multiples of 32 weights): their matmuls are always aligned.
      if (!isQuantized(dtype)) variants.push(['matmul', { hasBias: false, aligned: false }]);
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

  /** @internal The pipeline of a fixed kernel. */
  fixedPipeline(name: FixedKernel): GPUComputePipeline {
    return this.pipelines.get(name, () => FIXED_KERNELS[name]);
  }

  /** @internal An rmsnorm.wgsl pipeline (compiled up front by create()). */
  rmsNormPipeline(variant: RmsNormVariant): GPUComputePipeline {
    return this.pipelines.get(rmsNormKey(variant), () => rmsNormSpec(variant));
  }

  /**
   * Compiles the attention pipelines of one head dimension and cache type ahead of use
   * (createComputePipelineAsync); otherwise the first attention() of them compiles them synchronously.
   */
  async prepareAttention(headDim: number, kvDType: KvDType = 'f16'): Promise<void> {
    const entries = this.isCpuDevice ? (['per_thread'] as const) : (['per_thread', 'per_workgroup'] as const);
    await Promise.all(
      entries.map((entry) => {
        const v = { entry, headDim, kvDType };
        return this.pipelines.prepare(attentionKey(v), () => attentionSpec(v));
      }),
    );
  }

  /** @internal An attention.wgsl pipeline for one head dimension (compiled on first use). */
  attentionPipeline(variant: AttentionVariant): GPUComputePipeline {
    return this.pipelines.get(attentionKey(variant), () => attentionSpec(variant));
  }

  /** Whether the device is a CPU implementation (SwiftShader, llvmpipe), where barriers are very slow. */
  get isCpuDevice(): boolean {
    if (this.cpuDevice === undefined) {
      const { vendor, architecture, description } = this.ctx.adapter;
      this.cpuDevice = /swiftshader|llvmpipe|lavapipe|\bcpu\b/i.test(`${vendor} ${architecture} ${description}`);
    }
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

  constructor(private readonly device: GPUDevice) {}

  /** Reserves a slot holding `values` (4 bytes each, in order); returns where it lives. */
  alloc(values: UniformValue[]): { buffer: GPUBuffer; offset: number; size: number } {
    let chunk = this.chunks[this.chunks.length - 1];
    if (!chunk || chunk.used === chunk.data.byteLength) {
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
    for (const c of this.chunks) this.device.queue.writeBuffer(c.buffer, 0, c.data, 0, c.used);
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

/** Dispatches recorded into one command encoder, submitted together. */
export class KernelBatch {
  private readonly device: GPUDevice;
  private readonly rawEncoder: GPUCommandEncoder;
  private readonly uniforms: UniformArena;
  /** The compute pass the dispatches go into, kept open between consecutive dispatches. */
  private pass: GPUComputePassEncoder | undefined;
  private submitted = false;

  constructor(private readonly kernels: Kernels) {
    this.device = kernels.ctx.device;
    this.rawEncoder = this.device.createCommandEncoder({ label: 'kernel batch' });
    this.uniforms = new UniformArena(this.device);
  }

  /** The command encoder, for recording other commands in order with the dispatches. */
  get encoder(): GPUCommandEncoder {
    this.endPass();
    return this.rawEncoder;
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
   * y[T, W.rows] = x[T, W.cols]·Wᵀ (+ bias). One token goes to matvec.wgsl (threads of 4 rows,
   * see matvecPlan), more to the register-blocked matmul.wgsl (threads of 4 rows x 4 tokens).
   * y must not be x.
   */
  matmul(y: GPUBuffer, x: GPUBuffer, W: GpuMatrix, T: number, bias?: GPUBuffer): void {
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
        const pipeline = this.kernels.weightPipeline('matvec', W.dtype, { hasBias: !!bias, aligned, plan });
        this.dispatch(pipeline, [part.rows, W.cols, part.firstRow], buffers, workgroups);
      } else {
        const groupsX = Math.ceil(part.rows / MATMUL_WORKGROUP_ROWS);
        const groupsY = Math.ceil(T / MATMUL_WORKGROUP_TOKENS);
        const max = this.kernels.maxWorkgroupsPerDimension;
        if (groupsX > max || groupsY > max) throw new Error(`matmul of ${T} x ${W.rows} outputs exceeds the dispatch grid`);
        const pipeline = this.kernels.weightPipeline('matmul', W.dtype, { hasBias: !!bias, aligned });
        this.dispatch(pipeline, [T, part.rows, W.cols, part.firstRow, W.rows], buffers, [groupsX, groupsY]);
      }
    }
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
      this.kernels.fixedPipeline('rope'),
      [T, numHeads, headDim, startPos, pairing === 'adjacent' ? 0 : 1],
      { 1: x, 2: invFreq },
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
    const cacheBytes = (startPos + T) * numKvHeads * headDim * (kvDType === 'f16' ? 2 : 4);
    assertFits(kCache, cacheBytes, 'attention kCache');
    assertFits(vCache, cacheBytes, 'attention vCache');
    const items = T * numHeads;
    const keys = Math.min(startPos + T, slidingWindow ?? Infinity); // the most any query sees
    const entry = this.kernels.attentionPlanOverride ?? attentionPlan(items, keys, headDim, this.kernels.isCpuDevice);
    this.dispatch(
      this.kernels.attentionPipeline({ entry, headDim, kvDType }),
      [T, startPos, numHeads, numKvHeads, headDim, f32(1 / Math.sqrt(headDim)), slidingWindow ?? 0],
      { 1: out, 2: q, 3: kCache, 4: vCache },
      entry === 'per_thread' ? Math.ceil(items / ATTENTION_ITEMS_PER_WORKGROUP) : items,
    );
  }

  /**
   * Writes rows startRow .. startRow + T - 1 of the f16 caches kCache and vCache (two halves a u32
   * word) from the f32 rows k and v [T, rowElems], rounded to nearest even. rowElems must be even.
   */
  writeKv(kCache: GPUBuffer, vCache: GPUBuffer, k: GPUBuffer, v: GPUBuffer, T: number, startRow: number, rowElems: number): void {
    assertCount(T, 'writeKv T', 0);
    assertCount(startRow, 'writeKv startRow', 0);
    assertCount(rowElems, 'writeKv rowElems');
    if (rowElems % 2 !== 0) throw new Error(`writeKv: an f16 KV cache row must be even, got ${rowElems} elements`);
    if (T === 0) return;
    assertDistinct(kCache, [vCache, k, v], 'writeKv');
    assertDistinct(vCache, [k, v], 'writeKv');
    assertFits(k, T * rowElems * 4, 'writeKv k');
    assertFits(v, T * rowElems * 4, 'writeKv v');
    assertFits(kCache, (startRow + T) * rowElems * 2, 'writeKv kCache');
    assertFits(vCache, (startRow + T) * rowElems * 2, 'writeKv vCache');
    const words = (T * rowElems) / 2;
    this.dispatch(
      this.kernels.fixedPipeline('write_kv'),
      [words, (startRow * rowElems) / 2],
      { 1: k, 2: v, 3: kCache, 4: vCache },
      Math.ceil(words / ELEMENTWISE_WORKGROUP),
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
    this.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, byteSize);
  }

  /** Writes the dispatch parameters, finishes the encoder and submits it. The batch is done after this. */
  submit(): void {
    this.assertOpen();
    this.endPass();
    this.uniforms.upload();
    this.device.queue.submit([this.rawEncoder.finish()]);
    this.uniforms.destroy();
    this.submitted = true;
  }

  private dispatch(
    pipeline: GPUComputePipeline,
    params: UniformValue[],
    buffers: Record<number, GPUBuffer>,
    workgroups: number | [number, number],
  ): void {
    this.assertOpen();
    const slot = this.uniforms.alloc(params);
    const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: slot }];
    for (const [binding, buffer] of Object.entries(buffers)) entries.push({ binding: Number(binding), resource: { buffer } });
    const bindGroup = this.device.createBindGroup({ layout: this.kernels.bindGroupLayout(pipeline), entries });
    const [x, y] = typeof workgroups === 'number' ? this.kernels.grid(workgroups) : workgroups;
    this.pass ??= this.rawEncoder.beginComputePass({ label: 'kernels' });
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, bindGroup);
    this.pass.dispatchWorkgroups(x, y);
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = undefined;
  }

  private assertOpen(): void {
    if (this.submitted) throw new Error('this KernelBatch was already submitted; start another with kernels.begin()');
  }
}
