// Chat templates: the Jinja a model ships (tokenizer_config.json `chat_template`, GGUF
// `tokenizer.chat_template`) turns a conversation into its prompt text. A model is trained on the
// exact bytes Hugging Face transformers' apply_chat_template renders, so this renders the same:
// Python Jinja2 in transformers' environment (trim_blocks, lstrip_blocks, loop controls, tojson as
// json.dumps, raise_exception, strftime_now) and its continue_final_message cut.
//
// The engine is @huggingface/jinja, imported on the first render (the base bundle stays without
// it). Where it behaves the JavaScript way and Python differs, the interpreter of each render has
// those steps replaced (jinja-python.ts): printing (True, None, Python lists and dicts, float
// repr), `~`, `==`, `/ // %`, `*` on strings, tojson, Python whitespace in strip/split/trim,
// string methods, the filters length, join, items, list, first, last, title, capitalize, the tests
// iterable and number, iterating an undefined value (no iterations), strftime_now (C locale).
//
// What cannot match: JSON numbers arrive as JavaScript numbers, so a request's `1.0` is the integer
// 1 (Python keeps the float 1.0: `{{ x }}` prints 1, tojson writes 1), integers past 2^53 are
// rounded, and an object's integer-like keys ("1", "42") come first in ascending order (JavaScript
// property order; Python keeps the request's order).
import {
  jinjaTitleFilter, pyCapitalize, pyEquals, pyJsonDumps, pyLength, pySplit, pyStr, pyStrftime, pyStrip, pyTitle, pyTruthy,
  type JinjaValue,
} from './jinja-python.ts';

/** tokenizer_config.json `chat_template` (a string → {default: s}; a list of {name, template} → by name) → templates by name; anything else → {}. */
export function chatTemplatesFrom(value: unknown): Record<string, string> {
  if (typeof value === 'string') return { default: value };
  const out: Record<string, string> = {};
  if (!Array.isArray(value)) return out;
  for (const entry of value) {
    if (entry && typeof entry === 'object' && typeof entry.name === 'string' && typeof entry.template === 'string') {
      out[entry.name] = entry.template;
    }
  }
  return out;
}

/** transformers' choice: with tools and a 'tool_use' template → it; else 'default'; else, when there is exactly one, that one; else null. */
export function pickChatTemplate(templates: Readonly<Record<string, string>>, withTools: boolean): string | null {
  if (withTools && Object.hasOwn(templates, 'tool_use')) return templates.tool_use;
  if (Object.hasOwn(templates, 'default')) return templates.default;
  const names = Object.keys(templates);
  return names.length === 1 ? templates[names[0]] : null;
}

export interface ChatTemplateInput {
  /** Already normalized by the API layer (content strings, tool_calls with arguments as objects, ...). */
  messages: readonly Record<string, unknown>[];
  /** null → the template sees `tools` as none (transformers passes tools=None). */
  tools: readonly unknown[] | null;
  addGenerationPrompt: boolean;
  /**
   * transformers' continue_final_message: the text ends right after the final message's content
   * (no end-of-turn), for the model to continue it. With addGenerationPrompt: ChatTemplateError.
   */
  continueFinalMessage: boolean;
  /** bos_token, eos_token, unk_token, pad_token, ... as variables. */
  specialTokens: Readonly<Record<string, unknown>>;
  /** chat_template_kwargs: extra variables (they override special tokens; messages, tools, documents, add_generation_prompt are refused). */
  variables?: Readonly<Record<string, unknown>>;
  /** The time strftime_now reports, in local time (default: now). */
  now?: Date;
}

/** Bad template syntax, raise_exception(msg) (message kept), continue_final_message problems, anything the renderer throws. */
export class ChatTemplateError extends Error {
  override name = 'ChatTemplateError';
}

const RESERVED = ['messages', 'tools', 'documents', 'add_generation_prompt'];

