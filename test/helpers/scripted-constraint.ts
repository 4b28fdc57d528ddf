// A TokenConstraint played from a script, for tests of the loops that apply constraints: the
// allowed ids and the forced tokens are functions of the tokens accepted so far.
import type { TokenConstraint } from '../../src/sampling/types.ts';

export interface ConstraintScript {
  /** The ids allowed after `tokens` (every token accepted so far, forced ones included). */
  allowed(tokens: readonly number[]): Iterable<number>;
  /** The tokens forced after `tokens` (asked again once they are accepted, until []); default none. */
  forced?(tokens: readonly number[]): readonly number[];
  /** Whether `tokens` are a whole structure; default true. */
  complete?(tokens: readonly number[]): boolean;
}

export class ScriptedConstraint implements TokenConstraint {
  readonly maskWords: number;
  /** Every token accepted, in order: sampled ones through accept(), forced ones through forced(). */
  readonly tokens: number[] = [];
  /** Ids accept() refused. */
  readonly refused: number[] = [];
  disposed = false;

  constructor(
    readonly vocabSize: number,
    private readonly script: ConstraintScript,
  ) {
    this.maskWords = Math.ceil(vocabSize / 32);
  }

  async fillNextMask(mask: Uint32Array): Promise<void> {
    mask.fill(0);
    for (const id of this.script.allowed(this.tokens)) mask[id >>> 5] |= 1 << (id & 31);
    await Promise.resolve(); // a real grammar may answer later
  }

  accept(id: number): boolean {
    if (!new Set(this.script.allowed(this.tokens)).has(id)) {
      this.refused.push(id);
      return false;
    }
    this.tokens.push(id);
    return true;
  }

  forced(): number[] {
    const ids = [...(this.script.forced?.(this.tokens) ?? [])];
    this.tokens.push(...ids);
    return ids;
  }

  isComplete(): boolean {
    return this.script.complete?.(this.tokens) ?? true;
  }

  dispose(): void {
    this.disposed = true;
  }
}

/** A script that allows every id below `vocabSize` and forces nothing. */
export function allowAll(vocabSize: number): ConstraintScript {
  const all = Array.from({ length: vocabSize }, (_, id) => id);
  return { allowed: () => all };
}
