// tool_choice 'required' and a named function (src/api/tool-call-grammar.ts): the structural tag
// built for each tool-call format, example calls in each format that the parser reads back, the
// chat answers (whole and streamed) when the constrained output spells calls, the 400s, and, once
// src/grammar compiles for real, XGrammar walking the examples through the tag's constraint.
import { describe, expect, it } from 'vitest';
import { handleApiRequest, type ApiResponse } from '../../src/api/handler.ts';
import { toolCallStructure, type ForcedToolChoice } from '../../src/api/tool-call-grammar.ts';
import { parseToolCalls, type ToolCallFormat } from '../../src/api/tool-parsers.ts';
import type { TokenConstraint } from '../../src/engine/types.ts';
import { compileStructuredOutput, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import type { ChatTool } from '../../src/api/messages.ts';
import { events, expectError, json, type Json } from '../helpers/api-requests.ts';
import { chatGenerator, CHATML, WEATHER_TOOL } from '../helpers/chat-fakes.ts';
import { EOS, FakeTokenizer } from '../helpers/fake-generator.ts';
import { FixedStructure } from '../helpers/fixed-structure.ts';

const TIME_TOOL = { type: 'function', function: { name: 'get_time' } };
const TOOLS = [WEATHER_TOOL, TIME_TOOL] as unknown as ChatTool[];
const WEATHER_ARGS = WEATHER_TOOL.function.parameters;

/** A format, and for mistral which of its two call styles (the template decides). */
type Style = 'hermes' | 'llama3_json' | 'mistral' | 'mistral_args';
const formatOf = (style: Style): ToolCallFormat => (style === 'mistral_args' ? 'mistral' : style);
/** A template that leads to the style: mistral_args' writes [ARGS]. */
const templateOf = (style: Style) => (style === 'mistral_args' ? CHATML + '{#- [TOOL_CALLS]name[ARGS]{...} #}' : CHATML);

/** Example outputs, written by hand as each model writes calls: one call, and two. */
const EXAMPLES: Record<Style, { one: string; two: string }> = {
  hermes: {
    one: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    two: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
  },
  llama3_json: {
    one: '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    two: '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}',
  },
  mistral: {
    one: '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    two: '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]',
  },
  mistral_args: {
    one: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    two: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
  },
};
/** Outputs the structure must refuse: a name not offered, arguments against the schema, no call. */
const NEAR_MISSES: Record<Style, string[]> = {
  hermes: ['<tool_call>\n{"name": "get_wether", "arguments": {"city": "Paris"}}\n</tool_call>', '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}\n</tool_call>', 'Paris is sunny.'],
  llama3_json: ['{"name": "get_weather", "arguments": {"city": "Paris"}}', '{"name": "get_weather", "parameters": {}}', 'Paris is sunny.'],
  mistral: ['[TOOL_CALLS] []', '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"town": "Paris"}}]', 'Paris is sunny.'],
  mistral_args: ['[TOOL_CALLS]get_wether[ARGS]{}', '[TOOL_CALLS]get_weather[ARGS]{"city": null}', 'Paris is sunny.'],
};
const STYLES = Object.keys(EXAMPLES) as Style[];
const ONE_CALL = [{ name: 'get_weather', arguments: '{"city":"Paris"}' }];
const TWO_CALLS = [...ONE_CALL, { name: 'get_time', arguments: '{}' }];

const structure = (style: Style, choice: ForcedToolChoice = 'required', parallel = true, tools = TOOLS) =>
  toolCallStructure({ format: formatOf(style), tools, choice, parallel, template: templateOf(style) });

