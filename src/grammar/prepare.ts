// A StructuredOutput made ready for XGrammar: checked against the limits (limits.ts), its text as
// XGrammar takes it, its cache key, its estimated compile cost, and the compile call itself; and
// what XGrammar reports when the call fails, as a StructuredOutputError with a clean message.
import type { CompiledGrammar, GrammarCompiler } from '@mlc-ai/web-xgrammar';
import { choiceGrammar } from './choice.ts';
import { ebnfShape } from './ebnf-cost.ts';
import { hasLoneSurrogate, MAX_DEPTH, MAX_REGEX_CHARS, MAX_TEXT_BYTES, MAX_WHITESPACE_RUN, utf8Length } from './limits.ts';
import { regexShape } from './regex-cost.ts';
import { checkJsonSchema, type SchemaCost } from './schema-check.ts';
import { schemaGrammar, spliceSchema, type SchemaGrammarOptions } from './schema-splice.ts';
import { checkStructuralTag, structuralTagFormat } from './structural-tag-check.ts';
import { tagSchemas } from './tag-schemas.ts';
import { StructuredOutputError, type JsonWhitespace, type StructuredOutput } from './types.ts';
import type { XGrammarApi, XGrammarCallError } from './xgrammar.ts';
import { nonAsciiClassAt } from './char-classes.ts';
import { RegexError } from './ecma-regex.ts';
import { regexOutputGrammar } from './pattern-rule.ts';

/** What the error messages call each kind of input. */
type Subject = 'JSON schema' | 'regex' | 'grammar' | 'structural tag';

export interface PreparedOutput {
  /** The cache key: equal for outputs that compile alike. */
  readonly key: string;
  readonly subject: Subject;
  /** Estimated compile milliseconds on a vocabulary of up to COST_VOCAB tokens, and its largest part. */
  readonly cost: SchemaCost;
  /** Compiles it (inside XGrammar.run). */
  compile(api: XGrammarApi, compiler: GrammarCompiler): Promise<CompiledGrammar>;
  /** Whether XGrammar's warnings during the compile mean part of the input was ignored (an error). */
  readonly warningsAreErrors: boolean;
}

/** Checks `output` and readies it for XGrammar; throws StructuredOutputError. */
export function prepareOutput(output: StructuredOutput): PreparedOutput {
  if (typeof output !== 'object' || output === null) throw new StructuredOutputError('Invalid structured output: expected an object with a type');
  switch (output.type) {
    case 'json_schema':
      return jsonSchema(output.schema, output.whitespace);
    case 'json_object':
      return jsonSchema({ type: 'object' }, output.whitespace);
    case 'regex':
      return regex(output.pattern);
    case 'choice':
      // choiceGrammar checks the choices; its rules may take more bytes than a request's grammar may.
      return grammarOutput(choiceGrammar(output.choices), ['choice', output.choices]);
    case 'grammar':
      return grammar(output.grammar);
    case 'structural_tag':
      return structuralTag(output.tag, output.whitespace ?? { kind: 'compact' });
    default:
      throw new StructuredOutputError(`Invalid structured output: unknown type ${JSON.stringify((output as { type?: unknown }).type)}`);
  }
}

function jsonSchema(schema: unknown, whitespace: JsonWhitespace): PreparedOutput {
  if (typeof schema !== 'boolean' && (typeof schema !== 'object' || schema === null || Array.isArray(schema))) {
    throw new StructuredOutputError('Invalid JSON schema: a schema must be an object or a boolean');
  }
  const options = whitespaceOptions(whitespace);
  const text = jsonText(schema, 'JSON schema');
  const parsed = JSON.parse(text) as unknown;
  const cost = checkJsonSchema(parsed, { kind: options.anyWhitespace ? 'any' : 'compact', maxRun: options.maxRun });
  const spliced = spliceSchema(parsed);
  return {
    key: JSON.stringify(['json_schema', options.anyWhitespace, options.maxRun ?? null, text]),
    subject: 'JSON schema',
    cost,
    warningsAreErrors: true,
    // XGrammar's grammar of the schema with our rules spliced in (schema-splice.ts), compiled.
    compile: async (api, compiler) => compileEbnf(api, compiler, await schemaGrammar(api, spliced, options)),
  };
}

