// The JSON schema keywords as XGrammar's converter (cpp/json_schema_converter.cc, 0.1.27) reads
// them, shared by the schema check (schema-check.ts) and the schema rewrite (schema-splice.ts).
// Browser code: nothing here may import Node modules.

export type Json = Record<string, unknown>;

/** Keywords XGrammar reads: beside `$ref`, `anyOf`, ... it would ignore them. */
export const VALIDATION = new Set([
  'type', 'enum', 'const', '$ref', 'anyOf', 'oneOf', 'allOf',
  'properties', 'required', 'patternProperties', 'propertyNames', 'additionalProperties', 'unevaluatedProperties', 'minProperties', 'maxProperties',
  'items', 'prefixItems', 'unevaluatedItems', 'minItems', 'maxItems',
  'minLength', 'maxLength', 'pattern', 'format',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
]);

export const BOUNDS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'] as const;
/** Keywords whose value is one schema, a list of schemas, a map of schemas. */
export const SCHEMA_VALUED = ['items', 'additionalProperties', 'unevaluatedProperties', 'unevaluatedItems', 'propertyNames'];
export const SCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems'];
export const SCHEMA_MAPS = ['properties', 'patternProperties'];

/**
 * Without `type`, XGrammar takes a schema with one of these for an object, else one with one of
 * those for an array, else any value, whatever its other keywords say.
 */
export const OBJECT_INFERRED_FROM = ['properties', 'additionalProperties', 'unevaluatedProperties'];
export const ARRAY_INFERRED_FROM = ['items', 'prefixItems', 'unevaluatedItems'];

/** The keywords that decide a schema before its type: `$ref`, else `const`, else `enum`, else the combinators. */
export const HEADS = ['$ref', 'const', 'enum', 'anyOf', 'oneOf', 'allOf'];

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The types a schema names (none: []). */
export function typesOf(node: Json): unknown[] {
  if (!('type' in node)) return [];
  return Array.isArray(node.type) ? node.type : [node.type];
}

/**
 * The schema a local `$ref` ("#", "#/a/b") points at, found as XGrammar finds it (the pointer's
 * parts split at '/', not unescaped); undefined when it points at nothing.
 */
export function refTarget(root: unknown, ref: string): unknown {
  if (ref === '#') return root;
  let target: unknown = root;
  for (const part of ref.slice(2).split('/')) {
    if (part === '') continue;
    if (!isObject(target) || !(part in target)) return undefined;
    target = target[part];
  }
  return target;
}

export function escapePointer(key: string): string {
  return key.replaceAll('~', '~0').replaceAll('/', '~1');
}
