// Writes test/fixtures/llama-cpp-greedy.json: llama.cpp's greedy tokens on tiny random-weight GGUF
// models, the independent reference that test/model/llama-cpp-greedy.test.ts holds our runtime to.
// Run by hand (never by the tests), after a change to the generators or to wllama's version:
//
//   node bin/run-ts.mjs scripts/llama-cpp-reference.ts                     # every family below
//   node bin/run-ts.mjs scripts/llama-cpp-reference.ts qwen2 llama3        # some families (merged into the fixture)
//   node bin/run-ts.mjs scripts/llama-cpp-reference.ts --types f32,q8_0    # other GGUF types
//
// For each family and GGUF type: the model is generated (scripts/model-families.ts, f32 weights,
// a fixed seed, "sharp" scales: SCALES below), converted (scripts/gguf-from-hf.ts), and loaded by
// wllama (@wllama/wllama: llama.cpp in WebAssembly, one CPU thread) in headless Chromium
// (demo/test-pages/llama-cpp-reference.html, served by vite as the bench serves its pages). Each
// prompt text is decoded greedily for STEPS tokens (temperature 0, top_k 1, no penalties), recording
// llama.cpp's token ids. Masked on both sides (never sampled): the end-of-generation tokens (EOS
// ignored, as llama.cpp's ignore_eos does) and the tokens that are not valid UTF-8 by themselves
// (wllama cannot report them: demo/test-pages/llama-cpp-reference.ts says why). wllama cannot
// report llama.cpp's logit margins either, so the test judges near-ties by our own logits.
//
// wllama takes prompts as text only, so the prompts are short texts; their ids are our
// tokenizer's, and llama.cpp's prompt token count must equal theirs (else the script stops). Every
// token after the prompt is llama.cpp's own choice, so tokenizers are not what the test compares.
// The GGUF's SHA-256 is recorded: the test regenerates the file and refuses a different one.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startBrowser } from '../bench/hosts.ts';
import { GGUF_OUT_TYPES, type GgufOutType } from './gguf-from-hf.ts';
import { FIXTURE, generateReferenceGguf, sha256, type ReferenceFixture, type ReferenceModel, type ReferenceModelSpec } from './llama-cpp-models.ts';
import { ALL_FAMILIES, type Family } from './model-families.ts';

const ROOT = new URL('..', import.meta.url).pathname;

/** Greedy steps per prompt. */
const STEPS = 24;
const SEED = 30;
const CONTEXT = 256;
const PROMPTS = ['a', 'The', '7'];
const DEFAULT_TYPES: GgufOutType[] = ['f32', 'q8_0', 'q4_k'];
/**
 * Sharp weights: q·k times 9 where the generator does not sharpen it (attention far from uniform,
 * so a wrong RoPE or mask shows), the final norm times 6 (logits far apart: few near-ties), and the layers' outputs (o_proj, down_proj)
 * times 8 so they outweigh the token's own embedding in the residual: else the tied families
 * (Llama 3, SmolLM2, Qwen2) repeat their last token forever, which compares little.
 */
const SCALES = { 'self_attn.o_proj': 8, 'mlp.down_proj': 8, 'model.norm': 6 };
/** q and k times 3 for the families whose generator does not make attention sharp itself (model-families.ts SHARP_FAMILIES does for the others). */
const QK_SCALES = { 'self_attn.q_proj': 3, 'self_attn.k_proj': 3 };
const PLAIN_ATTENTION = ['llama2', 'llama3', 'smollm2', 'mistral', 'qwen2'];

/**
 * Per family: the tiny shape's distinguishing traits (GQA ratio, an explicit head_dim, biases,
 * tying), widened so that matrix rows are whole K-quant blocks of 256 where the trait allows.
 */
