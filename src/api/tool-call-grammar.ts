// tool_choice 'required' and a named function: the output constrained to tool calls, written in
// the model's own tool-call format (as tool-parsers.ts reads it back), as an XGrammar structural
// tag. Each function is one tag whose begin spells the call up to its arguments (so the name is
// exact) and whose content is the function's `parameters` schema; the calls repeat with the
// format's separator, at least one, and exactly one where only one may come.
// Browser code: nothing here may import Node modules.
import type { StructuredOutput } from '../grammar/structured-output.ts';
import { invalidRequest } from './errors.ts';
import { excerpt } from './excerpt.ts';
import type { ChatTool } from './messages.ts';
import type { ToolCallFormat } from './tool-parsers.ts';

/** What a request forces: calls of any of its tools, or one call of the named one. */
export type ForcedToolChoice = 'required' | { name: string };

export interface ToolCallGrammarRequest {
  format: ToolCallFormat;
  tools: readonly ChatTool[];
  choice: ForcedToolChoice;
  /** parallel_tool_calls: one call or more; false: exactly one. A named function always gets one. */
  parallel: boolean;
  /** The chat template's source: a Mistral template that writes `[ARGS]` gets `name[ARGS]{…}` calls. */
  template: string;
}

/** A structural tag's tag: `begin`, then content in `format`, then `end`. */
interface Tag {
  type: 'tag';
  begin: string;
  content: Record<string, unknown>;
  end: string;
}

/**
 * The structural tag of the calls a request forces. The formats, as their templates write them:
 * - hermes: `<tool_call>\n{"name": "f", "arguments": {…}}\n</tool_call>`, separated by `\n`;
 * - llama3_json: `{"name": "f", "parameters": {…}}`, separated by `; ` (no `<|python_tag|>`:
 *   that is for Llama's built-in tools);
 * - mistral: `[TOOL_CALLS] [{"name": "f", "arguments": {…}}, …]`, or, where the template writes
 *   `[ARGS]` (Mistral's newer tokenizers), `[TOOL_CALLS]f[ARGS]{…}` for each call.
 * The arguments are JSON valid against the function's `parameters` (none: any object). A
 * `parameters` schema that is not of an object is a 400 naming it.
 */
export function toolCallStructure(request: ToolCallGrammarRequest): StructuredOutput {
  const { choice } = request;
  const tools = request.tools.flatMap((tool, index) => (choice === 'required' || tool.function.name === choice.name ? [{ tool, index }] : []));
  const one = choice !== 'required' || !request.parallel;
  const repeat = (tags: Tag[], separator: string) => ({ type: 'tags_with_separator', tags, separator, at_least_one: true, stop_after_first: one });
  const call = (begin: (name: string) => string, end: string) =>
    tools.map(({ tool, index }): Tag => ({ type: 'tag', begin: begin(tool.function.name), content: argumentsFormat(tool, index), end }));
  let format: Record<string, unknown>;
  switch (request.format) {
    case 'hermes':
      format = repeat(call((name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `, '}\n</tool_call>'), '\n');
      break;
    case 'llama3_json':
      format = repeat(call((name) => `{"name": ${JSON.stringify(name)}, "parameters": `, '}'), '; ');
      break;
    case 'mistral':
      format = request.template.includes('[ARGS]')
        ? // XGrammar takes no empty separator: the marker before every call after the first is the separator.
          { type: 'sequence', elements: [{ type: 'const_string', value: '[TOOL_CALLS]' }, repeat(call((name) => `${name}[ARGS]`, ''), '[TOOL_CALLS]')] }
        : // Nor calls repeated in the middle of a sequence: the array is a tag around them.
          { type: 'tag', begin: '[TOOL_CALLS] [', content: repeat(call((name) => `{"name": ${JSON.stringify(name)}, "arguments": `, '}'), ', '), end: ']' };
      break;
  }
  return { type: 'structural_tag', tag: { type: 'structural_tag', format } };
}

/** The JSON schema format of a tool's arguments: its `parameters`, an object schema ({type: 'object'} when missing). */
function argumentsFormat(tool: ChatTool, index: number): Record<string, unknown> {
  const parameters = tool.function.parameters;
  let schema: Record<string, unknown>;
  if (parameters === undefined) schema = { type: 'object' };
  else if (parameters.type === undefined) schema = { ...parameters, type: 'object' };
  else if (parameters.type === 'object') schema = parameters;
  else {
    const param = `tools[${index}].function.parameters`;
    throw invalidRequest(
      `Invalid '${param}': a call's arguments are a JSON object, so with tool_choice 'required' or a named function the parameters must be an object schema (type "object"), but they have type ${excerpt(parameters.type)}.`,
      param,
      'invalid_value',
    );
  }
  return { type: 'json_schema', json_schema: schema };
}
