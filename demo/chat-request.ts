// The Chat view's request body: the system prompt, the conversation, the tools (a JSON field),
// the chat template (a field, for models without one of their own), and the parameter panel's
// values, as POST /v1/chat/completions takes them. Malformed input throws, naming the field,
// before anything is sent.
import type { ChatMessage } from './chat-run.ts';

/**
 * A plain ChatML template: the Chat view starts with it, so that the embedded model (which has no
 * template of its own) can chat. Emptied, the model's own template is used.
 */
export const CHATML_TEMPLATE =
  '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}' +
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

/** What the tools field shows when empty: one function tool, as OpenAI's API takes it. */
export const TOOLS_EXAMPLE = JSON.stringify(
  [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
  null,
  1,
);

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The tools field: empty for none, else a JSON array of function tools; throws a message for the page. */
export function parseTools(text: string): unknown[] | undefined {
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`Tools: not valid JSON (${(error as Error).message}). Expected an array of function tools, e.g. [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}].`);
  }
  if (!Array.isArray(value)) throw new Error('Tools: expected a JSON array of function tools ([{"type": "function", "function": {...}}, ...]).');
  value.forEach((tool, i) => {
    if (!isObject(tool) || tool.type !== 'function' || !isObject(tool.function) || typeof tool.function.name !== 'string') {
      throw new Error(`Tools: item ${i} is not a function tool: expected {"type": "function", "function": {"name": "...", "description": "...", "parameters": {...}}}.`);
    }
  });
  return value;
}

export interface ChatSettings {
  model: string;
  system: string;
  /** The template field; empty: the model's own. */
  template: string;
  tools: string;
  /** The parameter panel's fields (throws on a malformed one). */
  params: () => Record<string, unknown>;
}

/** The request body for `messages` (the system prompt goes first when there is one). */
export function chatBody(settings: ChatSettings, messages: readonly ChatMessage[]): Record<string, unknown> {
  const tools = parseTools(settings.tools);
  const params = settings.params();
  const system: ChatMessage[] = settings.system.trim() === '' ? [] : [{ role: 'system', content: settings.system }];
  return {
    model: settings.model,
    messages: [...system, ...messages],
    ...(tools ? { tools } : {}),
    ...(settings.template.trim() === '' ? {} : { chat_template: settings.template }),
    ...params,
  };
}

/** The tool calls of the last assistant message that no tool message answers yet. */
export function pendingToolCalls(history: readonly ChatMessage[]): { id: string; name: string }[] {
  const last = history.findLastIndex((m) => m.role === 'assistant');
  if (last < 0) return [];
  const answered = new Set(history.slice(last + 1).map((m) => m.tool_call_id));
  return (history[last]!.tool_calls ?? []).filter((call) => !answered.has(call.id)).map((call) => ({ id: call.id, name: call.function.name }));
}
