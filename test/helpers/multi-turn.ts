// A conversation of several turns through the API on one engine, then the same requests again
// with `cache_prompt: false`: what the prefix cache must not change (text, logprobs) and what it
// must report (cached_tokens, computed here from the token ids the engine was given and
// generated). Browser-safe: test/api/prefix-cache.test.ts runs it in Node, the page
// demo/test-pages/prefix-cache.ts in Chromium.
import { handleApiRequest } from '../../src/api/handler.ts';
import { commonPrefixLength, MIN_PREFILL_TOKENS } from '../../src/engine/prefix-cache.ts';
import type { FinishReason, GeneratedToken, GenerationSession, SessionRequest, TextGenerator } from '../../src/engine/types.ts';

type Json = Record<string, any>;

export interface TurnResult {
  endpoint: 'chat' | 'completions';
  promptTokens: number;
  /** usage.prompt_tokens_details.cached_tokens of the request with the cache. */
  cached: number;
  /** What the engine held from the turn before that this prompt begins with (at most all but its last MIN_PREFILL_TOKENS). */
  expectedCached: number;
  text: string;
  coldText: string;
  /** Per generated token, its logprob and its alternatives', with the cache and without. */
  logprobs: number[][];
  coldLogprobs: number[][];
  /** cached_tokens of the request with cache_prompt false (0). */
  coldCached: number;
}

interface Recorded {
  prompt: number[];
  /** Each sequence's yielded ids and whether it ended by a sampled stop id (then its last token's K/V is written too). */
  sequences: { ids: number[]; stopSampled: boolean }[];
}

/** `generator` with each session's prompt and each sequence's tokens recorded. */
function recording(generator: TextGenerator): { generator: TextGenerator; sessions: Recorded[] } {
  const sessions: Recorded[] = [];
  const openSession = async (request: SessionRequest): Promise<GenerationSession> => {
    const session = await generator.openSession(request);
    const record: Recorded = { prompt: [...request.promptTokens], sequences: [] };
    sessions.push(record);
    return {
      promptLogprobs: session.promptLogprobs,
      cachedTokens: session.cachedTokens,
      close: () => session.close(),
      async *sequence(options): AsyncGenerator<GeneratedToken, FinishReason, void> {
        const seq = { ids: [] as number[], stopSampled: false };
        record.sequences.push(seq);
        const finish = yield* tap(session.sequence(options), seq.ids);
        seq.stopSampled = finish === 'stop';
        return finish;
      },
    };
  };
  const wrapped = new Proxy(generator, {
    get: (target, property) => (property === 'openSession' ? openSession : Reflect.get(target, property, target)),
  });
  return { generator: wrapped, sessions };
}

/**
 * Records each id `tokens` yields. Stopped early (the API's `tokens.return()` after a stop string),
 * it ends `tokens` too: a generator that drives another by next() does not close it on return(),
 * and the engine's sequence learns what it wrote to the KV cache only as it ends, so left
 * suspended it would hold the prompt alone, shorter than what held() expects.
 */
async function* tap(tokens: AsyncGenerator<GeneratedToken, FinishReason, void>, ids: number[]): AsyncGenerator<GeneratedToken, FinishReason, void> {
  let done = false;
  try {
    for (;;) {
      const step = await tokens.next();
      if (step.done) {
        done = true;
        return step.value;
      }
      ids.push(step.value.id);
      yield step.value;
    }
  } finally {
    if (!done) await tokens.return('stop');
  }
}

/** The ids whose K/V a session left in the KV cache: its prompt and its last sequence's written tokens. */
function held(session: Recorded): number[] {
  const last = session.sequences.at(-1);
  if (!last) return session.prompt;
  const written = last.stopSampled ? last.ids.length : Math.max(0, last.ids.length - 1);
  return [...session.prompt, ...last.ids.slice(0, written)];
}

const USER_TURNS = [
  'Tell me a story about a cat.',
  'What happened next?',
  'Why did the cat do that?',
  'And the dog?',
  'How does it end?',
  'Tell it again, shorter.',
];

/**
 * Runs `turns` turns of a conversation on `generator` (whose prefix cache holds nothing yet):
 * chat (messages grow by the answer and a user message; the model needs a chat template) or
 * completions (the prompt text grows by the answer and more text). Turns alternate greedy and
 * seeded sampling, with logprobs. Then each turn's request again with cache_prompt false.
 */
