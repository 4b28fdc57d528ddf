// POST /v1/chat/completions on a fake generator (scripted outputs, real sampling semantics): the
// response and chunk shapes, the template's prompt, parity with /v1/completions on the same
// tokens, tool calls whole and streamed, logprobs, and every parameter's errors.
import { describe, expect, it } from 'vitest';
import { handleApiRequest, type ApiResponse } from '../../src/api/handler.ts';
import { chatGenerator, WEATHER_TOOL } from '../helpers/chat-fakes.ts';
import type { FakeGenerator } from '../helpers/fake-generator.ts';

async function post(generator: FakeGenerator, path: string, body: unknown): Promise<ApiResponse> {
  return handleApiRequest({ generator }, { method: 'POST', url: path, body: JSON.stringify(body) });
}

async function json(generator: FakeGenerator, body: Record<string, unknown>, path = '/v1/chat/completions'): Promise<{ status: number; body: any }> {
  const response = await post(generator, path, body);
  expect(typeof response.body).toBe('string');
  return { status: response.status, body: JSON.parse(response.body as string) };
}

async function events(generator: FakeGenerator, body: Record<string, unknown>): Promise<any[]> {
  const response = await post(generator, '/v1/chat/completions', { ...body, stream: true });
  expect(response.status).toBe(200);
  expect(typeof response.body).not.toBe('string');
  let text = '';
  for await (const event of response.body as AsyncIterable<string>) text += event;
  const datas = text.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
  expect(datas.at(-1)).toBe('[DONE]');
  return datas.slice(0, -1).map((d) => JSON.parse(d));
}

const hello = { model: 'fake-llama', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] };

