// Times the fused path's batched decode step (createFusedBatchStep) against today's single-sequence
// step (createDecodeStep, fused) on a random model of SmolLM2-135M's shape (fewer layers), on the
// process's GPU (SwiftShader where there is none):
//
//   node bin/run-ts.mjs scripts/batch-step-timing.ts [--layers N] [--steps N] [--rows N]
//
// Prints ms a step for the single step, the batch at B = 1, and the batch at B = rows (with its
// aggregate tokens a second). Each measurement runs `steps` steps, one submit each, after two
// warm-up steps; the K/V it reads is whatever the cache holds (timing only).
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

async function time(label: string, encodeStep: (encoder: GPUCommandEncoder, i: number) => void, tokensPerStep: number): Promise<void> {
  const run = async (n: number, from: number) => {
    for (let i = 0; i < n; i++) {
      const encoder = device.createCommandEncoder();
      encodeStep(encoder, from + i);
      device.queue.submit([encoder.finish()]);
    }
    await device.queue.onSubmittedWorkDone();
  };
  await run(2, 0);
  const t0 = performance.now();
  await run(steps, 2);
  const ms = (performance.now() - t0) / steps;
  console.log(`${label}: ${ms.toFixed(2)} ms a step, ${((1000 * tokensPerStep) / ms).toFixed(1)} tokens/s`);
}

const single = model.createDecodeStep(model.createKvCache(capacity, 'f16'));
const batchCache = model.createKvCache(capacity, 'f16', undefined, rows);
const batch = createFusedBatchStep(parts, batchCache, { maxRows: rows });
if (typeof batch === 'string') throw new Error(batch);
// The same step sized for one row: what B = 1 costs for the grids sized for maxRows rows.
const one = createFusedBatchStep(parts, batchCache, { maxRows: 1 });
if (typeof one === 'string') throw new Error(one);
console.log(`dispatches a step: single ${single.dispatchCount}, batch ${batch.dispatchCount} (with its greedy pick and advance); ${layers} layers`);
for (let round = 0; round < 2; round++) {
  await time('single step (createDecodeStep)', (encoder, i) => single.encodeStep(encoder, start + i), 1);
  one.setRows([{ slot: 0, position: start }]);
  await time('batch step of maxRows 1, B = 1', (encoder) => one.encode(encoder), 1);
  batch.setRows([{ slot: 0, position: start }]);
  await time(`batch step of maxRows ${rows}, B = 1`, (encoder) => batch.encode(encoder), 1);
  batch.setRows(Array.from({ length: rows }, (_, r) => ({ slot: r, position: start + 3 * r })));
  await time(`batch step, B = ${rows}`, (encoder) => batch.encode(encoder), rows);
}
single.destroy();
batch.destroy();
one.destroy();
model.destroy();
