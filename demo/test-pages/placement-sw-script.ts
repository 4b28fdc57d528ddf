// The service worker of placement-sw.html, as an application writes its sw.js: one call. Its
// model comes from the page's registerServiceWorkerEngine({ source }).
import { serveEngineFromServiceWorker } from '../../src/worker/service-worker.ts';

serveEngineFromServiceWorker();
