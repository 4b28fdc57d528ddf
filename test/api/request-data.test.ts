// A request body as plain JSON data, walked without recursion (src/api/request-data.ts): the
// copy, the depth and size bounds, and what a request object given directly may hold.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/api/errors.ts';
import { fieldData, MAX_REQUEST_DEPTH, MAX_REQUEST_VALUES, requestData, withinDepth } from '../../src/api/request-data.ts';
import { deepArrayJson } from '../helpers/hostile-values.ts';

/** The ApiError `run` throws. */
function refusal(run: () => unknown): ApiError {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(400);
    return err as ApiError;
  }
  throw new Error('expected a refusal');
}

/** `levels` arrays nested in each other, the outermost under `key` of a body (the body is one more level). */
function bodyNested(key: string, levels: number): Record<string, unknown> {
  return { [key]: JSON.parse(deepArrayJson(levels, '1')) };
}

describe('requestData', () => {
  it('copies plain data, keeping a __proto__ key an own key, as JSON.parse does', () => {
    const body = JSON.parse('{"model": "m", "messages": [{"role": "user", "__proto__": {"x": 1}}], "n": 1.5}');
    const data = requestData(body) as Record<string, unknown>;
    expect(data).toEqual(body);
    expect(data).not.toBe(body);
    const message = (data.messages as Record<string, unknown>[])[0]!;
    expect(Object.getPrototypeOf(message)).toBe(Object.prototype);
    expect(Object.hasOwn(message, '__proto__')).toBe(true);
    expect(requestData('text')).toBe('text');
  });

  it('reads a request object as JSON.stringify would: no undefined, functions or symbols in objects, null for them in arrays', () => {
    const data = requestData({ a: undefined, f: () => 1, s: Symbol('s'), list: [undefined, () => 1, 2], n: NaN, [Symbol('k')]: 1 });
    expect(data).toEqual({ list: [null, null, 2], n: NaN });
    expect(Object.keys(data as object)).toEqual(['list', 'n']);
  });

  it(`takes ${MAX_REQUEST_DEPTH} levels, the body counted, and refuses one more, naming the parameter and the path`, () => {
    expect(() => requestData(bodyNested('stop', MAX_REQUEST_DEPTH - 1))).not.toThrow();
    const error = refusal(() => requestData(bodyNested('stop', MAX_REQUEST_DEPTH)));
    expect(error.param).toBe('stop');
    expect(error.code).toBe('nested_too_deeply');
    expect(error.message).toContain(`at 'stop[0][0][0]`);
    expect(refusal(() => requestData({ extra_body: bodyNested('guided_json', MAX_REQUEST_DEPTH) })).param).toBe('extra_body.guided_json');
  });

  it('walks a value a million levels deep without recursion', () => {
    const error = refusal(() => requestData(bodyNested('messages', 1_000_000)));
    expect(error.param).toBe('messages');
    expect(error.message.length).toBeLessThan(600);
  });

  it('clips long keys in the param and the path', () => {
    const key = 'k'.repeat(100_000);
    const error = refusal(() => requestData(bodyNested(key, MAX_REQUEST_DEPTH)));
    expect(error.param!.length).toBeLessThan(200);
    expect(error.message.length).toBeLessThan(600);
  });

  it('refuses a cycle as a value nested too deeply', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(refusal(() => requestData({ chat_template_kwargs: cyclic })).param).toBe('chat_template_kwargs');
  });

  it(`refuses more than ${MAX_REQUEST_VALUES} values, as a sparse array of length 2^32 - 1 holds`, () => {
    const sparse: unknown[] = [];
    sparse.length = 2 ** 32 - 1;
    const error = refusal(() => requestData({ prompt: sparse }));
    expect(error.code).toBe('request_too_large');
    expect(error.param).toBe('prompt');
  });

  it('refuses a BigInt and a value that cannot be read, naming where', () => {
    expect(refusal(() => requestData({ seed: 5n })).param).toBe('seed');
    const getter = Object.defineProperty({}, 'temperature', { enumerable: true, get: () => { throw new Error('no temperature'); } });
    const error = refusal(() => requestData(getter));
    expect(error.param).toBe('temperature');
    expect(error.message).toContain('no temperature');
    const proxy = new Proxy({}, { ownKeys: () => { throw new Error('no keys'); } });
    expect(refusal(() => requestData({ metadata: proxy })).param).toBe('metadata');
    expect(refusal(() => requestData({ messages: [{ role: proxy }] })).message).toContain("'messages[0].role'");
  });

  it('reads each value once', () => {
    let reads = 0;
    const body = Object.defineProperty({}, 'prompt', { enumerable: true, get: () => `read ${++reads}` });
    expect(requestData(body)).toEqual({ prompt: 'read 1' });
    expect(reads).toBe(1);
  });
});

describe('fieldData', () => {
  it('counts the levels of JSON text inside a field from that field, naming it', () => {
    const param = 'messages[0].tool_calls[0].function.arguments';
    expect(fieldData(JSON.parse(deepArrayJson(MAX_REQUEST_DEPTH - 1, '1')), param)).toBeDefined();
    const error = refusal(() => fieldData(JSON.parse(deepArrayJson(MAX_REQUEST_DEPTH + 1, '1')), param));
    expect(error.param).toBe(param);
    expect(error.message).toContain(`at '${param}[0][0]`);
  });
});

describe('withinDepth', () => {
  it('tells whether a value nests at most the limit, without recursion', () => {
    expect(withinDepth(JSON.parse(deepArrayJson(MAX_REQUEST_DEPTH, '1')))).toBe(true);
    expect(withinDepth(JSON.parse(deepArrayJson(MAX_REQUEST_DEPTH + 1, '1')))).toBe(false);
    expect(withinDepth(JSON.parse(deepArrayJson(1_000_000, '1')))).toBe(false);
    expect(withinDepth('text', 0)).toBe(true);
    expect(withinDepth({ a: [1, { b: 2 }] }, 3)).toBe(true);
    expect(withinDepth({ a: [1, { b: {} }] }, 3)).toBe(false);
  });
});
