// What a request may constrain its output to, what it compiles to, and the error a structure that
// cannot be compiled raises: the types every module of the grammar layer shares
// (structured-output.ts re-exports them).
import type { TokenConstraint } from '../sampling/types.ts';

/** How JSON output may place whitespace between its tokens. */
export type JsonWhitespace =
  /** One line, `, ` and `: ` between items (Python's json.dumps): no room for runaway whitespace. */
  | { kind: 'compact' }
  /** Any JSON whitespace, at most `maxRun` characters in a row (default: unbounded). */
  | { kind: 'any'; maxRun?: number };

/** A structure a request may ask its output to have. */
export type StructuredOutput =
  /** JSON valid against a JSON schema (an object, or true / false). */
  | { type: 'json_schema'; schema: Record<string, unknown> | boolean; whitespace: JsonWhitespace }
  /** Any JSON object. */
  | { type: 'json_object'; whitespace: JsonWhitespace }
  /** Text matching a regular expression, whole. */
  | { type: 'regex'; pattern: string }
  /** Exactly one of these strings. */
  | { type: 'choice'; choices: readonly string[] }
  /** Text of an EBNF grammar (XGrammar's dialect, which takes llama.cpp's GBNF) from rule `root`. */
  | { type: 'grammar'; grammar: string }
  /**
   * An XGrammar structural tag (the JSON object form): tool calls in a model's own format. Its
   * JSON schemas are written with `whitespace` (default compact).
   */
  | { type: 'structural_tag'; tag: Record<string, unknown>; whitespace?: JsonWhitespace };

/** The request's structure cannot be compiled: its message says why (the API answers 400). */
export class StructuredOutputError extends Error {
  override name = 'StructuredOutputError';
}

/** A structure compiled for one model's vocabulary, cached; each sequence gets its own constraint from it. */
export interface CompiledStructuredOutput {
  /** A fresh constraint for one sequence; `stopTokenIds` end the structure once it is complete. */
  createConstraint(stopTokenIds: readonly number[]): Promise<TokenConstraint>;
}

/**
 * The grammar engine was restarted after a trap (xgrammar.ts) while this sequence's grammar lived
 * in it: the sequence cannot go on, and the same request sent again works.
 */
export class GrammarEngineRestartedError extends Error {
  override name = 'GrammarEngineRestartedError';
  constructor() {
    super('structured output was restarted after the grammar engine failed on another request; retry this request');
  }
}