describe('chat completions', () => {
  it('answers in the chat.completion shape, from the prompt the template renders', async () => {
    const generator = chatGenerator({ script: ' Hello there.' });
    const { status, body } = await json(generator, hello);
    expect(status).toBe(200);
    expect(body.object).toBe('chat.completion');
    expect(body.id).toMatch(/^chatcmpl-[A-Za-z0-9]{24}$/);
    expect(body.model).toBe('fake-llama');
    expect(body.system_fingerprint).toMatch(/^fp_[0-9a-f]{8}$/);
    expect(body.choices).toEqual([{ index: 0, message: { role: 'assistant', content: ' Hello there.', refusal: null }, logprobs: null, finish_reason: 'stop' }]);
    const rendered = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n';
    const prompt = generator.tokenizer.encode(rendered, { addBos: false });
    expect(generator.sessions[0]!.promptTokens).toEqual(prompt); // no BOS added to the template's text
    expect(body.usage).toEqual({ prompt_tokens: prompt.length, completion_tokens: generator.tokenizer.encodePieces(' Hello there.').length, total_tokens: body.usage.prompt_tokens + body.usage.completion_tokens, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it('samples exactly as /v1/completions does on the same tokens', async () => {
    const generator = chatGenerator();
    const sampling = { temperature: 1.3, top_p: 0.9, seed: 7, n: 3, presence_penalty: 0.5, max_tokens: 12 };
    const chat = await json(generator, { ...hello, ...sampling });
    const prompt = generator.sessions[0]!.promptTokens;
    const completion = await json(generator, { model: 'fake-llama', prompt, ...sampling }, '/v1/completions');
    expect(chat.body.choices.map((c: any) => c.message.content)).toEqual(completion.body.choices.map((c: any) => c.text));
    expect(chat.body.choices.map((c: any) => c.finish_reason)).toEqual(completion.body.choices.map((c: any) => c.finish_reason));
    expect(chat.body.usage).toEqual(completion.body.usage);
  });

  it('streams the role, then content deltas, then finish_reason, then usage', async () => {
    const generator = chatGenerator({ script: ' Hello there.' });
    const chunks = await events(generator, { ...hello, n: 2, stream_options: { include_usage: true } });
    const whole = await json(generator, { ...hello, n: 2 });
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0]?.index === index);
      expect(mine[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
      expect(mine.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(whole.body.choices[index].message.content);
      expect(mine.at(-1).choices[0]).toMatchObject({ delta: {}, finish_reason: 'stop' });
      expect(mine.slice(0, -1).every((c) => c.choices[0].finish_reason === null)).toBe(true);
    }
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk');
      expect(c.id).toBe(chunks[0].id);
    }
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: whole.body.usage });
  });

  it('gives logprobs in the chat shape: one entry per token, its bytes, top_logprobs alternatives', async () => {
    const generator = chatGenerator({ script: ' café ok' });
    const { body } = await json(generator, { ...hello, logprobs: true, top_logprobs: 3 });
    const { content } = body.choices[0].logprobs;
    expect(content).toHaveLength(body.usage.completion_tokens);
    expect(content.map((e: any) => e.token).join('')).toBe(body.choices[0].message.content);
    const bytes = content.flatMap((e: any) => e.bytes);
    expect(new TextDecoder().decode(new Uint8Array(bytes))).toBe(' café ok');
    for (const entry of content) {
      expect(entry.top_logprobs).toHaveLength(3);
      expect(entry.logprob).toBeLessThanOrEqual(0);
      for (const alt of entry.top_logprobs) expect(alt.bytes).toEqual([...new TextEncoder().encode(alt.token)]);
      const sorted = [...entry.top_logprobs].sort((a: any, b: any) => b.logprob - a.logprob);
      expect(entry.top_logprobs).toEqual(sorted);
    }
    expect(content[0].top_logprobs[0].logprob).toBeCloseTo(content[0].logprob, 5); // the script's token leads
    // Where the tokenizer tells a token's own bytes, they are the bytes reported.
    Object.assign(generator.tokenizer, { tokenBytes: (id: number) => Uint8Array.of(id % 256, 7) });
    const told = await json(generator, { ...hello, logprobs: true, top_logprobs: 1 });
    const ids = generator.tokenizer.encodePieces(' café ok');
    expect(told.body.choices[0].logprobs.content.map((e: any) => e.bytes)).toEqual(ids.map((id) => [id % 256, 7]));
    expect(told.body.choices[0].logprobs.content[0].top_logprobs[0].bytes).toEqual([ids[0]! % 256, 7]);
    const plain = await json(generator, { ...hello, logprobs: true });
    expect(plain.body.choices[0].logprobs.content.every((e: any) => e.top_logprobs.length === 0)).toBe(true);
  });

  it('ends at the end of a turn, which is never content', async () => {
    const generator = chatGenerator({ script: ' Hi' });
    const { body } = await json(generator, hello);
    expect(body.choices[0]).toMatchObject({ message: { content: ' Hi' }, finish_reason: 'stop' });
    const capped = await json(generator, { ...hello, max_completion_tokens: 1 });
    expect(capped.body.choices[0].finish_reason).toBe('length');
    expect(capped.body.usage.completion_tokens).toBe(1);
  });

  it('takes max_completion_tokens over max_tokens, and names the right one when the context is too small', async () => {
    const generator = chatGenerator({ contextLength: 64 });
    const prompt = (await json(generator, { model: 'fake-llama', messages: [{ role: 'user', content: 'x' }] }, '/tokenize')).body.count;
    const over = 64 - prompt + 1;
    const a = await json(generator, { model: 'fake-llama', messages: [{ role: 'user', content: 'x' }], max_tokens: 1, max_completion_tokens: over });
    expect(a.status).toBe(400);
    expect(a.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'max_completion_tokens' });
    const b = await json(generator, { model: 'fake-llama', messages: [{ role: 'user', content: 'x' }], max_tokens: over });
    expect(b.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'max_tokens' });
    const c = await json(generator, { model: 'fake-llama', messages: [{ role: 'user', content: 'x'.repeat(80) }] });
    expect(c.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'messages' });
    expect(c.body.error.message).toMatch(/your messages resulted in \d+ tokens/);
  });

  it('renders content parts, developer as system, names, and tool-call arguments parsed from their JSON', async () => {
    const template = "{% for m in messages %}[{{ m.role }}{% if m.name %}:{{ m.name }}{% endif %}]{{ m.content or '' }}{% for c in m.tool_calls or [] %}{{ c.function.arguments.city }}{% endfor %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{{ '\\n' }}{% endfor %}";
    const generator = chatGenerator({ script: 'ok' }, template);
    const messages = [
      { role: 'developer', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
      { role: 'user', content: 'q', name: 'ann' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'assistant', content: null, refusal: 'no' },
    ];
    const { body } = await json(generator, { model: 'fake-llama', messages, return_token_strs: false }, '/tokenize');
    const text = (await json(generator, { model: 'fake-llama', tokens: body.tokens }, '/detokenize')).body.prompt;
    expect(text).toBe('[system]a\nb\n[user:ann]q\n[assistant]Paris\n[tool]sunny#call_1\n[assistant]no\n');
  });

  it('continues the final assistant message, and echoes it with echo', async () => {
    const generator = chatGenerator({ script: ' world' });
    const messages = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }];
    const { body } = await json(generator, { model: 'fake-llama', messages, continue_final_message: true, add_generation_prompt: false, echo: true });
    expect(generator.tokenizer.decode(generator.sessions[0]!.promptTokens)).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello');
    expect(body.choices[0].message.content).toBe('Hello world');
    const chunks = await events(generator, { model: 'fake-llama', messages, continue_final_message: true, add_generation_prompt: false, echo: true });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello world');
  });

  it('takes a chat_template and chat_template_kwargs from the request, at the top level or in extra_body', async () => {
    const generator = chatGenerator({ script: 'ok' }, null);
    const missing = await json(generator, hello);
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: 'chat_template_missing', param: 'chat_template' });
    expect(missing.body.error.message).toMatch(/chatTemplate.*--chat-template/);
    const template = '{{ greeting }}{% for m in messages %}{{ m.content }}{% endfor %}';
    for (const where of ['top', 'extra_body']) {
      const extra = { chat_template: template, chat_template_kwargs: { greeting: 'G:' } };
      const request = where === 'top' ? { ...hello, ...extra } : { ...hello, extra_body: extra };
      const { status } = await json(generator, request);
      expect(status).toBe(200);
      expect(generator.tokenizer.decode(generator.sessions.at(-1)!.promptTokens)).toBe('G:Be brief.Hi');
    }
    const failing = await json(generator, { ...hello, chat_template: "{{ raise_exception('roles must alternate') }}" });
    expect(failing.status).toBe(400);
    expect(failing.body.error).toMatchObject({ code: 'chat_template_error', param: 'chat_template' });
    expect(failing.body.error.message).toContain('roles must alternate');
  });
});

