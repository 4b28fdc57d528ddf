// A JSON schema checked before XGrammar compiles it (cpp/json_schema_converter.cc): the shapes of
// the keywords it reads (a wrong one can throw a C++ exception that carries no message), the
// keywords it would ignore without a word (an error here: output that ignores part of a schema is
// not output valid against it), the nesting (limits.ts) and the estimated compile cost.
//
// What XGrammar does with a schema, in the order it looks: `$ref` (local: "#" or "#/..."), else
// `const`, else `enum`, else `anyOf` / `oneOf` (oneOf taken as anyOf), else `allOf` (of one schema),
// else `type` (a name or a list), else the object or array keywords. Keywords a lower step reads
// are ignored beside a higher one, so only annotations may stand beside `$ref`, `anyOf`, `oneOf` and
// `allOf`, and only `type` beside `const` and `enum`.
import { repeatPositions, POSITION_COST } from './char-cost.ts';
import { MAX_DEPTH, MAX_PROPERTIES, MAX_REGEX_CHARS } from './limits.ts';
import { checkRegexSyntax } from './ecma-regex.ts';
import { jsonStringPattern, schemaPatternError } from './pattern-rule.ts';
import { regexShape } from './regex-cost.ts';
import { formatPlan } from './format-rules.ts';
import {
  ARRAY_INFERRED_FROM,
  BOUNDS,
  escapePointer,
  isObject,
  OBJECT_INFERRED_FROM,
  refTarget,
  SCHEMA_LISTS,
  SCHEMA_MAPS,
  SCHEMA_VALUED,
  VALIDATION,
  type Json,
} from './schema-keywords.ts';
import { StructuredOutputError } from './types.ts';

/** What a checked schema is estimated to cost, and the largest part of it (for the message). */
export interface SchemaCost {
  cost: number;
  largest?: { cost: number; what: string };
}


/**
 * Keywords XGrammar does not enforce. patternProperties and propertyNames: beside them it drops
 * the object's properties, required and additionalProperties, and writes key patterns as given
 * (a raw quote in a key).
 */
const UNSUPPORTED = [
  'not',
  'patternProperties',
  'propertyNames',
  'if',
  'then',
  'else',
  'dependentRequired',
  'dependentSchemas',
  'dependencies',
  'multipleOf',
  'uniqueItems',
  'contains',
  'minContains',
  'maxContains',
  '$dynamicRef',
  '$recursiveRef',
];

/** Keywords of one type (objects: those that do not make XGrammar infer the type). */
const TYPED_KEYWORDS = [
  ...BOUNDS, 'minLength', 'maxLength', 'pattern', 'format', 'required', 'minProperties', 'maxProperties', 'patternProperties', 'propertyNames', 'minItems', 'maxItems',
];
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null', 'array', 'object']);
const COUNTS = ['minItems', 'maxItems', 'minLength', 'maxLength', 'minProperties', 'maxProperties'];
/**
 * What a `format` is estimated to cost: up to ~50 ms measured, uri-reference and uri-template up to
 * ~110, hostname (labels of up to 41 characters: a bounded repetition) ~200.
 */
const FORMAT_COST = 80;
const COSTLIER_FORMATS: Readonly<Record<string, number>> = { 'uri-reference': 120, 'iri-reference': 120, 'uri-template': 120, hostname: 250, 'idn-hostname': 250 };
/**
 * A number with bounds (number-range.ts): a few ms, and each digit of its longest bound's integer
 * part adds rules (its digit chains: ±1e308 took 0.05-0.25 s on the vocabularies of
 * scripts/grammar-cost-check.ts, the most relative to its size on llama-2's 32,000 tokens).
 */
const NUMBER_RANGE_COST = { base: 5, digit: 1.5 };
/**
 * Optional properties: XGrammar's rules for k of them cost ~0.5 ms each and grow with k², by
 * ~0.001 ms per k² with compact separators (128: 78 ms, 512: 0.5 s; ten objects of 150: 1 s) and
 * ~0.025 with any whitespace (128: 0.34 s, 256: 1.4-1.8 s).
 */
const OPTIONAL_COST = { each: 0.5, squared: { compact: 0.001, any: 0.025 } } as const;
/**
 * With JSON whitespace runs bounded (maxRun), each separator of an object (one per property and two
 * more) or an array (three) unzips maxRun positions, ~4 ms each (measured 2.7-4.9 ms: 16 required
 * properties with maxRun 32 take 1.9 s, 64 take 9.2 s).
 */
const BOUNDED_WHITESPACE_COST = 4;

