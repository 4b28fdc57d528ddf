// The dispatch layer: one method per kernel, recording into a command encoder (KernelBatch) or a
// reusable program (KernelProgram).
//
//   const batch = kernels.begin();
//   batch.rmsNorm(xb, x, gamma, T, d, eps);
//   batch.matmul(q, xb, wq, T);
//   ...
//   batch.submit();
//
// Each method checks its arguments, picks the variant the device's tuning asks for, and records
// one dispatch (or a few) with its parameters in a uniform slot. Browser-safe: no Node imports.
import type { GpuMatrix } from '../tensor.ts';
import { checkWeightShape } from '../weight-formats.ts';
import {
  checkRing,
  planAttention,
  planDecodeAttention,
  type AttentionHeads,
  type AttentionShape,
  type KvRing,
} from './attention.ts';
import { planBatchDecodeAttention, type DecodeAttentionBatch } from './attention-batch.ts';
import { planAdvanceBatchRows, planBatchEmbedding, planBatchGreedy, type BatchGreedyBuffers, type BatchGreedyShape } from './batch-rows.ts';
import { assertCount, assertDistinct, assertFits, checkParts, checkSecondPassWeights, checkSegments } from './checks.ts';
import { planDecodeLayers, type DecodeLayerShape, type DecodeLayerWeights } from './decode-layer.ts';
import {
  ELEMENTWISE_WORKGROUP,
  KV_WRITE_PARAMS,
  RESIDUAL_PARAMS,
  RMSNORM_PARAMS,
  ROPE_PARAMS,
  ropePairingCode,
  ropeParams,
  checkGatedActivation,
  SOFTCAP_PARAMS,
  SWIGLU_PARAMS,
  type GatedActivation,
  type KvDType,
  type RopeShape,
} from './elementwise.ts';
import { planFusedMatvec, type FusedBatch, type FusedMatvecMode, type FusedSegment } from './fused-matvec.ts';
import type { KernelRegistry } from './registry.ts';
import { MATVEC_WORKGROUP, RMSNORM_ROWS_PER_WORKGROUP, type MatmulShape } from './tuning.ts';
import { UniformArena, type PlannedDispatch, type UniformValue } from '../uniforms.ts';
import { BIAS_BINDING, EMBEDDING_PARAMS, MATMUL_PARAMS, MATVEC_PARAMS, PAIR_BIAS_BINDING, PAIR_OUTPUT_BINDING, WEIGHT_BINDING, WEIGHT_UP_BINDING, type Projection } from './weights.ts';
import { withPosition, withSegments, type TokenSpan } from './wgsl.ts';

/**
 * The kernels' dispatch methods, checked and planned once; where the dispatches go is the
 * subclass's: KernelBatch encodes them at once into one command encoder, KernelProgram keeps them
 * (with their parameters and bind groups) to encode again and again.
 */
export abstract class KernelRecorder {
  /** The dispatches' parameters: one uniform slot each. */
  protected uniformSlots: UniformArena | undefined;

  constructor(
    protected readonly kernels: KernelRegistry,
    /** Label of the bind groups (and passes) it makes. */
    protected readonly label?: string,
    /**
     * A prefill pass: every token's matmuls and attention run the kernels a pass of any length
     * would (no matrix-vector kernel for one token, no matmul shape or attention entry chosen by
     * T), so each row's sums are the same however the prompt is split into passes, and a prefill
     * that starts over cached K/V computes what a whole prefill computes.
     */
    protected readonly prefill = false,
  ) {}

  /** The T the kernels' shapes are chosen for: in a prefill pass, any (tuning's choice for a long one). */
  private shapeTokens(T: number): number {
    return this.prefill ? Infinity : T;
  }

  /** The dispatches' parameters: one uniform slot each (made on the first dispatch). */
  protected get uniforms(): UniformArena {
    this.uniformSlots ??= new UniformArena(this.kernels.ctx.device);
    return this.uniformSlots;
  }

  /**
   * out[t, :] = E[tokens[t], :] · scale (f32 [T, table.cols]; Gemma scales by sqrt(d_model)).
   * Token ids past the table give zero rows. A split table (GpuMatrix.parts) takes one dispatch
   * per part, each writing the tokens in its rows.
   */
  embedding(out: GPUBuffer, table: GpuMatrix, tokens: GPUBuffer, T: number, scale = 1): void {
    assertCount(T, 'embedding T', 0);
    if (!Number.isFinite(scale)) throw new Error(`embedding scale must be a finite number, got ${scale}`);
    if (T === 0) return;
    assertFits(out, T * table.cols * 4, 'embedding out');
    assertFits(tokens, T * 4, 'embedding tokens');
    checkWeightShape(table.dtype, table.rows, table.cols, 'embedding table');
    const parts = checkParts(table, 'embedding table');
    const n = T * table.cols;
    const pipeline = this.kernels.weightPipeline('embedding', table.dtype, { hasBias: false, aligned: false });
    for (const part of parts) {
      this.dispatch(
        pipeline,
        EMBEDDING_PARAMS.pack({ T, cols: table.cols, vocab: table.rows, first_row: part.firstRow, part_rows: part.rows, scale }),
        { 1: out, 2: tokens, [WEIGHT_BINDING]: part.buffer },
        Math.ceil(n / ELEMENTWISE_WORKGROUP),
      );
    }
  }

