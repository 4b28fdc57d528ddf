// The conformance target over the fake generator, reached through any host's fetch.
import type { FakeGenerator } from '../helpers/fake-generator.ts';
import type { ConformanceTarget, FetchLike } from './target.ts';

export function fakeTarget(generator: FakeGenerator, fetch: FetchLike, baseUrl: string): ConformanceTarget {
  return {
    fetch,
    baseUrl,
    profile: {
      model: 'fake-llama',
      alias: 'fake',
      contextLength: 256,
      tokenizer: generator.tokenizer,
      prompt: 'Once upon a time',
      otherPrompt: 'The cat sat on the mat',
      logprobTolerance: 1e-9,
    },
    capabilities: ['abort', 'openai', 'sessions'],
    openSessions: () => generator.active,
  };
}
