// A FetchLike that runs each request inside a browser page (Playwright's `page.evaluate`), so that
// the conformance cases, running in the test process, talk to the page's fetch shim:
//
//   const api = new Api({ fetch: pageFetch(page), baseUrl: 'http://127.0.0.1:4173/v1', profile, capabilities: [] });
//   for (const c of CONFORMANCE_CASES) test(c.name, () => c.run(api));   // skipping c.needs it lacks
//
// Bodies come back whole (a stream is read to its end in the page), so a target built on it
// should not claim 'abort' (those cases read a stream while it is generated). An AbortSignal
// still reaches the page's fetch. The openai client cases work through it too ('openai').

/** What pageFetch needs of a Playwright Page. */
export interface EvaluatingPage {
  evaluate<R, A>(fn: (arg: A) => R | Promise<R>, arg: A): Promise<R>;
}

interface PageAnswer {
  ok: boolean;
  status?: number;
  headers?: [string, string][];
  body?: string;
  name?: string;
  message?: string;
}

let nextId = 0;

export function pageFetch(page: EvaluatingPage) {
  return async (
    url: string,
    init: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal } = {},
  ): Promise<Response> => {
    const id = ++nextId;
    const { signal, ...plain } = init;
    signal?.throwIfAborted();
    const onAbort = () => {
      void page
        .evaluate((key: number) => {
          const aborts = (globalThis as { __conformanceAborts?: Map<number, AbortController> }).__conformanceAborts;
          aborts?.get(key)?.abort();
        }, id)
        .catch(() => {});
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    let answer: PageAnswer;
    try {
      answer = await page.evaluate(
        async ({ url, init, key }: { url: string; init: typeof plain; key: number }): Promise<PageAnswer> => {
          const g = globalThis as { __conformanceAborts?: Map<number, AbortController> };
          const aborts = (g.__conformanceAborts ??= new Map());
          const controller = new AbortController();
          aborts.set(key, controller);
          try {
            const r = await fetch(url, { ...init, signal: controller.signal });
            const body = await r.text();
            return { ok: true, status: r.status, headers: [...r.headers.entries()], body };
          } catch (err) {
            const e = err as Error;
            return { ok: false, name: e?.name ?? 'Error', message: e?.message ?? String(err) };
          } finally {
            aborts.delete(key);
          }
        },
        { url, init: plain, key: id },
      );
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
    if (!answer.ok) {
      if (answer.name === 'AbortError') throw new DOMException(answer.message ?? 'aborted', 'AbortError');
      throw new TypeError(`fetch failed in the page: ${answer.name}: ${answer.message}`);
    }
    return new Response(answer.body ?? '', { status: answer.status ?? 200, headers: answer.headers ?? [] });
  };
}
