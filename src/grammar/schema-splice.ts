// A JSON schema's grammar with rules of ours where XGrammar's are wrong: numbers with bounds
// (number-range.ts), string formats (format-rules.ts), strings with length bounds and patterns
// (pattern-rule.ts). Before XGrammar sees the schema, each such subschema becomes a placeholder,
// `{"const": "<marker>"}`, which XGrammar prints as the literal `"\"<marker>\""`; XGrammar writes
// the grammar of the whole schema (Testings._jsonSchemaToEBNF, with the compile's options), and
// each placeholder's literal is replaced by the name of our rule, whose text is appended. Markers
// and rule names share a prefix that the schema's text does not contain, so no literal XGrammar
// prints from the schema's own strings can be a marker, and no rule it names can clash with ours.
// Browser code: nothing here may import Node modules.
import type { XGrammarApi } from './xgrammar.ts';
import { trieRules } from './choice.ts';
import { formatPlan, formatRules, type FormatRuleName } from './format-rules.ts';
import { numberRangeRules, type NumberBounds } from './number-range.ts';
import { jsonStringPattern, schemaPatternError } from './pattern-rule.ts';
import { BOUNDS, escapePointer, HEADS, isObject, refTarget, SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_VALUED, typesOf, VALIDATION, type Json } from './schema-keywords.ts';
import { StructuredOutputError } from './types.ts';

/** A schema ready for XGrammar, and the rules that replace its placeholders. */
export interface SplicedSchema {
  /** The schema as XGrammar converts it (JSON text), placeholders in place. */
  readonly text: string;
  /** The placeholders' markers; each one is also the name of the rule that replaces it. */
  readonly markers: readonly string[];
  /** The text of every rule of ours. */
  readonly rules: string;
}

/** How XGrammar writes the grammar: as the compile would. */
export interface SchemaGrammarOptions {
  anyWhitespace: boolean;
  /** The longest whitespace run (with anyWhitespace); unbounded when absent. */
  maxRun?: number;
}

/** The bounds int32 and int64 put on a number (int64: Number.isInteger, finite). */
const INTEGER_FORMATS: Readonly<Record<string, NumberBounds>> = {
  int32: { minimum: -(2 ** 31), maximum: 2 ** 31 - 1 },
  int64: { minimum: -(2 ** 63), maximum: 2 ** 63 },
};

/**
 * Rewrites a checked schema (schema-check.ts) for XGrammar: placeholders for bounded numbers,
 * formatted strings with rules of ours and length-bounded strings, aliases of formats renamed.
 * Throws StructuredOutputError for bounds no value meets.
 */
export function spliceSchema(schema: unknown): SplicedSchema {
  const copy = JSON.parse(JSON.stringify(schema)) as unknown;
  const prefix = freePrefix(JSON.stringify(copy));
  const splicer = new Splicer(copy, prefix);
  splicer.visit(copy, '#');
  return { text: JSON.stringify(copy), markers: splicer.markers, rules: splicer.rules.join('\n') };
}

/** `xgs`, `xgs1`, `xgs2`, ...: the first that the schema's text does not contain. */
function freePrefix(text: string): string {
  for (let i = 0; ; i++) {
    const prefix = `xgs${i || ''}`;
    if (!text.includes(prefix)) return `${prefix}_`;
  }
}

class Splicer {
  readonly markers: string[] = [];
  readonly rules: string[] = [];
  private readonly visited = new Set<unknown>();
  private readonly formats = new Map<FormatRuleName, string>();
  /** The format rules written so far (formats share some: date-time uses date). */
  private readonly formatRulesWritten = new Set<string>();

  constructor(
    private readonly root: unknown,
    private readonly prefix: string,
  ) {}

