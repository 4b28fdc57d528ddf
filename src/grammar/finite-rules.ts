// Which rules of a compiled grammar can end. A rule that derives no finite text (`root ::= "a"
// root`, a JSON schema whose required property refers back to itself) compiles in XGrammar, but
// once a sequence enters it, the text the grammar forces never ends: XGrammar's jump-forward builds
// it until the wasm memory runs out (6 s, then a trap). So after each compile the grammar as
// XGrammar normalized it (`Grammar.toString()`) is read here, and a rule reachable from the root
// that cannot end refuses the structure.
//
// The normalized text: one rule a line, `name ::= ((a b) | (c))`, optionally followed by a
// lookahead `(=(...))`; elements are strings "...", character classes [...] (optionally starred),
// rule names and parenthesized groups, with postfix `*`, `+`, `?` or `{m,n}`; and
// `name ::= TagDispatch(("trigger", rule), ..., stop_eos=..., ...)`, which can end (at a stop)
// whatever its rules do, though each of its rules is reachable.

/**
 * What the reader found: a reachable rule that cannot end; or the longest output some part of a
 * reachable rule requires once entered (the most text the grammar can force at once); or text it
 * could not read.
 */
export type FiniteRulesResult = { ok: true; longestRequired: number } | { ok: false; rule: string } | { unreadable: string };

type Node =
  /** A string (its length in characters) or a character class (1). */
  | { kind: 'terminal'; length: number }
  | { kind: 'ref'; name: string }
  | { kind: 'seq'; items: Node[] }
  | { kind: 'alt'; options: Node[] }
  /** Postfix: at least `min` times (`*`, `?`: 0; `+`: 1; `{m,n}`: m). */
  | { kind: 'repeat'; item: Node; min: number }
  /** Ends whatever its rules do (TagDispatch); its rules are reachable. */
  | { kind: 'dispatch'; refs: string[] };

/** Minimum lengths count up to this and no further (what is over any bound needs no exact figure). */
const LENGTH_CAP = 2 ** 30;

