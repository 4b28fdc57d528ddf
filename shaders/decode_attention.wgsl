// Decode (one token at position p = start_pos()) attention straight from the fused Q/K/V
// projection, with RoPE and the K/V append folded in:
//
//   q = rope(qkv.q, p),  k_p = rope(qkv.k, p),  v_p = qkv.v
//   K[p], V[p] = k_p, v_p                        (the cache row of this token)
//   out[h] = softmax_j( q[h] · K[j, g(h)] * scale ) · V[j, g(h)],   first_key(p) <= j <= p
//
// (GQA: g(h) = h / (num_heads / num_kv_heads); sliding window as in attention.wgsl.) One thread per
// (head, chunk of chunk_keys cache rows): the chunk's keys are walked with an online softmax as in
// attention.wgsl's per_thread (its `HEAD_SLICES` loops are unrolled by kernels.ts). Row p is taken
// after the loop from registers (the new k_p and v_p, rounded as the cache stores them), never from
// the cache, and is written to the cache by one thread per KV head
// (the first head of its group, in the chunk that holds p): no thread of this dispatch reads it.
// With one chunk (num_chunks = 1) the thread writes its head's output; with more it leaves its
// unnormalized accumulator and (m, l) in `partials`, and attention.wgsl's split_combine finishes
// (flash-decoding). The grid depends on the cache size, not on p.
//
// Composed in front of this file (kernels.ts, decodeAttentionSpec): HEAD_DIM, THREADS ((head, chunk)
// pairs per workgroup: fewer on CPU devices), H, WIDTH, hsum, KV,
// load_k/load_v, store_out (attentionSliceWgsl); sin_cos.wgsl, f16_bits.wgsl; `fn start_pos() -> u32`
// (positionWgsl); and, for the cache's element type, `fn slice_h(f, i) -> H` (slice i of a
// function-scope array<f32, HEAD_DIM>), `fn qkv_h(i) -> H`, `fn round_kv(x: H) -> H` (to what the cache holds) and `fn store_kv_row(e0)`
// (writes k_cur, v_cur at element e0 of the caches); and, in the split variant only, the partials
// (binding 5, laid out as attention.wgsl's split_combine reads them) behind `fn store_partial(i, v: H)`
// and `fn store_ml(i, m, l)` (no-ops in the single-chunk variant, which binds no partials).

