// Python's str methods on a string value of a chat template (`s.strip()`, `s.split(',')`, `s.find(x)`,
// ...), where @huggingface/jinja's differ or are missing, and the argument checks the runtime's
// methods and filters share.
import { checkStringLength } from './render-budget.ts';
import { isSequence, pyAffix, pyCapitalize, pyCount, pyFind, pyPad, pyRsplit, pySplit, pyStringTest, pyStrip, pySwapcase, pyTitle, type Kit, type Value } from './jinja-python.ts';

export function splitArgs(args: Value[]): [Value[], Map<string, Value>] {
  const last = args.at(-1);
  return last?.type === 'KeywordArgumentsValue' ? [args.slice(0, -1), last.value] : [args, new Map()];
}

export function stringArg(v: Value | undefined, what: string): string {
  if (v?.type !== 'StringValue') throw new TypeError(`${what} must be a string`);
  return v.value;
}

export function intArg(v: Value | undefined): number | null {
  if (v === undefined || v.type === 'NullValue') return null;
  if (v.type !== 'IntegerValue') throw new TypeError('slice indices must be integers or None');
  return v.value;
}

export function optionalString(v: Value | undefined, what: string): string | null {
  if (v === undefined || v.type === 'NullValue') return null;
  if (v.type !== 'StringValue') throw new TypeError(`${what} must be a string or None`);
  return v.value;
}

/** Python str methods where @huggingface/jinja's differ or are missing. */
export function stringMethod(kit: Kit, s: string, name: string): Value | undefined {
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
    case 'swapcase':
      return method(() => kit.str(pySwapcase(s)));
    case 'find':
    case 'rfind':
    case 'index':
    case 'rindex':
      return method(([sub, start, end]) => {
        const at = pyFind(s, stringArg(sub, 'sub'), intArg(start), intArg(end), name.startsWith('r'));
        if (at < 0 && name.endsWith('index')) throw new Error('substring not found');
        return kit.int(at);
      });
    case 'startswith':
    case 'endswith':
      return method(([affix, start, end]) => {
        const affixes = affix && isSequence(affix) ? (affix.value as Value[]).map((a) => stringArg(a, name)) : [stringArg(affix, name)];
        return kit.bool(pyAffix(s, affixes, intArg(start), intArg(end), name === 'endswith'));
      });
    case 'count':
      return method(([sub]) => kit.int(pyCount(s, stringArg(sub, 'sub'))));
    case 'partition':
    case 'rpartition':
      return method(([sep]) => {
        const text = stringArg(sep, 'sep');
        if (text === '') throw new Error('empty separator');
        const at = name === 'partition' ? s.indexOf(text) : s.lastIndexOf(text);
        const parts = at < 0 ? (name === 'partition' ? [s, '', ''] : ['', '', s]) : [s.slice(0, at), text, s.slice(at + text.length)];
        return kit.tuple(parts.map(kit.str));
      });
    case 'rsplit':
      return method((pos, kw) => {
        const max = pos[1] ?? kw.get('maxsplit');
        return kit.array(pyRsplit(s, optionalString(pos[0] ?? kw.get('sep'), 'sep'), max?.type === 'IntegerValue' ? max.value : -1).map(kit.str));
      });
    case 'center':
    case 'ljust':
    case 'rjust':
    case 'zfill':
      return method(([width, fill]) => {
        if (width?.type !== 'IntegerValue') throw new TypeError(`${name}() width must be an integer`);
        return kit.str(pyPad(s, name, width.value, fill === undefined ? ' ' : stringArg(fill, 'fillchar')));
      });
    case 'title':
      return method(() => kit.str(pyTitle(s)));
    case 'replace':
      return method((pos, kw) => kit.str(pyReplace(s, stringArg(pos[0] ?? kw.get('old'), 'old'), stringArg(pos[1] ?? kw.get('new'), 'new'), intArg(pos[2] ?? kw.get('count')) ?? -1)));
    case 'join':
      return method(([items]) => {
        if (!items || !isSequence(items)) throw new TypeError('can only join an iterable');
        const texts = (items.value as Value[]).map((v, i) => {
          if (v.type !== 'StringValue') throw new TypeError(`sequence item ${i}: expected str instance`);
          return v.value as string;
        });
        return kit.str(checkedJoin(texts, s));
      });
    default: {
      const test = pyStringTest(s, name);
      return test === undefined ? undefined : method(() => kit.bool(test));
    }
  }
}

/** texts.join(separator), its size checked before it is made (a list holding one long string many times). */
export function checkedJoin(texts: readonly string[], separator: string): string {
  let length = Math.max(0, texts.length - 1) * separator.length;
  for (const text of texts) length += text.length;
  checkStringLength(length);
  return texts.join(separator);
}

/** str.replace(old, new, count=-1), its size checked before it is made ('' as old: before each character and at the end). */
export function pyReplace(s: string, old: string, replacement: string, count: number): string {
  const chars = old === '' ? [...s] : null;
  const found = chars ? chars.length + 1 : s.split(old).length - 1;
  const times = count < 0 ? found : Math.min(count, found);
  checkStringLength(s.length + times * (replacement.length - old.length));
  if (chars) {
    const head = chars.slice(0, times).map((c) => replacement + c).join('');
    return times > chars.length ? head + replacement : head + chars.slice(times).join('');
  }
  if (count < 0) return s.split(old).join(replacement);
  let out = '';
  let at = 0;
  for (let i = 0; i < times; i++) {
    const next = s.indexOf(old, at);
    out += s.slice(at, next) + replacement;
    at = next + old.length;
  }
  return out + s.slice(at);
}
