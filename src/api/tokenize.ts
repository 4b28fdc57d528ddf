// vLLM's POST /tokenize and POST /detokenize: count tokens, and see exactly what a chat request
// renders to. /tokenize takes a completions-style `prompt` or chat `messages` (rendered by the same
// code as /v1/chat/completions: chat-prompt.ts); /detokenize turns ids back into text.
// Browser code: nothing here may import Node modules.
import { usableVocabSize, type TextGenerator } from '../engine/types.ts';
import { CHAT_PARAMS, checkTemplateFlags } from './chat-schema.ts';
import { chatPromptInput } from './chat.ts';
import { renderChatPrompt } from './chat-prompt.ts';
import { modelMatches } from './completions.ts';
import { invalidRequest, modelNotFound } from './errors.ts';
import { parseMessages, type TemplateMessage } from './messages.ts';
import { boolean, row, string, tokenIdArray, validateParams } from './params.ts';

const optionalModel = row<string | null>({ ...string(), nullable: true, default: null, doc: 'The model; optional (vLLM).' });

const TOKENIZE_PARAMS = {
  model: optionalModel,
  prompt: row<string | null>({ ...string(), nullable: true, default: null, doc: 'Text to tokenize (or give messages).' }),
  messages: row<TemplateMessage[] | null>({
    type: 'array of messages',
    nullable: true,
    default: null,
    parse: parseMessages,
    doc: 'Chat messages, rendered with the chat template as /v1/chat/completions renders them (or give prompt).',
  }),
  tools: CHAT_PARAMS.tools,
  chat_template: CHAT_PARAMS.chat_template,
  chat_template_kwargs: CHAT_PARAMS.chat_template_kwargs,
  add_generation_prompt: CHAT_PARAMS.add_generation_prompt,
  continue_final_message: CHAT_PARAMS.continue_final_message,
  add_special_tokens: row<boolean | null>({
    ...boolean(),
    nullable: true,
    default: null,
    doc: "Add the tokenizer's BOS: default true for a prompt, false for messages (templates write their own).",
  }),
  return_token_strs: row<boolean>({ ...boolean(), nullable: true, default: false, doc: 'Also return each token as its vocabulary piece.' }),
};

const DETOKENIZE_PARAMS = {
  model: optionalModel,
  tokens: row<number[]>({
    type: 'array of token ids',
    required: true,
    nullable: false,
    default: [],
    parse: (value, param) => tokenIdArray(value, param, param),
    doc: 'The ids to turn into text.',
  }),
};

export interface TokenizeResponse {
  count: number;
  max_model_len: number;
  tokens: number[];
  token_strs: string[] | null;
}

function checkModel(generator: TextGenerator, model: string | null): void {
  if (model !== null && !modelMatches(generator.info, model)) throw modelNotFound(model);
}

/** The vocabulary piece of an id, where the tokenizer can tell it; else its text. */
function tokenString(generator: TextGenerator, id: number): string {
  const tokenizer = generator.tokenizer as TextGenerator['tokenizer'] & { idToToken?(id: number): string | undefined };
  return tokenizer.idToToken?.(id) ?? tokenizer.decode([id]);
}

/** POST /tokenize. */
export async function tokenize(generator: TextGenerator, body: unknown): Promise<TokenizeResponse> {
  const { params, named } = validateParams(TOKENIZE_PARAMS, body);
  checkModel(generator, params.model);
  let tokens: number[];
  if (params.messages !== null) {
    if (params.prompt !== null) throw invalidRequest("Give either 'prompt' or 'messages', not both.", named('prompt'), 'invalid_value');
    checkTemplateFlags(params, named);
    const rendered = await renderChatPrompt(
      generator,
      chatPromptInput({ ...params, messages: params.messages, tool_choice: null, add_special_tokens: params.add_special_tokens ?? false }),
    );
    tokens = rendered.tokens;
  } else if (params.prompt !== null) {
    tokens = generator.tokenizer.encode(params.prompt, params.add_special_tokens === false ? { addBos: false } : {});
  } else {
    throw invalidRequest("Missing required parameter: 'prompt' or 'messages'.", 'prompt', 'missing_required_parameter');
  }
  return {
    count: tokens.length,
    max_model_len: generator.info.contextLength,
    tokens,
    token_strs: params.return_token_strs ? tokens.map((id) => tokenString(generator, id)) : null,
  };
}

/** POST /detokenize. */
export function detokenize(generator: TextGenerator, body: unknown): { prompt: string } {
  const { params } = validateParams(DETOKENIZE_PARAMS, body);
  checkModel(generator, params.model);
  const vocabSize = usableVocabSize(generator);
  params.tokens.forEach((id, i) => {
    if (id >= vocabSize) {
      throw invalidRequest(`Invalid 'tokens': tokens[${i}] (${id}) is outside the model's vocabulary (token ids are 0..${vocabSize - 1}).`, 'tokens', 'invalid_value');
    }
  });
  return { prompt: generator.tokenizer.decode(params.tokens) };
}
