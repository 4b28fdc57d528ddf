// Decode (one token at position p = start_pos()) attention straight from the fused Q/K/V
// projection, with RoPE and the K/V append folded in:
//
//   q = rope(norm(qkv.q), p),  k_p = rope(norm(qkv.k), p),  v_p = qkv.v   (norm: QK_NORM, else none)
//   K[p], V[p] = k_p, v_p                        (the cache row of this token)
//   out[h] = softmax_j( cap_score(q[h] · K[j, g(h)] * scale) ) · V[j, g(h)],   first_key(p) <= j <= p
//
// (GQA: g(h) = h / (num_heads / num_kv_heads); sliding window as in attention.wgsl.) One thread per
// (block of HEADS query heads of one KV head, chunk of chunk_keys cache rows): the chunk's keys are
// walked once with an online softmax per head as in attention.wgsl's per_thread, so each K and V row
// is loaded (and unpacked) once for the HEADS heads that share it. HEADS divides the GQA group; the
// host takes 1 on GPUs (many light threads) and the whole group on CPU devices, where a thread's
// loads are what costs. The `HEADS` and `HEAD_SLICES` loops are unrolled by kernels/attention.ts.
// Row p is taken after the loop from registers (the new k_p and v_p, rounded as the cache stores
// them), never from the cache, and is written to the cache by one thread per KV head (the one with
// the group's first head, in the chunk that holds p): no thread of this dispatch reads it.
// With one chunk (num_chunks = 1) the thread writes its heads' outputs; with more it leaves their
// unnormalized accumulators and (m, l) in `partials`, and attention.wgsl's split_combine finishes
// (flash-decoding). The grid depends on the cache size, not on p.
// A sliding-window layer's cache may be a ring (kvRowWgsl): position j is at row kv_row(j) (j mod
// its rows, at least the window: row kv_row(p) held a position no query of this step reads), and
// work slot `slot` takes chunk slot_chunk(slot, p) of the chunks a full cache would have, so that
// split_combine sums the same chunks in the same order.
//
// This file is the math of one thread, `attend_item`; two kernels run it: decode_attention_pass.wgsl
// (a dispatch of its own) and decode_layer.wgsl (a phase of the whole layer). Composed in front of
// it (kernels/attention.ts, decodeAttentionHelpersWgsl): HEAD_DIM, HEADS, H, WIDTH, hsum, KV, load_k/load_v,
// store_out (attentionSliceWgsl); online_softmax.wgsl (first_key; attend_key / attend_row: one key
// for the thread's heads; NEG_LARGE, HEAD_SLICES), sin_cos.wgsl, f16_bits.wgsl; `fn start_pos() ->
// u32`; `fn load_qkv(i) -> f32` and `fn load_inv_freq(d) -> f32`; for the cache's element type,
// `fn qf_h(e) -> H` and `fn kf_h(e) -> H` (the slice at element e of qf / kf), `fn qkv_h(i) -> H`,
// `fn round_kv(x: H) -> H` (to what the cache holds) and `fn store_kv_row(e0)` (writes k_cur, v_cur
// at element e0 of the caches); `fn store_partial(i, v: H)` and `fn store_ml(i, m, l)` (the split's
// partials, laid out as attention.wgsl's split_combine reads them; no-ops with one chunk);
// `fn cap_score(s) -> f32` (the score, or soft-capped), `fn rope_dims() -> u32` and
// `fn rope_magnitude() -> f32` (RoPE's rotated elements a head and factor: HEAD_DIM and 1 unless
// the variant reads its params); `const QK_NORM: bool` with `fn q_gamma(e) -> f32`,
// `fn k_gamma(e) -> f32` and `fn qk_eps() -> f32` (the per-head q/k RMSNorm's weights and eps);
// and a `params` with the fields of decode_attention_pass.wgsl's Params (those of the features
// off are not read); `fn kv_row(j) -> u32` and `fn slot_chunk(slot, p) -> u32` (kvRowWgsl).

/** 1 / sqrt(mean(x²) + eps) of the head of qkv that starts at element `base` (QK_NORM). */
fn head_inv_rms(base: u32) -> f32 {
  var sum_sq = 0.0;
  for (var e = 0u; e < HEAD_DIM; e++) {
    let v = load_qkv(base + e);
    sum_sq += v * v;
  }
  return inverseSqrt(sum_sq / f32(HEAD_DIM) + qk_eps());
}

/** Slices of the HEADS heads' q and accumulators: slot g * HEAD_SLICES + i is slice i of head h0 + g. */
const SLOTS: u32 = HEADS * HEAD_SLICES;

// The roped q of the thread's heads ([HEADS, HEAD_DIM]) and k.
var<private> qf: array<f32, HEADS * HEAD_DIM>;
var<private> kf: array<f32, HEAD_DIM>;
var<private> k_cur: array<H, HEAD_SLICES>;
var<private> v_cur: array<H, HEAD_SLICES>;

/**
 * Thread work item `item` < (num_heads / HEADS) * num_chunks: the block of HEADS query heads
 * item / num_chunks, over the cache rows of chunk item % num_chunks.
 */
