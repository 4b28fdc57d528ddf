// The decode slots of a LlamaGenerator (generator.ts): their KV memory and the step that runs
// them (makeDecodeSlots), a one-row step for a constrained sequence (soloDecodeStep), and whether
// a slot's rings still hold a prompt's window (ringsHoldPrompt).
import { maxBufferBytes } from '../gpu/device.ts';
import { PerSequenceBatchStep } from '../model/batch-step-each.ts';
import type { BatchDecodeStep } from '../model/batch-step.ts';
import type { DecodeStep } from '../model/decode-step.ts';
import type { KvCache } from '../model/kv-cache.ts';
import type { LlamaModel } from '../model/llama.ts';

/** Whether every ring layer of a slot (laid out as `cache`) whose positions are written up to `written` still holds the window before position P (the next sequence's first step reads it). */
export function ringsHoldPrompt(cache: KvCache, P: number, written: number): boolean {
  return cache.rings.every((ring, l) => !ring || Math.max(0, P - cache.windows[l]! + 1) >= written - ring.rows);
}

/** The decode slots and the step that runs them (LlamaGenerator.makeSlots). */
export interface DecodeSlots {
  readonly step: BatchDecodeStep;
  /** Whether one batched kernel runs every row (else each row its own DecodeStep). */
  readonly batched: boolean;
  made(): number;
  /** Makes another slot where slots are made on first use; false when there is none to make. */
  make(): boolean;
  /** A step of slot s alone, for a constrained sequence. */
  solo(slot: number): DecodeStep;
  /** The steps made for single slots, and the caches the slots live in (destroyed with the generator). */
  readonly steps: Map<number, DecodeStep>;
  readonly caches: KvCache[];
  /** Slots there may be at most: the sequences asked for, as far as one of the device's buffers holds a layer's. */
  readonly limit: number;
}

export interface DecodeSlotsOptions {
  /** maxConcurrentSequences; 1: the working cache is the one slot. */
  sequences: number;
  /** LlamaGeneratorOptions.batchStep. */
  kind: 'auto' | 'fused' | 'separate';
  /** Logit rows the steps compute (the sampled vocabulary). */
  vocabRows: number;
  /** Told each slot as it becomes free for the first time. */
  free(slot: number): void;
}

/**
 * The decode slots for the working cache `c`: with one sequence, `c` itself; else `limit` slots of
 * one KvCache run by one batched kernel (LlamaModel.createBatchStep), or where none runs the
 * model, caches of their own (made on first use by make()) each with its own DecodeStep.
 */
export function makeDecodeSlots(model: LlamaModel, c: KvCache, o: DecodeSlotsOptions): DecodeSlots {
  const { vocabRows } = o;
  const own = new Map<number, DecodeStep>();
  const ownStep = (cache: KvCache, slot: number) => {
    let step = own.get(slot);
    if (!step) own.set(slot, (step = model.createDecodeStep(cache, { vocabRows })));
    return step;
  };
  // Every slot of a layer lives in one buffer: no more slots than the device's largest holds.
  const layerBytes = Math.max(...c.keys.map((_, l) => c.slotBytes(l)));
  const N = Math.max(1, Math.min(o.sequences, Math.floor(maxBufferBytes(model.ctx.limits) / layerBytes)));
  const stepFor = (cache: KvCache, maxRows: number) =>
    o.kind === 'separate'
      ? 'separate steps asked for'
      : o.kind === 'fused'
        ? model.createFusedBatchStep(cache, { maxRows, vocabRows })
        : model.createBatchStep(cache, { maxRows, vocabRows });
  /** One-row steps of `cache`'s slots, made on first use: a constrained sequence's (the batch's step sets its rows every round). */
  const solosOf = (cache: KvCache) => {
    const solos = new Map<number, DecodeStep>();
    const solo = (slot: number): DecodeStep => {
      let step = solos.get(slot);
      if (!step) {
        const one = stepFor(cache, 1);
        if (typeof one === 'string') throw new Error(`no step of one row: ${one}`);
        solos.set(slot, (step = soloDecodeStep(one, slot)));
      }
      return step;
    };
    return { solo, steps: solos };
  };
  if (o.sequences === 1) {
    // The one slot is the working cache: the same kernel as with slots, so a request gives the same either way.
    const one = stepFor(c, 1);
    if (typeof one !== 'string') return { step: one, batched: true, made: () => 1, make: () => true, ...solosOf(c), caches: [], limit: 1 };
    const step = new PerSequenceBatchStep(1, () => c, (s) => ownStep(c, s), 1);
    return { step, batched: false, made: () => 1, make: () => true, solo: (s) => ownStep(c, s), steps: own, caches: [], limit: 1 };
  }
  const passTokens = c.ringed ? c.maxPassTokens : undefined;
  const slotted = model.createKvCache(c.capacity, c.kvDType, passTokens, N);
  const batched = stepFor(slotted, N);
  if (typeof batched !== 'string') {
    for (let slot = 0; slot < N; slot++) o.free(slot);
    return { step: batched, batched: true, made: () => N, make: () => true, ...solosOf(slotted), caches: [slotted], limit: N };
  }
  slotted.destroy();
  const caches: KvCache[] = [];
  const cacheOf = (slot: number) => {
    const cache = caches[slot];
    if (!cache) throw new Error(`slot ${slot} is not made`);
    return cache;
  };
  const make = () => {
    if (caches.length >= N) return false;
    caches.push(model.createKvCache(c.capacity, c.kvDType, passTokens));
    o.free(caches.length - 1);
    return true;
  };
  make(); // the first sequence's slot, and the step that tells whether steps share a pass
  const step = new PerSequenceBatchStep(N, cacheOf, (s) => ownStep(cacheOf(s), s), N);
  return { step, batched: false, made: () => caches.length, make, solo: (s) => ownStep(cacheOf(s), s), steps: own, caches, limit: N };
}

/**
 * A DecodeStep over one row of a batched step (maxRows 1) in slot `slot`: what a constrained
 * sequence decodes with. The step keeps its position on the GPU; a step at another position than
 * the one after the last sets it first (a queue write, before the submit of the encoder).
 */
export function soloDecodeStep(step: BatchDecodeStep, slot: number): DecodeStep {
  let next = -1;
  const logits = step.rowLogits(0);
  const token = step.rowToken(0);
  if (logits.offset !== 0 || token.offset !== 0) throw new Error('row 0 of a batched step is not at offset 0');
  return {
    tokenIn: token.buffer,
    logits: logits.buffer,
    dispatchCount: step.dispatchCount,
    encodeStep(encoder: GPUCommandEncoder, position: number): void {
      if (position !== next) step.setRows([{ slot, position }]);
      step.encode(encoder);
      next = position + 1;
    },
    destroy: () => step.destroy(),
  };
}
