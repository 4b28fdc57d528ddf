// Hostile request values as JSON text: values nested thousands of levels deep cannot be built
// with JSON.stringify (it recurses), so bodies are written with placeholders that the raw text
// replaces. Shared by the hostile-request tests (test/api/hostile-*.test.ts).

/** JSON text of `depth` arrays nested in each other around `leaf`. */
export function deepArrayJson(depth: number, leaf = '"x"'): string {
  return '['.repeat(depth) + leaf + ']'.repeat(depth);
}

/** JSON text of `depth` objects `{"a": …}` nested in each other around `leaf`. */
export function deepObjectJson(depth: number, key = 'a', leaf = '1'): string {
  return `{${JSON.stringify(key)}:`.repeat(depth) + leaf + '}'.repeat(depth);
}

/** A placeholder for raw JSON text in a body given to bodyText. */
export function raw(name: string): string {
  return `\u0000raw:${name}`;
}

/** The JSON text of `body`, each raw(name) placeholder replaced by `texts[name]`. */
export function bodyText(body: unknown, texts: Record<string, string>): string {
  let text = JSON.stringify(body);
  for (const [name, value] of Object.entries(texts)) text = text.replace(JSON.stringify(raw(name)), () => value);
  return text;
}

/** One mebibyte of 'x'. */
export const MEBIBYTE_STRING = 'x'.repeat(1 << 20);
