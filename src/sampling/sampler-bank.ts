// The GPU sampling chain's state for several sequences at once, in shared buffers, so that one
// set of dispatches samples a row of each (continuous batching: every row with its own parameters,
// seed, penalties, bias, logprobs and mask). A sampler (gpu-sampler.ts) is one state of a bank;
// the state owns a region of every buffer:
//
//   seqs      uniform, Sequence[states]       its parameters (beginSequence)
//   steps     uniform, one Step per dispatch  the rows of a dispatch: state, step, offsets
//   history   quads of u32 flags and counts   the repetition penalty's memory, updated on the GPU
//   bias      quads of f32                    logit_bias
//   vals      2 x quads                       the step's keys and weights (scratch)
//   work      words                           the passes' partial results (scratch)
//   records   recordSlots records             what a step samples: id, logprob, alternatives
//   masks     recordSlots masks               structured output's allowed ids per record slot
//
// Every workgroup samples one row (workgroup_id.y) from its own regions, with the arithmetic, in
// the order, that it runs alone: a row's token and logprobs are the same in any batch. The
// constants the shader shares with this file come from sample-layout.ts, composed into the shader
// as a prelude; the pipelines come from a PipelineCache, so a device compiles each (entry point,
// workgroup, rows) once.
import type { GpuContext } from '../gpu/device.ts';
import { UNIFORM_SLOT_BYTES, writeUniformValues } from '../gpu/uniforms.ts';
import { PipelineCache, type ShaderSpec } from '../gpu/pipelines.ts';
import type { SamplingParams } from './types.ts';
import { philoxKey } from './philox.ts';
import {
  MAX_WG,
  maskWordsFor,
  ROW_STEP_WORDS,
  SAMPLE_CONSTANTS,
  SAMPLE_ROW_PARAMS,
  SAMPLE_SEQUENCE_PARAMS,
  sampleWgslPrelude,
  sampleWorkgroup,
  STEP_HEADER_WORDS,
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

export function regionOf(r: BufferRegion): { buffer: GPUBuffer; offset: number } {
  return 'offset' in r && 'buffer' in r ? r : { buffer: r as GPUBuffer, offset: 0 };
}

/** One row of a batched dispatch: state `state` samples step `step` from `logits` into `token`, recording at its record slot `slot`. */
export interface SampleRow {
  state: number;
  step: number;
  slot: number;
  /** Its f32 [vocab] logits and its u32 token: regions of the dispatch's two buffers (every row's in the same two). */
  logits: BufferRegion;
  token: BufferRegion;
}

export interface SamplerBankOptions {
  /** Sequences the bank holds (samplers), and the most rows a dispatch samples. Default 1. */
  states?: number;
  /** Record slots per state (and dispatches per submit): steps encoded before one submit use distinct slots. Default 16. */
  recordSlots?: number;
  /**
   * Run the whole step as one dispatch (true) or one dispatch per pass (false). Default: one
   * dispatch up to 64 chunks of 128 ids (8192 ids). Both give the same results.
   */
  fused?: boolean;
  /** Where the pipelines are compiled and kept. Default: a cache of the device's (which shares what its caches compiled). */
  pipelines?: PipelineCache;
}

/** How a sequence's steps are recorded (decided by its parameters, at beginSequence). */
export interface StepShape {
  greedy: boolean;
  /** Greedy on the raw logits (no mask, bias, penalties or min_tokens ban) and no top alternatives asked. */
  plainGreedy: boolean;
  /** Radix selections per step: top_k, top_p, or both. */
  selections: number;
  logprobs: number | undefined;
}

const { CHUNK, CHUNK_WORKGROUP, STATE_WORDS, CHUNK_STRIDE, SEEN, BANNED, HAS_BIAS, USES_HISTORY, CONSTRAINED, DIGIT_ROUNDS, RECORD_WORDS, MAX_TOP } = SAMPLE_CONSTANTS;

/** Bytes of one record: u32 id, f32 logprob, u32 count, u32 0, then count x (u32 id, f32 logprob). */
export const RECORD_BYTES = RECORD_WORDS * 4;
/** A Sequence's stride in the uniform array: its size rounded up to 16 bytes, as WGSL lays arrays out in uniforms. */
const SEQUENCE_BYTES = Math.ceil((SAMPLE_SEQUENCE_PARAMS.fields.length * 4) / 16) * 16;
/** The uniform limits every device has (maxUniformBufferBindingSize): the sequences' array and a dispatch's Step fit in them. */
const MAX_UNIFORM_BINDING_BYTES = 65536;

/**
 * Vocabularies of at most this many chunks run the whole step as one dispatch of one workgroup
 * a row ('fused'): on SwiftShader a dispatch costs more than a pass over 8k logits.
 */
const FUSED_MAX_CHUNKS = 64;

const PASS_ENTRY_POINTS = ['prepare', 'reduce', 'weigh', 'reduce_weights', 'histogram', 'select_digit', 'draw_mass', 'draw'] as const;
type EntryPoint = (typeof PASS_ENTRY_POINTS)[number] | 'fused';

/**
 * The bindings of sample.wgsl: group 0 the bank's state (binding 1, a dispatch's Step, at its
 * uniform slot's offset; binding 7, the masks), group 1 the logits and where the tokens go.
 * Explicit, so that one bind group serves every entry point. Eight storage buffers: every device's
 * maxStorageBuffersPerShaderStage, so another one must share a buffer.
 */
const SAMPLE_LAYOUT: ShaderSpec['layout'] = [
  [
    { type: 'uniform' },
    { type: 'uniform', hasDynamicOffset: true },
    { type: 'storage' },
    { type: 'read-only-storage' },
    { type: 'storage' },
    { type: 'storage' },
    { type: 'storage' },
    { type: 'read-only-storage' },
  ],
  [{ type: 'read-only-storage' }, { type: 'storage' }],
];

/** The cache key of an entry point: every composed constant that varies. */
const sampleKey = (entryPoint: EntryPoint, wg: number, rows: number) => `sample/${entryPoint}/wg${wg}/rows${rows}`;

function sampleSpec(entryPoint: EntryPoint, wg: number, rows: number): ShaderSpec {
  return { code: sampleWgslPrelude(wg, rows) + sampleWgsl, entryPoint, layout: SAMPLE_LAYOUT };
}

export class SamplerBank {
  /** Every state's records: state s's slot j at byte (s * recordSlots + j) * RECORD_BYTES. */
  readonly records: GPUBuffer;
  /** One dispatch per step (small vocabularies), else one per pass. */
  readonly fused: boolean;
  /** Words of one mask: ceil(vocabSize / 32) (setMask; TokenConstraint.maskWords). */
  readonly maskWords: number;
  readonly device: GPUDevice;
  private readonly numChunks: number;
  /** ceil(vocab / 4): the per-id arrays are read as vec4s and padded to whole quads. */
  private readonly quads: number;
  private readonly workWords: number;
  private readonly sequences: GPUBuffer;
  /**
   * The dispatches' Steps: recordSlots slots of stepSlotBytes for batched dispatches, then a
   * 256-byte slot for each state's record slot (a dispatch of that state alone, one row), then
   * room for the binding's whole window after the last.
   */
  private readonly steps: GPUBuffer;
  private readonly stepSlotBytes: number;
  private readonly stepBytes: number;
  private readonly history: GPUBuffer;
  private readonly bias: GPUBuffer;
  private readonly values: GPUBuffer;
  private readonly work: GPUBuffer;
  private readonly masks: GPUBuffer;
  private readonly stateGroup: GPUBindGroup;
  private readonly ioGroups = new Map<GPUBuffer, Map<GPUBuffer, Map<string, GPUBindGroup>>>();
  private readonly ioLayout: GPUBindGroupLayout;
  /** Host copies reused by begin() and the step writes (no allocation per sequence or step). */
  private readonly historyHost: Uint32Array;
  private readonly biasHost: Float32Array;
  private readonly stepHost: DataView;
  private readonly shapes: (StepShape | undefined)[];
  private destroyed = false;

  private constructor(
    ctx: GpuContext,
    readonly vocabSize: number,
    readonly states: number,
    readonly recordSlots: number,
    private readonly pipelines: Partial<Record<EntryPoint, GPUComputePipeline>>,
  ) {
    const device = ctx.device;
    this.device = device;
    this.numChunks = Math.ceil(vocabSize / CHUNK);
    this.quads = Math.ceil(vocabSize / 4);
    this.maskWords = maskWordsFor(vocabSize);
    this.workWords = STATE_WORDS + this.numChunks * CHUNK_STRIDE + MAX_WG * MAX_TOP;
    this.fused = 'fused' in pipelines;
    this.shapes = new Array<StepShape | undefined>(states).fill(undefined);
    // Every entry point has the same explicit layout: any pipeline's bind group layouts serve all.
    const anyPipeline = (pipelines.fused ?? pipelines.prepare)!;
    this.ioLayout = anyPipeline.getBindGroupLayout(1);
    const storage = (label: string, bytes: number, extra = 0) =>
      device.createBuffer({ label, size: Math.max(16, bytes), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | extra });
    const stepBytes = (STEP_HEADER_WORDS + states * ROW_STEP_WORDS) * 4;
    this.stepBytes = stepBytes;
    this.stepSlotBytes = Math.ceil(stepBytes / UNIFORM_SLOT_BYTES) * UNIFORM_SLOT_BYTES;
    this.stepHost = new DataView(new ArrayBuffer(stepBytes));
    this.sequences = device.createBuffer({ label: 'sampler_sequences', size: states * SEQUENCE_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    this.steps = device.createBuffer({
      label: 'sampler_steps',
      size: this.soloStepOffset(states, 0) + stepBytes,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    this.history = storage('sampler_history', states * this.quads * 16);
    this.bias = storage('sampler_bias', states * this.quads * 16);
    this.values = storage('sampler_values', states * 2 * this.quads * 16);
    this.work = storage('sampler_work', states * this.workWords * 4, GPUBufferUsage.COPY_SRC);
    this.records = storage('sampler_records', states * recordSlots * RECORD_BYTES, GPUBufferUsage.COPY_SRC);
    this.masks = storage('sampler_masks', states * recordSlots * this.maskWords * 4);
    this.historyHost = new Uint32Array(this.quads * 4);
    this.biasHost = new Float32Array(this.quads * 4);
    this.stateGroup = device.createBindGroup({
      label: 'sampler_state',
      layout: anyPipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: this.sequences } },
        { binding: 1, resource: { buffer: this.steps, size: this.stepBytes } },
        { binding: 2, resource: { buffer: this.history } },
        { binding: 3, resource: { buffer: this.bias } },
        { binding: 4, resource: { buffer: this.values } },
        { binding: 5, resource: { buffer: this.work } },
        { binding: 6, resource: { buffer: this.records } },
        { binding: 7, resource: { buffer: this.masks } },
      ],
    });
  }

  /**
   * The most states one bank of this vocabulary holds on a device with these limits: every
   * buffer of the bank is bound whole, so each must fit a storage binding, and the sequences'
   * array and a dispatch's rows a uniform one.
   */
  static maxStates(limits: { maxStorageBufferBindingSize: number; maxBufferSize: number }, vocabSize: number, recordSlots: number): number {
    const quads = Math.ceil(vocabSize / 4);
    const workWords = STATE_WORDS + Math.ceil(vocabSize / CHUNK) * CHUNK_STRIDE + MAX_WG * MAX_TOP;
    const largest = Math.max(2 * quads * 16, workWords * 4, recordSlots * RECORD_BYTES, recordSlots * maskWordsFor(vocabSize) * 4);
    const storage = Math.floor(Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize) / largest);
    const uniform = Math.min(
      Math.floor(MAX_UNIFORM_BINDING_BYTES / SEQUENCE_BYTES),
      Math.floor((MAX_UNIFORM_BINDING_BYTES - STEP_HEADER_WORDS * 4) / (ROW_STEP_WORDS * 4)),
    );
    return Math.max(1, Math.min(storage, uniform));
  }

  /** Compiles the pipelines up front (a compile error rejects with the compiler's messages). */
  static async create(ctx: GpuContext, vocabSize: number, options: SamplerBankOptions = {}): Promise<SamplerBank> {
    if (!(Number.isInteger(vocabSize) && vocabSize > 0)) throw new RangeError(`vocabSize must be a positive integer, got ${vocabSize}`);
    const states = options.states ?? 1;
    if (!(Number.isInteger(states) && states > 0)) throw new RangeError(`states must be a positive integer, got ${states}`);
    const recordSlots = options.recordSlots ?? 16;
    if (!(Number.isInteger(recordSlots) && recordSlots > 0)) throw new RangeError(`recordSlots must be a positive integer, got ${recordSlots}`);
    const cache = options.pipelines ?? new PipelineCache(ctx.device);
    // The workgroup of the single-workgroup passes depends on the vocabulary only, so the sums
    // (whose order it sets) are the same on every adapter.
    const chunks = Math.ceil(vocabSize / CHUNK);
    const wg = sampleWorkgroup(chunks);
    const fused = options.fused ?? chunks <= FUSED_MAX_CHUNKS;
    const entryPoints: readonly EntryPoint[] = fused ? ['fused'] : PASS_ENTRY_POINTS;
    const compiled = await Promise.all(entryPoints.map((entryPoint) => cache.prepare(sampleKey(entryPoint, wg, states), () => sampleSpec(entryPoint, wg, states))));
    const pipelines = Object.fromEntries(entryPoints.map((name, i) => [name, compiled[i]])) as Partial<Record<EntryPoint, GPUComputePipeline>>;
    return new SamplerBank(ctx, vocabSize, states, recordSlots, pipelines);
  }

  /** Resets state `state`'s sequence (prompt mask, generated counts, bias, parameters) with queue writes. */
  begin(state: number, setup: GpuSequenceSetup): StepShape {
    this.checkState(state);
    const V = this.vocabSize;
    const { params } = setup;
    const logprobs = setup.logprobs;
    if (logprobs !== undefined && !(Number.isInteger(logprobs) && logprobs >= 0 && logprobs <= MAX_TOP)) {
      throw new RangeError(`logprobs must be an integer in 0..${MAX_TOP}, got ${logprobs}`);
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
    const words = new DataView(new ArrayBuffer(SEQUENCE_BYTES));
    writeUniformValues(words, sequence);

    const queue = this.device.queue;
    const quadBytes = this.quads * 16;
    queue.writeBuffer(this.sequences, state * SEQUENCE_BYTES, words.buffer);
    queue.writeBuffer(this.history, state * quadBytes, history.buffer, history.byteOffset, history.byteLength);
    queue.writeBuffer(this.bias, state * quadBytes, bias.buffer, bias.byteOffset, bias.byteLength);
    // The stored f32 decides greedy in the shader; decide it here from the same value.
    const shape: StepShape = {
      greedy: temperature === 0,
      plainGreedy: temperature === 0 && flags === 0 && logprobs === undefined,
      selections: (topK > 0 ? 1 : 0) + (topP < 1 ? 1 : 0),
      logprobs,
    };
    this.shapes[state] = shape;
    return shape;
  }

  /** The mask of state `state`'s record slot `slot` (GpuSampler.setMask). */
  setMask(state: number, slot: number, mask: Uint32Array): void {
    this.checkState(state);
    this.checkSlot(slot);
    if (mask.length !== this.maskWords) throw new RangeError(`a mask has ${this.maskWords} words, got ${mask.length}`);
    const at = (state * this.recordSlots + slot) * this.maskWords * 4;
    this.device.queue.writeBuffer(this.masks, at, mask.buffer, mask.byteOffset, mask.byteLength);
  }

  /** Byte offset of state `state`'s records in `records`. */
  recordsOffset(state: number): number {
    return state * this.recordSlots * RECORD_BYTES;
  }

  /** How many dispatches one step of these states' sequences records together. */
  dispatchesFor(states: readonly number[]): number {
    const shapes = states.map((s) => this.shapeOf(s));
    if (this.fused) return 1;
    const sampled = shapes.filter((shape) => !shape.greedy);
    if (sampled.length === 0) return 2;
    return 6 + 2 * DIGIT_ROUNDS * Math.max(...sampled.map((shape) => shape.selections));
  }

  /**
   * Records into an open compute pass one step of every row: each samples its state's sequence
   * at its step from its logits, writes its token, records it at its record slot, and counts it
   * for the penalties. Rows take distinct states; every row's logits lie in one buffer and every
   * row's token in one buffer. The rows go to the uniform slot `dispatch` through a queue write
   * at call time: dispatches encoded before one submit use distinct slots (0 .. recordSlots - 1).
   */
  encodeRows(pass: GPUComputePassEncoder, rows: readonly SampleRow[], dispatch: number): void {
    if (rows.length === 0) return;
    if (rows.length > this.states) throw new RangeError(`a dispatch samples at most ${this.states} rows, got ${rows.length}`);
    this.checkSlot(dispatch);
    this.encode(pass, rows, dispatch * this.stepSlotBytes);
  }

  /** One row on its own, in the state's own uniform slot for its record slot (GpuSampler.encodeInPass). */
  encodeOne(pass: GPUComputePassEncoder, row: SampleRow): void {
    this.encode(pass, [row], this.soloStepOffset(row.state, row.slot));
  }

  /** Where a dispatch of state `state` alone, recording at `slot`, keeps its Step (after the batched slots). */
  private soloStepOffset(state: number, slot: number): number {
    return this.recordSlots * this.stepSlotBytes + (state * this.recordSlots + slot) * UNIFORM_SLOT_BYTES;
  }

  /** Checks what a step of state `state` at `step` into record slot `slot` needs, before a pass opens. */
  checkStep(state: number, step: number, slot: number): StepShape {
    const shape = this.shapeOf(state);
    this.checkSlot(slot);
    if (!(Number.isInteger(step) && step >= 0 && step < 2 ** 32)) throw new RangeError(`step must be an integer in [0, 2^32), got ${step}`);
    return shape;
  }

  shapeOf(state: number): StepShape {
    this.checkState(state);
    const shape = this.shapes[state];
    if (!shape) throw new Error('beginSequence() must come before encode()');
    return shape;
  }

  private encode(pass: GPUComputePassEncoder, rows: readonly SampleRow[], stepOffset: number): void {
    const shapes = rows.map((row) => this.checkStep(row.state, row.step, row.slot));
    const logits = regionOf(rows[0]!.logits).buffer;
    const tokens = regionOf(rows[0]!.token).buffer;
    const seen = new Set<number>();
    const view = this.stepHost;
    view.setUint32(0, rows.length, true);
    for (let i = 1; i < STEP_HEADER_WORDS; i++) view.setUint32(i * 4, 0, true);
    // One row alone is bound at its regions' offsets; rows together, at their buffers' starts.
    const alone = rows.length === 1;
    rows.forEach((row, r) => {
      const l = regionOf(row.logits);
      const t = regionOf(row.token);
      if (l.buffer !== logits || t.buffer !== tokens) throw new Error('the rows of a dispatch must share one logits buffer and one token buffer');
      if (seen.has(row.state)) throw new Error(`state ${row.state} is in a dispatch twice`);
      seen.add(row.state);
      const slotIndex = row.state * this.recordSlots + row.slot;
      const values = SAMPLE_ROW_PARAMS.pack({
        state: row.state,
        step: row.step,
        logits: alone ? 0 : l.offset / 4,
        token: alone ? 0 : t.offset / 4,
        hist: row.state * this.quads,
        vals: row.state * 2 * this.quads,
        work: row.state * this.workWords,
        record: slotIndex * RECORD_WORDS,
        mask: slotIndex * this.maskWords,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
      });
      const at = (STEP_HEADER_WORDS + r * ROW_STEP_WORDS) * 4;
      values.forEach((v, i) => view.setUint32(at + i * 4, v as number, true));
    });
    const bytes = (STEP_HEADER_WORDS + rows.length * ROW_STEP_WORDS) * 4;
    this.device.queue.writeBuffer(this.steps, stepOffset, view.buffer, 0, bytes);

    const n = rows.length;
    pass.setBindGroup(0, this.stateGroup, [stepOffset]);
    pass.setBindGroup(1, alone ? this.ioGroup(rows[0]!.logits, rows[0]!.token) : this.ioGroup(logits, tokens));
    const run = (entry: EntryPoint, workgroups: number) => {
      pass.setPipeline(this.pipelines[entry]!);
      pass.dispatchWorkgroups(workgroups, n);
    };
    if (this.fused) {
      run('fused', 1);
      return;
    }
    const chunkGroups = Math.ceil(this.numChunks / CHUNK_WORKGROUP);
    run('prepare', chunkGroups);
    run('reduce', 1);
    const sampled = shapes.filter((shape) => !shape.greedy);
    if (sampled.length === 0) return;
    run('weigh', chunkGroups);
    run('reduce_weights', 1);
    // Rows with fewer selections run the extra rounds as no-ops (the shader's S_MODE 0).
    const rounds = Math.max(...sampled.map((shape) => shape.selections)) * DIGIT_ROUNDS;
    for (let round = 0; round < rounds; round++) {
      run('histogram', chunkGroups);
      run('select_digit', 1);
    }
    run('draw_mass', chunkGroups);
    run('draw', 1);
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
      // A row alone is bound at its regions: the logits' [vocab] floats, the token's word; rows together, whole buffers.
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

  private checkState(state: number): void {
    if (!(Number.isInteger(state) && state >= 0 && state < this.states)) throw new RangeError(`state must be in 0..${this.states - 1}, got ${state}`);
  }

  private checkSlot(slot: number): void {
    if (!(Number.isInteger(slot) && slot >= 0 && slot < this.recordSlots)) throw new RangeError(`slot must be in 0..${this.recordSlots - 1}, got ${slot}`);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    for (const buffer of [this.sequences, this.steps, this.history, this.bias, this.values, this.work, this.records, this.masks]) buffer.destroy();
    this.ioGroups.clear();
  }
}
