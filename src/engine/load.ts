// From model files to a ready generator: open (headers, config, tokenizer), plan the weights' GPU
// storage and check what the model needs against the device (before allocating anything), upload
// the weights, allocate the KV cache.
import { isCpuAdapter, maxBufferBytes, type GpuContext } from '../gpu/device.ts';
import type { ModelFiles } from '../io/files.ts';
import { KvCache, type KvDType } from '../model/kv-cache.ts';
import { LlamaModel } from '../model/llama.ts';
import { openModel, uploadLlamaWeights, type LoadProgress } from './open-model.ts';
import { checkChatTemplate } from '../tokenizer/chat-template.ts';
import { planWeightStorage, type LlamaWeights, type WeightStorage } from '../model/weights.ts';
import { DEFAULT_MAX_CONCURRENT_SEQUENCES, LlamaGenerator } from './generator.ts';
import { checkMemory, estimateMemory, MiB, type MemoryEstimate } from './memory.ts';
import { checkEmbeddingOptions, readEmbeddingInfo, type EmbeddingOptions } from './embedding-config.ts';
import { TOOL_CALL_FORMATS, type ModelInfo, type ToolCallFormat } from './types.ts';

export interface LoadOptions {
  /** The id requests name in `model`; defaults to the file or folder name. */
  id?: string;
  /** Other names the model answers to. */
  aliases?: string[];
  /** Positions the KV cache holds (prompt + completion); default: the model's, capped at 4096. */
  contextLength?: number;
  /**
   * Element type of the KV cache (default 'f16' on GPUs: half the memory of 'f32', as llama.cpp;
   * K and V are rounded to nearest even as they are cached. 'f32' on CPU adapters, where it is
   * faster). `info.storage.kvCacheDType` reports it.
   */
  kvCacheDType?: KvDType;
  /** Most requests that may wait for the GPU before new ones are refused. */
  maxQueued?: number;
  /**
   * Sequences that decode at once, as rows of one batch (continuous batching; vLLM's
   * `max_num_seqs`). Each takes a KV slot of the whole context beside the working cache, allocated
   * with the model; with memoryBudgetBytes, no more than fit in what the model and the prefix
   * cache leave, and no more than one of the device's buffers holds. Default: 8 as far as their
   * slots fit in 512 MiB; 1: one request at a time, with no slots.
   * `info.storage.maxConcurrentSequences` reports it.
   */
  maxConcurrentSequences?: number;
  /**
   * How Hugging Face (f32 / f16 / bf16) matrices are stored on the GPU (default 'f16'):
   * 'f16' packed halves (f32 and bf16 converted while loading; values beyond ±65504 are clamped,
   * with a warning); 'f32'; 'source' (the file's own type); 'q8_0' / 'q4_0' quantized at load into
   * ggml blocks of 32 weights (about 1.06 / 0.56 bytes a weight; a matrix whose rows are not a
   * multiple of 32 stays f16). GGUF files keep their tensors' types (option ignored).
   * `info.storage` reports the result per tensor.
   */
  weightStorage?: WeightStorage;
  /**
   * GPU memory the model may take, in bytes. WebGPU cannot tell how much memory a device has
   * free, so without a budget only the per-buffer limits are checked; with one, a model whose
   * weights + KV cache + estimated activations exceed it is refused before anything is allocated,
   * with an error naming needed vs available.
   */
  memoryBudgetBytes?: number;
  /**
   * Automatic prefix caching (default true): a request whose tokens begin with tokens whose K/V
   * is on the GPU (an earlier request's prompt and completion) prefills only the rest. False:
   * every request prefills its whole prompt.
   */
  prefixCache?: boolean;
  /**
   * GPU memory for saved prefixes, beyond the KV cache (which keeps the last request's K/V
   * anyway): earlier conversations' K/V, evicted least recently used. Default: the KV cache's
   * size, and at most what memoryBudgetBytes leaves. 0 keeps only the last request's.
   * `info.storage.prefixCacheBytes` reports it.
   */
  prefixCacheBytes?: number;
  /**
   * A Jinja chat template that replaces the model's own (tokenizer_config.json `chat_template`,
   * GGUF `tokenizer.chat_template`) for chat requests; rendered as transformers renders templates,
   * with the same variables (messages, tools, add_generation_prompt, bos_token, eos_token, ...).
   * A template that does not parse fails the load.
   */
  chatTemplate?: string;
  /**
   * Which tool-call format chat output is parsed with: 'hermes' (JSON calls in
   * `<tool_call>...</tool_call>`: Qwen2.5, Hermes), 'llama3_json' (a JSON object with name and
   * parameters: Llama 3.1 / 3.2), 'mistral' (`[TOOL_CALLS]` and a JSON list). Default: chosen from
   * the chat template. `info.toolCallFormat` reports the option.
   */
  toolCallFormat?: ToolCallFormat;
  /**
   * Whether chat replies of a model that thinks (Qwen3, DeepSeek-R1 distills: `<think>` tokens, or
   * a template that writes `<think>`) return the thinking apart from the answer (`reasoning`).
   * Default true; false leaves the whole output in `content`. `info.reasoning` is false then.
   */
  reasoning?: boolean;
  /**
   * How embed() makes vectors, over what the model's files say (sentence-transformers modules.json
   * and 1_Pooling/config.json; a GGUF's `<arch>.pooling_type`): `pooling` 'last' | 'mean' | 'cls',
   * `normalize` (L2), `matryoshka` (trained for truncated `dimensions`; default false: no file
   * says so). Without files or option: the last token, normalised (a generative model's).
   * `info.embedding` reports the result (src/engine/embedding-config.ts).
   */
  embedding?: EmbeddingOptions;
  onProgress?: (progress: LoadProgress) => void;
  /** Load warnings (such as weights clamped to the f16 range); default console.warn. */
  onWarning?: (message: string) => void;
}

