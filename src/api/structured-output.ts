// Structured output as requests ask for it, for both endpoints: the parameter rows (OpenAI's
// `response_format`, vLLM's `guided_*` and `structured_outputs`, at the top level or in
// extra_body), the one structure a request resolves to (more than one is a 400 naming them), and
// its compile before any generation (the grammar layer's StructuredOutputError becomes a 400
// naming the parameter as given), then one constraint per sequence.
// Browser code: nothing here may import Node modules.
import { usableVocabSize, type TextGenerator, type TokenConstraint } from '../engine/types.ts';
import {
  compileStructuredOutput,
  type CompiledStructuredOutput,
  type JsonWhitespace,
  type StructuredOutput,
} from '../grammar/structured-output.ts';
import { invalidRequest } from './errors.ts';
import { clipText, excerpt, nameList } from './excerpt.ts';
import { boolean, isPlainObject, jsonType, row, string, wrongType, type ParamRow, type TableParams } from './params.ts';
import { MAX_WHITESPACE_RUN } from '../grammar/limits.ts';
import { fieldData } from './request-data.ts';

/** What compiles a request's structure for a model (src/grammar's compileStructuredOutput; tests inject their own). */
export type StructureCompiler = typeof compileStructuredOutput;

/** JSON output's whitespace unless a whitespace parameter says otherwise: one line, `, ` and `: `. */
export const COMPACT: JsonWhitespace = { kind: 'compact' };

/**
 * The longest run of whitespace a whitespace pattern gets when it does not bound its runs itself
 * (`[ \t\n]*`): room for a newline and indentation seven levels deep at two spaces, and no more,
 * so that a model cannot fill its tokens with whitespace.
 */
export const DEFAULT_WHITESPACE_RUN = 16;

/** A value of a request parameter, with the parameter as the request gave it (`extra_body.guided_json`). */
export interface Given<T> {
  value: T;
  param: string;
}

/** `structured_outputs`, parsed: its constraint and, if one was given, its whitespace option (each with its field). */
export interface StructuredOutputsValue {
  output: Given<StructuredOutput>;
  whitespace: Given<JsonWhitespace> | null;
}

/** The structure a request asks for, and the parameter that asked (errors name it). */
export interface RequestStructure {
  output: StructuredOutput;
  param: string;
}

/** A request's structure compiled for the model. */
export interface CompiledRequestStructure {
  compiled: CompiledStructuredOutput;
  param: string;
}

// ---- values -------------------------------------------------------------------------------------

/** A JSON schema: an object or true / false, or (where `fromString`) a JSON string of one. */
function schemaValue(value: unknown, param: string, fromString: boolean): Record<string, unknown> | boolean {
  let schema = value;
  if (fromString && typeof value === 'string') {
    try {
      schema = JSON.parse(value);
    } catch (err) {
      throw invalidRequest(`Invalid '${param}': the string is not valid JSON (${(err as Error).message}); send a JSON schema object, or its JSON text.`, param, 'invalid_value');
    }
    schema = fieldData(schema, param);
    if (!isPlainObject(schema) && typeof schema !== 'boolean') {
      throw invalidRequest(`Invalid '${param}': the JSON text is ${jsonType(schema)}, not a JSON schema (an object, or true / false).`, param, 'invalid_value');
    }
    return schema;
  }
  if (!isPlainObject(schema) && typeof schema !== 'boolean') wrongType(param, fromString ? 'a JSON schema (an object, or its JSON text)' : 'a JSON schema object', value);
  return schema;
}

function nonEmptyString(value: unknown, param: string, what: string): string {
  if (typeof value !== 'string') wrongType(param, 'a string', value);
  if (value === '') throw invalidRequest(`Invalid '${param}': the ${what} is empty.`, param, 'invalid_value');
  return value;
}

function choices(value: unknown, param: string): string[] {
  if (!Array.isArray(value)) wrongType(param, 'an array of strings', value);
  if (value.length === 0) throw invalidRequest(`Invalid '${param}': empty array. Expected at least one choice.`, param, 'empty_array');
  value.forEach((v, i) => {
    if (typeof v !== 'string') wrongType(`${param}[${i}]`, 'a string', v);
  });
  return [...(value as string[])];
}