struct Params {
  start_pos: u32,
  num_heads: u32,
  num_kv_heads: u32,
  head_dim: u32,
  scale: f32,      // 1 / sqrt(head_dim)
  window: u32,     // sliding window in positions; 0: none
  chunk_keys: u32, // cache rows per chunk
  num_chunks: u32, // chunks per head
  pairing: u32,    // RoPE: 0 = adjacent, 1 = halves
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;       // [num_heads, head_dim]
@group(0) @binding(2) var<storage, read> qkv: array<f32>;             // [q_dim + 2 kv_dim]
@group(0) @binding(3) var<storage, read_write> k_cache: array<KV>;    // [rows, num_kv_heads, head_dim]
@group(0) @binding(4) var<storage, read_write> v_cache: array<KV>;
@group(0) @binding(6) var<storage, read> inv_freq: array<f32>;        // [head_dim / 2]

const NEG_LARGE: f32 = -1e30;
const HEAD_SLICES: u32 = HEAD_DIM / WIDTH;

var<private> k_cur: array<H, HEAD_SLICES>;
var<private> v_cur: array<H, HEAD_SLICES>;

fn first_key(pos: u32) -> u32 {
  if (params.window == 0u || pos < params.window) {
    return 0u;
  }
  return pos + 1u - params.window;
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let item = (wg.y * grid.x + wg.x) * THREADS + lid; // flat (h, chunk)
  if (item >= params.num_heads * params.num_chunks) {
    return; // no barriers in this kernel
  }
  let h = item / params.num_chunks;
  let chunk = item % params.num_chunks;
  let group = params.num_heads / params.num_kv_heads;
  let kv_head = h / group;
  let pos = start_pos();
  let p = f32(pos);
  let q_dim = params.num_heads * HEAD_DIM;
  let kv_dim = params.num_kv_heads * HEAD_DIM;

  // RoPE, one sin_cos per pair for q and k alike (one call site: SwiftShader compiles an inlined
  // sin_cos per call, and one per element made this kernel take a minute to compile).
  let q0 = h * HEAD_DIM;
  let k0 = q_dim + kv_head * HEAD_DIM;
  var qf: array<f32, HEAD_DIM>;
  var kf: array<f32, HEAD_DIM>;
  for (var i = 0u; i < HEAD_DIM / 2u; i++) {
    let sc = sin_cos(p * inv_freq[i]);
    var ia = 2u * i; // 'adjacent': (2i, 2i + 1); 'halves': (i, i + HEAD_DIM / 2)
    var ib = 2u * i + 1u;
    if (params.pairing == 1u) {
      ia = i;
      ib = i + HEAD_DIM / 2u;
    }
    let qa = qkv[q0 + ia];
    let qb = qkv[q0 + ib];
    qf[ia] = qa * sc.y - qb * sc.x;
    qf[ib] = qa * sc.x + qb * sc.y;
    let ka = qkv[k0 + ia];
    let kb = qkv[k0 + ib];
    kf[ia] = ka * sc.y - kb * sc.x;
    kf[ib] = ka * sc.x + kb * sc.y;
  }
  var qv: array<H, HEAD_SLICES>;
  var acc: array<H, HEAD_SLICES>;
  for (var i = 0u; i < HEAD_SLICES; i++) {
    qv[i] = slice_h(&qf, i);
    k_cur[i] = round_kv(slice_h(&kf, i));
    v_cur[i] = round_kv(qkv_h(q_dim + kv_dim + kv_head * HEAD_DIM + i * WIDTH));
    acc[i] = H();
  }
  let kv_offset = kv_head * HEAD_DIM; // this KV head within a cache row
  if (h % group == 0u && chunk == pos / params.chunk_keys) {
    store_kv_row(pos * kv_dim + kv_offset);
  }

  // The cache rows before p, then row p from registers (the cache's may not be written yet); kept
  // out of the loop so that the loop reads one K and one V per row (a select read both).
  let lo = max(first_key(pos), chunk * params.chunk_keys);
  let hi = min(pos + 1u, (chunk + 1u) * params.chunk_keys);
  var m = NEG_LARGE;
  var l = 0.0;
  for (var j = lo; j < min(hi, pos); j++) {
    let base = (j * kv_dim + kv_offset) / WIDTH;
    var dot = H();
    for (var i = 0u; i < HEAD_SLICES; i++) {
      dot += qv[i] * load_k(base + i);
    }
    let score = hsum(dot) * params.scale;
    if (score > m) {
      let correction = exp(m - score);
      l *= correction;
      for (var i = 0u; i < HEAD_SLICES; i++) {
        acc[i] *= correction;
      }
      m = score;
    }
    let e = exp(score - m);
    l += e;
    for (var i = 0u; i < HEAD_SLICES; i++) {
      acc[i] += e * load_v(base + i);
    }
  }
  if (lo <= pos && pos < hi) {
    var dot = H();
    for (var i = 0u; i < HEAD_SLICES; i++) {
      dot += qv[i] * k_cur[i];
    }
    let score = hsum(dot) * params.scale;
    let m_new = max(m, score);
    let correction = exp(m - m_new);
    let e = exp(score - m_new);
    l = l * correction + e;
    for (var i = 0u; i < HEAD_SLICES; i++) {
      acc[i] = acc[i] * correction + e * v_cur[i];
    }
    m = m_new;
  }

  if (params.num_chunks == 1u) {
    let inv_l = 1.0 / l;
    for (var i = 0u; i < HEAD_SLICES; i++) {
      store_out(h * HEAD_DIM + i * WIDTH, acc[i] * inv_l);
    }
    return;
  }
  for (var i = 0u; i < HEAD_SLICES; i++) {
    store_partial(item * HEAD_DIM + i * WIDTH, acc[i]);
  }
  store_ml(params.num_heads * params.num_chunks * HEAD_DIM + 2u * item, m, l);
}
