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
// matvec, a `load_bias` snippet composed in front of them. Per-dispatch parameters go into one
// uniform buffer per batch, one 256-byte slot per dispatch (the offset alignment WebGPU
// guarantees), written once in submit(). Browser-safe: no Node imports here.
import type { GpuContext } from './device.ts';
import type { GpuMatrix, WeightDType } from './tensor.ts';
import type { RopePairing } from '../model/config.ts';
import { PipelineCache, type ShaderSpec } from './pipelines.ts';
import { weightByteSize, weightFormatWgsl } from './weight-formats.ts';
import embeddingWgsl from '../../shaders/embedding.wgsl?raw';
import rmsnormWgsl from '../../shaders/rmsnorm.wgsl?raw';
import matmulWgsl from '../../shaders/matmul.wgsl?raw';
import matvecWgsl from '../../shaders/matvec.wgsl?raw';
import ropeWgsl from '../../shaders/rope.wgsl?raw';
import attentionWgsl from '../../shaders/attention.wgsl?raw';
import swigluWgsl from '../../shaders/swiglu.wgsl?raw';
import residualWgsl from '../../shaders/residual.wgsl?raw';

/** Largest head dimension the attention kernel handles (its workgroup-memory query vector). */
export const ATTENTION_MAX_HEAD_DIM = 256;

// Workgroup shapes; each must match its shader's constants.
const ELEMENTWISE_WORKGROUP = 256; // embedding, rope, swiglu, residual: one invocation per element
const MATMUL_TILE = 16; // matmul.wgsl TILE: a 16x16 workgroup per 16x16 output tile

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
  rmsnorm: { code: rmsnormWgsl, entryPoint: 'main' },
  rope: { code: ropeWgsl, entryPoint: 'main' },
  attention: { code: attentionWgsl, entryPoint: 'main' },
  swiglu: { code: swigluWgsl, entryPoint: 'main' },
  add: { code: residualWgsl, entryPoint: 'add' },
  add_in_place: { code: residualWgsl, entryPoint: 'add_in_place' },
} satisfies Record<string, ShaderSpec>;
type FixedKernel = keyof typeof FIXED_KERNELS;

/** `fn load_bias(r: u32) -> f32`: reads the bias binding, or is 0 for layers without bias. */
function biasWgsl(hasBias: boolean): string {
  return hasBias
    ? `@group(0) @binding(${BIAS_BINDING}) var<storage, read> bias: array<f32>;\n` +
        `fn load_bias(r: u32) -> f32 { return bias[r]; }\n`
    : `fn load_bias(r: u32) -> f32 { return 0.0; }\n`;
}

/** matvec.wgsl's workgroup size: 64 / TEAM rows per workgroup. */
const MATVEC_WORKGROUP = 64;

/**
 * Threads that share one matvec row: about one per 16 weights of the row, a power of two up to
 * the workgroup. Short rows get one thread each (no reduction, no barriers), long rows a team.
 */
export function matvecTeam(cols: number): number {
  let team = 1;
  while (team < MATVEC_WORKGROUP && team * 16 < cols) team *= 2;
  return team;
}

function weightKernelKey(kernel: WeightKernel, dtype: WeightDType, hasBias: boolean, team = 0): string {
  if (kernel === 'embedding') return `${kernel}/${dtype}`;
  const key = `${kernel}/${dtype}/${hasBias ? 'bias' : 'nobias'}`;
  return kernel === 'matvec' ? `${key}/team${team}` : key;
}