/** Reads normalized grammar text: a reachable rule that derives no finite text, or the longest required part. */
export function checkFiniteRules(text: string, root = 'root'): FiniteRulesResult {
  let rules: Map<string, Node>;
  try {
    rules = new GrammarReader(text).rules();
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
  const start = rules.has(root) ? root : rules.keys().next().value;
  if (start === undefined) return { ok: true, longestRequired: 0 };
  const queue = [start];
  const seen = new Set<string>(queue);
  for (let i = 0; i < queue.length; i++) {
    for (const ref of refsOf(rules.get(queue[i]!)!)) {
      if (!rules.has(ref)) return { unreadable: `rule ${queue[i]} refers to ${ref}, which the text does not define` };
      if (!seen.has(ref)) {
        seen.add(ref);
        queue.push(ref);
      }
    }
  }
  const lengths = shortestLengths(rules);
  // Of the reachable rules that cannot end, the one reached last: nearer the cause than the root.
  const endless = queue.filter((name) => lengths.get(name) === Infinity).at(-1);
  if (endless !== undefined) return { ok: false, rule: endless };
  let longestRequired = 0;
  for (const name of queue) longestRequired = Math.max(longestRequired, longestPart(rules.get(name)!, lengths));
  return { ok: true, longestRequired };
}

/**
 * Each rule's shortest output in characters (Infinity: it cannot end), by Knuth's generalization of
 * Dijkstra's algorithm: the least value not yet final is final, and each final value updates only
 * the rules that refer to it (linear in the grammar, but for the heap).
 */
function shortestLengths(rules: ReadonlyMap<string, Node>): Map<string, number> {
  const referrers = new Map<string, Set<string>>();
  for (const [name, body] of rules) {
    for (const ref of refsOf(body)) {
      let set = referrers.get(ref);
      if (!set) referrers.set(ref, (set = new Set()));
      set.add(name);
    }
  }
  const final = new Map<string, number>();
  const tentative = new Map<string, number>();
  const heap = new MinHeap();
  const update = (name: string) => {
    const value = shortest(rules.get(name)!, final);
    if (value < (tentative.get(name) ?? Infinity)) {
      tentative.set(name, value);
      heap.push(value, name);
    }
  };
  for (const name of rules.keys()) update(name);
  for (let top = heap.pop(); top; top = heap.pop()) {
    const [value, name] = top;
    if (final.has(name) || value !== tentative.get(name)) continue;
    final.set(name, value);
    for (const referrer of referrers.get(name) ?? []) if (!final.has(referrer)) update(referrer);
  }
  for (const name of rules.keys()) if (!final.has(name)) final.set(name, Infinity);
  return final;
}

/** The shortest output of `node`, rules without a final value counted as Infinity. */
function shortest(node: Node, final: ReadonlyMap<string, number>): number {
  switch (node.kind) {
    case 'terminal':
      return node.length;
    case 'dispatch':
      return 0;
    case 'ref':
      return final.get(node.name) ?? Infinity;
    case 'seq':
      return capped(node.items.reduce((sum, item) => sum + shortest(item, final), 0));
    case 'alt':
      return Math.min(...node.options.map((option) => shortest(option, final)));
    case 'repeat':
      return node.min === 0 ? 0 : capped(node.min * shortest(node.item, final));
  }
}

/** A finite length held to LENGTH_CAP; Infinity (no end) stays. */
function capped(length: number): number {
  return length === Infinity ? length : Math.min(LENGTH_CAP, length);
}

/** The longest shortest-output among the parts of `node` (its sequences, options, repetitions). */
function longestPart(node: Node, lengths: ReadonlyMap<string, number>): number {
  let longest = 0;
  const stack = [node];
  while (stack.length > 0) {
    const n = stack.pop()!;
    const value = shortest(n, lengths);
    if (value !== Infinity) longest = Math.max(longest, value);
    if (n.kind === 'seq') stack.push(...n.items);
    else if (n.kind === 'alt') stack.push(...n.options);
    else if (n.kind === 'repeat') stack.push(n.item);
  }
  return longest;
}

/** A binary heap of [value, name], least value first. */
class MinHeap {
  private readonly items: [number, string][] = [];

  push(value: number, name: string): void {
    const items = this.items;
    items.push([value, name]);
    for (let i = items.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (items[parent]![0] <= items[i]![0]) break;
      [items[parent], items[i]] = [items[i]!, items[parent]!];
      i = parent;
    }
  }

  pop(): [number, string] | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let least = i;
        if (l < items.length && items[l]![0] < items[least]![0]) least = l;
        if (r < items.length && items[r]![0] < items[least]![0]) least = r;
        if (least === i) break;
        [items[least], items[i]] = [items[i]!, items[least]!];
        i = least;
      }
    }
    return top;
  }
}

/** Characters of a string literal's text between its quotes (an escape is one). */
function literalLength(body: string): number {
  let length = 0;
  for (let i = 0; i < body.length; i++, length++) {
    if (body[i] !== '\\') continue;
    const kind = body[i + 1];
    i += kind === 'u' ? 5 : kind === 'U' ? 9 : kind === 'x' ? 3 : 1;
  }
  return length;
}

function refsOf(node: Node): string[] {
  const refs: string[] = [];
  const stack = [node];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (n.kind === 'ref') refs.push(n.name);
    else if (n.kind === 'dispatch') refs.push(...n.refs);
    else if (n.kind === 'seq') stack.push(...n.items);
    else if (n.kind === 'alt') stack.push(...n.options);
    else if (n.kind === 'repeat') stack.push(n.item);
  }
  return refs;
}

const NAME = /[A-Za-z_][A-Za-z0-9_.-]*/y;
const SPACE = /[ \t\r\n]*/y;
const REPEAT_RANGE = /\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}/y;

class GrammarReader {
  private at = 0;
  constructor(private readonly text: string) {}

  rules(): Map<string, Node> {
    const rules = new Map<string, Node>();
    this.space();
    while (this.at < this.text.length) {
      const name = this.name();
      this.space();
      this.expect('::=');
      this.space();
      if (this.text.startsWith('TagDispatch(', this.at)) rules.set(name, this.tagDispatch());
      else rules.set(name, this.sequence());
      this.space();
    }
    return rules;
  }