/** Compiles EBNF text from rule `root`; the Grammar is parsed here and freed after (compileGrammar(text) would keep it forever). */
async function compileEbnf(api: XGrammarApi, compiler: GrammarCompiler, text: string): Promise<CompiledGrammar> {
  const parsed = await api.Grammar.fromEBNF(text, 'root');
  try {
    return await compiler.compileGrammar(parsed);
  } finally {
    parsed.dispose();
  }
}

/**
 * XGrammar's options for JSON output: one line (indent -1) and strict (no properties or items the
 * schema does not name) always; any whitespace or the compact separators.
 */
function whitespaceOptions(whitespace: JsonWhitespace): SchemaGrammarOptions {
  if (whitespace?.kind === 'compact') return { anyWhitespace: false };
  if (whitespace?.kind !== 'any') throw new StructuredOutputError("Invalid JSON whitespace: kind must be 'compact' or 'any'");
  const { maxRun } = whitespace;
  if (maxRun === undefined) return { anyWhitespace: true };
  if (!Number.isInteger(maxRun) || maxRun < 1 || maxRun > MAX_WHITESPACE_RUN) {
    throw new StructuredOutputError(`Invalid JSON whitespace: maxRun must be an integer from 1 to ${MAX_WHITESPACE_RUN}`);
  }
  return { anyWhitespace: true, maxRun };
}

function regex(pattern: unknown): PreparedOutput {
  if (typeof pattern !== 'string' || pattern === '') throw new StructuredOutputError('Invalid regex: the pattern must be a non-empty string');
  if (pattern.length > MAX_REGEX_CHARS) throw new StructuredOutputError(`Invalid regex: ${pattern.length} characters; at most ${MAX_REGEX_CHARS} are supported`);
  if (hasLoneSurrogate(pattern)) throw new StructuredOutputError('Invalid regex: not well-formed Unicode (a lone surrogate)');
  const shape = regexShape(pattern);
  if (shape.depth > MAX_DEPTH) throw new StructuredOutputError(`Invalid regex: groups nested ${shape.depth} deep; at most ${MAX_DEPTH} are supported`);
  // Our grammar of the regex (pattern-rule.ts): XGrammar's own regex reader misreads some.
  const text = regexGrammar(pattern);
  return {
    key: JSON.stringify(['regex', pattern]),
    subject: 'regex',
    cost: { cost: shape.cost, largest: { cost: shape.cost, what: 'its repetitions' } },
    warningsAreErrors: false,
    compile: (api, compiler) => compileEbnf(api, compiler, text),
  };
}

/** The grammar of a regex output; throws `Invalid regex: ...` or `Unsupported regex: ...`. */
function regexGrammar(pattern: string): string {
  try {
    return regexOutputGrammar(pattern);
  } catch (error) {
    if (!(error instanceof RegexError)) throw error;
    throw new StructuredOutputError(`${error.kind === 'invalid' ? 'Invalid' : 'Unsupported'} regex: ${error.message}`);
  }
}

/** A request's EBNF grammar, checked against the limits. */
function grammar(text: unknown): PreparedOutput {
  if (typeof text !== 'string' || text.trim() === '') throw new StructuredOutputError('Invalid grammar: expected a non-empty string');
  const bytes = utf8Length(text);
  if (bytes > MAX_TEXT_BYTES) throw new StructuredOutputError(`Invalid grammar: ${bytes} bytes; at most ${MAX_TEXT_BYTES} are supported`);
  if (hasLoneSurrogate(text)) throw new StructuredOutputError('Invalid grammar: not well-formed Unicode (a lone surrogate)');
  const at = nonAsciiClassAt(text, true);
  if (at >= 0) throw new StructuredOutputError(`Unsupported grammar: the character class at offset ${at} names characters beyond ASCII, which XGrammar does not match exactly`);
  return grammarOutput(text, ['grammar', text]);
}

/** An EBNF grammar from rule `root`, ready for XGrammar. */
function grammarOutput(text: string, key: unknown[]): PreparedOutput {
  const shape = ebnfShape(text);
  if (shape.depth > MAX_DEPTH) throw new StructuredOutputError(`Invalid grammar: groups nested ${shape.depth} deep; at most ${MAX_DEPTH} are supported`);
  return {
    key: JSON.stringify(key),
    subject: 'grammar',
    cost: { cost: shape.cost, largest: { cost: shape.cost, what: 'its repetitions and character classes' } },
    warningsAreErrors: false,
    compile: (api, compiler) => compileEbnf(api, compiler, text),
  };
}