  /**
   * out[t, i] = x[t, i] / sqrt(mean(x[t, :]^2) + eps) * gamma[i] for T rows of dim. out may be x
   * (in place: the per-head q/k norm is rows = T * heads, dim = headDim); not gamma.
   */
  rmsNorm(out: GPUBuffer, x: GPUBuffer, gamma: GPUBuffer, T: number, dim: number, eps: number): void {
    assertCount(T, 'rmsNorm T', 0);
    assertCount(dim, 'rmsNorm dim');
    if (T === 0) return;
    assertDistinct(out, [gamma], 'rmsNorm');
    assertDistinct(x, [gamma], 'rmsNorm');
    assertFits(out, T * dim * 4, 'rmsNorm out');
    assertFits(x, T * dim * 4, 'rmsNorm x');
    assertFits(gamma, dim * 4, 'rmsNorm gamma');
    // A multiple of 4 floats per row: every row starts 16-byte aligned, so the rows are read as vec4s.
    const entry = this.kernels.tuning.rmsNormPlan(dim);
    const inPlace = out === x;
    const pipeline = this.kernels.rmsNormPipeline({ entry, aligned: dim % 4 === 0, inPlace });
    const workgroups = entry === 'per_row' ? Math.ceil(T / RMSNORM_ROWS_PER_WORKGROUP) : T;
    this.dispatch(pipeline, RMSNORM_PARAMS.pack({ T, dim, eps }), inPlace ? { 1: x, 3: gamma } : { 1: out, 2: x, 3: gamma }, workgroups);
  }

  /**
   * y[T, W.rows] = x[T, W.cols]·Wᵀ (+ bias); with `accumulate`, y += that (the residual add
   * folded in). One token goes to matvec.wgsl (threads of 4 rows, see matvecPlan), more to the
   * register-blocked matmul.wgsl (threads of 4 rows x 4 tokens; on CPU devices bigger blocks) or, on GPUs from
   * 32 tokens, the shared-memory tiles of matmul_tiled.wgsl (matmulShape). y must not be x.
   */
  matmul(y: GPUBuffer, x: GPUBuffer, W: GpuMatrix, T: number, bias?: GPUBuffer, options: { accumulate?: boolean; vector?: boolean } = {}): void {
    const accumulate = options.accumulate ?? false;
    assertCount(T, 'matmul T', 0);
    assertCount(W.rows, 'matmul W.rows');
    assertCount(W.cols, 'matmul W.cols');
    if (T === 0) return;
    checkWeightShape(W.dtype, W.rows, W.cols, 'matmul W');
    const parts = checkParts(W, 'matmul W');
    assertDistinct(y, [x, ...parts.map((p) => p.buffer), bias], 'matmul');
    assertFits(y, T * W.rows * 4, 'matmul y');
    assertFits(x, T * W.cols * 4, 'matmul x');
    if (bias) assertFits(bias, W.rows * 4, 'matmul bias');

    // A multiple of 4 columns: every row of x and W starts 16-byte aligned, so both are read as vec4s.
    const aligned = W.cols % 4 === 0;
    // A split W (GpuMatrix.parts): one dispatch per row range, writing its columns of y.
    for (const part of parts) {
      const buffers: Record<number, GPUBuffer> = { 1: y, 2: x, [WEIGHT_BINDING]: part.buffer };
      if (bias) buffers[BIAS_BINDING] = bias;
      // `vector`: a row on its own (the prefill's last-token logits), whose sums no other pass computes.
      if (T === 1 && (!this.prefill || options.vector)) {
        const plan = this.kernels.matvecPlan(W.cols);
        const workgroups = Math.ceil((Math.ceil(part.rows / 4) * plan.team) / MATVEC_WORKGROUP);
        const runs = this.kernels.usesWeightRuns(W.dtype);
        const pipeline = this.kernels.weightPipeline('matvec', W.dtype, { hasBias: !!bias, aligned, plan, accumulate, runs });
        this.dispatch(pipeline, MATVEC_PARAMS.pack({ rows: part.rows, cols: W.cols, row_offset: part.firstRow }), buffers, workgroups);
      } else {
        const shape = this.kernels.matmulShape(this.shapeTokens(T), aligned, W.dtype);
        const pipeline = this.kernels.weightPipeline('matmul', W.dtype, { hasBias: !!bias, aligned, matmul: shape, accumulate });
        const params = MATMUL_PARAMS.pack({ T, rows: part.rows, cols: W.cols, row_offset: part.firstRow, y_stride: W.rows });
        this.dispatch(pipeline, params, buffers, this.matmulGrid(shape, part.rows, T, 'matmul'));
      }
    }
  }

