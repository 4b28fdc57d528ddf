// Uniform parameters on the TS side: each shader's `struct Params` as a named packer (paramStruct),
// and the 256-byte slots (the offset alignment WebGPU guarantees) that the kernels' batches and
// programs fill on the CPU and upload once (UniformArena). The kernels and the GPU sampler share
// them.
export const UNIFORM_SLOT_BYTES = 256; // minUniformBufferOffsetAlignment is at most 256 on every device
export const UNIFORM_SLOTS_PER_CHUNK = 128;
/** A uniform value: plain numbers are u32; wrap f32 fields with f32(). */
export type UniformValue = number | { f32: number };
export const f32 = (value: number): UniformValue => ({ f32: value });

/** 256-byte uniform slots for one batch, in chunks of GPU buffers filled on the CPU until submit. */
export class UniformArena {
  private readonly chunks: { buffer: GPUBuffer; data: ArrayBuffer; used: number }[] = [];
  /** The chunk being filled. */
  private current = 0;

  constructor(private readonly device: GPUDevice) {}

  /** Reserves a slot holding `values` (4 bytes each, in order); returns where it lives. */
  alloc(values: UniformValue[]): { buffer: GPUBuffer; offset: number; size: number } {
    let chunk = this.chunks[this.current];
    if (chunk && chunk.used === chunk.data.byteLength) chunk = this.chunks[++this.current];
    if (!chunk) {
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
    writeUniformValues(new DataView(chunk.data, offset, UNIFORM_SLOT_BYTES), values);
    chunk.used += UNIFORM_SLOT_BYTES;
    return { buffer: chunk.buffer, offset, size: UNIFORM_SLOT_BYTES };
  }

  /** Queues the slot contents; queue writes land before the next submit's commands run. */
  upload(): void {
    for (const c of this.chunks) if (c.used > 0) this.device.queue.writeBuffer(c.buffer, 0, c.data, 0, c.used);
  }

  /**
   * Empties the slots for the next batch, keeping the buffers: the same slots come back in the
   * same order. Legal once the previous contents were uploaded (queue writes copy at once, and
   * land after the work submitted before them).
   */
  reset(): void {
    for (const c of this.chunks) c.used = 0;
    this.current = 0;
  }

  /** Legal right after submit: the buffers are freed once the submitted work is done with them. */
  destroy(): void {
    for (const c of this.chunks) c.buffer.destroy();
  }
}

/** A field of a shader's `struct Params`: a u32 or f32, or an array of u32 words (vec4<u32> or struct elements). */
export type ParamType = 'u32' | 'f32' | 'u32[]';

/** The value a packer takes for a field of type T. */
type ParamValue<T extends ParamType> = T extends 'u32[]' ? readonly number[] : number;

/**
 * A shader's `struct Params` on the TS side: its fields in declaration order, with their WGSL names
 * and byte offsets, and `pack`, which lays named values out as the struct does. Arrays start at a
 * multiple of 16 bytes (the uniform address space's alignment of arrays). test/gpu/kernels/params.test.ts
 * checks every one against its shader's source.
 */
export interface ParamStruct<F extends Record<string, ParamType>> {
  readonly fields: readonly { name: string; type: ParamType; offset: number }[];
  pack(values: { [K in keyof F]: ParamValue<F[K]> }): UniformValue[];
}

export function paramStruct<const F extends Record<string, ParamType>>(fields: F): ParamStruct<F> {
  const layout: { name: string; type: ParamType; offset: number }[] = [];
  let offset = 0;
  const entries = Object.entries(fields);
  for (const [i, [name, type]] of entries.entries()) {
    // An array is the struct's last field: its length is the values'.
    if (type === 'u32[]' && i !== entries.length - 1) throw new Error(`paramStruct: the array ${name} must be the last field`);
    if (type === 'u32[]') offset = Math.ceil(offset / 16) * 16;
    layout.push({ name, type, offset });
    offset += 4;
  }
  return {
    fields: layout,
    pack(values) {
      const out: UniformValue[] = [];
      for (const { name, type, offset } of layout) {
        const value = (values as Record<string, number | readonly number[]>)[name];
        while (out.length * 4 < offset) out.push(0);
        if (type === 'u32[]') out.push(...(value as readonly number[]));
        else out.push(type === 'f32' ? f32(value as number) : (value as number));
      }
      if (out.length * 4 > UNIFORM_SLOT_BYTES) throw new Error(`${out.length * 4} bytes of parameters exceed a ${UNIFORM_SLOT_BYTES}-byte slot`);
      return out;
    },
  };
}

/** One dispatch a kernel family planned: its pipeline, parameters, buffers by binding and grid. */
export interface PlannedDispatch {
  pipeline: GPUComputePipeline;
  params: UniformValue[];
  buffers: Record<number, GPUBuffer>;
  workgroups: number | [number, number];
}

/** Writes `values` (as pack returns them: u32, or f32 where wrapped) from byte 0 of `view`, 4 bytes each. */
export function writeUniformValues(view: DataView, values: readonly UniformValue[]): void {
  values.forEach((v, i) => {
    if (typeof v === 'number') view.setUint32(i * 4, v, true);
    else view.setFloat32(i * 4, v.f32, true);
  });
}
