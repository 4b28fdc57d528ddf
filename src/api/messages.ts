// Chat messages and tools as OpenAI's API takes them, checked and turned into what a chat template
// reads: content as one string (text parts joined with newlines, as vLLM joins them), 'developer'
// as 'system', and each tool call's `arguments` (a JSON string in the API) parsed into a value,
// since templates write it with `tojson`. Fields this API does not define are passed on to the
// template untouched, so templates that read extra fields still see them. An assistant message's
// thinking, sent back as `reasoning` (vLLM's name) or `reasoning_content` (DeepSeek's, which
// Qwen3's template reads), reaches the template under both names.
// Browser code: nothing here may import Node modules.
import { invalidRequest } from './errors.ts';
import { clipText, excerpt } from './excerpt.ts';
import { isPlainObject, wrongType } from './params.ts';
import { fieldData } from './request-data.ts';

/** A tool call as the template sees it: `arguments` parsed from its JSON string. */
export interface TemplateToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: unknown };
}

/** A message as the template sees it. */
export interface TemplateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  name?: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
  [key: string]: unknown;
}

/** A function tool, checked. */
export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;
/** OpenAI's rule for function names. */
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;

function optionalString(message: Record<string, unknown>, key: string, param: string): string | undefined {
  const value = message[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') wrongType(`${param}.${key}`, 'a string', value);
  return value;
}

/**
 * A message's content as one string: a string as it is, text parts joined with '\n' (and, for
 * an assistant, refusal parts). Parts this text model cannot read are a 400 naming the part.
 */
function contentText(value: unknown, param: string, role: string): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) wrongType(param, 'a string or an array of content parts', value);
  const texts = value.map((part, j) => {
    const where = `${param}[${j}]`;
    if (!isPlainObject(part)) wrongType(where, 'a content part object', part);
    if (part.type === 'text') {
      if (typeof part.text !== 'string') wrongType(`${where}.text`, 'a string', part.text);
      return part.text;
    }
    if (part.type === 'refusal' && role === 'assistant') {
      if (typeof part.refusal !== 'string') wrongType(`${where}.refusal`, 'a string', part.refusal);
      return part.refusal;
    }
    if (typeof part.type === 'string' && ['image_url', 'input_audio', 'file', 'image', 'audio', 'video', 'input_image'].includes(part.type)) {
      throw invalidRequest(
        `Invalid '${where}': content parts of type '${part.type}' are not supported: this model reads text only. Send {"type": "text", "text": "..."} parts.`,
        where,
        'unsupported_content_type',
      );
    }
    throw invalidRequest(`Invalid '${where}.type': expected 'text', but got ${excerpt(part.type)}.`, `${where}.type`, 'invalid_value');
  });
  return texts.join('\n');
}

function parseToolCall(value: unknown, param: string): TemplateToolCall {
  if (!isPlainObject(value)) wrongType(param, 'an object', value);
  const id = value.id;
  if (id === undefined) throw invalidRequest(`Missing required parameter: '${param}.id'.`, `${param}.id`, 'missing_required_parameter');
  if (typeof id !== 'string') wrongType(`${param}.id`, 'a string', id);
  if (value.type !== undefined && value.type !== 'function') {
    throw invalidRequest(`Invalid '${param}.type': only 'function' tool calls are supported.`, `${param}.type`, 'invalid_value');
  }
  const fn = value.function;
  if (!isPlainObject(fn)) wrongType(`${param}.function`, 'an object', fn);
  if (typeof fn.name !== 'string') wrongType(`${param}.function.name`, 'a string', fn.name);
  if (typeof fn.arguments !== 'string') wrongType(`${param}.function.arguments`, 'a JSON string', fn.arguments);
  let args: unknown;
  try {
    args = JSON.parse(fn.arguments);
  } catch (err) {
    throw invalidRequest(
      `Invalid '${param}.function.arguments': it is not valid JSON (${(err as Error).message}). Tool call arguments are a JSON string, e.g. "{\\"city\\": \\"Paris\\"}".`,
      `${param}.function.arguments`,
      'invalid_value',
    );
  }
  // The template writes the arguments with tojson, which recurses: their depth is bounded as the body's is.
  args = fieldData(args, `${param}.function.arguments`);
  return { ...value, id, type: 'function', function: { ...fn, name: fn.name, arguments: args } };
}