  /**
   * The feed-forward's input for T tokens: out[T, rows] = act(x·W_gateᵀ) * (x·W_upᵀ), act silu
   * (SwiGLU) or `activation` (GatedActivation), in one pass (matmul.wgsl SWIGLU) when T > 1 and
   * neither matrix is split; otherwise the two projections go to `scratch` and swiglu() combines
   * them (T = 1: fusedSwiglu). out must not be x.
   */
  matmulSwiglu(
    out: GPUBuffer,
    x: GPUBuffer,
    wGate: GpuMatrix,
    wUp: GpuMatrix,
    T: number,
    scratch: { gate: GPUBuffer; up: GPUBuffer },
    activation: GatedActivation = 'silu',
  ): void {
    assertCount(T, 'matmulSwiglu T', 0);
    checkGatedActivation(activation, 'matmulSwiglu');
    if (T === 0) return;
    if (wGate.rows !== wUp.rows || wGate.cols !== wUp.cols) {
      throw new Error(`matmulSwiglu: W_gate [${wGate.rows}, ${wGate.cols}] and W_up [${wUp.rows}, ${wUp.cols}] differ`);
    }
    const oneToken = T === 1 && !this.prefill;
    if (oneToken || wGate.parts || wUp.parts || wGate.dtype !== wUp.dtype) {
      if (oneToken) {
        this.fusedSwiglu(out, x, wGate, wUp, { scratch, activation });
        return;
      }
      this.matmul(scratch.gate, x, wGate, T);
      this.matmul(scratch.up, x, wUp, T);
      this.swiglu(out, scratch.gate, scratch.up, T * wGate.rows, activation);
      return;
    }
    checkSecondPassWeights('matmulSwiglu', [wGate, 'W_gate'], [wUp, 'W_up']);
    assertDistinct(out, [x, wGate.buffer, wUp.buffer], 'matmulSwiglu');
    assertFits(out, T * wGate.rows * 4, 'matmulSwiglu out');
    assertFits(x, T * wGate.cols * 4, 'matmulSwiglu x');
    const aligned = wGate.cols % 4 === 0;
    const shape = this.kernels.matmulShape(this.shapeTokens(T), aligned, wGate.dtype);
    const pipeline = this.kernels.weightPipeline('matmul', wGate.dtype, { hasBias: false, aligned, matmul: shape, swiglu: true, activation });
    this.dispatch(
      pipeline,
      MATMUL_PARAMS.pack({ T, rows: wGate.rows, cols: wGate.cols, row_offset: 0, y_stride: wGate.rows }),
      { 1: out, 2: x, [WEIGHT_BINDING]: wGate.buffer, [WEIGHT_UP_BINDING]: wUp.buffer },
      this.matmulGrid(shape, wGate.rows, T, 'matmulSwiglu'),
    );
  }

  /**
   * Two projections of the same x for T tokens in one pass (matmul.wgsl PAIR): first.y = x·first.Wᵀ
   * (+ first.bias) and second.y likewise, each X load serving both: the prefill's K and V (docs/tuning.md#matmul). The two Ws of one shape
   * and storage, whole, biases both or neither; otherwise (and for T = 1) two matmul() calls.
   */
  matmulPair(first: Projection, second: Projection, x: GPUBuffer, T: number): void {
    const [{ y: y1, W: W1, bias: b1 }, { y: y2, W: W2, bias: b2 }] = [first, second];
    assertCount(T, 'matmulPair T', 0);
    if (T === 0) return;
    const same = W1.rows === W2.rows && W1.cols === W2.cols && W1.dtype === W2.dtype && !W1.parts && !W2.parts && !b1 === !b2;
    if ((T === 1 && !this.prefill) || !same) {
      this.matmul(y1, x, W1, T, b1);
      this.matmul(y2, x, W2, T, b2);
      return;
    }
    checkSecondPassWeights('matmulPair', [W1, 'W1'], [W2, 'W2']);
    assertDistinct(y1, [y2, x, W1.buffer, W2.buffer, b1, b2], 'matmulPair');
    assertDistinct(y2, [x, W1.buffer, W2.buffer, b1, b2], 'matmulPair');
    assertFits(y1, T * W1.rows * 4, 'matmulPair y1');
    assertFits(y2, T * W1.rows * 4, 'matmulPair y2');
    assertFits(x, T * W1.cols * 4, 'matmulPair x');
    if (b1 && b2) {
      assertFits(b1, W1.rows * 4, 'matmulPair b1');
      assertFits(b2, W1.rows * 4, 'matmulPair b2');
    }
    const aligned = W1.cols % 4 === 0;
    const shape = this.kernels.matmulShape(this.shapeTokens(T), aligned, W1.dtype);
    const pipeline = this.kernels.weightPipeline('matmul', W1.dtype, { hasBias: !!b1, aligned, matmul: shape, pair: true });
    const buffers: Record<number, GPUBuffer> = { 1: y1, 2: x, [WEIGHT_BINDING]: W1.buffer, [WEIGHT_UP_BINDING]: W2.buffer, [PAIR_OUTPUT_BINDING]: y2 };
    if (b1 && b2) {
      buffers[BIAS_BINDING] = b1;
      buffers[PAIR_BIAS_BINDING] = b2;
    }
    const params = MATMUL_PARAMS.pack({ T, rows: W1.rows, cols: W1.cols, row_offset: 0, y_stride: W1.rows });
    this.dispatch(pipeline, params, buffers, this.matmulGrid(shape, W1.rows, T, 'matmulPair'));
  }

