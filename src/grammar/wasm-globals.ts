// Exports a wasm module's own mutable globals, by editing its binary before it is instantiated.
// XGrammar's build keeps its shadow stack pointer (emscripten's __stack_pointer, the module's first
// defined global) to itself; a C++ failure unwinds through JavaScript without restoring it, so each
// refused compile leaks the frames it had (~650 bytes) until the 64 KiB stack is gone and the next
// call traps. With the globals exported, the loader puts the stack pointer back after a failure
// (xgrammar.ts). Only the export section changes; code and data are as built.

/** The export name of the module's defined global `index` (counted from the first defined one). */
export function globalExportName(index: number): string {
  return `webgpu_llama_global_${index}`;
}

/** A module's defined mutable globals: their indices among its defined globals and value types. */
export interface MutableGlobal {
  /** Index among the module's defined (not imported) globals. */
  readonly index: number;
  /** The wasm value type byte: 0x7f i32, 0x7e i64, 0x7d f32, 0x7c f64. */
  readonly type: number;
}

const SECTION_IMPORT = 2;
const SECTION_GLOBAL = 6;
const SECTION_EXPORT = 7;
const KIND_GLOBAL = 3;
/** start, element, data count, code, data: the sections after the export section, in order. */
const SECTIONS_AFTER_EXPORT = new Set([8, 9, 12, 10, 11]);

/**
 * `binary` with an export for each defined mutable global of an i32/i64/f32/f64 type (named by
 * globalExportName), and what it exported; throws on a binary it cannot read.
 */
export function exportMutableGlobals(binary: Uint8Array): { binary: Uint8Array<ArrayBuffer>; globals: MutableGlobal[] } {
  const reader = new Reader(binary);
  if (reader.u32le() !== 0x6d736100 || reader.u32le() !== 1) throw new Error('not a wasm binary (version 1)');
  let importedGlobals = 0;
  let globals: MutableGlobal[] = [];
  let exportSection: { start: number; end: number; headerStart: number } | undefined;
  /** Where an export section goes when there is none: before the first section that must follow it. */
  let insertAt = binary.length;
  while (!reader.done) {
    const headerStart = reader.pos;
    const id = reader.byte();
    const size = reader.leb();
    const start = reader.pos;
    const end = start + size;
    if (end > binary.length) throw new Error('a wasm section runs past the end of the binary');
    if (id === SECTION_IMPORT) importedGlobals = countImportedGlobals(new Reader(binary, start, end));
    else if (id === SECTION_GLOBAL) globals = mutableGlobals(new Reader(binary, start, end));
    else if (id === SECTION_EXPORT) exportSection = { start, end, headerStart };
    else if (SECTIONS_AFTER_EXPORT.has(id) && insertAt === binary.length) insertAt = headerStart;
    reader.pos = end;
  }
  // No export section: an empty one where it belongs.
  exportSection ??= { start: insertAt, end: insertAt, headerStart: insertAt };
  const exports = new Reader(binary, exportSection.start, exportSection.end);
  const count = exports.done ? 0 : exports.leb();
  const added: number[] = [];
  for (const global of globals) {
    const name = new TextEncoder().encode(globalExportName(global.index));
    added.push(...leb(name.length), ...name, KIND_GLOBAL, ...leb(importedGlobals + global.index));
  }
  const body = concat([Uint8Array.from(leb(count + globals.length)), binary.subarray(exports.pos, exportSection.end), Uint8Array.from(added)]);
  const edited = concat([
    binary.subarray(0, exportSection.headerStart),
    Uint8Array.from([SECTION_EXPORT, ...leb(body.length)]),
    body,
    binary.subarray(exportSection.end),
  ]);
  return { binary: edited, globals };
}

function countImportedGlobals(reader: Reader): number {
  let globals = 0;
  for (let n = reader.leb(); n > 0; n--) {
    reader.skip(reader.leb()); // module name
    reader.skip(reader.leb()); // field name
    const kind = reader.byte();
    if (kind === 0) reader.leb(); // function: type index
    else if (kind === 1) {
      reader.byte(); // table: reference type, limits
      skipLimits(reader);
    } else if (kind === 2) skipLimits(reader); // memory
    else if (kind === KIND_GLOBAL) {
      reader.skip(2); // value type, mutability
      globals++;
    } else if (kind === 4) {
      reader.byte(); // tag: attribute, type index
      reader.leb();
    } else throw new Error(`unknown wasm import kind ${kind}`);
  }
  return globals;
}

function skipLimits(reader: Reader): void {
  const flags = reader.byte();
  reader.leb();
  if (flags & 1) reader.leb();
}

function mutableGlobals(reader: Reader): MutableGlobal[] {
  const found: MutableGlobal[] = [];
  const count = reader.leb();
  for (let index = 0; index < count; index++) {
    const type = reader.byte();
    const mutable = reader.byte() === 1;
    skipConstantExpression(reader);
    if (mutable && type >= 0x7c && type <= 0x7f) found.push({ index, type });
  }
  return found;
}

/** Skips a constant expression up to and including its `end`. */
function skipConstantExpression(reader: Reader): void {
  for (;;) {
    const op = reader.byte();
    if (op === 0x0b) return; // end
    if (op === 0x41 || op === 0x42) reader.sleb(); // i32.const, i64.const
    else if (op === 0x43) reader.skip(4); // f32.const
    else if (op === 0x44) reader.skip(8); // f64.const
    else if (op === 0x23 || op === 0xd2) reader.leb(); // global.get, ref.func
    else if (op === 0xd0) reader.byte(); // ref.null
    else if (!(op >= 0x6a && op <= 0x6c) && !(op >= 0x7c && op <= 0x7e)) {
      throw new Error(`unknown instruction 0x${op.toString(16)} in a wasm constant expression`);
    } // i32/i64 add, sub, mul (extended constant expressions) have no immediates
  }
}

class Reader {
  pos: number;
  constructor(
    private readonly bytes: Uint8Array,
    start = 0,
    private readonly end = bytes.length,
  ) {
    this.pos = start;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  byte(): number {
    if (this.pos >= this.end) throw new Error('the wasm binary ends in the middle of a section');
    return this.bytes[this.pos++]!;
  }

  u32le(): number {
    let value = 0;
    for (let i = 0; i < 4; i++) value |= this.byte() << (8 * i);
    return value >>> 0;
  }

  leb(): number {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      if (shift > 28) throw new Error('a LEB128 number in the wasm binary is too long');
      const b = this.byte();
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value;
    }
  }

  /** A signed LEB128 number, skipped (up to 64 bits). */
  sleb(): void {
    for (let n = 0; n < 10; n++) if ((this.byte() & 0x80) === 0) return;
    throw new Error('a signed LEB128 number in the wasm binary is too long');
  }

  skip(n: number): void {
    if (this.pos + n > this.end) throw new Error('the wasm binary ends in the middle of a section');
    this.pos += n;
  }
}

function leb(value: number): number[] {
  const out: number[] = [];
  do {
    let b = value & 0x7f;
    value = Math.floor(value / 128);
    if (value > 0) b |= 0x80;
    out.push(b);
  } while (value > 0);
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