describe('the structural tag', () => {
  const weather = { type: 'json_schema', json_schema: WEATHER_ARGS };
  const time = { type: 'json_schema', json_schema: { type: 'object' } };
  const repeat = (tags: unknown[], separator: string, one: boolean) => ({ type: 'tags_with_separator', tags, separator, at_least_one: true, stop_after_first: one });
  const tag = (begin: string, content: unknown, end: string) => ({ type: 'tag', begin, content, end });
  const formats: Record<Style, (one: boolean) => unknown> = {
    hermes: (one) =>
      repeat(
        [
          tag('<tool_call>\n{"name": "get_weather", "arguments": ', weather, '}\n</tool_call>'),
          tag('<tool_call>\n{"name": "get_time", "arguments": ', time, '}\n</tool_call>'),
        ],
        '\n',
        one,
      ),
    llama3_json: (one) => repeat([tag('{"name": "get_weather", "parameters": ', weather, '}'), tag('{"name": "get_time", "parameters": ', time, '}')], '; ', one),
    mistral: (one) =>
      tag('[TOOL_CALLS] [', repeat([tag('{"name": "get_weather", "arguments": ', weather, '}'), tag('{"name": "get_time", "arguments": ', time, '}')], ', ', one), ']'),
    mistral_args: (one) => ({
      type: 'sequence',
      elements: [{ type: 'const_string', value: '[TOOL_CALLS]' }, repeat([tag('get_weather[ARGS]', weather, ''), tag('get_time[ARGS]', time, '')], '[TOOL_CALLS]', one)],
    }),
  };
  it.each(STYLES)('%s: one or more calls of any tool; exactly one without parallel_tool_calls', (style) => {
    expect(structure(style)).toEqual({ type: 'structural_tag', tag: { type: 'structural_tag', format: formats[style](false) } });
    expect(structure(style, 'required', false)).toEqual({ type: 'structural_tag', tag: { type: 'structural_tag', format: formats[style](true) } });
  });

  it('a named function: that one, exactly once', () => {
    const named = structure('hermes', { name: 'get_time' }, true);
    expect(named).toEqual({
      type: 'structural_tag',
      tag: { type: 'structural_tag', format: repeat([tag('<tool_call>\n{"name": "get_time", "arguments": ', time, '}\n</tool_call>')], '\n', true) },
    });
  });

  it("takes a schema without a type as an object's; refuses one of another type, naming it", () => {
    const untyped = [{ type: 'function', function: { name: 'f', parameters: { properties: { x: { type: 'integer' } } } } }] as ChatTool[];
    const tagOf = (out: StructuredOutput) => (out as Json).tag.format.tags[0].content;
    expect(tagOf(structure('llama3_json', 'required', true, untyped))).toEqual({ type: 'json_schema', json_schema: { properties: { x: { type: 'integer' } }, type: 'object' } });
    const typed = [TIME_TOOL, { type: 'function', function: { name: 'f', parameters: { type: 'string' } } }] as unknown as ChatTool[];
    expect(() => structure('llama3_json', 'required', true, typed)).toThrow(expect.objectContaining({ status: 400, param: 'tools[1].function.parameters' }));
    expect(() => structure('llama3_json', { name: 'get_time' }, true, typed)).not.toThrow();
  });
});

describe('examples in each format', () => {
  it.each(STYLES)('%s: the parser reads the calls back', (style) => {
    expect(parseToolCalls(formatOf(style), EXAMPLES[style].one)).toEqual({ content: '', calls: ONE_CALL });
    expect(parseToolCalls(formatOf(style), EXAMPLES[style].two)).toEqual({ content: '', calls: TWO_CALLS });
  });
});

describe('chat with forced tool calls', () => {
  const hello = { model: 'fake-llama', messages: [{ role: 'user', content: 'Weather and time in Paris?' }], tools: [WEATHER_TOOL, TIME_TOOL] };
  /** A chat model in `style` whose constrained output spells `text`. */
  const setup = (style: Style, text: string) => {
    const generator = chatGenerator({}, templateOf(style));
    Object.assign(generator.info, { toolCallFormat: formatOf(style) });
    const fixed = new FixedStructure({ tokens: () => generator.tokenizer.encodePieces(text) });
    const send = (body: Record<string, unknown>): Promise<ApiResponse> =>
      handleApiRequest({ generator }, { method: 'POST', url: '/v1/chat/completions', body: JSON.stringify({ ...hello, ...body }) }, { compileStructuredOutput: fixed.compile });
    return { generator, fixed, send };
  };

  it.each(STYLES)("%s: the calls come back as tool_calls with finish_reason 'tool_calls', whole and streamed", async (style) => {
    for (const [example, calls, parallel] of [[EXAMPLES[style].two, TWO_CALLS, true], [EXAMPLES[style].one, ONE_CALL, false]] as const) {
      const { fixed, send } = setup(style, example);
      const whole: Json = json(await send({ tool_choice: 'required', parallel_tool_calls: parallel }));
      expect(whole.choices[0].finish_reason).toBe('tool_calls');
      expect(whole.choices[0].message.content).toBeNull();
      expect(whole.choices[0].message.tool_calls.map((c: Json) => ({ name: c.function.name, arguments: c.function.arguments }))).toEqual(calls);
      const chunks = (await events(await send({ tool_choice: 'required', parallel_tool_calls: parallel, stream: true }))).filter((c) => c !== '[DONE]');
      const deltas = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
      expect(deltas.filter((d: Json) => d.function.name).map((d: Json) => d.function.name)).toEqual(calls.map((c) => c.name));
      expect(deltas.filter((d: Json) => !d.function.name).map((d: Json) => d.function.arguments)).toEqual(calls.map((c) => c.arguments));
      expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe('');
      expect(chunks.at(-1).choices[0].finish_reason).toBe('tool_calls');
      expect(fixed.compiles.map((c) => c.output)).toEqual([structure(style, 'required', parallel, TOOLS), structure(style, 'required', parallel, TOOLS)]);
      expect(fixed.undisposed).toBe(0);
    }
  });

  it('a named function constrains to it', async () => {
    const { fixed, send } = setup('hermes', '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>');
    const body: Json = json(await send({ tool_choice: { type: 'function', function: { name: 'get_time' } } }));
    expect(body.choices[0].message.tool_calls[0].function).toEqual({ name: 'get_time', arguments: '{}' });
    expect(body.choices[0].finish_reason).toBe('tool_calls');
    expect(fixed.compiles[0]!.output).toEqual(structure('hermes', { name: 'get_time' }, true, TOOLS));
  });

  it("cut off by max_tokens, the call is content with finish_reason 'length'", async () => {
    const { send } = setup('hermes', EXAMPLES.hermes.one);
    const body: Json = json(await send({ tool_choice: 'required', max_completion_tokens: 12 }));
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.choices[0].message.tool_calls).toBeUndefined();
    expect(EXAMPLES.hermes.one.startsWith(body.choices[0].message.content)).toBe(true);
  });

  it('refuses another structure beside forced calls, a format not known, and parameters not of an object', async () => {
    const { generator, send } = setup('hermes', EXAMPLES.hermes.one);
    await expectError(send({ tool_choice: 'required', extra_body: { guided_json: { type: 'object' } } }), 400, 'extra_body.guided_json', 'invalid_value');
    await expectError(send({ tool_choice: { type: 'function', function: { name: 'get_time' } }, response_format: { type: 'json_object' } }), 400, 'response_format', 'invalid_value');
    const bad = { type: 'function', function: { name: 'f', parameters: { type: 'array' } } };
    await expectError(send({ tools: [WEATHER_TOOL, bad], tool_choice: 'required' }), 400, 'tools[1].function.parameters', 'invalid_value');
    const plain = chatGenerator({}, '{% for m in messages %}{{ m.content }}{% endfor %}');
    const response = handleApiRequest({ generator: plain }, { method: 'POST', url: '/v1/chat/completions', body: JSON.stringify({ ...hello, tool_choice: 'required' }) });
    await expectError(response, 400, 'tool_choice', 'unsupported_value');
    expect(generator.events).toEqual([]);
    expect(plain.events).toEqual([]);
  });
});

