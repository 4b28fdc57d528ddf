// Probes of the adapter's own limits, run by `npm run bench` on the same device as the model:
//   - copy bandwidth: copyBufferToBuffer of a large buffer, timed by onSubmittedWorkDone;
//   - our matrix-vector kernel (Kernels batch.matmul with T = 1) on a large random matrix per
//     weight storage type: the weight bytes it reads per second, and that as a fraction of the copy
//     bandwidth (a copy reads and writes each byte; the figure compares bytes per second of each);
//   - the cost of one dispatch (many tiny dispatches in one pass, one submit), of an empty
//     submit's round trip, and of a GPU->CPU read-back of 4 bytes after a tiny dispatch.
// Browser-safe: the bench page runs the same code on navigator.gpu's device.
import type { GpuContext } from '../src/gpu/device.ts';
import { Kernels } from '../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createWeightMatrix } from '../src/gpu/buffers.ts';
import { weightByteSize } from '../src/gpu/weight-formats.ts';
import type { WeightDType } from '../src/gpu/tensor.ts';
import { quantizeValues, toF16Clamped } from '../src/model/quantize.ts';
import { round, stat } from './measure.ts';

export type ProbeDType = 'f32' | 'f16' | 'q8_0' | 'q4_0' | 'q4_k' | 'q6_k';
/**
 * The weight storages that loading can make (weightStorage), and the two K-quants of the usual
 * Q4_K_M GGUF files, which only come from files (random values quantized here).
 */
export const PROBE_DTYPES: ProbeDType[] = ['f32', 'f16', 'q8_0', 'q4_0', 'q4_k', 'q6_k'];
/** The probe types that are not load-time storages: probed whatever --storages says. */
export const FILE_ONLY_PROBE_DTYPES: ProbeDType[] = ['q4_k', 'q6_k'];

export interface ProbeOptions {
  /** Size of the copied buffer. */
  copyMiB: number;
  /** Matrix of the matrix-vector probe: [rows, cols]. */
  matvecRows: number;
  matvecCols: number;
  dtypes: ProbeDType[];
  /** Tiny dispatches in the dispatch-cost probe. */
  dispatches: number;
  /** Timed trials of each probe (the median is reported). */
  trials: number;
}

export const DEFAULT_PROBE_OPTIONS: ProbeOptions = {
  copyMiB: 128,
  matvecRows: 8192,
  matvecCols: 2048,
  dtypes: PROBE_DTYPES,
  dispatches: 2000,
  trials: 3,
};

export interface MatvecProbe {
  dtype: ProbeDType;
  rows: number;
  cols: number;
  weight_mib: number;
  ms: number;
  weight_gb_per_s: number;
  /** weight_gb_per_s / copy_gb_per_s. */
  fraction_of_copy: number;
  error?: string;
}

export interface ProbeFigures {
  copy_mib: number;
  /** Bytes copied per second (each byte is read once and written once). */
  copy_gb_per_s: number;
  matvec: MatvecProbe[];
  dispatch_us: number;
  submit_roundtrip_ms: number;
  readback_ms: number;
}

const MiB = 2 ** 20;

/** Milliseconds from submitting the work `encode` records to the queue reporting it done (median of trials). */
async function timeSubmitted(device: GPUDevice, trials: number, encode: (encoder: GPUCommandEncoder) => void): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < trials; i++) {
    await device.queue.onSubmittedWorkDone(); // start from an idle queue
    const encoder = device.createCommandEncoder({ label: 'probe' });
    encode(encoder);
    const commands = encoder.finish();
    const start = performance.now();
    device.queue.submit([commands]);
    await device.queue.onSubmittedWorkDone();
    times.push(performance.now() - start);
  }
  return stat(times, 4).median;
}

