// Many requests of every kind at once on a real model (stories260K): structured output (JSON
// schema, regex, choice), forced tool calls in a chat, and plain sampled and greedy completions,
// sent together, each answer (text, tool calls, logprobs) exactly what it is alone. Constrained
// sequences run their own loops beside the batch's rows (src/engine/generator.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { STORIES_GGUF } from '../helpers/model-files.ts';
import { CHATML, WEATHER_TOOL } from '../helpers/chat-fakes.ts';

let engine: Engine;

beforeAll(async () => {
  engine = await loadModelFromPath(STORIES_GGUF, { id: 'm', contextLength: 512 });
}, 120_000);

afterAll(async () => {
  await engine?.unload();
});

const SCHEMA = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };
type Call = () => Promise<unknown>;
const complete = (body: Record<string, unknown>): Call => () => engine.complete({ model: 'm', max_tokens: 24, ...body } as never);
const chat = (body: Record<string, unknown>): Call => () => engine.chat({ model: 'm', max_tokens: 40, ...body } as never);
/** The response without what differs by design: ids, times, and the prefix cache's hits (what earlier requests left). */
const withoutIds = (response: unknown) =>
  JSON.parse(JSON.stringify(response, (key, value) => (key === 'id' || key === 'created' || key === 'cached_tokens' ? undefined : value)));

const REQUESTS: [string, Call][] = [
  ['json schema', complete({ prompt: 'Once upon a time', temperature: 1, seed: 3, logprobs: 2, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: SCHEMA } } })],
  ['plain, sampled', complete({ prompt: 'One day', temperature: 0.9, top_p: 0.95, seed: 4, logprobs: 1, ignore_eos: true })],
  ['regex', complete({ prompt: 'Lily had', temperature: 1, seed: 5, guided_regex: '[a-z]{2,8}( [a-z]{2,8}){1,3}\\.' })],
  [
    'forced tool call',
    chat({
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      chat_template: CHATML,
      tools: [WEATHER_TOOL],
      tool_choice: 'required',
      temperature: 0.7,
      seed: 6,
      max_tokens: 200,
    }),
  ],
  ['plain, greedy', complete({ prompt: 'The sun was', temperature: 0, ignore_eos: true, n: 2 })],
  ['choice', complete({ prompt: 'Tom felt', temperature: 1, seed: 7, logprobs: 3, guided_choice: ['happy', 'sad', 'sleepy'] })],
  ['plain, n: 3 with penalties', complete({ prompt: 'Once', temperature: 1.1, seed: 8, n: 3, frequency_penalty: 0.8, ignore_eos: true, max_tokens: 16 })],
];

describe('a mixed batch', () => {
  it('structured, tool-call and plain requests sent together each give what they give alone', async () => {
    const alone: unknown[] = [];
    for (const [, call] of REQUESTS) alone.push(withoutIds(await call()));
    // The forced call is a call; the structured answers are what their structures ask.
    const toolAnswer = alone[3] as { choices: { message: { tool_calls?: { function: { name: string } }[] } }[] };
    expect(toolAnswer.choices[0]!.message.tool_calls?.[0]?.function.name, JSON.stringify(toolAnswer)).toBe('get_weather');
    for (let round = 0; round < 2; round++) {
      const order = round === 0 ? REQUESTS : [...REQUESTS].reverse();
      const together = await Promise.all(order.map(([, call]) => call()));
      together.forEach((response, i) => {
        const k = round === 0 ? i : REQUESTS.length - 1 - i;
        expect(withoutIds(response), REQUESTS[k]![0]).toEqual(alone[k]);
      });
    }
  }, 300_000);
});
