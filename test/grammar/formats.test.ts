// String formats against ajv-formats ("full" mode, the validator of the structured-output tests):
// our rules (format-rules.ts) accept exactly what ajv accepts where they are exact (date, ipv4,
// ipv6, email), and only what it accepts elsewhere; and seeded random walks through the compiled
// schema of every supported format, on a byte-fallback vocabulary (every byte a token), give only
// strings ajv validates, XGrammar's kept rules included.
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { FORMATS, formatRules, type FormatRuleName } from '../../src/grammar/format-rules.ts';
import { compileStructuredOutput, StructuredOutputError } from '../../src/grammar/structured-output.ts';
import { grammarAccepts } from '../helpers/grammar-accepts.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { expectSchemaWalksValid } from '../helpers/random-walk.ts';

const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
const valid = (format: string, text: string) => ajv.validate({ type: 'string', format }, text);

/** A membership test for one of our format rules (the string's characters, without quotes). */
async function rule(name: FormatRuleName) {
  const { name: root, text } = formatRules(name, 'f_');
  return grammarAccepts(text, root);
}

/** Checks `candidates` against the rule: accepted ones valid for ajv, and (when `exact`) valid ones accepted. */
async function check(name: FormatRuleName, format: string, candidates: Iterable<string>, exact: (text: string) => boolean): Promise<number> {
  const grammar = await rule(name);
  let accepted = 0;
  try {
    for (const text of candidates) {
      const ok = await grammar.accepts(text);
      if (ok) {
        accepted++;
        expect(valid(format, text), `${format} rule accepts ${JSON.stringify(text)}, which ajv refuses`).toBe(true);
      } else if (exact(text)) {
        expect(valid(format, text), `${format} rule refuses ${JSON.stringify(text)}, which ajv accepts`).toBe(false);
      }
    }
  } finally {
    grammar.dispose();
  }
  return accepted;
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');
const always = () => true;

describe('format rules against ajv-formats', () => {
  it('date: month lengths and leap years exactly', async () => {
    const candidates: string[] = [];
    for (const year of ['0000', '0004', '0100', '1900', '1996', '2000', '2023', '2024', '2100', '2400', '9999']) {
      for (let month = 0; month <= 13; month++) for (let day = 0; day <= 32; day++) candidates.push(`${year}-${pad(month)}-${pad(day)}`);
    }
    candidates.push('2024-2-01', '2024-02-1', '20240-02-01', '2024/02/01', '2024-02-01T');
    const accepted = await check('date', 'date', candidates, always);
    expect(accepted).toBe(11 * 365 + 6); // 0000, 0004, 1996, 2000, 2024, 2400 are leap years; 0100, 1900, 2100 not
  });

  it('time and date-time: every accepted time is valid; valid times without leap seconds, with Z or ±hh:mm, are accepted', async () => {
    const times: string[] = [];
    for (let h = 0; h <= 24; h++) {
      for (const m of ['00', '30', '59', '60']) {
        for (const s of ['00', '59', '60', '59.5', '00.123456789', '00.1234567890']) {
          for (const tz of ['Z', '+00:00', '-23:59', '+24:00', '+01:60', 'z', '+0100', '']) times.push(`${pad(h)}:${m}:${s}${tz}`);
        }
      }
    }
    const usual = (t: string) => t.slice(6, 8) !== '60' && /(Z|[+-]\d\d:\d\d)$/.test(t) && !/\.\d{10}/.test(t);
    expect(await check('time', 'time', times, usual)).toBe(24 * 3 * 4 * 3); // hours, minutes, seconds, offsets
    const dateTimes = times.filter((_, i) => i % 7 === 0).flatMap((t) => [`2024-02-29T${t}`, `2023-02-29T${t}`, `2023-04-30T${t}`]);
    expect(await check('date-time', 'date-time', dateTimes, (t) => usual(t.slice(11)))).toBeGreaterThan(100);
  });

  it('ipv4 and ipv6: exactly', async () => {
    const octets = [...Array.from({ length: 301 }, (_, i) => String(i)), '00', '01', '001', '010', '099', '0255', ''];
    expect(await check('ipv4', 'ipv4', octets.flatMap((o) => [`${o}.1.2.3`, `1.2.3.${o}`]), always)).toBe(2 * 256);
    const v6 = [
      '::', '::1', '1::', '1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7::', '1:2:3:4:5:6::8', '1::8', '1:2::7:8', 'fe80::1:2', 'FFFF::abcd',
      '::ffff:192.168.0.1', '::ffff:192.168.00.1', '::192.168.0.1', '1:2:3:4:5:6:1.2.3.4', '1:2:3:4:5::1.2.3.4', '1::1.2.3.4', '1:2:3:4:5:6:7:1.2.3.4',
      '1:2:3:4:5:6:7:8:9', '1:::2', '12345::', ':1', '1:', '1:2:3:4:5:6:7', 'g::', '::01.2.3.4', '::256.1.1.1', '1::2::3', '::1.2.3', '1:2:3:4:5:6:7:8::',
    ];
    expect(await check('ipv6', 'ipv6', v6, always)).toBe(15);
  });

  it('email: exactly ajv’s dot-atom and dotted domain', async () => {
    const emails = [
      'a@b.c', 'a.b@c.d', "x!#$%&'*+/=?^_`{|}~-@a-b.c0", 'A@B.CO', 'a@b', 'a@b.', 'a@.b', '.a@b.c', 'a.@b.c', 'a..b@c.d', '"a"@b.c', 'a@-b.c', 'a@b-.c',
      'a@b.c-', 'a@b_c.d', 'a b@c.d', '@b.c', 'a@@b.c', 'a@b..c', 'é@b.c', 'a@1.2', 'a@b.c.d.e',
    ];
    expect(await check('email', 'email', emails, always)).toBe(6);
  });

  it('hostname: only valid names; up to six labels of up to 41 characters', async () => {
    const label = (n: number) => 'a'.repeat(n);
    const names = ['a', 'a.b', 'a-b.c', '0.0', 'a.b.c.d.e.f', 'a.b.c.d.e.f.g', '-a', 'a-', 'a..b', 'a.', '.a', 'A.b', 'a_b', label(41), label(42), `${label(41)}.${label(41)}`, 'xn--a.b'];
    expect(await check('hostname', 'hostname', names, (t) => t.split('.').length <= 6 && t.split('.').every((l) => l.length <= 41) && t === t.toLowerCase() && !t.endsWith('.'))).toBe(8);
  });

  it('uri, uri-template, json pointers, byte: only valid strings, and the usual ones', async () => {
    const uris = ['a:b', 'http://example.com/a/b?q=1#f', 'urn:isbn:0451450523', 'mailto:a@b.c', 'a:', 'a:?q', 'a:#f', '1a:b', 'a:b c', 'a://[::1]/', 'a:%zz', 'a:%41', 'ftp://u:p@h:21/x', '//a/b', 'a:/'];
    expect(await check('uri', 'uri', uris, (t) => !t.includes('['))).toBe(7);
    const templates = ['', 'a', '{a}', '{+a,b:3,c*}', '/x{?q,r}', '{a.b}', '{}', '{a', 'a}', '{a:0}', '{a:10000}', '%41{a}', '<a>', "a'b"];
    expect(await check('uri-template', 'uri-template', templates, always)).toBe(6);
    const pointers = ['', '/', '/a/b', '/a~0b/~1', '/~2', 'a', '/é', '/a b', '//'];
    expect(await check('json-pointer', 'json-pointer', pointers, always)).toBe(7);
    expect(await check('relative-json-pointer', 'relative-json-pointer', ['0', '1#', '12/a', '01', '0/~', '#', '3/a~1b'], always)).toBe(4);
    expect(await check('json-pointer-uri-fragment', 'json-pointer-uri-fragment', ['#', '#/a', '#/a%20b/~0', '/a', '#/a b', '#/~2'], always)).toBe(3);
    expect(await check('byte', 'byte', ['', 'QQ==', 'QUI=', 'QUJD', 'QUJDRA==', 'Q', 'QQ=', 'QUJD=', 'Q+/9', 'Q Q='], always)).toBe(6);
  });
});

describe('formats compiled in schemas: random walks give only valid strings', () => {
  const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
  const supported = Object.entries(FORMATS).filter(([, plan]) => plan.kind !== 'refused').map(([name]) => name);

  it('every supported format, ours and XGrammar’s', async () => {
    const random = mulberry32(99);
    for (const format of supported) {
      await expectSchemaWalksValid({ type: 'string', format }, (s, v) => ajv.validate(s, v), format, tokenizer, vocabSize, { walks: 60, maxSteps: 120, random });
    }
  }, 120_000);

  it('refuses formats it cannot enforce, naming them', async () => {
    for (const format of ['regex', 'url', 'color', 'idn-whatever']) {
      const error = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema: { type: 'string', format }, whitespace: { kind: 'compact' } }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StructuredOutputError);
      expect((error as Error).message).toMatch(new RegExp(`^Unsupported JSON schema: format "${format}" is not supported: .* \\(at #/format\\)$`));
    }
  });
});
