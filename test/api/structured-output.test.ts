// Structured output in the request layer (src/api/structured-output.ts): every spelling a request
// may use (response_format, guided_*, structured_outputs; top level and extra_body; both
// endpoints) and the structure it maps to, the 400s, the compile before anything is queued, and
// the wiring into generation (one constraint per sequence, disposed of however it ends), run on the
// fake generator with a hand-written constraint (helpers/fixed-structure.ts).
import { describe, expect, it } from 'vitest';
import { validateChatRequest } from '../../src/api/chat-schema.ts';
import { handleApiRequest, type ApiHandlerOptions, type ApiResponse } from '../../src/api/handler.ts';
import { validateCompletionRequest } from '../../src/api/schema.ts';
import {
  closeObjectSchemas,
  COMPACT,
  DEFAULT_WHITESPACE_RUN,
  requestStructure,
  whitespaceFromPattern,
} from '../../src/api/structured-output.ts';
import { GrammarEngineRestartedError, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import { events, expectError, json, PROMPT, type Json } from '../helpers/api-requests.ts';
import { chatGenerator } from '../helpers/chat-fakes.ts';
import { EOS, FakeGenerator } from '../helpers/fake-generator.ts';
import { FixedStructure, type FixedStructureOptions } from '../helpers/fixed-structure.ts';

const SCHEMA = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
const TAG = { type: 'structural_tag', format: { type: 'const_string', value: 'x' } };
const messages = [{ role: 'user', content: 'Hi' }];

function post(generator: FakeGenerator, body: unknown, url = '/v1/completions', options: ApiHandlerOptions = {}, signal?: AbortSignal): Promise<ApiResponse> {
  return handleApiRequest({ generator }, { method: 'POST', url, body: JSON.stringify(body), ...(signal ? { signal } : {}) }, options);
}

const completionStructure = (body: Record<string, unknown>) => requestStructure(validateCompletionRequest({ model: 'm', ...body }));
const chatStructure = (body: Record<string, unknown>) => requestStructure(validateChatRequest({ model: 'm', messages, ...body }));

describe('request spellings', () => {
  const json_schema = (schema: unknown, whitespace = COMPACT): StructuredOutput => ({ type: 'json_schema', schema: schema as Record<string, unknown>, whitespace });
  const cases: [string, Record<string, unknown>, StructuredOutput, string][] = [
    ['response_format json_object', { response_format: { type: 'json_object' } }, { type: 'json_object', whitespace: COMPACT }, 'response_format'],
    ['response_format json_schema', { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMA, strict: true, description: 'd' } } }, json_schema(SCHEMA), 'response_format'],
    ['response_format json_schema in extra_body', { extra_body: { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: true } } } }, json_schema(true), 'extra_body.response_format'],
    ['response_format structural_tag', { response_format: TAG }, { type: 'structural_tag', tag: TAG }, 'response_format'],
    ['guided_json, an object', { guided_json: SCHEMA }, json_schema(SCHEMA), 'guided_json'],
    ['guided_json, JSON text, in extra_body', { extra_body: { guided_json: JSON.stringify(SCHEMA) } }, json_schema(SCHEMA), 'extra_body.guided_json'],
    ['guided_regex', { guided_regex: '[a-z]+' }, { type: 'regex', pattern: '[a-z]+' }, 'guided_regex'],
    ['guided_choice in extra_body', { extra_body: { guided_choice: ['yes', 'no'] } }, { type: 'choice', choices: ['yes', 'no'] }, 'extra_body.guided_choice'],
    ['guided_grammar', { guided_grammar: 'root ::= "a"' }, { type: 'grammar', grammar: 'root ::= "a"' }, 'guided_grammar'],
    ['structural_tag, JSON text', { structural_tag: JSON.stringify(TAG) }, { type: 'structural_tag', tag: TAG }, 'structural_tag'],
    [
      "structural_tag, vLLM's legacy structures",
      { structural_tag: { type: 'structural_tag', structures: [{ begin: '<f>', schema: SCHEMA, end: '</f>' }], triggers: ['<f'] } },
      { type: 'structural_tag', tag: { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<f'], tags: [{ type: 'tag', begin: '<f>', content: { type: 'json_schema', json_schema: SCHEMA }, end: '</f>' }] } } },
      'structural_tag',
    ],
    ['structured_outputs.json', { structured_outputs: { json: SCHEMA } }, json_schema(SCHEMA), 'structured_outputs.json'],
    ['structured_outputs.json in extra_body', { extra_body: { structured_outputs: { json: JSON.stringify(SCHEMA), regex: null } } }, json_schema(SCHEMA), 'extra_body.structured_outputs.json'],
    ['structured_outputs.regex', { structured_outputs: { regex: '\\d+', disable_fallback: true } }, { type: 'regex', pattern: '\\d+' }, 'structured_outputs.regex'],
    ['structured_outputs.choice', { structured_outputs: { choice: ['a'] } }, { type: 'choice', choices: ['a'] }, 'structured_outputs.choice'],
    ['structured_outputs.grammar', { structured_outputs: { grammar: 'root ::= "a"' } }, { type: 'grammar', grammar: 'root ::= "a"' }, 'structured_outputs.grammar'],
    ['structured_outputs.json_object', { structured_outputs: { json_object: true } }, { type: 'json_object', whitespace: COMPACT }, 'structured_outputs.json_object'],
    ['structured_outputs.structural_tag', { structured_outputs: { structural_tag: JSON.stringify(TAG) } }, { type: 'structural_tag', tag: TAG }, 'structured_outputs.structural_tag'],
    ['guided_whitespace_pattern with guided_json', { guided_json: SCHEMA, guided_whitespace_pattern: '[ \\n]{0,4}' }, json_schema(SCHEMA, { kind: 'any', maxRun: 4 }), 'guided_json'],
    ['structured_outputs.whitespace_pattern', { structured_outputs: { json_object: true, whitespace_pattern: '\\s*' } }, { type: 'json_object', whitespace: { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN } }, 'structured_outputs.json_object'],
    ['guided_whitespace_pattern with response_format', { response_format: { type: 'json_object' }, extra_body: { guided_whitespace_pattern: ' ?' } }, { type: 'json_object', whitespace: { kind: 'any', maxRun: 1 } }, 'response_format'],
    ['structured_outputs.disable_any_whitespace', { structured_outputs: { json: SCHEMA, disable_any_whitespace: true } }, json_schema(SCHEMA), 'structured_outputs.json'],
    [
      'structured_outputs.disable_additional_properties',
      { structured_outputs: { json: SCHEMA, disable_additional_properties: true } },
      json_schema({ ...SCHEMA, additionalProperties: false }),
      'structured_outputs.json',
    ],
    ['guided_decoding_backend xgrammar, alongside', { guided_regex: 'a', guided_decoding_backend: 'xgrammar:no-fallback' }, { type: 'regex', pattern: 'a' }, 'guided_regex'],
  ];
  it.each(cases)('completions: %s', (_what, body, output, param) => {
    expect(completionStructure(body)).toEqual({ output, param });
  });
  it.each(cases)('chat: %s', (_what, body, output, param) => {
    expect(chatStructure(body)).toEqual({ output, param });
  });

  it('asks for nothing with response_format text, a null, json_object false, or a backend alone', () => {
    for (const body of [{}, { response_format: { type: 'text' } }, { response_format: null, guided_json: null }, { guided_decoding_backend: 'auto' }]) {
      expect(completionStructure(body)).toBeNull();
      expect(chatStructure(body)).toBeNull();
    }
  });
});

