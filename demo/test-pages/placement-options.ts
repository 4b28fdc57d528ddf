// The library, for the spec to drive (test/browser/placements.spec.ts): the placements' options
// and edge cases (a service worker's own baseUrl, claimClients: false, a Worker the page gives,
// unload), each test calling what it needs. Nothing loads until the spec says so.
import { installFetchShim, loadModelInWorker, registerServiceWorkerEngine } from '../../src/index.ts';

Object.assign(window, {
  placementLib: {
    installFetchShim,
    loadModelInWorker,
    registerServiceWorkerEngine,
    /** The dedicated worker's script, for a Worker the page starts itself. */
    workerEntryUrl: new URL('../../src/worker/worker-entry.ts', import.meta.url).href,
  },
});
