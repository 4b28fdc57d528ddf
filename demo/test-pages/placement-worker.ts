// The engine in a dedicated Web Worker: loadModelInWorker + installFetchShim, the same two calls.
import { installFetchShim, loadModelInWorker } from '../../src/index.ts';
import './placement-client.ts';

const engine = loadModelInWorker('/models/stories260K/stories260K.gguf', { id: 'stories260K' });
installFetchShim(engine);

Object.assign(window, {
  placementReady: async () => (await engine).info.id,
  placementStats: async () => (await engine).requestStats(),
  placementEngine: engine,
  /** A local File sent to a second worker, then RemoteEngine.complete() called directly, streamed and not. */
  placementFileEngine: async (prompt: string, maxTokens: number) => {
    const bytes = await (await fetch('/models/stories260K/stories260K.gguf')).blob();
    const remote = await loadModelInWorker([new File([bytes], 'stories260K.gguf')]);
    try {
      const request = { model: remote.info.id, prompt, max_tokens: maxTokens, temperature: 0 };
      const response = await remote.complete(request);
      const chunks: string[] = [];
      for await (const chunk of await remote.complete({ ...request, stream: true })) chunks.push(chunk.choices[0]?.text ?? '');
      let error: unknown = null;
      try {
        await remote.complete({ ...request, top_p: 2 });
      } catch (err) {
        error = err;
      }
      const { name, status, param } = error as { name: string; status: number; param: string };
      return { id: remote.info.id, text: response.choices[0]!.text, chunks, error: { name, status, param } };
    } finally {
      await remote.unload();
    }
  },
  /**
   * A thinking model (the test model at `url`) in a second worker, behind a shim of its own: a chat
   * reply whole and streamed, its thinking apart (the deltas' reasoning and content joined).
   */
  placementThinking: async (url: string) => {
    const thinking = loadModelInWorker(url, { id: 'bigram', contextLength: 256 });
    const uninstall = installFetchShim(thinking, { baseUrl: '/thinking/v1' });
    try {
      await thinking;
      const post = (body: object) =>
        fetch('/thinking/v1/chat/completions', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'bigram', messages: [{ role: 'user', content: 'Hi' }], temperature: 0, ...body }),
        });
      const whole = (await (await post({})).json()).choices[0];
      const events = (await (await post({ stream: true })).text()).split('\n\n').filter((e) => e.startsWith('data: {'));
      const deltas = events.map((e) => JSON.parse(e.slice('data: '.length)).choices[0]?.delta ?? {}) as { content?: string; reasoning?: string; reasoning_content?: string }[];
      return {
        message: whole.message,
        finish: whole.finish_reason,
        reasoning: deltas.map((d) => d.reasoning ?? '').join(''),
        aliased: deltas.every((d) => d.reasoning === d.reasoning_content),
        content: deltas.map((d) => d.content ?? '').join(''),
      };
    } finally {
      uninstall();
      await (await thinking).unload();
    }
  },
  /** A load that fails in the worker: the error the page gets, and what a shim on it answers. */
  placementFailedLoad: async (source: string) => {
    const failing = loadModelInWorker(source);
    const uninstall = installFetchShim(failing, { baseUrl: '/failed/v1' });
    try {
      const response = await fetch('/failed/v1/models');
      const message = await failing.then(() => 'loaded', (err: Error) => `${err.name}: ${err.message}`);
      return { message, status: response.status, body: await response.json() };
    } finally {
      uninstall();
    }
  },
});
