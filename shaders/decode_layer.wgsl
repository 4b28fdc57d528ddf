// Decode layers (one token) in one dispatch of one workgroup, for CPU adapters and small models,
// where a dispatch costs more than the layer's work and a workgroup barrier far less
// (docs/tuning.md#decode-layer). Each layer is the same math as the five dispatches of
// model/decode-step.ts, recordDecodeStep, as five phases separated by barriers:
//
//   1. qkv = s·(x∘γ_attn)·[Wq; Wk; Wv]ᵀ + [bq; bk; bv],  s = 1 / sqrt(mean(x²) + eps)
//   2. cache[p] = (rope(k), v); a = attention(rope(q), K, V)      (decode_attention.wgsl)
//   3. x += a·Woᵀ
//   4. h = silu(s·(x∘γ_ffn)·W_gateᵀ) * s·(x∘γ_ffn)·W_upᵀ
//   5. x += h·W_downᵀ
//
// A dispatch runs LAYER_SLOTS consecutive layers (params.slots: where each finds its norms, biases
// and matrices), one after the other. With EMBED it first sets x = E[token] (the step's embedding),
// and with LOGITS it ends with logits = s·(x∘γ_out)·W_lm_headᵀ: so a small model's whole step can
// take a few dispatches (model/decode-layers.ts, recordDecodeLayers) rather than one per layer
// plus two. With GREEDY it then picks the next token, the argmax of the logits, into `tokens`
// (where the next step's EMBED reads it) and its record into st at RECORD0: a greedy sequence
// needs no sampler dispatch a step.
//
// Every thread takes blocks of QUADS quads of rows (4 QUADS rows, whole rows, TEAM = 1) of each
// projection in turn, and the attention's items. Each phase reads what the one before wrote, and
// writes nothing another thread of the same phase reads, so one barrier between phases is enough.
//
// The activations live in one buffer `st` (vec4s) so that the kernel binds few storage buffers: x
// at X0 (= 0, where a separate embedding dispatch writes it and a separate logits dispatch reads
// it), qkv at QKV0, a at ATT0, h at H0, the step's position (u32 bits) at POS0, RoPE's inverse
// frequencies at FREQ0, γ_out at OUT0, and per layer, at its slot's `consts`: γ_attn, γ_ffn and the
// Q/K/V biases (zeros when the model has none), copied there when the decode step is made. Every
// region starts at a multiple of 4 floats; DIM, Q_DIM, KV_DIM and FFN are multiples of 4.
//
// The matrices come one of two ways (kernels/decode-layer.ts, decodeLayerSpec): each of the one layer's seven
// from a binding of its own, any storage (snippets renamed with suffixes sq, sk, sv, so, sg, su,
// sd, at bindings 10..16); or all from one f32 "arena" buffer (binding 2), the slots giving each
// matrix's first element. The K/V caches of slot s are k_cache / v_cache (one slot), or
// k_cache_c<s> / v_cache_c<s>, read by attend_slot(s, item)'s own copy of the attention.
//
// Composed in front of this file (kernels/decode-layer.ts, decodeLayerSpec): WG, QUADS, TEAM (1), LAYER_SLOTS,
// DIM, Q_DIM, KV_DIM, FFN, the region offsets, HAS_BIAS, EMBED, LOGITS, GREEDY;
// decode_attention.wgsl's helpers (their store_out, qkv and frequency reads and start_pos are
// defined below) and decode_attention.wgsl, with the cache bindings and attend_slot; the weight
// snippets, with block_dot_<m> (blockDotWgsl) for m in q, k, v, o, g, u, d over the loaders named
// below; and `fn embed_token(lid)` / `fn project_logits(lid)` / `fn pick_greedy(lid)` (empty
// without EMBED / LOGITS / GREEDY).

/** Where the layer of one slot finds its constants and matrices. */
struct Slot {
  consts: u32, // its γ_attn, γ_ffn, biases in st (a float index, a multiple of 4)
  // Its matrices' first elements in the arena (0 with a binding per matrix).
  wq: u32,
  wk: u32,
  wv: u32,
  wo: u32,
  wg: u32,
  wu: u32,
  wd: u32,
}

