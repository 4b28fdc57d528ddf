// The allowed-token mask of structured output (sampling/types.ts TokenConstraint): bit `id & 31`
// of word `id >> 5`, 1 = allowed. The first step of the sampling chain (sampler.ts): a disallowed
// id is out before bias, penalties and everything else, as if it were past the vocabulary.

export type TokenMask = Uint32Array;

export function isAllowed(mask: TokenMask, id: number): boolean {
  return ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;
}

/** A mask of `ceil(vocabSize / 32)` words allowing `ids`. */
export function maskOf(vocabSize: number, ids: Iterable<number>): TokenMask {
  const mask = new Uint32Array(Math.ceil(vocabSize / 32));
  for (const id of ids) mask[id >>> 5] |= 1 << (id & 31);
  return mask;
}

/** The ids below `vocabSize` the mask allows, ascending. */
export function allowedIds(mask: TokenMask, vocabSize: number): number[] {
  const ids: number[] = [];
  for (let id = 0; id < vocabSize; id++) if (isAllowed(mask, id)) ids.push(id);
  return ids;
}

/** Sets the logits of the ids the mask disallows to -Infinity, in place. */
export function applyMask(logits: Float64Array, mask: TokenMask): void {
  for (let id = 0; id < logits.length; id++) if (!isAllowed(mask, id)) logits[id] = -Infinity;
}

/** The lowest id below `vocabSize` the mask allows; 0 when it allows none. */
export function lowestAllowed(mask: TokenMask, vocabSize: number): number {
  for (let id = 0; id < vocabSize; id++) if (isAllowed(mask, id)) return id;
  return 0;
}