/** How the output places whitespace, as the cost of a schema depends on it. */
export interface SchemaWhitespace {
  kind: 'compact' | 'any';
  maxRun?: number;
}

/**
 * Checks `schema` (a JSON value) and estimates its cost with that whitespace; throws
 * StructuredOutputError naming the place. `depth`: the nesting level the schema starts at (inside
 * a structural tag, deeper than 1).
 */
export function checkJsonSchema(schema: unknown, whitespace: SchemaWhitespace, depth = 1): SchemaCost {
  if (schema === false) throw invalid('false accepts no value', '#');
  const checker = new SchemaChecker(schema, whitespace);
  checker.schema(schema, '#', depth);
  return { cost: checker.cost, largest: checker.largest };
}

class SchemaChecker {
  cost = 0;
  largest: SchemaCost['largest'];
  /** Costed parts already counted: XGrammar builds one rule for equal ones. */
  private readonly counted = new Set<string>();
  /** The deepest level each $ref target was checked at: a shallower visit adds nothing. */
  private readonly checkedAt = new Map<unknown, number>();
  private readonly following = new Set<unknown>();

  constructor(
    private readonly root: unknown,
    private readonly whitespace: SchemaWhitespace,
  ) {}

  schema(node: unknown, path: string, depth: number): void {
    if (depth > MAX_DEPTH) throw tooDeep(path);
    if (typeof node === 'boolean') return;
    if (!isObject(node)) throw invalid('a schema must be an object or a boolean', path);
    this.unsupportedPatterns(node, path);
    for (const keyword of UNSUPPORTED) {
      if (keyword in node) throw unsupported(`"${keyword}" is not supported`, `${path}/${keyword}`);
    }
    const validating = Object.keys(node).filter((k) => VALIDATION.has(k));
    const alone = (head: string, allowed: readonly string[]) => {
      const extra = validating.filter((k) => k !== head && !allowed.includes(k));
      if (extra.length > 0) throw unsupported(`"${extra[0]}" beside "${head}" is not supported (XGrammar reads only "${head}")`, path);
    };
    if ('$ref' in node) {
      alone('$ref', []);
      this.ref(node.$ref, `${path}/$ref`, depth);
      this.data(node, path, depth, ['$ref']);
      return;
    }
    if ('const' in node || 'enum' in node) {
      const head = 'const' in node ? 'const' : 'enum';
      alone(head, ['type', ...(head === 'const' ? ['enum'] : [])]);
      if (head === 'enum' && (!Array.isArray(node.enum) || node.enum.length === 0)) throw invalid('enum must be a non-empty array', `${path}/enum`);
      this.data(node, path, depth);
      return;
    }
    for (const head of ['anyOf', 'oneOf', 'allOf']) {
      if (!(head in node)) continue;
      alone(head, []);
      break;
    }
    if (Array.isArray(node.allOf) && node.allOf.length > 1) throw unsupported('"allOf" of more than one schema is not supported', `${path}/allOf`);
    this.keywords(node, path, depth);
  }

