// The kernels' public surface: Kernels (over its KernelRegistry), the recorders, and the sizes,
// layouts and device choices that callers plan with. Importers use this file, not the family files.
export { ATTENTION_MAX_HEAD_DIM, type AttentionHeads, type AttentionShape, type KvRing } from './attention.ts';
export { KernelBatch } from './batch.ts';
export {
  decodeLayerFits,
  decodeLayerGroups,
  decodeLayerUnsupported,
  type DecodeArena,
  type DecodeLayerShape,
  type DecodeLayerWeights,
} from './decode-layer.ts';
export {
  DECODE_LAYER_MATRICES,
  DECODE_LAYER_MAX_SLOTS,
  DECODE_LAYER_STORAGE_BUFFERS,
  DECODE_RECORD_BYTES,
  DECODE_RECORD_SLOTS,
  decodeLayerLayout,
  type DecodeLayerDims,
  type DecodeLayerLayout,
} from './decode-layer-layout.ts';
export { decodeLayerRowsLayout, decodeRowsLogitsStride, DECODE_ROWS_TOKEN_STRIDE, type DecodeLayerRowsLayout } from './decode-layer-rows.ts';
export type { DecodeLayerFeatures, DecodeLayerFeatureLayout } from './decode-layer-family.ts';
export type { GatedActivation, KvDType, RopePairing, RopeRotation, RopeShape } from './elementwise.ts';
export type { FusedMatvecMode } from './fused-matvec.ts';
export { KernelProgram } from './program.ts';
export { KernelRecorder } from './recorder.ts';
export { Kernels } from './kernels.ts';
export { KernelRegistry, type KernelsOptions } from './registry.ts';
export {
  attentionHeadsPerThread,
  attentionPlan,
  attentionQueriesPerThread,
  attentionThreadsPerWorkgroup,
  DECODE_LAYER_MAX_WEIGHTS,
  fusedShape,
  kernelTuning,
  matmulShape,
  matvecPlan,
  RMSNORM_ROW_MAX_DIM,
  rmsNormPlan,
  TILED_MATMUL_SHAPE,
  type DeviceTraits,
  type FusedShape,
  type KernelTuning,
  type MatmulShape,
  type MatvecPlan,
} from './tuning.ts';
export type { Projection } from './weights.ts';
export { unrollConstLoops, type PositionSource, type TokenSpan } from './wgsl.ts';
