// Continuous batching: every sequence that decodes without a constraint is a row of one loop of
// rounds. A round is one command buffer and one submit: the first token of rows that just joined
// (sampled from their prefill's logits), then k steps of the BatchDecodeStep, each followed by every
// row's sampling (one dispatch set for all rows whose samplers share a bank, each row with its own
// parameters, seed, penalties and logprobs), then a copy of every
// row's token records to a staging buffer that is mapped. Two rounds are in flight: while the CPU
// reads round i, round i + 1 runs. Sequences join and leave between rounds; a row that leaves while
// a round it is in runs has that round's tokens discarded, and leaves once the GPU is done with it.
//
// k is the decoder's: 1 in its first round (the first tokens come back at once), doubling up to
// MAX_BATCH_STEPS while a round stays under TARGET_BATCH_MS (decode-pipeline.ts's batchSteps), and
// at most what every row may still produce; while a request is on its way in (expectJoin), rounds
// take one step, and the round it joins in samples the first tokens alone, so that its first token
// waits for its prefill and the rounds in flight only. A row's tokens do not depend on the others:
// each runs at its own position in its own slot, and the step gives each row what it gives it
// alone (batch-step.ts). A row is in every round until it ends: its next input token lives at its
// place in the step's token buffer, carried along as rows come and go.
import type { BatchDecodeStep, RowRegion } from '../model/batch-step.ts';
import { readRecord, RECORD_BYTES, type GpuSampler } from '../sampling/gpu-sampler.ts';
import type { SampleRow, SamplerBank } from '../sampling/sampler-bank.ts';
import { batchSteps, MAX_BATCH_STEPS } from './decode-pipeline.ts';
import type { GeneratedToken } from './types.ts';

/** A sequence that joins the batch: its prefill is done and its sampler begun. */
export interface BatchSequence {
  /** The K/V slot it decodes in, holding its prompt at positions 0 .. promptLength - 1. */
  slot: number;
  promptLength: number;
  /** Tokens it may produce at most. */
  maxSteps: number;
  /** Its prefill's last logits (f32 [vocab]), sampled for its first token. */
  firstLogits: GPUBuffer;
  sampler: GpuSampler;
  /** Top alternatives its records carry (undefined: none). */
  logprobs: number | undefined;
  /** A plain greedy sequence (GpuSampler.plainGreedy): a step that picks the argmax itself needs no sampler for it. */
  greedy: boolean;
  /** Runs before each round it would be in; a throw (an abort) ends the sequence with that error. */
  check(): void;
  /** Told the tokens submitted so far (the first included) after each round it is in: its steps wrote positions up to promptLength + submitted - 1. */
  submitted?(count: number): void;
}


interface Row {
  readonly seq: BatchSequence;
  /** Tokens submitted (sampled or being sampled on the GPU), the first included. */
  submitted: number;
  /** Its row in the last round submitted, or -1. */
  index: number;
  /** Tokens read back and not yet taken by the consumer. */
  readonly tokens: GeneratedToken[];
  /** Rounds in flight that it is in. */
  inFlight: number;
  leaving: boolean;
  error: unknown;
  wake: (() => void) | undefined;
  /** Resolved once it has left and no round in flight holds it. */
  readonly gone: Promise<void>;
  markGone: () => void;
}

/** One row's part of a round: `count` records at its region of the staging buffer, the first `sampled` in the sampler's format, the rest the step's greedy ones. */
interface RoundEntry {
  row: Row;
  count: number;
  index: number;
  sampled: number;
  greedyBytes: number;
}

interface Round {
  entries: RoundEntry[];
  steps: number;
  staging: GPUBuffer;
  mapped: Promise<void>;
  bytes: number;
}

export class BatchDecoder {
  private readonly rows: Row[] = [];
  private readonly inFlight: Round[] = [];
  private readonly staging: GPUBuffer[];
  /** Rows' tokens on their way to other rows (submitRound). */
  private readonly moveScratch: GPUBuffer;
  private rounds = 0;
  private stepMs: number | undefined;
  /** Requests being admitted that will join (expectJoin). */
  private joining = 0;
  private lastResolved: number | undefined;
  private pumping = false;
  private failure: unknown;