async function copyBandwidth(device: GPUDevice, options: ProbeOptions): Promise<number> {
  const size = options.copyMiB * MiB;
  const src = device.createBuffer({ label: 'probe copy src', size, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  const dst = device.createBuffer({ label: 'probe copy dst', size, usage: GPUBufferUsage.COPY_DST });
  try {
    const copy = (encoder: GPUCommandEncoder) => encoder.copyBufferToBuffer(src, 0, dst, 0, size);
    await timeSubmitted(device, 1, copy); // first touch of the pages
    const ms = await timeSubmitted(device, options.trials, copy);
    return size / (ms / 1000) / 1e9;
  } finally {
    src.destroy();
    dst.destroy();
  }
}

/** A random [rows, cols] matrix in `dtype`'s layout (values in [-1, 1)). */
function randomMatrixBytes(dtype: ProbeDType, values: Float32Array): Float32Array | Uint32Array | Uint8Array {
  switch (dtype) {
    case 'f32':
      return values;
    case 'f16': {
      const halves = new Uint16Array(values.length);
      toF16Clamped(values, halves);
      return new Uint32Array(halves.buffer); // two halves per word, low half first (little-endian)
    }
    case 'q8_0':
    case 'q4_0':
    case 'q4_k':
    case 'q6_k':
      return quantizeValues(dtype, values);
  }
}

function randomValues(n: number, seed: number): Float32Array {
  const values = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0; // LCG: plenty for bandwidth
    values[i] = s / 2 ** 31 - 1;
  }
  return values;
}

async function matvecBandwidth(ctx: GpuContext, options: ProbeOptions, copyGbPerS: number): Promise<MatvecProbe[]> {
  const { device } = ctx;
  const rows = options.matvecRows;
  const cols = options.matvecCols;
  const kernels = await Kernels.create(ctx, { weightDTypes: options.dtypes as WeightDType[] });
  const values = randomValues(rows * cols, 7);
  const x = createF32Buffer(device, randomValues(cols, 8), 'probe x');
  const y = createStorageBuffer(device, rows * 4, 'probe y');
  const results: MatvecProbe[] = [];
  try {
    for (const dtype of options.dtypes) {
      const bytes = weightByteSize(dtype, rows * cols);
      let W: ReturnType<typeof createWeightMatrix> | undefined;
      try {
        W = createWeightMatrix(device, randomMatrixBytes(dtype, values), dtype, rows, cols, `probe W ${dtype}`);
        const matrix = W;
        const once = async () => {
          await device.queue.onSubmittedWorkDone();
          const start = performance.now();
          const batch = kernels.begin();
          batch.matmul(y, x, matrix, 1);
          batch.submit();
          await device.queue.onSubmittedWorkDone();
          return performance.now() - start;
        };
        await once(); // compiles the pipeline, first touch of the weights
        const times: number[] = [];
        for (let i = 0; i < Math.max(options.trials, 3); i++) times.push(await once());
        const ms = stat(times, 4).median;
        const gbPerS = bytes / (ms / 1000) / 1e9;
        results.push({ dtype, rows, cols, weight_mib: round(bytes / MiB), ms: round(ms, 2), weight_gb_per_s: round(gbPerS, 2), fraction_of_copy: round(gbPerS / copyGbPerS, 3) });
      } catch (error) {
        results.push({ dtype, rows, cols, weight_mib: round(bytes / MiB), ms: NaN, weight_gb_per_s: NaN, fraction_of_copy: NaN, error: String(error) });
      } finally {
        W?.buffer.destroy();
      }
    }
  } finally {
    x.destroy();
    y.destroy();
  }
  return results;
}

const TINY_WGSL = /* wgsl */ `
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main() { out[0] = out[0] + 1u; }
`;

async function dispatchCosts(device: GPUDevice, options: ProbeOptions): Promise<{ dispatchUs: number; submitMs: number; readbackMs: number }> {
  const module = device.createShaderModule({ code: TINY_WGSL, label: 'probe tiny' });
  const pipeline = await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const out = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const staging = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }] });
  const dispatches = (n: number) => (encoder: GPUCommandEncoder) => {
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    for (let i = 0; i < n; i++) pass.dispatchWorkgroups(1);
    pass.end();
  };
  try {
    await timeSubmitted(device, 1, dispatches(options.dispatches)); // warm-up
    const many = await timeSubmitted(device, options.trials, dispatches(options.dispatches));
    const none = await timeSubmitted(device, options.trials, dispatches(0));
    const submitMs = await timeSubmitted(device, 10, () => {});
    const readbacks: number[] = [];
    for (let i = 0; i < 10; i++) {
      await device.queue.onSubmittedWorkDone();
      const encoder = device.createCommandEncoder();
      dispatches(1)(encoder);
      encoder.copyBufferToBuffer(out, 0, staging, 0, 16);
      const commands = encoder.finish();
      const start = performance.now();
      device.queue.submit([commands]);
      await staging.mapAsync(GPUMapMode.READ);
      readbacks.push(performance.now() - start);
      staging.unmap();
    }
    return { dispatchUs: ((many - none) / options.dispatches) * 1000, submitMs, readbackMs: stat(readbacks, 4).median };
  } finally {
    out.destroy();
    staging.destroy();
  }
}

/** Runs every probe on `ctx`'s device; `log` hears each figure as it comes. */
export async function runProbes(ctx: GpuContext, options: ProbeOptions = DEFAULT_PROBE_OPTIONS, log: (message: string) => void = () => {}): Promise<ProbeFigures> {
  const copy = await copyBandwidth(ctx.device, options);
  log(`copy: ${copy.toFixed(2)} GB/s (${options.copyMiB} MiB)`);
  const costs = await dispatchCosts(ctx.device, options);
  log(`dispatch: ${costs.dispatchUs.toFixed(2)} us; empty submit round trip ${costs.submitMs.toFixed(3)} ms; read-back ${costs.readbackMs.toFixed(3)} ms`);
  const matvec = await matvecBandwidth(ctx, options, copy);
  for (const m of matvec) log(`matvec ${m.dtype}: ${m.weight_gb_per_s} GB/s of weights (${m.ms} ms for ${m.weight_mib} MiB), ${m.fraction_of_copy} of copy${m.error ? ` ERROR ${m.error}` : ''}`);
  return {
    copy_mib: options.copyMiB,
    copy_gb_per_s: round(copy, 2),
    matvec,
    dispatch_us: round(costs.dispatchUs, 2),
    submit_roundtrip_ms: round(costs.submitMs, 3),
    readback_ms: round(costs.readbackMs, 3),
  };
}