const OVERRIDES: Partial<Record<Family, Record<string, unknown>>> = {
  llama2: { hidden_size: 256, intermediate_size: 512, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 512 },
  // head_dim 32 apart from hidden/heads = 64: o_proj's rows (128) fall back from q4_k to q5_0, as llama.cpp does.
  llama3: { hidden_size: 256, head_dim: 32, intermediate_size: 512, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 300 },
  // 3 query heads over 1 KV head: hidden 384 (rows of 384 fall back from q4_k to q5_0).
  smollm2: { hidden_size: 384, intermediate_size: 512, num_attention_heads: 3, num_key_value_heads: 1, num_hidden_layers: 2, vocab_size: 290 },
  mistral: { hidden_size: 256, intermediate_size: 512, num_attention_heads: 4, num_key_value_heads: 1, num_hidden_layers: 2, vocab_size: 512 },
  qwen2: { hidden_size: 256, intermediate_size: 512, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 310 },
  // The issue-30 families at their tiny test shapes (model-families.ts), whose traits (LongRoPE
  // factors per rotary pair, the real Qwen3 vocabulary) are sized to them: rows of 32 or 16, so
  // q4_k falls back to q5_0 / f16 as llama.cpp would.
  qwen3: {},
  // llama.cpp's SmolLM3 has a fixed pattern (every 4th layer without RoPE); the tiny shape's [1, 0, 1, 0] is not it.
  smollm3: { no_rope_layers: [1, 1, 1, 0] },
  // llama.cpp b11364 turns Phi-3's sliding window off ("Phi SWA is currently disabled", its
  // PR 13676) where transformers (and we) apply it: a window of 64, the whole context, compares
  // the rest of Phi-3.
  phi3: { sliding_window: 64 },
  // llama.cpp's phi3 takes q's width to be the hidden size (attn_qkv of n_embd + 2 n_embd_gqa rows):
  // the tiny shape's head_dim 16 apart from 32 / 4 heads is refused ("check_tensor_dims: tensor
  // 'blk.0.attn_qkv.weight' has wrong shape"), so hidden 64 (16 x 4, as in Phi-4-mini: 128 x 24).
  phi4: { hidden_size: 64 },
  // Gemma 2 and Gemma 3 at their test shapes (Gemma 3 with its real 262k vocabulary: slow).
  gemma2: {},
  gemma3: {},
};

