// Compute pipelines, compiled once per (device, kernel, variant) and cached.
//
// A key names what was compiled, e.g. 'rmsnorm' or 'matvec/f16/bias': the kernel plus whatever
// was composed into its source (weight storage type, bias). Pipelines use `layout: 'auto'`, so a
// bind group is made with `pipeline.getBindGroupLayout(0)`. The caches of one device share what
// they compiled (a pipeline holds no model's data), so a model loaded again, or another of the
// same shapes, compiles nothing: on SwiftShader the decode step's pipelines alone take seconds.
// A key should name every constant composed into the source, but a shared pipeline is taken only
// for the same source: a key that misses a constant costs a compile, never another model's kernel.

/** What to compile: the full WGSL module and its entry point. */
export interface ShaderSpec {
  code: string;
  entryPoint: string;
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
      pipeline = this.device.createComputePipeline({ label: key, layout: 'auto', compute: { module, entryPoint: source.entryPoint } });
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

  private async compileChecked(key: string, { code, entryPoint }: ShaderSpec): Promise<GPUComputePipeline> {
    const module = this.device.createShaderModule({ label: key, code });
    // The compiler's own messages (line:column) say far more than a failed pipeline does.
    const message = compileErrors(key, await module.getCompilationInfo());
    if (message) throw new Error(message);
    const descriptor: GPUComputePipelineDescriptor = { label: key, layout: 'auto', compute: { module, entryPoint } };
    return this.compilesAsync
      ? this.device.createComputePipelineAsync(descriptor)
      : this.device.createComputePipeline(descriptor);
  }
}

/** The compiler's errors in `info` as one message naming the pipeline (line:column each), or undefined. */
function compileErrors(key: string, info: GPUCompilationInfo): string | undefined {
  const errors = info.messages.filter((m) => m.type === 'error');
  if (errors.length === 0) return undefined;
  return `WGSL compile error in ${key}:\n${errors.map((m) => `  ${m.lineNum}:${m.linePos} ${m.message}`).join('\n')}`;
}
