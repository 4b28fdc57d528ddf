// The Jinja engine under chat-template.ts: @huggingface/jinja, set up as transformers sets up
// Python Jinja2 for chat templates
// (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now, tojson as json.dumps).
//
// Where the library behaves the JavaScript way and Python differs, the interpreter of each render
// has those steps replaced (with jinja-python.ts): printing (True, None, Python lists and dicts,
// float repr), `~`, `+` and `-` (a str and an int do not add: TypeError), `==`, comparisons (lists
// item by item, mismatched types a TypeError), `/ // %`, `'fmt' % values`, `*` on strings, tojson,
// Python whitespace in strip/split/trim, string methods (find, rfind, count, rsplit, center, ljust,
// rjust, zfill, swapcase, the is* tests, startswith and endswith with start and end), dict methods
// before keys of the same name (`d.items`), the filters length, join, items, list, first, last, int,
// title, capitalize, round, max, min, sum, unique, reverse, wordcount, select, reject, selectattr,
// rejectattr, map with a filter name, tests with arguments (`is eq 'x'`, `is in y`), the tests
// iterable and number, for loops (over strings, tuples and undefined values; a scope for each pass;
// loop.cycle), attributes of undefined values (UndefinedError), strftime_now (C locale). The
// library's parser and lexer are used as they are, their tokens adjusted first (pythonTokens):
// float literals with an exponent, `()` and `(x,)` tuples, tests with arguments.
//
// chat-template.ts loads this module (and with it the library) on the first render, so the base
// bundle stays without both.
import * as jinjaModule from '@huggingface/jinja';
import { BoundedLru } from './bounded-lru.ts';
import {
  isMapping, isNumberLike, isSequence, jinjaTitleFilter, jsonOptions, pyCapitalize, pyCompare, pyContains, pyEquals, pyJsonDumps,
  pyLength, pyPercentFormat, pyRepr, pyRoundFloat, pyStr, pyStrftime, pyStringRepr, pyStrip, pyTruthy, pyTypeRepr,
  type Kit,
  type Value,
} from './jinja-python.ts';
import { checkedJoin, optionalString, pyReplace, splitArgs, stringArg, stringMethod } from './jinja-strings.ts';
import { pythonTokens, TEST, TUPLE } from './jinja-syntax.ts';
import { checkClock, checkStringLength, checkTemplateLength, RENDER_LIMITS, renderStopped, withRenderBudget } from './render-budget.ts';
import { ChatTemplateError } from './template-error.ts';

export { pyStrip } from './jinja-python.ts';
export { RENDER_LIMITS } from './render-budget.ts';

/**
 * Renders `source` with `variables` (strftime_now reports `now`) within RENDER_LIMITS; every
 * failure is a ChatTemplateError.
 */
