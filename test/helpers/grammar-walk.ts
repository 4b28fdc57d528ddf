// Helpers of the grammar tests: reading masks, and walking a constraint through given tokens.
import { expect } from 'vitest';
import type { TokenConstraint } from '../../src/sampling/types.ts';

export function isAllowed(mask: Uint32Array, id: number): boolean {
  return ((mask[id >> 5]! >>> (id & 31)) & 1) === 1;
}

export function allowedIds(mask: Uint32Array, vocabSize: number): number[] {
  const ids: number[] = [];
  for (let word = 0; word < mask.length; word++) {
    let bits = mask[word]!;
    while (bits !== 0) {
      const bit = 31 - Math.clz32(bits & -bits);
      const id = word * 32 + bit;
      if (id < vocabSize) ids.push(id);
      bits &= bits - 1;
    }
  }
  return ids.sort((a, b) => a - b);
}

/** Feeds `ids` to `constraint` one by one, each checked against the mask first; returns the mask after the last. */
export async function walk(constraint: TokenConstraint, ids: readonly number[]): Promise<Uint32Array> {
  const mask = new Uint32Array(constraint.maskWords);
  for (const [i, id] of ids.entries()) {
    await constraint.fillNextMask(mask);
    expect(isAllowed(mask, id), `token ${i} (id ${id}) allowed by the mask`).toBe(true);
    expect(constraint.accept(id), `token ${i} (id ${id}) accepted`).toBe(true);
  }
  await constraint.fillNextMask(mask);
  return mask;
}
