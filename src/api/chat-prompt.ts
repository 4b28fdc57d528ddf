// From chat messages to prompt tokens: the chat template chosen (the request's, else the model's,
// its `tool_use` variant when tools are offered), rendered as transformers' apply_chat_template
// renders it, and tokenized without adding special tokens again (templates write their own BOS).
// Both /v1/chat/completions and /tokenize go through here, so /tokenize shows exactly what a
// chat request would run.
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
  let text: string;
  try {
    text = await renderChatTemplate(template, {
      messages: input.messages,
      tools: withTools ? input.tools : null,
      addGenerationPrompt: input.addGenerationPrompt,
      continueFinalMessage: input.continueFinalMessage,
      specialTokens: tokenizer.templateVariables ?? {},
      ...(input.templateKwargs ? { variables: input.templateKwargs } : {}),
    });
  } catch (err) {
    if (!(err instanceof ChatTemplateError)) throw err;
    const where = input.chatTemplate !== null ? "the request's chat_template" : "the model's chat template";
    throw invalidRequest(`The messages could not be rendered with ${where}: ${err.message}`, input.chatTemplate !== null ? 'chat_template' : 'messages', 'chat_template_error');
  }
  const tokens = tokenizer.encode(text, input.addSpecialTokens ? {} : { addBos: false });
  return { text, tokens, template };
}

/** The tool-call format of a model's output: the load option's, else the one its template implies. */
export function toolCallFormatFor(generator: TextGenerator, template: string): ToolCallFormat | null {
  return generator.info.toolCallFormat ?? toolCallFormatOf(template);
}
