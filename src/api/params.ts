// The machinery of the request tables (src/api/schema.ts for completions, chat-schema.ts for chat):
// a row per parameter (type, range, default, nullability, parser, doc), the value checks rows are
// built from, and validateParams, which runs a table over a JSON body with extra_body merged in.
// Browser code: nothing here may import Node modules.
import { invalidRequest, notSupportedYet, type ApiError } from './errors.ts';
import { clipText, excerpt, nameList } from './excerpt.ts';
import { requestData } from './request-data.ts';

/** One parameter of a request body. */
export interface ParamRow<T> {
  /** JSON type, as error messages and docs say it ('integer', 'string or array of strings'). */
  type: string;
  /** Allowed range, as docs say it ('[0, 2]'); absent when any value of the type goes. */
  range?: string;
  /** Whether the field must be present (and not null). */
  required?: boolean;
  /** Whether `null` is accepted; it means `nullValue` (by default the default). */
  nullable: boolean;
  /** The value when the field is absent. */
  default: T;
  /** The value for an explicit `null`, where it differs from `default` (max_tokens: null = no limit). */
  nullValue?: T;
  /** Checks a present, non-null value and returns it normalized; throws a 400 ApiError naming `param`. */
  parse(value: unknown, param: string): T;
  /** Values this runtime implements; others are valid but answered with 400 "not supported yet". */
  supported?: {
    test(value: T): boolean;
    only: string;
    /** The error for a value not supported; default: 400 "not supported yet" saying `only`. */
    error?: (param: string) => ApiError;
  };
  /** A vLLM sampling extension (OpenAI clients send it in `extra_body`; the top level works too). */
  extension?: boolean;
  /** What the parameter does. */
  doc: string;
}

export function row<T>(r: ParamRow<T>): ParamRow<T> {
  return r;
}

// ---- value checks -------------------------------------------------------------------------------

export function jsonType(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return Number.isFinite(value) ? (Number.isInteger(value) ? 'an integer' : 'a decimal') : String(value);
  if (typeof value === 'object') return 'an object';
  return `a ${typeof value}`;
}

export function wrongType(param: string, expected: string, value: unknown): never {
  throw invalidRequest(`Invalid type for '${param}': expected ${expected}, but got ${jsonType(value)} instead.`, param, 'invalid_type');
}

export interface Bounds {
  min?: number;
  max?: number;
  /** min itself is not allowed. */
  exclusiveMin?: boolean;
}

function rangeText(b: Bounds): string | undefined {
  if (b.min !== undefined && b.max !== undefined) return `${b.exclusiveMin ? '(' : '['}${b.min}, ${b.max}]`;
  if (b.min !== undefined) return `${b.exclusiveMin ? '>' : '>='} ${b.min}`;
  if (b.max !== undefined) return `<= ${b.max}`;
  return undefined;
}

function checkBounds(param: string, value: number, b: Bounds): number {
  const low = b.min !== undefined && (b.exclusiveMin ? value <= b.min : value < b.min);
  const high = b.max !== undefined && value > b.max;
  if (low || high) {
    throw invalidRequest(
      `Invalid '${param}': ${value} is out of range; expected a value in ${rangeText(b)}.`,
      param,
      low ? 'value_below_minimum' : 'value_above_maximum',
    );
  }
  return value;
}

export function integer(b: Bounds = {}) {
  return {
    type: 'integer',
    range: rangeText(b),
    parse(value: unknown, param: string): number {
      // Any JSON integer: clients send 64-bit seeds (beyond 2^53 they arrive rounded, as in any
      // JavaScript JSON parser); each parameter's own range or later check bounds the rest.
      if (typeof value !== 'number' || !Number.isInteger(value)) wrongType(param, 'an integer', value);
      return checkBounds(param, value, b);
    },
  };
}

export function number(b: Bounds = {}) {
  return {
    type: 'number',
    range: rangeText(b),
    parse(value: unknown, param: string): number {
      if (typeof value !== 'number' || !Number.isFinite(value)) wrongType(param, 'a number', value);
      return checkBounds(param, value, b);
    },
  };
}

export function boolean() {
  return {
    type: 'boolean',
    parse(value: unknown, param: string): boolean {
      if (typeof value !== 'boolean') wrongType(param, 'a boolean', value);
      return value;
    },
  };
}

export function string() {
  return {
    type: 'string',
    parse(value: unknown, param: string): string {
      if (typeof value !== 'string') wrongType(param, 'a string', value);
      return value;
    },
  };
}

