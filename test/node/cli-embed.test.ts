// `webgpu-llama embed` with the embedding fake: texts from the arguments or stdin's lines, one JSON
// line per text, --dimensions and --json, and what is refused before the model loads.
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ApiEngine } from '../../src/api/handler.ts';
import { runCli, type CliIo } from '../../src/node/cli.ts';
import { embeddingEngine, fakeVector } from '../helpers/embedding-fakes.ts';

function io(engine: ApiEngine, stdin?: string) {
  const out: string[] = [];
  const err: string[] = [];
  let loads = 0;
  const cli: CliIo = {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    ...(stdin === undefined ? {} : { stdin: Readable.from([stdin]) }),
    loadModel: async () => {
      loads++;
      return engine;
    },
  };
  return { out, err, io: cli, loads: () => loads };
}

const lines = (out: string[]) => out.join('').trimEnd().split('\n').map((line) => JSON.parse(line) as { index: number; embedding: number[] });

describe('embed', () => {
  it('prints one JSON line per argument, in order', async () => {
    const engine = embeddingEngine();
    const t = io(engine);
    expect(await runCli(['embed', '--model', 'm', 'Hello world', 'The cat'], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    const tokenizer = engine.generator.tokenizer;
    expect(lines(t.out)).toEqual([
      { index: 0, embedding: Array.from(fakeVector(tokenizer.encode('Hello world'), 8, true)) },
      { index: 1, embedding: Array.from(fakeVector(tokenizer.encode('The cat'), 8, true)) },
    ]);
  });

  it("reads stdin's lines when no text is given (blank lines left out), and takes --dimensions and --json", async () => {
    const engine = embeddingEngine({ embedding: { matryoshka: true }, contextLength: 16 });
    const t = io(engine, 'Hello world\r\n\n  \nThe cat sat on the mat. The cat sat on the mat.\n');
    expect(await runCli(['embed', '--model', 'm', '--dimensions', '3', '--json', '{"truncate_prompt_tokens": 4}'], t.io)).toBe(0);
    const printed = lines(t.out);
    expect(printed.map((p) => p.index)).toEqual([0, 1]);
    expect(printed.every((p) => p.embedding.length === 3)).toBe(true);
    expect(engine.generator.embedCalls[0]!.map((ids) => ids.length)).toEqual([3, 4]); // BOS ▁Hello ▁world; the long line cut to its last 4
  });

  it('refuses before the load: no text, other commands\' flags, --json setting input, a bad --dimensions', async () => {
    const cases: [string[], RegExp, string?][] = [
      [['embed', '--model', 'm'], /no text to embed/, ''],
      [['embed', '--model', 'm', 'a', '--temperature', '0'], /--temperature is for 'complete' and 'chat'/],
      [['embed', '--model', 'm', 'a', '--prompt', 'x'], /--prompt is for/],
      [['embed', '--model', 'm', 'a', '--json', '{"input": ["b"]}'], /cannot set 'input'/],
      [['embed', '--model', 'm', 'a', '--json', '{"dimensions": 0}'], /dimensions/],
      [['embed', '--model', 'm', 'a', '--dimensions', 'x'], /--dimensions must be an integer/],
      [['complete', '--model', 'm', '--prompt', 'a', '--dimensions', '3'], /--dimensions is for 'embed'/],
      [['chat', '--model', 'm', 'extra'], /unexpected argument 'extra'/],
    ];
    for (const [argv, message, stdin] of cases) {
      const t = io(embeddingEngine(), stdin);
      expect(await runCli(argv, t.io), argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
      expect(t.loads(), argv.join(' ')).toBe(0);
    }
  });

  it('--pooling and --matryoshka go to the load (LoadOptions.embedding); other commands refuse them', async () => {
    const loaded: unknown[] = [];
    const t = io(embeddingEngine());
    t.io.loadModel = async (_model, options) => {
      loaded.push(options);
      return embeddingEngine();
    };
    expect(await runCli(['embed', '--model', 'm', 'a', '--pooling', 'mean', '--matryoshka'], t.io)).toBe(0);
    expect(loaded).toEqual([expect.objectContaining({ embedding: { pooling: 'mean', matryoshka: true } })]);
    for (const [argv, message] of [
      [['embed', '--model', 'm', 'a', '--pooling', 'max'], /--pooling must be one of last, mean, cls/],
      [['complete', '--model', 'm', '--prompt', 'a', '--matryoshka'], /--matryoshka is for 'serve' and 'embed'/],
    ] as const) {
      const u = io(embeddingEngine());
      expect(await runCli([...argv], u.io)).toBe(1);
      expect(u.err.join('')).toMatch(message);
      expect(u.loads()).toBe(0);
    }
  });

  it("a model that cannot embed, or an input the model refuses: the API's message, exit 1", async () => {
    let t = io(embeddingEngine({ embedding: null }));
    expect(await runCli(['embed', '--model', 'm', 'a'], t.io)).toBe(1);
    expect(t.err.join('')).toMatch(/does not support the Embeddings API/);
    t = io(embeddingEngine({ contextLength: 4 }));
    expect(await runCli(['embed', '--model', 'm', 'a', 'Once upon a time there was'], t.io)).toBe(1);
    expect(t.err.join('')).toMatch(/input 1 is \d+ tokens/);
  });
});
