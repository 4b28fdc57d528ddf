// A service worker whose options come from its URL, for the spec's option tests
// (placement-options.html): `?baseUrl=%2Fapi%2Fv1` (encoded: Vite takes a slash there for part of
// the path), `?claimClients=false`. Its model comes from the page's registerServiceWorkerEngine.
import { serveEngineFromServiceWorker } from '../../src/worker/service-worker.ts';

const params = new URL(location.href).searchParams;
serveEngineFromServiceWorker({
  ...(params.has('baseUrl') ? { baseUrl: params.get('baseUrl')! } : {}),
  claimClients: params.get('claimClients') !== 'false',
});
