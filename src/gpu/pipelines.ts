// Compute pipelines, compiled once per (device, kernel, variant) and cached.
//
// A key names what was compiled, e.g. 'rmsnorm' or 'matvec/f16/bias': the kernel plus whatever
// was composed into its source (weight storage type, bias). Pipelines use `layout: 'auto'`, so a
// bind group is made with `pipeline.getBindGroupLayout(0)`. The caches of one device share what
// they compiled: a key is the whole source, and a pipeline holds no model's data, so a model
// loaded again, or another of the same shapes, compiles nothing (on SwiftShader the decode
// step's pipelines alone take seconds).

/** What to compile: the full WGSL module and its entry point. */
export interface ShaderSpec {
  code: string;
  entryPoint: string;
}

export interface PipelineCacheOptions {
  /** Compile ahead of use with createComputePipelineAsync (default) or createComputePipeline. */
  async?: boolean;
}

/** What the caches of each device have compiled, and are compiling. */
const compiledByDevice = new WeakMap<GPUDevice, { ready: Map<string, GPUComputePipeline>; pending: Map<string, Promise<GPUComputePipeline>> }>();

export class PipelineCache {
  private readonly ready: Map<string, GPUComputePipeline>;
  private readonly pending: Map<string, Promise<GPUComputePipeline>>;
  /** Whether prepare() uses createComputePipelineAsync. */
  readonly compilesAsync: boolean;

  constructor(
    private readonly device: GPUDevice,
    options: PipelineCacheOptions = {},
  ) {
    this.compilesAsync = options.async ?? true;
    let compiled = compiledByDevice.get(device);
    if (!compiled) {
      compiled = { ready: new Map(), pending: new Map() };
      compiledByDevice.set(device, compiled);
    }
    this.ready = compiled.ready;
    this.pending = compiled.pending;
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
      promise = this.compileChecked(key, spec()).then(
        (pipeline) => {
          this.ready.set(key, pipeline);
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
      const { code, entryPoint } = spec();
      const module = this.device.createShaderModule({ label: key, code });
      void module.getCompilationInfo?.().then(
        (info) => {
          const message = compileErrors(key, info);
          if (message) this.onCompileError(message);
        },
        () => {}, // a lost device: nothing to report about the shader
      );
      pipeline = this.device.createComputePipeline({ label: key, layout: 'auto', compute: { module, entryPoint } });
      this.ready.set(key, pipeline);
    }
    return pipeline;
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
