// What the recorders read of a device's compiled kernels (KernelRegistry): pipelines by kernel and
// variant, the device's choices, the bind groups and parameter slots that batches share. Kernels
// (kernels.ts) adds compiling up front and the two ways to record.
import { isCpuAdapter, type GpuContext } from '../device.ts';
import type { GpuMatrix, WeightDType } from '../tensor.ts';
import type { PipelineCache } from '../pipelines.ts';
import { isQuantized, weightRunLength } from '../weight-formats.ts';
import {
  attentionKey,
  attentionSpec,
  decodeAttentionKey,
  decodeAttentionSpec,
  type AttentionVariant,
  type DecodeAttentionVariant,
} from './attention.ts';
import { batchDecodeAttentionKey, batchDecodeAttentionSpec, type BatchDecodeAttentionVariant } from './attention-batch.ts';
import { decodeLayerFits, decodeLayerKey, decodeLayerSpec, type DecodeLayerVariant } from './decode-layer.ts';
import type { DecodeLayerDims } from './decode-layer-layout.ts';
import {
  FIXED_KERNELS,
  POSITIONAL_KERNELS,
  PACKED_ROPE_KEY,
  packedRopeSpec,
  positionalKey,
  positionalSpec,
  rmsNormKey,
  rmsNormSpec,
  type FixedKernel,
  type PositionalKernel,
  type RmsNormVariant,
} from './elementwise.ts';
import { fusedKey, fusedMatvecSpec, type FusedVariant } from './fused-matvec.ts';
import { kernelTuning, matmulShape, type DeviceTraits, type KernelTuning, type MatmulShape, type MatvecPlan } from './tuning.ts';
import { UniformArena } from '../uniforms.ts';
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
  /** Replaces the device's choices (tests, measurements): see KernelTuning. */
  tuning?: Partial<KernelTuning>;
}

/** The pipelines, choices and shared caches of one device; Kernels (kernels.ts) records with them. */
export class KernelRegistry {
  private readonly bindGroupLayouts = new Map<GPUComputePipeline, GPUBindGroupLayout>();

  /** The device's traits the tuning was computed from. */
  readonly device: DeviceTraits;
  /** The device's choices (workgroups, entry points, splits), with the options' overrides. */
  readonly tuning: KernelTuning;

  protected constructor(
    readonly ctx: GpuContext,
    /** Compiled pipelines by kernel and variant. */
    readonly pipelines: PipelineCache,
    /** Grid dimensions are capped at this many workgroups; larger dispatches fold into 2-D. */
    readonly maxWorkgroupsPerDimension: number,
    tuning: Partial<KernelTuning> = {},
  ) {
    this.device = { isCpu: isCpuAdapter(ctx.adapter), subgroupMinSize: ctx.features.subgroups ? subgroupMinSize(ctx.device) : 0 };
    this.tuning = kernelTuning(this.device, tuning);
  }

  /**
   * Compiles the pipelines every model uses up front (createComputePipelineAsync), so WGSL errors
   * surface with the compiler's messages. Weight-format variants not listed in
   * options.weightDTypes, and the bias variants, compile on first use.
   */
  protected async compileCommon(options: KernelsOptions): Promise<void> {
    const kernels = this;
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

  /** @internal The pipeline of a fixed kernel. */
  fixedPipeline(name: FixedKernel): GPUComputePipeline {
    return this.pipelines.get(name, () => FIXED_KERNELS[name]);
  }

  /** @internal The pipeline of a position-dependent kernel for one position source. */
  positionalPipeline(name: PositionalKernel, source: PositionSource, ring?: number): GPUComputePipeline {
    return this.pipelines.get(positionalKey(name, source, ring), () => positionalSpec(name, source, ring));
  }

  /** @internal rope.wgsl for a packed pass (TokenSpan.segments; compiled on first use). */
  packedRopePipeline(): GPUComputePipeline {
    return this.pipelines.get(PACKED_ROPE_KEY, packedRopeSpec);
  }

  /** @internal A decode_attention.wgsl pipeline (compiled on first use). */
  decodeAttentionPipeline(variant: DecodeAttentionVariant): GPUComputePipeline {
    return this.pipelines.get(decodeAttentionKey(variant), () => decodeAttentionSpec(variant));
  }

  /** @internal A decode_attention_batch.wgsl pipeline (compiled on first use). */
  batchDecodeAttentionPipeline(variant: BatchDecodeAttentionVariant): GPUComputePipeline {
    return this.pipelines.get(batchDecodeAttentionKey(variant), () => batchDecodeAttentionSpec(variant));
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
   */
  decodeAttentionChunkKeys(): number {
    return this.tuning.decodeChunkKeys;
  }

  /**
   * Whether the matrix-vector kernels walk `dtype`'s rows a run at a time (dot_run, see
   * weight-formats.ts): where the tuning says so (CPU adapters), for types whose runs are longer
   * than a vec4. Measurements: docs/tuning.md#weight-runs
   */
  usesWeightRuns(dtype: WeightDType): boolean {
    return this.tuning.weightRuns && weightRunLength(dtype) > 4;
  }

  /**
   * Whether a decode step runs each layer as one dispatch (decode_layer.wgsl) rather than five:
   * where the kernel can take the layer (decodeLayerFits) and the tuning wants it for its weights.
   * Measurements: docs/tuning.md#decode-layer
   */
  usesDecodeLayer(dims: DecodeLayerDims, matrices: readonly GpuMatrix[]): boolean {
    if (!decodeLayerFits(dims, matrices, this.ctx.limits.maxStorageBuffersPerShaderStage)) return false;
    return this.tuning.decodeLayer(matrices.reduce((n, m) => n + m.rows * m.cols, 0));
  }

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
    return this.device.isCpu;
  }

  /** @internal The pipeline of a weight-reading kernel for one storage type (compiled on first use). */
  weightPipeline(kernel: WeightKernel, dtype: WeightDType, variant: WeightVariant): GPUComputePipeline {
    return this.pipelines.get(weightKernelKey(kernel, dtype, variant), () => weightKernelSpec(kernel, dtype, variant));
  }

  /** @internal The prefill matmul's shape on this device for T tokens; a tiled shape needs aligned columns. */
  matmulShape(T = Infinity, aligned = true, dtype: WeightDType = 'f32'): MatmulShape {
    const shape = this.tuning.matmulShape(T, aligned, dtype);
    return shape.tiled && !aligned ? matmulShape(false, T, false) : shape;
  }

  /** @internal The matvec split for rows of `cols` weights on this device. */
  matvecPlan(cols: number): MatvecPlan {
    return this.tuning.matvecPlan(cols);
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

/** The smallest subgroup size the adapter reports; 4, the least WebGPU allows, when it does not say. */
function subgroupMinSize(device: GPUDevice): number {
  const size = (device as GPUDevice & { adapterInfo?: { subgroupMinSize?: number } }).adapterInfo?.subgroupMinSize;
  return typeof size === 'number' && size >= 4 ? size : 4;
}
