// Seeded hostile request bodies for the API (chat, completions, embeddings, tokenize, detokenize): a valid body
// with one to three hostile changes, values nested thousands of levels deep, wrong types anywhere,
// huge strings and keys, lone surrogates, __proto__ and constructor keys, NaN, and random tools,
// tool_choice, response_format, guided_*, structured_outputs and chat_template shapes. Used by
// test/api/hostile-fuzz.test.ts and scripts/soak-memory.ts.
import { CHAT_PARAMS } from '../../src/api/chat-schema.ts';
import { EMBEDDING_PARAMS } from '../../src/api/embeddings.ts';
import { COMPLETION_PARAMS } from '../../src/api/schema.ts';
import { CHATML, WEATHER_TOOL } from './chat-fakes.ts';
import { bodyText, deepArrayJson, deepObjectJson, raw } from './hostile-values.ts';

export type Random = () => number;

// ---- hostile values ----------------------------------------------------------------------------------

export const pick = <T>(rand: Random, items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
export const int = (rand: Random, low: number, high: number) => low + Math.floor(rand() * (high - low + 1));

const WRONG_TYPES: readonly unknown[] = [
  null, 0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 2, true, false, '', 'x', 'text', [], {}, [null], [[]], [{}], { '': null }, ['x', 1, null],
  { type: null }, { type: 'function' }, { name: 1 }, [1, 2, 3], [-1], [1e9], ['\u0000'],
];

const ODD_STRINGS: readonly string[] = [
  '\ud800', '\udfff', 'a\ud800b', '\u0000', '\u202e\u2066', '<s></s><|im_start|>', '{{ 1 }}', '{% raw %}', '\\', '"', '\n'.repeat(100), '▁'.repeat(50),
  '__proto__', 'constructor', 'toString', 'hasOwnProperty', 'NaN', '1e400', '[TOOL_CALLS]', '<tool_call>',
];

export const ODD_KEYS: readonly string[] = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', '', ' ', '\ud800', 'type', 'function', '0', '-1', '1e3'];

const SCHEMAS: readonly unknown[] = [
  { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] },
  JSON.parse('{"type": "object", "properties": {"__proto__": {"type": "string"}, "constructor": {"type": "string"}}, "required": ["constructor"]}'),
  { $ref: '#/$defs/missing' },
  { type: 'object', properties: { a: { $ref: '#' } } },
  { type: 'object', properties: { a: { $ref: '#' } }, required: ['a'] },
  { type: 'array', items: { $ref: '#' }, minItems: 1 },
  { $defs: { a: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' },
  { $ref: '#/definitions/__proto__' },
  { $ref: '#/$defs/constructor' },
  { type: ['string', 'number', 'null'] },
  { anyOf: [] },
  { enum: [{ a: 1 }, [1], null] },
  { const: '\ud800' },
  { type: 'string', pattern: '(a+)+$' },
  { type: 'string', pattern: '[' },
  { type: 'string', minLength: 1e9 },
  { type: 'integer', minimum: 1e308, maximum: -1e308 },
  { type: 'array', items: { type: 'array', items: { type: 'array' } }, minItems: 1e6 },
  { type: 'unknown-type' },
  { format: '\ud800' },
  { properties: { x: 5 } },
  { required: 'a' },
  true,
  false,
];

const TOOLS: readonly unknown[] = [
  WEATHER_TOOL,
  { type: 'function', function: { name: 'f' } },
  { type: 'function', function: { name: '__proto__', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'constructor', parameters: { type: 'object', properties: { toString: { type: 'string' } } } } },
  { type: 'function', function: { name: 'g', parameters: { type: 'string' } } },
  { type: 'function', function: { name: 'h', parameters: { $ref: '#/$defs/missing' } } },
  { type: 'function', function: { name: 'i', parameters: true } },
  { type: 'function', function: { name: 'j', parameters: { type: 'object', properties: { a: { $ref: '#' } } }, strict: true } },
  { type: 'function', function: { name: 'k', description: '\ud800', parameters: { type: 'object', required: ['constructor'] } } },
];

const TOOL_CHOICES: readonly unknown[] = [
  'none', 'auto', 'required', 'any', '', { type: 'function', function: { name: 'get_weather' } }, { type: 'function', function: { name: '__proto__' } },
  { type: 'function', function: { name: 'constructor' } }, { type: 'function', function: {} }, { type: 'function' }, { function: { name: 'f' } },
];

const RESPONSE_FORMATS: readonly unknown[] = [
  { type: 'text' }, { type: 'json_object' }, { type: 'json_schema' }, { type: 'json_schema', json_schema: {} }, { type: 'json_schema', json_schema: { name: 'x' } },
  { type: 'structural_tag' }, { type: 'structural_tag', format: { type: 'const_string', value: 'x' } }, { type: 'structural_tag', format: { type: 'nope' } },
  { type: 'structural_tag', format: { type: 'sequence', elements: [{ type: 'const_string', value: '' }] } },
  { type: 'structural_tag', structures: [{ begin: '<f>', schema: { $ref: '#' }, end: '</f>' }], triggers: ['<f'] },
  { type: 'structural_tag', structures: [{ begin: '', schema: '{', end: '' }], triggers: [''] },
  { type: 'json_object', extra: 1 },
];

const REGEXES: readonly string[] = ['(a', '[', '\\', '(?<n>a)\\k<n>', '\ud800', 'a{1000000}', '(a|b)*'.repeat(40), '.*', '[^]', '\\p{L}+', '(?=a)a', '$^', 'a{2,1}'];
const GRAMMARS: readonly string[] = ['root ::= root', 'root ::= "a" root', 'root ::= ("x" | "y") loop\nloop ::= "a" loop', 'root ::= "a" | "b" root', 'x', 'root ::= [\ud800]', 'root ::= "a"{1000000}', 'root ::= "a" | ', 'root ::= ( ( ( "a" ) ) )*', 'root ::= [^]'];

const TEMPLATES: readonly string[] = [
  CHATML,
  '{{ messages.__proto__ }}{{ messages.constructor }}{{ messages[0].__proto__ }}x',
  "{{ ''.constructor.constructor('return 1')() }}",
  '{% for i in range(100000000) %}{% endfor %}',
  "{{ 'x' * 100000000 }}",
  '{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}',
  "{{ raise_exception('x' * 10000) }}",
  '{% if %}',
  '{{',
  '{{ messages | tojson }}{{ tools | tojson }}',
  '{% set x = [] %}{% for i in range(2000) %}{% set _ = x.append(x) %}{% endfor %}{{ x }}',
  '{{ (messages * 1000000) | length }}',
  '{{ 1 / 0 }}',
  '{{ none.x.y }}',
  '{{ messages[10**20] }}',
  '{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}',
  "{{ '%s' % messages }}",
  '{{ range(10**10) | list }}',
  "{{ 'a'.ljust(10**9) }}",
  '{% for m in messages %}{{ m.role }}{{ m | tojson }}{% endfor %}{{ chat_template_kwargs }}',
  '{{ messages[0].content[1000000:] }}{{ add_generation_prompt.__class__ }}',
  '{% for k, v in messages[0].items() %}{{ k }}={{ v }}{% endfor %}',
  'x'.repeat(300 * 1024),
  `{{ 1 is sameas [${'1,'.repeat(100_000)}1] }}`,
];

const KWARGS_KEYS: readonly string[] = ['messages', 'tools', 'raise_exception', '__proto__', 'constructor', 'add_generation_prompt', 'bos_token', 'range', 'namespace', 'enable_thinking', 'x'];

/** The values a chosen position may be set to; `raws` collects raw JSON text for the body's placeholders. */
function hostileValue(rand: Random, raws: Record<string, string>, param: string | null): unknown {
  const placeholder = (text: string) => {
    const name = `v${Object.keys(raws).length}`;
    raws[name] = text;
    return raw(name);
  };
  const shaped: Record<string, readonly unknown[]> = {
    tools: [TOOLS, [pick(rand, TOOLS), pick(rand, TOOLS)], [WEATHER_TOOL, WEATHER_TOOL]],
    tool_choice: TOOL_CHOICES,
    response_format: [...RESPONSE_FORMATS, { type: 'json_schema', json_schema: { name: 'x', schema: pick(rand, SCHEMAS) } }],
    guided_json: [...SCHEMAS, JSON.stringify(pick(rand, SCHEMAS)), '{'],
    guided_regex: REGEXES,
    guided_choice: [[], [''], ['\ud800'], ['a'.repeat(10_000)], [1], ['a', 'a'], ['__proto__']],
    guided_grammar: GRAMMARS,
    structural_tag: RESPONSE_FORMATS.filter((f) => (f as { type: string }).type === 'structural_tag'),
    structured_outputs: [{ json: pick(rand, SCHEMAS) }, { regex: pick(rand, REGEXES) }, { grammar: pick(rand, GRAMMARS) }, { choice: ['a'] }, { json_object: true, whitespace_pattern: '[ ]{0,99999}' }, { json: pick(rand, SCHEMAS), disable_additional_properties: true }, {}],
    chat_template: TEMPLATES,
    chat_template_kwargs: [Object.fromEntries([[pick(rand, KWARGS_KEYS), pick(rand, WRONG_TYPES)]]), { enable_thinking: false }],
    guided_whitespace_pattern: ['', '[ \\n]{0,4}', '(', '\ud800', ' {99999}'],
    stop: [['\ud800'], ['', '', '', ''], 'x'.repeat(100_000), ['a', 'b', 'c', 'd', 'e']],
    logit_bias: [{ '0': 100 }, objectWithKey('__proto__', 1), { '999999999': 1 }, { '1': 1e308 }, Object.fromEntries(Array.from({ length: 300 }, (_, i) => [String(i), -100]))],
  };
  if (param !== null && Object.hasOwn(shaped, param) && rand() < 0.5) return clone(pick(rand, shaped[param]!));
  const roll = rand();
  if (roll < 0.2) return placeholder(rand() < 0.5 ? deepArrayJson(int(rand, 129, 20_000)) : deepObjectJson(int(rand, 129, 20_000), pick(rand, ['a', 'type', 'not', 'properties', '__proto__'])));
  if (roll < 0.26) return placeholder(pick(rand, ['NaN', 'Infinity', '-Infinity', '[NaN]', '{"a":-Infinity}']));
  if (roll < 0.32) return 'x'.repeat(int(rand, 1 << 16, 1 << 20));
  if (roll < 0.36) return deepObjectJson(int(rand, 200, 5000), 'not', '{}'); // JSON text of a deep value, as a string
  return mildValue(rand);
}

/** A wrong or odd value of no great size or depth. */
function mildValue(rand: Random): unknown {
  const roll = rand();
  if (roll < 0.35) return pick(rand, ODD_STRINGS);
  if (roll < 0.5) return objectWithKey(pick(rand, ODD_KEYS), clone(pick(rand, WRONG_TYPES)));
  return clone(pick(rand, WRONG_TYPES));
}

/** A copy of JSON data, its `__proto__` keys kept as own keys. */
function clone<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** An object with one own key, `__proto__` included (set as JSON.parse sets it). */
function objectWithKey(key: string, value: unknown): Record<string, unknown> {
  const object: Record<string, unknown> = {};
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  return object;
}

// ---- bodies ----------------------------------------------------------------------------------------

export const MESSAGES = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
  { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
  { role: 'tool', tool_call_id: 'c1', content: 'Sunny' },
  { role: 'user', content: 'And tomorrow?' },
];

export function baseBody(rand: Random, url: string): Record<string, unknown> {
  return clone(validBody(rand, url));
}

function validBody(rand: Random, url: string): Record<string, unknown> {
  if (url === '/v1/embeddings') {
    return pick<Record<string, unknown>>(rand, [
      { model: 'fake', input: 'Hello world' },
      { model: 'fake', input: ['Hello', 'world'], encoding_format: 'base64' },
      { model: 'fake', input: [1, 270] },
      { model: 'fake', input: [[1, 270], [1]], dimensions: 4, encoding_format: 'float' },
      { model: 'fake', input: 'Once upon a time', extra_body: { truncate_prompt_tokens: 2 }, user: 'u' },
      { model: 'fake', input: ['a', 'b'], add_special_tokens: false, truncate_prompt_tokens: -1 },
    ]);
  }
  const common = { model: 'fake', max_tokens: int(rand, 1, 8), ...(rand() < 0.3 ? { stream: true, stream_options: { include_usage: rand() < 0.5 } } : {}) };
  switch (url) {
    case '/v1/chat/completions':
      return {
        ...common,
        messages: MESSAGES,
        ...pick<Record<string, unknown>>(rand, [
          {},
          { tools: [WEATHER_TOOL], tool_choice: 'auto' },
          { tools: [WEATHER_TOOL], tool_choice: 'required' },
          { tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false },
          { response_format: { type: 'json_schema', json_schema: { name: 'a', schema: SCHEMAS[0] } } },
          { guided_choice: ['yes', 'no'], logprobs: true, top_logprobs: 2 },
          { extra_body: { guided_regex: '[a-z]{1,5}', top_k: 5 }, temperature: 0.7, seed: 1 },
          { chat_template: CHATML, chat_template_kwargs: { enable_thinking: false }, add_generation_prompt: true },
          { n: 2, stop: ['.'], logit_bias: { '5': -100 }, metadata: { a: 'b' } },
        ]),
      };
    case '/v1/completions':
      return {
        ...common,
        prompt: pick<unknown>(rand, ['Once upon a time', ['Hello', 'world'], [1, 270], [[1, 270], [1]]]),
        ...pick<Record<string, unknown>>(rand, [{}, { echo: true, logprobs: 2 }, { guided_json: SCHEMAS[0] }, { n: 2, best_of: 3 }, { extra_body: { min_p: 0.1, stop_token_ids: [2] } }]),
      };
    case '/tokenize':
      return pick<Record<string, unknown>>(rand, [
        { model: 'fake', prompt: 'Hello world', return_token_strs: true },
        { messages: MESSAGES, tools: [WEATHER_TOOL], add_generation_prompt: true },
        { prompt: 'x', add_special_tokens: false },
      ]);
    default:
      return { model: 'fake', tokens: [1, 270, 271, 2] };
  }
}

/** Every array and object of a value with the path to it. */
export function containers(value: unknown): { path: (string | number)[]; node: Record<string, unknown> | unknown[] }[] {
  const out: { path: (string | number)[]; node: Record<string, unknown> | unknown[] }[] = [];
  const stack: { path: (string | number)[]; node: unknown }[] = [{ path: [], node: value }];
  while (stack.length > 0) {
    const { path, node } = stack.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    out.push({ path, node: node as Record<string, unknown> });
    for (const [key, child] of Object.entries(node)) stack.push({ path: [...path, Array.isArray(node) ? Number(key) : key], node: child });
  }
  return out;
}

const PARAMS: Record<string, readonly string[]> = {
  '/v1/chat/completions': Object.keys(CHAT_PARAMS),
  '/v1/completions': Object.keys(COMPLETION_PARAMS),
  '/tokenize': ['model', 'prompt', 'messages', 'tools', 'chat_template', 'chat_template_kwargs', 'add_generation_prompt', 'continue_final_message', 'add_special_tokens', 'return_token_strs'],
  '/detokenize': ['model', 'tokens'],
  '/v1/embeddings': Object.keys(EMBEDDING_PARAMS),
};

/** A valid body of `url` with one to three hostile changes; `what` says where, for a failure's report. */
export function hostileBody(rand: Random, url: string): { text: string; what: string[] } {
  const body = baseBody(rand, url);
  const raws: Record<string, string> = {};
  const what: string[] = [];
  for (let change = pick(rand, [1, 1, 1, 2, 2, 3]); change > 0; change--) {
    const roll = rand();
    if (roll < 0.45) {
      // A parameter of the endpoint, at the top level or in extra_body.
      const param = pick(rand, PARAMS[url]!);
      const inExtra = rand() < 0.2 && url !== '/tokenize' && url !== '/detokenize';
      const value = hostileValue(rand, raws, param);
      if (inExtra) body.extra_body = { ...(typeof body.extra_body === 'object' && body.extra_body !== null ? body.extra_body : {}), [param]: value };
      else body[param] = value;
      what.push(`${inExtra ? 'extra_body.' : ''}${param}`);
    } else {
      // Anywhere inside: replace a value, or add an odd key.
      const spots = containers(body);
      const { path, node } = pick(rand, spots);
      if (Array.isArray(node)) {
        const index = node.length > 0 && rand() < 0.8 ? int(rand, 0, node.length - 1) : node.length;
        node[index] = hostileValue(rand, raws, null);
        what.push(`${path.join('.')}[${index}]`);
      } else {
        const keys = Object.keys(node);
        const replace = keys.length > 0 && rand() < 0.6;
        const key = replace ? pick(rand, keys) : pick(rand, ODD_KEYS);
        // A new key mostly gets a mild value, so that the request goes on to the template and the model.
        const value = replace || rand() < 0.3 ? hostileValue(rand, raws, typeof path[0] === 'string' ? path[0] : key) : mildValue(rand);
        Object.defineProperty(node, key, { value, enumerable: true, writable: true, configurable: true });
        what.push(`${[...path, key].join('.')}`);
      }
    }
  }
  return { text: bodyText(body, raws), what };
}

