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
// A sampler is one sequence state of a SamplerBank (sampler-bank.ts): the prompt's seen-mask and
// the generated counts, the bias and the parameters live in the bank's GPU buffers, written by
// beginSequence(); the counts are updated by the GPU itself as tokens are sampled. Samplers of one
// bank can also be sampled together, one dispatch for all (SamplerBank.encodeRows).
import type { GpuContext } from '../gpu/device.ts';
import type { GeneratedToken, TokenLogprob } from './types.ts';
import { SAMPLE_CONSTANTS } from './sample-layout.ts';
import { RECORD_BYTES, SamplerBank, type BufferRegion, type GpuSequenceSetup, type SamplerBankOptions, type StepShape } from './sampler-bank.ts';

export { RECORD_BYTES, type BufferRegion, type GpuSequenceSetup } from './sampler-bank.ts';

const { RECORD_WORDS } = SAMPLE_CONSTANTS;

/** Most top alternatives a record holds (the API's logprobs maximum). */
export const MAX_TOP_LOGPROBS = SAMPLE_CONSTANTS.MAX_TOP;

export type GpuSamplerOptions = Omit<SamplerBankOptions, 'states'>;

export class GpuSampler {
  /** The bank's records: this sampler's record slot j at byte recordsOffset + j * RECORD_BYTES. */
  readonly records: GPUBuffer;
  readonly recordsOffset: number;
  private shape: StepShape | null = null;
  private oneShot: { token: GPUBuffer; staging: GPUBuffer } | null = null;

  /** State `state` of `bank`; `owned`: the sampler made the bank, and destroy() frees it. */
  constructor(
    readonly bank: SamplerBank,
    readonly state: number,
    private readonly owned = false,
  ) {
    this.records = bank.records;
    this.recordsOffset = bank.recordsOffset(state);
  }

  /** A sampler with a bank of its own (one state). Compiles the pipelines up front. */
  static async create(ctx: GpuContext, vocabSize: number, options: GpuSamplerOptions = {}): Promise<GpuSampler> {
    return new GpuSampler(await SamplerBank.create(ctx, vocabSize, options), 0, true);
  }

  get vocabSize(): number {
    return this.bank.vocabSize;
  }

  get recordSlots(): number {
    return this.bank.recordSlots;
  }

  /** One dispatch per step (small vocabularies), else one per pass. */
  get fused(): boolean {
    return this.bank.fused;
  }

  /** Words of one mask: ceil(vocabSize / 32) (setMask; TokenConstraint.maskWords). */
  get maskWords(): number {
    return this.bank.maskWords;
  }

  /** Resets the per-sequence GPU state (prompt mask, generated counts, bias list, params) with queue writes. */
  beginSequence(setup: GpuSequenceSetup): void {
    this.shape = this.bank.begin(this.state, setup);
  }

  /**
   * Sets the mask of record slot `slot` (maskWords words: bit `id & 31` of word `id >> 5`, 1 =
   * allowed; bits past the vocabulary are ignored) for a constrained sequence's next step there.
   * A queue write at call time, as encode()'s step parameters: call it before submitting the step
   * that uses the slot, after submitting the one before it that used it.
   */
  setMask(slot: number, mask: Uint32Array): void {
    this.bank.setMask(this.state, slot, mask);
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

  /** Top alternatives the current sequence's records carry (undefined: none). */
  get logprobs(): number | undefined {
    return this.shape?.logprobs;
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
    this.bank.checkStep(this.state, step, slot); // before the pass opens: a throw leaves the encoder usable
    const pass = encoder.beginComputePass({ label: 'sample' });
    this.encodeInPass(pass, logits, step, tokenOut, slot);
    pass.end();
  }

  /**
   * encode() into an open compute pass, after (and before) other dispatches: the step's
   * parameters still go through the queue, so the pass must be submitted after this call.
   */
  encodeInPass(pass: GPUComputePassEncoder, logits: BufferRegion, step: number, tokenOut: BufferRegion, slot: number): void {
    this.bank.encodeOne(pass, { state: this.state, step, slot, logits, token: tokenOut });
  }

  /** How many dispatches one step of the current sequence records (counters, tests). */
  dispatchesPerStep(): number {
    return this.shape ? this.bank.dispatchesFor([this.state]) : 0;
  }

  /**
   * One step on its own: encode, submit, read the record back (tests and measurements; the decode
   * loop uses encode() and reads records in batches).
   */
  async sample(logits: GPUBuffer, step: number, slot = 0): Promise<GeneratedToken> {
    const gpu = this.bank.device;
    this.oneShot ??= {
      token: gpu.createBuffer({ label: 'sampler_token', size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC }),
      staging: gpu.createBuffer({ label: 'sampler_staging', size: RECORD_BYTES, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }),
    };
    const { token, staging } = this.oneShot;
    const encoder = gpu.createCommandEncoder({ label: 'sample' });
    this.encode(encoder, logits, step, token, slot);
    encoder.copyBufferToBuffer(this.records, this.recordsOffset + slot * RECORD_BYTES, staging, 0, RECORD_BYTES);
    gpu.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const bytes = staging.getMappedRange().slice(0);
    staging.unmap();
    return readRecord(bytes, 0, this.logprobs);
  }

  /** Frees the bank when the sampler made it (GpuSampler.create); a bank's own samplers are freed with it. */
  destroy(): void {
    if (this.owned) this.bank.destroy();
    if (this.oneShot) {
      this.oneShot.token.destroy();
      this.oneShot.staging.destroy();
      this.oneShot = null;
    }
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
