// The script of the dedicated Web Worker that loadModelInWorker starts (dist/worker.js): the
// engine host, loading models with the browser entry's loadModel on the worker's own WebGPU
// (navigator.gpu exists in workers).
import { loadModel } from '../api/load-model.ts';
import { serveEngineHost } from './host.ts';

serveEngineHost(self, loadModel);