  /** Elements up to the end of the rule (the next `name ::=`, or the end of the text) or a `)` or `|`. */
  private sequence(): Node {
    const items: Node[] = [];
    for (;;) {
      this.space();
      if (this.at >= this.text.length || this.peek(')') || this.peek('|') || this.peek(',') || this.startsRule()) break;
      if (this.text.startsWith('(=', this.at)) {
        this.at += 2;
        this.alternation(); // a lookahead: it consumes nothing
        this.expect(')');
        continue;
      }
      items.push(this.postfix(this.element()));
    }
    return items.length === 1 ? items[0]! : { kind: 'seq', items };
  }

  private alternation(): Node {
    const options = [this.sequence()];
    while (this.peek('|')) {
      this.at++;
      options.push(this.sequence());
    }
    return options.length === 1 ? options[0]! : { kind: 'alt', options };
  }

  private element(): Node {
    const c = this.text[this.at];
    if (c === '"') {
      const start = this.at;
      this.skipQuoted('"');
      return { kind: 'terminal', length: literalLength(this.text.slice(start + 1, this.at - 1)) };
    }
    if (c === '[') {
      this.skipQuoted(']', '[');
      return { kind: 'terminal', length: 1 };
    }
    if (c === '(') {
      this.at++;
      const inner = this.alternation();
      this.space();
      this.expect(')');
      return inner;
    }
    return { kind: 'ref', name: this.name() };
  }

  private postfix(item: Node): Node {
    for (;;) {
      const c = this.text[this.at];
      if (c === '*' || c === '?') {
        this.at++;
        item = { kind: 'repeat', item, min: 0 };
      } else if (c === '+') {
        this.at++;
        item = { kind: 'repeat', item, min: 1 };
      } else if (c === '{') {
        REPEAT_RANGE.lastIndex = this.at;
        const range = REPEAT_RANGE.exec(this.text);
        if (!range) throw new Error(`unexpected '{' at offset ${this.at}`);
        this.at = REPEAT_RANGE.lastIndex;
        item = { kind: 'repeat', item, min: Number(range[1]) };
      } else return item;
    }
  }

  /** TagDispatch(("trigger", rule), ..., key=value, ...): the rules it dispatches to. */
  private tagDispatch(): Node {
    this.at += 'TagDispatch('.length;
    const refs: string[] = [];
    let depth = 1;
    while (depth > 0) {
      if (this.at >= this.text.length) throw new Error('TagDispatch( is not closed');
      const c = this.text[this.at]!;
      if (c === '"') {
        this.skipQuoted('"');
        this.space();
        if (this.peek(',')) {
          this.at++;
          this.space();
          NAME.lastIndex = this.at;
          if (NAME.test(this.text) && this.text[NAME.lastIndex] === ')') refs.push(this.name());
        }
        continue;
      }
      if (c === '(') depth++;
      else if (c === ')') depth--;
      this.at++;
    }
    return { kind: 'dispatch', refs };
  }

  /** Skips a string or class from its opening character to its closing one, over backslash escapes. */
  private skipQuoted(close: string, open = close): void {
    if (this.text[this.at] !== open) throw new Error(`expected '${open}' at offset ${this.at}`);
    for (let i = this.at + 1; i < this.text.length; i++) {
      const c = this.text[i];
      if (c === '\\') i++;
      else if (c === close) {
        this.at = i + 1;
        return;
      }
    }
    throw new Error(`'${open}' at offset ${this.at} is not closed`);
  }

  private startsRule(): boolean {
    NAME.lastIndex = this.at;
    if (!NAME.test(this.text)) return false;
    SPACE.lastIndex = NAME.lastIndex;
    SPACE.test(this.text);
    return this.text.startsWith('::=', SPACE.lastIndex);
  }

  private name(): string {
    NAME.lastIndex = this.at;
    const match = NAME.exec(this.text);
    if (!match) throw new Error(`expected a rule name at offset ${this.at}: ${JSON.stringify(this.text.slice(this.at, this.at + 20))}`);
    this.at = NAME.lastIndex;
    return match[0];
  }

  private space(): void {
    SPACE.lastIndex = this.at;
    SPACE.test(this.text);
    this.at = SPACE.lastIndex;
  }

  private peek(s: string): boolean {
    return this.text.startsWith(s, this.at);
  }

  private expect(s: string): void {
    if (!this.peek(s)) throw new Error(`expected '${s}' at offset ${this.at}: ${JSON.stringify(this.text.slice(this.at, this.at + 20))}`);
    this.at += s.length;
  }
}
