// From model files to a ready generator: open (headers, config, tokenizer), upload weights, allocate the KV cache.
import type { GpuContext } from '../gpu/device.ts';
import type { ModelFiles } from '../model/files.ts';
import { LlamaModel } from '../model/llama.ts';
import { openModel, uploadLlamaWeights, type LoadProgress } from '../model/open-model.ts';
import { LlamaGenerator } from './generator.ts';

export interface LoadOptions {
  /** The id requests name in `model`; defaults to the file or folder name. */
  id?: string;
  /** Other names the model answers to. */
  aliases?: string[];
  /** Positions the KV cache holds (prompt + completion); default: the model's, capped at 4096. */
  contextLength?: number;
  /** Most requests that may wait for the GPU before new ones are refused. */
  maxQueued?: number;
  onProgress?: (progress: LoadProgress) => void;
}

export const DEFAULT_MAX_CONTEXT = 4096;

export async function loadGenerator(ctx: GpuContext, files: ModelFiles, options: LoadOptions = {}): Promise<LlamaGenerator> {
  const opened = await openModel(files);
  const config = opened.config;
  const capacity = options.contextLength ?? Math.min(config.contextLength, DEFAULT_MAX_CONTEXT);
  if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`contextLength must be a positive integer, got ${capacity}`);
  const weights = await uploadLlamaWeights(ctx, opened, options.onProgress);
  const model = await LlamaModel.create(ctx, config, weights);
  const info = {
    id: options.id ?? files.id,
    aliases: options.aliases ?? [],
    architecture: config.architecture,
    contextLength: capacity,
    vocabSize: config.vocabSize,
    format: opened.format,
    created: Math.floor(Date.now() / 1000),
  };
  return new LlamaGenerator(model, opened.tokenizer, info, model.createKvCache(capacity), { maxQueued: options.maxQueued });
}
