// The CLI's flags: the parseArgs table, plain-decimal numbers, and the request parameters that
// `complete` and `chat` build from the same sampling flags (and --json; `embed` takes --json too).
import { parseArgs } from 'node:util';
import { errorMessage } from '../api/errors.ts';

/** A mistake in the command line: reported with a pointer to --help. */
export class UsageError extends Error {}

export const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  model: { type: 'string', short: 'm', multiple: true },
  id: { type: 'string', multiple: true },
  'weight-storage': { type: 'string' },
  'max-model-len': { type: 'string' },
  'max-num-seqs': { type: 'string' },
  'prefix-cache-mib': { type: 'string' },
  'no-prefix-cache': { type: 'boolean' },
  'chat-template': { type: 'string', multiple: true },
  'tool-call-format': { type: 'string', multiple: true },
  'no-reasoning': { type: 'boolean' },
  pooling: { type: 'string' },
  matryoshka: { type: 'boolean' },
  host: { type: 'string' },
  port: { type: 'string' },
  'allow-origin': { type: 'string', multiple: true },
  'allow-host': { type: 'string', multiple: true },
  'api-key': { type: 'string', multiple: true },
  prompt: { type: 'string', short: 'p' },
  system: { type: 'string' },
  'max-tokens': { type: 'string' },
  temperature: { type: 'string' },
  'top-p': { type: 'string' },
  seed: { type: 'string' },
  stop: { type: 'string', multiple: true },
  'top-k': { type: 'string' },
  'min-p': { type: 'string' },
  'repetition-penalty': { type: 'string' },
  'presence-penalty': { type: 'string' },
  'frequency-penalty': { type: 'string' },
  'logit-bias': { type: 'string', multiple: true },
  'ignore-eos': { type: 'boolean' },
  json: { type: 'string' },
  dimensions: { type: 'string' },
} as const;

export type OptionName = keyof typeof OPTIONS;
export type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; strict: true }>>['values'];

/** The flags that set request parameters, shared by `complete` and `chat`. */
export const SAMPLING_FLAGS = [
  'max-tokens', 'temperature', 'top-p', 'seed', 'stop', 'top-k', 'min-p', 'repetition-penalty',
  'presence-penalty', 'frequency-penalty', 'logit-bias', 'ignore-eos', 'json',
] as const satisfies readonly OptionName[];

/** Parses the command line (without node and script). */
export function parseCommandLine(argv: readonly string[]): { values: Values; positionals: string[] } {
  return parseArgs({ args: joinNegativeNumbers(argv), allowPositionals: true, strict: true, options: OPTIONS });
}

/** Throws unless none of `names` was given: they belong to other commands. */
export function refuseFlags(values: Values, names: readonly OptionName[], command: string, why: (name: OptionName) => string): void {
  for (const name of names) {
    if (values[name] !== undefined) throw new UsageError(`--${name} is ${why(name)}, not '${command}'`);
  }
}

/**
 * parseArgs refuses `--presence-penalty -0.5` (a value that starts with a dash reads as a
 * forgotten one); a negative number after a flag that takes a value is that value.
 */
function joinNegativeNumbers(argv: readonly string[]): string[] {
  const options = OPTIONS as Record<string, { type: string; short?: string }>;
  const takesValue = (arg: string) =>
    Object.entries(options).some(([name, o]) => o.type === 'string' && (arg === `--${name}` || (o.short !== undefined && arg === `-${o.short}`)));
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return [...out, ...argv.slice(i)];
    const next = argv[i + 1];
    if (next !== undefined && /^-\.?\d/.test(next) && takesValue(arg)) {
      out.push(arg.startsWith('--') ? `${arg}=${next}` : arg + next); // -p-1: a short option's inline value
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

// Plain decimals only: Number() also takes '0x1F90', '0b11', ' 8 ' and, for an integer, '1e3'.
const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+(\.\d+)?|\.\d+)(e[+-]?\d+)?$/i;

/** `value` as a number, or undefined when it is not a plain decimal (an integer one if `integer`). */
function parseDecimal(value: string, integer: boolean): number | undefined {
  const n = Number(value);
  if (!(integer ? INTEGER : DECIMAL).test(value) || !Number.isFinite(n) || (integer && !Number.isSafeInteger(n))) return undefined;
  return n;
}

export function numberOption(name: string, value: string | undefined, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = parseDecimal(value, integer);
  if (n === undefined) throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'}, got '${value}'`);
  return n;
}

/** --max-num-seqs N (vLLM's name): sequences that decode at once, a positive integer; undefined when not given. */
export function maxNumSeqsOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = parseDecimal(value, true);
  if (n === undefined || n < 1 || n > 1024) {
    throw new UsageError(`--max-num-seqs must be an integer in 1..1024 (sequences that decode at once), got '${value}'`);
  }
  return n;
}

