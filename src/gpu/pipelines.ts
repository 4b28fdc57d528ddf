// Compute pipelines, compiled once per (kernel, variant) and cached.
//
// A key names what was compiled, e.g. 'rmsnorm' or 'matvec/f16/bias': the kernel plus whatever
// was composed into its source (weight storage type, bias). Pipelines use `layout: 'auto'`, so a
// bind group is made with `pipeline.getBindGroupLayout(0)`.

/** What to compile: the full WGSL module and its entry point. */
export interface ShaderSpec {
  code: string;
  entryPoint: string;
}

export interface PipelineCacheOptions {
  /** Compile ahead of use with createComputePipelineAsync (default) or createComputePipeline. */
  async?: boolean;
}

export class PipelineCache {
  private readonly ready = new Map<string, GPUComputePipeline>();
  private readonly pending = new Map<string, Promise<GPUComputePipeline>>();
  /** Whether prepare() uses createComputePipelineAsync. */
  readonly compilesAsync: boolean;

  constructor(
    private readonly device: GPUDevice,
    options: PipelineCacheOptions = {},
  ) {
    this.compilesAsync = options.async ?? true;
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
   * dispatch methods cannot wait). Compile errors then surface as device validation errors.
   */
  get(key: string, spec: () => ShaderSpec): GPUComputePipeline {
    let pipeline = this.ready.get(key);
    if (!pipeline) {
      const { code, entryPoint } = spec();
      pipeline = this.device.createComputePipeline({
        label: key,
        layout: 'auto',
        compute: { module: this.device.createShaderModule({ label: key, code }), entryPoint },
      });
      this.ready.set(key, pipeline);
    }
    return pipeline;
  }

  /** Whether `key` has been compiled. */
  has(key: string): boolean {
    return this.ready.has(key);
  }

  private async compileChecked(key: string, { code, entryPoint }: ShaderSpec): Promise<GPUComputePipeline> {
    const module = this.device.createShaderModule({ label: key, code });
    // The compiler's own messages (line:column) say far more than a failed pipeline does.
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error');
    if (errors.length > 0) {
      const text = errors.map((m) => `  ${m.lineNum}:${m.linePos} ${m.message}`).join('\n');
      throw new Error(`WGSL compile error in ${key}:\n${text}`);
    }
    const descriptor: GPUComputePipelineDescriptor = { label: key, layout: 'auto', compute: { module, entryPoint } };
    return this.compilesAsync
      ? this.device.createComputePipelineAsync(descriptor)
      : this.device.createComputePipeline(descriptor);
  }
}
