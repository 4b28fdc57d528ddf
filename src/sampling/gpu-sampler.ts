// The sampling chain on the GPU (shaders/sample.wgsl), so that a decode step never waits for a
// token to be read back: the sampled id goes straight to where the next step's embedding reads
// it, and its record (id, logprob, top alternatives) to a slot that the caller copies out later,
// several steps at a time.
//
// The chain and its order are test/reference/sampler.ts's (its CPU reference): logit_bias,
// repetition penalty, presence/frequency, the min_tokens ban of stop ids, temperature (0: greedy
// argmax, lowest id on ties), top_k, top_p, min_p, and the inverse-CDF draw in ascending id order
// with the Philox number of (seed, stream, step) (philox.ts). Logprobs are the log-softmax of the
// RAW logits. The shader's header explains the passes.
//
// Structured output: a constrained sequence (beginSequence's `constrained`) draws only among the
// ids its step's mask allows (setMask, one mask per record slot), applied before everything else;
// when every allowed id's processed logit is -inf or NaN, the step picks the lowest allowed id.
//
// Per-sequence state (the prompt's seen-mask and the generated counts, the bias, the parameters)
// lives in GPU buffers written by beginSequence(); the counts are updated by the GPU itself as
// tokens are sampled.
//
// The constants the shader shares with this file come from sample-layout.ts, composed into the
// shader as a prelude; the pipelines come from a PipelineCache, so a device compiles each
// (entry point, WG) once for every sampler and model.
import type { GpuContext } from '../gpu/device.ts';
import { UNIFORM_SLOT_BYTES, writeUniformValues } from '../gpu/uniforms.ts';
import { PipelineCache, type ShaderSpec } from '../gpu/pipelines.ts';
import type { GeneratedToken, SamplingParams, TokenLogprob } from './types.ts';
import { philoxKey } from './philox.ts';
import {
  MAX_WG,
  maskWordsFor,
  SAMPLE_CONSTANTS,
  SAMPLE_SEQUENCE_PARAMS,
  SAMPLE_STEP_PARAMS,
  sampleWgslPrelude,
  sampleWorkgroup,
} from './sample-layout.ts';
import sampleWgsl from '../../shaders/sample.wgsl?raw';

export interface GpuSequenceSetup {
  params: SamplingParams;
  /** The repetition penalty counts them as seen. */
  promptTokens: readonly number[];
  /** Philox key (the request's seed) and counter word 0 (the choice index). */
  seed: number;
  stream: number;
  /** Stop ids: never sampled while step < minTokens. */
  banned: readonly number[];
  minTokens: number;
  /** Top alternatives per token (0..20); undefined = none. */
  logprobs?: number;
  /** Each step draws only among the ids its record slot's mask allows (setMask). */
  constrained?: boolean;
}

/** A buffer, or a region of one from a byte offset (a multiple of 256: a storage binding's alignment). */
export type BufferRegion = GPUBuffer | { buffer: GPUBuffer; offset: number };

function regionOf(r: BufferRegion): { buffer: GPUBuffer; offset: number } {
  return 'offset' in r && 'buffer' in r ? r : { buffer: r as GPUBuffer, offset: 0 };
}

export interface GpuSamplerOptions {
  /** Record slots (and step-parameter slots): steps encoded before one submit use distinct slots. Default 16. */
  recordSlots?: number;
  /**
   * Run the whole step as one dispatch (true) or one dispatch per pass (false). Default: one
   * dispatch up to 64 chunks of 128 ids (8192 ids). Both give the same results.
   */
  fused?: boolean;
  /** Where the pipelines are compiled and kept. Default: a cache of the device's (which shares what its caches compiled). */
  pipelines?: PipelineCache;
}

const { CHUNK, CHUNK_WORKGROUP, STATE_WORDS, CHUNK_STRIDE, SEEN, BANNED, HAS_BIAS, USES_HISTORY, CONSTRAINED, DIGIT_ROUNDS, RECORD_WORDS } = SAMPLE_CONSTANTS;

