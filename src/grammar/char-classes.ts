// XGrammar 0.1.27 matches character classes that name characters beyond ASCII wrongly ([\u4e00-\u9fff]
// takes `"` and `x` and not 中; [^é] takes é), so a request's grammar with such a class is refused.
// Regexes are written as rules of ours, classes included (pattern-rule.ts). Literals beyond ASCII,
// outside classes, match right.

/** Where the first character class naming a character beyond ASCII starts, or -1. `ebnf`: skip "..." literals. */
export function nonAsciiClassAt(text: string, ebnf: boolean): number {
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '\\') {
      i++;
      continue;
    }
    if (ebnf && c === '"') {
      i = literalEnd(text, i);
      continue;
    }
    if (c !== '[') continue;
    const start = i;
    for (i++; i < text.length && text[i] !== ']'; i++) {
      if (text.charCodeAt(i) > 0x7f) return start;
      if (text[i] !== '\\') continue;
      const escape = /^\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2}))/.exec(text.slice(i, i + 10));
      if (escape && parseInt(escape[1] ?? escape[2] ?? escape[3]!, 16) > 0x7f) return start;
      i++;
    }
  }
  return -1;
}

/** The index of the quote that closes the EBNF string literal opening at `open` (or the end). */
function literalEnd(text: string, open: number): number {
  for (let i = open + 1; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === '"') return i;
  }
  return text.length;
}
