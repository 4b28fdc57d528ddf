// The token adjustments that let @huggingface/jinja's parser read Jinja2 syntax it refuses (float
// exponents, tuples in parentheses, tests with arguments): jinja-runtime.ts rewrites a template's
// tokens with pythonTokens before parsing it.

/** The global that makes a tuple of its arguments (pythonTokens writes `()` and `(x,)` as calls of it). */
export const TUPLE = '__py_tuple__';

/** The filter that applies a test with arguments (pythonTokens writes `x is test arg` so). */
export const TEST = '__py_test__';

/** A @huggingface/jinja lexer token. */
export interface Token {
  type: string;
  value: string;
}

/**
 * The library's tokens, with what its lexer reads differently from Python's: a float with an
 * exponent (`1e16`, `2.5E-7`: lexed as a number, a name and maybe a sign and a number) becomes
 * one float literal (written with a `.`, so that it parses as a float); a tuple in parentheses that
 * the parser refuses, `()` or one with a trailing comma (`(x,)`), becomes a call of TUPLE.
 */
const KEYWORDS = new Set(['in', 'is', 'not', 'and', 'or', 'if', 'elif', 'else', 'for', 'set', 'return', 'with', 'call', 'filter']);

export function pythonTokens(source: Token[]): Token[] {
  const tokens = testsWithArguments(source);
  const out: Token[] = [];
  const opened: { at: number; call: boolean }[] = []; // the open parentheses: where in `out`, and whether they call
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    const next = tokens[i + 1];
    if (token.type === 'OpenParen') {
      const before = out.at(-1);
      const call = before !== undefined && (before.type === 'Identifier' ? !KEYWORDS.has(before.value) : ['CloseParen', 'CloseSquareBracket'].includes(before.type));
      opened.push({ at: out.length, call });
    } else if (token.type === 'CloseParen' && opened.length > 0) {
      const { at, call } = opened.pop()!;
      const last = out.at(-1)!;
      if (!call && (last.type === 'Comma' || last.type === 'OpenParen')) out.splice(at, 0, make(token, TUPLE, 'Identifier'));
      if (last.type === 'Comma') out.pop();
    }
    if (token.type === 'NumericLiteral' && next?.type === 'Identifier' && /^[eE]\d*$/.test(next.value)) {
      let exponent = next.value.slice(1);
      let used = 1;
      const sign = tokens[i + 2];
      const digits = tokens[i + 3];
      if (exponent === '' && sign?.type === 'AdditiveBinaryOperator' && digits?.type === 'NumericLiteral' && /^\d+$/.test(digits.value)) {
        exponent = sign.value + digits.value;
        used = 3;
      }
      if (exponent !== '') {
        const mantissa = token.value.includes('.') ? token.value : `${token.value}.0`;
        out.push(make(token, `${mantissa}e${exponent}`, token.type));
        i += used;
        continue;
      }
    }
    out.push(token);
  }
  return out;
}

function make(like: Token, value: string, type: string): Token {
  return Object.assign(Object.create(Object.getPrototypeOf(like)), { value, type });
}

/**
 * `x is test arg` and `x is test(args)` (the parser takes tests without arguments only) as the
 * filter `x | TEST('test', negate, args)`: a test in Jinja2 applies to the filter chain before it,
 * as a filter does. The argument is what Jinja2 reads there: a primary expression and its postfix.
 */
function testsWithArguments(tokens: Token[]): Token[] {
  const out: Token[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    const negate = tokens[i + 1]?.type === 'Identifier' && tokens[i + 1].value === 'not';
    const at = negate ? i + 2 : i + 1; // the test's name
    const name = tokens[at];
    const arg = tokens[at + 1];
    const startsArgument = arg !== undefined && (ARGUMENT_STARTS.includes(arg.type) || (arg.type === 'Identifier' && !['else', 'or', 'and', 'is'].includes(arg.value)));
    if (token.type !== 'Identifier' || token.value !== 'is' || name?.type !== 'Identifier' || !startsArgument) {
      out.push(token);
      continue;
    }
    const head: [string, string][] = [['|', 'Pipe'], [TEST, 'Identifier'], ['(', 'OpenParen'], [name.value, 'StringLiteral'], [',', 'Comma'], [negate ? '1' : '0', 'NumericLiteral']];
    out.push(...head.map(([value, type]) => make(token, value, type)));
    if (arg.type === 'OpenParen') {
      out.push(make(token, ',', 'Comma')); // the call's own arguments follow, then its ')' (a trailing comma is dropped later)
      i = at + 1;
      continue;
    }
    const end = postfixEnd(tokens, at + 1);
    out.push(make(token, ',', 'Comma'), ...tokens.slice(at + 1, end), make(token, ')', 'CloseParen'));
    i = end - 1;
  }
  return out;
}

const ARGUMENT_STARTS = ['OpenParen', 'OpenSquareBracket', 'OpenCurlyBracket', 'NumericLiteral', 'StringLiteral'];

/** Where the primary expression at `start` and its attributes, subscripts and calls end. */
function postfixEnd(tokens: Token[], start: number): number {
  const closing = (i: number) => {
    let depth = 0;
    for (; i < tokens.length; i++) {
      if (/^Open(Paren|SquareBracket|CurlyBracket)$/.test(tokens[i].type)) depth++;
      else if (/^Close(Paren|SquareBracket|CurlyBracket)$/.test(tokens[i].type) && --depth === 0) return i + 1;
    }
    return i;
  };
  let i = start;
  if (tokens[i].type === 'StringLiteral') while (tokens[i]?.type === 'StringLiteral') i++;
  else i = ARGUMENT_STARTS.slice(0, 3).includes(tokens[i].type) ? closing(i) : i + 1;
  for (;;) {
    if (tokens[i]?.type === 'Dot' && tokens[i + 1]?.type === 'Identifier') i += 2;
    else if (tokens[i]?.type === 'OpenSquareBracket' || tokens[i]?.type === 'OpenParen') i = closing(i);
    else return i;
  }
}
