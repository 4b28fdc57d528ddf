// What becomes of a string schema's `format`: XGrammar's own rule where every string it allows is
// valid (checked against ajv-formats' "full" formats, the reference validator), an EBNF rule of
// ours where XGrammar's is wrong, or a refusal where XGrammar ignores the format. Found on 0.1.27:
// - date: day 31 in every month, February 29-31 in any year. Ours: month lengths and leap years.
// - time, date-time: second 60 at any time of day (a leap second is valid only at 23:59 UTC), and
//   in date-time minute 60. Ours: seconds 00-59, no leap seconds.
// - email: a quoted local part (ajv takes none; its escapes can be invalid JSON), a domain without
//   a dot. Ours: ajv's dot-atom and a domain of two or more labels.
// - hostname: labels and names of any length (ajv: labels up to 63, names up to 253 characters).
//   Ours: up to six labels of up to 41 characters.
// - ipv4: leading zeros ("01"). ipv6: leading zeros in an embedded IPv4 address.
// - uri: an empty hier-part ("a:", "a:?q"), which ajv refuses.
// - uri-template: "." inside a variable name.
// - json-pointer, relative-json-pointer: `"`, `\` and control characters unescaped (invalid JSON).
// - byte, regex, url, json-pointer-uri-fragment, idn-*, iri*: ignored (any string).
// Kept: uuid, duration, uri-reference (each a subset of ajv's), and password, binary (any string,
// as ajv has them). Formats no validator here knows are refused: XGrammar would ignore them.
// Browser code: nothing here may import Node modules.

/** How a `format` is compiled. */
export type FormatPlan =
  /** XGrammar's own rule, for the format `as` (an alias) or the same name. */
  | { kind: 'xgrammar'; as?: string }
  /** Our rule for the string's characters (between the quotes), by its name in FORMAT_RULES. */
  | { kind: 'rule'; rule: FormatRuleName }
  /** Not supported: the reason, for the error. */
  | { kind: 'refused'; why: string };

/**
 * EBNF for the characters of each format's strings, between the quotes: `<name>` stands for the
 * rule `name` of this table (formatRules prefixes the names). Every string is plain JSON string
 * content: no `"`, `\` or control characters.
 */
const RULES = {
  date: '<year> "-" <month31> "-" <day31> | <year> "-" <month30> "-" <day30> | <year> "-02-" <day28> | <leapyear> "-02-29"',
  year: '[0-9]{4}',
  month31: '"01" | "03" | "05" | "07" | "08" | "10" | "12"',
  month30: '"04" | "06" | "09" | "11"',
  day28: '"0" [1-9] | "1" [0-9] | "2" [0-8]',
  day30: '<day28> | "29" | "30"',
  day31: '<day30> | "31"',
  // Divisible by 4, not by 100 unless by 400: the last two digits a non-zero multiple of 4, or
  // "00" after a multiple of 4.
  leapyear: '[0-9] [0-9] <quarter-nonzero> | <quarter> "00"',
  quarter: '[02468] [048] | [13579] [26]',
  'quarter-nonzero': '"0" [48] | [2468] [048] | [13579] [26]',
  time: '<hour> ":" <minute> ":" <minute> ( "." [0-9]{1,9} )? <offset>',
  hour: '[01] [0-9] | "2" [0-3]',
  minute: '[0-5] [0-9]',
  offset: '"Z" | [+-] <hour> ":" <minute>',
  'date-time': '<date> "T" <time>',
  email: '<atom> ( "." <atom> )* "@" <label> ( "." <label> )+',
  atom: "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+",
  label: '[a-zA-Z0-9] ( [a-zA-Z0-9-]* [a-zA-Z0-9] )?',
  // At most 253 characters: up to six labels of up to 41 (6 * 41 + 5 = 251). Labels of up to 63
  // would cost ~0.3 s more to compile (each position of a bounded repetition is a state).
  hostname: '<label41> ( "." <label41> ){0,5}',
  label41: '[a-z0-9] ( [a-z0-9-]{0,39} [a-z0-9] )?',
  ipv4: '<octet> "." <octet> "." <octet> "." <octet>',
  octet: '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]',
  // ajv's ipv6 alternatives: n groups, then the rest (fewer groups after "::", or an IPv4 tail).
  ipv6:
    '( <h16> ":" ){7} ( <h16> | ":" )' +
    ' | ( <h16> ":" ){6} ( ":" <h16> | <ipv4> | ":" )' +
    ' | ( <h16> ":" ){5} ( ( ":" <h16> ){1,2} | ":" <ipv4> | ":" )' +
    ' | ( <h16> ":" ){4} ( ( ":" <h16> ){1,3} | ( ":" <h16> )? ":" <ipv4> | ":" )' +
    ' | ( <h16> ":" ){3} ( ( ":" <h16> ){1,4} | ( ":" <h16> ){0,2} ":" <ipv4> | ":" )' +
    ' | ( <h16> ":" ){2} ( ( ":" <h16> ){1,5} | ( ":" <h16> ){0,3} ":" <ipv4> | ":" )' +
    ' | <h16> ":" ( ( ":" <h16> ){1,6} | ( ":" <h16> ){0,4} ":" <ipv4> | ":" )' +
    ' | ":" ( ( ":" <h16> ){1,7} | ( ":" <h16> ){0,5} ":" <ipv4> | ":" )',
  h16: '[0-9a-fA-F]{1,4}',
  // RFC 3986 as ajv writes it, without IP literals ("[...]"); the hier-part is never empty.
  uri:
    '[a-zA-Z] [a-zA-Z0-9+.-]* ":" ( "//" ( <userinfo> "@" )? <host> ( ":" [0-9]* )? ( "/" <pchar>* )*' +
    ' | "/" ( <pchar>+ ( "/" <pchar>* )* )? | <pchar>+ ( "/" <pchar>* )* ) ( "?" <qchar>* )? ( "#" <qchar>* )?',
  userinfo: "( [a-zA-Z0-9._~!$&'()*+,;=:-] | <pct> )*",
  host: "( [a-zA-Z0-9._~!$&'()*+,;=-] | <pct> )*",
  pchar: "[a-zA-Z0-9._~!$&'()*+,;=:@-] | <pct>",
  qchar: "[a-zA-Z0-9._~!$&'()*+,;=:@/?-] | <pct>",
  pct: '"%" [0-9a-fA-F] [0-9a-fA-F]',
  'uri-template': '( [!#$&(-;=?-[\\]_a-z~] | <pct> | "{" [+#./;?&=,!@|]? <varspec> ( "," <varspec> )* "}" )*',
  varspec: '( [a-zA-Z0-9_] | <pct> )+ ( ":" [1-9] [0-9]{0,3} | "*" )?',
  'json-pointer': '( "/" <reference-char>* )*',
  'reference-char': '[^\\0-\\x1f"\\\\~/] | "~" [01]',
  'relative-json-pointer': '( "0" | [1-9] [0-9]* ) ( "#" | <json-pointer> )',
  'json-pointer-uri-fragment': '"#" ( "/" ( [a-zA-Z0-9_.!$&\'()*+,;:=@-] | <pct> | "~" [01] )* )*',
  byte: '( <b64> <b64> <b64> <b64> )* ( <b64> <b64> "==" | <b64> <b64> <b64> "=" )?',
  b64: '[A-Za-z0-9+/]',
} as const;

