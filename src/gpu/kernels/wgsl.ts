// WGSL composition helpers the kernel families share: the position source (and the tokens a
// dispatch covers), renaming a snippet's names, taking functions out of a module, and unrolling
// loops of constant bounds.
/**
 * Where a position-dependent kernel (rope, attention, the K/V write) finds the position of its
 * first token: 'uniform' is the dispatch's own parameter (a fresh one per dispatch), 'buffer' adds
 * a u32 read from a small storage buffer at POSITION_BINDING, which the reusable decode step
 * (KernelProgram) rewrites with queue.writeBuffer before each step, so its bind groups never change.
 */
export type PositionSource = 'uniform' | 'buffer';
export const POSITION_BINDING = 8;

/**
 * The tokens a position-dependent dispatch covers: T of them, the first at startPos, plus the u32
 * in `position` when given (a PositionSource 'buffer', for KernelProgram's reusable steps).
 */
export interface TokenSpan {
  readonly T: number;
  readonly startPos: number;
  readonly position?: GPUBuffer;
  /**
   * A packed pass (rope and attention; not with `position`): u32 [T], for each token the cache
   * row of the first token of the input it belongs to. Token t at row r = startPos + t is then at
   * position r - segments[t] (positions restart with each input) and attends only to the rows
   * segments[t] ..= r (a block-diagonal causal mask: no query sees another input's keys).
   */
  readonly segments?: GPUBuffer;
}

/** The binding of TokenSpan.segments in the packed variants of rope and attention. */
export const SEGMENT_BINDING = 7;
/** Declares TokenSpan.segments as `token_segment` (packed variants). */
export const SEGMENT_WGSL = `@group(0) @binding(${SEGMENT_BINDING}) var<storage, read> token_segment: array<u32>;\n`;

/** Adds the segments buffer at SEGMENT_BINDING when there is one. */
export function withSegments(buffers: Record<number, GPUBuffer>, segments: GPUBuffer | undefined): Record<number, GPUBuffer> {
  return segments ? { ...buffers, [SEGMENT_BINDING]: segments } : buffers;
}

/**
 * `code` with its one occurrence of `from` replaced by `to`: how a packed variant changes one
 * expression of a kernel while the kernel's file, and so its other variants, stay as they are.
 */
export function replaceOnceWgsl(code: string, from: string, to: string): string {
  const at = code.indexOf(from);
  if (at < 0 || code.indexOf(from, at + 1) >= 0) throw new Error(`WGSL composition: expected exactly one \`${from}\``);
  return code.slice(0, at) + to + code.slice(at + from.length);
}

/** Adds the position buffer at POSITION_BINDING when there is one. */
export function withPosition(buffers: Record<number, GPUBuffer>, position: GPUBuffer | undefined): Record<number, GPUBuffer> {
  return position ? { ...buffers, [POSITION_BINDING]: position } : buffers;
}

/** `fn start_pos() -> u32` for a kernel whose Params has a `start_pos` field. */
export function positionWgsl(source: PositionSource): string {
  return source === 'buffer'
    ? `@group(0) @binding(${POSITION_BINDING}) var<storage, read> step_position: array<u32>;\n` +
        `fn start_pos() -> u32 { return params.start_pos + step_position[0]; }\n`
    : `fn start_pos() -> u32 { return params.start_pos; }\n`;
}

/**
 * A snippet's module-scope names (functions, variables, constants) suffixed with `_${suffix}`, so
 * that several weight-format snippets can live in one module.
 */
export function renameWgsl(code: string, suffix: string): string {
  const names = new Set<string>();
  for (const m of code.matchAll(/\bfn\s+(\w+)/g)) names.add(m[1]);
  for (const m of code.matchAll(/\bvar<[^>]*>\s+(\w+)/g)) names.add(m[1]);
  for (const m of code.matchAll(/^const\s+(\w+)/gm)) names.add(m[1]);
  return code.replace(/\b\w+\b/g, (w) => (names.has(w) ? `${w}_${suffix}` : w));
}

/**

/**
 * Takes the named module-scope functions out of WGSL `code` (each from `fn name(` to its closing
 * brace; braces in // comments do not count): the rest, and the functions taken.
 */
export function takeWgslFunctions(code: string, names: readonly string[]): { rest: string; taken: string } {
  let rest = code;
  let taken = '';
  for (const name of names) {
    const start = rest.search(new RegExp(`\\bfn ${name}\\s*\\(`));
    if (start < 0) continue;
    let depth = 0;
    let end = -1;
    for (let i = rest.indexOf('{', start); i < rest.length; i++) {
      if (rest.startsWith('//', i)) i = rest.indexOf('\n', i);
      else if (rest[i] === '{') depth++;
      else if (rest[i] === '}' && --depth === 0) {
        end = i + 1;
        break;
      }
    }
    if (end < 0) throw new Error(`unbalanced braces in WGSL function ${name}`);
    taken += `${rest.slice(start, end)}\n`;
    rest = rest.slice(0, start) + rest.slice(end);
  }
  return { rest, taken };
}

/** Slices a head's vector takes in the attention kernels: vec4s when the head dimension allows, else floats. */
export function headSlices(headDim: number): number {
  return headDim % 4 === 0 ? headDim / 4 : headDim;
}

/** Unrolled copies of a slice loop's body up to which unrollConstLoops is used (beyond, the code grows more than the loop costs). */
export const MAX_UNROLLED_SLICES = 16;

/**
 * Unrolls every `for (var v = 0u; v < NAME; v++) { ... }` loop of a shader whose bound NAME is in
 * `counts`, nested ones included, into one copy of the body per value, with v a constant. Why:
 * SwiftShader does not unroll them, and a function-scope array indexed by a loop variable goes
 * through memory lane by lane. Measurements: docs/tuning.md#attention
 */
export function unrollConstLoops(code: string, counts: Record<string, number>): string {
  const loop = /for \(var (\w+) = 0u; \1 < (\w+); \1\+\+\) \{/g;
  let out = '';
  let from = 0;
  for (let m = loop.exec(code); m; m = loop.exec(code)) {
    const count = counts[m[2]];
    if (count === undefined || m.index < from) continue;
    const bodyStart = m.index + m[0].length;
    let depth = 1;
    let end = bodyStart;
    for (; depth > 0; end++) {
      if (end >= code.length) throw new Error(`unrollConstLoops: unbalanced braces after ${m[0]}`);
      if (code[end] === '{') depth++;
      else if (code[end] === '}') depth--;
    }
    const body = unrollConstLoops(code.slice(bodyStart, end - 1), counts);
    const name = new RegExp(`\\b${m[1]}\\b`, 'g');
    out += code.slice(from, m.index) + Array.from({ length: count }, (_, k) => `{${body.replace(name, `${k}u`)}}`).join(' ');
    from = end;
    loop.lastIndex = end;
  }
  return out + code.slice(from);
}
