// JSON schemas inside structural tags (tag-schemas.ts): each json_schema content compiled as a
// grammar content with the request's whitespace (compact by default, where XGrammar's own would
// take any whitespace) and our number and format rules; several in one tag compose although
// their grammars name the same rules; a qwen_xml_parameter schema that needs our rules is refused.
import { describe, expect, it } from 'vitest';
import { prepareOutput } from '../../src/grammar/prepare.ts';
import { schemaGrammar, type SchemaGrammarOptions } from '../../src/grammar/schema-splice.ts';
import { StructuredOutputError } from '../../src/grammar/structured-output.ts';
import { tagSchemas } from '../../src/grammar/tag-schemas.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';

/** Whether the tag (its schemas compiled as tag-schemas.ts does) accepts each text. */
async function tagAccepts(tag: Record<string, unknown>, options: SchemaGrammarOptions, texts: readonly string[]): Promise<boolean[]> {
  const xg = await loadXGrammar();
  const schemas = tagSchemas(tag);
  const grammars: string[] = [];
  for (const spliced of schemas.spliced) grammars.push((await xg.run((api) => schemaGrammar(api, spliced, options))).value);
  const final = schemas.withGrammars(grammars);
  const { value: grammar } = await xg.run((api) => api.Grammar.fromStructuralTag(JSON.stringify(final)));
  try {
    const results: boolean[] = [];
    for (const text of texts) results.push(await xg.api.Testings.isGrammarAcceptString(grammar, text));
    return results;
  } finally {
    grammar.dispose();
  }
}

const call = (name: string, schema: unknown) => ({ type: 'tag', begin: `<${name}>`, content: { type: 'json_schema', json_schema: schema }, end: `</${name}>` });
const ARGS = { type: 'object', properties: { p: { type: 'number', exclusiveMinimum: 0, maximum: 1 }, d: { type: 'string', format: 'date' } }, required: ['p', 'd'] };
const TAG = {
  type: 'structural_tag',
  format: {
    type: 'tags_with_separator',
    separator: '\n',
    at_least_one: true,
    stop_after_first: false,
    tags: [call('a', ARGS), call('b', { type: 'object', properties: { n: { type: 'integer', minimum: -3, maximum: 3 } }, required: ['n'] })],
  },
};

describe('schemas in structural tags', () => {
  it('become grammar contents, in place', () => {
    const schemas = tagSchemas(TAG);
    expect(schemas.spliced).toHaveLength(2);
    const final = schemas.withGrammars(['root ::= "A"', 'root ::= "B"']) as typeof TAG;
    expect(final.format.tags.map((t) => t.content)).toEqual([
      { type: 'grammar', grammar: 'root ::= "A"' },
      { type: 'grammar', grammar: 'root ::= "B"' },
    ]);
    expect(TAG.format.tags[0]!.content.type).toBe('json_schema'); // the request's tag is left as it was
  });

  it('are compact by default and take any whitespace when asked, with exact numbers and dates, several in one tag', async () => {
    const texts = [
      '<a>{"p": 0.5, "d": "2024-02-29"}</a>\n<b>{"n": -3}</b>',
      '<a>{ "p":0.5, "d":"2024-02-29" }</a>',
      '<a>{"p": 1.5, "d": "2024-02-29"}</a>',
      '<a>{"p": 0.5, "d": "2023-02-29"}</a>',
      '<b>{"n": 4}</b>',
      '<b>{"n": 0}</b>\n<a>{"p": 1, "d": "2023-02-28"}</a>',
    ];
    expect(await tagAccepts(TAG, { anyWhitespace: false }, texts)).toEqual([true, false, false, false, false, true]);
    expect(await tagAccepts(TAG, { anyWhitespace: true, maxRun: 4 }, texts)).toEqual([true, true, false, false, false, true]);
  });

  it('compile through prepareOutput with the whitespace the output asks for, and key the cache by it', () => {
    const compact = prepareOutput({ type: 'structural_tag', tag: TAG });
    const any = prepareOutput({ type: 'structural_tag', tag: TAG, whitespace: { kind: 'any', maxRun: 4 } });
    expect(compact.key).not.toBe(any.key);
    expect(prepareOutput({ type: 'structural_tag', tag: TAG, whitespace: { kind: 'compact' } }).key).toBe(compact.key);
  });

  it('refuses a qwen_xml_parameter schema that needs our rules, and keeps one that does not', () => {
    const xml = (schema: unknown) => ({ type: 'structural_tag', format: { type: 'tag', begin: '<f>', content: { type: 'qwen_xml_parameter', json_schema: schema }, end: '</f>' } });
    expect(() => prepareOutput({ type: 'structural_tag', tag: xml({ type: 'object', properties: { n: { type: 'integer', minimum: 0 } } }) })).toThrow(StructuredOutputError);
    expect(() => prepareOutput({ type: 'structural_tag', tag: xml({ type: 'object', properties: { d: { type: 'string', format: 'date' } } }) })).toThrow(/qwen_xml_parameter/);
    const kept = tagSchemas(xml({ type: 'object', properties: { n: { type: 'integer' }, u: { type: 'string', format: 'iri-reference' } } }));
    expect(kept.spliced).toHaveLength(0);
    expect(JSON.stringify(kept.withGrammars([]))).toContain('"format":"uri-reference"');
  });
});