/** --max-model-len N (vLLM's name): the context length to load, a positive integer; undefined when not given. */
export function maxModelLenOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = parseDecimal(value, true);
  if (n === undefined || n < 1) {
    throw new UsageError(`--max-model-len must be a positive integer (the context length in tokens), got '${value}'`);
  }
  return n;
}

/**
 * The request parameters the sampling flags and --json ask for. `maxTokens` names the parameter
 * --max-tokens sets (chat's is max_completion_tokens); --json's keys win over the flags.
 */
export function samplingParams(values: Values, maxTokens = 'max_tokens'): Record<string, unknown> {
  const request: Record<string, unknown> = {};
  const numeric: [string, OptionName, boolean][] = [
    [maxTokens, 'max-tokens', true],
    ['temperature', 'temperature', false],
    ['top_p', 'top-p', false],
    ['seed', 'seed', true],
    ['top_k', 'top-k', true],
    ['min_p', 'min-p', false],
    ['repetition_penalty', 'repetition-penalty', false],
    ['presence_penalty', 'presence-penalty', false],
    ['frequency_penalty', 'frequency-penalty', false],
  ];
  for (const [param, flag, integer] of numeric) {
    const value = numberOption(flag, values[flag] as string | undefined, integer);
    if (value !== undefined) request[param] = value;
  }
  if (values.stop) request.stop = values.stop;
  if (values['ignore-eos']) request.ignore_eos = true;
  if (values['logit-bias']) {
    const bias: Record<string, number> = {};
    for (const pair of values['logit-bias']) {
      const m = /^(\d+)=(.+)$/.exec(pair);
      const value = m ? parseDecimal(m[2]!, false) : undefined;
      if (!m || value === undefined) throw new UsageError(`--logit-bias takes ID=BIAS (e.g. 13=-100), got '${pair}'`);
      bias[m[1]!] = value;
    }
    request.logit_bias = bias;
  }
  if (values.json !== undefined) {
    let extra: unknown;
    try {
      extra = JSON.parse(values.json);
    } catch (err) {
      throw new UsageError(`--json must be a JSON object: ${errorMessage(err)}`);
    }
    if (typeof extra !== 'object' || extra === null || Array.isArray(extra)) throw new UsageError('--json must be a JSON object');
    Object.assign(request, extra);
  }
  return request;
}

/** A parameter as validation sees it: at the top level, or in `extra_body`. */
export function given(request: Record<string, unknown>, name: string): unknown {
  const extra = request.extra_body;
  return request[name] ?? (typeof extra === 'object' && extra !== null ? (extra as Record<string, unknown>)[name] : undefined);
}

/**
 * A flag given once (it applies to every model) or once per model, as a list of `count` values
 * (undefined where it was not given at all).
 */
export function perModel(name: OptionName, given: readonly string[] | undefined, count: number): (string | undefined)[] {
  if (given === undefined || given.length === 0) return Array.from({ length: count }, () => undefined);
  if (given.length === 1) return Array.from({ length: count }, () => given[0]);
  if (given.length === count) return [...given];
  throw new UsageError(`--${name} is given ${given.length} times for ${count} models: give it once (for every model) or once per --model`);
}
