// Tool calls in a model's chat output. The models we load write a tool call as plain text in
// their own format (Hermes and Qwen2.5 `<tool_call>` blocks, Llama 3's bare JSON, Mistral's
// `[TOOL_CALLS]`), while /v1/chat/completions answers with OpenAI `tool_calls`. One state machine
// reads the output in the pieces it is generated in, and the whole-output parse is that machine
// fed everything at once, so a streamed answer and a whole answer carry the same content and the
// same calls however the output is split: text that may still turn out to be part of a call is
// held back until that is decided, never shown and then taken back.
// Browser code: nothing here may import Node modules.
import type { ToolCallFormat } from '../engine/types.ts';
import { isPlainObject } from './params.ts';
import { withinDepth } from './request-data.ts';

export { TOOL_CALL_FORMATS, type ToolCallFormat } from '../engine/types.ts';

/**
 * The format a chat template's source implies, or null: `<tool_call>` → hermes (Hermes,
 * Qwen2.5); `[TOOL_CALLS]` or `[AVAILABLE_TOOLS]` → mistral; `<|python_tag|>`, or `"parameters"`
 * with the `ipython` role → llama3_json (Llama 3.1 to 3.3).
 */
export function toolCallFormatOf(templateSource: string): ToolCallFormat | null {
  const has = (text: string) => templateSource.includes(text);
  if (has(HERMES_OPEN)) return 'hermes';
  if (has(MISTRAL_CALLS) || has('[AVAILABLE_TOOLS]')) return 'mistral';
  if (has(PYTHON_TAG) || (has('"parameters"') && has('ipython'))) return 'llama3_json';
  return null;
}

/** One call: the function's name, and its arguments as compact JSON text of an object (JSON.stringify of what the model wrote). */
export interface ParsedToolCall {
  name: string;
  arguments: string;
}

export interface ToolParse {
  content: string;
  calls: ParsedToolCall[];
}

/**
 * The calls in a whole output, and its content: the text outside valid calls, in order and
 * verbatim, except for the whitespace that only separates calls from each other or from the
 * start or end of the output ('' when nothing else is left). Whitespace between two pieces of
 * text stays, with the calls between them taken out. Whitespace is JSON's: space, tab, CR, LF.
 *
 * A call is a JSON object with a non-empty string `name` and arguments under `arguments` (or
 * `parameters`, not both): an object, a JSON string of an object, or missing (`{}`); no other
 * keys but `id`. Its `arguments` are re-serialized with JSON.stringify (compact; JSON.parse's
 * reading of numbers and repeated keys). Text that is not a valid call stays content, verbatim.
 *
 * - hermes: `<tool_call>` JSON `</tool_call>`, any number, with text around them; a last block
 *   cut off before its `</tool_call>` is a call when its JSON is whole.
 * - llama3_json: the output, after whitespace and an optional `<|python_tag|>`, starts with a
 *   call object; more may follow, each after whitespace and an optional `;`. From the first
 *   thing that is not a call on, the rest is content.
 * - mistral: `[TOOL_CALLS]` followed by a JSON array of call objects (an element that is not a
 *   call, and the rest of the array, stay content), a single call object, or `name[ARGS]{…}`
 *   (`[ARGS]` may be missing: `name{…}`); any number, with text around them.
 */
export function parseToolCalls(format: ToolCallFormat, text: string): ToolParse {
  const stream = new ToolCallStream(format);
  const head = stream.push(text);
  const tail = stream.finish();
  return { content: head.content + tail.content, calls: [...head.calls, ...tail.calls] };
}

const HERMES_OPEN = '<tool_call>';
const HERMES_CLOSE = '</tool_call>';
const MISTRAL_CALLS = '[TOOL_CALLS]';
const MISTRAL_ARGS = '[ARGS]';
const PYTHON_TAG = '<|python_tag|>';

/** The text that opens each format's calls (a special token in some vocabularies). */
export const TOOL_CALL_MARKERS: Readonly<Record<ToolCallFormat, string>> = { hermes: HERMES_OPEN, llama3_json: PYTHON_TAG, mistral: MISTRAL_CALLS };

