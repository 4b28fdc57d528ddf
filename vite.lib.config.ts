// The library build: `npm run build` writes dist/ — ES modules a page can import with no bundler
// (WGSL and @huggingface/tokenizers bundled in; only `webgpu`, Dawn, and node: modules stay
// external, and only the Node entries import them). Declarations come from tsc
// (tsconfig.build.json) into dist/types/.
//
// Every file lands flat in dist/ so that the relative URL of the dedicated worker
// (`new URL("./worker.js", import.meta.url)`, see src/worker/worker-url.ts) holds from any chunk.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig, type Plugin } from 'vite';
import { xgrammarForBundles } from './scripts/vite-xgrammar.ts';

const src = (path: string) => fileURLToPath(new URL(`./src/${path}`, import.meta.url));

/** The licenses of the bundled dependencies travel with them (Apache-2.0 and MIT ask for that). */
function bundledLicenses(): Plugin {
  return {
    name: 'webgpu-llama:bundled-licenses',
    generateBundle() {
      for (const name of ['tokenizers', 'jinja']) {
        const license = readFileSync(new URL(`./node_modules/@huggingface/${name}/LICENSE`, import.meta.url), 'utf8');
        this.emitFile({ type: 'asset', fileName: `licenses/huggingface-${name}.LICENSE.txt`, source: license });
      }
    },
  };
}

/**
 * The default worker's start in dist: `new Worker(new URL("./worker.js", import.meta.url), ...)`,
 * written out where src/worker/worker-url.ts computes the URL of its source entry. Applied to the
 * output so that this build's own worker handling never sees the form; fails the build unless it
 * applies exactly once.
 */
function distWorkerStart(): Plugin {
  const from = 'new Worker(sourceWorkerUrl(), {';
  const to = 'new Worker(new URL("./worker.js", import.meta.url), {';
  let applied = 0;
  return {
    name: 'webgpu-llama:dist-worker-start',
    renderStart() {
      applied = 0; // per build: `vite build --watch` runs several
    },
    renderChunk(code) {
      const parts = code.split(from);
      if (parts.length === 1) return null;
      applied += parts.length - 1;
      return { code: parts.join(to), map: null };
    },
    generateBundle() {
      if (applied !== 1) this.error(`expected one "${from}" in the output, found ${applied}`);
    },
  };
}

export default defineConfig({
  plugins: [bundledLicenses(), distWorkerStart(), xgrammarForBundles()],
  // No public/ copy (the models are not part of the package), no HTML.
  publicDir: false,
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    // Unminified: users' bundlers minify; a readable dist is easier to debug in a page.
    minify: false,
    sourcemap: false,
    reportCompressedSize: true,
    lib: {
      entry: {
        index: src('index.ts'),
        worker: src('worker/worker-entry.ts'),
        'service-worker': src('worker/service-worker.ts'),
        node: src('node/index.ts'),
        cli: src('node/cli.ts'),
      },
      formats: ['es'],
    },
    rolldownOptions: {
      external: [/^node:/, 'webgpu'],
      output: {
        entryFileNames: '[name].js',
        chunkFileNames: '[name]-[hash].js',
        // One chunk with the browser runtime every browser entry shares (engine-[hash].js), so
        // a page loads the same file whichever entry it starts from. Node-only code (src/node)
        // stays out of it: only dist/node.js and dist/cli.js reach `node:` modules and `webgpu`.
        codeSplitting: {
          // The chat template engine (jinja-runtime.ts with @huggingface/jinja) stays out of it: its
          // own chunk, loaded by a page's first chat request (import()), and imported by the
          // service worker entry.
          // Structured output likewise: XGrammar (~1.1 MB, its wasm inline) in a chunk of its own,
          // and the grammar layer but its entry (structured-output.ts, types.ts) left out of the
          // engine chunk, so that it lands in the chunk of its lazy entry (compile-output.ts). Both
          // load with a page's first structured request (import()); the service worker imports
          // them. (A 'grammar' group would take types.ts along, as a group takes its modules'
          // imports, and the engine chunk would import it.)
          groups: [
            { name: 'jinja', test: /\/node_modules\/@huggingface\/jinja\/|\/src\/tokenizer\/jinja-[a-z]+\.ts$/ },
            { name: 'xgrammar', test: /\/node_modules\/@mlc-ai\/web-xgrammar\// },
            {
              name: 'engine',
              test: /\/(shaders|node_modules\/(?!@huggingface\/jinja\/|@mlc-ai\/web-xgrammar\/))|\/src\/(?!node\/|worker\/(worker-entry|service-worker)\.ts$|tokenizer\/jinja-[a-z]+\.ts$|grammar\/(?!structured-output\.ts$|types\.ts$))/,
            },
          ],
        },
      },
    },
  },
});