  /** matmul.wgsl's 2-D grid for `rows` outputs of T tokens (it does not fold into 2-D like the 1-D kernels). */
  private matmulGrid(shape: MatmulShape, rows: number, T: number, what: string): [number, number] {
    const groupsX = Math.ceil(rows / (4 * (shape.rowQuads ?? 1) * shape.wx));
    const groupsY = Math.ceil(T / (shape.tokens * shape.wy));
    const max = this.kernels.maxWorkgroupsPerDimension;
    if (groupsX > max || groupsY > max) throw new Error(`${what} of ${T} x ${rows} outputs exceeds the dispatch grid`);
    return [groupsX, groupsY];
  }

  /**
   * Rotates x [T, shape.heads, shape.headDim] in place by the inverse frequencies invFreq
   * [rotaryDims / 2]; token t is at position tokens.startPos + t (plus tokens.position). With
   * shape.rotaryDims, only the first rotaryDims elements of each head rotate; with
   * shape.magnitude, cos and sin are scaled by it (RopeRotation). With tokens.segments (a packed
   * pass) token t is at position startPos + t - segments[t] instead.
   */
  rope(x: GPUBuffer, invFreq: GPUBuffer, tokens: TokenSpan, shape: RopeShape): void {
    const { T, startPos, position, segments } = tokens;
    const { heads: numHeads, headDim, pairing } = shape;
    assertCount(T, 'rope T', 0);
    assertCount(numHeads, 'rope numHeads');
    assertCount(headDim, 'rope headDim');
    assertCount(startPos, 'rope startPos', 0);
    if (headDim % 2 !== 0) throw new Error(`rope headDim must be even, got ${headDim}`);
    if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
    const { rotaryDims, magnitude } = ropeParams(shape, headDim, 'rope');
    if (T === 0) return;
    assertDistinct(x, [invFreq], 'rope');
    assertFits(x, T * numHeads * headDim * 4, 'rope x');
    assertFits(invFreq, (rotaryDims / 2) * 4, 'rope invFreq');
    if (segments) checkSegments(segments, [x], T, position, 'rope');
    const pairs = T * numHeads * (rotaryDims / 2);
    this.dispatch(
      segments ? this.kernels.packedRopePipeline() : this.kernels.positionalPipeline('rope', position ? 'buffer' : 'uniform'),
      ROPE_PARAMS.pack({
        T,
        num_heads: numHeads,
        head_dim: headDim,
        start_pos: startPos,
        pairing: ropePairingCode(pairing),
        rotary_dims: rotaryDims,
        magnitude,
      }),
      withSegments(withPosition({ 1: x, 2: invFreq }, position), segments),
      Math.ceil(pairs / ELEMENTWISE_WORKGROUP),
    );
  }

  /**
   * Causal grouped-query attention of q [T, heads, headDim] over the caches keys and values
   * [rows, kvHeads, headDim], which must already hold positions 0 .. startPos + T - 1. Writes out
   * [T, heads, headDim]. With a slidingWindow W, the query at position p attends only to the keys
   * at positions (p - W, p] (Mistral / Qwen2 `sliding_window`); without, to 0 ..= p. One thread per
   * (token, head) or one workgroup per (token, head): see attentionPlan. kvDType: the caches'
   * element type ('f16': two halves a u32 word, as writeKv stores them). With tokens.position (a
   * u32 on the GPU, see PositionSource), the first token is at startPos plus that value: the
   * caches are then only checked to hold startPos + T rows, the kernel variant is planned for as
   * many keys as the caches hold, and the dispatch grid does not depend on it. With shape.ring (a
   * sliding-window layer's ring, KvRing) position p is at row p mod ring.rows, which must be at
   * least slidingWindow + T - 1, and the entry is planned as for a cache of ring.positions rows.
   * With tokens.segments (a packed pass; no position, no ring) the query of token t attends only
   * to the rows from segments[t] on (within its window, if any).
   */
  attention(
    buffers: { out: GPUBuffer; q: GPUBuffer; keys: GPUBuffer; values: GPUBuffer },
    tokens: TokenSpan,
    shape: AttentionHeads,
    kvDType: KvDType = 'f32',
  ): void {
    const d = planAttention(this.kernels, buffers, tokens, shape, kvDType, this.prefill);
    if (d) this.dispatch(d.pipeline, d.params, d.buffers, d.workgroups);
  }

