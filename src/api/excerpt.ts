// Bounded excerpts of request values for error messages: a message names what was given without
// repeating a value of any size. A value is never serialised whole to make one: JSON.stringify of
// a deep value recurses, of a cyclic one or a BigInt throws, and of a large one costs its size.
// Browser code: nothing here may import Node modules.

/** The most characters of a value, key or name that an error message shows. */
export const EXCERPT_LENGTH = 100;
/** The most names (unknown parameters, fields) that an error message lists. */
export const EXCERPT_NAMES = 5;

const ELLIPSIS = '…';

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** `text` cut to `limit` characters with '…' where it was cut (never between the halves of a surrogate pair). */
export function clipText(text: string, limit = EXCERPT_LENGTH): string {
  if (text.length <= limit) return text;
  const end = isHighSurrogate(text.charCodeAt(limit - 1)) ? limit - 1 : limit;
  return text.slice(0, end) + ELLIPSIS;
}

/** Names joined with ', ', each clipped; past `max` of them, how many more there are. */
export function nameList(names: readonly string[], max = EXCERPT_NAMES): string {
  const shown = names.slice(0, max).map((name) => clipText(name)).join(', ');
  return names.length > max ? `${shown} and ${names.length - max} more` : shown;
}

/** One open array or object of the value being written. */
interface Open {
  value: Record<string, unknown> | unknown[];
  keys: readonly string[] | null;
  next: number;
}

/** A primitive (or what JSON has no text for) as the excerpt writes it. */
function scalarText(value: unknown, room: number): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, room + 1));
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol') return clipText(value.toString(), room + 1);
  if (typeof value === 'function') return 'a function';
  return String(value);
}

/**
 * A value as an error message shows it: the start of its JSON text (strings quoted, arrays and
 * objects opened), at most `limit` characters and '…' where cut. Written by a walk with its own
 * stack that stops at the limit, so a value of any size or depth, cyclic or not, costs about
 * `limit` steps. What JSON has no text for is written as JavaScript would (undefined, 5n).
 */
export function excerpt(value: unknown, limit = EXCERPT_LENGTH): string {
  try {
    return clipText(writeExcerpt(value, limit), limit);
  } catch {
    // A proxy or getter that throws while it is read: its kind is all there is to say.
    return Array.isArray(value) ? '[…' : typeof value === 'object' && value !== null ? '{…' : typeof value;
  }
}

function writeExcerpt(value: unknown, limit: number): string {
  let out = '';
  const stack: Open[] = [];
  const write = (item: unknown) => {
    if (typeof item !== 'object' || item === null) {
      out += scalarText(item, limit - out.length);
      return;
    }
    const isArray = Array.isArray(item);
    out += isArray ? '[' : '{';
    stack.push({ value: item as Record<string, unknown>, keys: isArray ? null : Object.keys(item), next: 0 });
  };
  write(value);
  while (stack.length > 0 && out.length <= limit) {
    const open = stack[stack.length - 1]!;
    const size = open.keys === null ? (open.value as unknown[]).length : open.keys.length;
    if (open.next >= size) {
      out += open.keys === null ? ']' : '}';
      stack.pop();
      continue;
    }
    const index = open.next++;
    if (index > 0) out += ',';
    if (open.keys === null) {
      write((open.value as unknown[])[index]);
    } else {
      const key = open.keys[index]!;
      out += `${JSON.stringify(key.slice(0, limit - out.length + 1))}:`;
      if (out.length <= limit) write((open.value as Record<string, unknown>)[key]);
    }
  }
  return out;
}
