// The models of test/fixtures/llama-cpp-greedy.json (written by scripts/llama-cpp-reference.ts,
// read by test/model/llama-cpp-greedy.test.ts): how each is generated, and what llama.cpp did on it.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeGgufFromHf, type GgufOutType } from './gguf-from-hf.ts';
import { GEMMA_FAMILIES, generateModel, type Family } from './model-families.ts';

export const FIXTURE = fileURLToPath(new URL('../test/fixtures/llama-cpp-greedy.json', import.meta.url));

export interface ReferencePrompt {
  text: string;
  prompt_ids: number[];
  greedy_ids: number[];
}

/** How a model is generated: what the test needs to regenerate the same GGUF. */
export interface ReferenceModelSpec {
  family: string;
  type: GgufOutType;
  seed: number;
  dtype: 'f32';
  overrides: Record<string, unknown>;
  scales: Record<string, number>;
  /** The context both sides load the model with. */
  context: number;
}

export interface ReferenceModel extends ReferenceModelSpec {
  gguf_sha256: string;
  gguf_bytes: number;
  /** The GGUF storage of each tensor kind (after llama.cpp's fallbacks). */
  storage: Record<string, string>;
  /** llama.cpp's end-of-generation tokens (masked by its ignore_eos). */
  eog_ids: number[];
  /** The tokens never sampled, on both sides: the end-of-generation ones and those that are not valid UTF-8 alone. */
  masked_ids: number[];
  prompts: ReferencePrompt[];
  /** Set when llama.cpp refuses the model: its message (nothing else is compared then). */
  error?: string;
}

export interface ReferenceFixture {
  llama_cpp: string;
  wllama: string;
  steps: number;
  context: number;
  models: ReferenceModel[];
}

export function sha256(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** Generates the spec's model folder and GGUF into `dir`; returns the GGUF's path and storage. */
/** Whether the family's tensors take Gemma's GGUF names (ggufNameFromHf). */
export function isGemma(family: string): boolean {
  return (GEMMA_FAMILIES as readonly string[]).includes(family);
}

export async function generateReferenceGguf(spec: ReferenceModelSpec, dir: string): Promise<{ path: string; storage: Record<string, string>; config: Record<string, unknown> }> {
  const config = generateModel({ family: spec.family as Family, shape: 'tiny', out: dir, dtype: spec.dtype, seed: spec.seed, overrides: spec.overrides, scales: spec.scales });
  const { path, storage } = await writeGgufFromHf(dir, join(dir, `model-${spec.type}.gguf`), spec.type);
  return { path, storage, config };
}