/** Fails on keys of `value` that are not in `known`, naming the first as `param.key`. */
function onlyKeys(value: Record<string, unknown>, known: readonly string[], param: string): void {
  const unknown = Object.keys(value).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    throw invalidRequest(
      `Unrecognized field${unknown.length > 1 ? 's' : ''} in '${param}': ${nameList(unknown)}; known: ${known.join(', ')}.`,
      `${param}.${clipText(unknown[0]!)}`,
      'unknown_parameter',
    );
  }
}

/**
 * An XGrammar structural tag: `{type: "structural_tag", format}` (XGrammar's form), or vLLM's
 * legacy `{type: "structural_tag", structures: [{begin, schema, end}], triggers}`, which becomes
 * XGrammar's triggered_tags as XGrammar converts it; an object or its JSON text. XGrammar checks
 * the format itself when it compiles.
 */
function structuralTag(value: unknown, param: string): StructuredOutput {
  let tag = value;
  if (typeof value === 'string') {
    try {
      tag = JSON.parse(value);
    } catch (err) {
      throw invalidRequest(`Invalid '${param}': the string is not valid JSON (${(err as Error).message}).`, param, 'invalid_value');
    }
    tag = fieldData(tag, param);
  }
  if (!isPlainObject(tag)) wrongType(param, 'a structural tag object (or its JSON text)', value);
  if (tag.type !== undefined && tag.type !== 'structural_tag') {
    throw invalidRequest(`Invalid '${param}.type': a structural tag's type is 'structural_tag'.`, `${param}.type`, 'invalid_value');
  }
  if (tag.format !== undefined) {
    onlyKeys(tag, ['type', 'format'], param);
    if (!isPlainObject(tag.format) || typeof tag.format.type !== 'string') {
      throw invalidRequest(`Invalid '${param}.format': expected a structural tag format, an object with a 'type'.`, `${param}.format`, 'invalid_value');
    }
    return { type: 'structural_tag', tag: { type: 'structural_tag', format: tag.format } };
  }
  if (tag.structures === undefined) {
    throw invalidRequest(`Invalid '${param}': a structural tag has a 'format' (or vLLM's legacy 'structures' and 'triggers').`, param, 'missing_required_parameter');
  }
  onlyKeys(tag, ['type', 'structures', 'triggers'], param);
  if (!Array.isArray(tag.structures)) wrongType(`${param}.structures`, 'an array', tag.structures);
  if (!Array.isArray(tag.triggers) || !tag.triggers.every((t) => typeof t === 'string')) wrongType(`${param}.triggers`, 'an array of strings', tag.triggers);
  const tags = tag.structures.map((s: unknown, i) => {
    const where = `${param}.structures[${i}]`;
    if (!isPlainObject(s)) wrongType(where, 'an object {begin, schema, end}', s);
    onlyKeys(s, ['begin', 'schema', 'end'], where);
    if (typeof s.begin !== 'string') wrongType(`${where}.begin`, 'a string', s.begin);
    if (typeof s.end !== 'string') wrongType(`${where}.end`, 'a string', s.end);
    return { type: 'tag', begin: s.begin, content: { type: 'json_schema', json_schema: schemaValue(s.schema, `${where}.schema`, true) }, end: s.end };
  });
  return { type: 'structural_tag', tag: { type: 'structural_tag', format: { type: 'triggered_tags', triggers: [...tag.triggers], tags } } };
}

/**
 * The JSON whitespace a vLLM whitespace pattern (a regular expression for the whitespace between
 * JSON tokens) maps onto: any JSON whitespace, in runs as long as the pattern's repeat bound
 * (`[ \n]{0,4}`: 4; `[ ]?` or one character: 1), or DEFAULT_WHITESPACE_RUN when it has none
 * (`*`, `+`, `{2,}`) or is more than one character class or escape. A pattern allowing no
 * whitespace (`''`, `{0}`) gives the compact form. Which characters the pattern allows is not
 * honoured: the grammar allows JSON's four (space, tab, LF, CR).
 */
