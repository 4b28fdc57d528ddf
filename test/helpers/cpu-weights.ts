// The weights of a random-weight model read back from its files as CPU arrays for the CPU
// reference (test/reference/cpu-llama.ts), named and split as openModel names and splits them.
// Free of Vitest and of the GPU code, so that the Playwright specs compute the reference too.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { familyOf, type LlamaConfig } from '../../src/model/config.ts';
import { layerTensorNames } from '../../src/model/tensor-names.ts';
import { readSafetensorsCheckpoint } from '../../src/io/formats/safetensors.ts';
import { filesFromPath } from '../../src/node/files.ts';
import type { CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { bf16BitsToF32 } from '../reference/cpu-ops.ts';

/** The tensors of a generated folder's model.safetensors (F32 or BF16) as f32 values, by name, read through the project's safetensors reader. */
export async function readFolderTensors(dir: string): Promise<Map<string, Float32Array>> {
  const infos = await readSafetensorsCheckpoint(filesFromPath(dir));
  const bytes = readFileSync(join(dir, 'model.safetensors'));
  const out = new Map<string, Float32Array>();
  for (const t of infos) {
    const view = new DataView(bytes.buffer, bytes.byteOffset + t.offset, t.byteLength);
    if (t.dtype === 'F32') out.set(t.name, Float32Array.from({ length: t.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true)));
    else if (t.dtype === 'BF16') out.set(t.name, Float32Array.from({ length: t.byteLength / 2 }, (_, i) => bf16BitsToF32(view.getUint16(i * 2, true))));
    else throw new Error(`${t.name}: unexpected dtype ${t.dtype}`);
  }
  return out;
}

/** The tensors with a family's fused qkv_proj / gate_up_proj split by rows into the split names, as openModel splits them. */
export function splitFusedCpu(config: LlamaConfig, tensors: ReadonlyMap<string, Float32Array>): Map<string, Float32Array> {
  const family = familyOf(config);
  const h = config.hiddenSize;
  const q = config.numHeads * config.headDim;
  const kv = config.numKvHeads * config.headDim;
  const f = config.intermediateSize;
  const out = new Map(tensors);
  for (let l = 0; l < config.numLayers; l++) {
    const n = layerTensorNames(l, family);
    const qkv = tensors.get(n.wqkv);
    if (qkv) {
      out.delete(n.wqkv);
      out.set(n.wq, qkv.subarray(0, q * h));
      out.set(n.wk, qkv.subarray(q * h, (q + kv) * h));
      out.set(n.wv, qkv.subarray((q + kv) * h, (q + 2 * kv) * h));
    }
    const gateUp = tensors.get(n.wGateUp);
    if (gateUp) {
      out.delete(n.wGateUp);
      out.set(n.wGate, gateUp.subarray(0, f * h));
      out.set(n.wUp, gateUp.subarray(f * h, 2 * f * h));
    }
  }
  return out;
}

/**
 * CpuLlama's weights from tensors by Hugging Face name (biases optional; the embedding serves as
 * the head when tied), the layer's names as its family's description says (layerTensorNames);
 * fused qkv_proj / gate_up_proj are split by rows here, as openModel splits them.
 */
export function cpuLlamaWeights(config: LlamaConfig, tensors: ReadonlyMap<string, Float32Array>): CpuLlamaWeights {
  const family = familyOf(config);
  const split = splitFusedCpu(config, tensors);
  const tensor = (name: string): Float32Array => {
    const t = split.get(name);
    if (!t) throw new Error(`no tensor ${name}`);
    return t;
  };
  const tokenEmbedding = tensor('model.embed_tokens.weight');
  return {
    tokenEmbedding,
    layers: Array.from({ length: config.numLayers }, (_, l) => {
      const n = layerTensorNames(l, family);
      return {
        attnNorm: tensor(n.attnNorm),
        wq: tensor(n.wq),
        wk: tensor(n.wk),
        wv: tensor(n.wv),
        wo: tensor(n.wo),
        bq: split.get(n.bq),
        bk: split.get(n.bk),
        bv: split.get(n.bv),
        qNorm: family.qkNorm ? tensor(n.qNorm) : undefined,
        kNorm: family.qkNorm ? tensor(n.kNorm) : undefined,
        postAttnNorm: family.postAttentionNorm ? tensor(n.postAttnNorm) : undefined,
        ffnNorm: tensor(n.ffnNorm),
        postFfnNorm: family.postFeedForwardNorm ? tensor(n.postFfnNorm) : undefined,
        wGate: tensor(n.wGate),
        wUp: tensor(n.wUp),
        wDown: tensor(n.wDown),
      };
    }),
    outputNorm: tensor('model.norm.weight'),
    lmHead: config.tieWordEmbeddings ? tokenEmbedding : tensor('lm_head.weight'),
  };
}
