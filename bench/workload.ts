// What `npm run bench` runs: the models (stories260K, and a random-weight model of SmolLM2-135M's
// shape in each weight storage), their prompt and decode lengths, and the prompt text.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WeightStorage } from '../src/model/weights.ts';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** One model in one storage, with the request shape measured on it. */
export interface BenchCase {
  /** stories260K or SmolLM2-135M. */
  model: string;
  /** 'gguf' for a GGUF file (its tensors keep their own types), else the loader's weightStorage. */
  storage: WeightStorage | 'gguf';
  /** Model id in requests. */
  id: string;
  /** Where Node loads it from (a file or folder path) and where the page fetches it (through vite). */
  path: string;
  url: string;
  /** Target prompt length (BOS included) and max_tokens (with ignore_eos). */
  promptTokens: number;
  decodeTokens: number;
  runs: number;
  /**
   * Untimed pairs of requests, shaped as the timed ones, before them (after the warm-up request):
   * the JavaScript and WebAssembly JIT settle (wllama's decode and prefill speed up by 2-5x over
   * its first ~1.5 s of work while V8 tiers its code up).
   */
  warmupRuns: number;
  contextLength: number;
  /** Warm up with the prompt's first this many words (a slow model), else with the whole prompt. */
  warmupWords?: number;
}

export const STORIES_PATH = join(ROOT, 'public/models/stories260K/stories260K.gguf');
export const STORIES_URL = '/models/stories260K/stories260K.gguf';

export interface CaseCounts {
  promptTokens: number;
  decodeTokens: number;
  runs: number;
  warmupRuns: number;
}

export function storiesCase(counts: CaseCounts): BenchCase {
  return {
    model: 'stories260K',
    storage: 'gguf',
    id: 'stories260K',
    path: STORIES_PATH,
    url: STORIES_URL,
    ...counts,
    contextLength: 512, // what it was trained at; wllama gets the same n_ctx
  };
}

/** The SmolLM2-135M-shaped random model (scripts/model-families.ts) in `storage`; `dir` is its generated folder. */
export function smolCase(dir: string, storage: WeightStorage, counts: CaseCounts): BenchCase {
  return {
    model: 'SmolLM2-135M',
    storage,
    id: `smollm2-135m-${storage}`,
    path: dir,
    // vite serves files under the repo root at /@fs/<absolute path>.
    url: `/@fs${dir.endsWith('/') ? dir : dir + '/'}`,
    ...counts,
    contextLength: counts.promptTokens + counts.decodeTokens + 16,
    warmupWords: 3,
  };
}

// Plain story text, the kind stories260K was trained on; cut to the prompt length wanted.
export const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her ' +
  'friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. It was ' +
  'soft and round. Lily wanted to share the ball with her friend Tom. Tom was sad because he lost his toy ' +
  'car. Lily said, "Tom, do you want to play with my ball?" Tom smiled and said, "Yes, thank you, Lily!" ' +
  'They threw the ball to each other and laughed. Then the sun went down and it was time to go home. ' +
  'Mom gave Lily a big hug and a warm cup of milk. Lily told Mom about the ball and her friend Tom. Mom ' +
  'said, "You are a good friend, Lily." Lily was happy. She went to bed and dreamed about the park, the ' +
  'ball and the sun. The next day, Lily and Tom went to the park again. They saw a little dog with a ' +
  'blue hat. The dog wanted to play too, so they all played together until it was time to eat.';

/** The longest prefix of the story (repeated as needed) of at most `target` prompt tokens, BOS included. */
export async function buildPrompt(countTokens: (text: string) => Promise<number>, target: number): Promise<{ prompt: string; tokens: number }> {
  const words = Array.from({ length: 4 }, () => STORY).join(' ').split(' ');
  let best = { prompt: words[0], tokens: await countTokens(words[0]) };
  let lo = 1;
  let hi = words.length;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const prompt = words.slice(0, mid).join(' ');
    const tokens = await countTokens(prompt);
    if (tokens <= target) {
      best = { prompt, tokens };
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}