export function whitespaceFromPattern(pattern: string): JsonWhitespace {
  const core = pattern.replace(/^\^/, '').replace(/(?<!\\)\$$/, '');
  if (core === '') return COMPACT;
  const match = /^(?:\[(?:\\.|[^\]\\])+\]|\\[stnrf]|[ \t\n\r])(?:(\*|\+|\?)|\{(\d+)(?:(,)(\d*))?\})?\??$/.exec(core);
  if (!match) return { kind: 'any', maxRun: DEFAULT_WHITESPACE_RUN };
  const [, symbol, low, comma, high] = match;
  let maxRun: number;
  if (symbol === '?') maxRun = 1;
  else if (symbol) maxRun = DEFAULT_WHITESPACE_RUN;
  else if (low === undefined) maxRun = 1;
  else if (!comma) maxRun = Number(low);
  else maxRun = high ? Number(high) : DEFAULT_WHITESPACE_RUN;
  // The grammar bounds a run (MAX_WHITESPACE_RUN): a longer bound in the pattern is taken as it.
  return maxRun === 0 ? COMPACT : { kind: 'any', maxRun: Math.min(maxRun, MAX_WHITESPACE_RUN) };
}

/** Keys of a JSON schema whose value is a schema, a list of schemas, or a map of names to schemas. */
const SUBSCHEMA = ['items', 'additionalItems', 'contains', 'not', 'if', 'then', 'else', 'propertyNames', 'unevaluatedItems', 'unevaluatedProperties', 'additionalProperties'];
const SUBSCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'];
const SUBSCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];

/**
 * vLLM's disable_additional_properties: every object schema that does not say whether other
 * properties may appear gets `additionalProperties: false`. Returns a copy; `const`, `enum` and
 * `default` values are left as they are.
 */
export function closeObjectSchemas(schema: Record<string, unknown> | boolean): Record<string, unknown> | boolean {
  const close = (node: unknown): unknown => {
    if (!isPlainObject(node)) return node;
    const out: Record<string, unknown> = { ...node };
    for (const key of SUBSCHEMA) if (isPlainObject(out[key])) out[key] = close(out[key]);
    for (const key of SUBSCHEMA_LISTS) if (Array.isArray(out[key])) out[key] = (out[key] as unknown[]).map(close);
    for (const key of SUBSCHEMA_MAPS) {
      const map = out[key];
      if (isPlainObject(map)) out[key] = Object.fromEntries(Object.entries(map).map(([name, sub]) => [name, close(sub)]));
    }
    const type = out.type;
    const isObject = type === 'object' || (Array.isArray(type) && type.includes('object')) || isPlainObject(out.properties);
    if (isObject && !Object.hasOwn(out, 'additionalProperties')) out.additionalProperties = false;
    return out;
  };
  return close(schema) as Record<string, unknown> | boolean;
}

// ---- parsers of the rows --------------------------------------------------------------------------

/** OpenAI's response_format: text (null), json_object, json_schema; and vLLM's structural_tag. */
function responseFormat(value: unknown, param: string): Given<StructuredOutput> | null {
  if (!isPlainObject(value)) wrongType(param, 'an object', value);
  switch (value.type) {
    case 'text':
      onlyKeys(value, ['type'], param);
      return null;
    case 'json_object':
      onlyKeys(value, ['type'], param);
      return { value: { type: 'json_object', whitespace: COMPACT }, param };
    case 'json_schema': {
      onlyKeys(value, ['type', 'json_schema'], param);
      const where = `${param}.json_schema`;
      const spec = value.json_schema;
      if (spec === undefined || spec === null) throw invalidRequest(`Missing required parameter: '${where}'.`, where, 'missing_required_parameter');
      if (!isPlainObject(spec)) wrongType(where, 'an object {name, schema, strict, description}', spec);
      onlyKeys(spec, ['name', 'schema', 'strict', 'description'], where);
      if (spec.name === undefined) throw invalidRequest(`Missing required parameter: '${where}.name'.`, `${where}.name`, 'missing_required_parameter');
      string().parse(spec.name, `${where}.name`);
      if (spec.description !== undefined && spec.description !== null) string().parse(spec.description, `${where}.description`);
      if (spec.strict !== undefined && spec.strict !== null) boolean().parse(spec.strict, `${where}.strict`);
      if (spec.schema === undefined || spec.schema === null) {
        throw invalidRequest(`Missing required parameter: '${where}.schema': the JSON schema the output must follow.`, `${where}.schema`, 'missing_required_parameter');
      }
      return { value: { type: 'json_schema', schema: schemaValue(spec.schema, `${where}.schema`, false), whitespace: COMPACT }, param };
    }
    case 'structural_tag':
      return { value: structuralTag(value, param), param };
    case undefined:
      throw invalidRequest(`Missing required parameter: '${param}.type'.`, `${param}.type`, 'missing_required_parameter');
    default:
      throw invalidRequest(
        `Invalid '${param}.type': expected 'text', 'json_object', 'json_schema' or 'structural_tag', but got ${excerpt(value.type)}.`,
        `${param}.type`,
        'invalid_value',
      );
  }
}

