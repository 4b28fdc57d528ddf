// Driven by test/browser/cache.spec.ts: loads stories260K from its URL through the persistent
// weight cache, runs the reference prompt greedily, and lists or deletes cached models.
import { deleteCachedModel, listCachedModels, loadModel, type LoadModelOptions } from '../../src/index.ts';

/** Loads `url`, runs `promptTokens` greedily for `maxTokens`, unloads; returns the id and tokens. */
async function loadAndRun(url: string, promptTokens: number[], maxTokens: number, options: LoadModelOptions = {}) {
  const progress: { phase: string; loadedBytes: number; totalBytes: number }[] = [];
  const engine = await loadModel(url, {
    id: 'stories260K',
    onProgress: ({ phase, loadedBytes, totalBytes }) => progress.push({ phase, loadedBytes, totalBytes }),
    ...options,
  });
  try {
    const tokens: number[] = [];
    for await (const t of engine.generator.generate({
      promptTokens,
      maxTokens,
      sampling: { temperature: 0, topP: 1 },
      stopTokenIds: engine.generator.tokenizer.eosIds,
    })) {
      tokens.push(t);
    }
    return { id: engine.info.id, format: engine.info.format, tokens, progress };
  } finally {
    engine.unload();
  }
}

/** Makes Cache Storage fail as a browser can: `caches.open` throws, or `put` runs out of quota. */
function breakCache(how: 'open' | 'quota') {
  if (how === 'open') {
    caches.open = () => Promise.reject(new DOMException('simulated: Cache Storage is unavailable', 'SecurityError'));
  } else {
    Cache.prototype.put = function () {
      return Promise.reject(new DOMException('simulated: the quota has been exceeded', 'QuotaExceededError'));
    };
  }
}

Object.assign(window, { loadAndRun, listCachedModels, deleteCachedModel, breakCache, cacheReady: true });
