// Prefix caching: which KV layout to reuse a cached prefix with, measured in one run (Node, Dawn;
// on this project's machines SwiftShader). Not part of `npm run bench`:
//
//   node bin/run-ts.mjs bench/kv-layout.ts [--models stories260K,smollm2] [--ns 128,512,1000]
//        [--contexts 128,512,1000,2000] [--copy-runs 9] [--stories-prefill-runs 5]
//        [--smol-prefill-runs 1] [--smol-prefill-kv f32] [--attention-runs 5] [--no-prefill] [--no-attention]
//
// The two ways to reuse the K/V of N cached prompt positions:
//  (a) contiguous + copy: the cache keeps its layout (src/model/kv-cache.ts: per layer a K and a V
//      buffer, rows [position, kvHeads * headDim]); a hit copies the stored prefix's rows into the
//      working cache, 2 x layers copyBufferToBuffer of N x rowBytes, and prefills only the rest;
//  (b) paged (vLLM): blocks of BLOCK positions and a block table; sharing a block costs nothing,
//      but every attention kernel reads K/V through the table, row = table[p / BLOCK] * BLOCK + p % BLOCK.
//
// Measured:
//  1. Copy vs prefill, per model (stories260K; a random-weight model of SmolLM2-135M's shape,
//     generated into generated-models/ as `npm run bench` does) and N: the copy of N positions of
//     K and V for every layer (f32 and f16 KV), against prefilling those N tokens through
//     LlamaModel.forward in chunks as LlamaGenerator's prefill does. Both timed from the start of
//     recording to queue.onSubmittedWorkDone(); the median of several runs (SmolLM2's prefill: one
//     run, f32 cache, after one untimed run of the smallest N, as SwiftShader prefills ~10 tokens/s there).
//  2. Paged vs contiguous attention, SmolLM2's shape (9 heads on 3 KV heads of 64): the decode
//     attention (decode_attention_pass.wgsl, and split_combine where the cache splits) and the
//     prefill attention (attention.wgsl, 128 new tokens), both as src/gpu/kernels/attention.ts
//     composes and plans them, and a paged variant of each: the same WGSL text with every cache
//     row index p replaced by paged_row(p), reading a block table (blocks of 16, shuffled). Each
//     variant's output is compared with the contiguous one on random data first. The kernels run
//     once per layer over a cache of its own (30 layers of the decode attention, as a decode step
//     does; 1 of the prefill attention), timed per submit. For scale, the contiguous GPU decode
//     step (LlamaModel.createDecodeStep) at the same positions.
//  3. What cannot be timed here: the storage buffers each kernel binds against the device's limit
//     (a block table is one more), and decode_layer.wgsl's grouping of layers under that limit.
//
// Tables (markdown) on stdout, then one JSON line with every figure; progress on stderr.
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import type { GpuContext } from '../src/gpu/device.ts';
import {
  attentionSpec,
  decodeAttentionSpec,
  planAttention,
  planDecodeAttention,
  type AttentionKernels,
  type AttentionVariant,
  type DecodeAttentionVariant,
} from '../src/gpu/kernels/attention.ts';
import { decodeLayerGroups } from '../src/gpu/kernels/decode-layer.ts';
import { DECODE_LAYER_STORAGE_BUFFERS } from '../src/gpu/kernels/decode-layer-layout.ts';
import type { ShaderSpec } from '../src/gpu/pipelines.ts';
import { writeUniformValues, type PlannedDispatch } from '../src/gpu/uniforms.ts';
import type { KvDType } from '../src/gpu/kernels/index.ts';
import { DEFAULT_PREFILL_CHUNK_TOKENS } from '../src/engine/generator.ts';
import { loadGenerator } from '../src/engine/load.ts';
import type { LlamaModel } from '../src/model/llama.ts';
import { KvCache } from '../src/model/kv-cache.ts';
import { filesFromPath } from '../src/node/files.ts';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { ensureGenerated } from './real-shapes.ts';
import { STORIES_PATH } from './workload.ts';
import { mulberry32 } from '../scripts/prng.ts';
import { readBufferF32 } from '../src/gpu/buffers.ts';

const log = (message: string) => process.stderr.write(message + '\n');