/** The constraints of vLLM's StructuredOutputsParams, each parsed as its guided_* spelling is. */
const STRUCTURED_OUTPUTS_CONSTRAINTS: Record<string, (value: unknown, param: string) => StructuredOutput | null> = {
  json: (value, param) => ({ type: 'json_schema', schema: schemaValue(value, param, true), whitespace: COMPACT }),
  regex: (value, param) => ({ type: 'regex', pattern: nonEmptyString(value, param, 'regular expression') }),
  choice: (value, param) => ({ type: 'choice', choices: choices(value, param) }),
  grammar: (value, param) => ({ type: 'grammar', grammar: nonEmptyString(value, param, 'grammar') }),
  json_object: (value, param) => (boolean().parse(value, param) ? { type: 'json_object', whitespace: COMPACT } : null),
  structural_tag: structuralTag,
};
const STRUCTURED_OUTPUTS_OPTIONS = ['whitespace_pattern', 'disable_any_whitespace', 'disable_additional_properties', 'disable_fallback'];

/**
 * vLLM's `structured_outputs` (StructuredOutputsParams): exactly one of json, regex, choice,
 * grammar, json_object, structural_tag; whitespace_pattern or disable_any_whitespace (true: the
 * compact form, also the default; not both); disable_additional_properties (with json);
 * disable_fallback (accepted: there is no fallback). Null fields count as absent.
 */
function structuredOutputs(value: unknown, param: string): StructuredOutputsValue {
  if (!isPlainObject(value)) wrongType(param, 'an object', value);
  onlyKeys(value, [...Object.keys(STRUCTURED_OUTPUTS_CONSTRAINTS), ...STRUCTURED_OUTPUTS_OPTIONS], param);
  const given = (key: string) => value[key] !== undefined && value[key] !== null;
  const outputs: Given<StructuredOutput>[] = [];
  for (const [key, parse] of Object.entries(STRUCTURED_OUTPUTS_CONSTRAINTS)) {
    if (!given(key)) continue;
    const output = parse(value[key], `${param}.${key}`);
    if (output) outputs.push({ value: output, param: `${param}.${key}` });
  }
  if (outputs.length > 1) conflict(outputs.map((o) => o.param));
  const output = outputs[0];
  if (!output) {
    throw invalidRequest(
      `Invalid '${param}': it names no constraint; give one of ${Object.keys(STRUCTURED_OUTPUTS_CONSTRAINTS).join(', ')}.`,
      param,
      'invalid_value',
    );
  }
  if (given('disable_fallback')) boolean().parse(value.disable_fallback, `${param}.disable_fallback`);
  if (given('disable_additional_properties') && boolean().parse(value.disable_additional_properties, `${param}.disable_additional_properties`)) {
    if (output.value.type !== 'json_schema') {
      throw invalidRequest(`Invalid '${param}.disable_additional_properties': it applies to a JSON schema ('${param}.json'), not to '${output.param}'.`, `${param}.disable_additional_properties`, 'invalid_value');
    }
    output.value = { ...output.value, schema: closeObjectSchemas(output.value.schema) };
  }
  const whitespaces: Given<JsonWhitespace>[] = [];
  if (given('whitespace_pattern')) {
    const where = `${param}.whitespace_pattern`;
    whitespaces.push({ value: whitespaceFromPattern(string().parse(value.whitespace_pattern, where)), param: where });
  }
  if (given('disable_any_whitespace') && boolean().parse(value.disable_any_whitespace, `${param}.disable_any_whitespace`)) {
    whitespaces.push({ value: COMPACT, param: `${param}.disable_any_whitespace` });
  }
  if (whitespaces.length > 1) conflict(whitespaces.map((w) => w.param), 'whitespace option');
  return { output, whitespace: whitespaces[0] ?? null };
}

