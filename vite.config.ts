// The demo server: `npm run demo` serves demo/index.html at `/` (and demo/bench.html, the pages
// under demo/test-pages/ used by the browser tests), public/ at the site root (the embedded
// model at /models/...). The demo imports ../src and ../shaders straight from source.
// `npm run demo -- --host 0.0.0.0 --port 5173` overrides host and port (Vite's CLI flags win).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import { benchIsolation } from './bench/vite-isolation-plugin.ts';

const repoRoot = fileURLToPath(new URL('.', import.meta.url));
// The browser tests and the bench set this: no file watching and no HMR connection, so an edit
// (or anything else) never reloads a page in the middle of a measurement or a test.
const noReload = !!process.env.WEBGPU_LLAMA_NO_RELOAD;

export default defineConfig({
  root: fileURLToPath(new URL('./demo', import.meta.url)),
  publicDir: fileURLToPath(new URL('./public', import.meta.url)),
  cacheDir: fileURLToPath(new URL('./node_modules/.vite', import.meta.url)),
  // Several pages, no SPA fallback: a missing file (a mistyped ?model= URL) is a 404, not index.html.
  appType: 'mpa',
  plugins: [benchIsolation()],
  server: {
    // 127.0.0.1 rather than `localhost`: a secure context (WebGPU needs one) on every OS,
    // and no surprise IPv6-only binding.
    host: '127.0.0.1',
    port: 5173,
    fs: { allow: [repoRoot] },
    ...(noReload ? { watch: null, ws: false as const } : {}),
  },
  preview: { host: '127.0.0.1' },
  optimizeDeps: {
    // Pre-bundle up front so a dependency found late never reloads a page mid-test.
    entries: ['**/*.html'],
    include: ['@huggingface/tokenizers', 'openai'],
  },
});
