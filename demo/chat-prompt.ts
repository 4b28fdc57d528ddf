// The prompt a chat request renders, asked of the API itself: POST /v1/tokenize with the messages
// (vLLM's chat form: the template, tools and add_generation_prompt as the chat request has them)
// gives the token ids, and POST /v1/detokenize turns them back into text. So what is shown is
// what the model reads, not a copy of the template logic. Both go to /v1/...: the fetch shim
// answers the paths under /v1 (the CLI server also serves them at the root, as vLLM does).
import { ApiRequestError } from './completion-run.ts';

export interface RenderedPrompt {
  prompt: string;
  count: number;
  maxModelLen: number;
}

async function post<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
  const response = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal });
  if (!response.ok) throw new ApiRequestError(response.status, await response.json().catch(() => null));
  return (await response.json()) as T;
}

/** The fields of a chat request that shape its prompt. */
const PROMPT_FIELDS = ['model', 'messages', 'tools', 'chat_template', 'chat_template_kwargs', 'add_generation_prompt', 'continue_final_message', 'add_special_tokens'];

export async function renderPrompt(chatBody: Record<string, unknown>, signal?: AbortSignal): Promise<RenderedPrompt> {
  const tokenize = Object.fromEntries(PROMPT_FIELDS.filter((name) => chatBody[name] !== undefined).map((name) => [name, chatBody[name]]));
  const { count, max_model_len, tokens } = await post<{ count: number; max_model_len: number; tokens: number[] }>('/v1/tokenize', tokenize, signal);
  const { prompt } = await post<{ prompt: string }>('/v1/detokenize', { model: chatBody.model, tokens }, signal);
  return { prompt, count, maxModelLen: max_model_len };
}