/** vLLM's guided_decoding_backend: XGrammar is the one backend, so 'xgrammar' and 'auto' (options after ':' are ignored). */
function decodingBackend(value: unknown, param: string): string {
  const backend = string().parse(value, param);
  const name = backend.split(':')[0]!.trim();
  if (name !== 'xgrammar' && name !== 'auto') {
    throw invalidRequest(
      `Invalid '${param}': structured output here runs on XGrammar only, so '${clipText(name)}' is not available; send 'xgrammar' or 'auto', or leave it out.`,
      param,
      'unsupported_value',
    );
  }
  return backend;
}

function conflict(params: readonly string[], what = 'structured output constraint'): never {
  throw invalidRequest(
    `Only one ${what} may be given, but the request has ${params.map((p) => `'${p}'`).join(' and ')}; keep one.`,
    params[params.length - 1]!,
    'invalid_value',
  );
}

// ---- the rows -------------------------------------------------------------------------------------

/** A row whose value is a constraint given by one parameter. */
function constraintRow(type: string, parse: (value: unknown, param: string) => StructuredOutput, doc: string): ParamRow<Given<StructuredOutput> | null> {
  return row<Given<StructuredOutput> | null>({
    type,
    nullable: true,
    default: null,
    extension: true,
    parse: (value, param) => ({ value: parse(value, param), param }),
    doc,
  });
}

/** The structured-output parameters, rows of both endpoints' tables. */
export const STRUCTURED_OUTPUT_PARAMS = {
  response_format: row<Given<StructuredOutput> | null>({
    type: "object {type: 'text' | 'json_object' | 'json_schema' | 'structural_tag', ...}",
    nullable: true,
    default: null,
    parse: responseFormat,
    doc:
      '{type: "text"} (the default); {type: "json_object"}: a JSON object; {type: "json_schema", json_schema: {name, schema, strict, description}}: JSON valid against `schema` ' +
      '(strict and description are accepted; the schema is always enforced); {type: "structural_tag", format} (vLLM, XGrammar\'s structural tag). On both endpoints.',
  }),
  guided_json: constraintRow(
    'JSON schema object, or its JSON text',
    (value, param) => ({ type: 'json_schema', schema: schemaValue(value, param, true), whitespace: COMPACT }),
    'JSON valid against this schema (vLLM).',
  ),
  guided_regex: constraintRow(
    'string',
    (value, param) => ({ type: 'regex', pattern: nonEmptyString(value, param, 'regular expression') }),
    'Text matching this regular expression, whole (vLLM).',
  ),
  guided_choice: constraintRow('array of strings', (value, param) => ({ type: 'choice', choices: choices(value, param) }), 'Exactly one of these strings (vLLM).'),
  guided_grammar: constraintRow(
    'string',
    (value, param) => ({ type: 'grammar', grammar: nonEmptyString(value, param, 'grammar') }),
    "Text of this EBNF grammar (XGrammar's dialect, which reads llama.cpp's GBNF) from its rule `root` (vLLM).",
  ),
  structural_tag: constraintRow('structural tag object, or its JSON text', structuralTag, "An XGrammar structural tag (vLLM's older top-level spelling)."),
  guided_whitespace_pattern: row<Given<JsonWhitespace> | null>({
    type: 'string',
    nullable: true,
    default: null,
    extension: true,
    parse: (value, param) => ({ value: whitespaceFromPattern(string().parse(value, param)), param }),
    doc: `With JSON output: allow any JSON whitespace, in runs as long as the pattern's repeat bound allows ({0,4}: 4), else ${DEFAULT_WHITESPACE_RUN} (vLLM). Without it, JSON is compact.`,
  }),
  guided_decoding_backend: row<string | null>({
    type: "'xgrammar' or 'auto'",
    nullable: true,
    default: null,
    extension: true,
    parse: decodingBackend,
    doc: "Accepted for vLLM clients: 'xgrammar' or 'auto' (options after ':' are ignored); the one backend is XGrammar, so any other is a 400.",
  }),
  structured_outputs: row<StructuredOutputsValue | null>({
    type: 'object {json | regex | choice | grammar | json_object | structural_tag, whitespace_pattern, disable_any_whitespace, disable_additional_properties, disable_fallback}',
    nullable: true,
    default: null,
    extension: true,
    parse: structuredOutputs,
    doc: "vLLM's newer spelling (StructuredOutputsParams): one of json, regex, choice, grammar, json_object, structural_tag, with the options that map onto them.",
  }),
} satisfies Record<string, ParamRow<unknown>>;

/** The structured-output parameters, validated. */
export type StructuredOutputParams = TableParams<typeof STRUCTURED_OUTPUT_PARAMS>;

