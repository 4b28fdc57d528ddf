// The compiled kernels of one device (Kernels): pipelines by kernel and variant, the device's
// choices, the bind groups and parameter slots that batches share.
import { isCpuAdapter, type GpuContext } from '../device.ts';
import type { GpuMatrix, WeightDType } from '../tensor.ts';
import { PipelineCache } from '../pipelines.ts';
import { isQuantized, weightRunLength } from '../weight-formats.ts';
import { attentionKey, attentionSpec, decodeAttentionKey, decodeAttentionSpec, type AttentionVariant, type DecodeAttentionVariant } from './attention.ts';
import { KernelBatch } from './batch.ts';
import { decodeLayerFits, decodeLayerKey, decodeLayerSpec, type DecodeLayerDims, type DecodeLayerVariant } from './decode-layer.ts';
import {
  FIXED_KERNELS,
  POSITIONAL_KERNELS,
  positionalKey,
  positionalSpec,
  rmsNormKey,
  rmsNormSpec,
  type FixedKernel,
  type PositionalKernel,
  type RmsNormVariant,
} from './elementwise.ts';
import { fusedKey, fusedMatvecSpec, type FusedVariant } from './fused-matvec.ts';
import { KernelProgram } from './program.ts';
import { DECODE_CHUNK_KEYS_CPU, DECODE_CHUNK_KEYS_GPU, DECODE_LAYER_MAX_WEIGHTS, matmulShape, matvecPlan, type FusedShape, type MatmulShape, type MatvecPlan } from './tuning.ts';
import { UniformArena } from './uniforms.ts';
import { weightKernelKey, weightKernelSpec, type WeightKernel, type WeightVariant } from './weights.ts';
import type { PositionSource } from './wgsl.ts';

/**
 * Bind groups the Kernels keep for batches (KernelBatch): a prefill makes about 12 a layer, so this
 * holds a few prefill shapes of a large model.
 */
export const MAX_CACHED_BIND_GROUPS = 2048;


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
