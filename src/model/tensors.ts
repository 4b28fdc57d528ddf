// The tensors a Llama model uploads: the record of one wherever it is stored (ModelTensor), the
// list a config needs with each one's shape (requiredTensors), and the checks a model's tensors
// must pass before anything is allocated.
import type { WeightDType } from '../gpu/tensor.ts';
import { weightRowBytes } from '../gpu/weight-layout.ts';
import { familyOf, type LlamaConfig } from './config.ts';
import { GLOBAL_TENSOR_NAMES, layerTensorNames } from './tensor-names.ts';

/** One tensor of the model, under its canonical Hugging Face name, wherever it is stored. */
export interface ModelTensor {
  /** Canonical HF name (`model.layers.0.self_attn.q_proj.weight`). */
  name: string;
  /** The name in the file (the GGUF name for GGUF). */
  sourceName: string;
  /** Row-major shape, HF order ([rows, cols] for a matrix). */
  shape: number[];
  dtype: WeightDType;
  /** The file holding it (a name ModelFiles.open answers to). */
  file: string;
  /** Absolute byte offset in `file`. */
  offset: number;
  byteLength: number;
}

/**
 * The tensors a Llama model uses, with the shape each must have: [name, shape, kind]. With
 * `available` (how many tensors the file has), a config that needs more throws before the list
 * is built: a layer count of 1e9 would otherwise build billions of entries first.
 */
export function requiredTensors(config: LlamaConfig, available?: number): { name: string; shape: number[]; optional?: boolean }[] {
  const { hiddenSize: h, intermediateSize: f, numHeads, numKvHeads, headDim, vocabSize } = config;
  const q = numHeads * headDim;
  const kv = numKvHeads * headDim;
  type Required = { name: string; shape: number[]; optional?: boolean };
  const global: Required[] = [
    { name: GLOBAL_TENSOR_NAMES.tokenEmbedding, shape: [vocabSize, h] },
    { name: GLOBAL_TENSOR_NAMES.outputNorm, shape: [h] },
  ];
  if (!config.tieWordEmbeddings) global.push({ name: GLOBAL_TENSOR_NAMES.lmHead, shape: [vocabSize, h] });
  const family = familyOf(config);
  const layer = (l: number): Required[] => {
    const n = layerTensorNames(l, family);
    const tensors: Required[] = [
      { name: n.attnNorm, shape: [h] },
      { name: n.wq, shape: [q, h] },
      { name: n.wk, shape: [kv, h] },
      { name: n.wv, shape: [kv, h] },
      { name: n.wo, shape: [h, q] },
      { name: n.ffnNorm, shape: [h] },
      { name: n.wGate, shape: [f, h] },
      { name: n.wUp, shape: [f, h] },
      { name: n.wDown, shape: [h, f] },
    ];
    if (config.attentionBias) tensors.push({ name: n.bq, shape: [q] }, { name: n.bk, shape: [kv] }, { name: n.bv, shape: [kv] });
    if (family.qkNorm) tensors.push({ name: n.qNorm, shape: [headDim] }, { name: n.kNorm, shape: [headDim] });
    if (family.postAttentionNorm) tensors.push({ name: n.postAttnNorm, shape: [h] });
    if (family.postFeedForwardNorm) tensors.push({ name: n.postFfnNorm, shape: [h] });
    return tensors;
  };
  const needed = global.length + config.numLayers * layer(0).length;
  if (available !== undefined && needed > available) {
    throw new Error(
      `The model has ${available} tensors, fewer than the ${needed} that ${config.numLayers} layers need: is the layer count (num_hidden_layers, block_count) right?`,
    );
  }
  const out = [...global];
  for (let l = 0; l < config.numLayers; l++) out.push(...layer(l));
  return out;
}

/**
 * Throws naming the first tensor that is missing or has the wrong shape, or a bias the forward
 * pass would not add (e.g. a GGUF of a model with biases converted as plain 'llama': running it
 * without them would give wrong text, not an error).
 */
export function checkTensors(config: LlamaConfig, tensors: ReadonlyMap<string, ModelTensor>): void {
  const required = requiredTensors(config, tensors.size);
  for (const { name, shape } of required) {
    const t = tensors.get(name);
    if (!t) throw new Error(`The model has no tensor ${name}`);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new Error(`Tensor ${name} (${t.sourceName}) has shape [${t.shape.join(', ')}]; the config needs [${shape.join(', ')}]`);
    }
  }
  const used = new Set(required.map((r) => r.name));
  for (const [name, t] of tensors) {
    if (name.endsWith('.bias') && !used.has(name)) {
      throw new Error(`Unsupported model: it has a bias ${t.sourceName} that a ${config.architecture} model of this config does not use`);
    }
  }
}

/** Sum of the byte sizes of the tensors a Llama model uploads. */
export function weightBytes(config: LlamaConfig, tensors: ReadonlyMap<string, ModelTensor>): number {
  let total = 0;
  for (const { name } of requiredTensors(config)) total += tensors.get(name)?.byteLength ?? 0;
  return total;
}

/**
 * Splits the fused projections of a family that stores them so (FamilyDescription.fusedQkv:
 * qkv_proj / attn_qkv of [q + 2 kv, hidden] rows; fusedGateUp: gate_up_proj / ffn_up of
 * [2 ffn, hidden], gate first) into the split tensors every pass reads. A matrix's rows are
 * contiguous in its file (whole blocks of a quantized type), so each part is a byte range of the
 * same file: nothing is copied, and the upload streams them as any tensor.
 */
export function splitFusedTensors(config: LlamaConfig, tensors: Map<string, ModelTensor>): void {
  const family = familyOf(config);
  if (!family.fusedQkv && !family.fusedGateUp) return;
  const q = config.numHeads * config.headDim;
  const kv = config.numKvHeads * config.headDim;
  const f = config.intermediateSize;
  const split = (fusedName: string, parts: [string, number][]) => {
    const t = tensors.get(fusedName);
    if (!t) return;
    const rows = parts.reduce((a, [, r]) => a + r, 0);
    if (t.shape.length !== 2 || t.shape[0] !== rows) {
      throw new Error(`Tensor ${fusedName} (${t.sourceName}) has shape [${t.shape.join(', ')}]; the config needs [${rows}, ${config.hiddenSize}]`);
    }
    const rowBytes = weightRowBytes(t.dtype, t.shape[1]);
    if (rowBytes * rows !== t.byteLength) throw new Error(`Tensor ${fusedName} (${t.sourceName}) has ${t.byteLength} bytes; ${rows} rows of ${t.dtype} need ${rowBytes * rows}`);
    let row = 0;
    for (const [name, r] of parts) {
      tensors.set(name, { ...t, name, shape: [r, t.shape[1]], offset: t.offset + row * rowBytes, byteLength: r * rowBytes });
      row += r;
    }
    tensors.delete(fusedName);
  };
  for (let l = 0; l < config.numLayers; l++) {
    const n = layerTensorNames(l, family);
    if (family.fusedQkv) split(n.wqkv, [[n.wq, q], [n.wk, kv], [n.wv, kv]]);
    if (family.fusedGateUp) split(n.wGateUp, [[n.wGate, f], [n.wUp, f]]);
  }
}