describe('whitespace patterns', () => {
  const cases: [string, unknown][] = [
    ['', COMPACT],
    ['[ ]{0}', COMPACT],
    [' ', { kind: 'any', maxRun: 1 }],
    ['[ ]?', { kind: 'any', maxRun: 1 }],
    ['[ \\n]{0,4}', { kind: 'any', maxRun: 4 }],
    ['^[\\t ]{0,3}$', { kind: 'any', maxRun: 3 }],
    ['\\s{2}', { kind: 'any', maxRun: 2 }],
    ['[\\n\\t ]*', { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN }],
    ['\\s+', { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN }],
    ['\\s{1,}', { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN }],
    ['( |\\n)*', { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN }],
    ['[ ]{0,64}', { kind: 'any', maxRun: 32 }], // the grammar's longest run
  ];
  it.each(cases)('%j', (pattern, whitespace) => {
    expect(whitespaceFromPattern(pattern)).toEqual(whitespace);
  });
});

describe('closeObjectSchemas', () => {
  it('closes every object that does not say, and leaves values and open objects alone', () => {
    const schema = {
      type: 'object',
      properties: { inner: { properties: { x: { type: 'string' } } }, list: { type: 'array', items: { type: 'object' } }, open: { type: 'object', additionalProperties: true } },
      anyOf: [{ type: ['object', 'null'] }],
      $defs: { d: { type: 'object' } },
      const: { type: 'object' },
      default: { properties: {} },
    };
    expect(closeObjectSchemas(schema)).toEqual({
      type: 'object',
      additionalProperties: false,
      properties: {
        inner: { properties: { x: { type: 'string' } }, additionalProperties: false },
        list: { type: 'array', items: { type: 'object', additionalProperties: false } },
        open: { type: 'object', additionalProperties: true },
      },
      anyOf: [{ type: ['object', 'null'], additionalProperties: false }],
      $defs: { d: { type: 'object', additionalProperties: false } },
      const: { type: 'object' },
      default: { properties: {} },
    });
    expect(schema.properties.inner).toEqual({ properties: { x: { type: 'string' } } }); // a copy
    expect(closeObjectSchemas(true)).toBe(true);
  });
});

