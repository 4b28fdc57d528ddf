// The engine as a worker or service worker serves it: every request through the one handler,
// counted from its start to the end of its response (a stream's last event, or its abort), so the
// host can say how many requests are in flight and how many a departed client aborted.
// Browser code: nothing here may import Node modules.
import { answerApiRequest, type ApiEngine, type ApiRequest, type ApiResponse } from '../api/handler.ts';
import type { RequestHandlingEngine } from '../api/shim.ts';

export interface RequestStats {
  /** Requests whose response has not ended yet. */
  inFlight: number;
  /** Requests whose response ended normally (errors included). */
  completed: number;
  /** Requests ended by their abort signal (a cancelled stream, a closed tab). */
  aborted: number;
}

export interface TrackedEngine extends RequestHandlingEngine {
  readonly stats: Readonly<RequestStats>;
}

/** `engine` is asked for at each request (a host may load its model after it starts serving). */
export function trackRequests(engine: () => ApiEngine | RequestHandlingEngine | Promise<ApiEngine | RequestHandlingEngine>): TrackedEngine {
  const stats: RequestStats = { inFlight: 0, completed: 0, aborted: 0 };
  const finish = (request: ApiRequest) => {
    stats.inFlight--;
    if (request.signal?.aborted) stats.aborted++;
    else stats.completed++;
  };
  return {
    stats,
    async handle(request: ApiRequest, options: { basePath?: string } = {}): Promise<ApiResponse> {
      stats.inFlight++;
      let response: ApiResponse;
      try {
        // Through the engine's own handle() where it has one (Engine does): then unload() waits for
        // the whole request, every prompt of a batch, and not only for the session running.
        response = await answerApiRequest(engine(), request, options);
      } catch (err) {
        finish(request); // answerApiRequest never throws; counted all the same
        throw err;
      }
      if (typeof response.body === 'string') {
        finish(request);
        return response;
      }
      return { ...response, body: counted(response.body, () => finish(request)) };
    },
  };
}

async function* counted(events: AsyncIterable<string>, done: () => void): AsyncGenerator<string, void, void> {
  try {
    yield* events;
  } finally {
    done();
  }
}
