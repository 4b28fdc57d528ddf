// Chat templates: the Jinja a model ships (tokenizer_config.json `chat_template`, GGUF
// `tokenizer.chat_template`) turns a conversation into its prompt text. A model is trained on the
// exact bytes Hugging Face transformers' apply_chat_template renders, so this renders the same:
// Python Jinja2 in transformers' environment (jinja-runtime.ts), with its variables (messages,
// tools, documents as None, add_generation_prompt, the special tokens, chat_template_kwargs) and
// its continue_final_message cut.
//
// What cannot match: JSON numbers arrive as JavaScript numbers, so a request's `1.0` is the integer
// 1 (Python keeps the float 1.0: `{{ x }}` prints 1, tojson writes 1), integers past 2^53 are
// rounded, and an object's integer-like keys ("1", "42") come first in ascending order (JavaScript
// property order; Python keeps the request's order).
import { ChatTemplateError } from './template-error.ts';

export { ChatTemplateError };

type JinjaRuntime = typeof import('./jinja-runtime.ts');
let runtime: Promise<JinjaRuntime> | undefined;

/** The template engine (jinja-runtime.ts, with @huggingface/jinja), loaded on the first render: the base bundle stays without it. */
function loadRuntime(): Promise<JinjaRuntime> {
  runtime ??= import('./jinja-runtime.ts').catch((err: unknown) => {
    runtime = undefined; // a failed chunk load may succeed on a later try
    throw err;
  });
  return runtime;
}

/** Hands the engine over where import() is refused: a service worker's entry imports jinja-runtime.ts statically. */
export function provideJinjaRuntime(module: JinjaRuntime): void {
  runtime = Promise.resolve(module);
}

/** tokenizer_config.json `chat_template` (a string → {default: s}; a list of {name, template} → by name) → templates by name; anything else → {}. */
export function chatTemplatesFrom(value: unknown): Record<string, string> {
  if (typeof value === 'string') return { default: value };
  const out: Record<string, string> = {};
  if (!Array.isArray(value)) return out;
  for (const entry of value) {
    if (entry && typeof entry === 'object' && typeof entry.name === 'string' && typeof entry.template === 'string') {
      out[entry.name] = entry.template;
    }
  }
  return out;
}

/** transformers' choice: with tools and a 'tool_use' template → it; else 'default'; else, when there is exactly one, that one; else null. */
export function pickChatTemplate(templates: Readonly<Record<string, string>>, withTools: boolean): string | null {
  if (withTools && Object.hasOwn(templates, 'tool_use')) return templates.tool_use;
  if (Object.hasOwn(templates, 'default')) return templates.default;
  const names = Object.keys(templates);
  return names.length === 1 ? templates[names[0]] : null;
}

export interface ChatTemplateInput {
  /** Already normalized by the API layer (content strings, tool_calls with arguments as objects, ...). */
  messages: readonly Record<string, unknown>[];
  /** null → the template sees `tools` as none (transformers passes tools=None). */
  tools: readonly unknown[] | null;
  addGenerationPrompt: boolean;
  /**
   * transformers' continue_final_message: the text ends right after the final message's content
   * (no end-of-turn), for the model to continue it. With addGenerationPrompt: ChatTemplateError.
   */
  continueFinalMessage: boolean;
  /** bos_token, eos_token, unk_token, pad_token, ... as variables. */
  specialTokens: Readonly<Record<string, unknown>>;
  /** chat_template_kwargs: extra variables (they override special tokens; messages, tools, documents, add_generation_prompt are refused). */
  variables?: Readonly<Record<string, unknown>>;
  /** The time strftime_now reports, in local time (default: now). */
  now?: Date;
}

const RESERVED = ['messages', 'tools', 'documents', 'add_generation_prompt'];

/** The prompt text of a conversation, as transformers' apply_chat_template(..., tokenize=False) returns it. */
export async function renderChatTemplate(template: string, input: ChatTemplateInput): Promise<string> {
  if (input.continueFinalMessage && input.addGenerationPrompt) {
    throw new ChatTemplateError(
      'continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.',
    );
  }
  for (const name of RESERVED) {
    if (input.variables && Object.hasOwn(input.variables, name)) throw new ChatTemplateError(`chat_template_kwargs cannot set '${name}'`);
  }
  const variables = {
    ...input.specialTokens,
    ...input.variables,
    messages: input.messages,
    tools: input.tools,
    documents: null,
    add_generation_prompt: input.addGenerationPrompt,
  };
  const { renderJinja, pyStrip } = await loadRuntime();
  const rendered = renderJinja(template, variables, input.now ?? new Date());
  return input.continueFinalMessage ? cutAfterFinalMessage(rendered, input.messages, pyStrip) : rendered;
}

/** Throws a ChatTemplateError when `template` does not parse (to refuse a bad template at load). */
export async function checkChatTemplate(template: string): Promise<void> {
  (await loadRuntime()).parseJinja(template);
}

/** transformers' continue_final_message: cut after the final message's text (trimmed if the template trimmed it). */
function cutAfterFinalMessage(rendered: string, messages: readonly Record<string, unknown>[], pyStrip: JinjaRuntime['pyStrip']): string {
  if (messages.length === 0) throw new ChatTemplateError('continue_final_message is set but there is no final message');
  let final = messages[messages.length - 1].content;
  if (Array.isArray(final)) {
    const block = [...final].reverse().find((b) => b && typeof b === 'object' && 'text' in b);
    if (!block) throw new ChatTemplateError('continue_final_message is set but we could not find any text to continue in the final message!');
    final = (block as { text: unknown }).text;
  }
  if (typeof final !== 'string') throw new ChatTemplateError('continue_final_message is set but the final message has no text content');
  const stripped = pyStrip(final);
  if (!rendered.includes(stripped)) {
    throw new ChatTemplateError(
      'continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.',
    );
  }
  const at = rendered.lastIndexOf(stripped);
  const leftStripped = pyStrip(final, null, 'left');
  if (rendered.slice(at, at + leftStripped.length) === final) return rendered.slice(0, at + leftStripped.length);
  return rendered.slice(0, at + stripped.length);
}