describe('request errors', () => {
  const generator = new FakeGenerator();
  const completion = { model: 'fake-llama', prompt: PROMPT, max_tokens: 4 };
  const cases: [string, Record<string, unknown>, string, string][] = [
    ['guided_json that is not JSON', { extra_body: { guided_json: '{"type": ' } }, 'extra_body.guided_json', 'invalid_value'],
    ['guided_json that is JSON of no schema', { guided_json: '[1]' }, 'guided_json', 'invalid_value'],
    ['guided_json of a number', { guided_json: 5 }, 'guided_json', 'invalid_type'],
    ['an empty guided_choice', { guided_choice: [] }, 'guided_choice', 'empty_array'],
    ['a guided_choice that is a string', { guided_choice: 'yes' }, 'guided_choice', 'invalid_type'],
    ['a guided_choice with a number', { extra_body: { guided_choice: ['a', 1] } }, 'extra_body.guided_choice[1]', 'invalid_type'],
    ['a guided_regex that is a number', { guided_regex: 3 }, 'guided_regex', 'invalid_type'],
    ['an empty guided_regex', { guided_regex: '' }, 'guided_regex', 'invalid_value'],
    ['an empty guided_grammar', { guided_grammar: '' }, 'guided_grammar', 'invalid_value'],
    ['guided_json and guided_regex', { guided_json: SCHEMA, guided_regex: 'a' }, 'guided_regex', 'invalid_value'],
    ['response_format and guided_choice', { response_format: { type: 'json_object' }, extra_body: { guided_choice: ['a'] } }, 'extra_body.guided_choice', 'invalid_value'],
    ['guided_grammar and structured_outputs', { guided_grammar: 'root ::= "a"', structured_outputs: { regex: 'a' } }, 'structured_outputs.regex', 'invalid_value'],
    ['two constraints in structured_outputs', { structured_outputs: { json: SCHEMA, regex: 'a' } }, 'structured_outputs.regex', 'invalid_value'],
    ['structured_outputs without a constraint', { structured_outputs: { whitespace_pattern: ' *' } }, 'structured_outputs', 'invalid_value'],
    ['an unknown field of structured_outputs', { structured_outputs: { json: SCHEMA, backend: 'x' } }, 'structured_outputs.backend', 'unknown_parameter'],
    ['disable_additional_properties without a schema', { structured_outputs: { regex: 'a', disable_additional_properties: true } }, 'structured_outputs.disable_additional_properties', 'invalid_value'],
    ['whitespace_pattern and disable_any_whitespace', { structured_outputs: { json: SCHEMA, whitespace_pattern: ' ', disable_any_whitespace: true } }, 'structured_outputs.disable_any_whitespace', 'invalid_value'],
    ['two whitespace patterns', { structured_outputs: { json: SCHEMA, whitespace_pattern: ' ' }, guided_whitespace_pattern: ' ' }, 'structured_outputs.whitespace_pattern', 'invalid_value'],
    ['a whitespace pattern without JSON', { guided_whitespace_pattern: ' *' }, 'guided_whitespace_pattern', 'invalid_value'],
    ['a whitespace pattern with a regex', { guided_regex: 'a', extra_body: { guided_whitespace_pattern: ' *' } }, 'extra_body.guided_whitespace_pattern', 'invalid_value'],
    ['another decoding backend', { guided_json: SCHEMA, guided_decoding_backend: 'outlines' }, 'guided_decoding_backend', 'unsupported_value'],
    ['a response_format without a type', { response_format: {} }, 'response_format.type', 'missing_required_parameter'],
    ['a response_format of another type', { response_format: { type: 'yaml' } }, 'response_format.type', 'invalid_value'],
    ['a response_format that is a string', { response_format: 'json_object' }, 'response_format', 'invalid_type'],
    ['json_object with a schema', { response_format: { type: 'json_object', schema: SCHEMA } }, 'response_format.schema', 'unknown_parameter'],
    ['json_schema without json_schema', { response_format: { type: 'json_schema' } }, 'response_format.json_schema', 'missing_required_parameter'],
    ['json_schema without a name', { response_format: { type: 'json_schema', json_schema: { schema: SCHEMA } } }, 'response_format.json_schema.name', 'missing_required_parameter'],
    ['json_schema without a schema', { response_format: { type: 'json_schema', json_schema: { name: 'n' } } }, 'response_format.json_schema.schema', 'missing_required_parameter'],
    ['json_schema with a schema that is text', { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: '{}' } } }, 'response_format.json_schema.schema', 'invalid_type'],
    ['json_schema with strict that is a string', { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMA, strict: 'yes' } } }, 'response_format.json_schema.strict', 'invalid_type'],
    ['json_schema with an unknown field', { response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMA, schemaa: 1 } } }, 'response_format.json_schema.schemaa', 'unknown_parameter'],
    ['a structural tag with a bad format', { response_format: { type: 'structural_tag', format: 'x' } }, 'response_format.format', 'invalid_value'],
    ['a structural tag of neither form', { structural_tag: '{"type": "structural_tag"}' }, 'structural_tag', 'missing_required_parameter'],
    ['a legacy structural tag without triggers', { structural_tag: { structures: [{ begin: 'a', schema: {}, end: 'b' }] } }, 'structural_tag.triggers', 'invalid_type'],
    ['a structural tag that is not JSON', { extra_body: { structural_tag: '{' } }, 'extra_body.structural_tag', 'invalid_value'],
  ];
  it.each(cases)('completions: %s', async (_what, body, param, code) => {
    await expectError(post(generator, { ...completion, ...body }), 400, param, code);
  });
  it.each(cases)('chat: %s', async (_what, body, param, code) => {
    await expectError(post(chatGenerator(), { model: 'fake-llama', messages, ...body }, '/v1/chat/completions'), 400, param, code);
  });
  it('names both conflicting constraints in the message', async () => {
    const error = await expectError(post(generator, { ...completion, guided_json: SCHEMA, extra_body: { guided_choice: ['a'] } }), 400, 'extra_body.guided_choice');
    expect(error.message).toContain("'guided_json'");
    expect(error.message).toContain("'extra_body.guided_choice'");
  });
  it('queued nothing for any of them', () => {
    expect(generator.events).toEqual([]);
  });
});

