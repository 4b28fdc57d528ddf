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

/** What the reader found: a reachable rule that cannot end, or none, or text it could not read. */
export type FiniteRulesResult = { ok: true } | { ok: false; rule: string } | { unreadable: string };

type Node =
  | { kind: 'terminal' }
  | { kind: 'ref'; name: string }
  | { kind: 'seq'; items: Node[] }
  | { kind: 'alt'; options: Node[] }
  /** Postfix: may be skipped (`*`, `?`, `{0,n}`) or not (`+`, `{m,n}` with m > 0). */
  | { kind: 'repeat'; item: Node; optional: boolean }
  /** Ends whatever its rules do (TagDispatch); its rules are reachable. */
  | { kind: 'dispatch'; refs: string[] };

/** Reads normalized grammar text and finds a reachable rule that derives no finite text. */
export function checkFiniteRules(text: string, root = 'root'): FiniteRulesResult {
  let rules: Map<string, Node>;
  try {
    rules = new GrammarReader(text).rules();
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
  // Which rules can end: a worklist over the rules that refer to each one (linear in the text,
  // where sweeping every rule until nothing changes was quadratic on a chain of rules).
  const ends = new Map<string, boolean>();
  const referrers = new Map<string, Set<string>>();
  for (const [name, body] of rules) {
    for (const ref of refsOf(body)) {
      let set = referrers.get(ref);
      if (!set) referrers.set(ref, (set = new Set()));
      set.add(name);
    }
  }
  const settled: string[] = [];
  for (const [name, body] of rules) {
    const can = canEnd(body, ends);
    ends.set(name, can);
    if (can) settled.push(name);
  }
  while (settled.length > 0) {
    for (const referrer of referrers.get(settled.pop()!) ?? []) {
      if (!ends.get(referrer) && canEnd(rules.get(referrer)!, ends)) {
        ends.set(referrer, true);
        settled.push(referrer);
      }
    }
  }
  const start = rules.has(root) ? root : rules.keys().next().value;
  if (start === undefined) return { ok: true };
  const seen = new Set<string>([start]);
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    for (const ref of refsOf(rules.get(queue[i]!)!)) {
      if (!rules.has(ref)) return { unreadable: `rule ${queue[i]} refers to ${ref}, which the text does not define` };
      if (!seen.has(ref)) {
        seen.add(ref);
        queue.push(ref);
      }
    }
  }
  // Of the reachable rules that cannot end, the one reached last: nearer the cause than the root.
  const endless = queue.filter((name) => !ends.get(name)).at(-1);
  if (endless !== undefined) return { ok: false, rule: endless };
  return { ok: true };
}

function canEnd(node: Node, ends: ReadonlyMap<string, boolean>): boolean {
  switch (node.kind) {
    case 'terminal':
    case 'dispatch':
      return true;
    case 'ref':
      return ends.get(node.name) === true;
    case 'seq':
      return node.items.every((item) => canEnd(item, ends));
    case 'alt':
      return node.options.some((option) => canEnd(option, ends));
    case 'repeat':
      return node.optional || canEnd(node.item, ends);
  }
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
      this.skipQuoted('"');
      return { kind: 'terminal' };
    }
    if (c === '[') {
      this.skipQuoted(']', '[');
      return { kind: 'terminal' };
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
        item = { kind: 'repeat', item, optional: true };
      } else if (c === '+') {
        this.at++;
        item = { kind: 'repeat', item, optional: false };
      } else if (c === '{') {
        REPEAT_RANGE.lastIndex = this.at;
        const range = REPEAT_RANGE.exec(this.text);
        if (!range) throw new Error(`unexpected '{' at offset ${this.at}`);
        this.at = REPEAT_RANGE.lastIndex;
        item = { kind: 'repeat', item, optional: Number(range[1]) === 0 };
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