function structuralTag(tag: unknown, whitespace: JsonWhitespace): PreparedOutput {
  if (typeof tag !== 'object' || tag === null || Array.isArray(tag)) throw new StructuredOutputError('Invalid structural tag: expected an object');
  const options = whitespaceOptions(whitespace);
  const text = jsonText(tag, 'structural tag');
  const parsed = JSON.parse(text) as Record<string, unknown>;
  const cost = checkStructuralTag(parsed, { kind: options.anyWhitespace ? 'any' : 'compact', maxRun: options.maxRun });
  const normalized = JSON.stringify({ type: 'structural_tag', format: structuralTagFormat(parsed).format });
  // Each json_schema content becomes a grammar content: XGrammar's own would get free whitespace
  // and its wrong number and format rules (schema-splice.ts).
  const schemas = tagSchemas(JSON.parse(normalized) as Record<string, unknown>);
  return {
    key: JSON.stringify(['structural_tag', options.anyWhitespace, options.maxRun ?? null, normalized]),
    subject: 'structural tag',
    cost: { cost, largest: { cost, what: 'its schemas, regexes and grammars' } },
    warningsAreErrors: true,
    compile: async (api, compiler) => {
      const grammars: string[] = [];
      for (const spliced of schemas.spliced) grammars.push(await schemaGrammar(api, spliced, options));
      return compiler.compileStructuralTag(JSON.stringify(schemas.withGrammars(grammars)));
    },
  };
}

/** `value` as JSON text within MAX_TEXT_BYTES. */
function jsonText(value: unknown, subject: Subject): string {
  let text: string;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new StructuredOutputError(`Invalid ${subject}: not serializable as JSON (${(error as Error).message})`);
  }
  const bytes = utf8Length(text);
  if (bytes > MAX_TEXT_BYTES) throw new StructuredOutputError(`Invalid ${subject}: ${bytes} bytes as JSON; at most ${MAX_TEXT_BYTES} are supported`);
  if (hasLoneSurrogate(text)) throw new StructuredOutputError(`Invalid ${subject}: not well-formed Unicode (a lone surrogate)`);
  return text;
}

/** The refusal of a structure whose estimated compile time (scaled to the vocabulary) is over `limit`. */
export function tooCostly(prepared: PreparedOutput, estimate: number, limit: number): StructuredOutputError {
  const largest = prepared.cost.largest;
  const part = largest ? `; the largest part: ${largest.what} (~${Math.round(largest.cost)} ms)` : '';
  return new StructuredOutputError(
    `${prepared.subject === 'regex' ? 'Invalid regex' : `Invalid ${prepared.subject}`}: too costly to compile, an estimated ` +
      `${Math.round(estimate)} ms where at most ${Math.round(limit)} ms are allowed${part}. Bounded repetitions of wide ` +
      'character sets cost the most (each character of a string with minLength/maxLength ~50 ms)',
  );
}

/** XGrammar's report of a failed compile as the request's error. */
export function compileError(prepared: PreparedOutput, failure: XGrammarCallError): StructuredOutputError {
  // Our own refusal from inside the compile.
  if (failure.cause instanceof StructuredOutputError) return failure.cause;
  const subject = prepared.subject;
  if (failure.trapped) {
    return new StructuredOutputError(`Unsupported ${subject}: the grammar engine failed on it (${failure.message}) and was restarted`);
  }
  let message = failure.fatal.replace(/^Check failed: \(.*?\) is false: ?/s, '').trim();
  if (subject === 'regex') message = message.replace(/^Regex parsing error /, '');
  if (subject === 'grammar') message = message.replace(/^EBNF parser error at /, '').replace(/but got$/, 'but got the end of the grammar');
  if (message === '') message = 'XGrammar rejected it without saying why';
  return new StructuredOutputError(`Invalid ${subject}: ${message}`);
}

/** A compile that printed warnings where those mean part of the input was ignored. */
export function ignoredPartError(prepared: PreparedOutput, warnings: readonly string[]): StructuredOutputError {
  return new StructuredOutputError(`Unsupported ${prepared.subject}: ${warnings.join('; ')}`);
}
