// The decode loop without a GPU->CPU round trip per token.
//
// Step s of a sequence is the decode step (the token the GPU sampler wrote at step s-1, at position
// P + s - 1; step 0 has none and samples the prefill's logits), then the GPU sampler, which writes
// the new token where the next step's embedding reads it and writes the token's record (id,
// logprob, top alternatives) to slot j of the sampler's record buffer.
//
// A plain greedy sequence (no bias, penalties or top alternatives) skips the sampler where the
// step can pick the argmax itself (DecodeStep.greedy): the step then writes the token and a short
// record of its own, and the batch copies those.
//
// Steps go in batches of B, one command buffer and one submit per batch (in Chromium each submit
// crosses to the GPU process, which costs more than a small model's step; measurements:
// docs/tuning.md#decode-batches). Where the decode step advances its own position
// (DecodeStep.consecutive), the batch's steps and samplings are also one compute pass after one
// position copy, rather than a copy and two passes a step. The batch ends by copying its B records
// to a staging buffer, which is mapped; while the CPU waits for batch i (and then hands its tokens
// on), batch i+1 is already queued, so the GPU never waits for the CPU. B starts at 1 (the first
// token comes back at once) and grows while steps are fast, so that one read-back serves many
// tokens but a batch never takes much longer than TARGET_BATCH_MS: tokens still stream smoothly,
// and when a sequence stops (EOS, a stop string, abort) at most about two batches of work were done
// for nothing — their tokens are discarded, never returned.
import type { DecodeStep } from '../model/llama.ts';
import { readRecord, RECORD_BYTES, type GpuSampler } from '../sampling/gpu-sampler.ts';
import type { GeneratedToken } from './types.ts';

/** Most steps one read-back may carry. */
export const MAX_BATCH_STEPS = 32;
/** How long one batch of steps should take on the GPU, once the step time is known. */
export const TARGET_BATCH_MS = 20;

/**
 * Steps in batch number `index` (0, 1, 2, ...) of a sequence: 1, 2, 4, ... up to MAX_BATCH_STEPS,
 * so the first tokens come back at once, and once the time of one step is known (`stepMs`), no
 * more than fit in TARGET_BATCH_MS (at least 1): a slow model streams token by token, with the
 * next step always queued behind the one being read.
 */
export function batchSteps(index: number, stepMs: number | undefined): number {
  let size = Math.min(MAX_BATCH_STEPS, 2 ** Math.min(index, 30));
  if (stepMs !== undefined && stepMs > 0) size = Math.min(size, Math.max(1, Math.floor(TARGET_BATCH_MS / stepMs)));
  return size;
}

/** Record j of a copy of the decode step's greedy records (DecodeStep.greedy): u32 id, f32 logprob. */
function readGreedyRecord(bytes: ArrayBuffer, j: number, recordBytes: number): GeneratedToken {
  const view = new DataView(bytes, j * recordBytes, 8);
  return { id: view.getUint32(0, true), logprob: view.getFloat32(4, true) };
}

/** What the pipeline runs: shared by the sequences of a generator, one sequence at a time. */
export interface DecodeResources {
  readonly device: GPUDevice;
  readonly decodeStep: DecodeStep;
  readonly sampler: GpuSampler;
  /** Two MAP_READ buffers of MAX_BATCH_STEPS records (RECORD_BYTES each): one is read while the next batch fills the other. */
  readonly staging: readonly [GPUBuffer, GPUBuffer];
}

export interface DecodePlan {
  /** Prompt length: step s (s >= 1) runs the model on the token of step s - 1 at position P + s - 1. */
  promptLength: number;
  /** Steps to run at most (tokens the sequence may produce: max_tokens and the context). */
  maxSteps: number;
  /** The prefill's last logits (f32 [vocab]), sampled by step 0. */
  prefillLogits: GPUBuffer;
  /** Top alternatives per token, as the records carry them (undefined: none). */
  logprobs: number | undefined;
}

interface Batch {
  count: number;
  staging: GPUBuffer;
  mapped: Promise<void>;
  /** Bytes of one of its records, and record j of a copy of the mapped bytes (the sampler's format, or the decode step's greedy one). */
  recordBytes: number;
  read(bytes: ArrayBuffer, j: number): GeneratedToken;
}

/**
 * Runs the steps of one sequence and yields its tokens in order. The caller has already called
 * sampler.beginSequence(). Ending the iteration early (return(), a throw) waits for the batches in
 * flight, so the staging buffers are unmapped and free for the next sequence when it returns.
 * `beforeSubmit` runs before each batch is submitted (abort checks: throwing stops the sequence).
 */