/** The structured-output parameters as a TypeScript caller writes them (vLLM's; response_format is in each request type). */
export interface StructuredOutputExtensions {
  guided_json?: Record<string, unknown> | boolean | string | null;
  guided_regex?: string | null;
  guided_choice?: string[] | null;
  guided_grammar?: string | null;
  structural_tag?: Record<string, unknown> | string | null;
  guided_whitespace_pattern?: string | null;
  guided_decoding_backend?: string | null;
  structured_outputs?: {
    json?: Record<string, unknown> | boolean | string | null;
    regex?: string | null;
    choice?: string[] | null;
    grammar?: string | null;
    json_object?: boolean | null;
    structural_tag?: Record<string, unknown> | string | null;
    whitespace_pattern?: string | null;
    disable_any_whitespace?: boolean | null;
    disable_additional_properties?: boolean | null;
    disable_fallback?: boolean | null;
  } | null;
}

/** response_format as a TypeScript caller writes it. */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema: Record<string, unknown> | boolean; strict?: boolean | null; description?: string | null } }
  | { type: 'structural_tag'; format: Record<string, unknown> }
  | { type: 'structural_tag'; structures: { begin: string; schema: Record<string, unknown> | boolean | string; end: string }[]; triggers: string[] };

// ---- resolving and compiling ------------------------------------------------------------------------

/**
 * The one structure the request asks for, with the whitespace option applied to JSON output; null
 * for none. 400: more than one constraint (all named), more than one whitespace option, or a
 * whitespace option without JSON output.
 */
export function requestStructure(params: StructuredOutputParams): RequestStructure | null {
  const outputs = [
    params.response_format,
    params.guided_json,
    params.guided_regex,
    params.guided_choice,
    params.guided_grammar,
    params.structural_tag,
    params.structured_outputs?.output ?? null,
  ].filter((o): o is Given<StructuredOutput> => o !== null);
  if (outputs.length > 1) conflict(outputs.map((o) => o.param));
  const whitespaces = [params.guided_whitespace_pattern, params.structured_outputs?.whitespace ?? null].filter((w): w is Given<JsonWhitespace> => w !== null);
  if (whitespaces.length > 1) conflict(whitespaces.map((w) => w.param), 'whitespace option');
  const chosen = outputs[0];
  const whitespace = whitespaces[0];
  if (whitespace) {
    if (!chosen || (chosen.value.type !== 'json_schema' && chosen.value.type !== 'json_object')) {
      throw invalidRequest(
        `Invalid '${whitespace.param}': it shapes JSON output, but the request ${chosen ? `asks for ${chosen.value.type} output in '${chosen.param}'` : 'asks for no JSON output'}.`,
        whitespace.param,
        'invalid_value',
      );
    }
    return { output: { ...chosen.value, whitespace: whitespace.value }, param: chosen.param };
  }
  return chosen ? { output: chosen.value, param: chosen.param } : null;
}

/** Whether `err` is src/grammar's StructuredOutputError, by name (as errors.ts tells the engine's). */
function isStructuredOutputError(err: unknown): err is Error {
  return err instanceof Error && err.name === 'StructuredOutputError';
}

function unusable(err: Error, param: string) {
  return invalidRequest(`The structure in '${param}' cannot be used: ${err.message}`, param, 'invalid_value');
}

/**
 * Compiles the request's structure for the model's vocabulary (the sampler's), before anything
 * runs: a StructuredOutputError (invalid, unsupported, too large) is a 400 naming `param`.
 */
export async function compileRequestStructure(
  generator: TextGenerator,
  structure: RequestStructure,
  compile: StructureCompiler = compileStructuredOutput,
): Promise<CompiledRequestStructure> {
  try {
    return { compiled: await compile(generator.tokenizer, usableVocabSize(generator), structure.output), param: structure.param };
  } catch (err) {
    throw isStructuredOutputError(err) ? unusable(err, structure.param) : err;
  }
}

/** One sequence's own constraint; the caller disposes of it when the sequence ends. */
export async function sequenceConstraint(structure: CompiledRequestStructure, stopTokenIds: readonly number[]): Promise<TokenConstraint> {
  try {
    return await structure.compiled.createConstraint(stopTokenIds);
  } catch (err) {
    throw isStructuredOutputError(err) ? unusable(err, structure.param) : err;
  }
}