export async function multiTurn(generator: TextGenerator, options: { endpoint: 'chat' | 'completions'; turns: number; maxTokens?: number }): Promise<TurnResult[]> {
  const { generator: recorded, sessions } = recording(generator);
  const post = async (path: string, body: Json): Promise<Json> => {
    const response = await handleApiRequest({ generator: recorded }, { method: 'POST', url: path, body: JSON.stringify(body) });
    const json = JSON.parse(response.body as string);
    if (response.status !== 200) throw new Error(`${path}: ${response.status} ${JSON.stringify(json)}`);
    return json;
  };
  const chat = options.endpoint === 'chat';
  const path = chat ? '/v1/chat/completions' : '/v1/completions';
  const bodies: Json[] = [];
  const results: TurnResult[] = [];
  const messages: Json[] = [{ role: 'system', content: 'You are a storyteller who answers briefly.' }];
  let prompt = 'Once upon a time, in a small town by the sea, there lived';
  let previous: Recorded | undefined;
  for (let turn = 0; turn < options.turns; turn++) {
    if (chat) messages.push({ role: 'user', content: USER_TURNS[turn % USER_TURNS.length] });
    // Greedy and seeded turns; the third ends at a stop string if one comes (the engine then stops early).
    const sampling = { ...(turn % 2 === 0 ? { temperature: 0 } : { temperature: 1, top_p: 0.9, seed: 11 + turn }), ...(turn === 2 ? { stop: ['e'] } : {}) };
    const body: Json = chat
      ? { model: generator.info.id, messages: structuredClone(messages), max_tokens: options.maxTokens ?? 6, logprobs: true, top_logprobs: 2, ...sampling }
      : { model: generator.info.id, prompt, max_tokens: options.maxTokens ?? 6, logprobs: 2, ...sampling };
    bodies.push(body);
    const response = await post(path, body);
    const session = sessions.at(-1)!;
    const text: string = chat ? (response.choices[0].message.content ?? '') : response.choices[0].text;
    results.push({
      endpoint: options.endpoint,
      promptTokens: response.usage.prompt_tokens,
      cached: response.usage.prompt_tokens_details.cached_tokens,
      expectedCached: previous ? Math.min(commonPrefixLength(held(previous), session.prompt), session.prompt.length - MIN_PREFILL_TOKENS) : 0,
      text,
      logprobs: logprobsOf(response, chat),
      coldText: '',
      coldLogprobs: [],
      coldCached: -1,
    });
    previous = session;
    if (chat) messages.push({ role: 'assistant', content: text });
    else prompt += text + ` And then, on day ${turn + 2},`;
  }
  for (const [turn, body] of bodies.entries()) {
    const response = await post(path, { ...body, cache_prompt: false });
    const r = results[turn]!;
    r.coldText = chat ? (response.choices[0].message.content ?? '') : response.choices[0].text;
    r.coldLogprobs = logprobsOf(response, chat);
    r.coldCached = response.usage.prompt_tokens_details.cached_tokens;
  }
  return results;
}

function logprobsOf(response: Json, chat: boolean): number[][] {
  const lp = response.choices[0].logprobs;
  if (chat) return lp.content.map((t: Json) => [t.logprob, ...t.top_logprobs.map((a: Json) => a.logprob)]);
  return lp.token_logprobs.map((v: number, i: number) => [v, ...Object.values(lp.top_logprobs[i] as Record<string, number>)]);
}

/** The largest difference between two runs' logprobs (Infinity when their shapes differ). */
export function maxLogprobDiff(a: number[][], b: number[][]): number {
  if (a.length !== b.length) return Infinity;
  let max = 0;
  a.forEach((row, i) => {
    if (row.length !== b[i]!.length) max = Infinity;
    row.forEach((v, k) => (max = Math.max(max, Math.abs(v - b[i]![k]!))));
  });
  return max;
}

/**
 * What is wrong with a conversation's turns (none: []): the first turn reuses nothing; each
 * reports the cached_tokens the engine held, at least half the turn before's prompt; the request
 * with cache_prompt false reports none and gives the same text, and logprobs within 1e-4.
 */
export function turnProblems(turns: readonly TurnResult[]): string[] {
  const problems: string[] = [];
  if (turns[0]?.cached !== 0) problems.push(`turn 1: cached_tokens ${turns[0]?.cached}, expected 0`);
  for (const [i, t] of turns.entries()) {
    const where = `turn ${i + 1} (${t.promptTokens} prompt tokens)`;
    if (t.cached !== t.expectedCached) problems.push(`${where}: cached_tokens ${t.cached}, expected ${t.expectedCached}`);
    if (i > 0 && !(t.cached > turns[i - 1]!.promptTokens / 2)) problems.push(`${where}: cached_tokens ${t.cached} reuses little of the turn before`);
    if (t.coldCached !== 0) problems.push(`${where}: cache_prompt false reported cached_tokens ${t.coldCached}`);
    if (t.text !== t.coldText) problems.push(`${where}: text ${JSON.stringify(t.text)}, without the cache ${JSON.stringify(t.coldText)}`);
    const diff = maxLogprobDiff(t.logprobs, t.coldLogprobs);
    if (!(diff < 1e-4)) problems.push(`${where}: logprobs differ by ${diff}`);
  }
  return problems;
}

/** A minimal ChatML template, for models generated without one. */
export const CHATML_TEMPLATE =
  "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
