// Builders of structures the grammar measurement scripts share (grammar-timings.ts,
// grammar-cost-check.ts): JSON-schema outputs, numbered properties, and tool-call structural tags.
import type { JsonWhitespace, StructuredOutput } from '../src/grammar/structured-output.ts';

export const compact = { kind: 'compact' } as const;

/** A JSON-schema output. */
export const schema = (s: unknown, whitespace: JsonWhitespace = compact): StructuredOutput => ({
  type: 'json_schema',
  schema: s as Record<string, unknown>,
  whitespace,
});

/** `n` properties p0..p{n-1}, each `f(i)`. */
export const props = (n: number, f: (i: number) => unknown) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, f(i)]));

/** A tag of `n` hermes-style tool calls, each with five arguments (p0 required). */
export const toolCalls = (n: number): StructuredOutput => ({
  type: 'structural_tag',
  tag: {
    type: 'structural_tag',
    format: {
      type: 'triggered_tags',
      triggers: ['<tool_call>'],
      tags: Array.from({ length: n }, (_, i) => ({
        type: 'tag',
        begin: `<tool_call>{"name": "f${i}", "arguments": `,
        content: { type: 'json_schema', json_schema: { type: 'object', properties: props(5, (j) => ({ type: j % 2 ? 'string' : 'integer' })), required: ['p0'] } },
        end: '}</tool_call>',
      })),
    },
  },
});