  /**
   * Writes rows startPos .. startPos + T - 1 of the caches keys and values from the f32 rows k and
   * v [T, rowElems]. 'f16' caches (the default) hold two halves a u32 word, rounded to nearest
   * even (rowElems must be even); 'f32' caches the floats as they are. With tokens.position (a u32
   * on the GPU, see PositionSource) the rows start at startPos plus that value; the caches are then
   * only checked to hold startPos + T rows. With `ring` (a sliding-window layer's cache) position p
   * goes to row p mod ring.rows, and T must not pass ring.rows.
   */
  writeKv(
    buffers: { keys: GPUBuffer; values: GPUBuffer; k: GPUBuffer; v: GPUBuffer },
    tokens: TokenSpan,
    rowElems: number,
    kvDType: KvDType = 'f16',
    ring?: KvRing,
  ): void {
    const { keys: kCache, values: vCache, k, v } = buffers;
    const { T, startPos: startRow, position } = tokens;
    assertCount(T, 'writeKv T', 0);
    assertCount(startRow, 'writeKv startRow', 0);
    assertCount(rowElems, 'writeKv rowElems');
    if (kvDType === 'f16' && rowElems % 2 !== 0) throw new Error(`writeKv: an f16 KV cache row must be even, got ${rowElems} elements`);
    if (T === 0) return;
    assertDistinct(kCache, [vCache, k, v], 'writeKv');
    assertDistinct(vCache, [k, v], 'writeKv');
    assertFits(k, T * rowElems * 4, 'writeKv k');
    assertFits(v, T * rowElems * 4, 'writeKv v');
    const elemBytes = kvDType === 'f16' ? 2 : 4;
    if (ring) checkRing(ring, T, undefined, 'writeKv');
    const rows = ring ? ring.rows : startRow + T;
    assertFits(kCache, rows * rowElems * elemBytes, 'writeKv kCache');
    assertFits(vCache, rows * rowElems * elemBytes, 'writeKv vCache');
    // f16: one thread per word (two halves); f32: one per float.
    const rowLen = kvDType === 'f16' ? rowElems / 2 : rowElems;
    const n = T * rowLen;
    const source = position ? 'buffer' : 'uniform';
    const bound: Record<number, GPUBuffer> =
      kvDType === 'f16' ? { 1: k, 2: v, 3: kCache, 4: vCache } : { 1: k, 2: v, 5: kCache, 6: vCache };
    this.dispatch(
      this.kernels.positionalPipeline(kvDType === 'f16' ? 'write_kv' : 'write_kv_f32', source, ring?.rows),
      KV_WRITE_PARAMS.pack({ n, start_pos: startRow, row_len: rowLen }),
      withPosition(bound, position),
      Math.ceil(n / ELEMENTWISE_WORKGROUP),
    );
  }

  /**
   * Decode (one token) projection through matrices stacked by rows, with RMSNorm and the residual
   * add folded in (fused_matvec.wgsl): y = [W_0·x' + b_0; W_1·x' + b_1; ...] where x' = x, or
   * rmsnorm(x)·γ with `norm`; with `accumulate`, y += that instead (x += W·a). Every matrix has
   * x's length of columns. Split matrices (GpuMatrix.parts) and their biases are stacked as row
   * ranges; one dispatch takes as many as the device's storage-buffer bindings (and 8) allow.
   * y must not be x (or a weight or bias).
   */
  fusedMatvec(
    y: GPUBuffer,
    x: GPUBuffer,
    matrices: { W: GpuMatrix; bias?: GPUBuffer }[],
    options: { norm?: { gamma: GPUBuffer; eps: number }; accumulate?: boolean; batch?: FusedBatch } = {},
  ): void {
    if (matrices.length === 0) throw new Error('fusedMatvec needs at least one matrix');
    const cols = matrices[0].W.cols;
    const segments: FusedSegment[] = [];
    let outRow = 0;
    for (const [i, { W, bias }] of matrices.entries()) {
      const what = `fusedMatvec W[${i}]`;
      assertCount(W.rows, `${what}.rows`);
      if (W.cols !== cols) throw new Error(`${what} has ${W.cols} columns, the others ${cols}`);
      checkWeightShape(W.dtype, W.rows, W.cols, what);
      if (bias) assertFits(bias, W.rows * 4, `${what} bias`);
      for (const part of checkParts(W, what)) {
        segments.push({ buffer: part.buffer, dtype: W.dtype, rows: part.rows, outRow: outRow + part.firstRow, biasRow: part.firstRow, bias });
      }
      outRow += W.rows;
    }
    const batch = options.batch;
    if (batch && batch.yStride < outRow) throw new Error(`fusedMatvec batch yStride ${batch.yStride} is shorter than a row of ${outRow}`);
    assertFits(y, ((batch ? (batch.maxRows - 1) * batch.yStride : 0) + outRow) * 4, 'fusedMatvec y');
    this.recordFused(options.accumulate ? 'accumulate' : 'store', y, x, cols, segments, options.norm, 'silu', batch);
  }