export const DEFAULT_MAX_CONTEXT = 4096;


/** chatTemplate and toolCallFormat, checked before anything is read. */
async function checkChatOptions(options: LoadOptions): Promise<void> {
  const { chatTemplate, toolCallFormat } = options;
  if (chatTemplate !== undefined) {
    if (typeof chatTemplate !== 'string') throw new Error(`chatTemplate must be a string (a Jinja chat template), got ${typeof chatTemplate}`);
    try {
      await checkChatTemplate(chatTemplate);
    } catch (err) {
      throw new Error(`chatTemplate: ${(err as Error).message}`, { cause: err });
    }
  }
  if (options.reasoning !== undefined && typeof options.reasoning !== 'boolean') throw new Error(`reasoning must be a boolean, got ${JSON.stringify(options.reasoning)}`);
  if (toolCallFormat !== undefined && !TOOL_CALL_FORMATS.includes(toolCallFormat)) {
    throw new Error(`toolCallFormat must be one of ${TOOL_CALL_FORMATS.map((f) => `'${f}'`).join(', ')}, got ${JSON.stringify(toolCallFormat)}`);
  }
}

/**
 * f16 (half the memory, as llama.cpp) on GPUs. On a CPU adapter f32: there the cache is host
 * memory, and unpacking halves costs more than reading twice the bytes.
 * Measurements: docs/tuning.md#kv-cache
 */
function defaultKvCacheDType(ctx: GpuContext): KvDType {
  return isCpuAdapter(ctx.adapter) ? 'f32' : 'f16';
}

