// Device acquisition: read what the adapter offers, request only what our kernels can use.
// No kernel requires `shader-f16` (SwiftShader and many real GPUs lack it): f16 weights are
// packed two per u32 and unpacked to f32 in the shaders.
import { installGpuCounters } from './counters.ts';

export interface GpuFeatures {
  /** `shader-f16` is available (f16 arithmetic in WGSL); kernels never require it. */
  shaderF16: boolean;
  /** `subgroups` is available and was requested. */
  subgroups: boolean;
}

export interface GpuLimits {
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  maxComputeWorkgroupSizeX: number;
  maxComputeInvocationsPerWorkgroup: number;
  maxComputeWorkgroupStorageSize: number;
  maxComputeWorkgroupsPerDimension: number;
  maxStorageBuffersPerShaderStage: number;
  minStorageBufferOffsetAlignment: number;
  minUniformBufferOffsetAlignment: number;
}

/** The per-buffer limits a weight upload must respect (of a GpuContext's `limits`). */
export type BufferLimits = Pick<GpuLimits, 'maxStorageBufferBindingSize' | 'maxBufferSize'>;

/** The most bytes one storage buffer can hold and bind on a device with these limits. */
export const maxBufferBytes = (limits: BufferLimits) => Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);

export interface GpuAdapterDescription {
  vendor: string;
  architecture: string;
  description: string;
}

/**
 * Whether the adapter runs on the CPU (SwiftShader, llvmpipe, lavapipe): there every load and
 * every idle SIMD group costs, and kernels, workgroup sizes and the KV cache type are chosen for it.
 */
export function isCpuAdapter(adapter: GpuAdapterDescription): boolean {
  return /swiftshader|llvmpipe|lavapipe|\bcpu\b/i.test(`${adapter.vendor} ${adapter.architecture} ${adapter.description}`);
}

export interface GpuContext {
  device: GPUDevice;
  adapter: GpuAdapterDescription;
  features: GpuFeatures;
  limits: GpuLimits;
}

export interface AcquireDeviceOptions {
  powerPreference?: GPUPowerPreference;
}

const LIMIT_NAMES: (keyof GpuLimits)[] = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupSizeX',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupStorageSize',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
  'minStorageBufferOffsetAlignment',
  'minUniformBufferOffsetAlignment',
];

/**
 * A device shared by everything in a page or process, acquired on first use: the same context
 * each call until its device is lost (a driver reset, a GPU process crash) or the acquisition
 * fails, then a fresh one at the next call (with that call's options), so that a model loaded
 * again runs on a live device.
 */
export function sharedGpuContext<O>(acquire: (options: O) => Promise<GpuContext>): (options: O) => Promise<GpuContext> {
  let current: Promise<GpuContext> | undefined;
  return (options) => {
    if (current) return current;
    const pending = acquire(options);
    current = pending;
    const forget = () => {
      if (current === pending) current = undefined;
    };
    pending.then((ctx) => ctx.device.lost.then(forget), forget);
    return pending;
  };
}

/** Asks `gpu` (navigator.gpu in a page, Dawn in Node) for an adapter and a device with the adapter's best limits. */
export async function acquireDevice(gpu: GPU | undefined, options: AcquireDeviceOptions = {}): Promise<GpuContext> {
  if (!gpu) throw new Error('WebGPU is not available here (navigator.gpu is missing).');
  const adapter = await gpu.requestAdapter({ powerPreference: options.powerPreference ?? 'high-performance' });
  if (!adapter) throw new Error('WebGPU is available but no GPU adapter was found.');

  const requiredFeatures: GPUFeatureName[] = [];
  const shaderF16 = adapter.features.has('shader-f16');
  const subgroups = adapter.features.has('subgroups');
  if (shaderF16) requiredFeatures.push('shader-f16');
  if (subgroups) requiredFeatures.push('subgroups' as GPUFeatureName);

  // Ask for the adapter's own maxima: the defaults (128 MiB bindings) are far below what
  // desktop GPUs allow, and the large tensors of real models need them.
  const requiredLimits: Record<string, number> = {};
  for (const name of LIMIT_NAMES) {
    if (name.startsWith('min')) continue; // alignments: keep the defaults (the adapter's are never larger)
    const value = (adapter.limits as unknown as Record<string, number>)[name];
    if (typeof value === 'number') requiredLimits[name] = value;
  }
  const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
  // Dispatch, submit, read-back and allocation counts (gpuCounters): a few JS calls' worth of cost.
  installGpuCounters(device);
  device.lost.then((info) => {
    if (info.reason !== 'destroyed') console.error(`webgpu-llama: GPU device lost: ${info.message}`);
  });

  const limits = {} as GpuLimits;
  for (const name of LIMIT_NAMES) limits[name] = (device.limits as unknown as Record<string, number>)[name];
  const info = adapter.info;
  return {
    device,
    adapter: { vendor: info?.vendor ?? '', architecture: info?.architecture ?? '', description: info?.description ?? '' },
    features: { shaderF16, subgroups },
    limits,
  };
}
