// The CLI (src/node/cli.ts) with the fake generator: output, the --json parameters, what is checked
// before the model loads, a closed stdout, serve's stop, the number flags and --prompt -.
// (test/http.test.ts has the first CLI tests; test/cli-paths.test.ts the model path and Dawn checks.)
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import type { ApiEngine } from '../src/api/handler.ts';
import { isMainScript, runCli, type CliIo } from '../src/node/cli.ts';
import type { RunningServer } from '../src/node/http.ts';
import { fakeEngine } from './helpers/fake-generator.ts';

const PROMPT = 'Once upon a time';

function io(engine?: ApiEngine | Error) {
  const out: string[] = [];
  const err: string[] = [];
  const loads: string[] = [];
  const cli: CliIo = {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    loadModel: async (path) => {
      loads.push(path);
      if (engine instanceof Error) throw engine;
      return engine ?? fakeEngine();
    },
  };
  return { out, err, loads, io: cli };
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