  visit(node: unknown, path: string): void {
    if (!isObject(node) || this.visited.has(node)) return;
    this.visited.add(node);
    if (typeof node.$ref === 'string') {
      const target = refTarget(this.root, node.$ref);
      this.visit(target, node.$ref);
    }
    for (const k of SCHEMA_VALUED) this.visit(node[k], `${path}/${k}`);
    for (const k of SCHEMA_LISTS) if (Array.isArray(node[k])) node[k].forEach((item, i) => this.visit(item, `${path}/${k}/${i}`));
    for (const k of [...SCHEMA_MAPS, '$defs', 'definitions']) {
      const map = node[k];
      if (isObject(map)) for (const [key, value] of Object.entries(map)) this.visit(value, `${path}/${k}/${escapePointer(key)}`);
    }
    if (!HEADS.some((k) => k in node)) this.rewrite(node, path);
    else if (Array.isArray(node.enum) && !('$ref' in node) && !('const' in node)) this.rewriteEnum(node, path);
  }

  /**
   * An enum of strings, numbers, booleans and null (beside an optional type, which XGrammar
   * ignores and validators check) as a trie of their JSON texts (choice.ts): XGrammar's own
   * alternation of literals takes values it does not have (`["bbaa", "aab", "aaa"]` takes
   * "bbab"). Enums with objects or arrays stay XGrammar's (their text depends on the whitespace).
   */
  private rewriteEnum(node: Json, path: string): void {
    const values = node.enum as unknown[];
    if (!values.every((v) => v === null || ['string', 'number', 'boolean'].includes(typeof v))) return;
    const types = typesOf(node);
    const kept = types.length === 0 ? values : values.filter((v) => types.some((t) => ofType(v, t)));
    if (kept.length === 0) throw new StructuredOutputError(`Invalid JSON schema: no value of "enum" is of the schema's "type" (at ${path})`);
    const marker = this.placeholder((name) => trieRules(name, `${name}_`, kept.map((v) => JSON.stringify(v))));
    for (const k of Object.keys(node)) if (VALIDATION.has(k)) delete node[k];
    node.const = marker;
  }

  /** Puts placeholders in place of the node's bounded numbers and formatted, patterned or length-bounded strings. */
  private rewrite(node: Json, path: string): void {
    const format = typeof node.format === 'string' ? node.format : undefined;
    const plan = format === undefined ? undefined : formatPlan(format);
    if (plan?.kind === 'xgrammar' && plan.as !== undefined) node.format = plan.as;
    const types = typesOf(node);
    const placeholders = new Map<unknown, string>();
    for (const type of types) {
      if (type === 'number' || type === 'integer') {
        const integerFormat = format !== undefined && Object.hasOwn(INTEGER_FORMATS, format) ? INTEGER_FORMATS[format] : undefined;
        if (!integerFormat && !BOUNDS.some((k) => k in node)) continue;
        const integer = type === 'integer' || integerFormat !== undefined;
        placeholders.set(type, this.placeholder((name) => numberRules(name, integer, node, integerFormat, path)));
      } else if (type === 'string' && plan?.kind === 'rule') {
        const rule = this.formatRule(plan.rule);
        placeholders.set(type, this.placeholder((name) => `${name} ::= "\\"" ${rule} "\\""`));
      } else if (type === 'string' && typeof node.pattern === 'string') {
        const pattern = node.pattern;
        placeholders.set(type, this.placeholder((name) => patternRule(name, pattern, `${path}/pattern`)));
      } else if (type === 'string' && ('minLength' in node || 'maxLength' in node)) {
        placeholders.set(type, this.placeholder((name) => lengthRule(name, node, path)));
      }
    }
    if (placeholders.size === 0) return;
    const validation = Object.fromEntries(Object.entries(node).filter(([k]) => VALIDATION.has(k)));
    for (const k of Object.keys(validation)) delete node[k];
    const branches = types.map((type) => (placeholders.has(type) ? { const: placeholders.get(type) } : { ...validation, type }));
    if (branches.length === 1) Object.assign(node, branches[0]);
    else node.anyOf = branches;
  }

  /** A new marker, its rules written by `write(name)`. */
  private placeholder(write: (name: string) => string): string {
    const marker = `${this.prefix}${this.markers.length}`;
    this.markers.push(marker);
    this.rules.push(write(marker));
    return marker;
  }

  /** The name of a format's rule, its rules written once per schema. */
  private formatRule(rule: FormatRuleName): string {
    let name = this.formats.get(rule);
    if (name === undefined) {
      const written = formatRules(rule, `${this.prefix}f_`, this.formatRulesWritten);
      if (written.text !== '') this.rules.push(written.text);
      name = written.name;
      this.formats.set(rule, name);
    }
    return name;
  }
}