struct Params {
  start_pos: u32,
  num_heads: u32,
  num_kv_heads: u32,
  head_dim: u32,
  scale: f32,      // 1 / sqrt(head_dim)
  window: u32,     // sliding window in positions; 0: none
  chunk_keys: u32, // cache rows (one chunk: the layer never splits the attention)
  num_chunks: u32, // 1
  pairing: u32,    // RoPE: 0 = adjacent, 1 = halves
  eps: f32,
  advance: u32,    // 1 in the step's last dispatch: it leaves the next step's position in st (below)
  emb: u32,        // EMBED: the token embedding's first element in the arena
  emb_rows: u32,   // EMBED: its rows (a token id past them gives x = 0)
  lm: u32,         // LOGITS: W_lm_head's first element in the arena
  pad0: u32,
  pad1: u32,
  slots: array<Slot, LAYER_SLOTS>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> st: array<vec4<f32>>;

/** The slot of the layer running: its constants and matrices. */
var<private> cur: Slot;

// ---- what decode_attention.wgsl reads and writes ----

fn load_qkv(i: u32) -> f32 {
  return st[QKV0 / 4u + (i >> 2u)][i & 3u];
}

fn load_inv_freq(d: u32) -> f32 {
  return st[FREQ0 / 4u + (d >> 2u)][d & 3u];
}

fn start_pos() -> u32 {
  return params.start_pos + bitcast<u32>(st[POS0 / 4u].x);
}

/** Head slices are whole vec4s (HEAD_DIM is a multiple of 4). */
fn store_out(i: u32, v: H) {
  st[ATT0 / 4u + (i >> 2u)] = v;
}

fn store_partial(i: u32, v: H) {}
fn store_ml(i: u32, m: f32, l: f32) {}

// ---- the projections' inputs ----

fn gamma_attn4(k: u32) -> vec4<f32> {
  return st[(cur.consts + k) >> 2u];
}

fn gamma_ffn4(k: u32) -> vec4<f32> {
  return st[(cur.consts + DIM + k) >> 2u];
}

/** x∘γ_attn (phase 1). K is a multiple of 4: the single-float loaders are never called. */
fn load_in4_attn(k: u32) -> vec4<f32> {
  return st[(X0 + k) >> 2u] * gamma_attn4(k);
}
fn load_in_attn(k: u32) -> f32 { return 0.0; }

/** a (phase 3). */
fn load_in4_att(k: u32) -> vec4<f32> {
  return st[(ATT0 + k) >> 2u];
}
fn load_in_att(k: u32) -> f32 { return 0.0; }

/** x∘γ_ffn (phase 4). */
fn load_in4_ffn(k: u32) -> vec4<f32> {
  return st[(X0 + k) >> 2u] * gamma_ffn4(k);
}
fn load_in_ffn(k: u32) -> f32 { return 0.0; }

/** h (phase 5). */
fn load_in4_h(k: u32) -> vec4<f32> {
  return st[(H0 + k) >> 2u];
}
fn load_in_h(k: u32) -> f32 { return 0.0; }

/** x∘γ_out (LOGITS). */
fn load_in4_out(k: u32) -> vec4<f32> {
  return st[(X0 + k) >> 2u] * st[(OUT0 + k) >> 2u];
}
fn load_in_out(k: u32) -> f32 { return 0.0; }

/** The RMSNorm scale of x: 1 / sqrt(mean(x²) + eps), every thread for itself. */
fn rms_scale() -> f32 {
  var sum_sq = 0.0;
  for (var k = 0u; k < DIM; k += 4u) {
    let v = st[(X0 + k) >> 2u];
    sum_sq += dot(v, v);
  }
  return inverseSqrt(sum_sq / f32(DIM) + params.eps);
}

/** Rows of the bias of the stacked Q/K/V rows r .. r+3 (zeros without biases). */
fn qkv_bias4(r: u32) -> vec4<f32> {
  if (!HAS_BIAS) {
    return vec4<f32>(0.0);
  }
  return st[(cur.consts + 2u * DIM + r) >> 2u];
}

fn phase() {
  storageBarrier();
  workgroupBarrier();
}

// ---- the phases' row blocks ----

const ROWS_PER_BLOCK: u32 = 4u * QUADS;

/** Phase 1: the sums of block r0 of the rows of Wq, Wk or Wv, stored from QKV row `first` on. */
fn store_qkv_block(acc: array<vec4<f32>, QUADS>, r0: u32, rows: u32, first: u32, s: f32) {
  for (var q = 0u; q < QUADS; q++) {
    let r = first + r0 + 4u * q;
    if (r0 + 4u * q < rows) { st[(QKV0 + r) >> 2u] = acc[q] * s + qkv_bias4(r); }
  }
}

fn project_q(b: u32, s: f32) {
  let r0 = b * ROWS_PER_BLOCK;
  store_qkv_block(block_dot_q(cur.wq, r0, Q_DIM - 1u, 0u), r0, Q_DIM, 0u, s);
}

fn project_k(b: u32, s: f32) {
  let r0 = b * ROWS_PER_BLOCK;
  store_qkv_block(block_dot_k(cur.wk, r0, KV_DIM - 1u, 0u), r0, KV_DIM, Q_DIM, s);
}

fn project_v(b: u32, s: f32) {
  let r0 = b * ROWS_PER_BLOCK;
  store_qkv_block(block_dot_v(cur.wv, r0, KV_DIM - 1u, 0u), r0, KV_DIM, Q_DIM + KV_DIM, s);
}

/** Phases 3 and 5: x += the sums of block r0 of the rows of Wo or W_down. */
fn accumulate_x_block(acc: array<vec4<f32>, QUADS>, r0: u32) {
  for (var q = 0u; q < QUADS; q++) {
    let r = r0 + 4u * q;
    if (r < DIM) { st[(X0 + r) >> 2u] += acc[q]; }
  }
}

fn project_o(b: u32) {
  let r0 = b * ROWS_PER_BLOCK;
  accumulate_x_block(block_dot_o(cur.wo, r0, DIM - 1u, 0u), r0);
}

fn project_down(b: u32) {
  let r0 = b * ROWS_PER_BLOCK;
  accumulate_x_block(block_dot_d(cur.wd, r0, DIM - 1u, 0u), r0);
}

/** Phase 4: h = silu(gate) * up, block b (silu(g) = g / (1 + exp(-g)), -0 in the limit). */
fn project_gate_up(b: u32, s: f32) {
  let r0 = b * ROWS_PER_BLOCK;
  let gate = block_dot_g(cur.wg, r0, FFN - 1u, 0u);
  let up = block_dot_u(cur.wu, r0, FFN - 1u, 0u);
  for (var q = 0u; q < QUADS; q++) {
    let r = r0 + 4u * q;
    let g = gate[q] * s;
    if (r < FFN) { st[(H0 + r) >> 2u] = g / (1.0 + exp(-g)) * (up[q] * s); }
  }
}

/** Layer `slot` of this dispatch: x += its attention and feed-forward, its K/V row appended. */
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
  phase();
  let s_ffn = rms_scale();
  for (var b = lid; b < (FFN + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_gate_up(b, s_ffn); }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) { project_down(b); }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
  if (EMBED) {
    embed_token(lid);
    phase();
  }
  for (var slot = 0u; slot < LAYER_SLOTS; slot++) {
    if (slot > 0u) { phase(); }
    run_layer(lid, slot);
  }
  if (LOGITS) {
    phase();
    project_logits(lid);
  }
  if (GREEDY) {
    phase();
    pick_greedy(lid);
  }
  // The next step's position, p + 1, once every thread has read p: consecutive steps then need no
  // copy of their position between them, and share one compute pass (DecodeStep.consecutive).
  if (params.advance != 0u) {
    phase();
    if (lid == 0u) { st[POS0 / 4u].x = bitcast<f32>(bitcast<u32>(st[POS0 / 4u].x) + 1u); }
  }
}
