// What shaders/sample.wgsl and the sampler that drives it (gpu-sampler.ts) share: the constants,
// defined here once and composed into the shader as a WGSL prelude (sampleWgslPrelude), and the
// two uniform structs' packers, which test/gpu/kernels/params.test.ts checks against the shader.
import { paramStruct } from '../gpu/uniforms.ts';

/** Most top alternatives a record holds (the API's logprobs maximum). */
const MAX_TOP = 20;
/** Ids per chunk: the unit of the chunk passes and of every partial sum. */
const CHUNK = 128;

/** The shader's shared constants, by their WGSL names (all u32). */
export const SAMPLE_CONSTANTS = {
  CHUNK,
  /** The per-id arrays are read as vec4s. */
  QUADS_PER_CHUNK: CHUNK / 4,
  /** Invocations of a chunk pass's workgroup (one chunk each). */
  CHUNK_WORKGROUP: 64,
  MAX_TOP,
  /** history[id]: the generated count in the low bits, and two flags. */
  SEEN: 0x80000000, // in the prompt or generated: repetition penalty
  BANNED: 0x40000000, // a stop id: -inf while step < min_tokens
  COUNT_MASK: 0x3fffffff,
  /** work[]: STATE_WORDS state words, then CHUNK_STRIDE words per chunk, then the top-N merge lists. */
  STATE_WORDS: 64,
  CHUNK_STRIDE: 32,
  /** Sequence.flags: skip the loads a sequence does not need; CONSTRAINED: the record slot's mask applies. */
  HAS_BIAS: 1,
  USES_HISTORY: 2,
  CONSTRAINED: 4,
  /** Radix-select rounds per selection: 4 bits of the 32-bit key a round. */
  DIGIT_ROUNDS: 8,
  /** A record: id, logprob, count, 0, then MAX_TOP x (id, logprob). */
  RECORD_WORDS: 4 + 2 * MAX_TOP,
} as const;

/**
 * Most invocations of the single-workgroup passes (the shader's WG): the sampler sets WG from the
 * vocabulary alone (min(MAX_WG, chunks rounded up to a power of two)), so every adapter sums in
 * the same order.
 */
export const MAX_WG = 256;

/** Words of one allowed-token mask (a bit an id) over `vocab` ids: what sample.wgsl computes from seq.vocab. */
export function maskWordsFor(vocab: number): number {
  return Math.ceil(vocab / 32);
}

/** The workgroup of the single-workgroup passes for `chunks` chunks. */
export function sampleWorkgroup(chunks: number): number {
  return Math.min(MAX_WG, 2 ** Math.ceil(Math.log2(chunks)));
}

/** The WGSL that precedes sample.wgsl: every shared constant, the workgroup `wg`, and `rows`, the most rows (and sequence states) a dispatch addresses. */
export function sampleWgslPrelude(wg: number, rows: number): string {
  const lines = Object.entries(SAMPLE_CONSTANTS).map(([name, value]) => `const ${name}: u32 = ${value}u;`);
  lines.push(`const WG: u32 = ${wg}u;`);
  lines.push(`const ROWS: u32 = ${rows}u;`);
  return `// Composed by src/sampling/sample-layout.ts.\n${lines.join('\n')}\n`;
}

/** sample.wgsl's `struct Sequence`: the sequence's parameters, written by beginSequence(). */
export const SAMPLE_SEQUENCE_PARAMS = paramStruct({
  vocab: 'u32',
  num_chunks: 'u32',
  n_top: 'u32',
  min_tokens: 'u32',
  temperature: 'f32',
  top_k: 'u32',
  top_p: 'f32',
  min_p: 'f32',
  repetition: 'f32',
  presence: 'f32',
  frequency: 'f32',
  key0: 'u32',
  key1: 'u32',
  stream: 'u32',
  quads: 'u32',
  flags: 'u32',
});

/**
 * sample.wgsl's `struct Step`: a dispatch's rows, in a uniform slot of its own. `row` holds `rows`
 * RowSteps (SAMPLE_ROW_PARAMS) of ROW_STEP_WORDS words each; written whole by the sampler (it may
 * exceed one 256-byte slot), with this layout.
 */
export const SAMPLE_STEP_PARAMS = paramStruct({ rows: 'u32', _pad0: 'u32', _pad1: 'u32', _pad2: 'u32', row: 'u32[]' });

/** sample.wgsl's `struct RowStep`: one row of a dispatch, its offsets in elements of each buffer. */
export const SAMPLE_ROW_PARAMS = paramStruct({
  state: 'u32',
  step: 'u32',
  logits: 'u32',
  token: 'u32',
  hist: 'u32',
  vals: 'u32',
  work: 'u32',
  record: 'u32',
  mask: 'u32',
  _pad0: 'u32',
  _pad1: 'u32',
  _pad2: 'u32',
});

/** Words of one RowStep, and of the Step header before the rows. */
export const ROW_STEP_WORDS = SAMPLE_ROW_PARAMS.fields.length;
export const STEP_HEADER_WORDS = 4;