const { values } = parseArgs({
  options: {
    models: { type: 'string', default: 'stories260K,smollm2' },
    ns: { type: 'string', default: '128,512,1000' },
    contexts: { type: 'string', default: '128,512,1000,2000' },
    'copy-runs': { type: 'string', default: '9' },
    'stories-prefill-runs': { type: 'string', default: '5' },
    'smol-prefill-runs': { type: 'string', default: '1' },
    'attention-runs': { type: 'string', default: '5' },
    // SmolLM2's prefill on SwiftShader runs ~10 tokens/s: by default timed with the f32 cache only
    // (what a CPU adapter defaults to), after one untimed run of the smallest N only.
    'smol-prefill-kv': { type: 'string', default: 'f32' },
    'no-prefill': { type: 'boolean', default: false },
    'no-attention': { type: 'boolean', default: false },
  },
});
const ints = (s: string) => s.split(',').map((x) => {
  const n = Number(x);
  if (!Number.isInteger(n) || n < 1) throw new Error(`not a positive integer: ${x}`);
  return n;
});
const NS = ints(values.ns!);
const CONTEXTS = ints(values.contexts!);
const COPY_RUNS = ints(values['copy-runs']!)[0];
const ATTENTION_RUNS = ints(values['attention-runs']!)[0];

/** Positions a page (block) of the paged layout holds. */
const BLOCK = 16;
/** Layers the decode attention runs over per timed submit (SmolLM2's layer count: one decode step's attention). */
const DECODE_LAYERS = 30;
/** Layers the prefill attention runs over per timed submit. */
const PREFILL_LAYERS = 1;
/** New tokens of the timed prefill attention (at the end of the context). */
const PREFILL_T = 128;
/** SmolLM2-135M's attention. */
const SMOL = { heads: 9, kvHeads: 3, headDim: 64, pairing: 'halves' as const };
const KV_DTYPES: KvDType[] = ['f32', 'f16'];

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const round = (x: number, digits = 2) => Number(x.toFixed(digits));

/** Milliseconds from recording the work (`encode`, then submit) to the queue reporting it done, one per trial. */
async function timeSubmitted(device: GPUDevice, trials: number, encode: (encoder: GPUCommandEncoder) => void): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < trials; i++) {
    await device.queue.onSubmittedWorkDone(); // from an idle queue
    const start = performance.now();
    const encoder = device.createCommandEncoder({ label: 'kv-layout bench' });
    encode(encoder);
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    times.push(performance.now() - start);
  }
  return times;
}

// ---- 1. copy vs prefill ------------------------------------------------------------------------

interface CopyPrefillRow {
  model: string;
  kv: KvDType;
  n: number;
  copy_mib: number;
  copy_ms: number;
  prefill_ms?: number;
  prefill_runs?: number;
}

async function loadModel(ctx: GpuContext, which: string): Promise<{ name: string; model: LlamaModel; destroy: () => void }> {
  const path = which === 'smollm2' ? ensureGenerated('smollm2', 'real') : STORIES_PATH;
  const name = which === 'smollm2' ? 'SmolLM2-135M shape (f32 weights)' : 'stories260K';
  const start = performance.now();
  const generator = await loadGenerator(ctx, filesFromPath(path), { id: which, contextLength: 16, weightStorage: 'f32', onWarning: log });
  log(`${name}: loaded in ${((performance.now() - start) / 1000).toFixed(1)} s`);
  return { name, model: generator.model, destroy: () => generator.destroy() };
}

