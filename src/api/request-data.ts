// A request body as plain JSON data, made once at each endpoint's entry (validateParams) before
// anything else reads it. Everything after walks the body by recursion (the parameter checks,
// JSON.stringify, the chat template's tojson, the grammar layer's schema checks), so the depth
// must be bounded first, by a walk that does not recurse itself. The walk copies as it goes, so a
// request object given to the Engine directly is read exactly once: a cyclic one, a getter that
// throws or answers differently on each read, a BigInt, a sparse array of length 2^32 - 1 all
// become a 400 here, or the same plain data a JSON body would be.
// Browser code: nothing here may import Node modules.
import { clipText } from './excerpt.ts';
import { errorMessage, invalidRequest, type ApiError } from './errors.ts';

/**
 * The deepest a request's values nest, in JSON levels: the body object is level 1, each array or
 * object inside it one more. The grammar layer takes JSON schemas up to 32 levels deep (its
 * MAX_DEPTH); a schema sits 3 to 6 levels into the body (tools[i].function.parameters), a
 * structural tag's deeper still; chat templates see messages' own fields 4 levels in. 128 leaves
 * all of them room, and keeps every recursion after this walk far from the stack's end.
 */
export const MAX_REQUEST_DEPTH = 128;

/**
 * The most values (arrays, objects, strings, numbers, ... each counted) a request holds: a JSON
 * body of more takes over 8 MB of text. It bounds the walk over request objects given directly,
 * which JSON's size does not (a sparse array, an object referenced many times over).
 */
export const MAX_REQUEST_VALUES = 1 << 22;

/** Where the data being walked sits: the request body, or JSON text inside one of its fields. */
interface Origin {
  /** The path of the walked value itself; '' for the body. */
  path: string;
  /** The parameter errors name; null: the top-level parameter (extra_body.x for one inside extra_body). */
  param: string | null;
}

/** An array or object being copied, with where it sits (for the path of an error). */
interface Frame {
  source: object;
  target: unknown[] | Record<string, unknown>;
  /** The object's own enumerable keys; null for an array (walked by index). */
  keys: readonly string[] | null;
  size: number;
  next: number;
  depth: number;
  parent: Frame | null;
  /** The key or index of this value in its parent. */
  key: string | number;
}

/**
 * The request body as plain JSON data: a copy of its arrays and objects (own enumerable string
 * keys, as JSON.stringify reads them; undefined, functions and symbols left out of objects and
 * null in arrays, as there) with the same primitives. Throws a 400 naming the top-level
 * parameter (and the path in the message) for a value nested more than MAX_REQUEST_DEPTH levels
 * (a cycle included), more than MAX_REQUEST_VALUES values, a BigInt, or a value that cannot be
 * read (a getter or proxy that throws).
 */
export function requestData(body: unknown): unknown {
  return copyData(body, { path: '', param: null });
}

/**
 * Whether a JSON value nests at most `limit` levels (the value itself the first), found by a walk
 * that does not recurse and stops at the first array or object too deep: a value that passes can
 * be given to JSON.stringify and the like.
 */
export function withinDepth(value: unknown, limit = MAX_REQUEST_DEPTH): boolean {
  const stack: { value: unknown; depth: number }[] = [{ value, depth: 1 }];
  while (stack.length > 0) {
    const { value: node, depth } = stack.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    if (depth > limit) return false;
    for (const item of Object.values(node)) if (typeof item === 'object' && item !== null) stack.push({ value: item, depth: depth + 1 });
  }
  return true;
}

/**
 * JSON parsed out of a string field (tool call arguments, a schema given as JSON text) as
 * requestData checks the body: its levels count from `param`, which the 400 names.
 */
export function fieldData(value: unknown, param: string): unknown {
  return copyData(value, { path: param, param });
}

function copyData(value: unknown, origin: Origin): unknown {
  /** Throws the error `make` gives for the value at `key` of `frame` (the walked value itself: null, null). */
  const fail = (frame: Frame | null, key: string | number | null, make: (path: string, param: string | null) => ApiError): never => {
    const keys = keysTo(frame, key);
    throw make(formatPath(origin.path, keys), origin.param ?? topLevelParam(keys));
  };
  const rootKind = kindOf(value);
  if (rootKind === 'bigint') fail(null, null, notJson);
  if (rootKind !== 'container') return value;
  const rootFrame = open(value as object, null, '', 1);
  if (!('target' in rootFrame)) return fail(null, null, unreadable(rootFrame.error));
  const stack: Frame[] = [rootFrame];
  let values = 1;
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    if (frame.next >= frame.size) {
      stack.pop();
      continue;
    }
    const key = frame.keys === null ? frame.next : frame.keys[frame.next]!;
    frame.next++;
    if (++values > MAX_REQUEST_VALUES) fail(frame, key, tooManyValues);
    let item: unknown;
    try {
      item = (frame.source as Record<string | number, unknown>)[key];
    } catch (err) {
      fail(frame, key, unreadable(err));
    }
    switch (kindOf(item)) {
      case 'container': {
        if (frame.depth >= MAX_REQUEST_DEPTH) fail(frame, key, tooDeep);
        const child = open(item as object, frame, key, frame.depth + 1);
        if (!('target' in child)) return fail(frame, key, unreadable(child.error));
        put(frame, key, child.target);
        stack.push(child);
        break;
      }
      case 'omitted':
        if (frame.keys === null) put(frame, key, null);
        break;
      case 'bigint':
        fail(frame, key, notJson);
        break;
      default:
        put(frame, key, item);
    }
  }
  return rootFrame.target;
}

