// KernelBatch: dispatches encoded at once into one command encoder and submitted together.
import { KernelRecorder } from './recorder.ts';
import type { KernelRegistry } from './registry.ts';
import { UniformArena } from '../uniforms.ts';

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

  constructor(kernels: KernelRegistry, options: { prefill?: boolean } = {}) {
    super(kernels, undefined, options.prefill ?? false);
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