  /**
   * Decode (one token) feed-forward input: out = act(x'·W_gateᵀ) * (x'·W_upᵀ), x' = x or
   * rmsnorm(x)·γ with `norm`, act silu or options.activation, in one dispatch (fused_matvec.wgsl
   * MODE_SWIGLU). A split W_gate or W_up (GpuMatrix.parts) takes the two projections into
   * `scratch` and swiglu() instead.
   */
  fusedSwiglu(
    out: GPUBuffer,
    x: GPUBuffer,
    wGate: GpuMatrix,
    wUp: GpuMatrix,
    options: {
      norm?: { gamma: GPUBuffer; eps: number };
      scratch?: { gate: GPUBuffer; up: GPUBuffer };
      activation?: GatedActivation;
      /** The rows of a batched decode step (fused_matvec_batch.wgsl); W_gate and W_up whole. */
      batch?: FusedBatch;
    } = {},
  ): void {
    const activation = options.activation ?? 'silu';
    checkGatedActivation(activation, 'fusedSwiglu');
    if (wGate.rows !== wUp.rows || wGate.cols !== wUp.cols) {
      throw new Error(`fusedSwiglu: W_gate [${wGate.rows}, ${wGate.cols}] and W_up [${wUp.rows}, ${wUp.cols}] differ`);
    }
    const batch = options.batch;
    if (batch && (wGate.parts || wUp.parts)) throw new Error('fusedSwiglu: a batch takes whole W_gate and W_up');
    if (wGate.parts || wUp.parts) {
      const scratch = options.scratch;
      if (!scratch) throw new Error('fusedSwiglu: a split W_gate or W_up needs scratch buffers');
      this.fusedMatvec(scratch.gate, x, [{ W: wGate }], { norm: options.norm });
      this.fusedMatvec(scratch.up, x, [{ W: wUp }], { norm: options.norm });
      this.swiglu(out, scratch.gate, scratch.up, wGate.rows, activation);
      return;
    }
    for (const [W, what] of [[wGate, 'W_gate'], [wUp, 'W_up']] as const) {
      assertCount(W.rows, `fusedSwiglu ${what}.rows`);
      checkWeightShape(W.dtype, W.rows, W.cols, `fusedSwiglu ${what}`);
      checkParts(W, `fusedSwiglu ${what}`);
    }
    if (batch && batch.yStride < wGate.rows) throw new Error(`fusedSwiglu batch yStride ${batch.yStride} is shorter than a row of ${wGate.rows}`);
    assertFits(out, ((batch ? (batch.maxRows - 1) * batch.yStride : 0) + wGate.rows) * 4, 'fusedSwiglu out');
    const segment = (W: GpuMatrix): FusedSegment => ({ buffer: W.buffer, dtype: W.dtype, rows: W.rows, outRow: 0, biasRow: 0 });
    this.recordFused('swiglu', out, x, wGate.cols, [segment(wGate), segment(wUp)], options.norm, activation, batch);
  }

  private recordFused(
    mode: FusedMatvecMode,
    y: GPUBuffer,
    x: GPUBuffer,
    cols: number,
    segments: FusedSegment[],
    norm: { gamma: GPUBuffer; eps: number } | undefined,
    activation: GatedActivation = 'silu',
    batch?: FusedBatch,
  ): void {
    this.record(planFusedMatvec(this.kernels, mode, y, x, cols, segments, norm, activation, batch));
  }

  /**
   * Decode (one token) attention straight from a fused Q/K/V projection qkv = [q | k | v], with
   * RoPE (by invFreq and shape.pairing) and the K/V append folded in (decode_attention.wgsl): q and
   * k rotated to the position (at.startPos plus the u32 in at.position, see PositionSource), the
   * token's (rope(k), v) written to its row of keys and values, and out [heads, headDim] =
   * attention over the cache rows up to it. With `split` (chunks = ceil(cache rows / chunkKeys) >
   * 1) the keys are split over the sequence and combined in a second dispatch (attention.wgsl
   * split_combine); partials holds heads * chunks * (headDim + 2) floats. The grids depend on the
   * cache size, not the position. With `qkNorm` (Qwen3, Gemma 3), each head of q and of k is
   * RMS-normalized (x / sqrt(mean(x²) + eps) * γ, gammas q and k of [headDim]) before RoPE. On a
   * device that binds fewer than 9 storage buffers a dispatch, qkNorm with a position buffer goes
   * unsplit (one dispatch over all the keys) whatever `split` says. With shape.ring the caches are
   * a ring (see attention) and the chunks those of a cache of ring.positions rows, of which only
   * the few a window spans run (slot chunk mod slots), combined in the same order.
   */
  decodeAttention(
    buffers: { out: GPUBuffer; qkv: GPUBuffer; keys: GPUBuffer; values: GPUBuffer; invFreq: GPUBuffer },
    at: Omit<TokenSpan, 'T'>,
    shape: AttentionShape,
    kvDType: KvDType,
    split?: { chunkKeys: number; partials: GPUBuffer },
    qkNorm?: { q: GPUBuffer; k: GPUBuffer; eps: number },
  ): void {
    this.record(planDecodeAttention(this.kernels, buffers, at, shape, kvDType, split, qkNorm));
  }

