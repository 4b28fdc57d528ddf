// The demo as static files: `npm run build:demo` writes dist-demo/, which any static file server
// serves as it is (no dev server). Asset paths are relative (`base: './'`), so the folder works
// at a site's root or under any sub-path; public/ (the embedded model, models/stories260K/) is
// copied in beside the page, which loads it by a relative URL. The WGSL shaders are bundled into
// the page's script as strings. Only the demo page is built: the bench and test pages stay
// dev-server pages (vite.config.ts).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import { xgrammarForBundles } from './scripts/vite-xgrammar.ts';

const path = (relative: string) => fileURLToPath(new URL(relative, import.meta.url));

export default defineConfig({
  root: path('./demo'),
  publicDir: path('./public'),
  cacheDir: path('./node_modules/.vite-demo'),
  base: './',
  appType: 'mpa',
  // XGrammar (structured output) without its Node-only paths: scripts/vite-xgrammar.ts.
  plugins: [xgrammarForBundles()],
  build: {
    outDir: path('./dist-demo'),
    emptyOutDir: true,
    target: 'es2022',
    reportCompressedSize: false,
    // One script: the runtime, the tokenizers and the openai client (the console snippets use it);
    // XGrammar's chunk (its wasm inline, ~1.05 MB) loads with the first structured request.
    chunkSizeWarningLimit: 1100,
    rolldownOptions: { input: { index: path('./demo/index.html') } },
  },
});