describe('chat tool calls', () => {
  const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

  it('parses the model output into tool_calls with finish_reason tool_calls', async () => {
    const generator = chatGenerator({ script: call });
    const { body } = await json(generator, { ...hello, tools: [WEATHER_TOOL] });
    const choice = body.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/), type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }]);
    expect(generator.tokenizer.decode(generator.sessions[0]!.promptTokens)).toContain('Tools: [{"type": "function", "function": {"name": "get_weather"');
  });

  it('streams calls as tool-call deltas, never as raw text, with the content before them', async () => {
    const generator = chatGenerator({ script: `Let me check.${call}${call.replace('Paris', 'Oslo')}` });
    const chunks = await events(generator, { ...hello, tools: [WEATHER_TOOL] });
    const deltas = chunks.map((c) => c.choices[0]?.delta ?? {});
    expect(deltas.map((d) => d.content ?? '').join('')).toBe('Let me check.');
    const calls = deltas.flatMap((d) => d.tool_calls ?? []);
    expect(calls[0]).toEqual({ index: 0, id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather', arguments: '' } });
    const args = (i: number) => calls.filter((c) => c.index === i).map((c) => c.function.arguments).join('');
    expect(args(0)).toBe('{"city":"Paris"}');
    expect(args(1)).toBe('{"city":"Oslo"}');
    expect(chunks.at(-1).choices[0].finish_reason).toBe('tool_calls');
    const whole = await json(generator, { ...hello, tools: [WEATHER_TOOL], parallel_tool_calls: false });
    expect(whole.body.choices[0].message.tool_calls).toHaveLength(1);
    expect(whole.body.choices[0].message.content).toBe('Let me check.');
  });

  it('leaves text that is not a valid call as content, and does not parse without tools or with tool_choice none', async () => {
    const broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>';
    const generator = chatGenerator({ script: broken });
    const invalid = await json(generator, { ...hello, tools: [WEATHER_TOOL] });
    expect(invalid.body.choices[0]).toMatchObject({ message: { content: broken }, finish_reason: 'stop' });
    const plain = chatGenerator({ script: call });
    for (const extra of [{}, { tools: [WEATHER_TOOL], tool_choice: 'none' }]) {
      const { body } = await json(plain, { ...hello, ...extra });
      expect(body.choices[0]).toMatchObject({ message: { content: call }, finish_reason: 'stop' });
      expect(body.choices[0].message.tool_calls).toBeUndefined();
      expect(plain.tokenizer.decode(plain.sessions.at(-1)!.promptTokens)).not.toContain('Tools:'); // none: tools left out of the prompt
    }
  });

  it('parses only what the model wrote, after an echoed continued message, whole and streamed alike', async () => {
    const generator = chatGenerator({ script: call });
    const messages = [{ role: 'user', content: 'Weather?' }, { role: 'assistant', content: 'Sure: ' }];
    const request = { model: 'fake-llama', messages, tools: [WEATHER_TOOL], continue_final_message: true, add_generation_prompt: false, echo: true };
    const whole = await json(generator, request);
    expect(whole.body.choices[0]).toMatchObject({ message: { content: 'Sure: ', tool_calls: [{ function: { name: 'get_weather' } }] }, finish_reason: 'tool_calls' });
    const chunks = await events(generator, request);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Sure: ');
    expect(chunks.at(-1).choices[0].finish_reason).toBe('tool_calls');
  });

  it('round-trips: the call and its result go back into the next prompt', async () => {
    const generator = chatGenerator({ script: call });
    const first = await json(generator, { ...hello, tools: [WEATHER_TOOL] });
    const assistant = first.body.choices[0].message;
    const messages = [...hello.messages, assistant, { role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: '{"temp": 21}' }];
    const second = await json(generator, { model: 'fake-llama', messages, tools: [WEATHER_TOOL] });
    expect(second.status).toBe(200);
    const prompt = generator.tokenizer.decode(generator.sessions.at(-1)!.promptTokens);
    expect(prompt).toContain('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n<|im_start|>tool\n{"temp": 21}<|im_end|>');
  });
});