// ---- with XGrammar (src/grammar), once compileStructuredOutput is built --------------------------

/** The fake tokenizer with the token bytes the grammar's vocabulary is built from. */
class ByteFakeTokenizer extends FakeTokenizer {
  tokenBytes(id: number): Uint8Array | undefined {
    if (!(Number.isInteger(id) && id >= 0 && id < this.vocabSize)) return undefined;
    if (this.isByte(id)) return Uint8Array.of(id - this.id(0));
    return new TextEncoder().encode(this.vocab[id]!.replaceAll('▁', ' '));
  }
}
const tokenizer = new ByteFakeTokenizer();

/** A token's text: its piece (▁ is a space) or its byte (the examples are ASCII). */
function pieceText(id: number): string {
  return tokenizer.isByte(id) ? String.fromCharCode(id - tokenizer.id(0)) : tokenizer.vocab[id]!.replaceAll('▁', ' ');
}

/**
 * Walks `text` through a constraint as the generation loop would: jump-forward tokens must spell
 * the text on, and otherwise the next token of the text (as the tokenizer splits it) must be in
 * the mask. 'complete': all of it was taken and the structure may end (EOS allowed, or nothing).
 */
async function walk(constraint: TokenConstraint, text: string): Promise<'complete' | 'unfinished' | 'refused'> {
  const mask = new Uint32Array(constraint.maskWords);
  const allowed = (id: number) => ((mask[id >> 5]! >>> (id & 31)) & 1) === 1;
  let rest = text;
  while (rest.length > 0) {
    const forced = constraint.forced();
    if (forced.length > 0) {
      const spelled = forced.map(pieceText).join('');
      if (!rest.startsWith(spelled)) return 'refused';
      rest = rest.slice(spelled.length);
      continue;
    }
    await constraint.fillNextMask(mask);
    const next = tokenizer.encodePieces(rest)[0]!;
    if (!allowed(next) || !constraint.accept(next)) return 'refused';
    rest = rest.slice(pieceText(next).length);
  }
  if (constraint.forced().length > 0) return 'unfinished';
  await constraint.fillNextMask(mask);
  return mask.every((word) => word === 0) || allowed(EOS) ? 'complete' : 'unfinished';
}

describe('the structural tags, compiled by XGrammar', () => {
  const walkThrough = async (output: StructuredOutput, text: string) => {
    const compiled = await compileStructuredOutput(tokenizer, tokenizer.vocabSize, output);
    const constraint = await compiled.createConstraint([EOS]);
    try {
      return await walk(constraint, text);
    } finally {
      constraint.dispose();
    }
  };

  it.each(STYLES)('%s: accepts exactly what the parser reads as calls', async (style) => {
    expect(await walkThrough(structure(style), EXAMPLES[style].one)).toBe('complete');
    expect(await walkThrough(structure(style), EXAMPLES[style].two)).toBe('complete');
    expect(await walkThrough(structure(style, 'required', false), EXAMPLES[style].one)).toBe('complete');
    expect(await walkThrough(structure(style, 'required', false), EXAMPLES[style].two)).not.toBe('complete');
    expect(await walkThrough(structure(style, { name: 'get_time' }), EXAMPLES[style].one)).toBe('refused');
    for (const miss of NEAR_MISSES[style]) expect(await walkThrough(structure(style), miss), miss).not.toBe('complete');
  });
});
