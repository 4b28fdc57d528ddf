// Structural tags checked before XGrammar, whose parser and analyzer errors reach JS without a
// message: the same rules, with messages.
import { describe, expect, it } from 'vitest';
import { checkStructuralTag } from '../../src/grammar/structural-tag-check.ts';
import { MAX_COST } from '../../src/grammar/limits.ts';
import { StructuredOutputError } from '../../src/grammar/types.ts';

function refusal(tag: Record<string, unknown>): string {
  try {
    checkStructuralTag(tag);
  } catch (error) {
    expect(error).toBeInstanceOf(StructuredOutputError);
    return (error as Error).message;
  }
  return 'accepted';
}

const toolCall = (name: string) => ({
  type: 'tag',
  begin: `<tool_call>{"name": "${name}", "arguments": `,
  content: { type: 'json_schema', json_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  end: '}</tool_call>',
});

describe('checkStructuralTag', () => {
  it('accepts tool calls in the triggered-tags form, with or without the structural_tag wrapper', () => {
    const format = { type: 'triggered_tags', triggers: ['<tool_call>'], tags: [toolCall('weather'), toolCall('time')], at_least_one: false };
    expect(refusal({ type: 'structural_tag', format })).toBe('accepted');
    expect(refusal(format)).toBe('accepted');
    expect(refusal({ format: { type: 'sequence', elements: [{ type: 'const_string', value: 'A: ' }, { type: 'regex', pattern: '[0-9]+' }, { type: 'any_text' }] } })).toBe('accepted');
  });

  it("refuses what XGrammar's parser refuses", () => {
    expect(refusal({ format: { type: 'const_string', value: '' } })).toBe('Invalid structural tag: a const_string format must have a value field with a non-empty string (at #/format/value)');
    expect(refusal({ format: { type: 'tag', begin: 1, content: { type: 'any_text' }, end: 'x' } })).toBe("Invalid structural tag: a tag format's begin must be a string (at #/format/begin)");
    expect(refusal({ format: { type: 'sequence', elements: [] } })).toMatch(/non-empty elements array/);
    expect(refusal({ format: { type: 'mystery' } })).toBe('Invalid structural tag: format type "mystery" is not one XGrammar knows (at #/format/type)');
    expect(refusal({ format: { type: 'any_text', extra: 1 } })).toMatch(/no fields but type/);
    expect(refusal({ type: 'other', format: {} })).toMatch(/type must be "structural_tag"/);
  });

  it("refuses what XGrammar's analyzer refuses", () => {
    expect(refusal({ format: { type: 'sequence', elements: [{ type: 'any_text' }, { type: 'const_string', value: 'x' }] } })).toMatch(/only the last element of a sequence may be unlimited.*element 0/);
    expect(refusal({ format: { type: 'or', elements: [{ type: 'any_text' }, { type: 'const_string', value: 'x' }] } })).toMatch(/all unlimited or all limited/);
    expect(refusal({ format: { type: 'tag', begin: '<a>', content: { type: 'any_text' }, end: '' } })).toMatch(/unlimited must have a non-empty end/);
    expect(refusal({ format: { type: 'triggered_tags', triggers: ['<a', '<b'], tags: [{ ...toolCall('x'), begin: '<c>' }] } })).toMatch(/tag 0 begins with no trigger/);
    expect(refusal({ format: { type: 'triggered_tags', triggers: ['<t', '<to'], tags: [toolCall('x')] } })).toMatch(/more than one trigger/);
  });

  it('checks the schemas, regexes and grammars inside, and adds up their costs', () => {
    expect(refusal({ format: { type: 'json_schema', json_schema: { type: 'object', properties: { a: { not: {} } } } } })).toMatch(/^Unsupported JSON schema: "not"/);
    expect(refusal({ format: { type: 'regex', pattern: '('.repeat(40) + ')'.repeat(40) } })).toMatch(/nests groups more than 32/);
    const cost = checkStructuralTag({ format: { type: 'sequence', elements: [{ type: 'regex', pattern: '[^"]{0,10}' }, { type: 'json_schema', json_schema: { type: 'string', maxLength: 10 } }] } });
    expect(cost).toBe(500 + 45 + 500); // the regex, the schema's own rules, its string length
    const tools = (n: number) => ({ type: 'triggered_tags', triggers: ['<tool_call>'], tags: Array.from({ length: n }, (_, i) => toolCall(`f${i}`)) });
    expect(checkStructuralTag({ format: tools(30) })).toBeLessThan(MAX_COST);
    expect(checkStructuralTag({ format: tools(100) })).toBeGreaterThan(MAX_COST); // 50 took 2.2 s, 100 4.3 s
  });
});
