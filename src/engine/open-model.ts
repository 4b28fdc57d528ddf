// Opening a model: read the headers (GGUF, or a Hugging Face folder's config files and safetensors
// headers), build the LlamaConfig and the tokenizer, and list the tensors by canonical name. No
// tensor data is read here; uploadLlamaWeights streams it to the GPU afterwards.
import type { TextTokenizer } from '../tokenizer/types.ts';
import { createHfTokenizer } from '../tokenizer/hf-tokenizer.ts';
import { tokenizerFromGguf } from '../tokenizer/gguf-tokenizer.ts';
import { familyOf, withEmbeddingScaleDType, withLongRopeFactors, withRopeFreqFactors, type LlamaConfig } from '../model/config.ts';
import { configFromGguf } from '../model/config-gguf.ts';
import { configFromHf } from '../model/config-hf.ts';
import { hfCheckpointDType } from '../model/config-values.ts';
import { readJsonFile, readTextFile, type ByteSource, type ModelFiles } from '../io/files.ts';
import { readGgufHeader, type GgufMetadata, type GgufTensorType } from '../io/formats/gguf.ts';
import { isLoadableDType, readSafetensorsCheckpoint, type SafetensorsDType } from '../io/formats/safetensors.ts';
import { GLOBAL_TENSOR_NAMES, hfNameFromGguf, hfShapeFromGguf, languageModelTensorName } from '../model/tensor-names.ts';
import { checkTensors, requiredTensors, weightBytes, type ModelTensor, type WeightSource } from '../model/weights.ts';
import { splitFusedTensors } from '../model/tensors.ts';
import type { WeightDType } from '../gpu/tensor.ts';

export { planWeightStorage, uploadLlamaWeights } from '../model/weights.ts';
export type {
  LlamaWeights, LlamaLayerWeights, LoadProgress, LoadProgressCallback, ModelTensor, TensorStorage, UploadOptions, WeightStorage, WeightStoragePlan,
} from '../model/weights.ts';

export interface OpenedModel extends WeightSource {
  /** Default model id (folder name, or GGUF file name without `.gguf`). */
  id: string;
  format: 'gguf' | 'safetensors';
  config: LlamaConfig;
  tokenizer: TextTokenizer;
  /** Bytes of the tensors the model uploads (what the progress callback counts up to). */
  totalBytes: number;
  /** Every tensor found, by canonical Hugging Face name (including ones the model does not use). */
  tensors: ReadonlyMap<string, ModelTensor>;
  files: ModelFiles;
  sources: ReadonlyMap<string, ByteSource>;
  /** The GGUF metadata (GGUF models only). */
  ggufMetadata?: GgufMetadata;
  /** What the load leaves out and says so (the vision tower of an image-text checkpoint). */
  notices: string[];
}

const GGUF_DTYPES: Record<GgufTensorType, WeightDType> = {
  F32: 'f32', F16: 'f16', BF16: 'bf16',
  Q4_0: 'q4_0', Q4_1: 'q4_1', Q5_0: 'q5_0', Q5_1: 'q5_1', Q8_0: 'q8_0', Q4_K: 'q4_k', Q5_K: 'q5_k', Q6_K: 'q6_k',
};
const SAFETENSORS_DTYPES: Record<SafetensorsDType, WeightDType> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };

export interface OpenModelOptions {
  /** A Jinja chat template that replaces the model's own (the tokenizer's chatTemplates become {default: it}). */
  chatTemplate?: string;
}

/** Reads the headers of a model: a single GGUF file, or a Hugging Face folder. */
export async function openModel(files: ModelFiles, options: OpenModelOptions = {}): Promise<OpenedModel> {
  return files.ggufFile !== undefined ? openGguf(files, files.ggufFile, options) : openHfFolder(files, options);
}

async function openGguf(files: ModelFiles, fileName: string, options: OpenModelOptions): Promise<OpenedModel> {
  const source = await files.open(fileName);
  if (!source) throw new Error(`Missing GGUF file ${fileName}`);
  const header = await readGgufHeader(source);
  const { metadata } = header;
  // llama.cpp's gguf-split: this file holds only some of the tensors (the others' absence would
  // read as a broken model).
  const parts = Number(metadata['split.count'] ?? 1);
  if (parts > 1) {
    throw new Error(`${fileName} is part of a split GGUF (${parts} files): merge them into one with llama-gguf-split --merge`);
  }
  const config = configFromGguf(metadata, undefined, header.tensors.map((t) => t.name));
  // Llama 3.1-style RoPE scaling: a small F32 tensor of per-frequency divisors, read into the config.
  // A small F32 tensor of RoPE factors, its length checked from the header before reading (a huge
  // tensor under such a name is not read whole).
  const readFactors = async (tensorName: string, expected: number, needs: string): Promise<Float32Array<ArrayBuffer> | undefined> => {
    const t = header.tensors.find((x) => x.name === tensorName);
    if (!t) return undefined;
    if (t.ggmlType !== 0) throw new Error(`${tensorName} has ggml type ${t.ggmlType}; only F32 is supported for it`);
    const count = t.ne.reduce((a, b) => a * b, 1);
    if (count !== expected) throw new Error(`${tensorName} has ${count} values; ${needs} needs ${expected}`);
    const bytes = await source.read(t.offset, t.byteLength);
    const factors = new Float32Array(t.byteLength / 4);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < factors.length; i++) factors[i] = view.getFloat32(i * 4, true);
    return factors;
  };
  // Llama 3.1-style RoPE scaling: per-frequency divisors, read into the config.
  const ropeFreqs = await readFactors('rope_freqs.weight', config.headDim / 2, `head size ${config.headDim}`);
  if (ropeFreqs) withRopeFreqFactors(config, ropeFreqs);
  // LongRoPE (Phi-3): the short and long factors, one per rotated pair.
  if (config.ropeScaling?.type === 'longrope') {
    const pairs = config.ropeScaling.shortFactor.length;
    const needs = `RoPE of ${2 * pairs} rotated dims`;
    withLongRopeFactors(config, await readFactors('rope_factors_short.weight', pairs, needs), await readFactors('rope_factors_long.weight', pairs, needs));
  }
  const family = familyOf(config);
  const tensors = new Map<string, ModelTensor>();
  for (const t of header.tensors) {
    const name = hfNameFromGguf(t.name, family);
    if (name === null) continue; // not a tensor this runtime uses
    tensors.set(name, {
      name,
      sourceName: t.name,
      shape: hfShapeFromGguf(t.ne),
      dtype: GGUF_DTYPES[t.type],
      file: fileName,
      offset: t.offset,
      byteLength: t.byteLength,
    });
  }
  splitFusedTensors(config, tensors);
  checkTensors(config, tensors);
  const tokenizer = tokenizerFromGguf(metadata, { chatTemplate: options.chatTemplate });
  return {
    id: files.id,
    format: 'gguf',
    config,
    tokenizer,
    totalBytes: weightBytes(config, tensors),
    tensors,
    files,
    sources: new Map([[fileName, source]]),
    ggufMetadata: metadata,
    notices: [],
  };
}

