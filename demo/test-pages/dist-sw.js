// A service worker as an application without a bundler writes it (workers have no import maps:
// the built file by its path). The model is named here, so pages need not send one.
import { serveEngineFromServiceWorker } from '../../dist/service-worker.js';

serveEngineFromServiceWorker({ source: '/models/stories260K/stories260K.gguf', id: 'stories260K' });
