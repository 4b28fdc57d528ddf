// A hand-written stand-in for src/grammar's compileStructuredOutput, for the API tests: every
// structure compiles to "exactly these tokens, then the end", a constraint that allows the next
// token of a fixed list and, once they are all spelled, only the stop ids. It records what it was
// asked to compile and every constraint it made, so tests check the wiring (one constraint per
// sequence, each disposed of) without the real grammar.
import type { StructuredOutput } from '../../src/grammar/structured-output.ts';
import { StructuredOutputError } from '../../src/grammar/structured-output.ts';
import type { TokenConstraint } from '../../src/engine/types.ts';
import type { StructureCompiler } from '../../src/api/structured-output.ts';

export interface FixedStructureOptions {
  /** The tokens a structure spells. */
  tokens: (output: StructuredOutput) => readonly number[];
  /** Positions [from, to) of those tokens given as jump-forward (forced()) rather than through the mask. */
  forced?: readonly [number, number];
  /** Every compile fails with a StructuredOutputError of this message. */
  reject?: string;
  /** Once spelled, allow nothing, not even the stop ids (the mask is all zero). */
  closedAtEnd?: boolean;
  /** The mask of this step (counted from 0) throws what this makes (a grammar engine failing mid-sequence). */
  failAt?: { step: number; error: () => Error };
}

/** One constraint the compiler made. */
export interface FixedConstraintRecord {
  stopTokenIds: readonly number[];
  accepted: number[];
  disposals: number;
}

export class FixedStructure {
  /** What each compile was asked for. */
  readonly compiles: { output: StructuredOutput; vocabSize: number }[] = [];
  readonly constraints: FixedConstraintRecord[] = [];

  constructor(private readonly options: FixedStructureOptions) {}

  /** Constraints not disposed of (exactly once) yet. */
  get undisposed(): number {
    return this.constraints.filter((c) => c.disposals !== 1).length;
  }

  readonly compile: StructureCompiler = async (_tokenizer, vocabSize, output) => {
    this.compiles.push({ output, vocabSize });
    if (this.options.reject !== undefined) throw new StructuredOutputError(this.options.reject);
    const tokens = this.options.tokens(output);
    return { createConstraint: async (stopTokenIds) => this.constraint(tokens, vocabSize, stopTokenIds) };
  };

  private constraint(tokens: readonly number[], vocabSize: number, stopTokenIds: readonly number[]): TokenConstraint {
    const record: FixedConstraintRecord = { stopTokenIds: [...stopTokenIds], accepted: [], disposals: 0 };
    this.constraints.push(record);
    const [from, to] = this.options.forced ?? [0, 0];
    const closedAtEnd = this.options.closedAtEnd ?? false;
    let at = 0;
    const live = () => {
      if (record.disposals > 0) throw new Error('the constraint is used after dispose()');
    };
    return {
      maskWords: Math.ceil(vocabSize / 32),
      fillNextMask: async (mask) => {
        live();
        if (this.options.failAt && at === this.options.failAt.step) throw this.options.failAt.error();
        mask.fill(0);
        const allowed = at < tokens.length ? [tokens[at]!] : closedAtEnd ? [] : stopTokenIds;
        for (const id of allowed) mask[id >> 5] |= 1 << (id & 31);
      },
      accept(id) {
        live();
        if (at >= tokens.length || tokens[at] !== id) return false;
        record.accepted.push(id);
        at++;
        return true;
      },
      forced() {
        live();
        if (at < from || at >= to) return [];
        const out = tokens.slice(at, to);
        record.accepted.push(...out);
        at = to;
        return out;
      },
      isComplete() {
        return at >= tokens.length;
      },
      dispose() {
        record.disposals++;
      },
    };
  }
}
