// The export of a wasm module's mutable globals (xgrammar.ts restores XGrammar's stack pointer
// through it): on hand-written modules, with and without an export section, after an imported
// global, beside immutable ones.
import { describe, expect, it } from 'vitest';
import { exportMutableGlobals, globalExportName } from '../../src/grammar/wasm-globals.ts';

const HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
const section = (id: number, body: number[]) => [id, body.length, ...body];
const name = (text: string) => [text.length, ...new TextEncoder().encode(text)];
const I32 = 0x7f;
/** global i32 (mutable or not) = i32.const value (value < 64: one LEB byte). */
const global = (mutable: boolean, value: number) => [I32, mutable ? 1 : 0, 0x41, value, 0x0b];

async function instantiate(bytes: number[], imports: WebAssembly.Imports = {}) {
  const { binary, globals } = exportMutableGlobals(Uint8Array.from(bytes));
  const { instance } = await WebAssembly.instantiate(binary, imports);
  return { exports: instance.exports, globals };
}

describe('exportMutableGlobals', () => {
  it('exports each mutable global of a module that has an export section, keeping its exports', async () => {
    const bytes = [
      ...HEADER,
      ...section(5, [1, 0x00, 1]), // memory: one page
      ...section(6, [3, ...global(true, 42), ...global(false, 7), ...global(true, 9)]),
      ...section(7, [1, ...name('mem'), 2, 0]),
    ];
    const { exports, globals } = await instantiate(bytes);
    expect(globals).toEqual([{ index: 0, type: I32 }, { index: 2, type: I32 }]);
    expect(exports.mem).toBeInstanceOf(WebAssembly.Memory);
    const sp = exports[globalExportName(0)] as WebAssembly.Global;
    expect(sp.value).toBe(42);
    sp.value = 5;
    expect(sp.value).toBe(5);
    expect((exports[globalExportName(2)] as WebAssembly.Global).value).toBe(9);
    expect(exports[globalExportName(1)]).toBeUndefined();
  });

  it('counts imported globals, and adds an export section where there is none', async () => {
    const bytes = [
      ...HEADER,
      ...section(2, [1, ...name('env'), ...name('g'), 0x03, I32, 0]), // import env.g: const i32
      ...section(6, [1, ...global(true, 33)]),
      ...section(10, [0]), // an empty code section, which must follow the export section
    ];
    const imported = new WebAssembly.Global({ value: 'i32', mutable: false }, 11);
    const { exports } = await instantiate(bytes, { env: { g: imported } });
    expect((exports[globalExportName(0)] as WebAssembly.Global).value).toBe(33);
  });

  it('throws on what is not a wasm binary', () => {
    expect(() => exportMutableGlobals(Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/not a wasm binary/);
    expect(() => exportMutableGlobals(Uint8Array.from([...HEADER, 6, 40, 1]))).toThrow(/past the end/);
  });
});
