// A Node server for the real-model conformance run (node-http-real.test.ts starts it as a child
// process, so that a GPU driver crash cannot take the test runner down with it):
//   node bin/run-ts.mjs test/conformance/serve-real.ts MODEL_PATH CONTEXT_LENGTH
// Prints one JSON line on stdout: {"status": "listening", "url", "contextLength", "id"}, or
// {"status": "no-session", "reason"} when the engine does not implement openSession yet, or
// {"status": "failed", "reason"}. Serves until stdin closes.
import { startServer } from '../../src/node/http.ts';
import { loadModelFromPath } from '../../src/node/index.ts';

function report(value: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}

const [path, contextArg] = process.argv.slice(2);
try {
  if (!path) throw new Error('usage: serve-real.ts MODEL_PATH [CONTEXT_LENGTH]');
  const engine = await loadModelFromPath(path, {
    id: 'stories260K',
    aliases: ['stories'],
    ...(contextArg ? { contextLength: Number(contextArg) } : {}),
  });
  const generator = engine.generator;
  // The session API: present, and able to run one step.
  let reason: string | null = null;
  if (typeof generator.openSession !== 'function') {
    reason = 'the engine has no openSession';
  } else {
    try {
      const session = await generator.openSession({
        promptTokens: generator.tokenizer.encode('Once'),
        sampling: { temperature: 0, topP: 1 },
        logprobs: 2,
      });
      try {
        const step = await session.sequence({ index: 0, maxTokens: 1, stopTokenIds: [] }).next();
        if (step.done || typeof step.value.id !== 'number' || typeof step.value.logprob !== 'number') {
          reason = `openSession answered, but its sequence gave no token with a logprob: ${JSON.stringify(step)}`;
        }
      } finally {
        session.close();
      }
    } catch (err) {
      reason = `openSession failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  }
  if (reason) {
    report({ status: 'no-session', reason });
    process.exit(0);
  }
  const server = await startServer(engine, { port: 0, log: (m) => process.stderr.write(m + '\n') });
  report({ status: 'listening', url: server.url, contextLength: engine.info.contextLength, id: engine.info.id });
  process.stdin.resume();
  process.stdin.on('end', () => {
    void server.close().then(() => process.exit(0));
  });
} catch (err) {
  report({ status: 'failed', reason: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  process.exit(1);
}
