// Python's way of turning values into text, for chat templates. Templates are written for Python
// Jinja2 (transformers' apply_chat_template), where `{{ x }}` is str(x), a list prints as its repr,
// tojson is json.dumps and strip() trims Python's whitespace; @huggingface/jinja prints values the
// JavaScript way (`true`, JSON lists, `1e-5` as `0.00001`). jinja-runtime.ts uses these functions
// (Python's str methods, comparisons, round, json.dumps, strftime) where the two differ, so a
// prompt renders to the bytes transformers produces.
//
// Values are @huggingface/jinja runtime values, read by their `type` name only. What may take much
// work in one step (repr, json.dumps, padding) counts it against the render's budget.
import { checkStringLength, spend } from './render-budget.ts';

/** A @huggingface/jinja runtime value (IntegerValue, StringValue, ObjectValue, ...). */
export interface JinjaValue {
  type: string;
  value: any; // each type holds its own kind of value
  /** A list that Python holds as a tuple (dict items: an ArrayValue, so that `for k, v in` unpacks it). */
  pyTuple?: boolean;
  /** An undefined value's UndefinedError message (what was missing where). */
  pyHint?: string;
}

/** A runtime value as the interpreter holds it (with its methods and attributes, `builtins`). */
export type Value = JinjaValue & { readonly builtins: ReadonlyMap<string, Value> };

/** Makers of runtime values (the library exports no value classes: they come from values it makes). */
export interface Kit {
  from(x: unknown): Value;
  str(s: string): Value;
  int(n: number): Value;
  float(n: number): Value;
  bool(b: boolean): Value;
  undef(): Value;
  array(items: Value[]): Value;
  tuple(items: Value[]): Value;
  dict(entries: Map<string, Value>): Value;
  fn(f: (args: Value[]) => Value): Value;
}

/** Python's str.isspace() characters: JavaScript's \s without U+FEFF, plus U+001C..U+001F and U+0085. */
const PY_SPACE = '\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';

export function isPySpace(ch: string): boolean {
  return PY_SPACE.includes(ch);
}

/** str.strip / lstrip / rstrip: `chars` null or undefined strips whitespace. */
export function pyStrip(s: string, chars?: string | null, side: 'both' | 'left' | 'right' = 'both'): string {
  const cps = Array.from(s);
  const strip = chars == null ? isPySpace : (ch: string) => chars.includes(ch);
  let start = 0;
  let end = cps.length;
  if (side !== 'right') while (start < end && strip(cps[start])) start++;
  if (side !== 'left') while (end > start && strip(cps[end - 1])) end--;
  return cps.slice(start, end).join('');
}

/** str.split(sep=None, maxsplit=-1). */
export function pySplit(s: string, sep: string | null, maxsplit: number): string[] {
  if (sep !== null) {
    if (sep === '') throw new Error('empty separator');
    const parts = s.split(sep);
    return maxsplit >= 0 && parts.length > maxsplit + 1 ? [...parts.slice(0, maxsplit), parts.slice(maxsplit).join(sep)] : parts;
  }
  const cps = Array.from(s);
  const out: string[] = [];
  let i = 0;
  for (;;) {
    while (i < cps.length && isPySpace(cps[i])) i++;
    if (i >= cps.length) return out;
    if (maxsplit >= 0 && out.length === maxsplit) {
      out.push(cps.slice(i).join(''));
      return out;
    }
    const start = i;
    while (i < cps.length && !isPySpace(cps[i])) i++;
    out.push(cps.slice(start, i).join(''));
  }
}

/** str.capitalize(): the first character upper case, the rest lower case. */
export function pyCapitalize(s: string): string {
  const [first = '', ...rest] = Array.from(s);
  return first.toUpperCase() + rest.join('').toLowerCase();
}

/** str.title(): a cased letter after an uncased character upper case, other cased letters lower case. */
export function pyTitle(s: string): string {
  let out = '';
  let previousCased = false;
  for (const ch of s) {
    const cased = /[\p{Lu}\p{Ll}\p{Lt}]/u.test(ch);
    out += cased ? (previousCased ? ch.toLowerCase() : ch.toUpperCase()) : ch;
    previousCased = cased;
  }
  return out;
}

