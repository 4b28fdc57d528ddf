// Driven by test/browser/prefix-cache.spec.ts: loads a model onto the page's GPU with the KV cache
// type asked for, runs a multi-turn conversation through the API and the same requests with
// cache_prompt false (test/helpers/multi-turn.ts, the same code as the Node test), and returns
// what the spec checks.
import { loadModel } from '../../src/index.ts';
import { multiTurn, type TurnResult } from '../../test/helpers/multi-turn.ts';

export interface PrefixCacheRun {
  url: string;
  kvCacheDType: 'f32' | 'f16';
  endpoint: 'chat' | 'completions';
  turns: number;
  maxTokens?: number;
  chatTemplate?: string;
}

const prefixCache = {
  async run(options: PrefixCacheRun): Promise<TurnResult[]> {
    const engine = await loadModel(options.url, {
      kvCacheDType: options.kvCacheDType,
      contextLength: 512,
      ...(options.chatTemplate ? { chatTemplate: options.chatTemplate } : {}),
    });
    try {
      return await multiTurn(engine.generator, { endpoint: options.endpoint, turns: options.turns, ...(options.maxTokens ? { maxTokens: options.maxTokens } : {}) });
    } finally {
      await engine.unload();
    }
  },
};

declare global {
  interface Window {
    prefixCache: typeof prefixCache;
  }
}
window.prefixCache = prefixCache;
document.body.dataset.ready = 'true';