export function renderJinja(source: string, variables: Readonly<Record<string, unknown>>, now: Date): string {
  const runtime = loadRuntime();
  const program = compile(runtime, source);
  try {
    return withRenderBudget(() => createInterpreter(runtime, templateEnvironment(runtime, variables, now)).run(program).value);
  } catch (err) {
    if (err instanceof RangeError && /string length|array length|call stack/i.test(err.message)) {
      throw renderStopped(`the engine's own limit (${err.message})`);
    }
    if (err instanceof ChatTemplateError) throw err;
    throw new ChatTemplateError(`Chat template rendering failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
}

/** Throws a ChatTemplateError when `source` does not parse. */
export function parseJinja(source: string): void {
  compile(loadRuntime(), source);
}

type JinjaModule = typeof import('@huggingface/jinja');
type Environment = InstanceType<JinjaModule['Environment']>;
// The interpreter's AST nodes, read by field name.
type Node = { type: string; [field: string]: any };

/** The interpreter's own steps that a render replaces (private in its typings). */
interface Interpreter {
  run(program: unknown): Value;
  evaluate(node: Node | undefined, env: Environment): Value;
  evaluateBlock(statements: Node[], env: Environment): Value;
  evaluateBinaryExpression(node: Node, env: Environment): Value;
  evaluateMemberExpression(node: Node, env: Environment): Value;
  evaluateCallExpression(node: Node, env: Environment): Value;
  evaluateTestExpression(node: Node, env: Environment): Value;
  evaluateFor(node: Node, env: Environment): Value;
  applyFilter(operand: Value, filter: Node, env: Environment): Value | undefined;
  evaluateArguments(args: Node[], env: Environment): [Value[], Map<string, Value>];
}

interface Runtime {
  jinja: JinjaModule;
  kit: Kit;
}

let runtime: Runtime | undefined;

/** The bodies of for loops (evaluateBlock gives each pass a scope of its own). */
const forBodies = new WeakSet<object>();

/** The node type of a value that evaluates to itself. */
const READY = 'PyReadyValue';

function loadRuntime(): Runtime {
  runtime ??= { jinja: jinjaModule, kit: makeKit(jinjaModule) };
  return runtime;
}

function makeKit(jinja: JinjaModule): Kit {
  const from = (x: unknown) => new jinja.Environment().set('x', x) as unknown as Value;
  const classOf = (x: unknown) => (from(x) as object).constructor as new (value: unknown) => Value;
  const [S, I, F, B, U, A, O, Fn] = ['', 1, 0.5, true, undefined, [], {}, () => null].map(classOf);
  return {
    from,
    str: (s) => new S(s),
    int: (n) => new I(n),
    float: (n) => new F(n),
    bool: (b) => new B(b),
    undef: () => new U(undefined),
    array: (items) => new A(items),
    tuple: (items) => Object.assign(new A(items), { pyTuple: true }),
    dict: (entries) => new O(entries),
    fn: (f) => new Fn((args: Value[]) => f(args)),
  };
}

/**
 * The parsed templates kept: the model's own and those requests send. A parsed template takes
 * ~15-25 bytes per character of its source, so the characters are bounded too: at most twice the
 * longest template a request may send (~10-13 MiB of parsed templates at most).
 */
export const PARSED_TEMPLATE_CACHE = { templates: 8, characters: 2 * RENDER_LIMITS.templateLength };
const parsed = new BoundedLru<string, unknown>(PARSED_TEMPLATE_CACHE.templates, PARSED_TEMPLATE_CACHE.characters);

/** The parsed templates held now and their sources' characters (for tests). */
export function parsedTemplatesHeld(): { templates: number; characters: number } {
  return { templates: parsed.size, characters: parsed.weight };
}

/** The parsed template, from the cache of recent sources. */
function compile({ jinja }: Runtime, source: string): unknown {
  let program = parsed.get(source);
  if (program !== undefined) return program;
  checkTemplateLength(source);
  try {
    // Jinja2 reads \r\n and \r as \n, in text and in string literals.
    const tokens = jinja.tokenize(source.replace(/\r\n?/g, '\n'), { lstrip_blocks: true, trim_blocks: true });
    program = jinja.parse(pythonTokens(tokens) as typeof tokens);
  } catch (err) {
    throw new ChatTemplateError(`Chat template syntax error: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  parsed.set(source, program, source.length);
  return program;
}

/** Globals (as Jinja2 and transformers define them) in a parent scope, the render's variables above them. */
function templateEnvironment({ jinja, kit }: Runtime, variables: Readonly<Record<string, unknown>>, now: Date): Environment {
  const globals = new jinja.Environment();
  const constants: [string, unknown][] = [['true', true], ['false', false], ['none', null], ['True', true], ['False', false], ['None', null]];
  for (const [name, value] of constants) globals.variables.set(name, kit.from(value) as never);
  const defineGlobal = (name: string, f: (args: Value[]) => Value) => globals.variables.set(name, kit.fn(f) as never);
  defineGlobal('raise_exception', (args) => {
    throw new ChatTemplateError(args.length > 0 ? pyStr(args[0]) : '');
  });
  defineGlobal('strftime_now', (args) => kit.str(pyStrftime(now, pyStr(args[0] ?? kit.str('')))));
  defineGlobal('range', (args) => {
    const n = args.map((a) => {
      if (a.type !== 'IntegerValue') throw new TypeError('range() arguments must be integers');
      return a.value as number;
    });
    if (n.length < 1 || n.length > 3) throw new TypeError(`range expected 1 to 3 arguments, got ${n.length}`);
    const [start, stop, step] = n.length === 1 ? [0, n[0], 1] : [n[0], n[1], n[2] ?? 1];
    if (step === 0) throw new Error('range() arg 3 must not be zero');
    const count = Math.max(0, Math.ceil((stop - start) / step));
    if (count > 100_000) throw new Error('Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).');
    return kit.array(Array.from({ length: count }, (_, i) => kit.int(start + i * step)));
  });
  defineGlobal('dict', (args) => kit.dict(new Map(splitArgs(args)[1])));
  defineGlobal(TUPLE, (args) => kit.tuple(args));

  const env = new jinja.Environment(globals);
  for (const [name, value] of Object.entries(variables)) env.variables.set(name, kit.from(value) as never);
  return env;
}

function checkSize(value: Value): Value {
  if (value.type === 'StringValue' && (value.value as string).length > RENDER_LIMITS.stringLength) {
    throw renderStopped(`a string of over ${RENDER_LIMITS.stringLength} characters`);
  }
  if ((value.type === 'ArrayValue' || value.type === 'TupleValue') && (value.value as Value[]).length > RENDER_LIMITS.listLength) {
    throw renderStopped(`a list of over ${RENDER_LIMITS.listLength} items`);
  }
  return value;
}

function createInterpreter({ jinja, kit }: Runtime, env: Environment): Interpreter {
  const interp = new jinja.Interpreter(env) as unknown as Interpreter;
  const base = jinja.Interpreter.prototype as unknown as Interpreter;

  // Every evaluation counts against the step budget, and every value it makes against the sizes.
  let steps = 0;
  interp.evaluate = (node, scope) => {
    if (++steps > RENDER_LIMITS.steps) throw renderStopped(`more than ${RENDER_LIMITS.steps} steps`);
    checkClock(); // every step: one step may be slow (a filter over a long string), and a look costs about 0.1 µs
    if (node?.type === READY) return node.value; // a value evaluated already (evaluateFor's iterable)
    const value = checkSize(base.evaluate.call(interp, node, scope));
    if (node?.type === 'Identifier' && node.value === 'varargs' && value.type === 'ArrayValue') value.pyTuple = true; // a macro's extra arguments: a tuple
    return value;
  };

  // Output: str() of each value; a None printed by an expression is "None" (set, macro and comment print nothing).
  interp.evaluateBlock = (statements, outer) => {
    if (++steps > RENDER_LIMITS.steps) throw renderStopped(`more than ${RENDER_LIMITS.steps} steps`); // a loop's every pass, even an empty one
    // Each pass of a loop has its own scope, as in Jinja2: what it sets is gone at the next pass.
    const scope = forBodies.has(statements) ? new jinja.Environment(outer) : outer;
    let out = '';
    for (const statement of statements) {
      const value = interp.evaluate(statement, scope);
      if (value.type !== 'NullValue') out += pyStr(value);
      else if (statement.type !== 'Set' && statement.type !== 'Macro' && statement.type !== 'Comment') out += 'None';
      if (out.length > RENDER_LIMITS.stringLength) throw renderStopped(`an output of over ${RENDER_LIMITS.stringLength} characters`);
    }
    return kit.str(out);
  };

  interp.evaluateBinaryExpression = (node, scope) => {
    const op: string = node.operator.value;
    if (!['~', '==', '!=', '+', '-', '/', '//', '%', '*', '<', '<=', '>', '>='].includes(op)) return base.evaluateBinaryExpression.call(interp, node, scope);
    const left = interp.evaluate(node.left, scope);
    const right = interp.evaluate(node.right, scope);
    if (op === '~') return kit.str(pyStr(left) + pyStr(right));
    if (op.startsWith('<') || op.startsWith('>')) {
      const order = pyCompare(left, right);
      return kit.bool(op === '<' ? order < 0 : op === '<=' ? order <= 0 : op === '>' ? order > 0 : order >= 0);
    }
    if (op === '+' && left.type === 'StringValue' && right.type === 'StringValue') return kit.str(left.value + right.value);
    if (op === '+' && isSequence(left) && left.type === right.type && !left.pyTuple === !right.pyTuple) {
      return kit.array([...left.value, ...right.value]);
    }
    if (op === '%' && left.type === 'StringValue') return kit.str(pyPercentFormat(left.value, right));
    if (op === '==') return kit.bool(pyEquals(left, right));
    if (op === '!=') return kit.bool(!pyEquals(left, right));
    if (op === '*') {
      const [text, times] = left.type === 'StringValue' ? [left, right] : [right, left];
      // Sizes are checked before the repeat is made: 'x' * 10**9 must not allocate.
      if (text.type === 'StringValue' && times.type === 'IntegerValue') {
        checkStringLength(text.value.length * times.value);
        return kit.str(text.value.repeat(Math.max(0, times.value)));
      }
      if (isSequence(left) && right.type === 'IntegerValue') {
        if ((left.value as Value[]).length * right.value > RENDER_LIMITS.listLength) throw renderStopped(`a list of over ${RENDER_LIMITS.listLength} items`);
        return kit.array(Array.from({ length: Math.max(0, right.value) }, () => left.value as Value[]).flat());
      }
    }
    if (!isNumberLike(left) || !isNumberLike(right)) throw new TypeError(`unsupported operand type(s) for ${op}: ${left.type} and ${right.type}`);
    const a = Number(left.value);
    const b = Number(right.value);
    const float = left.type === 'FloatValue' || right.type === 'FloatValue';
    if (op === '*') return float ? kit.float(a * b) : kit.int(a * b);
    if (op === '+') return float ? kit.float(a + b) : kit.int(a + b);
    if (op === '-') return float ? kit.float(a - b) : kit.int(a - b);
    if (b === 0) throw new Error(op === '/' ? 'division by zero' : 'integer division or modulo by zero');
    if (op === '/') return kit.float(a / b);
    if (op === '//') return float ? kit.float(Math.floor(a / b)) : kit.int(Math.floor(a / b));
    let m = a % b; // Python: the remainder takes the divisor's sign
    if (m !== 0 && b < 0 !== m < 0) m += b;
    return float ? kit.float(m) : kit.int(m);
  };

  interp.evaluateMemberExpression = (node, scope) => {
    const object = interp.evaluate(node.object, scope);
    // Jinja2's Undefined fails on an attribute or item (UndefinedError): `x.y` with x undefined, `a.b.c` with a.b missing.
    if (object.type === 'UndefinedValue') {
      throw new ChatTemplateError(object.pyHint ?? (node.object.type === 'Identifier' ? `'${node.object.value}' is undefined` : `${pyRepr(object)} is undefined`));
    }
    if (node.computed && node.property.type === 'SliceExpression') {
      const step = node.property.step && interp.evaluate(node.property.step, scope);
      if (step?.type === 'IntegerValue' && step.value === 0) throw new Error('slice step cannot be zero');
      const ready = (value: Value | undefined): Node | undefined => value && { type: READY, value };
      const slice = { ...node.property, step: ready(step) };
      return base.evaluateMemberExpression.call(interp, { ...node, object: ready(object), property: slice }, scope);
    }
    const property = node.computed
      ? interp.evaluate(node.property, scope)
      : node.property.type === 'IntegerLiteral'
        ? kit.int(node.property.value)
        : kit.str(node.property.value);
    // `d.items` is the dict's method even where d has an 'items' key (Jinja2 tries the attribute first); `d['items']` is the key.
    const method = !node.computed && isMapping(object) && ['items', 'keys', 'values', 'get'].includes(property.value);
    const found = method ? (property.value === 'items' ? kit.fn(() => pairs(object)) : object.builtins.get(property.value)) : member(object, property);
    if (found !== undefined) return found;
    const missing = kit.undef(); // with Jinja2's message for what fails on it
    const what = pyTypeRepr(object);
    missing.pyHint = property.type === 'StringValue' ? `${pyStringRepr(what)} has no attribute ${pyStringRepr(property.value)}` : `${what} has no element ${pyRepr(property)}`;
    return missing;
  };

  // Calling an Undefined fails as Jinja2's does, with its message (`content.replace(...)` on a list:
  // "'list object' has no attribute 'replace'"); the callee is evaluated first, as Python does.
  interp.evaluateCallExpression = (node, scope) => {
    const callee = interp.evaluate(node.callee, scope);
    if (callee.type === 'UndefinedValue') {
      throw new ChatTemplateError(callee.pyHint ?? (node.callee.type === 'Identifier' ? `'${node.callee.value}' is undefined` : `${pyRepr(callee)} is undefined`));
    }
    return base.evaluateCallExpression.call(interp, { ...node, callee: { type: READY, value: callee } }, scope);
  };

  const member = (object: Value, property: Value): Value | undefined => {
    const name: string | null = property.type === 'StringValue' ? property.value : null;
    if (object.type === 'StringValue') {
      if (property.type === 'IntegerValue') {
        const chars = [...(object.value as string)];
        return chars.at(property.value) !== undefined ? kit.str(chars.at(property.value)!) : undefined;
      }
      return name === null ? undefined : (stringMethod(kit, object.value, name) ?? object.builtins.get(name));
    }
    if (isMapping(object) || object.type === 'NamespaceValue') {
      if (name === null) return undefined;
      const own = (object.value as Map<string, Value>).get(name);
      if (own !== undefined || object.type === 'NamespaceValue') return own;
      if (name === 'items') return kit.fn(() => pairs(object));
      if (name === 'cycle' && isLoop(object)) {
        const index = (object.value as Map<string, Value>).get('index0')!.value as number;
        return kit.fn((args) => {
          if (args.length === 0) throw new TypeError('no items for cycling given');
          return args[index % args.length];
        });
      }
      return object.builtins.get(name);
    }
    if (isSequence(object) && property.type === 'IntegerValue') return (object.value as Value[]).at(property.value);
    return name === null ? undefined : object.builtins.get(name);
  };

  /** The `loop` of a for loop (the library's loop object is a plain dict of these keys). */
  const isLoop = (object: Value) => ['index0', 'revindex0', 'first', 'last', 'length', 'previtem', 'nextitem'].every((k) => object.value.has(k));

  const pairs = (object: Value) => kit.array([...(object.value as Map<string, Value>)].map(([k, v]) => kit.tuple([kit.str(k), v])));

  /** A test with arguments (`x is divisibleby 3`, `x is in y`); one without goes to evaluateTestExpression. */
  const pyTest = (name: string, v: Value, args: Value[], scope: Environment): boolean => {
    const [arg] = args;
    if (args.length === 0) {
      const node = { type: 'TestExpression', operand: { type: READY, value: v }, negate: false, test: { type: 'Identifier', value: name } };
      return pyTruthy(interp.evaluateTestExpression(node, scope));
    }
    if (args.length > 1) throw new TypeError(`the ${name} test takes one argument`);
    switch (name) {
      case 'eq': case 'equalto': return pyEquals(v, arg);
      case 'ne': return !pyEquals(v, arg);
      case 'lt': case 'lessthan': return pyCompare(v, arg) < 0;
      case 'le': return pyCompare(v, arg) <= 0;
      case 'gt': case 'greaterthan': return pyCompare(v, arg) > 0;
      case 'ge': return pyCompare(v, arg) >= 0;
      case 'in': return pyContains(arg, v);
      case 'sameas': return v.type === arg.type && (isSequence(v) || isMapping(v) ? v.value === arg.value : pyEquals(v, arg));
      case 'divisibleby':
        if (!isNumberLike(v) || !isNumberLike(arg)) throw new TypeError('divisibleby needs numbers');
        if (Number(arg.value) === 0) throw new Error('integer division or modulo by zero');
        return Number(v.value) % Number(arg.value) === 0;
      default: throw new Error(`Unknown test with an argument: ${name}`);
    }
  };

  interp.evaluateTestExpression = (node, scope) => {
    const name: string = node.test.value;
    if (name !== 'iterable' && name !== 'number' && name !== 'float') return base.evaluateTestExpression.call(interp, node, scope);
    const v = interp.evaluate(node.operand, scope);
    const result =
      name === 'iterable'
        ? isSequence(v) || isMapping(v) || v.type === 'StringValue' || v.type === 'UndefinedValue'
        : name === 'number'
          ? isNumberLike(v)
          : v.type === 'FloatValue';
    return kit.bool(node.negate ? !result : result);
  };

  // The loop runs over what Python iterates: a string's characters, an undefined value's nothing (the
  // else block runs), tuples unpacked as lists are; the library's loop does the rest.
  interp.evaluateFor = (node, scope) => {
    forBodies.add(node.body);
    const select = node.iterable.type === 'SelectExpression';
    const ready = { type: READY, value: pyIterable(interp.evaluate(select ? node.iterable.lhs : node.iterable, scope)) };
    return base.evaluateFor.call(interp, { ...node, iterable: select ? { ...node.iterable, lhs: ready } : ready }, scope);
  };

  const pyIterable = (v: Value): Value => {
    if (v.type === 'StringValue') return kit.array([...(v.value as string)].map(kit.str));
    if (v.type === 'UndefinedValue') return kit.array([]);
    if (isSequence(v)) return kit.array((v.value as Value[]).map((item) => (item.type === 'TupleValue' ? kit.tuple(item.value) : item)));
    if (isMapping(v)) return v;
    throw new TypeError(`'${v.type}' object is not iterable`);
  };

  interp.applyFilter = (operand, filter, scope) => {
    const name: string = filter.type === 'Identifier' ? filter.value : filter.type === 'CallExpression' ? (filter.callee?.value ?? '') : '';
    const args = (): [Value[], Map<string, Value>] => (filter.type === 'CallExpression' ? interp.evaluateArguments(filter.args, scope) : [[], new Map()]);
    switch (name) {
      case 'tojson':
        return kit.str(pyJsonDumps(operand, jsonOptions(...args())));
      case 'string':
        return kit.str(pyStr(operand));
      case 'trim': {
        const [pos, kw] = args();
        return kit.str(pyStrip(pyStr(operand), optionalString(pos[0] ?? kw.get('chars'), 'chars')));
      }
      case 'capitalize':
        return kit.str(pyCapitalize(pyStr(operand)));
      case 'replace': {
        const [pos, kw] = args();
        const count = pos[2] ?? kw.get('count');
        return kit.str(pyReplace(pyStr(operand), stringArg(pos[0] ?? kw.get('old'), 'old'), stringArg(pos[1] ?? kw.get('new'), 'new'), count === undefined || count.type === 'NullValue' ? -1 : Number(count.value)));
      }
      case 'indent': {
        // The library's, once the size it would make is known to fit: a wide indent on many lines multiplies.
        const [pos, kw] = args();
        const width = pos[0] ?? kw.get('width');
        const text = pyStr(operand);
        if (width?.type === 'IntegerValue') checkStringLength(text.length + Math.max(0, width.value) * (text.split('\n').length));
        if (width?.type === 'StringValue') checkStringLength(text.length + width.value.length * (text.split('\n').length));
        break;
      }
      case 'format': {
        const [pos, kw] = args(); // Jinja2: fmt % args, or fmt % kwargs
        if (pos.length > 0 && kw.size > 0) throw new Error("can't handle positional and keyword arguments at the same time");
        return kit.str(pyPercentFormat(pyStr(operand), kw.size > 0 ? kit.dict(kw) : kit.tuple(pos)));
      }
      case 'upper':
      case 'lower': // of str(x): none | upper is 'NONE'
        return kit.str(name === 'upper' ? pyStr(operand).toUpperCase() : pyStr(operand).toLowerCase());
      case 'int':
        if (operand.type === 'FloatValue' && filter.type === 'Identifier') return kit.int(Math.trunc(operand.value)); // int() truncates
        break;
      case 'title':
        return kit.str(jinjaTitleFilter(pyStr(operand)));
      case 'length':
      case 'count':
        if (operand.type === 'StringValue') return kit.int(pyLength(operand.value));
        if (operand.type === 'UndefinedValue') return kit.int(0);
        if (isSequence(operand)) return kit.int(operand.value.length);
        if (isMapping(operand)) return kit.int(operand.value.size);
        break;
      case 'join': {
        const [pos, kw] = args();
        const attribute = pos[1] ?? kw.get('attribute');
        const items = (pyIterable(operand).value as Value[]).map((v) => (attribute === undefined ? v : attributeOf(v, attribute)));
        return kit.str(checkedJoin(items.map(pyStr), optionalString(pos[0] ?? kw.get('d'), 'd') ?? ''));
      }
      case 'items':
        if (isMapping(operand)) return pairs(operand);
        if (operand.type === 'UndefinedValue') return kit.array([]);
        break;
      case 'round': {
        const [pos, kw] = args();
        const precision = pos[0] ?? kw.get('precision');
        const method = optionalString(pos[1] ?? kw.get('method'), 'method') ?? 'common';
        const digits = precision === undefined ? 0 : Number(precision.value);
        if (!isNumberLike(operand)) throw new TypeError(`type ${operand.type} doesn't define __round__ method`);
        if (!['common', 'ceil', 'floor'].includes(method)) throw new TypeError('method must be common, ceil or floor');
        const x = Number(operand.value);
        if (method === 'common') return operand.type === 'FloatValue' ? kit.float(pyRoundFloat(x, digits)) : kit.int(digits >= 0 ? x : pyRoundFloat(x, digits));
        const scale = 10 ** digits;
        return kit.float((method === 'ceil' ? Math.ceil(x * scale) : Math.floor(x * scale)) / scale);
      }
      case 'max':
      case 'min':
      case 'unique': {
        const [pos, kw] = args();
        const caseSensitive = pyTruthy(pos[0] ?? kw.get('case_sensitive') ?? kit.bool(false));
        const attribute = pos[1] ?? kw.get('attribute');
        const items = [...(pyIterable(operand).value as Value[])];
        const key = (v: Value) => {
          const k = attribute === undefined ? v : attributeOf(v, attribute);
          return !caseSensitive && k.type === 'StringValue' ? kit.str(k.value.toLowerCase()) : k;
        };
        if (name === 'unique') {
          const seen: Value[] = [];
          return kit.array(items.filter((v) => {
            const k = key(v);
            if (seen.some((s) => pyEquals(s, k))) return false;
            seen.push(k);
            return true;
          }));
        }
        if (items.length === 0) return kit.undef();
        const better = name === 'max' ? (order: number) => order > 0 : (order: number) => order < 0;
        return items.reduce((best, v) => (better(pyCompare(key(v), key(best))) ? v : best));
      }
      case 'sum': {
        const [pos, kw] = args();
        const attribute = pos[0] ?? kw.get('attribute');
        let total = pos[1] ?? kw.get('start') ?? kit.int(0);
        for (const v of pyIterable(operand).value as Value[]) {
          const x = attribute === undefined ? v : attributeOf(v, attribute);
          if (!isNumberLike(x) || !isNumberLike(total)) throw new TypeError(`unsupported operand type(s) for +: ${total.type} and ${x.type}`);
          const sum = Number(total.value) + Number(x.value);
          total = total.type === 'FloatValue' || x.type === 'FloatValue' ? kit.float(sum) : kit.int(sum);
        }
        return total;
      }
      case TEST: {
        const [[test, negate, ...rest]] = args();
        const result = pyTest(test.value, operand, rest, scope);
        return kit.bool(negate.value ? !result : result);
      }
      case 'select':
      case 'reject':
      case 'selectattr':
      case 'rejectattr': {
        const [pos, kw] = args();
        if (kw.size > 0) break;
        const byAttribute = name.endsWith('attr');
        const [attribute, test, ...rest]: (Value | undefined)[] = byAttribute ? pos : [undefined, ...pos];
        if (byAttribute && attribute === undefined) throw new TypeError(`${name} needs an attribute`);
        const keep = name.startsWith('select');
        return kit.array((pyIterable(operand).value as Value[]).filter((item) => {
          const v = attribute === undefined ? item : attributeOf(item, attribute);
          return (test === undefined ? pyTruthy(v) : pyTest(stringArg(test, 'test'), v, rest as Value[], scope)) === keep;
        }));
      }
      case 'map': {
        const [pos, kw] = args();
        if (pos.length === 0) break; // map(attribute=...): the library's
        const [filterName, ...rest] = pos;
        const ready = (value: Value): Node => ({ type: READY, value });
        const callee: Node = { type: 'Identifier', value: stringArg(filterName, 'filter') };
        const keywords = [...kw].map(([key, value]): Node => ({ type: 'KeywordArgumentExpression', key: { type: 'Identifier', value: key }, value: ready(value) }));
        const call = rest.length + keywords.length === 0 ? callee : { type: 'CallExpression', callee, args: [...rest.map(ready), ...keywords] };
        return kit.array((pyIterable(operand).value as Value[]).map((item) => interp.applyFilter(item, call, scope)!));
      }
      case 'wordcount':
        return kit.int(pyStr(operand).match(/[\p{L}\p{N}_]+/gu)?.length ?? 0); // Python's \w+
      case 'reverse':
        if (operand.type === 'StringValue') return kit.str([...(operand.value as string)].reverse().join(''));
        if (isSequence(operand)) return kit.array([...operand.value].reverse());
        break;
      case 'dictsort': {
        const sorted = base.applyFilter.call(interp, operand, filter, scope)!;
        for (const pair of sorted.value as Value[]) pair.pyTuple = true;
        return sorted;
      }
      case 'list':
        if (operand.type === 'StringValue') return kit.array([...(operand.value as string)].map(kit.str));
        if (isMapping(operand)) return kit.array([...(operand.value as Map<string, Value>).keys()].map(kit.str));
        if (isSequence(operand)) return kit.array([...operand.value]);
        break;
      case 'first':
      case 'last':
        if (isSequence(operand) || operand.type === 'StringValue') {
          const items = operand.type === 'StringValue' ? [...(operand.value as string)].map(kit.str) : (operand.value as Value[]);
          return (name === 'first' ? items[0] : items.at(-1)) ?? kit.undef();
        }
        break;
    }
    return base.applyFilter.call(interp, operand, filter, scope) ?? kit.undef();
  };

  /** Jinja2's attribute= of filters: an attribute or item, dotted names and integer parts going deeper. */
  const attributeOf = (v: Value, attribute: Value): Value => {
    const path = attribute.type === 'IntegerValue' ? [attribute] : String(attribute.value).split('.').map((p) => (/^\d+$/.test(p) ? kit.int(Number(p)) : kit.str(p)));
    return path.reduce((x, p) => member(x, p) ?? kit.undef(), v);
  };

  return interp;
}