/** The prompt text of a conversation, as transformers' apply_chat_template(..., tokenize=False) returns it. */
export async function renderChatTemplate(template: string, input: ChatTemplateInput): Promise<string> {
  if (input.continueFinalMessage && input.addGenerationPrompt) {
    throw new ChatTemplateError(
      'continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.',
    );
  }
  for (const name of RESERVED) {
    if (input.variables && Object.hasOwn(input.variables, name)) throw new ChatTemplateError(`chat_template_kwargs cannot set '${name}'`);
  }
  const runtime = await loadRuntime();
  const program = compile(runtime, template);
  let rendered: string;
  try {
    const env = templateEnvironment(runtime, input);
    rendered = (createInterpreter(runtime, env).run(program) as JinjaValue).value;
  } catch (err) {
    if (err instanceof ChatTemplateError) throw err;
    throw new ChatTemplateError(`Chat template rendering failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  return input.continueFinalMessage ? cutAfterFinalMessage(rendered, input.messages) : rendered;
}

/** Throws a ChatTemplateError when `template` does not parse (to refuse a bad template at load). */
export async function checkChatTemplate(template: string): Promise<void> {
  compile(await loadRuntime(), template);
}

/** transformers' continue_final_message: cut after the final message's text (trimmed if the template trimmed it). */
function cutAfterFinalMessage(rendered: string, messages: readonly Record<string, unknown>[]): string {
  if (messages.length === 0) throw new ChatTemplateError('continue_final_message is set but there is no final message');
  let final = messages[messages.length - 1].content;
  if (Array.isArray(final)) {
    const block = [...final].reverse().find((b) => b && typeof b === 'object' && 'text' in b);
    if (!block) throw new ChatTemplateError('continue_final_message is set but we could not find any text to continue in the final message!');
    final = (block as { text: unknown }).text;
  }
  if (typeof final !== 'string') throw new ChatTemplateError('continue_final_message is set but the final message has no text content');
  const stripped = pyStrip(final);
  if (!rendered.includes(stripped)) {
    throw new ChatTemplateError(
      'continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.',
    );
  }
  const at = rendered.lastIndexOf(stripped);
  const leftStripped = pyStrip(final, null, 'left');
  if (rendered.slice(at, at + leftStripped.length) === final) return rendered.slice(0, at + leftStripped.length);
  return rendered.slice(0, at + stripped.length);
}

// ---- The engine ----

type JinjaModule = typeof import('@huggingface/jinja');
type Environment = InstanceType<JinjaModule['Environment']>;
type Value = JinjaValue & { readonly builtins: ReadonlyMap<string, Value> };
// The interpreter's AST nodes, read by field name.
type Node = { type: string; [field: string]: any };

/** The interpreter's own steps that a render replaces (private in its typings). */
interface Interpreter {
  run(program: unknown): Value;
  evaluate(node: Node | undefined, env: Environment): Value;
  evaluateBlock(statements: Node[], env: Environment): Value;
  evaluateBinaryExpression(node: Node, env: Environment): Value;
  evaluateMemberExpression(node: Node, env: Environment): Value;
  evaluateTestExpression(node: Node, env: Environment): Value;
  evaluateFor(node: Node, env: Environment): Value;
  applyFilter(operand: Value, filter: Node, env: Environment): Value | undefined;
  evaluateArguments(args: Node[], env: Environment): [Value[], Map<string, Value>];
}

/** Makers of runtime values (the library exports no value classes: they come from values it makes). */
interface Kit {
  from(x: unknown): Value;
  str(s: string): Value;
  int(n: number): Value;
  float(n: number): Value;
  bool(b: boolean): Value;
  undef(): Value;
  array(items: Value[]): Value;
  tuple(items: Value[]): Value;
  fn(f: (args: Value[]) => Value): Value;
}

interface Runtime {
  jinja: JinjaModule;
  kit: Kit;
}

let runtimePromise: Promise<Runtime> | undefined;

function loadRuntime(): Promise<Runtime> {
  runtimePromise ??= import('@huggingface/jinja').then(
    (jinja) => ({ jinja, kit: makeKit(jinja) }),
    (err) => {
      runtimePromise = undefined; // a failed chunk load may succeed on a later try
      throw err;
    },
  );
  return runtimePromise;
}

function makeKit(jinja: JinjaModule): Kit {
  const from = (x: unknown) => new jinja.Environment().set('x', x) as unknown as Value;
  const classOf = (x: unknown) => (from(x) as object).constructor as new (value: unknown) => Value;
  const [S, I, F, B, U, A, Fn] = ['', 1, 0.5, true, undefined, [], () => null].map(classOf);
  return {
    from,
    str: (s) => new S(s),
    int: (n) => new I(n),
    float: (n) => new F(n),
    bool: (b) => new B(b),
    undef: () => new U(undefined),
    array: (items) => new A(items),
    tuple: (items) => Object.assign(new A(items), { pyTuple: true }),
    fn: (f) => new Fn((args: Value[]) => f(args)),
  };
}

const CACHE_SIZE = 8;
const compiled = new Map<string, unknown>();

/** The parsed template, from a small cache of recent sources (most recently used last). */
function compile({ jinja }: Runtime, source: string): unknown {
  let program = compiled.get(source);
  if (program !== undefined) {
    compiled.delete(source);
  } else {
    try {
      // Jinja2 reads \r\n and \r as \n, in text and in string literals.
      program = new jinja.Template(source.replace(/\r\n?/g, '\n')).parsed;
    } catch (err) {
      throw new ChatTemplateError(`Chat template syntax error: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    }
    if (compiled.size >= CACHE_SIZE) compiled.delete(compiled.keys().next().value!);
  }
  compiled.set(source, program);
  return program;
}

