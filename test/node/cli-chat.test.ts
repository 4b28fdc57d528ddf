// `webgpu-llama chat` (src/node/cli-chat.ts): the conversation each turn sends, /reset and /exit,
// Ctrl-C during a reply, and the errors that end the chat or only a turn, first against an engine
// whose handle() answers as the API does (what the CLI does with the answers), then with
// stories260K on the GPU through the real request handler and a ChatML template file written
// here; and `serve` with two real models in one server.
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it, vi } from 'vitest';
import type { ApiHandlerOptions, ApiRequest, ApiResponse } from '../../src/api/handler.ts';
import { runCli, type CliIo } from '../../src/node/cli.ts';
import type { RunningServer } from '../../src/node/http.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { fakeEngine } from '../helpers/fake-generator.ts';

interface Message {
  role: string;
  content: string;
}

interface ChatBody {
  model: string;
  messages: Message[];
  stream: boolean;
  [key: string]: unknown;
}

const sse = (data: unknown) => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const json = (status: number, value: unknown): ApiResponse => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(value) });
const apiError = (status: number, message: string, code: string) => json(status, { error: { message, type: 'invalid_request_error', param: null, code } });

/**
 * An engine whose handle() answers POST /v1/chat/completions with a streamed reply (the words of
 * `reply(body, turn)`, one delta each) and POST /tokenize with a token count; `answer` may answer
 * a request itself (an error). Every request body is kept.
 */
function chatEngine(
  options: {
    reply?: (body: ChatBody, turn: number) => string;
    answer?: (body: ChatBody, url: string) => ApiResponse | undefined;
    /** Thinking sent as `reasoning` deltas before the reply (a model that thinks). */
    thought?: string[];
    /** Called before each delta (a test's hook to interrupt a reply). */
    onDelta?: (turn: number, index: number) => void | Promise<void>;
  } = {},
) {
  const chats: ChatBody[] = [];
  const tokenizes: ChatBody[] = [];
  const aborted: number[] = [];
  const engine = {
    generator: fakeEngine({ id: 'chatty' }).generator,
    chats,
    tokenizes,
    aborted,
    async handle(request: ApiRequest): Promise<ApiResponse> {
      const body = JSON.parse(request.body!) as ChatBody;
      const answered = options.answer?.(body, request.url);
      if (request.url === '/tokenize') {
        tokenizes.push(body);
        return answered ?? json(200, { count: 3, max_model_len: 512, tokens: [1, 2, 3], token_strs: null });
      }
      chats.push(body);
      if (answered) return answered;
      const turn = chats.length;
      const words = (options.reply?.(body, turn) ?? `reply ${turn}`).split(/(?= )/);
      const { signal } = request;
      async function* events(): AsyncGenerator<string> {
        yield sse({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
        for (const piece of options.thought ?? []) {
          yield sse({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { reasoning: piece, reasoning_content: piece }, finish_reason: null }] });
        }
        for (const [i, word] of words.entries()) {
          await options.onDelta?.(turn, i);
          await new Promise((r) => setTimeout(r, 1));
          if (signal?.aborted) {
            aborted.push(turn);
            return;
          }
          yield sse({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: word }, finish_reason: null }] });
        }
        yield sse({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
        yield sse('[DONE]');
      }
      return { status: 200, headers: { 'content-type': 'text/event-stream' }, body: events() };
    },
  };
  return engine;
}

function run(argv: string[], engine: object, lines: string[], extra: Partial<CliIo> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const loads: [string, object][] = [];
  const io: CliIo = {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    stdin: Readable.from(lines.map((line) => Buffer.from(line))),
    env: {},
    loadModel: async (model, options) => {
      loads.push([model, options]);
      return engine as never;
    },
    ...extra,
  };
  return { code: runCli(['chat', ...argv], io), out, err, loads };
}

