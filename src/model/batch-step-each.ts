// A BatchDecodeStep whose rows run one after another, each the single-sequence DecodeStep of its
// slot's own KvCache: the same tokens as a batched kernel gives (each row runs exactly the kernels
// it runs alone) without sharing the weights' reads between rows. The engine's fallback where no
// batched kernel runs the model.
import type { BatchDecodeStep, BatchRow, RowRegion } from './batch-step.ts';
import type { DecodeStep } from './decode-step.ts';
import type { KvCache } from './kv-cache.ts';

export class PerSequenceBatchStep implements BatchDecodeStep {
  readonly maxRows: number;
  readonly slots: number;
  private rows: BatchRow[] = [];
  /** Each row's position at the next step (the steps move them on the CPU side). */
  private positions: number[] = [];
  readonly encodeInPass?: (pass: GPUComputePassEncoder) => void;
  readonly beginPass?: (encoder: GPUCommandEncoder, steps: number) => void;

  constructor(
    /** Slots 0 .. slots - 1, each its own one-slot cache (cacheOf) and the decode step over it (stepOf), made on first use. */
    slots: number,
    private readonly cacheOf: (slot: number) => KvCache,
    private readonly stepOf: (slot: number) => DecodeStep,
    maxRows: number,
  ) {
    this.maxRows = maxRows;
    this.slots = slots;
    // Steps that advance their own position (DecodeStep.consecutive) share one compute pass.
    if (stepOf(0).consecutive) {
      this.beginPass = (encoder, steps) => {
        for (const [r, row] of this.rows.entries()) this.consecutive(row.slot).setPosition(encoder, this.positions[r]!, steps);
      };
      this.encodeInPass = (pass) => {
        for (const [r, row] of this.rows.entries()) {
          const step = this.stepOf(row.slot);
          if (row.greedy && step.greedy) step.greedy.encodeInPass(pass);
          else this.consecutive(row.slot).encodeInPass(pass);
          this.positions[r]!++;
        }
      };
    }
  }

  private consecutive(slot: number): NonNullable<DecodeStep['consecutive']> {
    const consecutive = this.stepOf(slot).consecutive;
    if (!consecutive) throw new Error(`slot ${slot}'s step does not advance its own position`);
    return consecutive;
  }

  greedyRecords(r: number): { buffer: GPUBuffer; offset: number; bytes: number; slots: number } | undefined {
    const row = this.row(r);
    return row.greedy && this.encodeInPass ? this.stepOf(row.slot).greedy?.records : undefined;
  }

  get dispatchCount(): number {
    return this.rows.reduce((n, row) => n + this.stepOf(row.slot).dispatchCount, 0);
  }

  slotKv(l: number, s: number): { keys: GPUBuffer; values: GPUBuffer; offset: number } {
    if (!(Number.isInteger(s) && s >= 0 && s < this.slots)) throw new RangeError(`slot ${s} is outside 0..${this.slots - 1}`);
    const cache = this.cacheOf(s);
    return { keys: cache.keys[l]!, values: cache.values[l]!, offset: 0 };
  }

  setRows(rows: readonly BatchRow[]): void {
    if (rows.length > this.maxRows) throw new RangeError(`${rows.length} rows; the step runs at most ${this.maxRows}`);
    const seen = new Set<number>();
    for (const row of rows) {
      if (!(Number.isInteger(row.slot) && row.slot >= 0 && row.slot < this.slots)) throw new RangeError(`slot ${row.slot} is outside 0..${this.slots - 1}`);
      if (seen.has(row.slot)) throw new Error(`slot ${row.slot} is in two rows`);
      seen.add(row.slot);
    }
    this.rows = rows.map((r) => ({ ...r }));
    this.positions = rows.map((r) => r.position);
  }

  encode(encoder: GPUCommandEncoder): void {
    for (const [r, row] of this.rows.entries()) {
      this.stepOf(row.slot).encodeStep(encoder, this.positions[r]!);
      this.positions[r]!++;
    }
  }

  rowLogits(r: number): RowRegion {
    return { buffer: this.stepOf(this.row(r).slot).logits, offset: 0 };
  }

  rowToken(r: number): RowRegion {
    return { buffer: this.stepOf(this.row(r).slot).tokenIn, offset: 0 };
  }

  private row(r: number): BatchRow {
    const row = this.rows[r];
    if (!row) throw new RangeError(`row ${r} is not set (${this.rows.length} rows)`);
    return row;
  }

  destroy(): void {
    this.rows = [];
  }
}