/** Whether a JSON scalar is of a JSON schema type, as validators check it. */
function ofType(value: unknown, type: unknown): boolean {
  if (type === 'integer') return typeof value === 'number' && Number.isInteger(value);
  if (type === 'null') return value === null;
  return typeof value === type; // string, number, boolean; object and array take no scalar
}

function numberRules(name: string, integer: boolean, node: Json, extra: NumberBounds | undefined, path: string): string {
  const bounds: NumberBounds = {};
  for (const k of BOUNDS) if (typeof node[k] === 'number') bounds[k] = node[k];
  if (extra?.minimum !== undefined) bounds.minimum = Math.max(bounds.minimum ?? -Infinity, extra.minimum);
  if (extra?.maximum !== undefined) bounds.maximum = Math.min(bounds.maximum ?? Infinity, extra.maximum);
  const rules = numberRangeRules(name, integer, bounds);
  if (rules === null) {
    const given = BOUNDS.filter((k) => k in node).map((k) => `${k} ${String(node[k])}`);
    if (extra) given.push(`format ${String(node.format)}`);
    throw new StructuredOutputError(`Invalid JSON schema: no ${integer ? 'integer' : 'number'} satisfies ${given.join(', ')} (at ${path})`);
  }
  return rules;
}

/**
 * A string of minLength to maxLength characters (code points, as validators count them), none of
 * which needs escaping. XGrammar's own rule takes control characters other than CR and LF as they
 * are, which JSON does not allow (a raw tab makes the output unparseable).
 */
function lengthRule(name: string, node: Json, path: string): string {
  const min = typeof node.minLength === 'number' ? node.minLength : 0;
  const max = typeof node.maxLength === 'number' ? node.maxLength : undefined;
  if (max !== undefined && max < min) throw new StructuredOutputError(`Invalid JSON schema: no string satisfies minLength ${min}, maxLength ${max} (at ${path})`);
  const count = max === undefined ? `{${min},}` : `{${min},${max}}`;
  return `${name} ::= "\\"" [^\\0-\\x1f"\\\\]${count} "\\""`;
}

/** A JSON string whose content matches `pattern` (pattern-rule.ts; schema-check.ts has refused what it cannot write). */
function patternRule(name: string, pattern: string, path: string): string {
  try {
    return jsonStringPattern(name, pattern);
  } catch (error) {
    throw schemaPatternError(error, path);
  }
}

/**
 * The grammar XGrammar writes for the spliced schema, each placeholder's literal replaced by its
 * rule and our rules appended. Throws when a literal appears more than once (it would not be ours)
 * or a rule name of ours is taken: both are bugs, not the request's fault.
 */
export async function schemaGrammar(api: XGrammarApi, spliced: SplicedSchema, options: SchemaGrammarOptions): Promise<string> {
  const ebnf = await api.Testings._jsonSchemaToEBNF(spliced.text, options.anyWhitespace, -1, undefined, true, options.maxRun);
  return spliceGrammar(ebnf, spliced);
}

/**
 * `ebnf` (XGrammar's grammar of the spliced schema) with each placeholder's literal replaced by its
 * rule; the spliced schema's rules appended.
 */
export function spliceGrammar(ebnf: string, spliced: SplicedSchema): string {
  if (spliced.markers.length === 0) return ebnf;
  let text = ebnf;
  for (const marker of spliced.markers) {
    if (new RegExp(`^${marker}\\b`, 'm').test(ebnf)) throw new Error(`the grammar already has a rule named ${marker}`);
    // XGrammar prints a const string as its JSON text in a literal: `"\"xgs_0\""`.
    const literal = `"\\"${marker}\\""`;
    const parts = text.split(literal);
    // None: XGrammar did not read that part of the schema (an unused definition, items of a string).
    if (parts.length > 2) throw new Error(`the placeholder ${marker} appears ${parts.length - 1} times in XGrammar's grammar`);
    text = parts.join(marker);
  }
  return [text.trimEnd(), spliced.rules].filter((part) => part !== '').join('\n') + '\n';
}
