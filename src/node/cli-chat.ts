// `webgpu-llama chat`: a conversation in the terminal. Each user line sends the whole
// conversation as a streamed POST /v1/chat/completions through the engine's own request handler
// (the path every host uses; no HTTP server), and the reply is printed as its deltas arrive.
import { createInterface, type Interface } from 'node:readline';
import { answerApiRequest, sseData } from '../api/handler.ts';
import type { CliOutput } from './cli-io.ts';
import { given } from './cli-args.ts';
import type { CliEngine } from './cli-load.ts';

export interface ChatIo {
  stdout: CliOutput;
  stderr: { write(text: string): unknown };
  /** The user's lines; on a terminal (process.stdin a TTY, nothing else given) readline edits them. */
  stdin?: AsyncIterable<string | Uint8Array>;
  /** Subscribes to Ctrl-C; returns the unsubscribe (default: SIGINT, and readline's on a terminal). */
  onInterrupt?: (listener: () => void) => () => void;
}

/** A message of the conversation, as the request sends it. */
interface Message {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** How a turn ended. */
type TurnEnd = 'done' | 'interrupted' | 'failed' | 'fatal';

/** An error answer (a status, or an error event in the stream), with its OpenAI error object. */
class ReplyError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null,
  ) {
    super(message);
  }
}

const COMMANDS = '/reset clears the conversation, /exit (or Ctrl-D) ends the chat, Ctrl-C stops a reply';

/**
 * Runs the conversation until /exit or the end of stdin (exit 0), Ctrl-C at the prompt (130), or
 * an error no later turn can escape (1): no chat template, a server error. An error of one turn
 * (the conversation no longer fits the context, say) is printed, and the chat goes on without
 * that turn. `params` are the request's other parameters (sampling, from the flags and --json).
 */
export async function chat(engine: CliEngine, options: { system?: string; params: Record<string, unknown> }, io: ChatIo): Promise<number> {
  const { stdout, stderr } = io;
  const terminal = io.stdin === undefined && process.stdin.isTTY === true;
  const rl = terminal ? createInterface({ input: process.stdin, output: process.stdout, terminal: true, prompt: '> ' }) : null;
  const lines = rl ? rl[Symbol.asyncIterator]() : splitLines(io.stdin ?? process.stdin);
  const onInterrupt = io.onInterrupt ?? defaultInterrupts(rl);

  let outputError: (Error & { code?: string }) | null = null;
  const abortOnOutputError = new Set<() => void>();
  const onOutputError = (err: Error) => {
    outputError ??= err;
    for (const abort of abortOnOutputError) abort();
  };
  stdout.on?.('error', onOutputError);
  const write = (text: string) => {
    if (text && !outputError) stdout.write(text);
  };

  const system: Message[] = options.system ? [{ role: 'system', content: options.system }] : [];
  let messages: Message[] = [...system];
  const id = engine.generator.info.id;
  try {
    const problem = await templateProblem(engine, id, system, options.params);
    if (problem) {
      stderr.write(`webgpu-llama: ${problem}\n`);
      return 1;
    }
    if (terminal) stderr.write(`webgpu-llama: chatting with '${id}' (${COMMANDS})\n`);
    for (;;) {
      rl?.prompt();
      const line = await nextLine(lines, onInterrupt);
      if (line === 'interrupted') {
        write('\n');
        return 130;
      }
      if (line === null) return 0;
      const text = line.trim();
      if (text === '') continue;
      if (text === '/exit') return 0;
      if (text === '/reset') {
        messages = [...system];
        if (terminal) stderr.write('webgpu-llama: the conversation is cleared\n');
        continue;
      }
      if (/^\/[a-z]+$/.test(text)) {
        stderr.write(`webgpu-llama: unknown command ${text} (${COMMANDS})\n`);
        continue;
      }

      messages.push({ role: 'user', content: line });
      const { end, reply } = await turn(engine, JSON.stringify({ ...options.params, model: id, messages, stream: true }), {
        write,
        stderr,
        onInterrupt,
        abortOnOutputError,
      });
      if (end === 'done' || (end === 'interrupted' && reply)) {
        // An interrupted reply stays in the conversation as far as it was shown.
        write('\n');
        messages.push({ role: 'assistant', content: reply });
      } else {
        if (end === 'interrupted') write('\n');
        messages.pop(); // the turn never happened: the next one starts from the same conversation
      }
      if (outputError) break;
      if (end === 'fatal') return 1;
    }
  } finally {
    stdout.off?.('error', onOutputError);
    rl?.close();
    // Not awaited: after Ctrl-C at the prompt, a read of stdin may still be waiting.
    void lines.return?.(undefined)?.catch(() => {});
  }
  if (outputError && (outputError as { code?: string }).code !== 'EPIPE') {
    stderr.write(`webgpu-llama: cannot write the reply: ${(outputError as Error).message}\n`);
    return 1;
  }
  return 0;
}

/**
 * One turn: the request, its reply written as it streams (and returned), and how it ended. An
 * error answer is reported on stderr: 'fatal' when no later turn can do better (a server error,
 * no chat template), else 'failed'.
 */