async function copyVsPrefill(
  ctx: GpuContext,
  name: string,
  model: LlamaModel,
  prefill: { runs: number; kv: KvDType[]; warmAll: boolean },
): Promise<CopyPrefillRow[]> {
  const device = ctx.device;
  const config = model.config;
  const capacity = Math.max(...NS);
  const rows: CopyPrefillRow[] = [];
  for (const kv of KV_DTYPES) {
    const stored = model.createKvCache(capacity, kv); // the cached prefix's K/V
    const working = model.createKvCache(capacity, kv); // the request's cache
    try {
      const copyAll = (n: number) => (encoder: GPUCommandEncoder) => {
        for (let l = 0; l < config.numLayers; l++) {
          encoder.copyBufferToBuffer(stored.keys[l], 0, working.keys[l], 0, n * stored.rowBytes);
          encoder.copyBufferToBuffer(stored.values[l], 0, working.values[l], 0, n * stored.rowBytes);
        }
      };
      await timeSubmitted(device, 2, copyAll(capacity)); // first touch of every page
      for (const n of NS) {
        const ms = median(await timeSubmitted(device, COPY_RUNS, copyAll(n)));
        const mib = (2 * config.numLayers * n * stored.rowBytes) / 2 ** 20;
        rows.push({ model: name, kv, n, copy_mib: round(mib, 3), copy_ms: round(ms, 3) });
        log(`${name} kv ${kv}: copy ${n} positions (${mib.toFixed(2)} MiB): ${ms.toFixed(3)} ms`);
      }
      if (values['no-prefill'] || !prefill.kv.includes(kv)) continue;
      // The prefill of the same N tokens, as LlamaGenerator.prefill: chunks of at most
      // DEFAULT_PREFILL_CHUNK_TOKENS through forward(), no read-back, the last chunk's logits left on the GPU.
      const logits = device.createBuffer({ label: 'bench logits', size: config.vocabSize * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
      const random = mulberry32(7);
      for (const n of NS) {
        const tokens = Array.from({ length: n }, () => 3 + Math.floor(random() * (config.vocabSize - 3)));
        const runPrefill = async () => {
          await device.queue.onSubmittedWorkDone();
          const start = performance.now();
          for (let s = 0; s < n; s += DEFAULT_PREFILL_CHUNK_TOKENS) {
            const part = tokens.slice(s, s + DEFAULT_PREFILL_CHUNK_TOKENS);
            const last = s + part.length === n;
            await model.forward(part, s, working, { readBack: false, ...(last ? { lastLogitsTo: logits } : {}) });
          }
          await device.queue.onSubmittedWorkDone();
          return performance.now() - start;
        };
        // The untimed run compiles the pipelines of these token counts (with warmAll false, for the
        // first N only: a later N's first timed run may compile the few variants its length adds).
        const warm = prefill.warmAll || n === NS[0] ? await runPrefill() : undefined;
        const times: number[] = [];
        for (let r = 0; r < prefill.runs; r++) times.push(await runPrefill());
        const row = rows.find((x) => x.kv === kv && x.n === n && x.model === name)!;
        row.prefill_ms = round(median(times), 1);
        row.prefill_runs = prefill.runs;
        log(`${name} kv ${kv}: prefill ${n} tokens: ${row.prefill_ms} ms (untimed first run ${warm?.toFixed(0) ?? 'none'} ms; runs ${times.map((t) => t.toFixed(0)).join(', ')})`);
      }
      logits.destroy();
    } finally {
      stored.destroy();
      working.destroy();
    }
  }
  return rows;
}

// ---- 2. paged vs contiguous attention ------------------------------------------------------

/**
 * `spec`'s WGSL with every K/V cache row index p read through the block table: p * stride becomes
 * paged_row(p) * stride. Throws unless it replaced exactly `expected` indexings (a kernel edited
 * since would otherwise be measured unpaged).
 */
function pagedSpec(spec: ShaderSpec, patterns: [RegExp, string][], expected: number): ShaderSpec {
  let code = spec.code;
  let replaced = 0;
  for (const [pattern, replacement] of patterns) {
    code = code.replace(pattern, () => {
      replaced++;
      return replacement;
    });
  }
  if (replaced !== expected) throw new Error(`paged transform of ${spec.entryPoint}: ${replaced} cache row indexings replaced, expected ${expected}`);
  const table =
    `@group(0) @binding(${TABLE_BINDING}) var<storage, read> block_table: array<u32>;\n` +
    `const BLOCK: u32 = ${BLOCK}u;\n` +
    'fn paged_row(p: u32) -> u32 { return block_table[p / BLOCK] * BLOCK + p % BLOCK; }\n';
  return { ...spec, code: table + code };
}
const TABLE_BINDING = 9;

// decode_attention.wgsl: the loop's reads and the new row's write.
const DECODE_PATTERNS: [RegExp, string][] = [
  [/\(j \* kv_dim \+ kv_offset\)/g, '(paged_row(j) * kv_dim + kv_offset)'],
  [/store_kv_row\(pos \* kv_dim \+ kv_offset\)/g, 'store_kv_row(paged_row(pos) * kv_dim + kv_offset)'],
];
// attention.wgsl: per_thread's three key loops (per_workgroup's two indexings, if planned instead).
const PREFILL_PATTERNS: [RegExp, string][] = [
  [/\(j \* kv_row_stride \+ kv_offset\)/g, '(paged_row(j) * kv_row_stride + kv_offset)'],
  [/let k_base = j \* kv_row_stride/g, 'let k_base = paged_row(j) * kv_row_stride'],
  [/\(j0 \+ jj\) \* kv_row_stride/g, 'paged_row(j0 + jj) * kv_row_stride'],
];

/** Compiles specs as the registry would (layout 'auto'), keeping the variants asked for. */
class BenchPipelines {
  readonly cache = new Map<string, GPUComputePipeline>();
  readonly asked: { decode: DecodeAttentionVariant[]; prefill: AttentionVariant[] } = { decode: [], prefill: [] };
  constructor(readonly device: GPUDevice) {}
  get(key: string, spec: () => ShaderSpec): GPUComputePipeline {
    let p = this.cache.get(key);
    if (!p) {
      const s = spec();
      p = this.device.createComputePipeline({ label: key, layout: 'auto', compute: { module: this.device.createShaderModule({ label: key, code: s.code }), entryPoint: s.entryPoint } });
      this.cache.set(key, p);
    }
    return p;
  }
}

/** AttentionKernels whose decode (paged: and prefill) attention pipelines are compiled here, contiguous or paged. */
function benchKernels(base: AttentionKernels, pipelines: BenchPipelines, paged: boolean): AttentionKernels {
  return {
    ctx: base.ctx,
    tuning: base.tuning,
    attentionPipeline(v) {
      if (v.entry === 'split_combine') return base.attentionPipeline(v); // reads no cache
      pipelines.asked.prefill.push(v);
      const spec = () => (paged ? pagedSpec(attentionSpec(v), PREFILL_PATTERNS, 5) : attentionSpec(v));
      return pipelines.get(`${paged ? 'paged' : 'contiguous'}/${JSON.stringify(v)}`, spec);
    },
    decodeAttentionPipeline(v) {
      pipelines.asked.decode.push(v);
      const spec = () => (paged ? pagedSpec(decodeAttentionSpec(v), DECODE_PATTERNS, 2) : decodeAttentionSpec(v));
      return pipelines.get(`${paged ? 'paged' : 'contiguous'}/decode/${JSON.stringify(v)}`, spec);
    },
  };
}

/** A planned dispatch made ready to encode: its uniform buffer and bind group. */
interface Ready {
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  workgroups: number | [number, number];
}

function ready(device: GPUDevice, d: PlannedDispatch, table: GPUBuffer | undefined, owned: GPUBuffer[]): Ready {
  const uniform = device.createBuffer({ label: 'bench params', size: Math.ceil((d.params.length * 4) / 16) * 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  owned.push(uniform);
  const bytes = new ArrayBuffer(uniform.size);
  writeUniformValues(new DataView(bytes), d.params);
  device.queue.writeBuffer(uniform, 0, bytes);
  const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: { buffer: uniform } }];
  for (const [binding, buffer] of Object.entries(d.buffers)) entries.push({ binding: Number(binding), resource: { buffer } });
  // The table is bound where the pipeline uses it (the paged decode kernel; not split_combine).
  if (table && d.pipeline.label.startsWith('paged')) entries.push({ binding: TABLE_BINDING, resource: { buffer: table } });
  const bindGroup = device.createBindGroup({ layout: d.pipeline.getBindGroupLayout(0), entries });
  return { pipeline: d.pipeline, bindGroup, workgroups: d.workgroups };
}

function encodeAll(encoder: GPUCommandEncoder, dispatches: Ready[]): void {
  const pass = encoder.beginComputePass();
  for (const d of dispatches) {
    pass.setPipeline(d.pipeline);
    pass.setBindGroup(0, d.bindGroup);
    if (typeof d.workgroups === 'number') pass.dispatchWorkgroups(d.workgroups);
    else pass.dispatchWorkgroups(d.workgroups[0], d.workgroups[1]);
  }
  pass.end();
}


const maxAbsDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

/** Random K/V rows: f32 in [-1, 1), or f16 halves of magnitude in [2^-5, 1) packed two a word. */
function randomRows(rows: number, kvDim: number, kv: KvDType, random: () => number): Uint8Array<ArrayBuffer> {
  if (kv === 'f32') return new Uint8Array(Float32Array.from({ length: rows * kvDim }, () => random() * 2 - 1).buffer);
  const halves = Uint16Array.from({ length: rows * kvDim }, () => ((random() < 0.5 ? 1 : 0) << 15) | ((10 + Math.floor(random() * 5)) << 10) | Math.floor(random() * 1024));
  return new Uint8Array(halves.buffer);
}

/** The physical pool of a paged cache: logical row p at row table[p / BLOCK] * BLOCK + p % BLOCK. */
function pageRows(logical: Uint8Array, rowBytes: number, table: Uint32Array): Uint8Array<ArrayBuffer> {
  const pool = new Uint8Array(logical.length);
  const rows = logical.length / rowBytes;
  for (let p = 0; p < rows; p++) {
    const to = table[Math.floor(p / BLOCK)] * BLOCK + (p % BLOCK);
    pool.set(logical.subarray(p * rowBytes, (p + 1) * rowBytes), to * rowBytes);
  }
  return pool;
}

interface AttentionRow {
  kernel: 'decode' | 'prefill';
  kv: KvDType;
  context: number;
  entry: string;
  layers: number;
  contiguous_ms: number;
  paged_ms: number;
  overhead_pct: number;
  max_abs_diff: number;
  /** The contiguous kernel run on the paged pool: differs from the right output, so the check has teeth. */
  unpaged_diff: number;
}

async function pagedAttention(ctx: GpuContext, base: AttentionKernels): Promise<{ rows: AttentionRow[]; bindings: Record<string, number> }> {
  const device = ctx.device;
  const { heads, kvHeads, headDim } = SMOL;
  const kvDim = kvHeads * headDim;
  const qDim = heads * headDim;
  const capacity = Math.ceil((Math.max(...CONTEXTS) + 1) / BLOCK) * BLOCK;
  const blocks = capacity / BLOCK;
  const random = mulberry32(1);
  // The block table: a shuffled permutation of the pool's blocks, so no two neighbours are adjacent in memory.
  const tableData = Uint32Array.from({ length: blocks }, (_, i) => i);
  for (let i = blocks - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [tableData[i], tableData[j]] = [tableData[j], tableData[i]];
  }
  const owned: GPUBuffer[] = [];
  const storage = (label: string, data: ArrayBufferView | number) => {
    const size = typeof data === 'number' ? data : data.byteLength;
    const b = device.createBuffer({ label, size: Math.ceil(size / 4) * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC });
    owned.push(b);
    if (typeof data !== 'number') device.queue.writeBuffer(b, 0, data.buffer, data.byteOffset, data.byteLength);
    return b;
  };
  const table = storage('block_table', tableData);
  const invFreq = storage('inv_freq', Float32Array.from({ length: headDim / 2 }, (_, d) => 1 / Math.pow(100000, (2 * d) / headDim)));
  const qkv = storage('qkv', Float32Array.from({ length: qDim + 2 * kvDim }, () => random() * 2 - 1));
  const q = storage('q', Float32Array.from({ length: PREFILL_T * qDim }, () => random() * 2 - 1));
  const out = storage('out', PREFILL_T * qDim * 4);
  const chunkKeys = base.tuning.decodeChunkKeys;
  const chunks = Math.ceil(capacity / chunkKeys);
  const partials = storage('partials', heads * chunks * (headDim + 2) * 4);
  const shape = { ...SMOL };
  const pipelines = new BenchPipelines(device);
  const kernels = { contiguous: benchKernels(base, pipelines, false), paged: benchKernels(base, pipelines, true) };
  const rows: AttentionRow[] = [];
  const bindings: Record<string, number> = {};
  try {
    for (const kv of KV_DTYPES) {
      const rowBytes = kvDim * (kv === 'f16' ? 2 : 4);
      const logicalK = randomRows(capacity, kvDim, kv, random);
      const logicalV = randomRows(capacity, kvDim, kv, random);
      const layers = Math.max(DECODE_LAYERS, PREFILL_LAYERS);
      // Per layer a contiguous K/V and a paged pool of the same rows (the same data in every layer).
      const contiguous = { keys: [] as GPUBuffer[], values: [] as GPUBuffer[] };
      const paged = { keys: [] as GPUBuffer[], values: [] as GPUBuffer[] };
      const pagedK = pageRows(logicalK, rowBytes, tableData);
      const pagedV = pageRows(logicalV, rowBytes, tableData);
      for (let l = 0; l < layers; l++) {
        contiguous.keys.push(storage(`k.${l}`, logicalK));
        contiguous.values.push(storage(`v.${l}`, logicalV));
        paged.keys.push(storage(`pk.${l}`, pagedK));
        paged.values.push(storage(`pv.${l}`, pagedV));
      }
      // Restores layer 0's caches (the decode kernel writes its new row into them).
      const restore = () => {
        device.queue.writeBuffer(contiguous.keys[0], 0, logicalK);
        device.queue.writeBuffer(contiguous.values[0], 0, logicalV);
        device.queue.writeBuffer(paged.keys[0], 0, pagedK);
        device.queue.writeBuffer(paged.values[0], 0, pagedV);
      };
      for (const kernel of ['decode', 'prefill'] as const) {
        for (const context of CONTEXTS) {
          if (kernel === 'prefill' && context < PREFILL_T) continue;
          const plan = (which: 'contiguous' | 'paged', l: number, caches = which === 'paged' ? paged : contiguous): PlannedDispatch[] => {
            const k = kernels[which];
            if (kernel === 'decode') {
              return planDecodeAttention(k, { out, qkv, keys: caches.keys[l], values: caches.values[l], invFreq }, { startPos: context - 1 }, shape, kv,
                chunks > 1 ? { chunkKeys, partials } : undefined);
            }
            const d = planAttention(k, { out, q, keys: caches.keys[l], values: caches.values[l] }, { T: PREFILL_T, startPos: context - PREFILL_T }, shape, kv);
            return d ? [d] : [];
          };
          const n = kernel === 'decode' ? DECODE_LAYERS : PREFILL_LAYERS;
          const readyAll = (which: 'contiguous' | 'paged') =>
            Array.from({ length: n }, (_, l) => plan(which, l).map((d) => ready(device, d, table, owned))).flat();
          const outBytes = (kernel === 'decode' ? 1 : PREFILL_T) * qDim * 4;
          // Correctness on layer 0: paged against contiguous, and the contiguous kernel on the paged pool.
          const once = async (dispatches: Ready[]) => {
            restore();
            const encoder = device.createCommandEncoder();
            encoder.clearBuffer(out);
            device.queue.submit([encoder.finish()]);
            const e2 = device.createCommandEncoder();
            encodeAll(e2, dispatches);
            device.queue.submit([e2.finish()]);
            return readBufferF32(device, out, outBytes / 4);
          };
          const c0 = plan('contiguous', 0).map((d) => ready(device, d, table, owned));
          const p0 = plan('paged', 0).map((d) => ready(device, d, table, owned));
          const wrong0 = plan('contiguous', 0, paged).map((d) => ready(device, d, table, owned));
          const expected = await once(c0);
          const got = await once(p0);
          const wrong = await once(wrong0);
          const diff = maxAbsDiff(expected, got);
          const unpagedDiff = maxAbsDiff(expected, wrong);
          if (!(diff <= 1e-5) || !expected.every(Number.isFinite)) throw new Error(`paged ${kernel} attention (kv ${kv}, context ${context}) is wrong: max abs diff ${diff}`);
          if (!(unpagedDiff > 1e-3)) throw new Error(`paged ${kernel} check has no teeth: the unpaged kernel on the paged pool differs by only ${unpagedDiff}`);
          const contiguousAll = readyAll('contiguous');
          const pagedAll = readyAll('paged');
          bindings[`${kernel} attention (${plan('contiguous', 0)[0].pipeline.label.replace(/^contiguous\/(decode\/)?/, '')})`] = Object.keys(plan('contiguous', 0)[0].buffers).length;
          // Interleaved trials, so that drift in the machine's load falls on both alike.
          await timeSubmitted(device, 1, (e) => encodeAll(e, contiguousAll));
          await timeSubmitted(device, 1, (e) => encodeAll(e, pagedAll));
          const tc: number[] = [];
          const tp: number[] = [];
          for (let r = 0; r < ATTENTION_RUNS; r++) {
            tc.push(...(await timeSubmitted(device, 1, (e) => encodeAll(e, contiguousAll))));
            tp.push(...(await timeSubmitted(device, 1, (e) => encodeAll(e, pagedAll))));
          }
          const c = median(tc);
          const p = median(tp);
          const entry = kernel === 'decode' ? `decode_attention${chunks > 1 ? ' + split_combine' : ''}` : pipelines.asked.prefill.at(-1)!.entry;
          rows.push({ kernel, kv, context, entry, layers: n, contiguous_ms: round(c, 3), paged_ms: round(p, 3), overhead_pct: round((100 * (p - c)) / c, 1), max_abs_diff: diff, unpaged_diff: round(unpagedDiff, 3) });
          log(`${kernel} attention kv ${kv} context ${context} x${n} layers: contiguous ${c.toFixed(2)} ms, paged ${p.toFixed(2)} ms (${((100 * (p - c)) / c).toFixed(1)}%); diff ${diff}, unpaged ${unpagedDiff.toFixed(3)}`);
        }
      }
      for (const b of [...contiguous.keys, ...contiguous.values, ...paged.keys, ...paged.values]) b.destroy();
    }
  } finally {
    for (const b of owned) b.destroy();
  }
  return { rows, bindings };
}

interface StepRow {
  kv: KvDType;
  position: number;
  step_ms: number;
}

/** The contiguous GPU decode step of the model at the positions (its cache as long as the attention bench's). */
async function decodeSteps(ctx: GpuContext, model: LlamaModel): Promise<StepRow[]> {
  const device = ctx.device;
  const capacity = Math.ceil((Math.max(...CONTEXTS) + 1) / BLOCK) * BLOCK;
  const rows: StepRow[] = [];
  for (const kv of KV_DTYPES) {
    const cache = new KvCache(device, model.config, capacity, kv);
    const step = model.createDecodeStep(cache);
    try {
      device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([5]));
      await timeSubmitted(device, 1, (e) => step.encodeStep(e, 0));
      for (const context of CONTEXTS) {
        const ms = median(await timeSubmitted(device, ATTENTION_RUNS, (e) => step.encodeStep(e, context - 1)));
        rows.push({ kv, position: context - 1, step_ms: round(ms, 1) });
        log(`decode step kv ${kv} at position ${context - 1}: ${ms.toFixed(1)} ms (${step.dispatchCount} dispatches)`);
      }
    } finally {
      step.destroy();
      cache.destroy();
    }
  }
  return rows;
}

// ---- report --------------------------------------------------------------------------------

function table(header: string[], rows: (string | number)[][]): string {
  const line = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

async function main(): Promise<void> {
  const ctx = await nodeGpuContext({ log });
  const adapter = [ctx.adapter.vendor, ctx.adapter.architecture, ctx.adapter.description].filter(Boolean).join(' ');
  const maxStorage = ctx.limits.maxStorageBuffersPerShaderStage;
  const conditions = { adapter, cpus: cpus().length, cpu: cpus()[0]?.model, loadavg_start: loadavg().map((x) => round(x)), node: process.version };
  log(`adapter: ${adapter}; maxStorageBuffersPerShaderStage ${maxStorage}; load ${conditions.loadavg_start.join(' ')}`);
  const models = values.models!.split(',');
  const copyRows: CopyPrefillRow[] = [];
  let attention: { rows: AttentionRow[]; bindings: Record<string, number> } | undefined;
  let steps: StepRow[] = [];
  for (const which of models) {
    if (which !== 'stories260K' && which !== 'smollm2') throw new Error(`unknown model ${which}`);
    const { name, model, destroy } = await loadModel(ctx, which);
    try {
      if (which === 'smollm2' && !values['no-attention']) {
        attention = await pagedAttention(ctx, model.kernels);
        steps = await decodeSteps(ctx, model);
      }
      const smol = which === 'smollm2';
      const runs = ints(values[smol ? 'smol-prefill-runs' : 'stories-prefill-runs']!)[0];
      const kv = smol ? (values['smol-prefill-kv']!.split(',') as KvDType[]) : KV_DTYPES;
      copyRows.push(...(await copyVsPrefill(ctx, name, model, { runs, kv, warmAll: !smol })));
    } finally {
      destroy();
    }
  }
  const loadEnd = loadavg().map((x) => round(x));

  console.log(`adapter: ${adapter}; ${conditions.cpus} CPUs (${conditions.cpu}); Node ${process.version}`);
  console.log(`load average (1, 5, 15 min) at start: ${conditions.loadavg_start.join(', ')}; at end: ${loadEnd.join(', ')}\n`);
  console.log('Copy vs prefill (ms from recording to onSubmittedWorkDone; copy: median of ' + COPY_RUNS + ' runs)\n');
  console.log(table(
    ['model', 'KV', 'N', 'copy MiB', 'copy ms', 'prefill ms', 'prefill / copy'],
    copyRows.map((r) => [r.model, r.kv, r.n, r.copy_mib.toFixed(2), r.copy_ms.toFixed(2), r.prefill_ms === undefined ? '-' : `${r.prefill_ms.toFixed(0)} (${r.prefill_runs} run${r.prefill_runs === 1 ? '' : 's'})`,
      r.prefill_ms === undefined ? '-' : `${Math.round(r.prefill_ms / r.copy_ms)}x`]),
  ));
  if (attention) {
    console.log(`\nPaged (blocks of ${BLOCK}, shuffled table) vs contiguous attention, SmolLM2 shape; ms a submit of one dispatch a layer, median of ${ATTENTION_RUNS} interleaved runs\n`);
    console.log(table(
      ['kernel', 'KV', 'context', 'entry', 'layers', 'contiguous ms', 'paged ms', 'paged overhead', 'max abs diff', 'unpaged diff'],
      attention.rows.map((r) => [r.kernel, r.kv, r.context, r.entry, r.layers, r.contiguous_ms.toFixed(2), r.paged_ms.toFixed(2), `${r.overhead_pct >= 0 ? '+' : ''}${r.overhead_pct.toFixed(1)}%`, r.max_abs_diff, r.unpaged_diff]),
    ));
    console.log('\nContiguous GPU decode step (LlamaModel.createDecodeStep), SmolLM2 shape\n');
    console.log(table(['KV', 'position', 'step ms'], steps.map((r) => [r.kv, r.position, r.step_ms.toFixed(1)])));
  }
  // Binding counts (what a block table adds one to).
  const bindingRows: (string | number)[][] = Object.entries(attention?.bindings ?? {}).map(([k, n]) => [k, n, n + 1]);
  bindingRows.push(['decode_layer.wgsl, a binding per matrix', DECODE_LAYER_STORAGE_BUFFERS, DECODE_LAYER_STORAGE_BUFFERS + 1]);
  console.log(`\nStorage buffers bound (device limit maxStorageBuffersPerShaderStage: ${maxStorage}; WebGPU's default 8)\n`);
  console.log(table(['kernel', 'storage buffers', 'with a block table'], bindingRows));
  const groups = (limit: number, layers: number) => decodeLayerGroups(layers, limit, true, true).length;
  console.log('\ndecode_layer.wgsl over the arena (greedy, embedding and logits folded in): dispatches for the layers, without / with a table binding');
  for (const [name, layers] of [['stories260K', 5], ['30 layers', 30]] as const) {
    for (const limit of [8, maxStorage]) console.log(`  ${name}, limit ${limit}: ${groups(limit, layers)} / ${groups(limit - 1, layers)}`);
  }
  console.log(JSON.stringify({ conditions: { ...conditions, loadavg_end: loadEnd, maxStorageBuffersPerShaderStage: maxStorage }, copy_vs_prefill: copyRows, attention: attention?.rows, decode_steps: steps, bindings: attention?.bindings }));
}

await main();
process.exit(0);
