// Measures the decode-layer path's batch step (createLayeredBatchStep) on stories260K, greedy:
// today's single-sequence DecodeStep, the batch step at B = 1, and at B = 8 (aggregate tokens/s),
// all in one run on one device. Each runs STEPS steps in one compute pass, its greedy pick feeding
// the next step; the tokens of a row are checked against the single step's.
//
//   node bin/run-ts.mjs scripts/batch-layers-timing.ts [--model DIR] [--steps N] [--repeats R] [--rows B] [--groups G,...]
//
// G: the batch steps' workgroups (LayeredBatchOptions.rowGroups), one batch step each.
//
// Numbers vary with the machine's load: run it on an idle machine, twice.
import { parseArgs } from 'node:util';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { loadModelFromPath } from '../src/node/index.ts';
import type { LlamaModel } from '../src/model/llama.ts';
import type { KvCache } from '../src/model/kv-cache.ts';
import type { BatchDecodeStep } from '../src/model/batch-step.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'public/models/stories260K/hf' },
    steps: { type: 'string', default: '32' },
    repeats: { type: 'string', default: '3' },
    rows: { type: 'string', default: '8' },
    groups: { type: 'string', default: '1' },
  },
});
const STEPS = Number(values.steps);
const REPEATS = Number(values.repeats);
const ROWS = Number(values.rows);
if (STEPS > 32) throw new Error('at most 32 steps: the greedy records are a ring of 32');

const ctx = await nodeGpuContext({ log: () => {} });
const engine = await loadModelFromPath(values.model, { weightStorage: 'f32', gpu: ctx });
const model = (engine.generator as unknown as { model: LlamaModel }).model;
const device = model.ctx.device;
const CAPACITY = 256;
const prompt = [1, 403, 407, 261, 378]; // BOS, then a few ids of the story vocabulary

async function read(buffer: GPUBuffer, offset: number, bytes: number): Promise<ArrayBuffer> {
  const staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, bytes);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = staging.getMappedRange().slice(0);
  staging.destroy();
  return out;
}

/** ms for STEPS steps that `encodeStep` records into one pass. */
async function time(setUp: (encoder: GPUCommandEncoder) => void, encodeStep: (pass: GPUComputePassEncoder) => void): Promise<number> {
  const encoder = device.createCommandEncoder();
  setUp(encoder);
  const pass = encoder.beginComputePass();
  for (let k = 0; k < STEPS; k++) encodeStep(pass);
  pass.end();
  const t0 = performance.now();
  device.queue.submit([encoder.finish()]);
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}

/** Ids from greedy records (u32 id first) of positions p0 .. p0 + STEPS - 1. */
function ids(records: ArrayBuffer, base: number, bytes: number, slots: number, p0: number): number[] {
  const view = new DataView(records);
  return Array.from({ length: STEPS }, (_, k) => view.getUint32(base + ((p0 + k) % slots) * bytes, true));
}

// Today's step.
const single = model.createKvCache(CAPACITY);
await model.forward(prompt, 0, single, { readBack: false });
const step = model.createDecodeStep(single);
if (!step.greedy || !step.consecutive) throw new Error('stories260K does not take the decode-layer greedy step here');
const p0 = prompt.length;
const setSingle = (encoder: GPUCommandEncoder) => {
  device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([prompt[p0 - 1]]));
  step.consecutive!.setPosition(encoder, p0 - 1, STEPS);
};
const runSingle = () => time(setSingle, (pass) => step.greedy!.encodeInPass(pass));
await runSingle();
const gr = step.greedy.records;
const want = ids(await read(gr.buffer, gr.offset, gr.slots * gr.bytes), 0, gr.bytes, gr.slots, p0 - 1);

// The batch steps (one for each number of workgroups asked for): every slot holds the prompt's K/V.
const groupCounts = values.groups.split(',').map(Number);
const batches = groupCounts.map((rowGroups) => {
  const cache = model.createKvCache(CAPACITY, 'f16', undefined, ROWS);
  const made = model.createLayeredBatchStep(cache, { maxRows: ROWS, rowGroups });
  if (typeof made === 'string') throw new Error(made);
  const copy = device.createCommandEncoder();
  for (let s = 0; s < ROWS; s++) {
    for (let l = 0; l < cache.keys.length; l++) {
      const { keys, values, offset } = made.slotKv(l, s);
      copy.copyBufferToBuffer((single as KvCache).keys[l], 0, keys, offset, cache.slotBytes(l));
      copy.copyBufferToBuffer(single.values[l], 0, values, offset, cache.slotBytes(l));
    }
  }
  device.queue.submit([copy.finish()]);
  return made;
});
const runBatch = async (batch: BatchDecodeStep, rows: number) => {
  const setUp = () => {
    batch.setRows(Array.from({ length: rows }, (_, r) => ({ slot: r, position: p0 - 1 })));
    for (let r = 0; r < rows; r++) device.queue.writeBuffer(batch.rowToken(r).buffer, batch.rowToken(r).offset, new Uint32Array([prompt[p0 - 1]]));
  };
  const ms = await time(setUp, (pass) => batch.encodeInPass!(pass));
  const rec = batch.greedy!.records;
  const all = await read(rec.buffer, rec.offset, rows * rec.slots * rec.bytes);
  for (let r = 0; r < rows; r++) {
    const got = ids(all, r * rec.slots * rec.bytes, rec.bytes, rec.slots, p0 - 1);
    if (got.join() !== want.join()) throw new Error(`row ${r} of ${rows}: tokens ${got} differ from the single step's ${want}`);
  }
  return ms;
};
// Interleaved, best of REPEATS each (after one run each that compiles and warms up), so that the
// machine's load weighs on all alike.
let singleMs = Infinity;
const b1 = batches.map(() => Infinity);
const bN = batches.map(() => Infinity);
for (let i = 0; i <= REPEATS; i++) {
  const t = await runSingle();
  if (i > 0) singleMs = Math.min(singleMs, t);
  for (const [j, batch] of batches.entries()) {
    const [one, all] = [await runBatch(batch, 1), await runBatch(batch, ROWS)];
    if (i === 0) continue;
    b1[j] = Math.min(b1[j], one);
    bN[j] = Math.min(bN[j], all);
  }
}

const perToken = (ms: number, tokens: number) => `${((ms / tokens) * 1000).toFixed(0)} µs/token, ${((tokens / ms) * 1000).toFixed(0)} tokens/s`;
console.log(`stories260K, ${STEPS} greedy steps a run (best of ${REPEATS}), on this machine's adapter`);
console.log(`  DecodeStep (today):  ${step.dispatchCount} dispatches a step, ${perToken(singleMs, STEPS)}`);
for (const [j, batch] of batches.entries()) {
  const g = `rows in ${groupCounts[j]} workgroup(s)`;
  console.log(`  batch step, B = 1, ${g}: ${batch.dispatchCount} dispatches a step, ${perToken(b1[j], STEPS)}`);
  console.log(`  batch step, B = ${ROWS}, ${g}: ${perToken(bN[j], STEPS * ROWS)} aggregate (${((bN[j] / STEPS) * 1000).toFixed(0)} µs a step)`);
}
console.log(`  greedy tokens: ${want.join(' ')} (every row the same as the single step's)`);
batches.forEach((b) => b.destroy());
step.destroy();
await engine.unload();
