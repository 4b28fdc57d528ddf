// Driven by scripts/llama-cpp-reference.ts (by hand, never by the tests): llama.cpp compiled to
// WebAssembly (@wllama/wllama, pinned devDependency) loads a GGUF and decodes greedily, on one
// CPU thread, so that its tokens are an independent reference for ours
// (test/model/llama-cpp-greedy.test.ts).
//
// wllama's completion takes its prompt as text only (its glue reads `prompt` as a string), so the
// script gives short texts and checks that llama.cpp counts as many prompt tokens as our tokenizer
// makes of them; most of each compared sequence is then llama.cpp's own greedy tokens.
//
// The token ids come from llama.cpp's per-token probabilities (`n_probs`), whose JSON holds each
// listed token's text: a token that is not valid UTF-8 by itself (a byte-fallback piece such as
// <0x81>) makes llama.cpp's JSON writer throw and the whole answer is lost. So such tokens are
// masked (`logit_bias` false: never sampled), and the probabilities are the sampler's own
// (`post_sampling_probs`: after top_k 1, the chosen token only), which never list a masked token.
// Hence no margins from llama.cpp: the test judges near-ties by our logits.
import { LoggerWithoutDebug, Wllama } from '@wllama/wllama/esm/index.js';
import wasmUrl from '@wllama/wllama/esm/wasm/wllama.wasm?url';

let wllama: Wllama | undefined;

export interface LoadedInfo {
  version: string;
  bos: number;
  eos: number;
  addBos: boolean;
  /** The tokens llama.cpp counts as end of generation (EOS, EOT, and the ones it finds by their text): `ignore_eos` masks them all. */
  eogIds: number[];
}

/** Loads a GGUF given as base64 (tiny test models: kilobytes to a few megabytes). */
async function load(ggufBase64: string, contextLength: number): Promise<LoadedInfo> {
  await wllama?.exit();
  const bytes = Uint8Array.from(atob(ggufBase64), (c) => c.charCodeAt(0));
  // llama.cpp's load errors are logged, and wllama's load does not always throw on them: a GGUF
  // llama.cpp refuses leaves a model of no vocabulary.
  const errors: string[] = [];
  const error = (...args: unknown[]) => errors.push(args.map(String).join(' '));
  wllama = new Wllama({ default: new URL(wasmUrl, location.href).href }, { logger: { ...LoggerWithoutDebug, log: () => {}, warn: () => {}, error }, suppressNativeLog: false });
  try {
    await wllama.loadModel([new Blob([bytes])], { n_threads: 1, n_ctx: contextLength, n_gpu_layers: 0 });
  } catch (e) {
    errors.push(String((e as Error).message ?? e));
  }
  let vocab = 0;
  try {
    vocab = wllama.getModelMetadata().hparams.nVocab;
  } catch {
    // not loaded
  }
  if (!(vocab > 0)) {
    const loadError = errors.find((m) => /error/i.test(m)) ?? errors[0] ?? 'no model loaded';
    throw new Error(`llama.cpp: ${loadError.replace(/^.*@@ERROR@@/, '').trim()}`);
  }
  const eogIds = Array.from({ length: vocab }, (_, id) => id).filter((id) => wllama!.isTokenEOG(id));
  return { version: Wllama.getLibllamaVersion(), bos: wllama.getBOS(), eos: wllama.getEOS(), addBos: wllama.mustAddBosToken(), eogIds };
}

export interface GreedyRequest {
  text: string;
  steps: number;
  /** Tokens never sampled (logit -inf). */
  masked: number[];
}

/** Greedy decoding of `steps` tokens (temperature 0, top_k 1, no penalties, EOS ignored). */
async function greedy(request: GreedyRequest): Promise<{ promptTokens: number; ids: number[] }> {
  if (!wllama) throw new Error('no model loaded');
  const response = await wllama.createCompletion({
    prompt: request.text,
    max_tokens: request.steps,
    temperature: 0,
    stream: false,
    // llama.cpp server parameters (wllama hands the body to llama.cpp's own parser).
    ...({
      top_k: 1, n_probs: 1, post_sampling_probs: true, ignore_eos: true, cache_prompt: false, repeat_penalty: 1, dry_multiplier: 0,
      logit_bias: request.masked.map((id) => [id, false]),
    } as object),
  });
  const content = (response.choices[0].logprobs as unknown as { content: { id: number }[] }).content;
  return { promptTokens: response.usage.prompt_tokens, ids: content.map((e) => e.id) };
}

async function unload(): Promise<void> {
  await wllama?.exit();
  wllama = undefined;
}

Object.assign(window, { llamaCppReference: { load, greedy, unload } });