/** Jinja2's `title` filter: words split at runs of -, whitespace and opening brackets. */
export function jinjaTitleFilter(s: string): string {
  return s
    .split(/([-\s({[<]+)/u)
    .filter((item) => item !== '')
    .map((item) => {
      const [first, ...rest] = Array.from(item);
      return first.toUpperCase() + rest.join('').toLowerCase();
    })
    .join('');
}

/** Length in code points, as Python's len(str). */
export function pyLength(s: string): number {
  return [...s].length;
}

/** repr(float): the shortest digits that read back, exponent form below 1e-4 and from 1e16. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const [mantissa, expText] = Math.abs(x).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  return `${sign}${digits.slice(0, exp + 1).padEnd(exp + 1, '0')}.${digits.slice(exp + 1) || '0'}`;
}

/** str(int). Integers past 2^53 print the double's exact value (JSON numbers arrive as doubles). */
export function pyIntStr(n: number): string {
  if (Number.isSafeInteger(n)) return String(n);
  return Number.isFinite(n) && Number.isInteger(n) ? BigInt(n).toString() : pyFloatRepr(n);
}

const NOT_PRINTABLE = /^[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]$/u;

/** repr(str): single quotes unless the text has ' and no ", escapes for what str.isprintable() rejects. */
export function pyStringRepr(s: string): string {
  spend(s.length + 2);
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    if (ch === quote || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch !== ' ' && NOT_PRINTABLE.test(ch)) {
      const cp = ch.codePointAt(0)!;
      out += cp < 0x100 ? `\\x${hex(cp, 2)}` : cp < 0x10000 ? `\\u${hex(cp, 4)}` : `\\U${hex(cp, 8)}`;
    } else out += ch;
  }
  return out + quote;
}

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}

function entries(v: JinjaValue): [string, JinjaValue][] {
  return [...(v.value as Map<string, JinjaValue>).entries()];
}

export function isMapping(v: JinjaValue): boolean {
  return v.type === 'ObjectValue' || v.type === 'KeywordArgumentsValue';
}

/** repr(x) of a template value. */
export function pyRepr(v: JinjaValue): string {
  spend(1);
  switch (v.type) {
    case 'StringValue':
      return pyStringRepr(v.value);
    case 'NullValue':
      return 'None';
    case 'UndefinedValue':
      return 'Undefined';
    case 'BooleanValue':
      return v.value ? 'True' : 'False';
    case 'IntegerValue':
      return pyIntStr(v.value);
    case 'FloatValue':
      return pyFloatRepr(v.value);
    case 'ArrayValue':
    case 'TupleValue': {
      const items = (v.value as JinjaValue[]).map(pyRepr);
      if (v.type === 'ArrayValue' && !v.pyTuple) return `[${items.join(', ')}]`;
      return `(${items.join(', ')}${items.length === 1 ? ',' : ''})`;
    }
    case 'NamespaceValue':
      return `<Namespace {${entries(v).map(([k, x]) => `${pyStringRepr(k)}: ${pyRepr(x)}`).join(', ')}}>`;
    default:
      if (isMapping(v)) return `{${entries(v).map(([k, x]) => `${pyStringRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
      return `<${v.type}>`;
  }
}

/** str(x) as Jinja2 prints it: strings as they are, undefined as nothing, the rest as repr. */
export function pyStr(v: JinjaValue): string {
  if (v.type === 'StringValue') return v.value;
  if (v.type === 'UndefinedValue') return '';
  return pyRepr(v);
}

/** Python's truth value of a template value. */
export function pyTruthy(v: JinjaValue): boolean {
  switch (v.type) {
    case 'NullValue':
    case 'UndefinedValue':
      return false;
    case 'ArrayValue':
    case 'TupleValue':
      return v.value.length > 0;
    case 'ObjectValue':
    case 'KeywordArgumentsValue':
      return v.value.size > 0;
    case 'NamespaceValue':
    case 'FunctionValue':
      return true;
    default:
      return Boolean(v.value);
  }
}

export function isSequence(v: JinjaValue): boolean {
  return v.type === 'ArrayValue' || v.type === 'TupleValue';
}

export function isNumberLike(v: JinjaValue): boolean {
  return v.type === 'IntegerValue' || v.type === 'FloatValue' || v.type === 'BooleanValue';
}

/** Python's ==: numbers (and bools) by value, lists and dicts by contents, a list never equal to a tuple. */
export function pyEquals(a: JinjaValue, b: JinjaValue): boolean {
  if (isNumberLike(a) && isNumberLike(b)) return Number(a.value) === Number(b.value);
  if (isMapping(a) && isMapping(b)) {
    const x = a.value as Map<string, JinjaValue>;
    const y = b.value as Map<string, JinjaValue>;
    if (x.size !== y.size) return false;
    for (const [k, v] of x) if (!y.has(k) || !pyEquals(v, y.get(k)!)) return false;
    return true;
  }
  if (a.type !== b.type) return false;
  if (a.type === 'ArrayValue' || a.type === 'TupleValue') {
    const x = a.value as JinjaValue[];
    const y = b.value as JinjaValue[];
    return x.length === y.length && x.every((v, i) => pyEquals(v, y[i]));
  }
  if (a.type === 'NullValue' || a.type === 'UndefinedValue') return true;
  return a.value === b.value;
}

/** Python's ordering of two values (numbers, strings by code point, lists item by item); TypeError otherwise. */
export function pyCompare(a: JinjaValue, b: JinjaValue): number {
  if (isNumberLike(a) && isNumberLike(b)) return Number(a.value) - Number(b.value);
  if (a.type === 'StringValue' && b.type === 'StringValue') return compareCodePoints(a.value, b.value);
  if (isSequence(a) && isSequence(b)) {
    const [x, y] = [a.value as JinjaValue[], b.value as JinjaValue[]];
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (!pyEquals(x[i], y[i])) return pyCompare(x[i], y[i]);
    return x.length - y.length;
  }
  throw new TypeError(`'<' not supported between instances of ${a.type} and ${b.type}`);
}

/** transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False). */
export function jsonOptions(pos: JinjaValue[], kw: Map<string, JinjaValue>) {
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
    const items = isSequence(separators) ? (separators.value as JinjaValue[]) : [];
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

/** Python's `item in container`. */
export function pyContains(container: JinjaValue, item: JinjaValue): boolean {
  if (container.type === 'StringValue') {
    if (item.type !== 'StringValue') throw new TypeError("'in <string>' requires string as left operand");
    return container.value.includes(item.value);
  }
  if (isSequence(container)) return (container.value as JinjaValue[]).some((x) => pyEquals(x, item));
  if (isMapping(container)) return item.type === 'StringValue' && container.value.has(item.value);
  throw new TypeError(`argument of type '${container.type}' is not iterable`);
}

export interface JsonDumpsOptions {
  ensureAscii?: boolean;
  /** null: one line; otherwise each level indented by this text (json.dumps indent=N is N spaces). */
  indent?: string | null;
  /** [item separator, key separator]; default [', ', ': '], or [',', ': '] with an indent. */
  separators?: [string, string] | null;
  sortKeys?: boolean;
}

/** Code point order (Python's string comparison), where JavaScript compares UTF-16 units. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      const fix = (c: number) => (c >= 0xd800 && c <= 0xdfff ? c + 0x2000 : c >= 0xe000 ? c - 0x800 : c);
      return fix(x) - fix(y);
    }
  }
  return a.length - b.length;
}

const JSON_ESCAPES: Record<string, string> = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f' };

function jsonString(s: string, ensureAscii: boolean): string {
  spend(s.length + 2);
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    const code = s.charCodeAt(i);
    const escape = JSON_ESCAPES[ch];
    if (escape) out += escape;
    else if (code < 0x20 || (ensureAscii && code > 0x7e)) out += `\\u${hex(code, 4)}`;
    else out += ch;
  }
  return out + '"';
}

/** Jinja2's object_type_repr: dict object, list object, None. */
export function pyTypeRepr(v: JinjaValue): string {
  const names: Record<string, string> = {
    NullValue: 'None', StringValue: 'str object', IntegerValue: 'int object', FloatValue: 'float object', BooleanValue: 'bool object',
    ObjectValue: 'dict object', NamespaceValue: 'jinja2.utils.Namespace object', FunctionValue: 'function object',
  };
  if (v.type === 'ArrayValue' || v.type === 'TupleValue') return v.pyTuple || v.type === 'TupleValue' ? 'tuple object' : 'list object';
  return names[v.type] ?? 'object';
}

function pyTypeName(v: JinjaValue): string {
  const names: Record<string, string> = { UndefinedValue: 'Undefined', NamespaceValue: 'Namespace', FunctionValue: 'function' };
  return names[v.type] ?? v.type;
}

/** json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...). */
export function pyJsonDumps(v: JinjaValue, options: JsonDumpsOptions = {}): string {
  const indent = options.indent ?? null;
  const [itemSep, keySep] = options.separators ?? (indent === null ? [', ', ': '] : [',', ': ']);
  const ensureAscii = options.ensureAscii ?? false;
  const encode = (x: JinjaValue, level: number): string => {
    spend(indent === null ? 1 : 1 + indent.length * (level + 1));
    switch (x.type) {
      case 'NullValue':
        return 'null';
      case 'BooleanValue':
        return x.value ? 'true' : 'false';
      case 'IntegerValue':
        return pyIntStr(x.value);
      case 'FloatValue':
        if (Number.isNaN(x.value)) return 'NaN';
        if (!Number.isFinite(x.value)) return x.value > 0 ? 'Infinity' : '-Infinity';
        return pyFloatRepr(x.value);
      case 'StringValue':
        return jsonString(x.value, ensureAscii);
    }
    let items: string[];
    let open: string;
    let close: string;
    if (x.type === 'ArrayValue' || x.type === 'TupleValue') {
      items = (x.value as JinjaValue[]).map((item) => encode(item, level + 1));
      [open, close] = ['[', ']'];
    } else if (isMapping(x)) {
      const pairs = entries(x);
      if (options.sortKeys) pairs.sort(([a], [b]) => compareCodePoints(a, b));
      items = pairs.map(([k, item]) => jsonString(k, ensureAscii) + keySep + encode(item, level + 1));
      [open, close] = ['{', '}'];
    } else {
      throw new TypeError(`Object of type ${pyTypeName(x)} is not JSON serializable`);
    }
    if (items.length === 0) return open + close;
    if (indent === null) return open + items.join(itemSep) + close;
    const inner = '\n' + indent.repeat(level + 1);
    return open + inner + items.join(itemSep + inner) + '\n' + indent.repeat(level) + close;
  };
  return encode(v, 0);
}

const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

/**
 * datetime.strftime in the C locale (English names), local time, for the directives chat templates
 * use; glibc's `-` flag drops the padding. Other directives stay as written.
 */
export function pyStrftime(date: Date, format: string): string {
  const pad = (n: number, width = 2, fill = '0') => String(n).padStart(width, fill);
  const dayOfYear = Math.round((Date.UTC(date.getFullYear(), date.getMonth(), date.getDate()) - Date.UTC(date.getFullYear(), 0, 1)) / 86400000) + 1;
  const hour12 = date.getHours() % 12 === 0 ? 12 : date.getHours() % 12;
  return format.replace(/%(-?)([a-zA-Z%])/g, (whole, flag: string, d: string) => {
    const num = (n: number, width = 2, fill = '0') => (flag ? String(n) : pad(n, width, fill));
    switch (d) {
      case 'a': return DAYS[date.getDay()].slice(0, 3);
      case 'A': return DAYS[date.getDay()];
      case 'b': case 'h': return MONTHS[date.getMonth()].slice(0, 3);
      case 'B': return MONTHS[date.getMonth()];
      case 'c': return pyStrftime(date, '%a %b %e %H:%M:%S %Y');
      case 'd': return num(date.getDate());
      case 'e': return num(date.getDate(), 2, ' ');
      case 'H': return num(date.getHours());
      case 'I': return num(hour12);
      case 'j': return num(dayOfYear, 3);
      case 'm': return num(date.getMonth() + 1);
      case 'M': return num(date.getMinutes());
      case 'p': return date.getHours() < 12 ? 'AM' : 'PM';
      case 'S': return num(date.getSeconds());
      case 'y': return num(date.getFullYear() % 100);
      case 'Y': return String(date.getFullYear());
      case 'u': return String(date.getDay() === 0 ? 7 : date.getDay());
      case 'w': return String(date.getDay());
      case 'D': case 'x': return pyStrftime(date, '%m/%d/%y');
      case 'F': return pyStrftime(date, '%Y-%m-%d');
      case 'T': case 'X': return pyStrftime(date, '%H:%M:%S');
      case 'R': return pyStrftime(date, '%H:%M');
      case 'Z': case 'z': return ''; // datetime.now() is naive: no zone
      case 'n': return '\n';
      case 't': return '\t';
      case '%': return '%';
      default: return whole;
    }
  });
}

/** Python's slice bounds of `length` items: start and end clamped, negatives from the end. */
function sliceBounds(length: number, start?: number | null, end?: number | null): [number, number] {
  const at = (i: number) => (i < 0 ? Math.max(0, length + i) : Math.min(i, length));
  return [start == null ? 0 : at(start), end == null ? length : at(end)];
}

/** str.find / str.rfind(sub, start, end): the code point index of `sub`, or -1. */
export function pyFind(s: string, sub: string, start: number | null, end: number | null, fromRight: boolean): number {
  const cps = Array.from(s);
  const [from, to] = sliceBounds(cps.length, start, end);
  if (from > to) return -1;
  const part = cps.slice(from, to).join('');
  const at = fromRight ? part.lastIndexOf(sub) : part.indexOf(sub);
  return at < 0 ? -1 : from + pyLength(part.slice(0, at));
}

/** str.startswith / str.endswith(prefix or tuple of prefixes, start, end). */
export function pyAffix(s: string, affixes: string[], start: number | null, end: number | null, atEnd: boolean): boolean {
  const cps = Array.from(s);
  const [from, to] = sliceBounds(cps.length, start, end);
  if (from > cps.length) return false;
  const part = from > to ? '' : cps.slice(from, to).join('');
  return affixes.some((a) => (atEnd ? part.endsWith(a) : part.startsWith(a)));
}

/** str.count(sub): non-overlapping occurrences. */
export function pyCount(s: string, sub: string): number {
  return sub === '' ? pyLength(s) + 1 : s.split(sub).length - 1;
}

/** str.rsplit(sep=None, maxsplit=-1): str.split from the right. */
export function pyRsplit(s: string, sep: string | null, maxsplit: number): string[] {
  const reverse = (t: string) => Array.from(t).reverse().join('');
  return pySplit(reverse(s), sep === null ? null : reverse(sep), maxsplit).map(reverse).reverse();
}

/** The str.isdigit / isalpha / isalnum / isspace / isupper / islower tests (false for ''). */
export function pyStringTest(s: string, name: string): boolean | undefined {
  const all = (re: RegExp) => s !== '' && Array.from(s).every((ch) => re.test(ch));
  switch (name) {
    case 'isdigit': case 'isdecimal': return all(/\p{Nd}/u);
    case 'isnumeric': return all(/\p{N}/u);
    case 'isalpha': return all(/\p{L}/u);
    case 'isalnum': return all(/[\p{L}\p{N}]/u);
    case 'isspace': return s !== '' && Array.from(s).every(isPySpace);
    case 'isupper': return /[\p{Lu}\p{Lt}]/u.test(s) && !/\p{Ll}/u.test(s);
    case 'islower': return /\p{Ll}/u.test(s) && !/[\p{Lu}\p{Lt}]/u.test(s);
    default: return undefined;
  }
}

/** str.center / ljust / rjust(width, fillchar=' ') and str.zfill(width). */
export function pyPad(s: string, how: 'center' | 'ljust' | 'rjust' | 'zfill', width: number, fill = ' '): string {
  if (Array.from(fill).length !== 1) throw new TypeError('The fill character must be exactly one character long');
  checkStringLength(width);
  const pad = width - pyLength(s);
  if (pad <= 0) return s;
  if (how === 'ljust') return s + fill.repeat(pad);
  if (how === 'rjust') return fill.repeat(pad) + s;
  if (how === 'zfill') return s[0] === '+' || s[0] === '-' ? s[0] + '0'.repeat(pad) + s.slice(1) : '0'.repeat(pad) + s;
  const left = Math.floor(pad / 2) + (pad & width & 1);
  return fill.repeat(left) + s + fill.repeat(pad - left);
}

/** `format % values` for the conversions %s %r %d %i %f %x %%, with flags, width and precision; `%(name)s` takes a dict. */
export function pyPercentFormat(format: string, values: JinjaValue): string {
  const tuple = values.type === 'TupleValue' || (values.type === 'ArrayValue' && values.pyTuple);
  const items: JinjaValue[] = tuple ? values.value : [values];
  let next = 0;
  const out = format.replace(/%(\((\w+)\))?([-+ 0#]*)(\d+)?(?:\.(\d+))?(.)/gs, (_, _named, key: string | undefined, flags: string, width?: string, precision?: string, conversion?: string) => {
    if (conversion === '%') return '%';
    let v: JinjaValue | undefined;
    if (key !== undefined) v = isMapping(values) ? (values.value as Map<string, JinjaValue>).get(key) : undefined;
    else v = items[next++];
    if (v === undefined) throw new TypeError(key !== undefined ? `format requires a mapping with '${key}'` : 'not enough arguments for format string');
    const number = () => {
      if (!['IntegerValue', 'FloatValue', 'BooleanValue'].includes(v!.type)) throw new TypeError(`%${conversion} format: a real number is required, not ${v!.type}`);
      return Number(v!.value);
    };
    let text: string;
    switch (conversion) {
      case 's': text = pyStr(v); break;
      case 'r': text = pyRepr(v); break;
      case 'd': case 'i': text = pyIntStr(Math.trunc(number())); break;
      case 'f': case 'F': text = number().toFixed(precision === undefined ? 6 : Number(precision)); break;
      case 'x': text = Math.trunc(number()).toString(16); break;
      default: throw new Error(`unsupported format character '${conversion}'`);
    }
    if (conversion === 's' || conversion === 'r') text = precision === undefined ? text : Array.from(text).slice(0, Number(precision)).join('');
    else if (flags.includes('+') && !text.startsWith('-')) text = `+${text}`;
    checkStringLength(Number(width ?? 0));
    const pad = Number(width ?? 0) - pyLength(text);
    if (pad <= 0) return text;
    if (flags.includes('-')) return text + ' '.repeat(pad);
    if (flags.includes('0') && conversion !== 's' && conversion !== 'r') return /^[-+]/.test(text) ? text[0] + '0'.repeat(pad) + text.slice(1) : '0'.repeat(pad) + text;
    return ' '.repeat(pad) + text;
  });
  const named = /%\(\w+\)/.test(format);
  if (!named && next < items.length && !(items.length === 1 && isMapping(items[0]))) throw new TypeError('not all arguments converted during string formatting');
  return out;
}

/** str.swapcase(). */
export function pySwapcase(s: string): string {
  return Array.from(s, (ch) => (ch === ch.toUpperCase() ? ch.toLowerCase() : ch.toUpperCase())).join('');
}

/** Python's round(x, digits) of a float: the exact binary value rounded, ties to even. */
export function pyRoundFloat(x: number, digits: number): number {
  if (!Number.isFinite(x) || Math.abs(x) >= 1e21) return x;
  if (digits < 0) {
    const scale = 10 ** -digits;
    return pyRoundFloat(x / scale, 0) * scale;
  }
  const exact = Math.abs(x).toFixed(Math.min(100, digits + 30)); // exact to the digits that decide a tie
  const cut = exact.indexOf('.') + 1 + digits;
  const rest = exact.slice(cut);
  let kept = exact.slice(0, digits === 0 ? cut - 1 : cut);
  const lastDigit = Number(kept.at(-1));
  const up = rest[0] > '5' || (rest[0] === '5' && (/[1-9]/.test(rest.slice(1)) || lastDigit % 2 === 1));
  if (up) kept = incrementDecimal(kept);
  const value = Number(kept);
  return x < 0 ? -value : value;
}

function incrementDecimal(text: string): string {
  const chars = text.split('');
  for (let i = chars.length - 1; i >= 0; i--) {
    if (chars[i] === '.') continue;
    if (chars[i] !== '9') {
      chars[i] = String(Number(chars[i]) + 1);
      return chars.join('');
    }
    chars[i] = '0';
  }
  return '1' + chars.join('');
}
