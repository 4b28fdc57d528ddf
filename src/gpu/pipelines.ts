// Compute pipelines, compiled once per (device, kernel, variant) and cached.
//
// A key names what was compiled, e.g. 'rmsnorm' or 'matvec/f16/bias': the kernel plus whatever
// was composed into its source (weight storage type, bias). Pipelines use `layout: 'auto'` unless
// their spec describes one, and a bind group is made with `pipeline.getBindGroupLayout(group)`. The caches of one device share what
// they compiled (a pipeline holds no model's data), so a model loaded again, or another of the
// same shapes, compiles nothing: on SwiftShader the decode step's pipelines alone take seconds.
// A key should name every constant composed into the source, but a shared pipeline is taken only
// for the same source: a key that misses a constant costs a compile, never another model's kernel.

/** A buffer binding of an explicit layout, visible to the compute stage. */
export interface BufferBindingSpec {
  type: GPUBufferBindingType;
  /** The offset comes with setBindGroup (one bind group serves several slots of a buffer). */
  hasDynamicOffset?: boolean;
  minBindingSize?: number;
}

/** What to compile: the full WGSL module and its entry point, and the layout when not 'auto'. */
export interface ShaderSpec {
  code: string;
  entryPoint: string;
  /**
   * An explicit layout: each bind group's buffer bindings, binding i at index i. For bind groups
   * that serve several pipelines, or bindings with a dynamic offset: an 'auto' layout's bind
   * groups fit its own pipeline only, and hold just the bindings its entry point uses.
   */
  layout?: readonly (readonly BufferBindingSpec[])[];
}

export interface PipelineCacheOptions {
  /** Compile ahead of use with createComputePipelineAsync (default) or createComputePipeline. */
  async?: boolean;
}

/** A pipeline and the source it was compiled from. */
interface Compiled extends ShaderSpec {
  pipeline: GPUComputePipeline;
}

/** What the caches of each device have compiled, by key. */
const compiledByDevice = new WeakMap<GPUDevice, Map<string, Compiled>>();

export class PipelineCache {
  /** This cache's pipelines: compiled here, or taken from the device's for the same source. */
  private readonly ready = new Map<string, GPUComputePipeline>();
  private readonly pending = new Map<string, Promise<GPUComputePipeline>>();
  /** The device's, shared by its caches. */
  private readonly shared: Map<string, Compiled>;
  /** Whether prepare() uses createComputePipelineAsync. */
  readonly compilesAsync: boolean;

  constructor(
    private readonly device: GPUDevice,
    options: PipelineCacheOptions = {},
  ) {
    this.compilesAsync = options.async ?? true;
    let shared = compiledByDevice.get(device);
    if (!shared) compiledByDevice.set(device, (shared = new Map()));
    this.shared = shared;
  }

  /**
   * Compiles ahead of use (createComputePipelineAsync unless options.async is false) and resolves
   * once the pipeline is cached; rejects with the compiler's messages if the WGSL does not compile.
   */
  prepare(key: string, spec: () => ShaderSpec): Promise<GPUComputePipeline> {
    const cached = this.ready.get(key);
    if (cached) return Promise.resolve(cached);
    let promise = this.pending.get(key);
    if (!promise) {
      const source = spec();
      const taken = this.fromDevice(key, source);
      if (taken) return Promise.resolve(taken);
      promise = this.compileChecked(key, source).then(
        (pipeline) => {
          this.keep(key, source, pipeline);
          this.pending.delete(key);
          return pipeline;
        },
        (error: unknown) => {
          this.pending.delete(key);
          throw error;
        },
      );
      this.pending.set(key, promise);
    }
    return promise;
  }

  /**
   * The pipeline for `key`, compiled synchronously on first use when it was not prepared (the
   * dispatch methods cannot wait). A compile error then makes every use of it a device validation
   * error, which nothing may report: the compiler's messages go to `onCompileError` (console.error
   * by default) as soon as they are known.
   */
  get(key: string, spec: () => ShaderSpec): GPUComputePipeline {
    let pipeline = this.ready.get(key);
    if (!pipeline) {
      const source = spec();
      pipeline = this.fromDevice(key, source);
      if (pipeline) return pipeline;
      const module = this.device.createShaderModule({ label: key, code: source.code });
      pipeline = this.device.createComputePipeline(this.descriptor(key, module, source));
      const made = pipeline;
      this.keep(key, source, made);
      void module.getCompilationInfo?.().then(
        (info) => {
          const message = compileErrors(key, info);
          if (!message) return;
          // Not offered to the device's other caches: their prepare() should report the errors too.
          if (this.shared.get(key)?.pipeline === made) this.shared.delete(key);
          this.onCompileError(message);
        },
        () => {}, // a lost device: nothing to report about the shader
      );
    }
    return pipeline;
  }

  /** The device's pipeline for `key` when it was compiled from the same source (kept here from then on). */
  private fromDevice(key: string, source: ShaderSpec): GPUComputePipeline | undefined {
    const compiled = this.shared.get(key);
    if (!compiled || compiled.code !== source.code || compiled.entryPoint !== source.entryPoint) return undefined;
    if (layoutKey(compiled.layout) !== layoutKey(source.layout)) return undefined;
    this.ready.set(key, compiled.pipeline);
    return compiled.pipeline;
  }

  /** Keeps a pipeline this cache compiled, and offers it to the device's other caches (unless one is there). */
  private keep(key: string, source: ShaderSpec, pipeline: GPUComputePipeline): void {
    this.ready.set(key, pipeline);
    if (!this.shared.has(key)) this.shared.set(key, { ...source, pipeline });
  }

  /** Where get() reports the compiler's errors of a pipeline it compiled on first use. */
  onCompileError: (message: string) => void = (message) => console.error(message);

  /** Whether `key` has been compiled. */
  has(key: string): boolean {
    return this.ready.has(key);
  }

  private async compileChecked(key: string, source: ShaderSpec): Promise<GPUComputePipeline> {
    const module = this.device.createShaderModule({ label: key, code: source.code });
    // The compiler's own messages (line:column) say far more than a failed pipeline does.
    const message = compileErrors(key, await module.getCompilationInfo());
    if (message) throw new Error(message);
    const descriptor = this.descriptor(key, module, source);
    return this.compilesAsync
      ? this.device.createComputePipelineAsync(descriptor)
      : this.device.createComputePipeline(descriptor);
  }

  private descriptor(key: string, module: GPUShaderModule, { entryPoint, layout }: ShaderSpec): GPUComputePipelineDescriptor {
    if (!layout) return { label: key, layout: 'auto', compute: { module, entryPoint } };
    const bindGroupLayouts = layout.map((group, g) =>
      this.device.createBindGroupLayout({
        label: `${key} group ${g}`,
        entries: group.map((buffer, binding) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer })),
      }),
    );
    return { label: key, layout: this.device.createPipelineLayout({ label: key, bindGroupLayouts }), compute: { module, entryPoint } };
  }
}

/** A layout's identity for sharing: pipelines compiled with equal descriptions take equal bind groups. */
function layoutKey(layout: ShaderSpec['layout']): string {
  return layout ? JSON.stringify(layout) : 'auto';
}

/** The compiler's errors in `info` as one message naming the pipeline (line:column each), or undefined. */
function compileErrors(key: string, info: GPUCompilationInfo): string | undefined {
  const errors = info.messages.filter((m) => m.type === 'error');
  if (errors.length === 0) return undefined;
  return `WGSL compile error in ${key}:\n${errors.map((m) => `  ${m.lineNum}:${m.linePos} ${m.message}`).join('\n')}`;
}