/** Most top alternatives a record holds (the API's logprobs maximum). */
export const MAX_TOP_LOGPROBS = SAMPLE_CONSTANTS.MAX_TOP;
/** Bytes of one record: u32 id, f32 logprob, u32 count, u32 0, then count x (u32 id, f32 logprob). */
export const RECORD_BYTES = RECORD_WORDS * 4;

/**
 * The step parameters of each record slot: a uniform slot each, bound at its offset by
 * setBindGroup. Not a UniformArena's: a slot is rewritten by the queue at each encode() while the
 * other slots' steps may still be in flight, and the one bind group serves every slot.
 */
const STEP_SLOT_BYTES = UNIFORM_SLOT_BYTES;

/**
 * Vocabularies of at most this many chunks run the whole step as one dispatch of one workgroup
 * ('fused'): on SwiftShader a dispatch costs more than a pass over 8k logits.
 */
const FUSED_MAX_CHUNKS = 64;

const PASS_ENTRY_POINTS = ['prepare', 'reduce', 'weigh', 'reduce_weights', 'histogram', 'select_digit', 'draw_mass', 'draw'] as const;
type EntryPoint = (typeof PASS_ENTRY_POINTS)[number] | 'fused';

/**
 * The bindings of sample.wgsl: group 0 the sampler's state (binding 1, the step parameters, at
 * the record slot's offset; binding 7, the masks), group 1 the logits and where the token goes.
 * Explicit, so that one bind group serves every entry point. Eight storage buffers: every device's
 * maxStorageBuffersPerShaderStage, so another one must share a buffer.
 */
const SAMPLE_LAYOUT: ShaderSpec['layout'] = [
  [
    { type: 'uniform' },
    { type: 'uniform', hasDynamicOffset: true, minBindingSize: 16 },
    { type: 'storage' },
    { type: 'read-only-storage' },
    { type: 'storage' },
    { type: 'storage' },
    { type: 'storage' },
    { type: 'read-only-storage' },
  ],
  [{ type: 'read-only-storage' }, { type: 'storage' }],
];

/** The cache key of an entry point compiled with workgroup `wg`: every composed constant that varies. */
const sampleKey = (entryPoint: EntryPoint, wg: number) => `sample/${entryPoint}/wg${wg}`;

function sampleSpec(entryPoint: EntryPoint, wg: number): ShaderSpec {
  return { code: sampleWgslPrelude(wg) + sampleWgsl, entryPoint, layout: SAMPLE_LAYOUT };
}

/** How a sequence's steps are recorded (decided by its parameters, at beginSequence). */
interface StepShape {
  greedy: boolean;
  /** Greedy on the raw logits (no mask, bias, penalties or min_tokens ban) and no top alternatives asked. */
  plainGreedy: boolean;
  /** Radix selections per step: top_k, top_p, or both. */
  selections: number;
}

export class GpuSampler {
  readonly records: GPUBuffer;
  private readonly device: GPUDevice;
  private readonly numChunks: number;
  /** ceil(vocab / 4): the per-id arrays are read as vec4s and padded to whole quads. */
  private readonly quads: number;
  private readonly sequenceParams: GPUBuffer;
  private readonly stepParams: GPUBuffer;
  private readonly history: GPUBuffer;
  private readonly bias: GPUBuffer;
  private readonly values: GPUBuffer;
  private readonly work: GPUBuffer;
  /** recordSlots masks of maskWords u32 each. */
  private readonly masks: GPUBuffer;
  private readonly stateGroup: GPUBindGroup;
  private readonly ioGroups = new Map<GPUBuffer, Map<GPUBuffer, Map<string, GPUBindGroup>>>();
  private readonly ioLayout: GPUBindGroupLayout;
  /** Host copies reused by beginSequence (no per-sequence allocation). */
  private readonly historyHost: Uint32Array;
  private readonly biasHost: Float32Array;
  private readonly stepHost = new DataView(new ArrayBuffer(SAMPLE_STEP_PARAMS.fields.length * 4));
  private shape: StepShape | null = null;
  private sequenceLogprobs: number | undefined;
  /** One dispatch per step (small vocabularies), else one per pass. */
  readonly fused: boolean;
  /** Words of one mask: ceil(vocabSize / 32) (setMask; TokenConstraint.maskWords). */
  readonly maskWords: number;
  private oneShot: { token: GPUBuffer; staging: GPUBuffer } | null = null;