describe('the compile', () => {
  it("makes the grammar layer's StructuredOutputError a 400 naming the parameter, and queues nothing", async () => {
    const generator = chatGenerator();
    const fixed = new FixedStructure({ tokens: () => [], reject: 'the schema has an unknown type' });
    for (const stream of [false, true]) {
      const error = await expectError(post(generator, { model: 'fake', prompt: PROMPT, stream, extra_body: { guided_json: { type: 'nope' } } }, '/v1/completions', { compileStructuredOutput: fixed.compile }), 400, 'extra_body.guided_json', 'invalid_value');
      expect(error.message).toContain('the schema has an unknown type');
      await expectError(post(generator, { model: 'fake', messages, stream, response_format: { type: 'json_object' } }, '/v1/chat/completions', { compileStructuredOutput: fixed.compile }), 400, 'response_format', 'invalid_value');
    }
    expect(fixed.compiles).toHaveLength(4);
    expect(fixed.compiles[0]).toEqual({ output: { type: 'json_schema', schema: { type: 'nope' }, whitespace: COMPACT }, vocabSize: generator.tokenizer.vocabSize });
    expect(generator.events).toEqual([]);
  });

  it('runs through src/grammar by default: a structure it refuses is a 400 that queues nothing', async () => {
    // The real compile refuses an unbalanced regex (the grammar's vocabulary needs token bytes).
    const generator = chatGenerator();
    const tokenizer = generator.tokenizer;
    Object.assign(tokenizer, {
      tokenBytes: (id: number) => (tokenizer.isByte(id) ? Uint8Array.of(id - tokenizer.id(0)) : new TextEncoder().encode(tokenizer.vocab[id]!.replaceAll('▁', ' '))),
    });
    await expectError(post(generator, { model: 'fake', prompt: PROMPT, guided_regex: '(' }), 400, 'guided_regex', 'invalid_value');
    await expectError(post(generator, { model: 'fake', messages, extra_body: { structured_outputs: { regex: '(' } } }, '/v1/chat/completions'), 400, 'extra_body.structured_outputs.regex', 'invalid_value');
    expect(generator.events).toEqual([]);
  });

  it('answers hundreds of structures XGrammar refuses with 400s, and structured requests after them with 200s', async () => {
    // Each refusal used to leak part of XGrammar's wasm stack: about the 70th trapped the module
    // and every structured request after it, anyone's, answered 500 until a restart.
    const generator = chatGenerator();
    const tokenizer = generator.tokenizer;
    Object.assign(tokenizer, {
      tokenBytes: (id: number) => (tokenizer.isByte(id) ? Uint8Array.of(id - tokenizer.id(0)) : new TextEncoder().encode(tokenizer.vocab[id]!.replaceAll('▁', ' '))),
    });
    // Grammars XGrammar's own parser refuses (regexes are refused before it, by our reader).
    const refused = (i: number): [Record<string, unknown>, string] =>
      i % 2 === 0
        ? [{ guided_grammar: `root ::= "a" ( "b${i}" | ` }, 'guided_grammar']
        : [{ extra_body: { guided_grammar: `root ::= "a" | rule_${i}` } }, 'extra_body.guided_grammar'];
    for (let i = 0; i < 300; i++) {
      const [fields, param] = refused(i);
      const r = await post(generator, { model: 'fake', prompt: PROMPT, ...fields });
      expect(r.status, `request ${i}: ${JSON.stringify(json(r))}`).toBe(400);
      expect(json(r).error.param).toBe(param);
      expect(json(r).error.message).not.toMatch(/restarted/); // XGrammar's own refusal, no trap
    }
    const ok: Json = json(await post(generator, { model: 'fake', prompt: PROMPT, guided_choice: ['yes', 'no'], max_tokens: 8 }));
    expect(['yes', 'no']).toContain(ok.choices[0].text);
    expect(ok.choices[0].finish_reason).toBe('stop');
  });

  it('leaves other compile failures 500s', async () => {
    const generator = new FakeGenerator();
    const compileStructuredOutput = async () => {
      throw new Error('a bug');
    };
    const r = await post(generator, { model: 'fake', prompt: PROMPT, guided_regex: 'a' }, '/v1/completions', { compileStructuredOutput });
    expect(r.status).toBe(500);
    expect(generator.events).toEqual([]);
  });
});

