// The conformance suite (cases.ts) against the Node HTTP server answered by the real stories260K
// model (public/models/stories260K/stories260K.gguf), on the machine's GPU (SwiftShader without
// one). The server runs in a child process (serve-real.ts) so that a GPU driver crash fails
// this file cleanly. The group is skipped, with the reason, while the engine lacks the session
// API (openSession) or the model cannot be loaded here; CONFORMANCE_REAL=require makes that a
// failure instead (for machines where it must run).
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { filesFromPath } from '../../src/node/files.ts';
import { openModel } from '../../src/engine/open-model.ts';
import { CONFORMANCE_CASES } from './cases.ts';
import { Api } from './target.ts';

const MODEL_PATH = 'public/models/stories260K/stories260K.gguf';
/** A short context keeps "until the context is full" quick on a CPU-emulated GPU. */
const CONTEXT_LENGTH = 96;
const START_TIMEOUT_MS = 240_000;
const REQUIRE = process.env.CONFORMANCE_REAL === 'require';

let child: ChildProcess | undefined;
let api: Api | undefined;
let skipReason: string | undefined;

function startChild(): Promise<{ status: string; url?: string; contextLength?: number; reason?: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, ['bin/run-ts.mjs', 'test/conformance/serve-real.ts', MODEL_PATH, String(CONTEXT_LENGTH)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child = proc;
    let stdout = '';
    let stderr = '';
    let settled = false;
    const settle = (value: { status: string; url?: string; contextLength?: number; reason?: string }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(value);
    };
    const timer = setTimeout(() => settle({ status: 'failed', reason: `no answer within ${START_TIMEOUT_MS / 1000} s; stderr: ${stderr.slice(-800)}` }), START_TIMEOUT_MS);
    proc.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split('\n').find((l) => l.startsWith('{'));
      if (line) settle(JSON.parse(line));
    });
    proc.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    proc.on('exit', (code, signal) => {
      settle({
        status: 'failed',
        reason: `the model server exited (${signal ?? `code ${code}`}) before it listened; stderr: ${stderr
          .split('\n')
          .filter((l) => !/XDG_RUNTIME_DIR/.test(l))
          .join('\n')
          .slice(-800)}`,
      });
    });
  });
}

beforeAll(async () => {
  const started = await startChild();
  if (started.status !== 'listening') {
    skipReason =
      started.status === 'no-session'
        ? `the engine does not implement the session API yet (${started.reason})`
        : `the stories260K server could not start: ${started.reason}`;
    if (REQUIRE) throw new Error(skipReason);
    return;
  }
  const { tokenizer } = await openModel(filesFromPath(MODEL_PATH));
  api = new Api({
    fetch: (url, init) => fetch(url, init),
    baseUrl: `${started.url}/v1`,
    profile: {
      model: 'stories260K',
      alias: 'stories',
      contextLength: started.contextLength!,
      tokenizer,
      prompt: 'Once upon a time',
      otherPrompt: 'The little dog',
      // Prefill and decode run different kernels on float32: allow their rounding.
      logprobTolerance: 2e-3,
    },
    capabilities: ['abort', 'openai'],
  });
}, START_TIMEOUT_MS + 30_000);

afterAll(() => {
  child?.stdin?.end();
  setTimeout(() => child?.kill(), 2000).unref();
});

describe('conformance: Node HTTP server, stories260K', () => {
  for (const c of CONFORMANCE_CASES) {
    it(`${c.group}: ${c.name}`, async (ctx) => {
      if (!api) ctx.skip(`real-model group skipped: ${skipReason}`);
      await c.run(api!);
    });
  }
});