export type FormatRuleName = keyof typeof RULES;

/** Every format a schema may name, and how it compiles. */
export const FORMATS: Readonly<Record<string, FormatPlan>> = {
  date: { kind: 'rule', rule: 'date' },
  time: { kind: 'rule', rule: 'time' },
  'date-time': { kind: 'rule', rule: 'date-time' },
  // ajv's extras: the time zone optional, a space allowed for the "T"; ours is a subset.
  'iso-time': { kind: 'rule', rule: 'time' },
  'iso-date-time': { kind: 'rule', rule: 'date-time' },
  duration: { kind: 'xgrammar' },
  email: { kind: 'rule', rule: 'email' },
  // An ASCII address, host name or URI is a valid internationalized one.
  'idn-email': { kind: 'rule', rule: 'email' },
  hostname: { kind: 'rule', rule: 'hostname' },
  'idn-hostname': { kind: 'rule', rule: 'hostname' },
  ipv4: { kind: 'rule', rule: 'ipv4' },
  ipv6: { kind: 'rule', rule: 'ipv6' },
  uri: { kind: 'rule', rule: 'uri' },
  iri: { kind: 'rule', rule: 'uri' },
  'uri-reference': { kind: 'xgrammar' },
  'iri-reference': { kind: 'xgrammar', as: 'uri-reference' },
  'uri-template': { kind: 'rule', rule: 'uri-template' },
  uuid: { kind: 'xgrammar' },
  'json-pointer': { kind: 'rule', rule: 'json-pointer' },
  'relative-json-pointer': { kind: 'rule', rule: 'relative-json-pointer' },
  'json-pointer-uri-fragment': { kind: 'rule', rule: 'json-pointer-uri-fragment' },
  byte: { kind: 'rule', rule: 'byte' },
  // Any string is valid.
  password: { kind: 'xgrammar' },
  binary: { kind: 'xgrammar' },
  // Formats of numbers (number-range.ts reads int32 and int64); a string is not checked by them.
  int32: { kind: 'xgrammar' },
  int64: { kind: 'xgrammar' },
  float: { kind: 'xgrammar' },
  double: { kind: 'xgrammar' },
  regex: { kind: 'refused', why: 'a grammar cannot tell which strings are valid regular expressions' },
  url: { kind: 'refused', why: 'use "uri"' },
};

/** The plan for `format`: refused when no validator here knows it (XGrammar would ignore it). */
export function formatPlan(format: string): FormatPlan {
  return Object.hasOwn(FORMATS, format) ? FORMATS[format]! : { kind: 'refused', why: `it is not one of ${Object.keys(FORMATS).join(', ')}` };
}

/**
 * The EBNF rules of one format, names prefixed with `prefix` (`prefix` + `date`, `prefix` +
 * `year`, ...): the rule itself and every rule it uses, but those in `written` (rules already
 * written with the same prefix, for another format; the set is updated). Returns the name of the
 * format's rule and the rules' text.
 */
export function formatRules(rule: FormatRuleName, prefix: string, written = new Set<string>()): { name: string; text: string } {
  const name = (local: string) => `${prefix}${local.replaceAll('-', '_')}`;
  const lines: string[] = [];
  const done = written;
  const visit = (local: FormatRuleName) => {
    if (done.has(local)) return;
    done.add(local);
    const body = RULES[local].replace(/<([a-z0-9-]+)>/g, (_, used: string) => {
      if (!Object.hasOwn(RULES, used)) throw new Error(`format rule ${local} uses unknown rule ${used}`);
      visit(used as FormatRuleName);
      return name(used);
    });
    lines.push(`${name(local)} ::= ${body}`);
  };
  visit(rule);
  return { name: name(rule), text: lines.reverse().join('\n') };
}