function splitArgs(args: Value[]): [Value[], Map<string, Value>] {
  const last = args.at(-1);
  return last?.type === 'KeywordArgumentsValue' ? [args.slice(0, -1), last.value] : [args, new Map()];
}

function isSequence(v: Value): boolean {
  return v.type === 'ArrayValue' || v.type === 'TupleValue';
}

function isMapping(v: Value): boolean {
  return v.type === 'ObjectValue' || v.type === 'KeywordArgumentsValue';
}

function isNumberLike(v: Value): boolean {
  return v.type === 'IntegerValue' || v.type === 'FloatValue' || v.type === 'BooleanValue';
}

function optionalString(v: Value | undefined, what: string): string | null {
  if (v === undefined || v.type === 'NullValue') return null;
  if (v.type !== 'StringValue') throw new TypeError(`${what} must be a string or None`);
  return v.value;
}

/** Globals (as Jinja2 and transformers define them) in a parent scope, the render's variables above them. */
function templateEnvironment({ jinja, kit }: Runtime, input: ChatTemplateInput): Environment {
  const globals = new jinja.Environment();
  const now = input.now ?? new Date();
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
    const [start, stop, step] = n.length === 1 ? [0, n[0], 1] : [n[0], n[1], n[2] ?? 1];
    if (step === 0) throw new Error('range() arg 3 must not be zero');
    const count = Math.max(0, Math.ceil((stop - start) / step));
    if (count > 100_000) throw new Error('Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).');
    return kit.array(Array.from({ length: count }, (_, i) => kit.int(start + i * step)));
  });
  defineGlobal('dict', (args) => kit.from(Object.fromEntries(splitArgs(args)[1])));

  const env = new jinja.Environment(globals);
  const variables: Record<string, unknown> = {
    ...input.specialTokens,
    ...input.variables,
    messages: input.messages,
    tools: input.tools,
    documents: null,
    add_generation_prompt: input.addGenerationPrompt,
  };
  for (const [name, value] of Object.entries(variables)) env.variables.set(name, kit.from(value) as never);
  return env;
}

