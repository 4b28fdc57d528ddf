// Sets of Unicode code points as sorted, disjoint, inclusive ranges: the characters a regex class
// or escape matches (ecma-regex.ts) and what a rule writes of them (regex-ebnf.ts).
// Browser code: nothing here may import Node modules.

/** Inclusive code point ranges, sorted, not overlapping, not touching. */
export type CodeRanges = [number, number][];

export const MAX_CODE_POINT = 0x10ffff;
export const ASCII: CodeRanges = [[0x00, 0x7f]];
/** Surrogate code points: no character of well-formed text. */
export const SURROGATES: CodeRanges = [[0xd800, 0xdfff]];

/** The ranges sorted and merged. */
export function normalize(ranges: CodeRanges): CodeRanges {
  const sorted = ranges.map(([lo, hi]): [number, number] => [lo, hi]).sort((a, b) => a[0] - b[0]);
  const out: CodeRanges = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

export function complement(ranges: CodeRanges): CodeRanges {
  const out: CodeRanges = [];
  let next = 0;
  for (const [lo, hi] of ranges) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

export function union(...sets: CodeRanges[]): CodeRanges {
  return normalize(sets.flat());
}

export function intersect(a: CodeRanges, b: CodeRanges): CodeRanges {
  return complement(union(complement(a), complement(b)));
}

export function subtract(a: CodeRanges, b: CodeRanges): CodeRanges {
  return intersect(a, complement(b));
}

export function contains(ranges: CodeRanges, point: number): boolean {
  return ranges.some(([lo, hi]) => point >= lo && point <= hi);
}

/** How many code points the ranges hold. */
export function size(ranges: CodeRanges): number {
  return ranges.reduce((sum, [lo, hi]) => sum + hi - lo + 1, 0);
}

export function equal(a: CodeRanges, b: CodeRanges): boolean {
  return a.length === b.length && a.every(([lo, hi], i) => lo === b[i]![0] && hi === b[i]![1]);
}

/** Every code point of the ranges, in order. */
export function expand(ranges: CodeRanges): number[] {
  return ranges.flatMap(([lo, hi]) => Array.from({ length: hi - lo + 1 }, (_, k) => lo + k));
}
