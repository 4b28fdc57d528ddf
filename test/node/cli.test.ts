// The CLI (src/node/cli.ts) with the fake generator: output, the --json parameters, what is checked
// before the model loads, a closed stdout, serve's stop, serve with several models, the number
// flags, --prompt -, and what --model names (HF_TOKEN goes to the hub only).
// (test/node/http.test.ts has the first CLI tests; test/node/cli-paths.test.ts the model path and
// Dawn checks; test/node/cli-chat.test.ts chat; test/io/hub.test.ts the CLI against a local hub.)
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import type { ApiEngine } from '../../src/api/handler.ts';
import { isMainScript, parseModelSource, runCli, type CliIo, type CliLoadOptions } from '../../src/node/cli.ts';
import type { RunningServer } from '../../src/node/http.ts';
import { fakeEngine } from '../helpers/fake-generator.ts';

const PROMPT = 'Once upon a time';

function io(engine?: ApiEngine | Error) {
  const out: string[] = [];
  const err: string[] = [];
  const loads: string[] = [];
  const options: CliLoadOptions[] = [];
  const cli: CliIo = {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    loadModel: async (path, loadOptions) => {
      loads.push(path);
      options.push(loadOptions);
      if (engine instanceof Error) throw engine;
      return engine ?? fakeEngine();
    },
  };
  return { out, err, loads, options, io: cli };
}