/** Where the machine is: at the start of the text it has not decided yet. */
type State =
  | 'text' // content, up to the format's marker (hermes, mistral)
  | 'hermes-call' // at `<tool_call>`
  | 'mistral-calls' // at `[TOOL_CALLS]`
  | 'mistral-array' // after an element of a `[TOOL_CALLS][…]` array: `,` and the next one, or `]`
  | 'llama-start' // the start of a llama3_json output
  | 'llama-next' // after a llama3_json call: another call, or the end
  | 'plain'; // content to the end

/** What a state decides about the start of the undecided text: nothing yet, or some content, or a call (and the call syntax around it, skipped), then the next state. */
type Step =
  | 'more'
  | { content: number; next: State }
  | { call?: ParsedToolCall; skip: number; next: State };

/** A JSON value being scanned, from `at` (counted from the start of the output). */
interface Scan {
  at: number;
  pos: number;
  depth: number;
  inString: boolean;
  escaped: boolean;
  done?: { end: number; value: unknown };
}

/**
 * Incremental parse: push() the output's pieces as they are generated; each returns the content
 * that is safe to show now and the calls that completed. finish() returns what was held back: an
 * unfinished or invalid call becomes content (but a last hermes block whose JSON is whole is a
 * call without its `</tool_call>`). The pieces' content joined is parseToolCalls' content, and their calls its calls, for
 * every split of the output. A call is emitted as soon as it is known to be one: at a hermes
 * `</tool_call>`, when a llama3_json or mistral object closes and parses.
 */
export class ToolCallStream {
  /** Text not decided yet: a possible start of a marker, or a call not finished. */
  private pending = '';
  /** Characters consumed before `pending`. */
  private consumed = 0;
  private state: State;
  private scan: Scan | null = null;
  private finished = false;
  private readonly spacing = new Spacing();

  constructor(private readonly format: ToolCallFormat) {
    this.state = format === 'llama3_json' ? 'llama-start' : 'text';
  }

  push(text: string): ToolParse {
    if (this.finished) throw new Error('ToolCallStream: push() after finish()');
    this.pending += text;
    return this.drain(false);
  }

  finish(): ToolParse {
    if (this.finished) return { content: '', calls: [] };
    this.finished = true;
    const out = this.drain(true);
    out.content += this.spacing.end();
    return out;
  }

  private drain(final: boolean): ToolParse {
    const out: ToolParse = { content: '', calls: [] };
    while (this.pending) {
      let step = this.step(this.pending, final);
      if (step === 'more') {
        if (!final) break;
        step = { content: this.pending.length, next: 'plain' };
      }
      let taken: number;
      if ('skip' in step) {
        if (step.call) {
          this.spacing.call();
          out.calls.push(step.call);
        }
        taken = step.skip;
      } else {
        out.content += this.spacing.content(this.pending.slice(0, step.content));
        taken = step.content;
      }
      this.pending = this.pending.slice(taken);
      this.consumed += taken;
      this.state = step.next;
    }
    return out;
  }

  private step(s: string, final: boolean): Step {
    switch (this.state) {
      case 'text': {
        const marker = this.format === 'hermes' ? HERMES_OPEN : MISTRAL_CALLS;
        const at = s.indexOf(marker);
        if (at >= 0) return { content: at, next: this.format === 'hermes' ? 'hermes-call' : 'mistral-calls' };
        const keep = markerStartAtEnd(s, marker);
        return keep === s.length ? 'more' : { content: s.length - keep, next: 'text' };
      }
      case 'hermes-call':
        return this.hermesCall(s, final);
      case 'mistral-calls':
        return this.mistralCalls(s);
      case 'mistral-array': {
        // After an element: `]`, or `,` and the next element.
        const at = skipSpace(s, 0);
        if (at === s.length) return 'more';
        if (s[at] === ']') return { skip: at + 1, next: 'text' };
        if (s[at] !== ',') return { content: at, next: 'text' };
        return this.callObject(s, skipSpace(s, at + 1), 'mistral-array', 'text');
      }
      case 'llama-start': {
        // Whitespace, perhaps <|python_tag|> and more whitespace, then a call object.
        let start = skipSpace(s, 0);
        const tag = literal(s, start, PYTHON_TAG);
        if (tag === 'more') return 'more';
        if (tag !== 'no') start = skipSpace(s, tag);
        return this.callObject(s, start, 'llama-next', 'plain');
      }
      case 'llama-next': {
        let start = skipSpace(s, 0);
        if (s[start] === ';') start = skipSpace(s, start + 1);
        return this.callObject(s, start, 'llama-next', 'plain');
      }
      case 'plain':
        return { content: s.length, next: 'plain' };
    }
  }

