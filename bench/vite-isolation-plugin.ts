// Cross-origin isolation for the bench pages and the llama.cpp reference page
// (scripts/llama-cpp-reference.ts) only. wllama's threads (WebAssembly pthreads) need
// SharedArrayBuffer (its WebAssembly memory is shared even on one thread), which a page gets only when it is served with COOP `same-origin` and COEP
// `require-corp`. The demo must not get them: it fetches models cross-origin (Hugging Face),
// which `require-corp` would block. Everything a bench page loads is same-origin, and same-origin
// responses pass COEP without a CORP header; worker scripts (wllama's come from blob: URLs)
// inherit the page's policy.
import type { Plugin } from 'vite';

/** Pages (paths as requested, query ignored) served cross-origin isolated. */
export const ISOLATED_PAGES = ['/bench.html', '/bench-wllama.html', '/test-pages/llama-cpp-reference.html'];

export function benchIsolation(pages: string[] = ISOLATED_PAGES): Plugin {
  const isolate = (url: string | undefined) => !!url && pages.includes(url.split('?')[0]);
  return {
    name: 'webgpu-llama:bench-isolation',
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        if (isolate(req.url)) {
          res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
          res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
        }
        next();
      });
    },
    configurePreviewServer(server) {
      server.middlewares.use((req, res, next) => {
        if (isolate(req.url)) {
          res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
          res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
        }
        next();
      });
    },
  };
}
