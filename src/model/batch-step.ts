// A decode step of many sequences at once (continuous batching): row r of the batch decodes the
// sequence in slot rows[r].slot of a KvCache with slots, at its own position. Each row's result
// is the same whatever else runs beside it (batch invariance): a row's sums run in an order that
// depends only on the model, never on the number of rows, their slots or the row's place; the
// same pipelines run every batch size, one row of work after another where rows share weights.

/** Bytes between rows' tokens in BatchDecodeStep.tokenIn: a storage binding's offset alignment. */
export const BATCH_TOKEN_STRIDE_BYTES = 256;

/** One row of a batch: the slot whose K/V it reads and appends to, and its position at the next step. */
export interface BatchRow {
  slot: number;
  position: number;
  /**
   * The row's tokens are the argmax of its logits (a plain greedy sequence): a step with
   * greedyRecords picks it into rowToken and records it, and the row needs no sampler.
   */
  greedy?: boolean;
}

/** Where one row's data lies in a shared buffer. */
export interface RowRegion {
  buffer: GPUBuffer;
  /** Byte offset: a multiple of 256 (a storage binding's offset alignment). */
  offset: number;
}

/**
 * One decode step of up to maxRows sequences, recorded once and encoded again for every step:
 * each row embeds the token at its rowToken, runs the layers at its position in its slot's K/V
 * (appending its K/V row there), writes its logits at its rowLogits, and moves to the next
 * position. Nothing is created per step.
 */
export interface BatchDecodeStep {
  /** Most rows one step runs. */
  readonly maxRows: number;
  /** Sequences whose K/V it holds, one slot each (slots 0 .. slots - 1). */
  readonly slots: number;
  /** Where slot s keeps layer l's K and V rows (cache.rows[l] of cache.rowBytes each, laid out as a one-slot KvCache's buffers). */
  slotKv(l: number, s: number): { keys: GPUBuffer; values: GPUBuffer; offset: number };
  /**
   * Sets the rows the steps encoded from now on run (at most maxRows; each slot in one row at
   * most): row r decodes slot rows[r].slot, at rows[r].position at the first step, one position
   * later at each step after. Applies to what is submitted after the call (it may write through
   * the queue); call it between submits.
   */
  setRows(rows: readonly BatchRow[]): void;
  /** Records one step of every row into `encoder`. */
  encode(encoder: GPUCommandEncoder): void;
  /**
   * Present where a step keeps its rows' positions on the GPU: records one step of every row into
   * an open compute pass, so a run of steps and their samplers share one pass.
   */
  readonly encodeInPass?: (pass: GPUComputePassEncoder) => void;
  /** Row r's logits, f32 [vocab], once its step has run. */
  rowLogits(r: number): RowRegion;
  /** Row r's token (u32 at the offset): what its next step embeds; a sampler writes it there. */
  rowToken(r: number): RowRegion;
  /**
   * Present where steps run in an open compute pass after what this records outside it (a copy
   * of each row's position): call it before the pass of the next `steps` encodeInPass calls.
   */
  readonly beginPass?: (encoder: GPUCommandEncoder, steps: number) => void;
  /**
   * Where row r's greedy picks are recorded, when the step picks them (a row set with `greedy`;
   * undefined otherwise): its token, the argmax of its logits (the lowest id on ties, as the GPU
   * sampler picks at temperature 0 with nothing else asked), goes to rowToken, and its record
   * (u32 id, f32 logprob of the raw logits, zeros to `bytes`) of the step at position p to record
   * slot p mod `slots`, at byte offset + (p mod slots) * bytes of `buffer`.
   */
  greedyRecords?(r: number): { buffer: GPUBuffer; offset: number; bytes: number; slots: number } | undefined;
  /**
   * Present where each step picks every row's greedy token (as greedyRecords says, for every row
   * whether set `greedy` or not) into its rowToken, with row r's records from byte offset +
   * r * slots * bytes. A sampler dispatched after the step overwrites rowToken for rows that sample.
   */
  readonly greedy?: { records: { buffer: GPUBuffer; offset: number; bytes: number; slots: number } };
  /** Dispatches one step records (for counters and benchmarks). */
  readonly dispatchCount: number;
  /** Frees the step's own buffers (not the cache). */
  destroy(): void;
}