export async function loadGenerator(ctx: GpuContext, files: ModelFiles, options: LoadOptions = {}): Promise<LlamaGenerator> {
  await checkChatOptions(options);
  checkEmbeddingOptions(options.embedding);
  const opened = await openModel(files, { chatTemplate: options.chatTemplate });
  const config = opened.config;
  const { embedding, notice: embeddingNotice } = await readEmbeddingInfo({ files, ggufMetadata: opened.ggufMetadata, hiddenSize: config.hiddenSize }, options.embedding);
  if (embeddingNotice) opened.notices.push(embeddingNotice);
  const capacity = options.contextLength ?? Math.min(config.contextLength, DEFAULT_MAX_CONTEXT);
  if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`contextLength must be a positive integer, got ${capacity}`);
  // The RoPE tables are chosen for the loaded context (LongRoPE's long factors past its original context).
  config.loadedContextLength = capacity;
  const kvDType = options.kvCacheDType ?? defaultKvCacheDType(ctx);
  if (kvDType !== 'f16' && kvDType !== 'f32') throw new Error(`kvCacheDType must be 'f16' or 'f32', got ${String(kvDType)}`);
  const weightStorage = options.weightStorage ?? 'f16';
  const storage = opened.format === 'gguf' ? 'source' : weightStorage;
  const plan = planWeightStorage(config, opened.tensors, storage, ctx.limits);
  const estimate = estimateMemory(config, plan, capacity, kvDType);
  const id = options.id ?? files.id;
  checkMemory(estimate, plan, ctx.limits, options.memoryBudgetBytes, { modelId: id, storage, contextLength: capacity });
  const prefixCacheBytes = prefixCacheBudget(options, estimate);
  const maxConcurrentSequences = concurrencyBudget(options, estimate, prefixCacheBytes, capacity * KvCache.rowBytesOf(config, kvDType), maxBufferBytes(ctx.limits));
  for (const notice of opened.notices) (options.onWarning ?? console.warn)(notice);
  const info: ModelInfo = {
    id,
    aliases: options.aliases ?? [],
    architecture: config.architecture,
    contextLength: capacity,
    vocabSize: config.vocabSize,
    format: opened.format,
    created: Math.floor(Date.now() / 1000),
    ...(options.toolCallFormat !== undefined ? { toolCallFormat: options.toolCallFormat } : {}),
    ...(options.reasoning === false ? { reasoning: false as const } : {}),
    ...(opened.notices.length > 0 ? { notices: [...opened.notices] } : {}),
    ...(embedding ? { embedding } : {}),
    storage: {
      weightStorage: storage,
      kvCacheDType: kvDType,
      prefixCacheBytes,
      maxConcurrentSequences,
      tensors: Object.fromEntries([...plan.tensors].map(([name, s]) => [name, { ...s }])),
      ...estimate,
    },
  };
  return uploadOneAtATime(ctx.device, async () => {
    // The device's out-of-memory and validation errors during the upload are caught here: WebGPU
    // reports a buffer it could not allocate only through them, and everything written to or run
    // on such a buffer would silently do nothing (a model that loads "fine" and answers garbage).
    const device = ctx.device;
    device.pushErrorScope('validation');
    device.pushErrorScope('out-of-memory');
    let weights: LlamaWeights | undefined;
    let model: LlamaModel | undefined;
    let generator: LlamaGenerator | undefined;
    let failure: unknown;
    try {
      weights = await uploadLlamaWeights(ctx, opened, options.onProgress, { storage, onWarning: options.onWarning });
      model = await LlamaModel.create(ctx, config, weights);
      generator = new LlamaGenerator(model, opened.tokenizer, info, model.createKvCache(capacity, kvDType), {
        maxQueued: options.maxQueued,
        maxConcurrentSequences,
        prefixCache: { enabled: options.prefixCache !== false, maxBytes: prefixCacheBytes },
      });
      await generator.prepare();
    } catch (err) {
      failure = err;
    }
    let outOfMemory: GPUError | null = null;
    let invalid: GPUError | null = null;
    try {
      outOfMemory = await device.popErrorScope();
      invalid = await device.popErrorScope();
    } catch (err) {
      failure ??= new Error(`The GPU device was lost while loading ${id}: ${(err as Error).message}`); // a lost device may reject pops
    }
    if (!failure && (outOfMemory || invalid)) {
      failure = outOfMemory
        ? new Error(
            `The GPU ran out of memory loading ${id}: it needs about ${MiB(estimate.totalBytes)} (weights ${MiB(estimate.weightBytes)}, ` +
              `KV cache ${MiB(estimate.kvCacheBytes)} for ${capacity} positions). Try a smaller contextLength or weightStorage 'q4_0'. (${outOfMemory.message})`,
          )
        : new Error(`GPU validation error while loading ${id}: ${invalid!.message}`);
    }
    if (failure) {
      // A failed load leaves no GPU memory behind.
      if (generator) generator.destroy();
      else if (model) model.destroy();
      else weights?.destroy();
      throw failure;
    }
    return generator!;
  });
}