  private constructor(
    ctx: GpuContext,
    readonly vocabSize: number,
    readonly recordSlots: number,
    private readonly pipelines: Partial<Record<EntryPoint, GPUComputePipeline>>,
  ) {
    const device = ctx.device;
    this.device = device;
    this.numChunks = Math.ceil(vocabSize / CHUNK);
    this.quads = Math.ceil(vocabSize / 4);
    this.maskWords = maskWordsFor(vocabSize);
    this.fused = 'fused' in pipelines;
    // Every entry point has the same explicit layout: any pipeline's bind group layouts serve all.
    const anyPipeline = (pipelines.fused ?? pipelines.prepare)!;
    this.ioLayout = anyPipeline.getBindGroupLayout(1);
    const storage = (label: string, bytes: number, extra = 0) =>
      device.createBuffer({ label, size: Math.max(16, bytes), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | extra });
    this.sequenceParams = device.createBuffer({ label: 'sampler_sequence', size: 64, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    this.stepParams = device.createBuffer({
      label: 'sampler_steps',
      size: recordSlots * STEP_SLOT_BYTES,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    this.history = storage('sampler_history', this.quads * 16);
    this.bias = storage('sampler_bias', this.quads * 16);
    this.values = storage('sampler_values', 2 * this.quads * 16);
    this.work = storage('sampler_work', (STATE_WORDS + this.numChunks * CHUNK_STRIDE + MAX_WG * MAX_TOP_LOGPROBS) * 4, GPUBufferUsage.COPY_SRC);
    this.records = storage('sampler_records', recordSlots * RECORD_BYTES, GPUBufferUsage.COPY_SRC);
    this.masks = storage('sampler_masks', recordSlots * this.maskWords * 4);
    this.historyHost = new Uint32Array(this.quads * 4);
    this.biasHost = new Float32Array(this.quads * 4);
    this.stateGroup = device.createBindGroup({
      label: 'sampler_state',
      layout: anyPipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: this.sequenceParams } },
        { binding: 1, resource: { buffer: this.stepParams, size: 16 } },
        { binding: 2, resource: { buffer: this.history } },
        { binding: 3, resource: { buffer: this.bias } },
        { binding: 4, resource: { buffer: this.values } },
        { binding: 5, resource: { buffer: this.work } },
        { binding: 6, resource: { buffer: this.records } },
        { binding: 7, resource: { buffer: this.masks } },
      ],
    });
  }

  /** Compiles the pipelines up front (a compile error rejects with the compiler's messages). */
  static async create(ctx: GpuContext, vocabSize: number, options: GpuSamplerOptions = {}): Promise<GpuSampler> {
    if (!(Number.isInteger(vocabSize) && vocabSize > 0)) throw new RangeError(`vocabSize must be a positive integer, got ${vocabSize}`);
    const recordSlots = options.recordSlots ?? 16;
    if (!(Number.isInteger(recordSlots) && recordSlots > 0)) throw new RangeError(`recordSlots must be a positive integer, got ${recordSlots}`);
    const cache = options.pipelines ?? new PipelineCache(ctx.device);
    // The workgroup of the single-workgroup passes depends on the vocabulary only, so the sums
    // (whose order it sets) are the same on every adapter.
    const chunks = Math.ceil(vocabSize / CHUNK);
    const wg = sampleWorkgroup(chunks);
    const fused = options.fused ?? chunks <= FUSED_MAX_CHUNKS;
    const entryPoints: readonly EntryPoint[] = fused ? ['fused'] : PASS_ENTRY_POINTS;
    const compiled = await Promise.all(entryPoints.map((entryPoint) => cache.prepare(sampleKey(entryPoint, wg), () => sampleSpec(entryPoint, wg))));
    const pipelines = Object.fromEntries(entryPoints.map((name, i) => [name, compiled[i]])) as Partial<Record<EntryPoint, GPUComputePipeline>>;
    return new GpuSampler(ctx, vocabSize, recordSlots, pipelines);
  }

  /** Resets the per-sequence GPU state (prompt mask, generated counts, bias list, params) with queue writes. */
  beginSequence(setup: GpuSequenceSetup): void {
    const V = this.vocabSize;
    const { params } = setup;
    const logprobs = setup.logprobs;
    if (logprobs !== undefined && !(Number.isInteger(logprobs) && logprobs >= 0 && logprobs <= MAX_TOP_LOGPROBS)) {
      throw new RangeError(`logprobs must be an integer in 0..${MAX_TOP_LOGPROBS}, got ${logprobs}`);
    }
    if (!(Number.isInteger(setup.stream) && setup.stream >= 0 && setup.stream < 2 ** 32)) {
      throw new RangeError(`stream must be an integer in [0, 2^32), got ${setup.stream}`);
    }
    if (!(Number.isInteger(setup.minTokens) && setup.minTokens >= 0)) throw new RangeError(`minTokens must be an integer >= 0, got ${setup.minTokens}`);
    const [key0, key1] = philoxKey(setup.seed);

    const history = this.historyHost;
    history.fill(0);
    for (const id of setup.promptTokens) if (id >= 0 && id < V) history[id] = SEEN;
    for (const id of setup.banned) if (id >= 0 && id < V) history[id] |= BANNED;
    const bias = this.biasHost;
    bias.fill(0);
    for (const [id, b] of params.logitBias ?? []) if (id >= 0 && id < V) bias[id] = b;

    // The f32 fields as the shader sees them: the decisions below use the same values.
    const temperature = Math.fround(params.temperature);
    const topK = Math.min(Math.max(0, Math.floor(params.topK ?? 0)), 0xffffffff) >>> 0;
    const topP = Math.fround(params.topP ?? 1);
    const repetition = Math.fround(params.repetitionPenalty ?? 1);
    const presence = Math.fround(params.presencePenalty ?? 0);
    const frequency = Math.fround(params.frequencyPenalty ?? 0);
    const usesHistory = repetition !== 1 || presence !== 0 || frequency !== 0 || (setup.minTokens > 0 && setup.banned.length > 0);
    const flags =
      (params.logitBias && params.logitBias.size > 0 ? HAS_BIAS : 0) | (usesHistory ? USES_HISTORY : 0) | (setup.constrained ? CONSTRAINED : 0);
    const sequence = SAMPLE_SEQUENCE_PARAMS.pack({
      vocab: V,
      num_chunks: this.numChunks,
      n_top: logprobs ?? 0,
      min_tokens: Math.min(setup.minTokens, 0xffffffff),
      temperature,
      top_k: topK,
      top_p: topP,
      min_p: params.minP ?? 0,
      repetition,
      presence,
      frequency,
      key0,
      key1,
      stream: setup.stream,
      quads: this.quads,
      flags,
    });
    const words = new DataView(new ArrayBuffer(sequence.length * 4));
    writeUniformValues(words, sequence);

    const queue = this.device.queue;
    queue.writeBuffer(this.sequenceParams, 0, words.buffer);
    queue.writeBuffer(this.history, 0, history.buffer, history.byteOffset, history.byteLength);
    queue.writeBuffer(this.bias, 0, bias.buffer, bias.byteOffset, bias.byteLength);
    this.sequenceLogprobs = logprobs;
    // The stored f32 decides greedy in the shader; decide it here from the same value.
    this.shape = {
      greedy: temperature === 0,
      plainGreedy: temperature === 0 && flags === 0 && logprobs === undefined,
      selections: (topK > 0 ? 1 : 0) + (topP < 1 ? 1 : 0),
    };
  }

  /**
   * Sets the mask of record slot `slot` (maskWords words: bit `id & 31` of word `id >> 5`, 1 =
   * allowed; bits past the vocabulary are ignored) for a constrained sequence's next step there.
   * A queue write at call time, as encode()'s step parameters: call it before submitting the step
   * that uses the slot, after submitting the one before it that used it.
   */
  setMask(slot: number, mask: Uint32Array): void {
    if (!(Number.isInteger(slot) && slot >= 0 && slot < this.recordSlots)) throw new RangeError(`slot must be in 0..${this.recordSlots - 1}, got ${slot}`);
    if (mask.length !== this.maskWords) throw new RangeError(`a mask has ${this.maskWords} words, got ${mask.length}`);
    this.device.queue.writeBuffer(this.masks, slot * this.maskWords * 4, mask.buffer, mask.byteOffset, mask.byteLength);
  }

  /**
   * Whether the current sequence's tokens are the argmax of the raw logits (the lowest id on
   * ties; never for a constrained sequence), with no top alternatives to record: then a decode step may pick them itself
   * (DecodeStep.greedy), with the same id and the logprob up to rounding (its sum runs in
   * another order).
   */
  get plainGreedy(): boolean {
    return this.shape?.plainGreedy ?? false;
  }

  /**
   * Records into `encoder`: sample step `step` of the sequence from `logits` (f32 [vocab]); write
   * the token id as u32 at byte 0 of `tokenOut`; write the record (id, logprob, top alternatives)
   * to slot `slot` of `records`; count the token for the penalties. The step's parameters go to
   * the slot's own uniform through queue.writeBuffer at call time: submit this encoder before the
   * next encode() of the same slot. Nothing is created per call after the first use of a
   * (logits, tokenOut) pair.
   */
  encode(encoder: GPUCommandEncoder, logits: BufferRegion, step: number, tokenOut: BufferRegion, slot: number): void {
    this.checkStep(step, slot); // before the pass opens: a throw leaves the encoder usable
    const pass = encoder.beginComputePass({ label: 'sample' });
    this.encodeInPass(pass, logits, step, tokenOut, slot);
    pass.end();
  }

  /**
   * encode() into an open compute pass, after (and before) other dispatches: the step's
   * parameters still go through the queue, so the pass must be submitted after this call.
   */
  encodeInPass(pass: GPUComputePassEncoder, logits: BufferRegion, step: number, tokenOut: BufferRegion, slot: number): void {
    const shape = this.checkStep(step, slot);
    const stepWords = this.stepHost;
    writeUniformValues(stepWords, SAMPLE_STEP_PARAMS.pack({ step, slot, _pad0: 0, _pad1: 0 }));
    this.device.queue.writeBuffer(this.stepParams, slot * STEP_SLOT_BYTES, stepWords.buffer, 0, stepWords.byteLength);

    const chunkGroups = Math.ceil(this.numChunks / CHUNK_WORKGROUP);
    pass.setBindGroup(0, this.stateGroup, [slot * STEP_SLOT_BYTES]);
    pass.setBindGroup(1, this.ioGroup(logits, tokenOut));
    const run = (entry: EntryPoint, workgroups: number) => {
      pass.setPipeline(this.pipelines[entry]!);
      pass.dispatchWorkgroups(workgroups);
    };
    if (this.fused) {
      run('fused', 1);
      return;
    }
    run('prepare', chunkGroups);
    run('reduce', 1);
    if (!shape.greedy) {
      run('weigh', chunkGroups);
      run('reduce_weights', 1);
      for (let round = 0; round < shape.selections * DIGIT_ROUNDS; round++) {
        run('histogram', chunkGroups);
        run('select_digit', 1);
      }
      run('draw_mass', chunkGroups);
      run('draw', 1);
    }
  }

  private checkStep(step: number, slot: number): StepShape {
    const shape = this.shape;
    if (!shape) throw new Error('beginSequence() must come before encode()');
    if (!(Number.isInteger(slot) && slot >= 0 && slot < this.recordSlots)) throw new RangeError(`slot must be in 0..${this.recordSlots - 1}, got ${slot}`);
    if (!(Number.isInteger(step) && step >= 0 && step < 2 ** 32)) throw new RangeError(`step must be an integer in [0, 2^32), got ${step}`);
    return shape;
  }

  /** How many dispatches one step of the current sequence records (counters, tests). */
  dispatchesPerStep(): number {
    const shape = this.shape;
    if (!shape) return 0;
    if (this.fused) return 1;
    return shape.greedy ? 2 : 6 + 2 * DIGIT_ROUNDS * shape.selections;
  }

  /**
   * One step on its own: encode, submit, read the record back (tests and measurements; the decode
   * loop uses encode() and reads records in batches).
   */
  async sample(logits: GPUBuffer, step: number, slot = 0): Promise<GeneratedToken> {
    const device = this.device;
    this.oneShot ??= {
      token: device.createBuffer({ label: 'sampler_token', size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC }),
      staging: device.createBuffer({ label: 'sampler_staging', size: RECORD_BYTES, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }),
    };
    const { token, staging } = this.oneShot;
    const encoder = device.createCommandEncoder({ label: 'sample' });
    this.encode(encoder, logits, step, token, slot);
    encoder.copyBufferToBuffer(this.records, slot * RECORD_BYTES, staging, 0, RECORD_BYTES);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const bytes = staging.getMappedRange().slice(0);
    staging.unmap();
    return readRecord(bytes, 0, this.sequenceLogprobs);
  }

  private ioGroup(logitsRegion: BufferRegion, tokenRegion: BufferRegion): GPUBindGroup {
    const logits = regionOf(logitsRegion);
    const token = regionOf(tokenRegion);
    let byOut = this.ioGroups.get(logits.buffer);
    if (!byOut) {
      byOut = new Map();
      this.ioGroups.set(logits.buffer, byOut);
    }
    const key = `${logits.offset}/${token.offset}`;
    let byKey = byOut.get(token.buffer);
    if (!byKey) {
      byKey = new Map();
      byOut.set(token.buffer, byKey);
    }
    let group = byKey.get(key);
    if (!group) {
      // Row regions of shared buffers are bound at their offsets: the logits' [vocab] floats, the token's word.
      const logitsEntry = logits.offset === 0 ? { buffer: logits.buffer } : { buffer: logits.buffer, offset: logits.offset, size: this.vocabSize * 4 };
      const tokenEntry = token.offset === 0 ? { buffer: token.buffer } : { buffer: token.buffer, offset: token.offset, size: 4 };
      group = this.device.createBindGroup({
        label: 'sampler_io',
        layout: this.ioLayout,
        entries: [
          { binding: 0, resource: logitsEntry },
          { binding: 1, resource: tokenEntry },
        ],
      });
      byKey.set(key, group);
    }
    return group;
  }

  destroy(): void {
    for (const buffer of [this.sequenceParams, this.stepParams, this.history, this.bias, this.values, this.work, this.records, this.masks]) buffer.destroy();
    if (this.oneShot) {
      this.oneShot.token.destroy();
      this.oneShot.staging.destroy();
    }
    this.ioGroups.clear();
  }
}

/** Decodes slot `slot` of a copy of `records` (mapped bytes) into a GeneratedToken (topLogprobs only when logprobs was set). */
export function readRecord(bytes: ArrayBuffer, slot: number, logprobs: number | undefined): GeneratedToken {
  const u = new Uint32Array(bytes, slot * RECORD_BYTES, RECORD_WORDS);
  const f = new Float32Array(bytes, slot * RECORD_BYTES, RECORD_WORDS);
  const token: GeneratedToken = { id: u[0], logprob: f[1] };
  if (logprobs !== undefined) {
    const n = Math.min(u[2], logprobs, MAX_TOP_LOGPROBS);
    const top: TokenLogprob[] = [];
    for (let j = 0; j < n; j++) top.push({ id: u[4 + 2 * j], logprob: f[5 + 2 * j] });
    token.topLogprobs = top;
  }
  return token;
}
