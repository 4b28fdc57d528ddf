// KernelProgram: dispatches recorded once (parameters, bind groups) and encoded many times.
import { KernelRecorder } from './recorder.ts';

export type ProgramCommand =
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
