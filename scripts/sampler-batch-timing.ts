// Times one step of `rows` sampled sequences (temperature 0.8, top_p 0.9) sampled together
// (SamplerBank.encodeRows: one set of dispatches) against each sampled alone (its own
// dispatches), on the process's GPU (SwiftShader where there is none):
//
//   node bin/run-ts.mjs scripts/sampler-batch-timing.ts [--vocab N] [--rows N] [--steps N]
//
// Prints the median ms of a step (encoded, submitted and waited for) of each, alternating.
import { parseArgs } from 'node:util';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { GpuSampler } from '../src/sampling/gpu-sampler.ts';
import { SamplerBank, type SampleRow } from '../src/sampling/sampler-bank.ts';
import { randomF32 } from '../test/helpers/prng.ts';

const { values } = parseArgs({
  options: { vocab: { type: 'string', default: '32000' }, rows: { type: 'string', default: '8' }, steps: { type: 'string', default: '20' } },
});
const V = Number(values.vocab);
const rows = Number(values.rows);
const steps = Number(values.steps);

const ctx = await nodeGpuContext({ log: () => {} });
const device = ctx.device;
const bank = await SamplerBank.create(ctx, V, { states: rows, recordSlots: 2 });
const samplers = Array.from({ length: rows }, (_, s) => new GpuSampler(bank, s));
const rowBytes = Math.ceil((V * 4) / 256) * 256;
const logits = device.createBuffer({ size: rows * rowBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
const tokens = device.createBuffer({ size: rows * 256, usage: GPUBufferUsage.STORAGE });
for (let r = 0; r < rows; r++) device.queue.writeBuffer(logits, r * rowBytes, new Float32Array(randomF32(V, r, 8)));
samplers.forEach((s, i) => s.beginSequence({ params: { temperature: 0.8, topP: 0.9 }, promptTokens: [], seed: i, stream: 0, banned: [], minTokens: 0 }));
const sampleRows = (step: number): SampleRow[] =>
  samplers.map((s, r) => ({ state: s.state, step, slot: 0, logits: { buffer: logits, offset: r * rowBytes }, token: { buffer: tokens, offset: r * 256 } }));

async function once(together: boolean, step: number): Promise<number> {
  const t0 = performance.now();
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  if (together) bank.encodeRows(pass, sampleRows(step), 0);
  else for (const row of sampleRows(step)) samplers[row.state]!.encodeInPass(pass, row.logits, row.step, row.token, row.slot);
  pass.end();
  device.queue.submit([encoder.finish()]);
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const times = { together: [] as number[], alone: [] as number[] };
for (let i = 0; i < steps + 2; i++) {
  const a = await once(false, i);
  const t = await once(true, i);
  if (i >= 2) {
    times.alone.push(a);
    times.together.push(t);
  }
}
console.log(`vocab ${V}, ${rows} rows, ${bank.fused ? 'one dispatch a step' : 'one dispatch per pass'}, ${bank.dispatchesFor(samplers.map((s) => s.state))} dispatches together`);
console.log(`alone:    ${median(times.alone).toFixed(2)} ms a step of all rows`);
console.log(`together: ${median(times.together).toFixed(2)} ms (${(median(times.alone) / median(times.together)).toFixed(2)}x)`);
bank.destroy();
device.destroy();