async function openHfFolder(files: ModelFiles, options: OpenModelOptions): Promise<OpenedModel> {
  const configJson = await readJsonFile<Record<string, unknown>>(files, 'config.json');
  if (!configJson) throw new Error(`Missing config.json in ${files.id} (a Hugging Face model folder needs config.json, tokenizer.json and model.safetensors)`);
  const config = configFromHf(configJson);
  const tokenizerJson = await readJsonFile<Record<string, unknown>>(files, 'tokenizer.json');
  if (!tokenizerJson) throw new Error(`Missing tokenizer.json in ${files.id}`);
  const tokenizerConfig = await readJsonFile<Record<string, unknown>>(files, 'tokenizer_config.json', { optional: true });
  const generationConfig = await readJsonFile<Record<string, unknown>>(files, 'generation_config.json', { optional: true });
  // Newer folders keep the chat template in chat_template.jinja, which transformers prefers to
  // tokenizer_config.json's; a template given at load wins over both.
  const chatTemplate = options.chatTemplate ?? (await readTextFile(files, 'chat_template.jinja', { optional: true })) ?? undefined;

  const tensors = new Map<string, ModelTensor>();
  const sources = new Map<string, ByteSource>();
  // An image-text checkpoint (config under text_config, Gemma3ForConditionalGeneration): its
  // language model's tensors under their causal-LM names; the vision tower and projector are left
  // out, and the load says so.
  const multimodal = typeof configJson.text_config === 'object' && configJson.text_config !== null;
  const notices: string[] = [];
  let leftOut = 0;
  // Tensors of other dtypes are left out unless the model needs them (as transformers ignores unexpected keys).
  const unloadable = new Map<string, string>();
  for (const t of await readSafetensorsCheckpoint(files, sources)) {
    const name = multimodal ? languageModelTensorName(t.name) : t.name;
    if (name === null) {
      leftOut++;
      continue;
    }
    if (!isLoadableDType(t.dtype)) {
      unloadable.set(name, t.dtype);
      continue;
    }
    tensors.set(name, {
      name,
      sourceName: t.name,
      shape: t.shape,
      dtype: SAFETENSORS_DTYPES[t.dtype],
      file: t.file,
      offset: t.offset,
      byteLength: t.byteLength,
    });
  }
  // A missing lm_head means tied embeddings unless config.json says explicitly they are not.
  const hasLmHead = tensors.has(GLOBAL_TENSOR_NAMES.lmHead) || unloadable.has(GLOBAL_TENSOR_NAMES.lmHead);
  if (!config.tieWordEmbeddings && !hasLmHead && configJson.tie_word_embeddings !== false) {
    config.tieWordEmbeddings = true;
  }
  if (multimodal) {
    notices.push(`${files.id} is an image-text checkpoint (${String((configJson.architectures as unknown[] | undefined)?.[0] ?? configJson.model_type)}): only its language model is loaded; the vision tower and projector (${leftOut} tensors) are not, and the model takes text only`);
  }
  // The embedding scale is rounded to the checkpoint's dtype: config.json's, else the embedding's.
  const embedding = tensors.get(GLOBAL_TENSOR_NAMES.tokenEmbedding);
  if (hfCheckpointDType(configJson) === undefined && embedding && (embedding.dtype === 'f32' || embedding.dtype === 'f16' || embedding.dtype === 'bf16')) {
    withEmbeddingScaleDType(config, embedding.dtype);
  }
  splitFusedTensors(config, tensors);
  for (const { name } of requiredTensors(config, tensors.size + unloadable.size)) {
    const dtype = unloadable.get(name);
    if (dtype !== undefined) throw new Error(`Tensor ${name} has dtype ${dtype}; only F32, F16 and BF16 tensors are supported`);
  }
  checkTensors(config, tensors);
  const tokenizer = createHfTokenizer(
    { tokenizerJson, tokenizerConfig, generationConfig, modelConfig: configJson },
    { chatTemplate },
  );
  return {
    id: files.id,
    format: 'safetensors',
    config,
    tokenizer,
    totalBytes: weightBytes(config, tensors),
    tensors,
    files,
    sources,
    notices,
  };
}