describe('chat, against an engine that answers as the API does', () => {
  it('sends the whole conversation each turn and prints each reply as it streams', async () => {
    const engine = chatEngine({ reply: (body) => `You said ${body.messages.at(-1)!.content.length} letters.` });
    const t = run(['--model', 'm.gguf', '--system', 'Be brief.', '--temperature', '0', '--max-tokens', '20'], engine, ['Hello\n', 'How are', ' you?\r\n', '\n', 'Bye']);
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(t.out.join('')).toBe('You said 5 letters.\nYou said 12 letters.\nYou said 3 letters.\n');
    // Streamed: a write per delta, not a reply at once.
    expect(t.out.length).toBeGreaterThan(6);
    expect(engine.chats.map((c) => c.messages)).toEqual([
      [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello' },
        { role: 'assistant', content: 'You said 5 letters.' },
        { role: 'user', content: 'How are you?' },
      ],
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello' },
        { role: 'assistant', content: 'You said 5 letters.' },
        { role: 'user', content: 'How are you?' },
        { role: 'assistant', content: 'You said 12 letters.' },
        { role: 'user', content: 'Bye' },
      ],
    ]);
    for (const body of engine.chats) {
      expect(body).toMatchObject({ model: 'chatty', stream: true, temperature: 0, max_completion_tokens: 20 });
    }
    // Before the first turn, the template was tried on the system prompt and a user message.
    expect(engine.tokenizes).toEqual([
      { model: 'chatty', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }], add_generation_prompt: true },
    ]);
  });

  it("writes a model's thinking to stderr and its answer to stdout; --no-reasoning reaches the loader", async () => {
    const engine = chatEngine({ thought: ['Hmm, ', 'a greeting.'], reply: () => 'Hi there.' });
    const t = run(['--model', 'm.gguf', '--no-reasoning'], engine, ['Hello']);
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toBe('Hmm, a greeting.\n');
    expect(t.out.join('')).toBe('Hi there.\n');
    expect(engine.chats[0]!.messages).toEqual([{ role: 'user', content: 'Hello' }]);
    expect(t.loads).toEqual([['m.gguf', { reasoning: false }]]);
  });

  it('/reset clears the conversation but keeps the system prompt; /exit ends the chat', async () => {
    const engine = chatEngine();
    const t = run(['--model', 'm', '--system', 'S'], engine, ['one\ntwo\n/reset\nthree\n/exit\nnever sent\n']);
    expect(await t.code).toBe(0);
    expect(t.out.join('')).toBe('reply 1\nreply 2\nreply 3\n');
    expect(engine.chats.map((c) => c.messages.map((m) => m.content))).toEqual([
      ['S', 'one'],
      ['S', 'one', 'reply 1', 'two'],
      ['S', 'three'],
    ]);
  });

  it('an unknown /command is not sent', async () => {
    const engine = chatEngine();
    const t = run(['--model', 'm'], engine, ['/help\n/etc/hosts is a file\n']);
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toMatch(/^webgpu-llama: unknown command \/help \(\/reset clears the conversation, \/exit/);
    expect(engine.chats.map((c) => c.messages.at(-1)!.content)).toEqual(['/etc/hosts is a file']);
  });

  it('stops, quietly and with 0, when stdout is closed (EPIPE)', async () => {
    const engine = chatEngine({ reply: () => 'a b c d e f g h' });
    const written: string[] = [];
    const stdout = Object.assign(new EventEmitter(), {
      write(text: string) {
        written.push(text);
        process.nextTick(() => stdout.emit('error', Object.assign(new Error('write EPIPE'), { code: 'EPIPE' })));
        return true;
      },
    });
    const t = run(['--model', 'm'], engine, ['hi\n', 'again\n'], { stdout });
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(written).toEqual(['a']);
    expect(engine.aborted).toEqual([1]);
    expect(engine.chats).toHaveLength(1);
    expect(stdout.listenerCount('error')).toBe(0);
  });

  it('without --system the conversation starts with the user', async () => {
    const engine = chatEngine();
    const t = run(['--model', 'm'], engine, ['hi\n']);
    expect(await t.code).toBe(0);
    expect(engine.chats[0]!.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('Ctrl-C stops the reply, not the chat; what was shown stays in the conversation', async () => {
    const listeners = new Set<() => void>();
    const interrupt = () => listeners.forEach((l) => l());
    const engine = chatEngine({
      reply: (_body, turn) => (turn === 1 ? 'a long story that goes on and on' : turn === 2 ? 'never shown' : 'short'),
      onDelta: (turn, i) => {
        if ((turn === 1 && i === 3) || (turn === 2 && i === 0)) interrupt();
      },
    });
    const onInterrupt = (listener: () => void) => (listeners.add(listener), () => listeners.delete(listener));
    const t = run(['--model', 'm'], engine, ['tell me\n', 'again\n', 'last\n'], { onInterrupt });
    expect(await t.code).toBe(0);
    expect(engine.aborted).toEqual([1, 2]);
    expect(t.out.join('')).toBe('a long story\n\nshort\n');
    // The interrupted reply is kept as far as it was shown; a reply with nothing shown drops its turn.
    expect(engine.chats[2]!.messages).toEqual([
      { role: 'user', content: 'tell me' },
      { role: 'assistant', content: 'a long story' },
      { role: 'user', content: 'last' },
    ]);
    expect(listeners.size).toBe(0);
  });

  it('Ctrl-C at the prompt ends the chat with 130', async () => {
    const listeners = new Set<() => void>();
    const onInterrupt = (listener: () => void) => (listeners.add(listener), () => listeners.delete(listener));
    // A stdin that never ends: only Ctrl-C gets out.
    const stdin = new Readable({ read() {} });
    const t = run(['--model', 'm'], chatEngine(), [], { onInterrupt, stdin });
    stdin.push('hi\n');
    await new Promise((r) => setTimeout(r, 50));
    listeners.forEach((l) => l());
    expect(await t.code).toBe(130);
    expect(t.out.join('')).toBe('reply 1\n\n');
    stdin.destroy();
  });

  it('an error of one turn is printed and the turn dropped; the chat goes on', async () => {
    const engine = chatEngine({
      answer: (body, url) =>
        url !== '/tokenize' && body.messages.at(-1)!.content === 'too long'
          ? apiError(400, "This model's maximum context length is 512 tokens.", 'context_length_exceeded')
          : undefined,
    });
    const t = run(['--model', 'm'], engine, ['hi\n', 'too long\n', 'ok\n']);
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toBe("webgpu-llama: This model's maximum context length is 512 tokens. (/reset starts a new conversation)\n");
    expect(t.out.join('')).toBe('reply 1\nreply 3\n');
    expect(engine.chats[2]!.messages.map((m) => m.content)).toEqual(['hi', 'reply 1', 'ok']);
  });

  it('a model without a chat template: one line and exit 1, before any turn', async () => {
    const missing = "The model 'chatty' has no chat template: load it with the 'chatTemplate' option (CLI: --chat-template FILE).";
    const engine = chatEngine({ answer: () => apiError(400, missing, 'chat_template_missing') });
    const t = run(['--model', 'm'], engine, ['hi\n']);
    expect(await t.code).toBe(1);
    expect(t.err.join('')).toBe(`webgpu-llama: ${missing}\n`);
    expect(t.out.join('')).toBe('');
    expect(engine.chats).toEqual([]);
  });

  it('a server error ends the chat with 1', async () => {
    const engine = chatEngine({ answer: (_body, url) => (url === '/tokenize' ? undefined : json(503, { error: { message: 'The GPU device was lost.', type: 'service_unavailable', param: null, code: 'device_lost' } })) });
    const t = run(['--model', 'm'], engine, ['hi\n', 'again\n']);
    expect(await t.code).toBe(1);
    expect(t.err.join('')).toBe('webgpu-llama: The GPU device was lost.\n');
    expect(engine.chats).toHaveLength(1);
  });

  it('checks its flags before loading the model', async () => {
    const cases: [string[], RegExp][] = [
      [['--model', 'm', '--prompt', 'x'], /--prompt is for 'complete'/],
      [['--model', 'm', '--host', 'x'], /--host is for 'serve'/],
      [['--model', 'm', '--tool-call-format', 'hermes'], /--tool-call-format is for 'serve'/],
      [['--model', 'a', '--model', 'b'], /'chat' takes one --model/],
      [['--model', 'm', '--json', '{"messages": []}'], /--json cannot set 'messages'/],
      [['--model', 'm', '--json', '{"stream": false}'], /chat always streams/],
      [['--model', 'm', '--json', '{"n": 2}'], /one reply/],
      [['--model', 'm', '--json', '{"tools": [{"type": "function", "function": {"name": "f"}}]}'], /cannot set 'tools'/],
      [['--model', 'm', '--temperature', 'hot'], /--temperature must be a number/],
      [['--model', 'm', '--temperature', '9'], /temperature/],
      [['--model', 'm', '--json', '{"top_k": "many"}'], /top_k/],
      [['--model', 'm', '--json', '{"response_format": {"type": "xml"}}'], /response_format/],
      [['--model', 'm', '--chat-template', '/no/such/template.jinja'], /cannot read the --chat-template file: .*no\/such/],
      [['--model', 'hf:not a repo'], /not a Hugging Face repo/],
    ];
    for (const [argv, message] of cases) {
      const t = run(argv, chatEngine(), ['hi\n']);
      expect(await t.code, argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
      expect(t.loads, argv.join(' ')).toEqual([]);
    }
  });

  it('passes --max-model-len to the loader as the context length', async () => {
    const t = run(['--model', 'm.gguf', '--max-model-len', '2048'], chatEngine(), ['hi\n']);
    expect(await t.code).toBe(0);
    expect(t.loads).toEqual([['m.gguf', { contextLength: 2048 }]]);
  });

  it('passes the --chat-template file to the loader', async () => {
    const file = join(dir, 'template.jinja');
    writeFileSync(file, CHATML);
    const t = run(['--model', 'm.gguf', '--chat-template', file], chatEngine(), ['hi\n']);
    expect(await t.code).toBe(0);
    expect(t.loads).toEqual([['m.gguf', { chatTemplate: CHATML }]]);
  });
});

/** A ChatML template, as Qwen's and SmolLM's are written. */
const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const STORIES = 'public/models/stories260K/stories260K.gguf';
const TINY_RANDOM = 'test/fixtures/llama-2-tiny-random/llama-2-tiny-random.gguf';
const dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-chat-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('on the GPU: stories260K through the real request handler', () => {
  const template = join(dir, 'chatml.jinja');
  writeFileSync(template, CHATML);

  /** The real loader, with each request body the chat sends kept on the way to the engine's handle(). */
  function recordingLoader(bodies: ChatBody[]): CliIo['loadModel'] {
    return async (model, options) => {
      const engine = await loadModelFromPath(model, options);
      return {
        generator: engine.generator,
        unload: () => engine.unload(),
        handle(request: ApiRequest, handlerOptions?: ApiHandlerOptions) {
          if (request.url.endsWith('/chat/completions')) bodies.push(JSON.parse(request.body!) as ChatBody);
          return engine.handle(request, handlerOptions);
        },
      };
    };
  }

  it('chats over several turns with --chat-template; /reset starts over', async () => {
    const bodies: ChatBody[] = [];
    const argv = ['--model', STORIES, '--chat-template', template, '--system', 'Tell a story.', '--max-tokens', '8', '--temperature', '0'];
    const t = run(argv, {}, ['Once upon a time\nThe cat\n/reset\nOnce upon a time\nmore\n'], { loadModel: recordingLoader(bodies) });
    expect(await t.code).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(bodies).toHaveLength(4);
    const system = { role: 'system', content: 'Tell a story.' };
    const first = bodies[1]!.messages[2]!;
    expect(first.role).toBe('assistant');
    expect(first.content.length).toBeGreaterThan(0);
    expect(bodies[1]!.messages).toEqual([system, { role: 'user', content: 'Once upon a time' }, first, { role: 'user', content: 'The cat' }]);
    // After /reset the same first line gets the same (greedy) reply, and the conversation goes on from it.
    expect(bodies[2]!.messages).toEqual([system, { role: 'user', content: 'Once upon a time' }]);
    expect(bodies[3]!.messages).toEqual([system, { role: 'user', content: 'Once upon a time' }, first, { role: 'user', content: 'more' }]);
    expect(t.out.join('').startsWith(`${first.content}\n`)).toBe(true);
    expect(t.out.join('').split(`${first.content}\n`).length - 1).toBeGreaterThanOrEqual(2);
  });

  it('a model without a chat template: one clear line, exit 1', async () => {
    const t = run(['--model', STORIES], {}, ['hello\n'], { loadModel: undefined });
    expect(await t.code).toBe(1);
    expect(t.err.join('')).toMatch(/^webgpu-llama: The model 'stories260K' has no chat template[^\n]*--chat-template FILE[^\n]*\n$/);
    expect(t.out.join('')).toBe('');
  });

  it('serve: two models in one server, each answered by its id', async () => {
    const out: string[] = [];
    const controller = new AbortController();
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const done = runCli(['serve', '--model', STORIES, '--model', TINY_RANDOM, '--id', 'stories', '--id', 'random', '--chat-template', template, '--port', '0'], {
      stdout: { write: (s: string) => out.push(s) },
      stderr: { write: () => true },
      env: {},
      signal: controller.signal,
      onListening: listening,
    });
    const { url } = await started;
    try {
      const post = async (path: string, body: object) => {
        const response = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        return { status: response.status, json: await response.json() };
      };
      const chat = await post('/v1/chat/completions', { model: 'stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, temperature: 0 });
      expect(chat.status).toBe(200);
      expect(chat.json.model).toBe('stories');
      expect(chat.json.choices[0].message.role).toBe('assistant');
      const completion = await post('/v1/completions', { model: 'random', prompt: 'Once upon a time', max_tokens: 3, temperature: 0 });
      expect(completion.status).toBe(200);
      expect(completion.json.model).toBe('random');
      // Each model's own tokenizer: the vocabularies differ (512 and 32,000 tokens).
      const a = await post('/tokenize', { model: 'stories', prompt: 'Once upon a time' });
      const b = await post('/tokenize', { model: 'random', prompt: 'Once upon a time' });
      expect(a.json.tokens).toEqual([1, 403, 407, 261, 378]);
      expect(b.json.tokens).toEqual([1, 9038, 2501, 263, 931]);
      const models = await (await fetch(`${url}/v1/models`)).json();
      expect(models.data.map((m: { id: string }) => m.id)).toEqual(['stories', 'random']);
      await vi.waitFor(() => expect(out.join('')).toContain(`serving 'stories', 'random' at ${url}/v1 (POST /v1/chat/completions,`));
    } finally {
      controller.abort();
    }
    expect(await done).toBe(0);
  });
});