function parseMessage(value: unknown, param: string): TemplateMessage {
  if (!isPlainObject(value)) wrongType(param, 'a message object', value);
  const role = value.role;
  if (typeof role !== 'string' || !(ROLES as readonly string[]).includes(role)) {
    if (role === undefined) throw invalidRequest(`Missing required parameter: '${param}.role'.`, `${param}.role`, 'missing_required_parameter');
    throw invalidRequest(
      `Invalid '${param}.role': expected one of ${ROLES.map((r) => `'${r}'`).join(', ')}, but got ${excerpt(role)}.`,
      `${param}.role`,
      'invalid_value',
    );
  }
  const out: TemplateMessage = { ...value, role: role === 'developer' ? 'system' : (role as TemplateMessage['role']), content: null };
  const name = optionalString(value, 'name', param);
  if (name === undefined) delete out.name;
  out.content = contentText(value.content, `${param}.content`, role);

  if (role === 'assistant') {
    const refusal = optionalString(value, 'refusal', param);
    const calls = value.tool_calls;
    if (calls !== undefined && calls !== null) {
      if (!Array.isArray(calls)) wrongType(`${param}.tool_calls`, 'an array', calls);
      out.tool_calls = calls.map((call, j) => parseToolCall(call, `${param}.tool_calls[${j}]`));
    } else {
      delete out.tool_calls;
    }
    // A refusal is what the assistant said, when it said nothing else.
    if (out.content === null && refusal !== undefined) out.content = refusal;
    const named = optionalString(value, 'reasoning', param);
    const reasoning = named ?? optionalString(value, 'reasoning_content', param);
    if (reasoning !== undefined) {
      out.reasoning = reasoning;
      out.reasoning_content = reasoning;
      // A reply that only thought has an empty answer (templates test and split the content).
      out.content ??= '';
    }
    if (out.content === null && !out.tool_calls?.length) {
      throw invalidRequest(`Invalid '${param}': an assistant message needs 'content', 'tool_calls' or 'refusal'.`, `${param}.content`, 'invalid_value');
    }
  } else {
    if (out.content === null) throw invalidRequest(`Missing required parameter: '${param}.content'.`, `${param}.content`, 'missing_required_parameter');
    if (value.tool_calls !== undefined && value.tool_calls !== null) {
      throw invalidRequest(`Invalid '${param}.tool_calls': only assistant messages have tool calls.`, `${param}.tool_calls`, 'invalid_value');
    }
  }
  if (role === 'tool') {
    const id = value.tool_call_id;
    if (typeof id !== 'string') {
      if (id === undefined) throw invalidRequest(`Missing required parameter: '${param}.tool_call_id'.`, `${param}.tool_call_id`, 'missing_required_parameter');
      wrongType(`${param}.tool_call_id`, 'a string', id);
    }
  } else if (value.tool_call_id !== undefined && role !== 'assistant') {
    // Allowed on no other role in OpenAI's API; templates never read it there.
    delete out.tool_call_id;
  }
  return out;
}

/** The `messages` row's parser. */
export function parseMessages(value: unknown, param: string): TemplateMessage[] {
  if (!Array.isArray(value)) wrongType(param, 'an array of messages', value);
  return value.map((m, i) => parseMessage(m, `${param}[${i}]`));
}

/** The `tools` row's parser: function tools with valid, distinct names. */
export function parseTools(value: unknown, param: string): ChatTool[] {
  if (!Array.isArray(value)) wrongType(param, 'an array of tools', value);
  const names = new Set<string>();
  return value.map((tool, i) => {
    const where = `${param}[${i}]`;
    if (!isPlainObject(tool)) wrongType(where, 'a tool object', tool);
    if (tool.type !== 'function') {
      throw invalidRequest(`Invalid '${where}.type': only 'function' tools are supported, but got ${excerpt(tool.type)}.`, `${where}.type`, 'invalid_value');
    }
    const fn = tool.function;
    if (!isPlainObject(fn)) wrongType(`${where}.function`, 'an object', fn);
    if (typeof fn.name !== 'string') {
      if (fn.name === undefined) throw invalidRequest(`Missing required parameter: '${where}.function.name'.`, `${where}.function.name`, 'missing_required_parameter');
      wrongType(`${where}.function.name`, 'a string', fn.name);
    }
    if (!FUNCTION_NAME.test(fn.name)) {
      throw invalidRequest(
        `Invalid '${where}.function.name': '${clipText(fn.name)}' does not match '^[a-zA-Z0-9_-]{1,64}$'.`,
        `${where}.function.name`,
        'invalid_value',
      );
    }
    if (names.has(fn.name)) throw invalidRequest(`Invalid '${param}': the tool name '${fn.name}' is given twice.`, `${where}.function.name`, 'invalid_value');
    names.add(fn.name);
    if (fn.description !== undefined && typeof fn.description !== 'string') wrongType(`${where}.function.description`, 'a string', fn.description);
    if (fn.parameters !== undefined && !isPlainObject(fn.parameters)) wrongType(`${where}.function.parameters`, 'a JSON schema object', fn.parameters);
    if (fn.strict !== undefined && fn.strict !== null && typeof fn.strict !== 'boolean') wrongType(`${where}.function.strict`, 'a boolean', fn.strict);
    return { ...tool, type: 'function', function: { ...fn, name: fn.name } } as ChatTool;
  });
}
