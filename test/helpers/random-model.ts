// Random-weight Llama models built in memory: the same weights as CPU arrays (for the reference)
// and as GPU buffers in a chosen storage type (for the runtime).
import { mulberry32 } from './prng.ts';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { GpuMatrix, WeightDType } from '../../src/gpu/tensor.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import type { LlamaLayerWeights, LlamaWeights } from '../../src/model/weights.ts';
import type { CpuLayerWeights, CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, packHalves } from '../reference/cpu-ops.ts';


export function tinyConfig(overrides: Partial<LlamaConfig> = {}): LlamaConfig {
  return {
    architecture: 'llama',
    vocabSize: 97,
    hiddenSize: 24,
    intermediateSize: 61,
    numLayers: 2,
    numHeads: 6,
    numKvHeads: 2,
    headDim: 4,
    contextLength: 64,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    ropePairing: 'halves',
    tieWordEmbeddings: false,
    attentionBias: false,
    ...overrides,
  };
}

/** Rounds values to what the storage type keeps, so CPU and GPU see identical weights. */
function roundTo(values: Float32Array, dtype: WeightDType): Float32Array {
  if (dtype === 'f32') return values;
  const round = dtype === 'f16' ? (v: number) => f16BitsToF32(f32ToF16Bits(v)) : (v: number) => bf16BitsToF32(f32ToBf16Bits(v));
  return values.map(round);
}

function randomArray(rand: () => number, n: number, scale: number, offset = 0): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = offset + (rand() * 2 - 1) * scale;
  return a;
}

export interface RandomModel {
  config: LlamaConfig;
  cpu: CpuLlamaWeights;
  gpu: LlamaWeights;
}

/**
 * Random weights on the GPU and their CPU copy. The buffers are STORAGE | COPY_DST | COPY_SRC, as
 * uploadLlamaWeights makes them; `copySrc: false` leaves COPY_SRC out.
 */
export function buildRandomModel(ctx: GpuContext, config: LlamaConfig, dtype: WeightDType, seed = 1, { copySrc = true } = {}): RandomModel {
  const rand = mulberry32(seed);
  const device = ctx.device;
  const buffers: GPUBuffer[] = [];
  const storage = (label: string, bytes: ArrayBufferView) => {
    const buffer = device.createBuffer({
      label,
      size: Math.max(4, Math.ceil(bytes.byteLength / 4) * 4),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | (copySrc ? GPUBufferUsage.COPY_SRC : 0),
    });
    const padded = new Uint8Array(buffer.size);
    padded.set(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    device.queue.writeBuffer(buffer, 0, padded);
    buffers.push(buffer);
    return buffer;
  };
  const matrix = (label: string, rows: number, cols: number): { cpu: Float32Array; gpu: GpuMatrix } => {
    const cpu = roundTo(randomArray(rand, rows * cols, 1 / Math.sqrt(cols)), dtype);
    let bytes: ArrayBufferView = cpu;
    if (dtype !== 'f32') {
      const toBits = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
      bytes = packHalves(Uint16Array.from(cpu, toBits));
    }
    return { cpu, gpu: { buffer: storage(label, bytes), dtype, rows, cols } };
  };
  const vector = (label: string, n: number, scale: number, offset: number) => {
    const cpu = randomArray(rand, n, scale, offset);
    return { cpu, gpu: storage(label, cpu) };
  };

  const c = config;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  // Embedding rows of unit-ish scale so activations stay in a sensible range.
  const embedding = matrix('embed', c.vocabSize, c.hiddenSize);
  const cpuLayers: CpuLayerWeights[] = [];
  const gpuLayers: LlamaLayerWeights[] = [];
  for (let l = 0; l < c.numLayers; l++) {
    const attnNorm = vector(`attn_norm.${l}`, c.hiddenSize, 0.2, 1);
    const wq = matrix(`wq.${l}`, qDim, c.hiddenSize);
    const wk = matrix(`wk.${l}`, kvDim, c.hiddenSize);
    const wv = matrix(`wv.${l}`, kvDim, c.hiddenSize);
    const wo = matrix(`wo.${l}`, c.hiddenSize, qDim);
    const bq = c.attentionBias ? vector(`bq.${l}`, qDim, 0.5, 0) : undefined;
    const bk = c.attentionBias ? vector(`bk.${l}`, kvDim, 0.5, 0) : undefined;
    const bv = c.attentionBias ? vector(`bv.${l}`, kvDim, 0.5, 0) : undefined;
    const ffnNorm = vector(`ffn_norm.${l}`, c.hiddenSize, 0.2, 1);
    const wGate = matrix(`w_gate.${l}`, c.intermediateSize, c.hiddenSize);
    const wUp = matrix(`w_up.${l}`, c.intermediateSize, c.hiddenSize);
    const wDown = matrix(`w_down.${l}`, c.hiddenSize, c.intermediateSize);
    cpuLayers.push({
      attnNorm: attnNorm.cpu, wq: wq.cpu, wk: wk.cpu, wv: wv.cpu, wo: wo.cpu,
      bq: bq?.cpu, bk: bk?.cpu, bv: bv?.cpu,
      ffnNorm: ffnNorm.cpu, wGate: wGate.cpu, wUp: wUp.cpu, wDown: wDown.cpu,
    });
    gpuLayers.push({
      attnNorm: attnNorm.gpu, wq: wq.gpu, wk: wk.gpu, wv: wv.gpu, wo: wo.gpu,
      bq: bq?.gpu, bk: bk?.gpu, bv: bv?.gpu,
      ffnNorm: ffnNorm.gpu, wGate: wGate.gpu, wUp: wUp.gpu, wDown: wDown.gpu,
    });
  }
  const outputNorm = vector('output_norm', c.hiddenSize, 0.2, 1);
  const lmHead = c.tieWordEmbeddings ? embedding : matrix('lm_head', c.vocabSize, c.hiddenSize);
  return {
    config,
    cpu: { tokenEmbedding: embedding.cpu, layers: cpuLayers, outputNorm: outputNorm.cpu, lmHead: lmHead.cpu },
    gpu: {
      tokenEmbedding: embedding.gpu,
      layers: gpuLayers,
      outputNorm: outputNorm.gpu,
      lmHead: lmHead.gpu,
      destroy: () => buffers.forEach((b) => b.destroy()),
    },
  };
}