describe('chat request errors', () => {
  const generator = chatGenerator({ script: 'ok' });
  const cases: [string, Record<string, unknown>, number, Record<string, unknown>][] = [
    ['no messages', { model: 'fake-llama' }, 400, { param: 'messages', code: 'missing_required_parameter' }],
    ['empty messages', { model: 'fake-llama', messages: [] }, 400, { param: 'messages', code: 'empty_array' }],
    ['a bad role', { model: 'fake-llama', messages: [{ role: 'robot', content: 'x' }] }, 400, { param: 'messages[0].role' }],
    ['a user without content', { model: 'fake-llama', messages: [{ role: 'user' }] }, 400, { param: 'messages[0].content' }],
    ['an image part', { model: 'fake-llama', messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image_url', image_url: { url: 'x' } }] }] }, 400, { param: 'messages[0].content[1]', code: 'unsupported_content_type' }],
    ['arguments that are not JSON', { model: 'fake-llama', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{x' } }] }] }, 400, { param: 'messages[0].tool_calls[0].function.arguments' }],
    ['a tool message without tool_call_id', { model: 'fake-llama', messages: [{ role: 'tool', content: 'x' }] }, 400, { param: 'messages[0].tool_call_id' }],
    ['top_logprobs without logprobs', { ...hello, top_logprobs: 2 }, 400, { param: 'top_logprobs' }],
    ['top_logprobs above 20', { ...hello, logprobs: true, top_logprobs: 21 }, 400, { param: 'top_logprobs' }],
    ['a tool_choice for a tool not given', { ...hello, tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'nope' } } }, 400, { param: 'tool_choice', code: 'invalid_value' }],
    ['a bad tool name', { ...hello, tools: [{ type: 'function', function: { name: 'a b' } }] }, 400, { param: 'tools[0].function.name' }],
    ['a response_format of another type', { ...hello, response_format: { type: 'xml' } }, 400, { param: 'response_format.type', code: 'invalid_value' }],
    ['audio', { ...hello, audio: { voice: 'alloy', format: 'mp3' } }, 400, { param: 'audio', code: 'unsupported_parameter' }],
    ['modalities with audio', { ...hello, modalities: ['text', 'audio'] }, 400, { param: 'modalities' }],
    ['web_search_options', { ...hello, web_search_options: {} }, 400, { param: 'web_search_options' }],
    ['an unknown parameter', { ...hello, temperatur: 1 }, 400, { param: 'temperatur', code: 'unknown_parameter' }],
    ['continue_final_message with add_generation_prompt', { model: 'fake-llama', messages: [{ role: 'assistant', content: 'x' }], continue_final_message: true }, 400, { param: 'continue_final_message' }],
    ['a logit_bias id outside the vocabulary', { ...hello, logit_bias: { 99999: 1 } }, 400, { param: 'logit_bias' }],
    ['stream_options without stream', { ...hello, stream_options: { include_usage: true } }, 400, { param: 'stream_options' }],
    ['another model', { ...hello, model: 'gpt-4o' }, 404, { param: 'model', code: 'model_not_found' }],
    ['tool_choice without tools', { ...hello, tool_choice: 'auto' }, 400, { param: 'tool_choice', code: 'invalid_value' }],
    ['parallel_tool_calls without tools', { ...hello, extra_body: { parallel_tool_calls: false } }, 400, { param: 'extra_body.parallel_tool_calls' }],
    ['max_completion_tokens 0', { ...hello, max_completion_tokens: 0 }, 400, { param: 'max_completion_tokens', code: 'value_below_minimum' }],
    ['tool_calls on a user message', { model: 'fake-llama', messages: [{ role: 'user', content: 'x', tool_calls: 'zzz' }] }, 400, { param: 'messages[0].tool_calls' }],
    ['a tool call without an id', { model: 'fake-llama', messages: [{ role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{}' } }] }] }, 400, { param: 'messages[0].tool_calls[0].id', code: 'missing_required_parameter' }],
    ['a temperature in extra_body out of range', { ...hello, extra_body: { temperature: 3 } }, 400, { param: 'extra_body.temperature' }],
  ];
  for (const [what, body, status, error] of cases) {
    it(`refuses ${what}`, async () => {
      const response = await json(generator, body);
      expect(response.status).toBe(status);
      expect(response.body.error).toMatchObject(error);
      expect(response.body.error.message).toEqual(expect.any(String));
    });
  }

  it('answers a value nested too deeply to compare with a 400, not a 500', async () => {
    const deep = '['.repeat(200_000) + ']'.repeat(200_000);
    const body = `{"model": "fake-llama", "messages": [{"role": "user", "content": "x"}], "metadata": ${deep}, "extra_body": {"metadata": ${deep}}}`;
    const response = await handleApiRequest({ generator }, { method: 'POST', url: '/v1/chat/completions', body });
    expect(response.status).toBe(400);
  });

  it('takes tool_choice none without tools, and continues any final message', async () => {
    expect((await json(generator, { ...hello, tool_choice: 'none' })).status).toBe(200);
    const user = await json(generator, { model: 'fake-llama', messages: [{ role: 'user', content: 'Hi' }], continue_final_message: true, add_generation_prompt: false });
    expect(user.status).toBe(200);
  });

  it('accepts what it can honour and ignores what it may', async () => {
    const ok = await json(generator, { ...hello, store: true, metadata: { a: 'b' }, user: 'u', modalities: ['text'], response_format: { type: 'text' }, service_tier: 'auto', prompt_cache_key: 'k', safety_identifier: 's', audio: null });
    expect(ok.status).toBe(200);
    expect(ok.body.service_tier).toBe('default');
  });
});

describe('tokenize and detokenize', () => {
  it('counts a prompt or the rendered messages, at /tokenize and /v1/tokenize', async () => {
    const generator = chatGenerator();
    for (const path of ['/tokenize', '/v1/tokenize']) {
      const text = await json(generator, { model: 'fake-llama', prompt: 'Once upon a time' }, path);
      expect(text.body).toEqual({ count: text.body.tokens.length, max_model_len: 4096, tokens: generator.tokenizer.encode('Once upon a time'), token_strs: null });
    }
    const chat = await json(generator, { model: 'fake-llama', messages: hello.messages, return_token_strs: true }, '/tokenize');
    await json(generator, hello);
    expect(chat.body.tokens).toEqual(generator.sessions.at(-1)!.promptTokens);
    expect(chat.body.token_strs).toHaveLength(chat.body.count);
    const back = await json(generator, { model: 'fake-llama', tokens: chat.body.tokens }, '/detokenize');
    expect(back.body.prompt).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
    const bad = await json(generator, { tokens: [1e9] }, '/detokenize');
    expect(bad.status).toBe(400);
    const neither = await json(generator, { model: 'fake-llama' }, '/tokenize');
    expect(neither.body.error.param).toBe('prompt');
  });

  it('lists max_model_len in /v1/models', async () => {
    const generator = chatGenerator();
    const response = await handleApiRequest({ generator }, { method: 'GET', url: '/v1/models', body: null });
    expect(JSON.parse(response.body as string).data[0]).toMatchObject({ id: 'fake-llama', max_model_len: 4096 });
  });
});
