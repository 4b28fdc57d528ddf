// The placeholder splicing (schema-splice.ts): how XGrammar prints a placeholder (the assumption
// the splice rests on), the schema rewrite (single types, type lists, $refs, aliases, prefixes
// that avoid the schema's own text), the loud failures, and, on the schemas where XGrammar's own
// grammar lets invalid values through, the spliced grammar refusing them and keeping valid ones.
import { describe, expect, it } from 'vitest';
import { schemaGrammar, spliceGrammar, spliceSchema, type SchemaGrammarOptions } from '../../src/grammar/schema-splice.ts';
import { StructuredOutputError } from '../../src/grammar/types.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { grammarAcceptsAll } from '../helpers/grammar-accepts.ts';

const compact: SchemaGrammarOptions = { anyWhitespace: false };

/** XGrammar's own grammar of a schema (compact), as compileJSONSchema would build it. */
async function xgrammarEbnf(schema: unknown): Promise<string> {
  const xg = await loadXGrammar();
  return (await xg.run((api) => api.Testings._jsonSchemaToEBNF(JSON.stringify(schema), false, -1, undefined, true))).value;
}

/** The spliced grammar of a schema. */
async function splicedEbnf(schema: unknown, options = compact): Promise<string> {
  const xg = await loadXGrammar();
  return (await xg.run((api) => schemaGrammar(api, spliceSchema(schema), options))).value;
}

const acceptsAll = grammarAcceptsAll;

