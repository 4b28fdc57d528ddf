// Embeddings beside a chat prefill of the same tokens (Node, on the engine: LlamaGenerator.embed
// and openSession), on stories260K. --embeddings-inputs inputs of different lengths (cut from the
// bench's story text, from --embeddings-min-tokens to --embeddings-max-tokens), each figure the
// median of --embeddings-runs runs whose parts alternate:
//
//   embed, one call:     embed(all inputs): the inputs' passes share command buffers (embed.ts).
//   embed, one by one:   embed([input]) for each input in turn.
//   prefill, sessions:   openSession (cache_prompt false) of each input, closed at once: what a chat
//                        request of that prompt costs before its first token (LM head on the last
//                        token, the logits' copy), the GPU's work awaited at the end.
//   prefill, one prompt: every input's tokens as one prompt (cut to the context): the prefill
//                        kernels at their most efficient, attention across everything.
//
// Figures: inputs/s and tokens/s (the inputs' tokens over the wall time of the part).
import { loadGenerator } from '../src/engine/load.ts';
import type { LlamaGenerator } from '../src/engine/generator.ts';
import { filesFromPath } from '../src/node/files.ts';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { stat, type Stat } from './measure.ts';
import { statCell, table } from './report.ts';
import { STORIES_PATH } from './workload.ts';

export interface EmbeddingsOptions {
  inputs: number;
  minTokens: number;
  maxTokens: number;
  runs: number;
}

export interface EmbeddingsPart {
  part: string;
  inputs_per_s: Stat;
  tokens_per_s: Stat;
}

export interface EmbeddingsFigures {
  host: 'node';
  model: string;
  adapter: string;
  inputs: number;
  tokens: number;
  runs: number;
  parts: EmbeddingsPart[];
  /** embed (one call) tokens/s over prefill (sessions) tokens/s, medians. */
  embed_over_sessions: number;
  error?: string;
}

const log = (message: string) => process.stderr.write(message + '\n');

/** `count` inputs from `text`'s tokens, of lengths spread evenly over min..max. */
function cutInputs(g: LlamaGenerator, text: string, o: EmbeddingsOptions): number[][] {
  const ids = g.tokenizer.encode(text, { addBos: false });
  const inputs: number[][] = [];
  let at = 0;
  for (let i = 0; i < o.inputs; i++) {
    const n = o.inputs === 1 ? o.maxTokens : Math.round(o.minTokens + ((o.maxTokens - o.minTokens) * i) / (o.inputs - 1));
    if (at + n > ids.length) at = 0;
    inputs.push(ids.slice(at, at + n));
    at += n;
  }
  return inputs;
}

/** The parts on stories260K, the inputs cut from `text` (tokenized whole). */
export async function measureEmbeddings(text: string, o: EmbeddingsOptions): Promise<EmbeddingsFigures> {
  const ctx = await nodeGpuContext({ log: () => {} });
  const g = await loadGenerator(ctx, filesFromPath(STORIES_PATH), { contextLength: 512, onWarning: () => {} });
  try {
    const inputs = cutInputs(g, text, o);
    const tokens = inputs.reduce((n, x) => n + x.length, 0);
    const joined = inputs.flat().slice(0, g.info.contextLength);
    const greedy = { temperature: 0, topP: 1 };
    const parts: Record<string, () => Promise<number>> = {
      'embed, one call': async () => {
        await g.embed(inputs);
        return tokens;
      },
      'embed, one by one': async () => {
        for (const input of inputs) await g.embed([input]);
        return tokens;
      },
      'prefill, sessions': async () => {
        for (const input of inputs) (await g.openSession({ promptTokens: input, sampling: greedy, cachePrompt: false })).close();
        await ctx.device.queue.onSubmittedWorkDone();
        return tokens;
      },
      'prefill, one prompt': async () => {
        (await g.openSession({ promptTokens: joined, sampling: greedy, cachePrompt: false })).close();
        await ctx.device.queue.onSubmittedWorkDone();
        return joined.length;
      },
    };
    const times = new Map<string, { inputs: number[]; tokens: number[] }>(Object.keys(parts).map((k) => [k, { inputs: [], tokens: [] }]));
    // One untimed round compiles every pipeline.
    for (const run of Object.values(parts)) await run();
    for (let r = 0; r < o.runs; r++) {
      for (const [name, run] of Object.entries(parts)) {
        const start = performance.now();
        const n = await run();
        const s = (performance.now() - start) / 1000;
        const t = times.get(name)!;
        t.inputs.push((name === 'prefill, one prompt' ? 1 : inputs.length) / s);
        t.tokens.push(n / s);
      }
      log(`embeddings: run ${r + 1}/${o.runs}`);
    }
    const figures = [...times].map(([part, t]) => ({ part, inputs_per_s: stat(t.inputs), tokens_per_s: stat(t.tokens) }));
    const median = (part: string) => figures.find((f) => f.part === part)!.tokens_per_s.median;
    return {
      host: 'node',
      model: 'stories260K',
      adapter: [ctx.adapter.vendor, ctx.adapter.architecture, ctx.adapter.description].filter(Boolean).join(' '),
      inputs: inputs.length,
      tokens,
      runs: o.runs,
      parts: figures,
      embed_over_sessions: Number((median('embed, one call') / median('prefill, sessions')).toFixed(2)),
    };
  } finally {
    g.destroy();
  }
}

export function embeddingsTable(f: EmbeddingsFigures): string {
  return table(
    ['part', 'inputs/s', 'tokens/s'],
    f.parts.map((p) => [p.part, statCell(p.inputs_per_s, 1), statCell(p.tokens_per_s, 0)]),
  );
}