/** How a value is copied: an array or object, a primitive as it is, what JSON leaves out (undefined, functions, symbols), or a BigInt (refused). */
function kindOf(value: unknown): 'container' | 'primitive' | 'omitted' | 'bigint' {
  switch (typeof value) {
    case 'object':
      return value === null ? 'primitive' : 'container';
    case 'undefined':
    case 'function':
    case 'symbol':
      return 'omitted';
    case 'bigint':
      return 'bigint';
    default:
      return 'primitive';
  }
}

/** A frame for copying `source`, `depth` levels deep, or what reading its keys threw (a proxy's trap). */
function open(source: object, parent: Frame | null, key: string | number, depth: number): Frame | { error: unknown } {
  try {
    const isArray = Array.isArray(source);
    const keys = isArray ? null : Object.keys(source);
    const size = isArray ? (source as unknown[]).length : keys!.length;
    return { source, target: isArray ? [] : {}, keys, size, next: 0, depth, parent, key };
  } catch (error) {
    return { error };
  }
}

/**
 * Sets a copied value: an array's items are appended (the walk gives each index in turn); an
 * object's `__proto__` stays an own key, as JSON.parse makes it, rather than setting the prototype.
 */
function put(frame: Frame, key: string | number, value: unknown): void {
  if (frame.keys === null) (frame.target as unknown[]).push(value);
  else if (key === '__proto__') Object.defineProperty(frame.target, key, { value, enumerable: true, writable: true, configurable: true });
  else (frame.target as Record<string, unknown>)[key] = value;
}

/** The keys from the walked value down to `key` in `frame`. */
function keysTo(frame: Frame | null, key: string | number | null): (string | number)[] {
  const keys: (string | number)[] = key === null ? [] : [key];
  for (let f = frame; f !== null && f.parent !== null; f = f.parent) keys.push(f.key);
  return keys.reverse();
}

/** The longest path an error message shows. */
const PATH_LENGTH = 200;

/** A path as errors name parameters: `messages[0].role`, each key clipped, the whole clipped. */
function formatPath(start: string, keys: readonly (string | number)[]): string {
  let path = start;
  for (const key of keys) {
    path += typeof key === 'number' ? `[${key}]` : path === '' ? clipText(key) : `.${clipText(key)}`;
    if (path.length > PATH_LENGTH) break;
  }
  return clipText(path, PATH_LENGTH);
}

/** The parameter a path in the body belongs to: its first key, or `extra_body.key` inside extra_body. */
function topLevelParam(keys: readonly (string | number)[]): string | null {
  const [first, second] = keys;
  if (typeof first !== 'string') return null;
  return first === 'extra_body' && typeof second === 'string' ? `extra_body.${clipText(second)}` : clipText(first);
}

function named(path: string): string {
  return path === '' ? 'the request body' : `'${path}'`;
}

function tooDeep(path: string, param: string | null): ApiError {
  return invalidRequest(
    `Invalid ${param === null ? 'request body' : `'${param}'`}: it is nested more than ${MAX_REQUEST_DEPTH} levels deep (at ${named(path)}; the body counts as one level).`,
    param,
    'nested_too_deeply',
  );
}

function tooManyValues(path: string, param: string | null): ApiError {
  return invalidRequest(`The request holds more than ${MAX_REQUEST_VALUES} values (arrays, objects, strings, numbers; at ${named(path)}).`, param, 'request_too_large');
}

function notJson(path: string, param: string | null): ApiError {
  return invalidRequest(`Invalid type for ${named(path)}: a BigInt is not a JSON value; send a number or a string.`, param, 'invalid_type');
}

function unreadable(err: unknown): (path: string, param: string | null) => ApiError {
  return (path, param) => invalidRequest(`Invalid ${named(path)}: it could not be read (${clipText(errorMessage(err))}).`, param, 'invalid_value');
}