  /** A call object at s[start]: the call, with all of s before it skipped, then `next`; or else content up to where it stops being one, then `otherwise`. */
  private callObject(s: string, start: number, next: State, otherwise: State): Step {
    if (start === s.length) return 'more';
    if (s[start] !== '{') return { content: start, next: otherwise };
    const object = this.json(s, start);
    if (object === 'more') return 'more';
    const call = toCall(object.value);
    return call ? { call, skip: object.end, next } : { content: object.end, next: otherwise };
  }

  /** `<tool_call>` JSON `</tool_call>`; the end of the output may stand for `</tool_call>`. */
  private hermesCall(s: string, final: boolean): Step {
    const start = skipSpace(s, HERMES_OPEN.length);
    if (start === s.length) return 'more';
    if (s[start] !== '{') return { content: start, next: 'text' };
    const object = this.json(s, start);
    if (object === 'more') return 'more';
    const call = toCall(object.value);
    if (!call) return { content: object.end, next: 'text' };
    const close = skipSpace(s, object.end);
    const end = literal(s, close, HERMES_CLOSE);
    if (end === 'no') return { content: close, next: 'text' };
    if (end === 'more') return final ? { call, skip: s.length, next: 'text' } : 'more';
    return { call, skip: end, next: 'text' };
  }

  /** `[TOOL_CALLS]` then an array of call objects, one call object, or `name[ARGS]{…}`. */
  private mistralCalls(s: string): Step {
    const start = skipSpace(s, MISTRAL_CALLS.length);
    if (start === s.length) return 'more';
    if (s[start] === '[') return this.callObject(s, skipSpace(s, start + 1), 'mistral-array', 'text');
    if (s[start] === '{') return this.callObject(s, start, 'text', 'text');
    let nameEnd = start;
    while (nameEnd < s.length && NAME_CHARACTER.test(s[nameEnd]!)) nameEnd++;
    if (nameEnd === s.length) return 'more';
    if (nameEnd === start) return { content: start, next: 'text' };
    const afterArgs = literal(s, nameEnd, MISTRAL_ARGS);
    if (afterArgs === 'more') return 'more';
    const open = skipSpace(s, afterArgs === 'no' ? nameEnd : afterArgs);
    if (open === s.length) return 'more';
    if (s[open] !== '{') return { content: open, next: 'text' };
    const object = this.json(s, open);
    if (object === 'more') return 'more';
    const call = withArguments(s.slice(start, nameEnd), object.value);
    return call ? { call, skip: object.end, next: 'text' } : { content: object.end, next: 'text' };
  }