export async function* decodeTokens(
  resources: DecodeResources,
  plan: DecodePlan,
  beforeSubmit: () => void,
): AsyncGenerator<GeneratedToken, void, void> {
  const { device, decodeStep, sampler } = resources;
  // A plain greedy sequence lets the step pick its tokens itself (no sampler dispatch), from step
  // 1 on: step 0 samples the prefill's logits, in a batch of its own.
  const greedy = decodeStep.consecutive && sampler.plainGreedy ? decodeStep.greedy : undefined;
  const inFlight: Batch[] = [];
  let submitted = 0;
  let batches = 0;
  let stepMs: number | undefined;
  let lastResolved: number | undefined;

  const nextBatchSize = (): number =>
    Math.min(submitted === 0 ? 1 : batchSteps(batches, stepMs), plan.maxSteps - submitted, greedy ? greedy.records.slots : sampler.recordSlots);

  const submitBatch = (count: number): void => {
    beforeSubmit();
    const staging = resources.staging[batches % 2];
    const encoder = device.createCommandEncoder({ label: `decode steps ${submitted}..${submitted + count - 1}` });
    const consecutive = decodeStep.consecutive;
    if (consecutive) {
      // One copy of the first position, then every step and its sampling in one compute pass.
      const first = Math.max(1, submitted); // step 0 samples the prefill's logits: no model step
      const end = submitted + count;
      if (first < end) consecutive.setPosition(encoder, plan.promptLength + first - 1, end - first);
      const pass = encoder.beginComputePass({ label: 'decode steps' });
      for (let j = 0; j < count; j++) {
        const step = submitted + j;
        if (step > 0 && greedy) {
          greedy.encodeInPass(pass);
          continue;
        }
        if (step > 0) consecutive.encodeInPass(pass);
        sampler.encodeInPass(pass, step === 0 ? plan.prefillLogits : decodeStep.logits, step, decodeStep.tokenIn, j);
      }
      pass.end();
    } else {
      for (let j = 0; j < count; j++) {
        const step = submitted + j;
        if (step === 0) {
          sampler.encode(encoder, plan.prefillLogits, 0, decodeStep.tokenIn, j);
        } else {
          decodeStep.encodeStep(encoder, plan.promptLength + step - 1);
          sampler.encode(encoder, decodeStep.logits, step, decodeStep.tokenIn, j);
        }
      }
    }
    const records = copyRecords(encoder, staging, count);
    device.queue.submit([encoder.finish()]);
    inFlight.push({ count, staging, mapped: staging.mapAsync(GPUMapMode.READ, 0, count * records.recordBytes), ...records });
    submitted += count;
    batches++;
  };

  /** Copies the records of the `count` steps from `submitted` on to `staging`: the sampler's, or those the greedy steps wrote. */
  const copyRecords = (encoder: GPUCommandEncoder, staging: GPUBuffer, count: number): Pick<Batch, 'recordBytes' | 'read'> => {
    if (!greedy || submitted === 0) {
      encoder.copyBufferToBuffer(sampler.records, sampler.recordsOffset, staging, 0, count * RECORD_BYTES);
      return { recordBytes: RECORD_BYTES, read: (bytes, j) => readRecord(bytes, j, plan.logprobs) };
    }
    // The step at position p wrote record slot p mod slots: the batch's slots, wrapping at most once.
    const { buffer, offset, bytes: recordBytes, slots } = greedy.records;
    const firstSlot = (plan.promptLength + submitted - 1) % slots;
    const head = Math.min(count, slots - firstSlot);
    encoder.copyBufferToBuffer(buffer, offset + firstSlot * recordBytes, staging, 0, head * recordBytes);
    if (head < count) encoder.copyBufferToBuffer(buffer, offset, staging, head * recordBytes, (count - head) * recordBytes);
    return { recordBytes, read: (bytes, j) => readGreedyRecord(bytes, j, recordBytes) };
  };

  try {
    // Two batches in flight: the GPU works on the second while the first is read.
    for (let i = 0; i < 2; i++) {
      const size = nextBatchSize();
      if (size > 0) submitBatch(size);
    }
    while (inFlight.length > 0) {
      const batch = inFlight[0];
      await batch.mapped;
      inFlight.shift();
      const now = performance.now();
      // The GPU had batch i queued before batch i-1 came back, so it was busy in between.
      if (lastResolved !== undefined) {
        const measured = (now - lastResolved) / batch.count;
        stepMs = stepMs === undefined ? measured : 0.5 * stepMs + 0.5 * measured;
      }
      lastResolved = now;
      const bytes = batch.staging.getMappedRange(0, batch.count * batch.recordBytes).slice(0);
      batch.staging.unmap();
      // Queue the next batch before handing tokens on: the consumer's work overlaps the GPU's.
      const size = nextBatchSize();
      if (size > 0) submitBatch(size);
      for (let j = 0; j < batch.count; j++) yield batch.read(bytes, j);
    }
  } finally {
    // Batches past the end (a stop, an abort): wait for them so their staging buffers are unmapped.
    for (const batch of inFlight) {
      try {
        await batch.mapped;
        batch.staging.unmap();
      } catch {
        // A lost device or a destroyed buffer: nothing left to unmap.
      }
    }
  }
}