export function object() {
  return {
    type: 'object',
    parse(value: unknown, param: string): Record<string, unknown> {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      return value;
    },
  };
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function tokenIdArray(value: unknown, param: string, where: string): number[] {
  if (!Array.isArray(value)) wrongType(param, 'an array of token ids', value);
  return value.map((v, i) => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
      throw invalidRequest(
        `Invalid '${param}': ${where}[${i}] must be a token id (an integer >= 0), but got ${jsonType(v)}${typeof v === 'number' ? ` (${v})` : ''}.`,
        param,
        'invalid_type',
      );
    }
    return v;
  });
}

/** Whether two values of a request's data (requestData: bounded depth, JSON types only) are the same. */
function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The parameters of a table, validated: each row's value type. */
export type TableParams<Table extends Record<string, ParamRow<unknown>>> = {
  [K in keyof Table]: Table[K] extends ParamRow<infer T> ? T : never;
};

/**
 * Checks a request body against a table and returns every parameter normalized, with `named`,
 * which names a parameter as the request gave it (`extra_body.top_k` for one given there), and
 * `given`, whether the request gave it a value (not absent, not null).
 * `extra_body` (a row of the table) is merged first: its keys count as top-level parameters (a
 * key given in both places with different values is a 400). Each row: absent → `default`; null
 * → `nullValue` (or `default`) when `nullable`; otherwise `parse`, then `supported`. Throws a 400
 * ApiError: anything requestData refuses (a value nested too deeply, ...), body not an object,
 * unknown fields (named; `extra_body.x` for one inside extra_body), a missing required field, a
 * wrong type / NaN / out-of-range value (`param` names the field, as given), or a value not
 * supported. Only requestData's copy of the body is read: a request object given directly is
 * read once.
 */
export function validateParams<Table extends Record<string, ParamRow<unknown>>>(
  table: Table,
  request: unknown,
): { params: TableParams<Table>; named: (name: keyof Table & string) => string; given: (name: keyof Table & string) => boolean } {
  const body = requestData(request);
  if (!isPlainObject(body)) {
    throw invalidRequest(`The request body must be a JSON object, but got ${jsonType(body)}.`, null, 'invalid_body');
  }
  const unknown = Object.keys(body).filter((key) => !Object.hasOwn(table, key));
  if (unknown.length > 0) {
    throw invalidRequest(
      `Unrecognized request argument${unknown.length > 1 ? 's' : ''} supplied: ${nameList(unknown)}.`,
      clipText(unknown[0]!),
      'unknown_parameter',
    );
  }
  // extra_body: its keys join the top level; `where` remembers how to name them in errors.
  const merged: Record<string, unknown> = { ...body };
  const where: Record<string, string> = {};
  const extra = body.extra_body;
  if (extra !== undefined && extra !== null) {
    table.extra_body!.parse(extra, 'extra_body');
    const extraObject = extra as Record<string, unknown>;
    const unknownExtra = Object.keys(extraObject).filter((key) => !Object.hasOwn(table, key) || key === 'extra_body');
    if (unknownExtra.length > 0) {
      throw invalidRequest(
        `Unrecognized argument${unknownExtra.length > 1 ? 's' : ''} in 'extra_body': ${nameList(unknownExtra)}.`,
        `extra_body.${clipText(unknownExtra[0]!)}`,
        'unknown_parameter',
      );
    }
    for (const [key, value] of Object.entries(extraObject)) {
      if (value === undefined) continue;
      if (body[key] !== undefined && !sameJson(body[key], value)) {
        throw invalidRequest(
          `'${key}' is given both at the top level and in 'extra_body', with different values.`,
          `extra_body.${key}`,
          'invalid_value',
        );
      }
      merged[key] = value;
      where[key] = `extra_body.${key}`;
    }
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(table) as [string, ParamRow<unknown>][]) {
    const param = where[name] ?? name;
    const present = Object.hasOwn(merged, name) && merged[name] !== undefined;
    const value = present ? merged[name] : undefined;
    let parsed: unknown;
    if (!present || value === null) {
      if (spec.required) throw invalidRequest(`Missing required parameter: '${name}'.`, param, 'missing_required_parameter');
      if (value === null && !spec.nullable) throw wrongType(param, `${spec.type}`, null);
      parsed = value === null && 'nullValue' in spec ? spec.nullValue : spec.default;
    } else {
      parsed = spec.parse(value, param);
      if (spec.supported && !spec.supported.test(parsed)) {
        throw spec.supported.error?.(param) ?? notSupportedYet(param, `${excerpt(value)} was given; ${spec.supported.only} is accepted`);
      }
    }
    // Defaults may be mutable (stop: []); hand out a fresh copy.
    out[name] = Array.isArray(parsed) ? [...parsed] : parsed;
  }
  return {
    params: out as TableParams<Table>,
    named: (name) => where[name] ?? name,
    given: (name) => merged[name] !== undefined && merged[name] !== null,
  };
}
