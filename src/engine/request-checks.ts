// What a session request must be before it waits for anything: a prompt inside the context and
// the vocabulary, logprobs, and sampling parameters in range (RangeErrors naming the value).
import type { SamplingParams, SessionRequest } from './types.ts';

export function checkSessionRequest(request: SessionRequest, vocabSize: number, capacity: number): void {
  const { promptTokens, sampling, logprobs } = request;
  if (promptTokens.length === 0) throw new RangeError('the prompt has no tokens');
  if (promptTokens.length > capacity) {
    throw new RangeError(`the prompt has ${promptTokens.length} tokens; the context holds ${capacity}`);
  }
  for (const id of promptTokens) {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new RangeError(`prompt token id ${id} is outside the vocabulary (0..${vocabSize - 1})`);
    }
  }
  if (logprobs !== undefined && !(Number.isInteger(logprobs) && logprobs >= 0)) {
    throw new RangeError(`logprobs must be a non-negative integer, got ${logprobs}`);
  }
  checkSampling(sampling, vocabSize);
}

function checkSampling(s: SamplingParams, vocabSize: number): void {
  const bad = (name: string, value: unknown, want: string) => new RangeError(`sampling ${name} must be ${want}, got ${value}`);
  if (!(Number.isFinite(s.temperature) && s.temperature >= 0)) throw bad('temperature', s.temperature, 'a finite number >= 0');
  if (!(s.topP >= 0 && s.topP <= 1)) throw bad('topP', s.topP, 'in [0, 1]');
  if (s.seed !== undefined && !Number.isFinite(s.seed)) throw bad('seed', s.seed, 'a finite number');
  if (s.topK !== undefined && !(Number.isInteger(s.topK) && s.topK >= 0)) throw bad('topK', s.topK, 'an integer >= 0');
  if (s.minP !== undefined && !(s.minP >= 0 && s.minP <= 1)) throw bad('minP', s.minP, 'in [0, 1]');
  if (s.repetitionPenalty !== undefined && !(Number.isFinite(s.repetitionPenalty) && s.repetitionPenalty > 0)) {
    throw bad('repetitionPenalty', s.repetitionPenalty, 'a finite number > 0');
  }
  if (s.presencePenalty !== undefined && !Number.isFinite(s.presencePenalty)) throw bad('presencePenalty', s.presencePenalty, 'finite');
  if (s.frequencyPenalty !== undefined && !Number.isFinite(s.frequencyPenalty)) throw bad('frequencyPenalty', s.frequencyPenalty, 'finite');
  for (const [id, bias] of s.logitBias ?? []) {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw bad('logitBias id', id, `a token id in 0..${vocabSize - 1}`);
    if (!Number.isFinite(bias)) throw bad(`logitBias[${id}]`, bias, 'finite');
  }
}