  /**
   * decodeAttention for every row of a batched decode step (decode_attention_batch.wgsl): row r
   * (of the count in batch.rows, see batch-rows.ts) at its position, its K/V row written in its
   * slot (cache rows from slot * batch.slotRows), qkv and out at r times their strides. The grid
   * is batch.maxRows rows'; `split` as decodeAttention's, its partials maxRows times as many.
   */
  batchDecodeAttention(
    buffers: { out: GPUBuffer; qkv: GPUBuffer; keys: GPUBuffer; values: GPUBuffer; invFreq: GPUBuffer },
    batch: DecodeAttentionBatch,
    shape: AttentionShape,
    kvDType: KvDType,
    split?: { chunkKeys: number; partials: GPUBuffer },
    qkNorm?: { q: GPUBuffer; k: GPUBuffer; eps: number },
  ): void {
    this.record(planBatchDecodeAttention(this.kernels, buffers, batch, shape, kvDType, split, qkNorm));
  }

  /**
   * embedding() of `rows` tokens `tokenStride` u32s apart in `tokens` (a batched step's rows,
   * each token at its own binding offset): out [rows, table.cols]. A whole table only.
   */
  batchEmbedding(out: GPUBuffer, table: GpuMatrix, tokens: GPUBuffer, rows: number, tokenStride: number, scale = 1): void {
    this.record([planBatchEmbedding(this.kernels, out, table, tokens, rows, tokenStride, scale)]);
  }

  /**
   * Every row's greedy pick (batch_greedy.wgsl): the argmax of its `vocab` logits (row r's from
   * float r * stride of `logits`; the lowest id on ties) to its token (u32 r * tokenStride of
   * `tokens`) and its record (u32 id, f32 logprob, zeros: BATCH_RECORD_BYTES) to record
   * r * slots + position mod slots of `records`. Up to maxRows rows, the count from `rows`.
   */
  batchGreedy(io: BatchGreedyBuffers, shape: BatchGreedyShape): void {
    this.record([planBatchGreedy(this.kernels, io, shape)]);
  }

  /** Moves every row of a batched step's rows buffer (batch-rows.ts) to its next position. */
  advanceBatchRows(rows: GPUBuffer, maxRows: number): void {
    this.record([planAdvanceBatchRows(this.kernels, rows, maxRows)]);
  }

  /**
   * Decode layers first .. first + count - 1 (one token) in one dispatch (decode_layer.wgsl): with
   * x, qkv, a, h, the position, RoPE's frequencies, γ_out and the layers' norms and biases in
   * `state` as decodeLayerLayout(shape.dims) lays them out, x += attention and feed-forward of each layer
   * in turn, the token's K/V appended to its caches at the position. The matrices (Wq, Wk, Wv, Wo,
   * W_gate, W_up, W_down: DECODE_LAYER_MATRICES) are one layer's, whole (see decodeLayerFits), each
   * bound on its own; or every layer's in an f32 arena, which also lets the dispatch start with x =
   * E[tokens[0]] (`embedFrom`) and end with the logits (`logits`) when the arena holds those
   * matrices, and then write their argmax to `greedyTo` (u32 at byte 0) and its record to the state
   * (decodeLayerLayout's records; embedFrom and greedyTo, when both are given, are one buffer).
   * The last layer's dispatch leaves the next position in the state. The caches are every layer's,
   * of element type caches.kvDType.
   */
  decodeLayers(
    state: GPUBuffer,
    weights: DecodeLayerWeights,
    layers: { first: number; count: number },
    shape: DecodeLayerShape,
    caches: { keys: readonly GPUBuffer[]; values: readonly GPUBuffer[]; kvDType: KvDType; rings?: readonly (KvRing | undefined)[]; slots?: number },
  ): void {
    this.record([planDecodeLayers(this.kernels, state, weights, layers, shape, caches)]);
  }

