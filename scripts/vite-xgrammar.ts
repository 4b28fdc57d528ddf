// A Vite plugin both builds use (vite.lib.config.ts, vite.demo.config.ts).
import type { Plugin } from 'vite';

/**
 * XGrammar's package (@mlc-ai/web-xgrammar: emscripten output in a UMD bundle) reaches Node
 * modules on a path only Node takes: `require('u' + 'rl').pathToFileURL(__filename)` for its own
 * URL and `await import('module')` for createRequire. In the bundle the URL is a constant (the wasm
 * is inline, so the URL is never read) and createRequire comes from process.getBuiltinModule, which
 * src/grammar/xgrammar.ts checks for: no Node module, require() or bare import is left for a page.
 * Fails the build unless each replacement applies as often as in the pinned version.
 */
export function xgrammarForBundles(): Plugin {
  const file = /\/node_modules\/@mlc-ai\/web-xgrammar\/lib\/index\.js$/;
  const replacements = [
    { from: "require('u' + 'rl').pathToFileURL(__filename).href", to: "'file:///'", count: 3 },
    { from: "await import('module')", to: "globalThis.process.getBuiltinModule('module')", count: 1 },
  ];
  return {
    name: 'webgpu-llama:xgrammar-for-bundles',
    enforce: 'pre',
    transform(code, id) {
      if (!file.test(id.split('?')[0]!)) return null;
      for (const { from, to, count } of replacements) {
        const parts = code.split(from);
        if (parts.length - 1 !== count) this.error(`expected ${count} "${from}" in ${id}, found ${parts.length - 1}`);
        code = parts.join(to);
      }
      return { code, map: null };
    },
  };
}
