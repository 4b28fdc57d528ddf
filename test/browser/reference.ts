// The stories260K reference completion (llama.cpp, greedy), shared by the browser tests.
import { readFileSync } from 'node:fs';

export interface Reference {
  prompt: string;
  prompt_token_ids: number[];
  completion_token_ids: number[];
  completion_text: string;
}

export const reference: Reference = JSON.parse(
  readFileSync(new URL('../fixtures/stories260K-reference.json', import.meta.url), 'utf8'),
);