  constructor(
    private readonly device: GPUDevice,
    private readonly step: BatchDecodeStep,
    /** Record slots of each row's sampler: the most tokens a row takes in one round. */
    private readonly recordSlots = MAX_BATCH_STEPS,
  ) {
    const size = step.maxRows * recordSlots * RECORD_BYTES;
    const staging = () => device.createBuffer({ label: 'batch_records_readback', size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    this.staging = [staging(), staging()];
    this.moveScratch = device.createBuffer({ label: 'batch_token_moves', size: 4 * step.maxRows, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  }

  /** Rows decoding now (joined and not yet gone). */
  get active(): number {
    return this.rows.length;
  }

  get maxRows(): number {
    return this.step.maxRows;
  }

  /** A request is on its way in (its prefill runs): rounds take one step until the returned function is called. */
  expectJoin(): () => void {
    this.joining++;
    let done = false;
    return () => {
      if (!done) this.joining--;
      done = true;
    };
  }

  /**
   * Joins the batch and yields the sequence's tokens in order, at most maxSteps. Ending the
   * iteration (return(), a throw) leaves the batch; it resolves once no round in flight holds the
   * row, so its slot and sampler are free again.
   */
  async *run(seq: BatchSequence): AsyncGenerator<GeneratedToken, void, void> {
    if (this.failure !== undefined) throw this.failure;
    if (this.rows.length >= this.step.maxRows) throw new Error(`the batch is full (${this.step.maxRows} rows)`);
    let markGone!: () => void;
    const gone = new Promise<void>((resolve) => (markGone = resolve));
    const row: Row = { seq, submitted: 0, index: -1, tokens: [], inFlight: 0, leaving: false, error: undefined, wake: undefined, gone, markGone };
    this.rows.push(row);
    let taken = 0;
    try {
      this.fill();
      void this.pump();
      for (;;) {
        const token = row.tokens.shift();
        if (token) {
          taken++;
          yield token;
          continue;
        }
        if (row.error !== undefined) throw row.error;
        if (taken >= seq.maxSteps) return;
        await new Promise<void>((resolve) => (row.wake = resolve));
        row.wake = undefined;
      }
    } finally {
      row.leaving = true;
      this.settle(row);
      await row.gone;
    }
  }

  /** Submits rounds until two are in flight or no row can take a step. */
  private fill(): void {
    try {
      while (this.inFlight.length < 2 && this.failure === undefined && this.submitRound());
    } catch (err) {
      // A round that could not be built or submitted (a step's or sampler's refusal, a lost device) ends every row.
      this.fail(err);
    }
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.inFlight.length > 0) {
        const round = this.inFlight[0]!;
        let bytes: ArrayBuffer | undefined;
        try {
          await round.mapped;
          bytes = round.staging.getMappedRange(0, round.bytes).slice(0);
          round.staging.unmap();
        } catch (err) {
          this.fail(err);
        }
        this.inFlight.shift();
        const now = performance.now();
        if (this.lastResolved !== undefined && round.steps > 0) {
          const measured = (now - this.lastResolved) / round.steps;
          this.stepMs = this.stepMs === undefined ? measured : 0.5 * this.stepMs + 0.5 * measured;
        }
        this.lastResolved = now;
        // Queue the next round before handing tokens on: the consumers' work overlaps the GPU's.
        this.fill();
        for (const entry of round.entries) {
          const { row } = entry;
          row.inFlight--;
          if (bytes && !row.leaving) for (let j = 0; j < entry.count; j++) row.tokens.push(this.readEntry(bytes, entry, j));
          this.settle(row);
          row.wake?.();
        }
        if (this.inFlight.length === 0) this.lastResolved = undefined;
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Record j of a row's part of a round: the sampler's format, then the step's greedy ones (u32 id, f32 logprob). */
  private readEntry(bytes: ArrayBuffer, entry: RoundEntry, j: number): GeneratedToken {
    const at = entry.index * this.recordSlots * RECORD_BYTES;
    if (j < entry.sampled) return readRecord(bytes, entry.index * this.recordSlots + j, entry.row.seq.logprobs);
    const view = new DataView(bytes, at + entry.sampled * RECORD_BYTES + (j - entry.sampled) * entry.greedyBytes, 8);
    return { id: view.getUint32(0, true), logprob: view.getFloat32(4, true) };
  }

  /** A row that left and that no round in flight holds is gone. */
  private settle(row: Row): void {
    if (!row.leaving || row.inFlight > 0) return;
    const i = this.rows.indexOf(row);
    if (i >= 0) this.rows.splice(i, 1);
    row.markGone();
  }

  private fail(err: unknown): void {
    this.failure ??= err;
    for (const row of this.rows) {
      row.error ??= err;
      row.wake?.();
    }
  }

  /** Builds and submits one round; false when no row can take a step. */
  private submitRound(): boolean {
    const candidates = this.rows.filter((row) => !row.leaving && row.error === undefined && row.submitted < row.seq.maxSteps);
    const rows: Row[] = [];
    for (const row of candidates) {
      try {
        row.seq.check();
        rows.push(row);
      } catch (err) {
        row.error = err;
        row.wake?.();
      }
    }
    if (rows.length === 0) return false;
    // Rows keep their order; those that joined go last.
    rows.sort((a, b) => (a.index < 0 ? Infinity : a.index) - (b.index < 0 ? Infinity : b.index));
    const fresh = (row: Row) => row.submitted === 0;
    // A round with rows that just joined samples their first tokens alone (no step): they come
    // back after the rounds in flight, not after another step of the whole batch.
    let steps = rows.some(fresh) ? 0 : this.joining > 0 ? 1 : batchSteps(this.rounds, this.stepMs);
    for (const row of rows) steps = Math.min(steps, row.seq.maxSteps - row.submitted - (fresh(row) ? 1 : 0), this.recordSlots - (fresh(row) ? 1 : 0));
    steps = Math.max(0, steps);

    const step = this.step;
    const oldTokens = rows.map((row) => (row.index >= 0 ? step.rowToken(row.index) : undefined));
    step.setRows(rows.map((row) => ({ slot: row.seq.slot, position: row.seq.promptLength + Math.max(row.submitted, 1) - 1, greedy: row.seq.greedy })));
    // Rows whose step picks their greedy tokens: no sampler after their model steps.
    const picks = rows.map((row, b) => (steps > 0 && row.seq.greedy ? greedyRecordsOf(step, b) : undefined));
    // A round's picks wrap around a row's record slots at most once.
    for (const pick of picks) if (pick) steps = Math.min(steps, pick.slots);
    const encoder = this.device.createCommandEncoder({ label: `batch round ${this.rounds}` });
    // A row that moved to another row carries its next token there, through the scratch buffer
    // (a copy within one buffer is not allowed, and a move may overwrite another's source).
    const moves = rows.flatMap((_, b) => {
      const from = oldTokens[b];
      const to = step.rowToken(b);
      return from && !sameRegion(from, to) ? [{ from, to, b }] : [];
    });
    for (const { from, b } of moves) encoder.copyBufferToBuffer(from.buffer, from.offset, this.moveScratch, 4 * b, 4);
    for (const { to, b } of moves) encoder.copyBufferToBuffer(this.moveScratch, 4 * b, to.buffer, to.offset, 4);
    const inPass = step.encodeInPass;
    if (inPass && steps > 0) step.beginPass?.(encoder, steps);
    const pass = inPass ? encoder.beginComputePass({ label: 'batch steps' }) : undefined;
    const sample = (row: Row, logits: RowRegion | GPUBuffer, index: number, token: RowRegion, slot: number) => {
      if (pass) row.seq.sampler.encodeInPass(pass, logits, index, token, slot);
      else row.seq.sampler.encode(encoder, logits, index, token, slot);
    };
    const next = rows.map((row) => (fresh(row) ? 0 : row.submitted));
    const sampled = rows.map(() => 0);
    // A step's rows that sample: rows whose samplers share a bank and whose logits and tokens
    // share buffers are sampled by one set of dispatches, in the bank's uniform slot j (the
    // round's step: one such set per bank and step); any other row alone.
    const sampleStep = (j: number, wanted: { row: Row; b: number }[]) => {
      const groups: { bank: SamplerBank; rows: Row[]; samples: SampleRow[] }[] = [];
      for (const { row, b } of wanted) {
        const { sampler } = row.seq;
        const logits = step.rowLogits(b);
        const token = step.rowToken(b);
        const sampleRow: SampleRow = { state: sampler.state, step: next[b]!, slot: sampled[b]!++, logits, token };
        const group = groups.find(
          (g) => g.bank === sampler.bank && (g.samples[0]!.logits as RowRegion).buffer === logits.buffer && (g.samples[0]!.token as RowRegion).buffer === token.buffer,
        );
        if (group) {
          group.rows.push(row);
          group.samples.push(sampleRow);
        } else groups.push({ bank: sampler.bank, rows: [row], samples: [sampleRow] });
      }
      const banked = new Set<SamplerBank>();
      for (const { bank, rows: groupRows, samples } of groups) {
        if (samples.length > 1 && !banked.has(bank)) {
          banked.add(bank);
          const own = pass ?? encoder.beginComputePass({ label: 'batch sample' });
          bank.encodeRows(own, samples, j);
          if (!pass) own.end();
          continue;
        }
        samples.forEach((r, i) => sample(groupRows[i]!, r.logits, r.step, r.token as RowRegion, r.slot));
      }
    };
    rows.forEach((row, b) => {
      if (!fresh(row)) return;
      sample(row, row.seq.firstLogits, 0, step.rowToken(b), sampled[b]!++);
      next[b] = 1;
    });
    for (let j = 0; j < steps; j++) {
      if (pass) inPass!(pass);
      else step.encode(encoder);
      sampleStep(j, rows.flatMap((row, b) => (picks[b] ? [] : [{ row, b }])));
      rows.forEach((_, b) => next[b]!++);
    }
    pass?.end();
    const staging = this.staging[this.rounds % 2]!;
    const rowBytes = this.recordSlots * RECORD_BYTES;
    const entries: RoundEntry[] = rows.map((row, b) => {
      const at = b * rowBytes;
      if (sampled[b]! > 0) encoder.copyBufferToBuffer(row.seq.sampler.records, row.seq.sampler.recordsOffset, staging, at, sampled[b]! * RECORD_BYTES);
      const pick = picks[b];
      let greedyBytes = 0;
      if (pick) {
        // The step at position p recorded slot p mod slots: the round's slots, wrapping at most once.
        greedyBytes = pick.bytes;
        const first = (row.seq.promptLength + Math.max(row.submitted, 1) - 1) % pick.slots;
        const head = Math.min(steps, pick.slots - first);
        const to = at + sampled[b]! * RECORD_BYTES;
        encoder.copyBufferToBuffer(pick.buffer, pick.offset + first * pick.bytes, staging, to, head * pick.bytes);
        if (head < steps) encoder.copyBufferToBuffer(pick.buffer, pick.offset, staging, to + head * pick.bytes, (steps - head) * pick.bytes);
      }
      return { row, count: sampled[b]! + (pick ? steps : 0), index: b, sampled: sampled[b]!, greedyBytes };
    });
    this.device.queue.submit([encoder.finish()]);
    const bytes = rows.length * rowBytes;
    // Queued before anything else can throw: the pump settles its rows however the read-back ends.
    let mapped: Promise<void>;
    try {
      mapped = staging.mapAsync(GPUMapMode.READ, 0, bytes);
    } catch (err) {
      mapped = Promise.reject(err);
    }
    this.inFlight.push({ entries, steps, staging, mapped, bytes });
    this.rounds++;
    for (const { row, count, index } of entries) {
      row.submitted += count;
      row.inFlight++;
      row.index = index;
      row.seq.submitted?.(row.submitted);
    }
    for (const row of this.rows) if (!rows.includes(row)) row.index = -1;
    return true;
  }

  destroy(): void {
    for (const b of [...this.staging, this.moveScratch]) b.destroy();
  }
}

/** Where row r's greedy picks are recorded, if the step picks them. */
function greedyRecordsOf(step: BatchDecodeStep, r: number): { buffer: GPUBuffer; offset: number; bytes: number; slots: number } | undefined {
  if (step.greedyRecords) return step.greedyRecords(r);
  const all = step.greedy?.records;
  return all && { ...all, offset: all.offset + r * all.slots * all.bytes };
}

function sameRegion(a: RowRegion, b: RowRegion): boolean {
  return a.buffer === b.buffer && a.offset === b.offset;
}