fn attend_item(item: u32) {
  let h0 = (item / params.num_chunks) * HEADS;
  let slot = item % params.num_chunks; // the chunk's work slot (a ring's slots: kvRowWgsl)
  let group = params.num_heads / params.num_kv_heads;
  let kv_head = h0 / group;
  let pos = start_pos();
  let chunk = slot_chunk(slot, pos);
  let p = f32(pos);
  let q_dim = params.num_heads * HEAD_DIM;
  let kv_dim = params.num_kv_heads * HEAD_DIM;

  // With QK_NORM (Qwen3, Gemma 3), the heads of q and k are RMS-normalized first, each element
  // times its gamma: x / sqrt(mean(x²) + eps) * γ. The thread sums the squares of its own heads
  // (a head is at most 256 floats, no barrier); every chunk's thread computes the same.
  let k0 = q_dim + kv_head * HEAD_DIM;
  var q_rms: array<f32, HEADS>;
  var k_rms = 1.0;
  if (QK_NORM) {
    for (var g = 0u; g < HEADS; g++) {
      q_rms[g] = head_inv_rms((h0 + g) * HEAD_DIM);
    }
    k_rms = head_inv_rms(k0);
  }

  // RoPE, one sin_cos per pair for q and k alike (one call site: SwiftShader compiles an inlined
  // sin_cos per call, and one per element made this kernel take a minute to compile). The first
  // rope_dims() elements of a head rotate, cos and sin times rope_magnitude(); the rest pass through.
  let rot_half = rope_dims() / 2u;
  for (var d = 0u; d < rot_half; d++) {
    let sc = sin_cos(p * load_inv_freq(d)) * rope_magnitude();
    var ia = 2u * d; // 'adjacent': (2d, 2d + 1); 'halves': (d, d + rope_dims() / 2)
    var ib = 2u * d + 1u;
    if (params.pairing == 1u) {
      ia = d;
      ib = d + rot_half;
    }
    for (var g = 0u; g < HEADS; g++) {
      let q0 = (h0 + g) * HEAD_DIM;
      var qa = load_qkv(q0 + ia);
      var qb = load_qkv(q0 + ib);
      if (QK_NORM) {
        qa = qa * q_rms[g] * q_gamma(ia);
        qb = qb * q_rms[g] * q_gamma(ib);
      }
      qf[g * HEAD_DIM + ia] = qa * sc.y - qb * sc.x;
      qf[g * HEAD_DIM + ib] = qa * sc.x + qb * sc.y;
    }
    var ka = load_qkv(k0 + ia);
    var kb = load_qkv(k0 + ib);
    if (QK_NORM) {
      ka = ka * k_rms * k_gamma(ia);
      kb = kb * k_rms * k_gamma(ib);
    }
    kf[ia] = ka * sc.y - kb * sc.x;
    kf[ib] = ka * sc.x + kb * sc.y;
  }
  for (var e = rope_dims(); e < HEAD_DIM; e++) {
    for (var g = 0u; g < HEADS; g++) {
      var qe = load_qkv((h0 + g) * HEAD_DIM + e);
      if (QK_NORM) {
        qe = qe * q_rms[g] * q_gamma(e);
      }
      qf[g * HEAD_DIM + e] = qe;
    }
    var ke = load_qkv(k0 + e);
    if (QK_NORM) {
      ke = ke * k_rms * k_gamma(e);
    }
    kf[e] = ke;
  }
  var qv: array<H, SLOTS>;
  var acc: array<H, SLOTS>;
  var m: array<f32, HEADS>;
  var l: array<f32, HEADS>;
  for (var g = 0u; g < HEADS; g++) {
    for (var i = 0u; i < HEAD_SLICES; i++) {
      qv[g * HEAD_SLICES + i] = qf_h((g * HEAD_SLICES + i) * WIDTH);
      acc[g * HEAD_SLICES + i] = H();
    }
    m[g] = NEG_LARGE;
    l[g] = 0.0;
  }
  for (var i = 0u; i < HEAD_SLICES; i++) {
    k_cur[i] = round_kv(kf_h(i * WIDTH));
    v_cur[i] = round_kv(qkv_h(q_dim + kv_dim + kv_head * HEAD_DIM + i * WIDTH));
  }
  let kv_offset = kv_head * HEAD_DIM; // this KV head within a cache row
  if (h0 % group == 0u && chunk == pos / params.chunk_keys) {
    store_kv_row(kv_row(pos) * kv_dim + kv_offset);
  }

  // The cache rows before p, then row p from registers (the cache's may not be written yet); kept
  // out of the loop so that the loop reads one K and one V per row (a select read both).
  let lo = max(first_key(pos), chunk * params.chunk_keys);
  let hi = min(pos + 1u, (chunk + 1u) * params.chunk_keys);
  for (var j = lo; j < min(hi, pos); j++) {
    attend_row(qv, &acc, &m, &l, (kv_row(j) * kv_dim + kv_offset) / WIDTH);
  }
  if (lo <= pos && pos < hi) {
    attend_key(qv, &acc, &m, &l, k_cur, v_cur);
  }

  for (var g = 0u; g < HEADS; g++) {
    let h = h0 + g;
    if (params.num_chunks == 1u) {
      let inv_l = 1.0 / l[g];
      for (var i = 0u; i < HEAD_SLICES; i++) {
        store_out(h * HEAD_DIM + i * WIDTH, acc[g * HEAD_SLICES + i] * inv_l);
      }
    } else {
      let hc = h * params.num_chunks + slot; // split_combine's (head, chunk slot) index
      for (var i = 0u; i < HEAD_SLICES; i++) {
        store_partial(hc * HEAD_DIM + i * WIDTH, acc[g * HEAD_SLICES + i]);
      }
      store_ml(params.num_heads * params.num_chunks * HEAD_DIM + 2u * hc, m[g], l[g]);
    }
  }
}
