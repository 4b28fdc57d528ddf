// Counts of what the runtime asks of a GPUDevice: dispatches, command submissions, GPU->CPU
// read-backs, objects created, bytes written. The bench divides them by decoded tokens (the
// target after warm-up: zero read-backs on the critical path, zero buffers and bind groups
// created per token), and tests assert them where they are exact.
//
// Installed by wrapping the methods of the device instance (and of the encoders, passes, queue
// and buffers it hands out), not of the prototypes: that works the same in browsers and in Node's
// Dawn, touches only devices we acquired, and costs one extra JS call per counted call.

export interface GpuCounters {
  /** dispatchWorkgroups + dispatchWorkgroupsIndirect calls on compute passes. */
  dispatches: number;
  /** beginComputePass calls. */
  computePasses: number;
  /** copyBufferToBuffer calls on command encoders. */
  copies: number;
  /** queue.submit calls. */
  submits: number;
  /** Command buffers handed to queue.submit (a submit may carry several). */
  commandBuffers: number;
  /** mapAsync(GPUMapMode.READ) calls: each is a GPU->CPU round trip. */
  readBacks: number;
  buffersCreated: number;
  /** Bytes of the buffers created. */
  bufferBytesCreated: number;
  bindGroupsCreated: number;
  commandEncodersCreated: number;
  /** createComputePipeline(Async) and createRenderPipeline(Async) calls. */
  pipelinesCreated: number;
  /** queue.writeBuffer calls and the bytes they wrote. */
  writeBuffers: number;
  writeBufferBytes: number;
}

const ZERO: GpuCounters = {
  dispatches: 0,
  computePasses: 0,
  copies: 0,
  submits: 0,
  commandBuffers: 0,
  readBacks: 0,
  buffersCreated: 0,
  bufferBytesCreated: 0,
  bindGroupsCreated: 0,
  commandEncodersCreated: 0,
  pipelinesCreated: 0,
  writeBuffers: 0,
  writeBufferBytes: 0,
};

export const COUNTER_NAMES = Object.keys(ZERO) as (keyof GpuCounters)[];

const installed = new WeakMap<GPUDevice, GpuCounters>();

type AnyFn = (...args: any[]) => any;

/** Replaces `target[name]` (an own property shadowing the prototype's method) with a counting wrapper. */
function wrapMethod<T extends object>(target: T, name: string, before: (args: any[]) => void, after?: (result: any) => void): void {
  const original = (target as Record<string, unknown>)[name];
  if (typeof original !== 'function') return; // an implementation without this method (e.g. no async pipelines)
  const fn = original as AnyFn;
  Object.defineProperty(target, name, {
    configurable: true,
    writable: true,
    value: function (this: unknown, ...args: unknown[]) {
      before(args);
      const result = fn.apply(this, args);
      after?.(result);
      return result;
    },
  });
}

/** Bytes queue.writeBuffer writes: offsets and sizes count elements for typed arrays, bytes otherwise. */
function writeBufferBytes(data: BufferSource | SharedArrayBuffer, dataOffset = 0, size?: number): number {
  const elementSize = ArrayBuffer.isView(data) ? ((data as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1) : 1;
  if (size !== undefined) return size * elementSize;
  return data.byteLength - dataOffset * elementSize;
}

/**
 * Starts counting on `device` (idempotent). acquireDevice calls it for every device it returns;
 * call it yourself for a device made another way, before the calls you want counted.
 */
export function installGpuCounters(device: GPUDevice): void {
  if (installed.has(device)) return;
  const c: GpuCounters = { ...ZERO };
  installed.set(device, c);

  const countReadBacks = (buffer: GPUBuffer) => {
    wrapMethod(buffer, 'mapAsync', ([mode]) => {
      if (mode & GPUMapMode.READ) c.readBacks++;
    });
  };
  wrapMethod(
    device,
    'createBuffer',
    ([descriptor]) => {
      c.buffersCreated++;
      c.bufferBytesCreated += Number((descriptor as GPUBufferDescriptor).size);
    },
    (buffer: GPUBuffer) => {
      // Only buffers that can be mapped for reading can be read back.
      if (buffer.usage & GPUBufferUsage.MAP_READ) countReadBacks(buffer);
    },
  );
  wrapMethod(device, 'createBindGroup', () => c.bindGroupsCreated++);
  for (const name of ['createComputePipeline', 'createComputePipelineAsync', 'createRenderPipeline', 'createRenderPipelineAsync']) {
    wrapMethod(device, name, () => c.pipelinesCreated++);
  }
  wrapMethod(
    device,
    'createCommandEncoder',
    () => c.commandEncodersCreated++,
    (encoder: GPUCommandEncoder) => {
      wrapMethod(encoder, 'copyBufferToBuffer', () => c.copies++);
      wrapMethod(
        encoder,
        'beginComputePass',
        () => c.computePasses++,
        (pass: GPUComputePassEncoder) => {
          wrapMethod(pass, 'dispatchWorkgroups', () => c.dispatches++);
          wrapMethod(pass, 'dispatchWorkgroupsIndirect', () => c.dispatches++);
        },
      );
    },
  );
  const queue = device.queue; // [SameObject]: the one queue every caller gets
  wrapMethod(queue, 'submit', ([buffers]) => {
    c.submits++;
    c.commandBuffers += (buffers as GPUCommandBuffer[]).length;
  });
  wrapMethod(queue, 'writeBuffer', ([, , data, dataOffset, size]) => {
    c.writeBuffers++;
    c.writeBufferBytes += writeBufferBytes(data, dataOffset, size);
  });
}

/** Whether installGpuCounters ran on `device`. */
export function hasGpuCounters(device: GPUDevice): boolean {
  return installed.has(device);
}

/** A snapshot of the counts since installGpuCounters(device). Throws for a device without counters. */
export function gpuCounters(device: GPUDevice): Readonly<GpuCounters> {
  const c = installed.get(device);
  if (!c) throw new Error('gpuCounters: this device has no counters (devices from acquireDevice have them; else call installGpuCounters first)');
  return Object.freeze({ ...c });
}

/** after - before, per counter. */
export function counterDelta(after: Readonly<GpuCounters>, before: Readonly<GpuCounters>): GpuCounters {
  const d = { ...ZERO };
  for (const name of COUNTER_NAMES) d[name] = after[name] - before[name];
  return d;
}