  private keywords(node: Json, path: string, depth: number): void {
    this.typeless(node, path);
    if ('type' in node) {
      const types = Array.isArray(node.type) ? node.type : [node.type];
      if (types.length === 0) throw invalid('type must be a type name or a non-empty list of them', `${path}/type`);
      for (const t of types) {
        if (typeof t !== 'string' || !TYPES.has(t)) throw invalid(`type ${JSON.stringify(t)} is not a JSON schema type`, `${path}/type`);
      }
    }
    for (const k of COUNTS) {
      if (k in node && !(Number.isSafeInteger(node[k]) && (node[k] as number) >= 0)) throw invalid(`${k} must be a non-negative integer`, `${path}/${k}`);
    }
    for (const k of BOUNDS) {
      if (k in node && !(typeof node[k] === 'number' && Number.isFinite(node[k]))) throw invalid(`${k} must be a number`, `${path}/${k}`);
    }
    if ('required' in node && !(Array.isArray(node.required) && node.required.every((r) => typeof r === 'string'))) {
      throw invalid('required must be an array of strings', `${path}/required`);
    }
    for (const k of ['pattern', 'format']) {
      if (k in node && typeof node[k] !== 'string') throw invalid(`${k} must be a string`, `${path}/${k}`);
    }
    for (const k of SCHEMA_VALUED) if (k in node) this.schema(node[k], `${path}/${k}`, depth + 1);
    for (const k of SCHEMA_LISTS) {
      if (!(k in node)) continue;
      const list = node[k];
      if (!Array.isArray(list) || list.length === 0) throw invalid(`${k} must be a non-empty array of schemas`, `${path}/${k}`);
      list.forEach((item, i) => this.schema(item, `${path}/${k}/${i}`, depth + 2));
    }
    for (const k of SCHEMA_MAPS) {
      if (!(k in node)) continue;
      const map = node[k];
      if (!isObject(map)) throw invalid(`${k} must be an object`, `${path}/${k}`);
      const keys = Object.keys(map);
      if (k === 'properties' && keys.length > MAX_PROPERTIES) {
        throw invalid(`${keys.length} properties in one object; at most ${MAX_PROPERTIES} are supported`, `${path}/${k}`);
      }
      for (const key of keys) {
        if (k === 'properties' && /["\\\u0000-\u001f]/.test(key)) {
          // XGrammar writes a name into its grammar unescaped: a control character would be raw in
          // the output (invalid JSON), a backslash would start an escape, a quote breaks the grammar.
          throw unsupported(`property name ${JSON.stringify(key)} is not supported: names with ", \\ or control characters are not`, `${path}/${k}`);
        }
        this.schema(map[key], `${path}/${k}/${escapePointer(key)}`, depth + 2);
      }
    }
    // Everything else is data to XGrammar's JSON reader ($defs are checked as schemas where a $ref leads).
    this.data(node, path, depth, [...SCHEMA_VALUED, ...SCHEMA_LISTS, ...SCHEMA_MAPS]);
    this.costs(node, path);
  }

  /**
   * Without `type` XGrammar reads a schema as an object, an array (OBJECT_INFERRED_FROM,
   * ARRAY_INFERRED_FROM) or any value; as any value it ignores the keywords of every type.
   */
  private typeless(node: Json, path: string): void {
    if ('type' in node || [...OBJECT_INFERRED_FROM, ...ARRAY_INFERRED_FROM].some((k) => k in node)) return;
    const ignored = TYPED_KEYWORDS.find((k) => k in node);
    if (ignored) throw unsupported(`"${ignored}" without "type" is not supported (XGrammar ignores it there; name the type)`, path);
  }

  /** What the keywords XGrammar expands cost: string lengths, patterns, formats, number ranges, properties, separators. */
  private costs(node: Json, path: string): void {
    this.structureCosts(node, path);
    if (typeof node.pattern === 'string') {
      const beside = ['minLength', 'maxLength', 'format'].find((k) => k in node);
      if (beside) throw unsupported(`"${beside}" beside "pattern" is not supported (XGrammar ignores it)`, path);
      this.pattern(node.pattern, `${path}/pattern`);
    } else if ('minLength' in node || 'maxLength' in node) {
      const min = (node.minLength as number | undefined) ?? 0;
      const max = node.maxLength as number | undefined;
      this.add(`length ${min} ${max}`, repeatPositions(min, max) * POSITION_COST.wide, `string length bounds at ${path}`);
    }
    if (typeof node.format === 'string') {
      const plan = formatPlan(node.format);
      if (plan.kind === 'refused') throw unsupported(`format ${JSON.stringify(node.format)} is not supported: ${plan.why}`, `${path}/format`);
      const beside = ['minLength', 'maxLength'].find((k) => k in node);
      if (beside) throw unsupported(`"${beside}" beside "format" is not supported (XGrammar ignores it)`, path);
      this.add(`format ${node.format}`, COSTLIER_FORMATS[node.format] ?? FORMAT_COST, `format "${node.format}" at ${path}`);
    }
    const types = Array.isArray(node.type) ? node.type : [node.type];
    const bounds = BOUNDS.filter((k) => typeof node[k] === 'number').map((k) => node[k] as number);
    if ((types.includes('number') || types.includes('integer')) && bounds.length > 0) {
      const digits = Math.max(...bounds.map((b) => BigInt(Math.trunc(Math.abs(b))).toString().length));
      const cost = NUMBER_RANGE_COST.base + digits * NUMBER_RANGE_COST.digit;
      this.add(`range ${types.join(' ')} ${bounds.join(' ')}`, cost, `number bounds at ${path}`);
    }
  }

  /** Optional properties, and the separators of objects and arrays when whitespace runs are bounded. */
  private structureCosts(node: Json, path: string): void {
    const types = Array.isArray(node.type) ? node.type : [node.type];
    const object = types.includes('object') || 'properties' in node || 'additionalProperties' in node || 'unevaluatedProperties' in node;
    const array = types.includes('array') || 'items' in node || 'prefixItems' in node || 'unevaluatedItems' in node;
    const names = isObject(node.properties) ? Object.keys(node.properties) : [];
    const required = new Set(Array.isArray(node.required) ? node.required : []);
    const optional = names.filter((name) => !required.has(name)).length;
    const key = JSON.stringify(node);
    if (optional > 0) {
      const cost = optional * OPTIONAL_COST.each + optional ** 2 * OPTIONAL_COST.squared[this.whitespace.kind];
      this.add(`optional ${key}`, cost, `${optional} optional properties at ${path}`);
    }
    const { maxRun } = this.whitespace;
    if (maxRun !== undefined && (object || array)) {
      const separators = (object ? names.length + 2 : 0) + (array ? 3 : 0);
      this.add(`separators ${key}`, separators * maxRun * BOUNDED_WHITESPACE_COST, `whitespace runs of up to ${maxRun} between the items at ${path}`);
    }
  }

  /** A string's pattern: nested within the limit, written exactly (pattern-rule.ts) or refused here, and its cost. */
  private pattern(pattern: string, path: string): void {
    checkPatternLength(pattern, path);
    const shape = regexShape(pattern);
    if (shape.depth > MAX_DEPTH) throw tooDeep(path);
    try {
      jsonStringPattern('p', pattern);
    } catch (error) {
      throw schemaPatternError(error, path);
    }
    this.add(`pattern ${pattern}`, shape.cost, `pattern at ${path}`);
  }

  /**
   * The regexes of keywords refused below (patternProperties' keys, propertyNames' pattern): an
   * invalid one is named as such first.
   */
  private unsupportedPatterns(node: Json, path: string): void {
    const check = (pattern: unknown, at: string) => {
      if (typeof pattern !== 'string') return;
      checkPatternLength(pattern, at);
      try {
        checkRegexSyntax(pattern);
      } catch (error) {
        throw schemaPatternError(error, at);
      }
    };
    if (isObject(node.patternProperties)) for (const key of Object.keys(node.patternProperties)) check(key, `${path}/patternProperties/${escapePointer(key)}`);
    if (isObject(node.propertyNames)) check(node.propertyNames.pattern, `${path}/propertyNames/pattern`);
  }

  private add(key: string, cost: number, what: string): void {
    if (this.counted.has(key)) return;
    this.counted.add(key);
    this.cost += cost;
    if (!this.largest || cost > this.largest.cost) this.largest = { cost, what };
  }

  /** Follows a local $ref as XGrammar does (JSON pointer parts split at '/', not unescaped). */
  private ref(ref: unknown, path: string, depth: number): void {
    if (typeof ref !== 'string') throw invalid('$ref must be a string', path);
    if (ref === '#') return; // the root: a recursive rule
    if (!ref.startsWith('#/')) throw unsupported(`$ref ${JSON.stringify(ref)} is not supported: only local references ("#/...") are`, path);
    const target = refTarget(this.root, ref);
    if (target === undefined) throw invalid(`$ref ${JSON.stringify(ref)} points at nothing`, path);
    if (this.following.has(target) || (this.checkedAt.get(target) ?? 0) >= depth) return;
    this.checkedAt.set(target, depth);
    this.following.add(target);
    this.schema(target, ref, depth + 1);
    this.following.delete(target);
  }

  /** A JSON value read as data (const, enum, annotations, $defs), but `skip`ped keys: only its nesting counts. */
  private data(value: unknown, path: string, depth: number, skip: readonly string[] = []): void {
    if (depth > MAX_DEPTH) throw tooDeep(path);
    if (Array.isArray(value)) value.forEach((v, i) => this.data(v, `${path}/${i}`, depth + 1));
    else if (isObject(value)) {
      for (const [k, v] of Object.entries(value)) if (!skip.includes(k)) this.data(v, `${path}/${escapePointer(k)}`, depth + 1);
    }
  }
}

function invalid(problem: string, path: string): StructuredOutputError {
  return new StructuredOutputError(`Invalid JSON schema: ${problem} (at ${path})`);
}

function unsupported(problem: string, path: string): StructuredOutputError {
  return new StructuredOutputError(`Unsupported JSON schema: ${problem} (at ${path})`);
}

function tooDeep(path: string): StructuredOutputError {
  return new StructuredOutputError(`Invalid JSON schema: nested more than ${MAX_DEPTH} levels deep, following $refs (at ${path})`);
}

/** A schema's regex is held to the limit of a regex output (its reading and writing grow with it). */
function checkPatternLength(pattern: string, path: string): void {
  if (pattern.length > MAX_REGEX_CHARS) throw invalid(`pattern of ${pattern.length} characters; at most ${MAX_REGEX_CHARS} are supported`, path);
}