describe('constrained generation', () => {
  /** The fake model writes its story; the structure makes it write this instead. */
  const TEXT = '{"a": 1, "b": [true]}';
  const setup = (options: { forced?: [number, number]; closedAtEnd?: boolean; delayMs?: number; failAfter?: number; failAt?: FixedStructureOptions['failAt'] } = {}) => {
    const generator = chatGenerator({ ...(options.delayMs ? { delayMs: options.delayMs } : {}), ...(options.failAfter !== undefined ? { failAfter: options.failAfter } : {}) });
    const tokens = generator.tokenizer.encodePieces(TEXT);
    const fixed = new FixedStructure({
      tokens: () => tokens,
      ...(options.forced ? { forced: options.forced } : {}),
      ...(options.closedAtEnd ? { closedAtEnd: true } : {}),
      ...(options.failAt ? { failAt: options.failAt } : {}),
    });
    const send = (body: Record<string, unknown>, url = '/v1/completions', signal?: AbortSignal) =>
      post(generator, { model: 'fake', ...(url === '/v1/completions' ? { prompt: PROMPT } : { messages }), max_tokens: 60, ...body }, url, { compileStructuredOutput: fixed.compile }, signal);
    return { generator, tokens, fixed, send };
  };

  it('runs on a fake generator that applies the constraint as the engine contract says', async () => {
    const { generator, tokens, fixed } = setup({ forced: [2, 5] });
    const constraint = await (await fixed.compile(generator.tokenizer, generator.tokenizer.vocabSize, { type: 'regex', pattern: '.*' })).createConstraint([EOS]);
    const session = await generator.openSession({ promptTokens: generator.tokenizer.encode(PROMPT), sampling: { temperature: 1, topP: 1, seed: 1 } });
    const sequence = session.sequence({ index: 0, maxTokens: 60, stopTokenIds: [EOS], constraint });
    const out = [];
    let step;
    while (!(step = await sequence.next()).done) out.push(step.value);
    session.close();
    expect(step.value).toBe('stop');
    expect(out.map((t) => t.id)).toEqual(tokens);
    expect(out.map((t) => t.forced === true)).toEqual(tokens.map((_, i) => i >= 2 && i < 5));
  });

  it('gives every choice its own constraint, disposed of when it ends', async () => {
    const { generator, tokens, fixed, send } = setup();
    const body: Json = json(await send({ guided_json: SCHEMA, n: 3, temperature: 1, seed: 5 }));
    expect(body.choices.map((c: Json) => [c.text, c.finish_reason])).toEqual([0, 1, 2].map(() => [TEXT, 'stop']));
    expect(body.usage.completion_tokens).toBe(3 * tokens.length);
    expect(fixed.constraints).toHaveLength(3);
    expect(fixed.constraints.map((c) => c.stopTokenIds)).toEqual([[EOS], [EOS], [EOS]]);
    expect(fixed.undisposed).toBe(0);
    const constraints = generator.sequences.map((s) => s.options.constraint);
    expect(new Set(constraints).size).toBe(3);
    expect(constraints.every((c) => c !== undefined)).toBe(true);
    expect(generator.endings.map((e) => e.how)).toEqual(['stop', 'stop', 'stop']);
  });

  it('gives each best_of candidate one, and none without a structure', async () => {
    const { generator, fixed, send } = setup();
    expect(json(await send({ guided_regex: '.*', n: 1, best_of: 3 })).choices).toHaveLength(1);
    expect(fixed.constraints).toHaveLength(3);
    expect(fixed.undisposed).toBe(0);
    await send({});
    expect(generator.sequences.at(-1)!.options.constraint).toBeUndefined();
    expect(fixed.constraints).toHaveLength(3);
  });

  it('counts jump-forward tokens as completion tokens, streamed or not', async () => {
    const { generator, tokens, fixed, send } = setup({ forced: [0, 4] });
    const whole: Json = json(await send({ guided_json: SCHEMA, logprobs: 1 }));
    expect(whole.choices[0].text).toBe(TEXT);
    expect(whole.usage.completion_tokens).toBe(tokens.length);
    expect(whole.choices[0].logprobs.tokens.join('')).toBe(TEXT);
    const streamed = await events(await send({ guided_json: SCHEMA, stream: true, stream_options: { include_usage: true } }));
    expect(streamed.filter((e) => e !== '[DONE]' && e.choices.length).map((e) => e.choices[0].text).join('')).toBe(TEXT);
    expect(streamed.at(-2).usage.completion_tokens).toBe(tokens.length);
    expect(generator.endings.map((e) => e.ids)).toEqual([tokens, tokens]);
    expect(fixed.undisposed).toBe(0);
  });

  it("ends with 'stop' when the structure is complete and allows nothing more", async () => {
    const { fixed, send } = setup({ closedAtEnd: true });
    const body: Json = json(await send({ guided_json: SCHEMA, ignore_eos: true }));
    expect(body.choices[0]).toMatchObject({ text: TEXT, finish_reason: 'stop' });
    expect(fixed.constraints[0]!.stopTokenIds).toEqual([]);
  });

  it("ends with 'length' mid-structure at max_tokens, and stops at stop strings, as unconstrained", async () => {
    const { tokens, fixed, send } = setup();
    const short: Json = json(await send({ guided_json: SCHEMA, max_tokens: 5 }));
    expect(short.choices[0].finish_reason).toBe('length');
    expect(short.choices[0].text).toBe(TEXT.slice(0, short.choices[0].text.length));
    expect(short.usage.completion_tokens).toBe(5);
    const stopped: Json = json(await send({ guided_json: SCHEMA, stop: ['true'] }));
    expect(stopped.choices[0]).toMatchObject({ text: '{"a": 1, "b": [', finish_reason: 'stop' });
    expect(stopped.usage.completion_tokens).toBeLessThan(tokens.length);
    expect(fixed.undisposed).toBe(0);
  });

  it('streams chat content under response_format as its whole answer does', async () => {
    const { fixed, send } = setup();
    const whole: Json = json(await send({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: SCHEMA } } }, '/v1/chat/completions'));
    expect(whole.choices[0]).toMatchObject({ message: { content: TEXT }, finish_reason: 'stop' });
    const chunks = await events(await send({ response_format: { type: 'json_object' }, stream: true, n: 2 }, '/v1/chat/completions'));
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c !== '[DONE]' && c.choices[0]?.index === index);
      expect(mine.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(TEXT);
      expect(mine.at(-1).choices[0].finish_reason).toBe('stop');
    }
    expect(fixed.compiles.map((c) => c.output.type)).toEqual(['json_schema', 'json_object']);
    expect(fixed.constraints).toHaveLength(3);
    expect(fixed.undisposed).toBe(0);
  });

  it('disposes of the constraint when the client aborts, the consumer stops, or the GPU fails', async () => {
    const aborted = setup({ delayMs: 5 });
    const controller = new AbortController();
    const r = await aborted.send({ guided_json: SCHEMA, stream: true }, '/v1/completions', controller.signal);
    const reader = (r.body as AsyncIterable<string>)[Symbol.asyncIterator]();
    await reader.next();
    controller.abort();
    for (let step = await reader.next(); !step.done; step = await reader.next());
    expect(aborted.fixed.constraints).toHaveLength(1);
    expect(aborted.fixed.undisposed).toBe(0);

    const stopped = setup({ delayMs: 5 });
    const s = await stopped.send({ guided_json: SCHEMA, stream: true });
    const chunks = (s.body as AsyncIterable<string>)[Symbol.asyncIterator]();
    await chunks.next();
    await chunks.return!();
    expect(stopped.fixed.undisposed).toBe(0);
    expect(stopped.generator.active).toBe(0);

    const failing = setup({ failAfter: 3 });
    expect((await failing.send({ guided_json: SCHEMA, n: 2 })).status).toBe(500);
    expect(failing.fixed.constraints).toHaveLength(2); // the two choices decode at once, each its own
    expect(failing.fixed.undisposed).toBe(0);
  });

  it('answers 503, retryable, when a restart of the grammar engine ends a sequence, and disposes of its constraint', async () => {
    const restarted = () => setup({ failAt: { step: 3, error: () => new GrammarEngineRestartedError() } });
    const whole = restarted();
    const response = await whole.send({ guided_json: SCHEMA });
    expect(response.status).toBe(503);
    expect(response.headers['x-should-retry']).toBeUndefined();
    expect(json(response).error).toMatchObject({ type: 'service_unavailable', code: 'grammar_engine_restarted' });
    expect(json(response).error.message).toMatch(/retry/);
    expect(whole.fixed.undisposed).toBe(0);
    const streamed = restarted();
    const last = (await events(await streamed.send({ guided_json: SCHEMA, stream: true }, '/v1/chat/completions'))).filter((e) => e !== '[DONE]').at(-1);
    expect(last.error).toMatchObject({ code: 'grammar_engine_restarted' });
    expect(streamed.fixed.undisposed).toBe(0);
  });
});