describe('spliceSchema', () => {
  it('relies on XGrammar printing a const string as its JSON text in one literal', async () => {
    const ebnf = await xgrammarEbnf({ type: 'object', properties: { a: { const: 'xgs_0' } }, required: ['a'] });
    expect(ebnf.split('"\\"xgs_0\\""')).toHaveLength(2);
  });

  it('leaves a schema without bounded numbers or formats as it is', () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string', format: 'uuid' } } };
    expect(spliceSchema(schema)).toEqual({ text: JSON.stringify(schema), markers: [], rules: '' });
  });

  it('puts placeholders in place of bounded numbers and formatted strings, wherever they are', async () => {
    const schema = {
      $defs: { day: { type: 'string', format: 'date', description: 'kept' } },
      type: 'object',
      properties: {
        ratio: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
        when: { $ref: '#/$defs/day' },
        either: { type: ['integer', 'string', 'null'], minimum: 1, format: 'date-time' },
        count: { type: 'integer', format: 'int32' },
        link: { type: 'string', format: 'iri-reference' },
        list: { type: 'array', items: { anyOf: [{ type: 'number', maximum: 0 }, { type: 'boolean' }] } },
      },
    };
    const { text, markers, rules } = spliceSchema(schema);
    expect(markers).toEqual(['xgs_0', 'xgs_1', 'xgs_2', 'xgs_3', 'xgs_4', 'xgs_5']);
    expect(JSON.parse(text)).toEqual({
      $defs: { day: { const: 'xgs_1', description: 'kept' } },
      type: 'object',
      properties: {
        ratio: { const: 'xgs_0' },
        when: { $ref: '#/$defs/day' },
        either: { anyOf: [{ const: 'xgs_2' }, { const: 'xgs_3' }, { type: 'null', minimum: 1, format: 'date-time' }] },
        count: { const: 'xgs_4' },
        link: { type: 'string', format: 'uri-reference' },
        list: { type: 'array', items: { anyOf: [{ const: 'xgs_5' }, { type: 'boolean' }] } },
      },
    });
    // Each placeholder's rule, and each format's rules once.
    for (const marker of markers) expect(rules).toMatch(new RegExp(`^${marker} ::= `, 'm'));
    expect(rules.match(/^xgs_f_date ::= /gm)).toHaveLength(1);
    expect(rules.match(/^xgs_f_year ::= /gm)).toHaveLength(1);
    const document = '{"ratio": 0.25, "when": "2024-02-29", "either": "2024-02-29T12:00:00Z", "count": -3, "link": "a/b", "list": [-1.5, true]}';
    expect(await acceptsAll(await splicedEbnf(schema), [document, document.replace('0.25', '1.25')])).toEqual([true, false]);
  });

  it('takes a prefix that the schema does not contain', async () => {
    const schema = { type: 'object', properties: { xgs_0: { const: 'xgs_0' }, n: { type: 'integer', minimum: 1, maximum: 3 } }, required: ['xgs_0', 'n'] };
    const spliced = spliceSchema(schema);
    expect(spliced.markers).toEqual(['xgs1_0']);
    const ebnf = await splicedEbnf(schema);
    expect(await acceptsAll(ebnf, ['{"xgs_0": "xgs_0", "n": 2}', '{"xgs_0": "xgs_0", "n": 4}', '{"xgs_0": xgs1_0, "n": 2}'])).toEqual([true, false, false]);
  });

  it('refuses a range no number lies in, naming the place', () => {
    expect(() => spliceSchema({ type: 'object', properties: { a: { type: 'integer', minimum: 0.2, maximum: 0.8 } } })).toThrow(
      new StructuredOutputError('Invalid JSON schema: no integer satisfies minimum 0.2, maximum 0.8 (at #/properties/a)'),
    );
    expect(() => spliceSchema({ type: 'number', exclusiveMinimum: 1, exclusiveMaximum: 1 })).toThrow(/no number satisfies exclusiveMinimum 1, exclusiveMaximum 1 \(at #\)/);
    expect(() => spliceSchema({ type: 'integer', format: 'int32', minimum: 2 ** 32 })).toThrow(/no integer satisfies minimum 4294967296, format int32/);
    expect(() => spliceSchema({ type: 'string', minLength: 4, maxLength: 3 })).toThrow(/no string satisfies minLength 4, maxLength 3 \(at #\)/);
  });

  it('fails loudly where a placeholder is printed twice or a rule name of ours is taken', () => {
    const spliced = spliceSchema({ type: 'integer', minimum: 0 });
    expect(() => spliceGrammar('root ::= "\\"xgs_0\\"" | "\\"xgs_0\\""', spliced)).toThrow(/appears 2 times/);
    expect(() => spliceGrammar('root ::= "\\"xgs_0\\""\nxgs_0 ::= "a"', spliced)).toThrow(/already has a rule named xgs_0/);
    expect(spliceGrammar('root ::= "\\"xgs_0\\""', spliced)).toMatch(/^root ::= xgs_0\nxgs_0 ::= /);
  });

  it('compiles a placeholder XGrammar does not print (a part of the schema it does not read)', async () => {
    const schema = { type: 'string', items: { type: 'number', minimum: 1 } };
    expect(spliceSchema(schema).markers).toEqual(['xgs_0']);
    expect(await acceptsAll(await splicedEbnf(schema), ['"a"', '1'])).toEqual([true, false]);
  });
});

describe('spliced grammars where XGrammar’s own are wrong', () => {
  // [schema, values XGrammar's grammar lets through that are invalid, valid values]
  const CASES: [unknown, string[], string[]][] = [
    [{ type: 'number', exclusiveMinimum: 0, maximum: 1 }, ['0', '1.2'], ['0.000001', '0.5', '1']],
    [{ type: 'number', minimum: 0.5, maximum: 2.25 }, ['0x5', '2,25'], ['0.5', '2.25', '1.999999']],
    [{ type: 'integer', maximum: 123 }, ['129'], ['123', '-7', '0']],
    [{ type: 'integer', minimum: -5 }, ['-'], ['-5', '0', '12345']],
    [{ type: 'integer', format: 'int32' }, ['2147483648'], ['2147483647', '-2147483648']],
    [{ type: 'string', format: 'date' }, ['"2023-02-29"', '"2024-04-31"'], ['"2024-02-29"', '"2000-02-29"', '"2023-12-31"']],
    [{ type: 'string', format: 'time' }, ['"00:00:60Z"'], ['"23:59:59.5+01:00"']],
    [{ type: 'string', format: 'date-time' }, ['"2024-01-01T10:60:00Z"', '"2023-02-30T00:00:00Z"'], ['"2024-01-01T10:59:00Z"']],
    [{ type: 'string', format: 'email' }, ['"a@b"', '"\\"x\\"@b.cd"'], ['"a.b@c.de"']],
    [{ type: 'string', format: 'hostname' }, [`"${'a'.repeat(64)}"`], ['"example.com"']],
    [{ type: 'string', format: 'ipv4' }, ['"01.2.3.4"'], ['"10.2.3.4"']],
    [{ type: 'string', format: 'ipv6' }, ['"::00.1.2.3"'], ['"::0.1.2.3"', '"fe80::1"']],
    [{ type: 'string', format: 'uri' }, ['"a:"'], ['"https://example.com/x?y#z"']],
    [{ type: 'string', format: 'uri-template' }, ['"{a.b}"'], ['"/x{?a,b}"']],
    [{ type: 'string', format: 'json-pointer' }, ['"/a"b"'], ['"/a/~0"']],
    [{ type: 'string', minLength: 1, maxLength: 3 }, ['"a\tb"', '"\u0000"'], ['"abc"', '"é👋"', '"a b"']],
  ];

  it('XGrammar’s grammar accepts each invalid value; the spliced one refuses it and accepts the valid ones', async () => {
    for (const [schema, invalid, valid] of CASES) {
      expect(await acceptsAll(await xgrammarEbnf(schema), invalid), `XGrammar's own rule for ${JSON.stringify(schema)}`).toEqual(invalid.map(() => true));
      const ours = await splicedEbnf(schema);
      expect(await acceptsAll(ours, [...invalid, ...valid]), JSON.stringify(schema)).toEqual([...invalid.map(() => false), ...valid.map(() => true)]);
    }
  });

  it('enums of scalars: XGrammar’s alternation takes a value it does not have, and ignores the type; ours takes exactly the values of the type', async () => {
    const enumSchema = { type: 'object', properties: { k: { enum: ['bbaa', 'aab', 'aaa', 1, null] } }, required: ['k'] };
    const texts = ['{"k": "bbab"}', '{"k": "bbaa"}', '{"k": "aab"}', '{"k": 1}', '{"k": null}', '{"k": 2}'];
    expect(await acceptsAll(await xgrammarEbnf(enumSchema), texts)).toEqual([true, true, true, true, true, false]);
    expect(await acceptsAll(await splicedEbnf(enumSchema), texts)).toEqual([false, true, true, true, true, false]);
    const typed = { type: 'integer', enum: [1, 1.5, 'x', 2] };
    expect(await acceptsAll(await xgrammarEbnf(typed), ['1', '1.5', '"x"', '2'])).toEqual([true, true, true, true]);
    expect(await acceptsAll(await splicedEbnf(typed), ['1', '1.5', '"x"', '2'])).toEqual([true, false, false, true]);
    expect(() => spliceSchema({ type: 'string', enum: [1, 2] })).toThrow('Invalid JSON schema: no value of "enum" is of the schema\'s "type" (at #)');
  });

  it('keeps the whitespace options: compact, or any whitespace up to maxRun', async () => {
    const schema = { type: 'object', properties: { n: { type: 'number', minimum: 0 }, d: { type: 'string', format: 'date' } }, required: ['n', 'd'] };
    const texts = ['{"n": 1.5, "d": "2024-01-01"}', '{ "n" :1.5,\n "d":"2024-01-01" }', '{"n":      1, "d": "2024-01-01"}'];
    expect(await acceptsAll(await splicedEbnf(schema), texts)).toEqual([true, false, false]);
    expect(await acceptsAll(await splicedEbnf(schema, { anyWhitespace: true, maxRun: 3 }), texts)).toEqual([true, true, false]);
  });
});
