// The decode loop of a constrained sequence (structured output: SequenceOptions.constraint). Each
// sampled token is drawn among those the constraint allows, and the constraint's next mask depends
// on that token, so unlike the free loop (decode-pipeline.ts) a step waits for the token before it.
//
// Step s (s >= 1) is the model run at position P + s - 1 on the token of step s - 1 (already in
// decodeStep.tokenIn: the sampler wrote it there), then the sampler with the step's mask; step 0
// samples the prefill's logits. Steps go in rounds of one submit and one read-back: first the
// tokens the grammar forces from here (jump-forward, constraint.forced()), each a step whose mask
// allows that token alone, so that the sampler records it as if it were sampled (raw logprob,
// alternatives, penalty counts, the step's Philox number), then one sampled step with the
// grammar's mask. The model run of a round's first step needs no mask: it is submitted on its own
// right behind the round before, so the GPU runs it while the CPU reads that round back, advances
// the grammar and computes the next mask.
import { readRecord, RECORD_BYTES } from '../sampling/gpu-sampler.ts';
import type { GeneratedToken, TokenConstraint } from '../sampling/types.ts';
import type { DecodePlan, DecodeResources } from './decode-pipeline.ts';

export interface ConstrainedPlan extends DecodePlan {
  /** The sequence's grammar; the loop tells it each sampled token (forced ones it has accepted itself). */
  constraint: TokenConstraint;
  /** The sequence's stop ids: a mask that allows nothing else ends the sequence. */
  stopTokenIds: readonly number[];
}

/** What follows the grammar's state: forced tokens, then one sampled step (its mask filled) or the end. */
interface Stretch {
  forced: number[];
  sample: boolean;
}

/** A submitted round: its steps from `first`, the forced tokens, then a sampled step if `sampled`. */
interface Round {
  first: number;
  forced: number[];
  sampled: boolean;
  mapped: Promise<void>;
}

/**
 * Runs the steps of one constrained sequence and yields its tokens in order, forced ones with
 * `forced: true`. A sampled stop id is yielded (the caller ends there, as with decodeTokens) and
 * ends the loop. The loop ends before plan.maxSteps tokens only when the grammar allows nothing
 * but stop ids, or nothing at all, or forces a stop id: the sequence is complete. The caller has
 * called sampler.beginSequence({ constrained: true }). Ending the iteration early (return(), a
 * throw) waits for the round in flight, so the staging buffers are unmapped when it returns.
 * `beforeSubmit` runs before each round is submitted (abort checks: throwing stops the sequence).
 */
