// The compiled kernels of one device (Kernels): the registry's pipelines and caches, compiled up
// front, and the two ways to record work with them: begin() (a KernelBatch, submitted once) and
// program() (a KernelProgram, encoded every decode step).
import type { GpuContext } from '../device.ts';
import { PipelineCache } from '../pipelines.ts';
import { KernelBatch } from './batch.ts';
import { KernelProgram } from './program.ts';
import { KernelRegistry, type KernelsOptions } from './registry.ts';

/** The compiled kernels of one device. Record work with begin() or program(). */
export class Kernels extends KernelRegistry {
  /**
   * Compiles the pipelines up front, so WGSL errors surface here with the compiler's messages
   * (see KernelRegistry.compileCommon).
   */
  static async create(ctx: GpuContext, options: KernelsOptions = {}): Promise<Kernels> {
    const deviceMax = ctx.device.limits.maxComputeWorkgroupsPerDimension;
    const kernels = new Kernels(
      ctx,
      new PipelineCache(ctx.device, { async: options.asyncCompile }),
      Math.min(deviceMax, options.maxWorkgroupsPerDimension ?? deviceMax),
      options.tuning,
    );
    await kernels.compileCommon(options);
    return kernels;
  }

  /** Starts recording dispatches into one command encoder; `prefill`: see KernelRecorder's. */
  begin(options: { prefill?: boolean } = {}): KernelBatch {
    return new KernelBatch(this, options);
  }

  /**
   * Starts recording a KernelProgram: dispatches whose parameters and bind groups are made once
   * and that are then encoded into any number of command encoders (the reusable decode step).
   */
  program(label = 'kernel program'): KernelProgram {
    return new KernelProgram(this, label);
  }
}
