// From chat messages to prompt tokens: the chat template chosen (the request's, else the model's,
// its `tool_use` variant when tools are offered), rendered as transformers' apply_chat_template
// renders it, and tokenized without adding special tokens again (templates write their own BOS).
// Both /v1/chat/completions and /tokenize go through here, so /tokenize shows exactly what a
// chat request would run. A chat request of a model that thinks may render once more
// (generationPart): the reply's own part of the prompt says where its thinking starts.
// Browser code: nothing here may import Node modules.
import type { TextGenerator } from '../engine/types.ts';
import { ChatTemplateError, pickChatTemplate, renderChatTemplate } from '../tokenizer/chat-template.ts';
import { ApiError, invalidRequest } from './errors.ts';
import type { ChatTool, TemplateMessage } from './messages.ts';
import { toolCallFormatOf, type ToolCallFormat } from './tool-parsers.ts';

export interface ChatPromptInput {
  messages: readonly TemplateMessage[];
  /** The tools the template is given; null: none (also for tool_choice 'none'). */
  tools: readonly ChatTool[] | null;
  /** A template for this request, in place of the model's. */
  chatTemplate: string | null;
  templateKwargs: Readonly<Record<string, unknown>> | null;
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  /** Let the tokenizer add BOS as it does for plain text (vLLM's add_special_tokens). */
  addSpecialTokens: boolean;
}

export interface ChatPrompt {
  text: string;
  tokens: number[];
  /** The template's source (it decides the tool-call format). */
  template: string;
  /** The time the template was given (strftime_now), so that another render of the conversation matches this one. */
  now: Date;
}

/** 400: the model has no chat template and the request gave none. */
export function chatTemplateMissing(modelId: string): ApiError {
  return new ApiError(
    400,
    `The model '${modelId}' has no chat template, so chat messages cannot be turned into a prompt. Give one: load the model with the ` +
      "'chatTemplate' option (CLI: --chat-template FILE), or send 'chat_template' with the request (in extra_body); or use /v1/completions with plain text.",
    { param: 'chat_template', code: 'chat_template_missing' },
  );
}

/** Renders the messages with the chosen template and tokenizes the text; template errors are 400s. */
export async function renderChatPrompt(generator: TextGenerator, input: ChatPromptInput): Promise<ChatPrompt> {
  const { tokenizer } = generator;
  const withTools = input.tools !== null && input.tools.length > 0;
  const template = input.chatTemplate ?? pickChatTemplate(tokenizer.chatTemplates ?? {}, withTools);
  if (template === null) throw chatTemplateMissing(generator.info.id);
  const now = new Date();
  let text: string;
  try {
    text = await render(generator, template, input, input.messages, input.addGenerationPrompt, input.continueFinalMessage, now);
  } catch (err) {
    if (!(err instanceof ChatTemplateError)) throw err;
    const where = input.chatTemplate !== null ? "the request's chat_template" : "the model's chat template";
    throw invalidRequest(`The messages could not be rendered with ${where}: ${err.message}`, input.chatTemplate !== null ? 'chat_template' : 'messages', 'chat_template_error');
  }
  const tokens = tokenizer.encode(text, input.addSpecialTokens ? {} : { addBos: false });
  return { text, tokens, template, now };
}

/**
 * The part of a rendered prompt that belongs to the reply about to be written, which alone decides
 * where the reply starts (reasoning.ts reasoningStart), so that text of the conversation (a user
 * asking about the `<think>` tag, a tool result, an earlier answer) never does:
 * - with continue_final_message, the final message as the template wrote it (it may itself be
 *   thinking): the prompt beyond what the conversation before it renders to;
 * - with add_generation_prompt, the generation prompt: the prompt beyond what the same
 *   conversation renders to without it (a template that writes the same either way has none);
 * - else nothing.
 * One more render, of the same template with the same variables and time, under the same bounds
 * (RENDER_LIMITS) and from the same parsed-template cache. Where that render fails, the part is
 * the final message's text when continuing (the prompt ends with it), else nothing: the real
 * prompt rendered, so the request goes on.
 */
export async function generationPart(generator: TextGenerator, input: ChatPromptInput, prompt: ChatPrompt): Promise<string> {
  const { messages, continueFinalMessage } = input;
  if (!continueFinalMessage && !input.addGenerationPrompt) return '';
  let base: string;
  try {
    base = await render(generator, prompt.template, input, continueFinalMessage ? messages.slice(0, -1) : messages, false, false, prompt.now);
  } catch (err) {
    if (!(err instanceof ChatTemplateError)) throw err;
    const final = messages.at(-1)?.content;
    return continueFinalMessage && typeof final === 'string' ? final : '';
  }
  return prompt.text.slice(commonPrefixLength(prompt.text, base));
}

function render(generator: TextGenerator, template: string, input: ChatPromptInput, messages: readonly TemplateMessage[], addGenerationPrompt: boolean, continueFinalMessage: boolean, now: Date): Promise<string> {
  const withTools = input.tools !== null && input.tools.length > 0;
  return renderChatTemplate(template, {
    messages,
    tools: withTools ? input.tools : null,
    addGenerationPrompt,
    continueFinalMessage,
    specialTokens: generator.tokenizer.templateVariables ?? {},
    ...(input.templateKwargs ? { variables: input.templateKwargs } : {}),
    now,
  });
}

function commonPrefixLength(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** The tool-call format of a model's output: the load option's, else the one its template implies. */
export function toolCallFormatFor(generator: TextGenerator, template: string): ToolCallFormat | null {
  return generator.info.toolCallFormat ?? toolCallFormatOf(template);
}