function weightKernelSpec(kernel: WeightKernel, dtype: WeightDType, hasBias: boolean, team = 0): ShaderSpec {
  let snippets = weightFormatWgsl(dtype, WEIGHT_BINDING) + (kernel === 'embedding' ? '' : biasWgsl(hasBias));
  if (kernel === 'matvec') snippets += `const TEAM: u32 = ${team}u;\n`;
  return { code: `${snippets}\n${WEIGHT_KERNEL_SOURCES[kernel]}`, entryPoint: 'main' };
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
    for (const dtype of options.weightDTypes ?? []) {
      for (const kernel of ['embedding', 'matmul'] as const) {
        compiling.push(
          kernels.pipelines.prepare(weightKernelKey(kernel, dtype, false), () => weightKernelSpec(kernel, dtype, false)),
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

  /** @internal The pipeline of a weight-reading kernel for one storage type (compiled on first use). */
  weightPipeline(kernel: WeightKernel, dtype: WeightDType, hasBias: boolean, team = 0): GPUComputePipeline {
    return this.pipelines.get(weightKernelKey(kernel, dtype, hasBias, team), () => weightKernelSpec(kernel, dtype, hasBias, team));
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

  /** out[t, :] = E[tokens[t], :] (f32 [T, table.cols]). Token ids past the table give zero rows. */
  embedding(out: GPUBuffer, table: GpuMatrix, tokens: GPUBuffer, T: number): void {
    assertCount(T, 'embedding T', 0);
    if (T === 0) return;
    assertFits(out, T * table.cols * 4, 'embedding out');
    assertFits(tokens, T * 4, 'embedding tokens');
    assertFits(table.buffer, weightByteSize(table.dtype, table.rows * table.cols), 'embedding table');
    const n = T * table.cols;
    this.dispatch(
      this.kernels.weightPipeline('embedding', table.dtype, false),
      [T, table.cols, table.rows],
      { 1: out, 2: tokens, [WEIGHT_BINDING]: table.buffer },
      Math.ceil(n / ELEMENTWISE_WORKGROUP),
    );
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
    this.dispatch(this.kernels.fixedPipeline('rmsnorm'), [T, dim, f32(eps)], { 1: out, 2: x, 3: gamma }, T);
  }

  /**
   * y[T, W.rows] = x[T, W.cols]·Wᵀ (+ bias). One token goes to matvec.wgsl (a workgroup per output
   * row), more to the tiled matmul.wgsl. y must not be x.
   */
  matmul(y: GPUBuffer, x: GPUBuffer, W: GpuMatrix, T: number, bias?: GPUBuffer): void {
    assertCount(T, 'matmul T', 0);
    assertCount(W.rows, 'matmul W.rows');
    assertCount(W.cols, 'matmul W.cols');
    if (T === 0) return;
    assertDistinct(y, [x, W.buffer, bias], 'matmul');
    assertFits(y, T * W.rows * 4, 'matmul y');
    assertFits(x, T * W.cols * 4, 'matmul x');
    assertFits(W.buffer, weightByteSize(W.dtype, W.rows * W.cols), 'matmul W');
    if (bias) assertFits(bias, W.rows * 4, 'matmul bias');
    const buffers: Record<number, GPUBuffer> = { 1: y, 2: x, [WEIGHT_BINDING]: W.buffer };
    if (bias) buffers[BIAS_BINDING] = bias;

    if (T === 1) {
      const team = matvecTeam(W.cols);
      const workgroups = Math.ceil((W.rows * team) / MATVEC_WORKGROUP);
      this.dispatch(this.kernels.weightPipeline('matvec', W.dtype, !!bias, team), [W.rows, W.cols], buffers, workgroups);
    } else {
      const tilesX = Math.ceil(W.rows / MATMUL_TILE);
      const tilesY = Math.ceil(T / MATMUL_TILE);
      const max = this.kernels.maxWorkgroupsPerDimension;
      if (tilesX > max || tilesY > max) throw new Error(`matmul of ${T} x ${W.rows} outputs exceeds the dispatch grid`);
      this.dispatch(this.kernels.weightPipeline('matmul', W.dtype, !!bias), [T, W.rows, W.cols], buffers, [tilesX, tilesY]);
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
   * Writes out [T, numHeads, headDim].
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
  ): void {
    assertCount(T, 'attention T', 0);
    assertCount(startPos, 'attention startPos', 0);
    assertCount(numHeads, 'attention numHeads');
    assertCount(numKvHeads, 'attention numKvHeads');
    assertCount(headDim, 'attention headDim');
    if (numHeads % numKvHeads !== 0) {
      throw new Error(`attention numHeads (${numHeads}) must be a multiple of numKvHeads (${numKvHeads})`);
    }
    if (headDim > ATTENTION_MAX_HEAD_DIM) {
      throw new Error(`attention headDim ${headDim} exceeds the supported ${ATTENTION_MAX_HEAD_DIM}`);
    }
    if (T === 0) return;
    assertDistinct(out, [q, kCache, vCache], 'attention');
    assertFits(out, T * numHeads * headDim * 4, 'attention out');
    assertFits(q, T * numHeads * headDim * 4, 'attention q');
    const cacheBytes = (startPos + T) * numKvHeads * headDim * 4;
    assertFits(kCache, cacheBytes, 'attention kCache');
    assertFits(vCache, cacheBytes, 'attention vCache');
    this.dispatch(
      this.kernels.fixedPipeline('attention'),
      [T, startPos, numHeads, numKvHeads, headDim, f32(1 / Math.sqrt(headDim))],
      { 1: out, 2: q, 3: kCache, 4: vCache },
      T * numHeads,
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