  /**
   * The JSON object or array at s[start]: where it ends and its value (undefined when it is not
   * JSON), or 'more'. Brackets are counted outside strings (with their escapes); the scan stops
   * early at a character JSON cannot have there. Resumes where the last call left off.
   */
  private json(s: string, start: number): 'more' | { end: number; value: unknown } {
    const at = this.consumed + start;
    if (this.scan?.at !== at) this.scan = { at, pos: at, depth: 0, inString: false, escaped: false };
    const scan = this.scan;
    if (scan.done) return scan.done;
    for (let i = scan.pos - this.consumed; i < s.length; i++) {
      const c = s[i]!;
      if (scan.inString) {
        if (scan.escaped) scan.escaped = false;
        else if (c === '\\') scan.escaped = true;
        else if (c === '"') scan.inString = false;
        else if (c < ' ') return (scan.done = { end: i, value: undefined });
      } else if (c === '"') {
        scan.inString = true;
      } else if (c === '{' || c === '[') {
        scan.depth++;
      } else if (c === '}' || c === ']') {
        if (--scan.depth === 0) return (scan.done = { end: i + 1, value: parseJson(s.slice(start, i + 1)) });
      } else if (!JSON_OUTSIDE_STRINGS.test(c)) {
        return (scan.done = { end: i, value: undefined });
      }
    }
    scan.pos = this.consumed + s.length;
    return 'more';
  }
}

/** The characters of a function's name in mistral's `name[ARGS]{…}`. */
const NAME_CHARACTER = /[A-Za-z0-9_.-]/;

/** Characters JSON may have outside strings, brackets and quotes: whitespace, separators, numbers, true/false/null. */
const JSON_OUTSIDE_STRINGS = /[ \t\n\r,:0-9A-Za-z.+-]/;

function isSpace(c: string | undefined): boolean {
  return c === ' ' || c === '\n' || c === '\t' || c === '\r';
}

function skipSpace(s: string, i: number): number {
  while (i < s.length && isSpace(s[i])) i++;
  return i;
}

/** Where `text` ends if s has it at i; 'more' if s ends within it; 'no' if s differs from it. */
function literal(s: string, i: number, text: string): number | 'more' | 'no' {
  const have = s.slice(i, i + text.length);
  if (!text.startsWith(have)) return 'no';
  return have.length === text.length ? i + text.length : 'more';
}

/** The length of the longest end of s that is the start of marker (and not all of it). */
function markerStartAtEnd(s: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, s.length); n > 0; n--) {
    if (s.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const CALL_KEYS = new Set(['name', 'arguments', 'parameters', 'id']);

/** The call a parsed JSON value stands for, or null. */
function toCall(value: unknown): ParsedToolCall | null {
  if (!isPlainObject(value) || !Object.keys(value).every((key) => CALL_KEYS.has(key))) return null;
  const { name } = value;
  if (typeof name !== 'string' || name === '') return null;
  const hasArguments = Object.hasOwn(value, 'arguments');
  const hasParameters = Object.hasOwn(value, 'parameters');
  if (hasArguments && hasParameters) return null;
  const args = hasArguments ? value.arguments : hasParameters ? value.parameters : {};
  return withArguments(name, args);
}

/**
 * A call of `name` with `args`: an object, or a JSON string of one; null when neither, or when the
 * object nests deeper than a request may (JSON.stringify would recurse past the stack), so that
 * the model's text stays content.
 */
function withArguments(name: string, args: unknown): ParsedToolCall | null {
  const object = typeof args === 'string' ? parseJson(args) : args;
  return isPlainObject(object) && withinDepth(object) ? { name, arguments: JSON.stringify(object) } : null;
}

/**
 * Content after calls are taken out of it: a run of whitespace is held until it is known to
 * separate text from text (kept) or a call from the start or end of the output or from another
 * call (dropped). Outputs without calls pass through unchanged.
 */
class Spacing {
  private held = '';
  private callInHeld = false;
  private textSeen = false;

  content(text: string): string {
    let first = 0;
    while (first < text.length && isSpace(text[first])) first++;
    if (first === text.length) {
      this.held += text;
      return '';
    }
    let last = text.length;
    while (isSpace(text[last - 1])) last--;
    const lead = this.textSeen || !this.callInHeld ? this.held + text.slice(0, first) : '';
    this.held = text.slice(last);
    this.callInHeld = false;
    this.textSeen = true;
    return lead + text.slice(first, last);
  }

  call(): void {
    this.callInHeld = true;
  }

  end(): string {
    const out = this.callInHeld ? '' : this.held;
    this.held = '';
    return out;
  }
}