/** An interpreter for one render, its JavaScript-flavoured steps replaced by Python's. */
function createInterpreter({ jinja, kit }: Runtime, env: Environment): Interpreter {
  const interp = new jinja.Interpreter(env) as unknown as Interpreter;
  const base = jinja.Interpreter.prototype as unknown as Interpreter;

  // Output: str() of each value; a None printed by an expression is "None" (set, macro and comment print nothing).
  interp.evaluateBlock = (statements, scope) => {
    let out = '';
    for (const statement of statements) {
      const value = interp.evaluate(statement, scope);
      if (value.type !== 'NullValue') out += pyStr(value);
      else if (statement.type !== 'Set' && statement.type !== 'Macro' && statement.type !== 'Comment') out += 'None';
    }
    return kit.str(out);
  };

  interp.evaluateBinaryExpression = (node, scope) => {
    const op: string = node.operator.value;
    if (!['~', '==', '!=', '/', '//', '%', '*'].includes(op)) return base.evaluateBinaryExpression.call(interp, node, scope);
    const left = interp.evaluate(node.left, scope);
    const right = interp.evaluate(node.right, scope);
    if (op === '~') return kit.str(pyStr(left) + pyStr(right));
    if (op === '==') return kit.bool(pyEquals(left, right));
    if (op === '!=') return kit.bool(!pyEquals(left, right));
    if (op === '*') {
      const [text, times] = left.type === 'StringValue' ? [left, right] : [right, left];
      if (text.type === 'StringValue' && times.type === 'IntegerValue') return kit.str(text.value.repeat(Math.max(0, times.value)));
      if (isSequence(left) && right.type === 'IntegerValue') {
        return kit.array(Array.from({ length: Math.max(0, right.value) }, () => left.value as Value[]).flat());
      }
    }
    if (!isNumberLike(left) || !isNumberLike(right)) throw new TypeError(`unsupported operand type(s) for ${op}: ${left.type} and ${right.type}`);
    const a = Number(left.value);
    const b = Number(right.value);
    const float = left.type === 'FloatValue' || right.type === 'FloatValue';
    if (op === '*') return float ? kit.float(a * b) : kit.int(a * b);
    if (b === 0) throw new Error(op === '/' ? 'division by zero' : 'integer division or modulo by zero');
    if (op === '/') return kit.float(a / b);
    if (op === '//') return float ? kit.float(Math.floor(a / b)) : kit.int(Math.floor(a / b));
    let m = a % b; // Python: the remainder takes the divisor's sign
    if (m !== 0 && b < 0 !== m < 0) m += b;
    return float ? kit.float(m) : kit.int(m);
  };

  interp.evaluateMemberExpression = (node, scope) => {
    if (node.computed && node.property.type === 'SliceExpression') return base.evaluateMemberExpression.call(interp, node, scope);
    const object = interp.evaluate(node.object, scope);
    const property = node.computed
      ? interp.evaluate(node.property, scope)
      : node.property.type === 'IntegerLiteral'
        ? kit.int(node.property.value)
        : kit.str(node.property.value);
    return member(object, property) ?? kit.undef();
  };

  const member = (object: Value, property: Value): Value | undefined => {
    const name: string | null = property.type === 'StringValue' ? property.value : null;
    if (object.type === 'StringValue') {
      if (property.type === 'IntegerValue') {
        const chars = [...(object.value as string)];
        return chars.at(property.value) !== undefined ? kit.str(chars.at(property.value)!) : undefined;
      }
      return name === null ? undefined : (stringMethod(object.value, name) ?? object.builtins.get(name));
    }
    if (isMapping(object) || object.type === 'NamespaceValue') {
      if (name === null) return undefined;
      const own = (object.value as Map<string, Value>).get(name);
      if (own !== undefined || object.type === 'NamespaceValue') return own;
      if (name === 'items') return kit.fn(() => pairs(object));
      return object.builtins.get(name);
    }
    if (isSequence(object) && property.type === 'IntegerValue') return (object.value as Value[]).at(property.value);
    return name === null ? undefined : object.builtins.get(name);
  };

  const pairs = (object: Value) => kit.array([...(object.value as Map<string, Value>)].map(([k, v]) => kit.tuple([kit.str(k), v])));

  /** Python str methods where @huggingface/jinja's differ or are missing. */
  const stringMethod = (s: string, name: string): Value | undefined => {
    const method = (f: (pos: Value[], kw: Map<string, Value>) => Value) => kit.fn((args) => f(...splitArgs(args)));
    switch (name) {
      case 'strip':
      case 'lstrip':
      case 'rstrip': {
        const side = name === 'strip' ? 'both' : name === 'lstrip' ? 'left' : 'right';
        return method((pos, kw) => kit.str(pyStrip(s, optionalString(pos[0] ?? kw.get('chars'), `${name} arg`), side)));
      }
      case 'split':
        return method((pos, kw) => {
          const sep = optionalString(pos[0] ?? kw.get('sep'), 'sep');
          const max = pos[1] ?? kw.get('maxsplit');
          return kit.array(pySplit(s, sep, max?.type === 'IntegerValue' ? max.value : -1).map(kit.str));
        });
      case 'capitalize':
        return method(() => kit.str(pyCapitalize(s)));
      case 'title':
        return method(() => kit.str(pyTitle(s)));
      case 'join':
        return method(([items]) => {
          if (!items || !isSequence(items)) throw new TypeError('can only join an iterable');
          const texts = (items.value as Value[]).map((v, i) => {
            if (v.type !== 'StringValue') throw new TypeError(`sequence item ${i}: expected str instance`);
            return v.value as string;
          });
          return kit.str(texts.join(s));
        });
      default:
        return undefined;
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

  // Iterating an undefined value: no iterations, as Jinja2's Undefined iterates (the else block runs).
  interp.evaluateFor = (node, scope) => {
    try {
      return base.evaluateFor.call(interp, node, scope);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('Expected iterable or object type in for loop: got UndefinedValue')) throw err;
      return interp.evaluateBlock(node.defaultBlock, new jinja.Environment(scope));
    }
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
      case 'title':
        return kit.str(jinjaTitleFilter(pyStr(operand)));
      case 'length':
      case 'count':
        if (operand.type === 'StringValue') return kit.int(pyLength(operand.value));
        if (operand.type === 'UndefinedValue') return kit.int(0);
        if (isSequence(operand)) return kit.int(operand.value.length);
        if (isMapping(operand)) return kit.int(operand.value.size);
        break;
      case 'join':
        if (isSequence(operand)) {
          const [pos, kw] = args();
          if (!kw.has('attribute')) return kit.str((operand.value as Value[]).map(pyStr).join(optionalString(pos[0] ?? kw.get('d'), 'd') ?? ''));
        }
        break;
      case 'items':
        if (isMapping(operand)) return pairs(operand);
        if (operand.type === 'UndefinedValue') return kit.array([]);
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

  return interp;
}

/** transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False). */
function jsonOptions(pos: Value[], kw: Map<string, Value>) {
  const names = ['ensure_ascii', 'indent', 'separators', 'sort_keys'];
  for (const key of kw.keys()) if (!names.includes(key)) throw new TypeError(`tojson() got an unexpected keyword argument '${key}'`);
  const [ensureAscii, indent, separators, sortKeys] = names.map((n, i) => pos[i] ?? kw.get(n));
  let indentText: string | null = null;
  if (indent && indent.type !== 'NullValue') {
    if (indent.type === 'StringValue') indentText = indent.value;
    else if (indent.type === 'IntegerValue' || indent.type === 'BooleanValue') indentText = ' '.repeat(Math.max(0, Number(indent.value)));
    else throw new TypeError('tojson indent must be an integer, a string or None');
  }
  let seps: [string, string] | null = null;
  if (separators && separators.type !== 'NullValue') {
    const items = isSequence(separators) ? (separators.value as Value[]) : [];
    if (items.length !== 2 || items.some((s) => s.type !== 'StringValue')) throw new TypeError('tojson separators must be two strings');
    seps = [items[0].value, items[1].value];
  }
  return {
    ensureAscii: ensureAscii ? pyTruthy(ensureAscii) : false,
    indent: indentText,
    separators: seps,
    sortKeys: sortKeys ? pyTruthy(sortKeys) : false,
  };
}