/** Storage per tensor kind: `blk.0.attn_q.weight` and `blk.1.attn_q.weight` as `attn_q.weight`. */
function storageSummary(storage: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, s] of Object.entries(storage)) {
    const kind = name.replace(/^blk\.\d+\./, '');
    out[kind] = out[kind] && out[kind] !== s ? `${out[kind]},${s}` : s;
  }
  return out;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({ options: { types: { type: 'string' } }, allowPositionals: true });
  const families = positionals.length ? positionals : Object.keys(OVERRIDES);
  for (const f of families) if (!(ALL_FAMILIES as readonly string[]).includes(f)) throw new Error(`unknown family ${f}: one of ${ALL_FAMILIES.join(', ')}`);
  const types = (values.types ? values.types.split(',') : DEFAULT_TYPES) as GgufOutType[];
  for (const t of types) if (!GGUF_OUT_TYPES.includes(t)) throw new Error(`GGUF types are ${GGUF_OUT_TYPES.join(', ')}`);

  const previous: ReferenceFixture | undefined = existsSync(FIXTURE) ? JSON.parse(readFileSync(FIXTURE, 'utf8')) : undefined;
  const { loadModelFromPath } = await import('../src/node/index.ts');
  const session = await startBrowser();
  const models: ReferenceModel[] = [];
  let llamaCpp = '';
  try {
    const page = await session.open('/test-pages/llama-cpp-reference.html', 'llamaCppReference');
    const call = <T>(fn: string, ...args: unknown[]): Promise<T> =>
      page.evaluate(([f, a]) => (window as any).llamaCppReference[f as string](...(a as unknown[])) as Promise<T>, [fn, args] as const);
    for (const family of families) {
      for (const type of types) {
        const scales = PLAIN_ATTENTION.includes(family) ? { ...QK_SCALES, ...SCALES } : SCALES;
        const spec: ReferenceModelSpec = { family, type, seed: SEED, dtype: 'f32', overrides: OVERRIDES[family as Family] ?? {}, scales, context: CONTEXT };
        const dir = mkdtempSync(join(tmpdir(), `llama-cpp-ref-${family}-`));
        try {
          let generated: Awaited<ReturnType<typeof generateReferenceGguf>>;
          try {
            generated = await generateReferenceGguf(spec, dir);
          } catch (error) {
            console.log(`${family} ${type}: not generated (${(error as Error).message}); left out`);
            continue;
          }
          const { path, storage, config } = generated;
          // Within the model's trained context (Phi's LongRoPE factors are chosen by it, on both sides).
          spec.context = Math.min(CONTEXT, config.max_position_embeddings as number);
          const model: ReferenceModel = {
            ...spec, gguf_sha256: sha256(path), gguf_bytes: readFileSync(path).length, storage: storageSummary(storage), eog_ids: [], masked_ids: [], prompts: [],
          };
          models.push(model);
          let loaded: { version: string; eogIds: number[] };
          try {
            loaded = await call('load', readFileSync(path).toString('base64'), spec.context);
          } catch (error) {
            model.error = String((error as Error).message ?? error).split('\n')[0];
            console.log(`${family} ${type}: llama.cpp refuses it: ${model.error}`);
            continue;
          }
          llamaCpp = loaded.version;
          model.eog_ids = loaded.eogIds;
          // Our tokenizer gives the prompt ids (llama.cpp's count must agree).
          const engine = await loadModelFromPath(path, { contextLength: spec.context });
          try {
            const tokenizer = engine.generator.tokenizer;
            const partial = Array.from({ length: engine.info.vocabSize }, (_, id) => id).filter((id) => tokenizer.decode([id]).includes('\uFFFD'));
            model.masked_ids = [...new Set([...loaded.eogIds, ...partial])].sort((a, b) => a - b);
            for (const text of PROMPTS) {
              const promptIds = [...engine.generator.tokenizer.encode(text)];
              const r = await call<{ promptTokens: number; ids: number[] }>('greedy', { text, steps: STEPS, masked: model.masked_ids });
              if (r.promptTokens !== promptIds.length) {
                throw new Error(`${family} ${type}: llama.cpp makes ${r.promptTokens} tokens of ${JSON.stringify(text)}, our tokenizer ${JSON.stringify(promptIds)}`);
              }
              model.prompts.push({
                text,
                prompt_ids: promptIds,
                greedy_ids: r.ids,
              });
            }
          } finally {
            engine.unload();
          }
          console.log(`${family} ${type}: ${model.prompts.length} prompts x ${STEPS} steps, ${model.masked_ids.length} masked ids; ${model.prompts.map((p) => p.greedy_ids.join(' ')).join(' | ')}`);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }
    }
    await call('unload');
  } finally {
    await session.close();
  }
  // Models of families not run this time are kept from the previous fixture.
  const key = (m: ReferenceModelSpec) => `${m.family}/${m.type}`;
  const fresh = new Set(models.map(key));
  const kept = (previous?.models ?? []).filter((m) => !fresh.has(key(m)));
  const wllamaVersion = JSON.parse(readFileSync(join(ROOT, 'node_modules/@wllama/wllama/package.json'), 'utf8')).version as string;
  const fixture: ReferenceFixture = {
    llama_cpp: llamaCpp || previous?.llama_cpp || '',
    wllama: wllamaVersion,
    steps: STEPS,
    context: CONTEXT,
    models: [...kept, ...models].sort((a, b) => key(a).localeCompare(key(b))),
  };
  // One line per array of numbers, so a prompt reads as three lines.
  const text = JSON.stringify(fixture, null, 1).replace(/\[\n\s*((?:-?[\d.e+-]+|null)(?:,\n\s*(?:-?[\d.e+-]+|null))*)\n\s*\]/g, (_, inner: string) => `[${inner.split(/,\n\s*/).join(', ')}]`);
  writeFileSync(FIXTURE, text + '\n');
  console.log(`wrote ${FIXTURE}: ${fixture.models.length} models`);
}

await main();