  /** out[i] = act(gate[i]) * up[i] for i < n, act silu or `activation`. out must not be gate or up. */
  swiglu(out: GPUBuffer, gate: GPUBuffer, up: GPUBuffer, n: number, activation: GatedActivation = 'silu'): void {
    assertCount(n, 'swiglu n', 0);
    checkGatedActivation(activation, 'swiglu');
    if (n === 0) return;
    assertDistinct(out, [gate, up], 'swiglu');
    for (const [b, what] of [[out, 'out'], [gate, 'gate'], [up, 'up']] as const) assertFits(b, n * 4, `swiglu ${what}`);
    const pipeline = this.kernels.fixedPipeline(activation === 'gelu_tanh' ? 'swiglu_gelu_tanh' : 'swiglu');
    this.dispatch(pipeline, SWIGLU_PARAMS.pack({ n }), { 1: out, 2: gate, 3: up }, Math.ceil(n / ELEMENTWISE_WORKGROUP));
  }

  /** In place, x[i] = cap · tanh(x[i] / cap) for i < n (Gemma 2's final logit soft-capping). */
  softcap(x: GPUBuffer, n: number, cap: number): void {
    assertCount(n, 'softcap n', 0);
    if (!(Number.isFinite(cap) && cap > 0)) throw new Error(`softcap cap must be a positive number, got ${cap}`);
    if (n === 0) return;
    assertFits(x, n * 4, 'softcap x');
    this.dispatch(this.kernels.fixedPipeline('softcap'), SOFTCAP_PARAMS.pack({ n, cap }), { 1: x }, Math.ceil(n / ELEMENTWISE_WORKGROUP));
  }

  /** out[i] = a[i] + b[i] for i < n. out may be a or b (in-place residual add), not both. */
  add(out: GPUBuffer, a: GPUBuffer, b: GPUBuffer, n: number): void {
    assertCount(n, 'add n', 0);
    if (n === 0) return;
    for (const [buf, what] of [[out, 'out'], [a, 'a'], [b, 'b']] as const) assertFits(buf, n * 4, `add ${what}`);
    const workgroups = Math.ceil(n / ELEMENTWISE_WORKGROUP);
    if (out !== a && out !== b) {
      this.dispatch(this.kernels.fixedPipeline('add'), RESIDUAL_PARAMS.pack({ n }), { 1: out, 2: a, 3: b }, workgroups);
      return;
    }
    if (a === b) throw new Error("add: out, a and b are one buffer (x += x); use a separate output buffer");
    // In place: the output is bound once, read_write, as the accumulator (addition commutes).
    const other = out === a ? b : a;
    this.dispatch(this.kernels.fixedPipeline('add_in_place'), RESIDUAL_PARAMS.pack({ n }), { 4: out, 3: other }, workgroups);
  }

  /** Records encoder.copyBufferToBuffer (offsets and size multiples of 4), in order with the dispatches. */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void {
    if (srcOffset % 4 || dstOffset % 4 || byteSize % 4) {
      throw new Error(`copy offsets and size must be multiples of 4 (got ${srcOffset}, ${dstOffset}, ${byteSize})`);
    }
    if (byteSize === 0) return;
    assertFits(src, srcOffset + byteSize, 'copy src');
    assertFits(dst, dstOffset + byteSize, 'copy dst');
    this.assertWritable();
    this.recordCopy(src, srcOffset, dst, dstOffset, byteSize);
  }

  /** Records one dispatch of `pipeline` with `params` in its uniform (binding 0) and `buffers` bound. */
  protected dispatch(
    pipeline: GPUComputePipeline,
    params: UniformValue[],
    buffers: Record<number, GPUBuffer>,
    workgroups: number | [number, number],
  ): void {
    this.assertWritable();
    const bindGroup = this.bindGroup(pipeline, this.uniforms.alloc(params), buffers, this.label);
    const [x, y] = typeof workgroups === 'number' ? this.kernels.grid(workgroups) : workgroups;
    this.recordDispatch(pipeline, bindGroup, x, y);
  }

  /** Records the dispatches a kernel family's plan function made, in order. */
  private record(planned: Iterable<PlannedDispatch>): void {
    for (const d of planned) this.dispatch(d.pipeline, d.params, d.buffers, d.workgroups);
  }

  /** Throws when nothing more may be recorded (submitted, sealed). */
  protected abstract assertWritable(): void;

  protected abstract recordDispatch(pipeline: GPUComputePipeline, bindGroup: GPUBindGroup, x: number, y: number): void;

  protected abstract recordCopy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, byteSize: number): void;

  /** A bind group of `pipeline`: the uniform slot at binding 0, then `buffers` by binding. */
  protected bindGroup(
    pipeline: GPUComputePipeline,
    slot: { buffer: GPUBuffer; offset: number; size: number },
    buffers: Record<number, GPUBuffer>,
    label?: string,
  ): GPUBindGroup {
    const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: slot }];
    for (const [binding, buffer] of Object.entries(buffers)) entries.push({ binding: Number(binding), resource: { buffer } });
    return this.kernels.ctx.device.createBindGroup({ label, layout: this.kernels.bindGroupLayout(pipeline), entries });
  }
}
