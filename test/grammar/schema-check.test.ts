// JSON schemas checked before XGrammar: keyword shapes, what XGrammar would ignore, nesting with
// $refs followed, and the estimated cost.
import { describe, expect, it } from 'vitest';
import { MAX_COST, MAX_DEPTH, MAX_PROPERTIES, MAX_REGEX_CHARS, scaledCost } from '../../src/grammar/limits.ts';
import { checkJsonSchema } from '../../src/grammar/schema-check.ts';
import { StructuredOutputError } from '../../src/grammar/types.ts';

const compact = { kind: 'compact' } as const;

function refusal(schema: unknown): string {
  try {
    checkJsonSchema(schema, compact);
  } catch (error) {
    expect(error).toBeInstanceOf(StructuredOutputError);
    return (error as Error).message;
  }
  return 'accepted';
}

/** `inner` under `levels` levels of object properties (two JSON levels each). */
function nestedObjects(levels: number, inner: unknown = { type: 'integer' }): unknown {
  let schema = inner;
  for (let i = 0; i < levels; i++) schema = { type: 'object', properties: { a: schema }, required: ['a'] };
  return schema;
}

describe('checkJsonSchema', () => {
  it('accepts what XGrammar supports, pydantic-style schemas among them', () => {
    const pydantic = {
      $defs: { Pet: { type: 'object', properties: { name: { type: 'string', title: 'Name' }, kind: { enum: ['cat', 'dog'], type: 'string' } }, required: ['name'], title: 'Pet' } },
      type: 'object',
      properties: {
        pets: { type: 'array', items: { $ref: '#/$defs/Pet' }, maxItems: 10 },
        owner: { anyOf: [{ type: 'string', maxLength: 20 }, { type: 'null' }], default: null, title: 'Owner' },
        tree: { $ref: '#' },
        tags: { type: 'array', prefixItems: [{ type: 'integer', minimum: 0 }], items: { const: 'x' } },
      },
      required: ['pets'],
      additionalProperties: false,
    };
    expect(refusal(pydantic)).toBe('accepted');
    expect(refusal(true)).toBe('accepted');
    expect(refusal({})).toBe('accepted');
  });

  it('refuses keywords XGrammar would ignore, naming them and where they are', () => {
    expect(refusal({ type: 'object', properties: { a: { not: { type: 'null' } } } })).toBe('Unsupported JSON schema: "not" is not supported (at #/properties/a/not)');
    expect(refusal({ type: 'integer', multipleOf: 5 })).toBe('Unsupported JSON schema: "multipleOf" is not supported (at #/multipleOf)');
    expect(refusal({ type: 'array', uniqueItems: true })).toMatch(/"uniqueItems" is not supported/);
    expect(refusal({ if: {}, then: {} })).toMatch(/"if" is not supported/);
    expect(refusal({ allOf: [{ type: 'object' }, { required: ['a'] }] })).toBe('Unsupported JSON schema: "allOf" of more than one schema is not supported (at #/allOf)');
    expect(refusal({ type: 'string', pattern: '^a+$', maxLength: 3 })).toBe('Unsupported JSON schema: "maxLength" beside "pattern" is not supported (XGrammar ignores it) (at #)');
    expect(refusal({ $ref: '#/$defs/a', type: 'object', $defs: { a: {} } })).toMatch(/"type" beside "\$ref" is not supported/);
    expect(refusal({ anyOf: [{ type: 'string' }], properties: {} })).toMatch(/"properties" beside "anyOf"/);
    expect(refusal({ enum: ['a'], minLength: 3 })).toMatch(/"minLength" beside "enum"/);
    expect(refusal({ $ref: 'https://example.com/schema' })).toMatch(/only local references/);
    expect(refusal({ type: 'string', format: 'date', maxLength: 10 })).toBe('Unsupported JSON schema: "maxLength" beside "format" is not supported (XGrammar ignores it) (at #)');
  });

  it('refuses property names XGrammar would write unescaped', () => {
    expect(refusal({ type: 'object', properties: { 'a\tb': { type: 'string' } } })).toBe(
      'Unsupported JSON schema: property name "a\\tb" is not supported: names with ", \\ or control characters are not (at #/properties)',
    );
    expect(refusal({ type: 'object', properties: { 'a"b': {} } })).toMatch(/property name "a\\"b"/);
    expect(refusal({ type: 'object', properties: { 'a\\b': {} } })).toMatch(/property name "a\\\\b"/);
    expect(refusal({ type: 'object', properties: { 'a/b é \u2028': {} } })).toBe('accepted');
  });

  it('refuses formats that no rule enforces, naming them', () => {
    expect(refusal({ type: 'string', format: 'regex' })).toMatch(/^Unsupported JSON schema: format "regex" is not supported: .* \(at #\/format\)$/);
    expect(refusal({ type: 'object', properties: { u: { type: 'string', format: 'url' } } })).toBe('Unsupported JSON schema: format "url" is not supported: use "uri" (at #/properties/u/format)');
    expect(refusal({ type: 'string', format: 'zip-code' })).toMatch(/format "zip-code" is not supported: it is not one of date, time, date-time, /);
    for (const format of ['date', 'date-time', 'email', 'hostname', 'ipv6', 'uri', 'uuid', 'duration', 'idn-email', 'iri-reference', 'byte', 'password']) {
      expect(refusal({ type: 'string', format }), format).toBe('accepted');
    }
  });

  it('refuses the keywords of a type in a schema without "type" that XGrammar reads as any value', () => {
    expect(refusal({ minimum: 3 })).toBe('Unsupported JSON schema: "minimum" without "type" is not supported (XGrammar ignores it there; name the type) (at #)');
    expect(refusal({ type: 'object', properties: { a: { format: 'date' } } })).toMatch(/"format" without "type" .* \(at #\/properties\/a\)/);
    expect(refusal({ required: ['a'] })).toMatch(/"required" without "type"/);
    expect(refusal({ minItems: 1 })).toMatch(/"minItems" without "type"/);
    // Read as an object or an array: the other types' keywords cannot apply.
    expect(refusal({ properties: { a: { type: 'integer' } }, required: ['a'], minimum: 3 })).toBe('accepted');
    expect(refusal({ items: { type: 'integer' }, minItems: 1 })).toBe('accepted');
    expect(refusal({ description: 'anything', title: 'x' })).toBe('accepted');
  });

  it('refuses keyword shapes XGrammar would fail on without a message', () => {
    expect(refusal(false)).toBe('Invalid JSON schema: false accepts no value (at #)');
    expect(refusal({ type: 'object', properties: 5 })).toBe('Invalid JSON schema: properties must be an object (at #/properties)');
    expect(refusal({ type: 'object', required: ['a', 1] })).toBe('Invalid JSON schema: required must be an array of strings (at #/required)');
    expect(refusal({ type: 'strings' })).toBe('Invalid JSON schema: type "strings" is not a JSON schema type (at #/type)');
    expect(refusal({ type: 'array', maxItems: -1 })).toMatch(/maxItems must be a non-negative integer/);
    expect(refusal({ type: 'number', minimum: '0' })).toMatch(/minimum must be a number/);
    expect(refusal({ items: [{ type: 'string' }] })).toBe('Invalid JSON schema: a schema must be an object or a boolean (at #/items)');
    expect(refusal({ $ref: '#/$defs/missing' })).toMatch(/points at nothing/);
    expect(refusal({ enum: [] })).toMatch(/enum must be a non-empty array/);
  });

  it(`refuses nesting past ${MAX_DEPTH} levels, following $refs`, () => {
    expect(refusal(nestedObjects(MAX_DEPTH / 2 - 1))).toBe('accepted');
    expect(refusal(nestedObjects(MAX_DEPTH / 2 + 1))).toMatch(/nested more than 32 levels deep/);
    const defs: Record<string, unknown> = { d0: { type: 'integer' } };
    for (let i = 1; i <= 20; i++) defs[`d${i}`] = { type: 'array', items: { $ref: `#/$defs/d${i - 1}` } };
    expect(refusal({ $defs: defs, $ref: '#/$defs/d20' })).toMatch(/nested more than 32 levels deep/);
    expect(refusal({ $defs: defs, $ref: '#/$defs/d5' })).toBe('accepted');
    expect(refusal({ const: JSON.parse('['.repeat(40) + ']'.repeat(40)) })).toMatch(/nested more than/);
    // Recursion through a $ref is a rule that refers to itself: no nesting.
    expect(refusal({ $defs: { node: { type: 'object', properties: { next: { $ref: '#/$defs/node' } } } }, $ref: '#/$defs/node' })).toBe('accepted');
  });

  it(`refuses more than ${MAX_PROPERTIES} properties in one object`, () => {
    const properties = Object.fromEntries(Array.from({ length: MAX_PROPERTIES + 1 }, (_, i) => [`p${i}`, { type: 'integer' }]));
    expect(refusal({ type: 'object', properties })).toBe(`Invalid JSON schema: ${MAX_PROPERTIES + 1} properties in one object; at most ${MAX_PROPERTIES} are supported (at #/properties)`);
  });

  it('estimates string lengths, patterns, formats and number ranges, once for equal ones', () => {
    expect(checkJsonSchema({ type: 'string', maxLength: 30 }, compact).cost).toBe(30 * 50);
    expect(checkJsonSchema({ type: 'string', minLength: 1000 }, compact).cost).toBe(256 * 50);
    const twice = { type: 'object', properties: { a: { type: 'string', maxLength: 10 }, b: { type: 'string', maxLength: 10, description: 'the same rule' } }, required: ['a', 'b'] };
    expect(checkJsonSchema(twice, compact).cost).toBe(10 * 50);
    expect(checkJsonSchema({ type: 'string', pattern: '[^"]{0,10}' }, compact).cost).toBe(500);
    // A number range: 5 ms and 1.5 per digit of its longest bound's integer part.
    expect(checkJsonSchema({ type: 'number', minimum: 0.5, maximum: 2 }, compact).cost).toBe(5 + 1.5 * 1);
    expect(checkJsonSchema({ type: 'integer', minimum: 0, maximum: 1e9 }, compact).cost).toBe(5 + 1.5 * 10);
    expect(checkJsonSchema({ type: 'number', minimum: -1e300, maximum: 1e300 }, compact).cost).toBe(5 + 1.5 * 301);
    expect(checkJsonSchema({ type: 'string', format: 'hostname' }, compact).cost).toBe(250);
    const { largest } = checkJsonSchema({ type: 'object', properties: { a: { type: 'string', format: 'email' }, name: { type: 'string', maxLength: 20 } }, required: ['a', 'name'] }, compact);
    expect(largest).toEqual({ cost: 1000, what: 'string length bounds at #/properties/name' });
  });

  it('estimates the largest ranges, ±1e308, near what they take (0.05-0.25 s measured on 32k-152k vocabularies; 6-7 s on Llama 3.2 before their digit chains)', () => {
    for (const type of ['number', 'integer']) {
      const { cost } = checkJsonSchema({ type, minimum: -1e308, maximum: 1e308 }, compact);
      expect(cost).toBe(5 + 1.5 * 309);
      for (const vocabSize of [32_000, 128_256, 151_936]) expect(scaledCost(cost, vocabSize)).toBeLessThan(500);
    }
    // Six distinct such ranges fit under the bound on Llama 3.2's vocabulary.
    const six = { type: 'object', properties: Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`p${i}`, { type: 'number', minimum: -1e308, maximum: 1e308 - i * 1e300 }])) };
    expect(scaledCost(checkJsonSchema(six, compact).cost, 128_256)).toBeLessThan(MAX_COST);
  });

  it('estimates optional properties by their number and its square, and bounded whitespace by the separators', () => {
    const properties = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`p${i}`, { type: 'integer' }]));
    expect(checkJsonSchema({ type: 'object', properties }, compact).cost).toBeCloseTo(100 * 0.5 + 100 ** 2 * 0.001);
    expect(checkJsonSchema({ type: 'object', properties }, { kind: 'any' }).cost).toBeCloseTo(100 * 0.5 + 100 ** 2 * 0.025);
    expect(checkJsonSchema({ type: 'object', properties, required: Object.keys(properties) }, { kind: 'any' }).cost).toBe(0);
    // 3 properties and 2 more separators, 3 for the array, 8 characters each, ~4 ms a position.
    const bounded = { type: 'object', properties: { a: { type: 'array', items: { type: 'integer' } }, b: { type: 'null' }, c: { type: 'null' } }, required: ['a', 'b', 'c'] };
    expect(checkJsonSchema(bounded, { kind: 'any', maxRun: 8 }).cost).toBe((5 + 3) * 8 * 4);
  });

  it('holds every regex in a schema to the length of a regex output, and reads the longest allowed at once', () => {
    // A 64 KiB literal took 28 s to read, quadratic in its terms: it was bounded by the schema only.
    const long = 'a'.repeat(MAX_REGEX_CHARS + 1);
    expect(refusal({ type: 'object', properties: { s: { type: 'string', pattern: long } } })).toMatch(/pattern of 4097 characters; at most 4096 .*#\/properties\/s/);
    expect(refusal({ type: 'object', patternProperties: { [long]: {} } })).toMatch(/pattern of 4097 characters/);
    expect(refusal({ type: 'object', propertyNames: { pattern: long } })).toMatch(/pattern of 4097 characters/);
    // At the limit: a literal of 4096 characters, 2,048 branches that share their first character.
    for (const pattern of ['a'.repeat(MAX_REGEX_CHARS), 'ab|'.repeat(1365) + 'a']) {
      expect(refusal({ type: 'string', pattern })).toBe('accepted');
    }
  });
});
