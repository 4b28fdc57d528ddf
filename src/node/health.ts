// GET /health, as vLLM's and llama.cpp's servers answer it: 200 once every model is loaded, 503
// while one is loading or after one failed, so that a supervisor or a load balancer can wait for it.
import { ApiError, errorMessage } from '../api/errors.ts';
import { errorResponse, jsonResponse, type ApiEngines, type ApiResponse } from '../api/handler.ts';

type LoadState = { state: 'loaded' } | { state: 'loading' } | { state: 'failed'; reason: string };

/** A function answering GET /health from the engines' loads (followed from now on). */
export function healthCheck(engines: ApiEngines): () => ApiResponse {
  const list = Array.isArray(engines) ? engines : [engines];
  const states: LoadState[] = list.map((engine, i) => {
    if (!(engine instanceof Promise)) return { state: 'loaded' };
    engine.then(
      () => (states[i] = { state: 'loaded' }),
      (err: unknown) => (states[i] = { state: 'failed', reason: errorMessage(err) }),
    );
    return { state: 'loading' };
  });
  return () => {
    const failed = states.flatMap((s) => (s.state === 'failed' ? [s.reason] : []));
    // The failure's text (paths, hub errors) is the server's log's, not for whoever can reach the port.
    if (failed.length > 0) {
      return errorResponse(new ApiError(503, 'A model failed to load; the server log says why.', { type: 'service_unavailable', code: 'model_load_failed' }));
    }
    if (states.some((s) => s.state === 'loading')) {
      return errorResponse(
        new ApiError(503, 'The model is loading.', { type: 'service_unavailable', code: 'model_loading', headers: { 'retry-after': '1' } }),
      );
    }
    return jsonResponse(200, { status: 'ok' });
  };
}