/** GPU memory the decode slots take at most when maxConcurrentSequences is not given. */
const DEFAULT_SLOTS_BYTES = 512 * 2 ** 20;

/**
 * Sequences that decode at once: the option, else DEFAULT_MAX_CONCURRENT_SEQUENCES as far as their
 * KV slots fit in DEFAULT_SLOTS_BYTES; with a memory budget, at most as many slots as fit in what
 * the model and the prefix cache leave; and at most as many as one of the device's buffers holds
 * (a layer's slots share one). Fewer than 2 (or none fitting): 1, decoding in the working cache
 * with no slots.
 */
function concurrencyBudget(options: LoadOptions, estimate: MemoryEstimate, prefixCacheBytes: number, layerSlotBytes: number, maxBuffer: number): number {
  const asked = options.maxConcurrentSequences;
  if (asked !== undefined && !(Number.isInteger(asked) && asked >= 1 && asked <= 1024)) throw new Error(`maxConcurrentSequences must be an integer in 1..1024, got ${asked}`);
  const slotBytes = Math.max(1, estimate.kvCacheBytes);
  // Unasked, the slots take at most DEFAULT_SLOTS_BYTES: a long context gets fewer of them.
  let wanted = asked ?? Math.min(DEFAULT_MAX_CONCURRENT_SEQUENCES, Math.floor(DEFAULT_SLOTS_BYTES / slotBytes));
  if (options.memoryBudgetBytes !== undefined) {
    const left = options.memoryBudgetBytes - estimate.totalBytes - prefixCacheBytes;
    wanted = Math.min(wanted, Math.floor(left / slotBytes));
  }
  // Every slot of a layer's K (and V) lives in one buffer.
  wanted = Math.min(wanted, Math.floor(maxBuffer / Math.max(1, layerSlotBytes)));
  return wanted >= 2 ? wanted : 1;
}

/**
 * The bytes saved prefixes may take: LoadOptions.prefixCacheBytes, by default the KV cache's size;
 * within memoryBudgetBytes, what the model leaves of it (an explicit size that does not fit is an
 * error). 0 when the prefix cache is off.
 */
function prefixCacheBudget(options: LoadOptions, estimate: MemoryEstimate): number {
  const { prefixCache, prefixCacheBytes, memoryBudgetBytes } = options;
  if (prefixCache !== undefined && typeof prefixCache !== 'boolean') throw new Error(`prefixCache must be true or false, got ${JSON.stringify(prefixCache)}`);
  if (prefixCacheBytes !== undefined && !(Number.isSafeInteger(prefixCacheBytes) && prefixCacheBytes >= 0)) {
    throw new Error(`prefixCacheBytes must be a whole number of bytes >= 0, got ${prefixCacheBytes}`);
  }
  if (prefixCache === false) return 0;
  const left = memoryBudgetBytes === undefined ? Infinity : Math.max(0, memoryBudgetBytes - estimate.totalBytes);
  if (prefixCacheBytes === undefined) return Math.min(estimate.kvCacheBytes, left);
  if (prefixCacheBytes > left) {
    throw new Error(
      `prefixCacheBytes ${prefixCacheBytes} (${MiB(prefixCacheBytes)}) does not fit in memoryBudgetBytes: the model takes ${MiB(estimate.totalBytes)} ` +
        `of its ${MiB(memoryBudgetBytes!)}, leaving ${MiB(left)}.`,
    );
  }
  return prefixCacheBytes;
}

/** The upload running on each device, if any: the next waits for it. */
const uploads = new WeakMap<GPUDevice, Promise<unknown>>();

/**
 * Runs `upload` once the device's earlier uploads have ended. Error scopes belong to the device,
 * not to an async call: two loads whose scopes interleaved would pop each other's, so one load's
 * out-of-memory error could fail the other and leave its own model holding invalid buffers.
 */
function uploadOneAtATime<T>(device: GPUDevice, upload: () => Promise<T>): Promise<T> {
  const result = (uploads.get(device) ?? Promise.resolve()).then(upload);
  uploads.set(device, result.catch(() => {}));
  return result;
}