describe('complete', () => {
  it('stops generating and exits 0, quietly, when stdout is closed (EPIPE: `| head`)', async () => {
    const engine = fakeEngine({ script: ' a b c a b c a b c a b c a b c', contextLength: 256, delayMs: 2 });
    const t = io(engine);
    const stdout = Object.assign(new EventEmitter(), {
      closed: false,
      write(text: string) {
        if (stdout.closed) return false;
        t.out.push(text);
        // As a pipe does: the write fails, and the stream says so a tick later.
        stdout.closed = true;
        process.nextTick(() => stdout.emit('error', Object.assign(new Error('write EPIPE'), { code: 'EPIPE', syscall: 'write' })));
        return true;
      },
    });
    const code = await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '100', '--ignore-eos'], { ...t.io, stdout });
    expect(t.err.join('')).toBe('');
    expect(code).toBe(0);
    expect(t.out).toHaveLength(1);
    expect(engine.generator.endings).toEqual([expect.objectContaining({ how: 'aborted' })]);
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(100);
    expect(stdout.listenerCount('error')).toBe(0);
  });

  it('reports other stdout errors and exits 1', async () => {
    const t = io(fakeEngine({ script: ' a b c a b c', delayMs: 2 }));
    const stdout = Object.assign(new EventEmitter(), {
      write(text: string) {
        t.out.push(text);
        process.nextTick(() => stdout.emit('error', Object.assign(new Error('write ENOSPC'), { code: 'ENOSPC' })));
        return true;
      },
    });
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '10', '--ignore-eos'], { ...t.io, stdout })).toBe(1);
    expect(t.err.join('')).toContain('ENOSPC');
  });

  it('--json can turn stream off: the whole result is printed once done', async () => {
    const t = io(fakeEngine({ script: ' Hello world' }));
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '2', '--json', '{"stream": false, "n": 2}'], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(t.out.join('')).toBe(' Hello world\n--- choice 1\n Hello world\n');
    expect(t.out[0]).toBe(' Hello world\n');
  });

  it('--json best_of > n works: not streamed unless stream is asked for', async () => {
    const engine = fakeEngine({ script: ' Hello world' });
    const t = io(engine);
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '3', '--json', '{"best_of": 3}'], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(t.out.join('')).toMatch(/^ Hello world/);
    expect(engine.generator.sequences).toHaveLength(3);

    const streamed = io();
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--json', '{"best_of": 3, "stream": true}'], streamed.io)).toBe(1);
    expect(streamed.err.join('')).toContain("cannot be used with 'stream'");
    expect(streamed.loads).toEqual([]);
  });

  it('--json stream_options needs no explicit stream (the CLI streams by default)', async () => {
    const t = io();
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '2', '--json', '{"stream_options": {"include_usage": true}}'], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
  });

  it('checks the request before loading the model', async () => {
    const cases: [string[], RegExp][] = [
      [['--temperature', '9'], /temperature/],
      [['--json', '{"top_k": "many"}'], /top_k/],
      [['--json', '{"best_of": 1, "n": 2}'], /best_of/],
      [['--json', '{"bogus": 1}'], /bogus/],
      [['--json', '{"min_tokens": 9}', '--max-tokens', '2'], /min_tokens/],
    ];
    for (const [flags, message] of cases) {
      const t = io();
      const argv = ['complete', '--model', 'big.gguf', '--prompt', PROMPT, ...flags];
      expect(await runCli(argv, t.io), argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
      expect(t.loads, argv.join(' ')).toEqual([]);
    }
  });

  it('names the model path when the load fails', async () => {
    const t = io(new Error('unsupported architecture'));
    expect(await runCli(['complete', '--model', 'models/x.gguf', '--prompt', PROMPT], t.io)).toBe(1);
    expect(t.err.join('')).toContain('failed to load models/x.gguf: unsupported architecture');
  });

  it('--prompt - reads the prompt from stdin (less one trailing newline)', async () => {
    const fromStdin = fakeEngine();
    const piped = io(fromStdin);
    const stdin = Readable.from([Buffer.from('Once upon'), Buffer.from(' a time\n')]);
    expect(await runCli(['complete', '--model', 'm', '--prompt', '-', '--max-tokens', '2', '--temperature', '0'], { ...piped.io, stdin })).toBe(0);
    const fromFlag = fakeEngine();
    const direct = io(fromFlag);
    expect(await runCli(['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '2', '--temperature', '0'], direct.io)).toBe(0);
    expect(fromStdin.generator.sessions[0]!.promptTokens).toEqual(fromFlag.generator.sessions[0]!.promptTokens);
    expect(piped.out.join('')).toBe(direct.out.join(''));
  });
});

describe('number flags', () => {
  it('take plain decimal numbers only', async () => {
    const bad: [string[], RegExp][] = [
      [['serve', '--model', 'x', '--port', '0x1F90'], /--port must be an integer, got '0x1F90'/],
      [['serve', '--model', 'x', '--port', '1e3'], /--port must be an integer/],
      [['serve', '--model', 'x', '--port', ' 80'], /--port must be an integer/],
      [['complete', '--model', 'x', '--prompt', 'y', '--max-tokens', '0b11'], /--max-tokens must be an integer/],
      [['complete', '--model', 'x', '--prompt', 'y', '--seed', '1e3'], /--seed must be an integer/],
      [['complete', '--model', 'x', '--prompt', 'y', '--seed', '99999999999999999999'], /--seed must be an integer/],
      [['complete', '--model', 'x', '--prompt', 'y', '--temperature', '0x1'], /--temperature must be a number/],
      [['complete', '--model', 'x', '--prompt', 'y', '--top-p', 'Infinity'], /--top-p must be a number/],
      [['complete', '--model', 'x', '--prompt', 'y', '--top-p', '1.'], /--top-p must be a number/],
      [['complete', '--model', 'x', '--prompt', 'y', '--min-p', '1_0'], /--min-p must be a number/],
      [['complete', '--model', 'x', '--prompt', 'y', '--logit-bias', '7=0x10'], /--logit-bias takes ID=BIAS/],
    ];
    for (const [argv, message] of bad) {
      const t = io();
      expect(await runCli(argv, t.io), argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
    }
  });

  it('accept signs, leading dots and exponents for the float flags', async () => {
    const engine = fakeEngine({ script: ' a' });
    const t = io(engine);
    const argv = ['complete', '--model', 'm', '--prompt', PROMPT, '--max-tokens', '+2', '--temperature', '.5', '--top-p', '1e-0',
      '--min-p', '1e-3', '--presence-penalty', '-0.5', '--frequency-penalty', '1.25', '--logit-bias', '7=-1.5e1'];
    expect(await runCli(argv, t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(engine.generator.sessions[0]!.sampling).toMatchObject({
      temperature: 0.5,
      topP: 1,
      minP: 0.001,
      presencePenalty: -0.5,
      frequencyPenalty: 1.25,
      logitBias: new Map([[7, -15]]),
    });
  });
});

describe('serve', () => {
  async function serveUntil(reason: unknown) {
    const engine = { ...fakeEngine(), unload: vi.fn(async () => {}) };
    const t = io(engine);
    const controller = new AbortController();
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const done = runCli(['serve', '--model', 'm.gguf', '--port', '0'], { ...t.io, signal: controller.signal, onListening: listening });
    await started;
    await vi.waitFor(() => expect(t.out.join('')).toContain('serving'));
    controller.abort(reason);
    return { code: await done, engine };
  }

  it('exits 130 on SIGINT and 143 on SIGTERM, having unloaded the model', async () => {
    const interrupted = await serveUntil('SIGINT');
    expect(interrupted.code).toBe(130);
    expect(interrupted.engine.unload).toHaveBeenCalledTimes(1);
    const terminated = await serveUntil('SIGTERM');
    expect(terminated.code).toBe(143);
    expect(terminated.engine.unload).toHaveBeenCalledTimes(1);
  });

  it('exits 0 when stopped by its caller (an abort without a signal name)', async () => {
    const stopped = await serveUntil(undefined);
    expect(stopped.code).toBe(0);
    expect(stopped.engine.unload).toHaveBeenCalledTimes(1);
  });
});

describe('serve, several models', () => {
  /**
   * A loader whose engines answer to the id given, else to the name of the file, and write ' cat'
   * (the first loaded) or ' dog'; each can be unloaded.
   */
  function models(fail?: string) {
    const loads: [string, CliLoadOptions][] = [];
    const engines = new Map<string, ReturnType<typeof fakeEngine> & { unload: ReturnType<typeof vi.fn> }>();
    const loadModel = async (model: string, options: CliLoadOptions) => {
      loads.push([model, options]);
      if (model === fail) throw new Error('unsupported architecture');
      const engine = { ...fakeEngine({ id: options.id ?? parseModelSource(model).defaultId, script: [' cat', ' dog'][loads.length - 1] }), unload: vi.fn(async () => {}) };
      engines.set(model, engine);
      return engine;
    };
    return { loads, engines, loadModel };
  }

  async function serveModels(argv: string[], fail?: string) {
    const m = models(fail);
    const t = io();
    const controller = new AbortController();
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const done = runCli(['serve', ...argv, '--port', '0'], { ...t.io, loadModel: m.loadModel, signal: controller.signal, onListening: listening });
    return { ...t, ...m, done, server: await started, stop: (reason?: unknown) => (controller.abort(reason), done) };
  }

  it('answers each model by its id, and lists them all', async () => {
    const s = await serveModels(['--model', 'a.gguf', '--model', 'hf-folder', '--id', 'alpha', '--id', 'beta', '--weight-storage', 'q8_0']);
    expect(s.loads).toEqual([
      ['a.gguf', { id: 'alpha', weightStorage: 'q8_0' }],
      ['hf-folder', { id: 'beta', weightStorage: 'q8_0' }],
    ]);
    await vi.waitFor(() => expect(s.out.join('')).toContain('serving'));
    expect(s.out.join('')).toBe(
      `webgpu-llama: serving 'alpha', 'beta' at ${s.server.url}/v1 ` +
        '(POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings, GET /v1/models, POST /tokenize, POST /detokenize, GET /health)\n',
    );
    const listed = await (await fetch(`${s.server.url}/v1/models`)).json();
    expect(listed.data.map((m: { id: string }) => m.id)).toEqual(['alpha', 'beta']);
    for (const [id, text] of [['alpha', ' cat'], ['beta', ' dog']]) {
      const response = await fetch(`${s.server.url}/v1/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: id, prompt: PROMPT, max_tokens: 2, temperature: 0 }),
      });
      expect(response.status).toBe(200);
      expect((await response.json()).choices[0].text).toBe(text);
    }
    const unknown = await fetch(`${s.server.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'gamma', prompt: PROMPT }) });
    expect(unknown.status).toBe(404);
    expect(await s.stop('SIGINT')).toBe(130);
    for (const engine of s.engines.values()) expect(engine.unload).toHaveBeenCalledTimes(1);
  });

  it('passes --prefix-cache-mib (in bytes) and --no-prefix-cache to every model; refuses both at once and bad sizes', async () => {
    const sized = await serveModels(['--model', 'a.gguf', '--model', 'b.gguf', '--prefix-cache-mib', '1.5']);
    await vi.waitFor(() => expect(sized.out.join('')).toContain('serving'));
    expect(sized.loads).toEqual([
      ['a.gguf', { prefixCacheBytes: 1.5 * 2 ** 20 }],
      ['b.gguf', { prefixCacheBytes: 1.5 * 2 ** 20 }],
    ]);
    expect(await sized.stop()).toBe(0);
    const off = await serveModels(['--model', 'a.gguf', '--no-prefix-cache']);
    await vi.waitFor(() => expect(off.out.join('')).toContain('serving'));
    expect(off.loads).toEqual([['a.gguf', { prefixCache: false }]]);
    expect(await off.stop()).toBe(0);
    for (const [argv, message] of [
      [['--prefix-cache-mib', '-1'], /--prefix-cache-mib must be >= 0, got '-1'/],
      [['--prefix-cache-mib', 'lots'], /--prefix-cache-mib must be a number, got 'lots'/],
      [['--prefix-cache-mib', '8', '--no-prefix-cache'], /--no-prefix-cache and --prefix-cache-mib: give one/],
    ] as const) {
      const t = io();
      expect(await runCli(['chat', '--model', 'a.gguf', ...argv], t.io)).toBe(1);
      expect(t.err.join('')).toMatch(message);
      expect(t.loads).toEqual([]);
    }
  });

  it('loads every model with --max-model-len as its context length, which GET /v1/models shows as max_model_len', async () => {
    const loads: [string, CliLoadOptions][] = [];
    const loadModel = async (model: string, options: CliLoadOptions) => {
      loads.push([model, options]);
      // As the engine's loader: the context asked for, else the model's own.
      return { ...fakeEngine({ id: parseModelSource(model).defaultId, contextLength: options.contextLength ?? 64 }), unload: vi.fn(async () => {}) };
    };
    const t = io();
    const controller = new AbortController();
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const done = runCli(['serve', '--model', 'a.gguf', '--model', 'b', '--max-model-len', '1000', '--port', '0'], {
      ...t.io, loadModel, signal: controller.signal, onListening: listening,
    });
    const server = await started;
    await vi.waitFor(() => expect(t.out.join('')).toContain('serving'));
    expect(loads).toEqual([['a.gguf', { contextLength: 1000 }], ['b', { contextLength: 1000 }]]);
    const listed = await (await fetch(`${server.url}/v1/models`)).json();
    expect(listed.data.map((m: { id: string; max_model_len: number }) => [m.id, m.max_model_len])).toEqual([['a', 1000], ['b', 1000]]);
    controller.abort();
    expect(await done).toBe(0);
  });

  it('takes --max-model-len in complete too (chat: cli-chat.test.ts), and refuses what is not a positive integer before loading', async () => {
    const t = io(fakeEngine({ script: ' Hello', contextLength: 32 }));
    expect(await runCli(['complete', '--model', 'a.gguf', '--prompt', PROMPT, '--max-tokens', '1', '--max-model-len', '32'], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    expect(t.options).toEqual([{ contextLength: 32 }]);
    for (const bad of ['0', '-5', '1.5', '1e3', 'lots', '', '99999999999999999999']) {
      const t = io();
      expect(await runCli(['complete', '--model', 'a.gguf', '--prompt', PROMPT, '--max-model-len', bad], t.io), bad).toBe(1);
      expect(t.err.join('')).toContain(`--max-model-len must be a positive integer (the context length in tokens), got '${bad}'`);
      expect(t.err.join('')).toContain("Run 'webgpu-llama --help' for usage.");
      expect(t.loads).toEqual([]);
    }
  });

  it('loads every model with --max-num-seqs as its sequences at once; refuses it outside serve and what is not an integer in 1..1024', async () => {
    const served = await serveModels(['--model', 'x/a.gguf', '--model', 'y/b', '--max-num-seqs', '4']);
    await vi.waitFor(() => expect(served.out.join('')).toContain("serving 'a', 'b'"));
    expect(served.loads).toEqual([['x/a.gguf', { maxConcurrentSequences: 4 }], ['y/b', { maxConcurrentSequences: 4 }]]);
    await served.stop();
    const t = io();
    expect(await runCli(['complete', '--model', 'a.gguf', '--prompt', PROMPT, '--max-num-seqs', '2'], t.io)).toBe(1);
    expect(t.err.join('')).toContain('--max-num-seqs');
    for (const bad of ['0', '1.5', '2000', 'many']) {
      const b = io();
      expect(await runCli(['serve', '--model', 'a.gguf', '--max-num-seqs', bad], b.io), bad).toBe(1);
      expect(b.err.join('')).toContain(`--max-num-seqs must be an integer in 1..1024 (sequences that decode at once), got '${bad}'`);
      expect(b.loads).toEqual([]);
    }
  });

  it('takes the ids from the file names without --id, and --chat-template once for all or once each', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-cli-'));
    try {
      writeFileSync(join(dir, 'one.jinja'), 'ONE');
      writeFileSync(join(dir, 'two.jinja'), 'TWO');
      const shared = await serveModels(['--model', 'x/a.gguf', '--model', 'y/b', '--chat-template', join(dir, 'one.jinja'), '--tool-call-format', 'hermes']);
      await vi.waitFor(() => expect(shared.out.join('')).toContain("serving 'a', 'b'"));
      expect(shared.loads).toEqual([
        ['x/a.gguf', { chatTemplate: 'ONE', toolCallFormat: 'hermes' }],
        ['y/b', { chatTemplate: 'ONE', toolCallFormat: 'hermes' }],
      ]);
      expect(await shared.stop()).toBe(0);
      const each = await serveModels(['--model', 'a.gguf', '--model', 'b.gguf', '--chat-template', join(dir, 'one.jinja'), '--chat-template', join(dir, 'two.jinja'),
        '--tool-call-format', 'llama3_json', '--tool-call-format', 'mistral']);
      expect(each.loads).toEqual([
        ['a.gguf', { chatTemplate: 'ONE', toolCallFormat: 'llama3_json' }],
        ['b.gguf', { chatTemplate: 'TWO', toolCallFormat: 'mistral' }],
      ]);
      expect(await each.stop()).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses ids that clash, before loading', async () => {
    const cases: [string[], RegExp][] = [
      [['--model', 'x/m.gguf', '--model', 'y/m.gguf'], /two models would answer to 'm' \(--model 1 and 2\): give each its own --id/],
      [['--model', 'a', '--model', 'b', '--id', 'same', '--id', 'same'], /two models would answer to 'same'/],
      [['--model', 'a', '--model', 'b', '--id', 'one'], /--id is given 1 times for 2 models/],
      [['--model', 'a', '--model', 'b', '--chat-template', 'x', '--chat-template', 'y', '--chat-template', 'z'], /--chat-template is given 3 times for 2 models/],
      [['--model', 'a', '--tool-call-format', 'json'], /--tool-call-format must be one of hermes, llama3_json, mistral, got 'json'/],
    ];
    for (const [argv, message] of cases) {
      const m = models();
      const t = io();
      expect(await runCli(['serve', ...argv, '--port', '0'], { ...t.io, loadModel: m.loadModel }), argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
      expect(m.loads, argv.join(' ')).toEqual([]);
    }
  });

  it('exits 1 as soon as one of the models fails to load, unloading the others', async () => {
    const s = await serveModels(['--model', 'good.gguf', '--model', 'bad.gguf'], 'bad.gguf');
    expect(await s.done).toBe(1);
    expect(s.err.join('')).toContain('failed to load bad.gguf: unsupported architecture');
    expect(s.engines.get('good.gguf')!.unload).toHaveBeenCalledTimes(1);

    // One still loading does not hold the exit; it is unloaded when it arrives.
    let arrive!: () => void;
    const slow = { ...fakeEngine({ id: 'slow' }), unload: vi.fn(async () => {}) };
    const t = io();
    const loadModel = async (model: string) => {
      if (model === 'bad.gguf') throw new Error('unsupported architecture');
      await new Promise<void>((r) => (arrive = r));
      return slow;
    };
    expect(await runCli(['serve', '--model', 'slow.gguf', '--model', 'bad.gguf', '--port', '0'], { ...t.io, loadModel, signal: new AbortController().signal })).toBe(1);
    expect(slow.unload).not.toHaveBeenCalled();
    arrive();
    await vi.waitFor(() => expect(slow.unload).toHaveBeenCalledTimes(1));
  });
});

describe('model sources and HF_TOKEN', () => {
  it('--model is a path, a URL, or a Hugging Face repo (hf:, or its page on the hub)', () => {
    expect(parseModelSource('models/x.gguf')).toEqual({ source: 'models/x.gguf', local: true, hub: false, defaultId: 'x' });
    expect(parseModelSource('models/SmolLM2/')).toMatchObject({ local: true, hub: false, defaultId: 'SmolLM2' });
    expect(parseModelSource('hf:org/name')).toEqual({ source: { repo: 'org/name' }, local: false, hub: true, defaultId: 'name' });
    expect(parseModelSource('hf:org/name@v1.0/sub/q4.gguf')).toEqual({
      source: { repo: 'org/name', revision: 'v1.0', file: 'sub/q4.gguf' },
      local: false,
      hub: true,
      defaultId: 'q4',
    });
    expect(parseModelSource('https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct')).toMatchObject({
      source: { repo: 'meta-llama/Llama-3.2-1B-Instruct' },
      hub: true,
      defaultId: 'Llama-3.2-1B-Instruct',
    });
    expect(parseModelSource('https://huggingface.co/org/name/tree/dev/').source).toEqual({ repo: 'org/name', revision: 'dev' });
    const resolveUrl = 'https://huggingface.co/org/name-GGUF/resolve/main/name.Q4_0.gguf';
    expect(parseModelSource(resolveUrl)).toEqual({ source: resolveUrl, local: false, hub: true, defaultId: 'name.Q4_0' });
    expect(parseModelSource('https://example.com/models/m.gguf')).toEqual({ source: 'https://example.com/models/m.gguf', local: false, hub: false, defaultId: 'm' });
    // A mirror: its URLs are the hub's, and hf: repos are read from it.
    const mirror = { HF_ENDPOINT: 'https://mirror.example/hf' };
    expect(parseModelSource('hf:org/name', mirror).source).toEqual({ repo: 'org/name', host: 'https://mirror.example/hf/' });
    expect(parseModelSource('https://mirror.example/hf/org/name', mirror)).toMatchObject({ source: { repo: 'org/name' }, hub: true });
    expect(parseModelSource('https://huggingface.co/org/name', mirror)).toMatchObject({ hub: false });
    expect(() => parseModelSource('hf:name-only')).toThrow(/not a Hugging Face repo/);
  });

  it('gives HF_TOKEN to the loads of models on the hub, and to no other', async () => {
    const cases: [string, boolean][] = [
      ['hf:meta-llama/Llama-3.2-1B-Instruct', true],
      ['https://huggingface.co/org/m-GGUF/resolve/main/m.gguf', true],
      ['models/m.gguf', false],
      ['https://example.com/m.gguf', false],
    ];
    for (const [model, sent] of cases) {
      const t = io(fakeEngine({ script: ' a' }));
      const env = { HF_TOKEN: ' hf_abc123 \n' };
      expect(await runCli(['complete', '--model', model, '--prompt', PROMPT, '--max-tokens', '1'], { ...t.io, env }), model).toBe(0);
      expect(t.loads, model).toEqual([model]);
      expect(t.options[0], model).toEqual(sent ? { accessToken: 'hf_abc123' } : {});
    }
    const unset = io();
    expect(await runCli(['complete', '--model', 'hf:org/name', '--prompt', PROMPT, '--max-tokens', '1'], { ...unset.io, env: { HF_TOKEN: '' } })).toBe(0);
    expect(unset.options).toEqual([{}]);
  });

  it('adds what to do to a 401 from the hub', async () => {
    const t = io(new Error('config.json: HTTP 401 Unauthorized from https://huggingface.co/meta-llama/Llama-3.2-1B/resolve/main/config.json'));
    expect(await runCli(['complete', '--model', 'hf:meta-llama/Llama-3.2-1B', '--prompt', PROMPT], { ...t.io, env: {} })).toBe(1);
    expect(t.err.join('')).toMatch(/HTTP 401 .* \(the repo may be gated or private: set HF_TOKEN to a Hugging Face access token with access to it\)/);
    const withToken = io(new Error('config.json: HTTP 403 Forbidden from https://huggingface.co/x'));
    expect(await runCli(['complete', '--model', 'hf:meta-llama/Llama-3.2-1B', '--prompt', PROMPT], { ...withToken.io, env: { HF_TOKEN: 'hf_secret' } })).toBe(1);
    expect(withToken.err.join('')).toMatch(/check that the HF_TOKEN token has read access/);
    expect(withToken.err.join('')).not.toContain('hf_secret');
  });
});

describe('isMainScript', () => {
  it('matches the module run by node, by any name (dist/cli.js) or link', () => {
    const dir = mkdtempSync(join(tmpdir(), 'webgpu-llama-cli-'));
    try {
      const cli = join(dir, 'cli.js');
      writeFileSync(cli, '');
      symlinkSync(cli, join(dir, 'linked'));
      const url = pathToFileURL(cli).href;
      expect(isMainScript(cli, url)).toBe(true);
      expect(isMainScript(join(dir, 'linked'), url)).toBe(true);
      expect(isMainScript(join(dir, 'other.js'), url)).toBe(false);
      expect(isMainScript(undefined, url)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
