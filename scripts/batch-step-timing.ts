// Times the fused path's batched decode step (createFusedBatchStep) against today's single-sequence
// step (createDecodeStep, fused) on a random model of SmolLM2-135M's shape (fewer layers), on the
// process's GPU (SwiftShader where there is none):
//
//   node bin/run-ts.mjs scripts/batch-step-timing.ts [--layers N] [--steps N] [--rows N]
//
// Prints the median ms a step of the single step, the batch at B = 1 (sized for 1 row and for
// `rows`), and the batch at B = rows (with its aggregate tokens a second): `steps` rounds after two
// warm-up ones, each variant one step a round (submitted and waited for), at one position each;
// the K/V it reads is whatever the cache holds (timing only).
import { parseArgs } from 'node:util';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { LlamaModel } from '../src/model/llama.ts';
import type { LlamaParts } from '../src/model/forward.ts';
import { createFusedBatchStep } from '../src/model/batch-step-fused.ts';
import { buildRandomModel, tinyConfig } from '../test/helpers/random-model.ts';

const { values } = parseArgs({
  options: { layers: { type: 'string', default: '6' }, steps: { type: 'string', default: '8' }, rows: { type: 'string', default: '8' } },
});
const layers = Number(values.layers);
const steps = Number(values.steps);
const rows = Number(values.rows);

const ctx = await nodeGpuContext({ log: () => {} });
const device = ctx.device;
console.log(`adapter: ${JSON.stringify(ctx.adapter)}`);
// SmolLM2-135M: hidden 576, 9 heads of 64, 3 KV heads, FFN 1536, vocab 49152, tied (30 layers).
const config = tinyConfig({
  vocabSize: 49152, hiddenSize: 576, intermediateSize: 1536, numLayers: layers, numHeads: 9, numKvHeads: 3, headDim: 64,
  contextLength: 2048, ropeTheta: 100000, tieWordEmbeddings: true,
});
const { gpu } = buildRandomModel(ctx, config, 'f16', 1);
const model = await LlamaModel.create(ctx, config, gpu, { tuning: { decodeLayer: () => false } });
const parts = (model as unknown as { parts: LlamaParts }).parts;
const capacity = 256;
const start = 64;

/** ms of one step (encoded, submitted and waited for). */
async function once(encodeStep: (encoder: GPUCommandEncoder) => void): Promise<number> {
  const t0 = performance.now();
  const encoder = device.createCommandEncoder();
  encodeStep(encoder);
  device.queue.submit([encoder.finish()]);
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const single = model.createDecodeStep(model.createKvCache(capacity, 'f16'));
const batchCache = model.createKvCache(capacity, 'f16', undefined, rows);
const batch = createFusedBatchStep(parts, batchCache, { maxRows: rows });
if (typeof batch === 'string') throw new Error(batch);
// The same step sized for one row: what B = 1 costs for the grids sized for maxRows rows.
const one = createFusedBatchStep(parts, batchCache, { maxRows: 1 });
if (typeof one === 'string') throw new Error(one);
console.log(`dispatches a step: single ${single.dispatchCount}, batch ${batch.dispatchCount} (with its greedy pick and advance); ${layers} layers`);
// The variants take turns, a step each, so that the machine's load drifts over all of them alike.
const cases: { label: string; tokens: number; setup: () => void; step: (encoder: GPUCommandEncoder, i: number) => void }[] = [
  { label: 'single step (createDecodeStep)', tokens: 1, setup: () => {}, step: (encoder, i) => single.encodeStep(encoder, start + i) },
  { label: 'batch step of maxRows 1, B = 1', tokens: 1, setup: () => one.setRows([{ slot: 0, position: start }]), step: (encoder) => one.encode(encoder) },
  { label: `batch step of maxRows ${rows}, B = 1`, tokens: 1, setup: () => batch.setRows([{ slot: 0, position: start }]), step: (encoder) => batch.encode(encoder) },
  {
    label: `batch step of maxRows ${rows}, B = ${rows}`,
    tokens: rows,
    setup: () => batch.setRows(Array.from({ length: rows }, (_, r) => ({ slot: r, position: start + 3 * r }))),
    step: (encoder) => batch.encode(encoder),
  },
];
const times = cases.map(() => [] as number[]);
for (let i = 0; i < steps + 2; i++) {
  for (const [c, { setup, step }] of cases.entries()) {
    setup(); // each run from its first position again: the steps of one variant at one position
    const ms = await once((encoder) => step(encoder, 0));
    if (i >= 2) times[c].push(ms);
  }
}
for (const [c, { label, tokens }] of cases.entries()) {
  const ms = median(times[c]);
  console.log(`${label}: median ${ms.toFixed(1)} ms a step (of ${times[c].map((t) => t.toFixed(0)).join(', ')}), ${((1000 * tokens) / ms).toFixed(2)} tokens/s`);
}
single.destroy();
batch.destroy();
one.destroy();
model.destroy();
