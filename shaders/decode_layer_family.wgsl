// The family features of decode_layer.wgsl (kernels/decode-layer-family.ts): composed after it,
// this file's functions replace decode_layer.wgsl's of the same names (taken out of it first), so
// a plain Llama layer's shader stays exactly decode_layer.wgsl. Each feature is a compile-time
// constant; one that is off folds its branch away:
//
//   POST_NORMS (Gemma): phases 3 and 5 write their block's output to st at BLOCK0 rather than add
//     it to x; a phase after each adds it RMS-normalized: x += s·(b∘γ_post), s = 1 / sqrt(mean(b²) + eps),
//     γ_post at the layer's constants + POST_ATTN / POST_FFN.
//   GELU_TANH (Gemma): h = gelu_tanh(gate) * up (gelu_tanh.wgsl) rather than silu(gate) * up.
//
// The per-layer RoPE, window, q/k norm, soft-cap and embedding-scale features are the attention's
// and the embedding's helpers, composed by decode-layer-family.ts.
//
// Composed in front: POST_NORMS, GELU_TANH, BLOCK0, POST_ATTN, POST_FFN (offsets into the layer's
// constants; 0 when POST_NORMS is off) and gelu_tanh.wgsl.

/** Phases 3 and 5: block r0 of the rows of Wo or W_down, added to x, or (POST_NORMS) stored at BLOCK0. */
fn output_block(acc: array<vec4<f32>, QUADS>, r0: u32) {
  for (var q = 0u; q < QUADS; q++) {
    let r = r0 + 4u * q;
    if (r < DIM) {
      if (POST_NORMS) {
        st[(BLOCK0 + r) >> 2u] = acc[q];
      } else {
        st[(X0 + r) >> 2u] += acc[q];
      }
    }
  }
}

fn project_o(b: u32) {
  let r0 = b * ROWS_PER_BLOCK;
  output_block(block_dot_o(cur.wo, r0, DIM - 1u, 0u), r0);
}

fn project_down(b: u32) {
  let r0 = b * ROWS_PER_BLOCK;
  output_block(block_dot_d(cur.wd, r0, DIM - 1u, 0u), r0);
}

/**
 * POST_NORMS: x += s·(b∘γ), b the block's output at BLOCK0, γ at the layer's constants + `at`.
 * Every thread sums the squares of all of b itself (no barrier) and adds its own vec4s of x.
 */
fn add_post_normed(lid: u32, at: u32) {
  var sum_sq = 0.0;
  for (var k = 0u; k < DIM; k += 4u) {
    let v = st[(BLOCK0 + k) >> 2u];
    sum_sq += dot(v, v);
  }
  let s = inverseSqrt(sum_sq / f32(DIM) + params.eps);
  for (var k = lid * 4u; k < DIM; k += WG * 4u) {
    st[(X0 + k) >> 2u] += st[(BLOCK0 + k) >> 2u] * s * st[(cur.consts + at + k) >> 2u];
  }
}

/** Phase 4: h = act(gate) * up, block b; act silu, or gelu_tanh with GELU_TANH. */
fn project_gate_up(b: u32, s: f32) {
  let r0 = b * ROWS_PER_BLOCK;
  let gate = block_dot_g(cur.wg, r0, FFN - 1u, 0u);
  let up = block_dot_u(cur.wu, r0, FFN - 1u, 0u);
  for (var q = 0u; q < QUADS; q++) {
    let r = r0 + 4u * q;
    let g = gate[q] * s;
    var a: vec4<f32>;
    if (GELU_TANH) {
      a = gelu_tanh4(g);
    } else {
      a = g / (1.0 + exp(-g));
    }
    if (r < FFN) { st[(H0 + r) >> 2u] = a * (up[q] * s); }
  }
}

/** Layer `slot` of this dispatch: decode_layer.wgsl's run_layer, with a phase after each block for its post-norm. */
fn run_layer(lid: u32, slot: u32) {
  cur = params.slots[slot];
  let s_attn = rms_scale();
  for (var b = lid; b < (Q_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_q(b, s_attn); }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_k(b, s_attn); }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_v(b, s_attn); }
  phase();
  for (var item = lid; item < params.num_heads / HEADS; item += WG) { attend_slot(slot, item); }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_o(b); }
  if (POST_NORMS) {
    phase();
    add_post_normed(lid, POST_ATTN);
  }
  phase();
  let s_ffn = rms_scale();
  for (var b = lid; b < (FFN + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_gate_up(b, s_ffn); }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_down(b); }
  if (POST_NORMS) {
    phase();
    add_post_normed(lid, POST_FFN);
  }
}
