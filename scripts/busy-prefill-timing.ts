// Chooses the prefill pass length while other sequences decode (BUSY_PREFILL_CHUNK_TOKENS in
// src/engine/generator.ts): STREAMS greedy streams decode on stories260K while a newcomer with a
// long prompt arrives; per pass length, the newcomer's time to first token and the longest gap
// between two tokens of the streams (the stall the prefill causes), medians of REPEATS, the
// lengths taking turns.
//
//   node bin/run-ts.mjs scripts/busy-prefill-timing.ts [--chunks 32,64,128,256,512] [--prompt-tokens 480] [--repeats 3]
import { parseArgs } from 'node:util';
import { loadModelFromPath } from '../src/node/index.ts';
import type { CompletionChunk } from '../src/index.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'public/models/stories260K/stories260K.gguf' },
    chunks: { type: 'string', default: '32,64,128,256,512' },
    'prompt-tokens': { type: 'string', default: '480' },
    streams: { type: 'string', default: '7' },
    repeats: { type: 'string', default: '3' },
  },
});
const chunks = values.chunks.split(',').map(Number);
const STREAMS = Number(values.streams);
const engine = await loadModelFromPath(values.model, { contextLength: 1024 });
const generator = engine.generator as unknown as { busyPrefillChunkTokens: number; tokenizer: { encode(t: string): number[] } };
const words = 'Once upon a time there was a little girl named Lily who loved to play in the park with her friends and her dog'.split(' ');
let long = '';
while (generator.tokenizer.encode(long).length < Number(values['prompt-tokens'])) long += `${words[long.length % words.length]} `;

/** The stream's longest gap between two chunks with text after its first one, in ms. */
async function stream(prompt: string, maxTokens: number, stop: { done: boolean }): Promise<number> {
  const chunksOut = (await engine.complete({ model: engine.info.id, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, cache_prompt: false, stream: true })) as AsyncIterable<CompletionChunk>;
  let last: number | undefined;
  let gap = 0;
  for await (const chunk of chunksOut) {
    const now = performance.now();
    if (chunk.choices[0]?.text && last !== undefined && !stop.done) gap = Math.max(gap, now - last);
    if (chunk.choices[0]?.text) last = now;
  }
  return gap;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const results = new Map<number, { ttft: number[]; stall: number[]; idle: number[] }>(chunks.map((c) => [c, { ttft: [], stall: [], idle: [] }]));
await stream('Once', 4, { done: false }); // warm-up
for (let r = 0; r < Number(values.repeats); r++) {
  for (const chunk of chunks) {
    generator.busyPrefillChunkTokens = chunk;
    const stop = { done: false };
    const before = performance.now();
    const baseline = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(`${words[i]} ${words[i + 1]}`, 40, stop)));
    const idleGap = Math.max(...baseline);
    void before;
    const others = Array.from({ length: STREAMS }, (_, i) => stream(`${words[i]} ${words[i + 1]}`, 200, stop));
    await new Promise((resolve) => setTimeout(resolve, 150));
    const start = performance.now();
    await stream(long, 1, { done: false });
    const ttft = performance.now() - start;
    await new Promise((resolve) => setTimeout(resolve, 100));
    const gaps = await Promise.all(others);
    const entry = results.get(chunk)!;
    entry.ttft.push(ttft);
    entry.stall.push(Math.max(...gaps));
    entry.idle.push(idleGap);
    stop.done = false;
  }
}
console.log(`stories260K, ${STREAMS} streams decoding, a newcomer of ${generator.tokenizer.encode(long).length} prompt tokens; medians of ${values.repeats}`);
console.log('pass tokens  newcomer TTFT ms  streams longest gap ms  (without the newcomer)');
for (const [chunk, e] of results) console.log(`${String(chunk).padStart(11)}  ${median(e.ttft).toFixed(0).padStart(16)}  ${median(e.stall).toFixed(0).padStart(22)}  ${median(e.idle).toFixed(0).padStart(6)}`);
await engine.unload();