async function turn(
  engine: CliEngine,
  body: string,
  io: { write(text: string): void; stderr: ChatIo['stderr']; onInterrupt: NonNullable<ChatIo['onInterrupt']>; abortOnOutputError: Set<() => void> },
): Promise<{ end: TurnEnd; reply: string }> {
  const controller = new AbortController();
  const abort = () => controller.abort(new DOMException('The reply was interrupted.', 'AbortError'));
  io.abortOnOutputError.add(abort);
  const stopListening = io.onInterrupt(abort);
  let reply = '';
  try {
    let thinking = false;
    for await (const { content, reasoning } of replyDeltas(engine, body, controller.signal)) {
      // A model's thinking goes to stderr, so that stdout holds the answer alone.
      if (reasoning) io.stderr.write(reasoning);
      thinking ||= reasoning !== undefined;
      if (!content) continue;
      if (thinking) io.stderr.write('\n');
      thinking = false;
      io.write(content);
      reply += content;
    }
    return { end: controller.signal.aborted ? 'interrupted' : 'done', reply };
  } catch (err) {
    if (controller.signal.aborted) return { end: 'interrupted', reply };
    if (!(err instanceof ReplyError)) throw err;
    if (reply) io.write('\n');
    const hint = err.code === 'context_length_exceeded' ? ' (/reset starts a new conversation)' : '';
    io.stderr.write(`webgpu-llama: ${err.message}${hint}\n`);
    return { end: err.status >= 500 || err.code === 'chat_template_missing' ? 'fatal' : 'failed', reply };
  } finally {
    stopListening();
    io.abortOnOutputError.delete(abort);
  }
}

/**
 * Why no turn can work, found before the first one: the model has no chat template, or its
 * template cannot render a conversation of the system prompt and one user message. Asked of
 * POST /tokenize with messages (vLLM's), which renders them as chat completions do; null when
 * the template renders (or the engine has no /tokenize: the first turn tells then).
 */
async function templateProblem(engine: CliEngine, id: string, system: Message[], params: Record<string, unknown>): Promise<string | null> {
  const body = { model: id, messages: [...system, { role: 'user', content: 'Hello' }], add_generation_prompt: true } as Record<string, unknown>;
  for (const name of ['chat_template', 'chat_template_kwargs']) {
    const value = given(params, name);
    if (value !== undefined) body[name] = value;
  }
  const response = await answerApiRequest(engine, { method: 'POST', url: '/tokenize', body: JSON.stringify(body) });
  if (typeof response.body !== 'string' || response.status === 200) return null;
  const error = replyError(response.status, response.body);
  return error.code === 'chat_template_missing' || error.code === 'chat_template_error' ? error.message : null;
}

/** The reply's content and thinking deltas, as they stream in; an error answer or error event throws a ReplyError. */
async function* replyDeltas(engine: CliEngine, body: string, signal: AbortSignal): AsyncGenerator<{ content?: string; reasoning?: string }> {
  const response = await answerApiRequest(engine, { method: 'POST', url: '/v1/chat/completions', body, signal });
  if (typeof response.body === 'string') {
    if (signal.aborted) return;
    throw replyError(response.status, response.body);
  }
  for await (const data of sseData(response.body)) {
    if (data === '[DONE]') return;
    const chunk = JSON.parse(data) as { error?: unknown; choices?: { index: number; delta?: { content?: string | null; reasoning?: string } }[] };
    // An error after the first chunk: the turn's (a server error shows again as the next turn's status).
    if (chunk.error) throw replyError(null, data);
    for (const choice of chunk.choices ?? []) {
      if (choice.index !== 0) continue;
      const { content, reasoning } = choice.delta ?? {};
      if (reasoning) yield { reasoning };
      if (content) yield { content };
    }
    if (signal.aborted) return;
  }
}

function replyError(status: number | null, text: string): ReplyError {
  let error: { message?: unknown; code?: unknown } | undefined;
  try {
    error = (JSON.parse(text) as { error?: typeof error }).error;
  } catch {
    // Not JSON: the status says it.
  }
  const message = typeof error?.message === 'string' ? error.message : `HTTP ${status}: ${text.slice(0, 200)}`;
  return new ReplyError(status ?? 0, message, typeof error?.code === 'string' ? error.code : null);
}

/** The next line, null at the end of input, or 'interrupted' when Ctrl-C comes first. */
async function nextLine(lines: AsyncIterator<string>, onInterrupt: NonNullable<ChatIo['onInterrupt']>): Promise<string | null | 'interrupted'> {
  let stop = () => {};
  const interrupted = new Promise<'interrupted'>((resolve) => (stop = onInterrupt(() => resolve('interrupted'))));
  try {
    const next = await Promise.race([lines.next(), interrupted]);
    if (next === 'interrupted') return next;
    return next.done ? null : next.value;
  } finally {
    stop();
  }
}

/** Lines of a byte or text stream (piped stdin), without their line ends. */
async function* splitLines(input: AsyncIterable<string | Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = '';
  for await (const chunk of input) {
    pending += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = pending.indexOf('\n')) >= 0) {
      yield pending.slice(0, end).replace(/\r$/, '');
      pending = pending.slice(end + 1);
    }
  }
  pending += decoder.decode();
  if (pending) yield pending;
}

/** Ctrl-C: readline's event on a terminal (raw mode sends no signal), SIGINT otherwise. */
function defaultInterrupts(rl: Interface | null): NonNullable<ChatIo['onInterrupt']> {
  return (listener) => {
    const onSignal = () => listener();
    process.on('SIGINT', onSignal);
    rl?.on('SIGINT', onSignal);
    return () => {
      process.off('SIGINT', onSignal);
      rl?.off('SIGINT', onSignal);
    };
  };
}