export async function* decodeConstrained(
  resources: DecodeResources,
  plan: ConstrainedPlan,
  beforeSubmit: () => void,
): AsyncGenerator<GeneratedToken, void, void> {
  const { device, decodeStep, sampler } = resources;
  const { constraint, maxSteps, promptLength: P } = plan;
  if (constraint.maskWords !== sampler.maskWords) {
    throw new Error(`the constraint's masks have ${constraint.maskWords} words; the sampler's have ${sampler.maskWords}`);
  }
  const vocab = sampler.vocabSize;
  const stops = new Set(plan.stopTokenIds);
  const stopMask = new Uint32Array(sampler.maskWords);
  for (const id of stops) if (id >= 0 && id < vocab) stopMask[id >>> 5] |= 1 << (id & 31);
  const mask = new Uint32Array(sampler.maskWords);
  const single = new Uint32Array(sampler.maskWords);
  const staging = resources.staging[0];
  /** The next step to submit. */
  let next = 0;
  let inFlight: Round | undefined;

  /**
   * The grammar's forced tokens from here (at most the steps left), then `mask` filled if a sampled
   * step follows. forced() is asked once a stretch: it holds back the last token of a forced string,
   * whose boundary a longer token may cross, for the sampled step to choose among.
   */
  const nextStretch = async (): Promise<Stretch> => {
    const left = maxSteps - next;
    const forced = constraint.forced();
    for (const id of forced) if (!(Number.isInteger(id) && id >= 0 && id < vocab)) throw new Error(`the constraint forced token ${id}, outside the vocabulary`);
    const kept = forced.slice(0, left);
    const stopAt = kept.findIndex((id) => stops.has(id));
    if (stopAt >= 0) return { forced: kept.slice(0, stopAt), sample: false }; // a forced stop id: complete
    if (kept.length === left) return { forced: kept, sample: false }; // no step left to sample
    await constraint.fillNextMask(mask);
    return { forced: kept, sample: allowsOtherThan(mask, stopMask, vocab) };
  };

  const encodeSteps = (encoder: GPUCommandEncoder, first: number, count: number): void => {
    const logitsOf = (step: number) => (step === 0 ? plan.prefillLogits : decodeStep.logits);
    const consecutive = decodeStep.consecutive;
    // The first step's model run is already submitted (or, for step 0, there is none).
    if (consecutive) {
      if (count > 1) consecutive.setPosition(encoder, P + first, count - 1);
      const pass = encoder.beginComputePass({ label: 'constrained steps' });
      for (let j = 0; j < count; j++) {
        if (j > 0) consecutive.encodeInPass(pass);
        sampler.encodeInPass(pass, logitsOf(first + j), first + j, decodeStep.tokenIn, j);
      }
      pass.end();
    } else {
      for (let j = 0; j < count; j++) {
        if (j > 0) decodeStep.encodeStep(encoder, P + first + j - 1);
        sampler.encode(encoder, logitsOf(first + j), first + j, decodeStep.tokenIn, j);
      }
    }
  };

  /** The model run of step `step` (>= 1), submitted alone: the next round samples its logits. */
  const submitModelStep = (step: number): void => {
    const encoder = device.createCommandEncoder({ label: `constrained model step ${step}` });
    const consecutive = decodeStep.consecutive;
    if (consecutive) {
      consecutive.setPosition(encoder, P + step - 1, 1);
      const pass = encoder.beginComputePass({ label: 'constrained model step' });
      consecutive.encodeInPass(pass);
      pass.end();
    } else {
      decodeStep.encodeStep(encoder, P + step - 1);
    }
    device.queue.submit([encoder.finish()]);
  };

  /** Submits the stretch's next round (at most recordSlots steps), or returns undefined when it has none. */
  const submitRound = (stretch: Stretch): Round | undefined => {
    const forced = stretch.forced.splice(0, sampler.recordSlots);
    const sampled = stretch.sample && forced.length < sampler.recordSlots;
    if (sampled) stretch.sample = false;
    const count = forced.length + (sampled ? 1 : 0);
    if (count === 0) return undefined;
    beforeSubmit();
    forced.forEach((id, j) => {
      single[id >>> 5] = 1 << (id & 31);
      sampler.setMask(j, single);
      single[id >>> 5] = 0;
    });
    if (sampled) sampler.setMask(forced.length, mask);
    const first = next;
    const encoder = device.createCommandEncoder({ label: `constrained steps ${first}..${first + count - 1}` });
    encodeSteps(encoder, first, count);
    encoder.copyBufferToBuffer(sampler.records, sampler.recordsOffset, staging, 0, count * RECORD_BYTES);
    device.queue.submit([encoder.finish()]);
    inFlight = { first, forced, sampled, mapped: staging.mapAsync(GPUMapMode.READ, 0, count * RECORD_BYTES) };
    next += count;
    // Another step may follow: run its model now, while the CPU reads this round back.
    const more = sampled || stretch.forced.length > 0 || stretch.sample;
    if (more && next < maxSteps) submitModelStep(next);
    return inFlight;
  };

  const readRound = async (round: Round): Promise<GeneratedToken[]> => {
    const count = round.forced.length + (round.sampled ? 1 : 0);
    await round.mapped;
    const bytes = staging.getMappedRange(0, count * RECORD_BYTES).slice(0);
    staging.unmap();
    inFlight = undefined;
    const tokens: GeneratedToken[] = [];
    for (let j = 0; j < count; j++) {
      const token = readRecord(bytes, j, plan.logprobs);
      if (j < round.forced.length) {
        if (token.id !== round.forced[j]) throw new Error(`step ${round.first + j} recorded token ${token.id}, not the forced ${round.forced[j]}`);
        token.forced = true;
      }
      tokens.push(token);
    }
    return tokens;
  };

  try {
    let stretch = await nextStretch();
    let round = submitRound(stretch);
    while (round) {
      const tokens = await readRound(round);
      const sampled = round.sampled ? tokens[tokens.length - 1] : undefined;
      let following: Round | undefined;
      if (!(sampled && stops.has(sampled.id))) {
        if (sampled) {
          if (!constraint.accept(sampled.id)) throw new Error(`step ${round.first + tokens.length - 1} drew token ${sampled.id}, which the constraint does not allow`);
          stretch = await nextStretch();
        }
        // Queue the next round before handing tokens on: the consumer's work overlaps the GPU's.
        following = submitRound(stretch);
      }
      for (const token of tokens) yield token;
      round = following;
    }
  } finally {
    // A round past the end (a stop, an abort): wait for it so its staging buffer is unmapped.
    if (inFlight) {
      try {
        await inFlight.mapped;
        staging.unmap();
      } catch {
        // A lost device or a destroyed buffer: nothing left to unmap.
      }
    }
  }
}

/** Whether `mask` allows an id below `vocab` that `stopMask` does not hold. */
function allowsOtherThan(mask: Uint32Array, stopMask: Uint32Array, vocab: number): boolean {
  const whole = vocab >>> 5;
  for (let w = 0; w < whole; w++) if ((mask[w] & ~stopMask[w]) !== 0) return true;
  const tail = vocab & 31;
  return tail > 0 && (mask[whole] & ~stopMask[whole] & ((1 << tail) - 1)) !== 0;
}
