// The engine in a Service Worker: registerServiceWorkerEngine tells the worker
// (placement-sw-script.ts) which model to load; then every page of /test-pages/ has /v1 answered.
import { registerServiceWorkerEngine } from '../../src/index.ts';
import './placement-client.ts';

const engine = registerServiceWorkerEngine('./placement-sw-script.ts', {
  source: '/models/stories260K/stories260K.gguf',
  id: 'stories260K',
});

Object.assign(window, {
  placementReady: async () => (await engine).info.id,
  placementStats: async () => (await engine).requestStats(),
});
