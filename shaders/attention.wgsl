// Causal grouped-query attention over a KV cache, for prefill (T tokens) and decode (T = 1):
//
//   out[t, h] = softmax_j( cap(q[t, h] · K[j, g(h)] · scale) ) · V[j, g(h)],
//               first_key(p) <= j <= p,  p = start_pos + t
//
// where scale is 1 / sqrt(head_dim) unless the model says otherwise (Gemma's query_pre_attn_scalar),
// and cap(s) = s, or in the softcap variant softcap · tanh(s / softcap) (Gemma 2's attention logit
// soft-capping), applied before the mask and the softmax (cap_score).
//
// where g(h) = h / (num_heads / num_kv_heads) is the KV head that query head h shares with its
// group (GQA, Ainslie et al. 2023; MHA when num_kv_heads == num_heads). first_key is 0, or with a
// sliding window W (Mistral, Qwen2) p + 1 - W: the query sees the keys in (p - W, p]. The caches
// are [context_rows, num_kv_heads, head_dim] row-major and already hold the rows of the T new tokens.
//
// Both kernels keep an online softmax (Milakov & Gimelshein, 2018; as in FlashAttention): a
// running max m, a running sum l of exp(score - m) and an accumulator of exp(score - m)-weighted
// values, all rescaled by exp(m_old - m_new) whenever the max grows. So memory does not grow with
// the context length.
//
// Composed in front of this file (kernels/attention.ts, attentionSpec): `const HEAD_DIM: u32`, the head
// dimension of the pipeline (params.head_dim equals it); `fn cap_score(s: f32) -> f32` (scoreCapWgsl);
// the element type of q and the caches,
// `alias H` (vec4<f32> when HEAD_DIM is a multiple of 4, so every head starts 16-byte aligned;
// else f32) with `const WIDTH: u32` (floats per H) and `fn hsum(v: H) -> f32`; the caches' storage
// element `alias KV` (H for f32 caches; for f16 caches, packed two halves a u32 word: vec2<u32>
// with vec4 H, else u32) and `fn load_k/load_v(i: u32) -> H` of the cache's i-th H; single-float
// reads `fn load_q1/load_k1/load_v1(i: u32) -> f32` of float i; `fn store_out(i: u32, v: H)` writes
// floats i .. i + WIDTH - 1 of out; `fn start_pos() -> u32`, the position of token 0 (params.start_pos,
// or params.start_pos plus a u32 read from a storage buffer for the reusable decode step: the
// dispatch grid depends only on T and the heads, and each thread loops to its own position, so one
// recorded bind group serves every step); online_softmax.wgsl (first_key, attend_key / attend_row,
// NEG_LARGE, HEAD_SLICES); `fn kv_row(j: u32) -> u32`, the cache row of position j (j, or in a
// sliding-window layer's ring j mod its rows), and split_combine's chunk slots (kvRowWgsl). Two entry points; the host picks (kernels/tuning.ts, attentionPlan):
//
// - `per_thread`: one thread per (block of QUERIES consecutive query tokens, block of GROUP_HEADS
//   heads sharing a KV head): HEADS = QUERIES x GROUP_HEADS query heads, for which it walks the
//   keys one by one, loading each K/V row once, with the q and accumulators in private arrays of
//   HEAD_DIM / WIDTH slices a head (the `HEADS`, `QUERIES`, `GROUP_HEADS` and `HEAD_SLICES` loops
//   are unrolled by kernels/attention.ts when they are short: SwiftShader keeps private arrays in memory
//   when they are indexed by a loop variable). No workgroup memory and no barriers: on SwiftShader
//   (the tests' CPU Vulkan) a barrier costs far more than the arithmetic, and this kernel is
//   much faster than `per_workgroup` there (docs/tuning.md#attention). GROUP_HEADS and
//   QUERIES are 1 on GPUs (more threads); on CPU devices, where every load is dear, GROUP_HEADS
//   is the GQA group (attentionHeadsPerThread) and a prefill's QUERIES more than 1
//   (attentionQueriesPerThread).
// - `per_workgroup`: one workgroup per (t, h). It walks the keys in blocks of WORKGROUP_SIZE, one
//   key per thread for the scores (max and sum reduced in workgroup memory, with barriers); for the
//   value sum each thread owns output dimensions d = lid, lid + WORKGROUP_SIZE, ... (up to
//   MAX_HEAD_DIM in all). Spreads one query's keys over many threads: for GPUs, when there are
//   too few (t, h) pairs to fill the device (decode) and the context is long.
//
// And `split_combine`, the second pass of decode attention split over the sequence
// (flash-decoding; decode_attention.wgsl is the first): one thread per output float rescales the
// chunks' unnormalized accumulators in `partials` to their common max and divides by the summed l.
// Its grid depends on the cache size, not on the position; it skips the chunks past the position.

struct Params {
  T: u32,
  start_pos: u32,
  num_heads: u32,
  num_kv_heads: u32,
  head_dim: u32,
  scale: f32, // the scores' factor: 1 / sqrt(head_dim) by default
  window: u32, // sliding window in positions; 0: none
  chunk_keys: u32, // split_combine: keys per chunk
  num_chunks: u32, // split_combine: chunks per head (fixed by the cache size, not the position)
  softcap: f32, // scores soft-capped at this (cap_score of the softcap variant); 0: not read
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // [T, num_heads, head_dim]
@group(0) @binding(2) var<storage, read> q: array<H>;            // [T, num_heads, head_dim]
@group(0) @binding(3) var<storage, read> k_cache: array<KV>;     // [context_rows, num_kv_heads, head_dim]
@group(0) @binding(4) var<storage, read> v_cache: array<KV>;     // [context_rows, num_kv_heads, head_dim]
// split_combine: [num_heads, num_chunks, head_dim] unnormalized accumulators, then [num_heads, num_chunks] (m, l)
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;

const WORKGROUP_SIZE: u32 = 64u;
const MAX_HEAD_DIM: u32 = 256u;
const DIMS_PER_THREAD: u32 = MAX_HEAD_DIM / WORKGROUP_SIZE;
// (NEG_LARGE, which stands in for -infinity, HEAD_SLICES and first_key come from online_softmax.wgsl.)

@compute @workgroup_size(THREAD_WORKGROUP_SIZE)
fn per_thread(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
  // flat (block of QUERIES tokens, block of GROUP_HEADS heads)
  let item = (wg.y * grid.x + wg.x) * THREAD_WORKGROUP_SIZE + lid;
  let blocks = params.num_heads / GROUP_HEADS;
  if (item >= ((params.T + QUERIES - 1u) / QUERIES) * blocks) {
    return; // no barriers in this kernel, so threads past the end may leave early
  }
  let t0 = (item / blocks) * QUERIES;
  let h0 = (item % blocks) * GROUP_HEADS;
  let kv_head = h0 / (params.num_heads / params.num_kv_heads);
  let kv_row_stride = params.num_kv_heads * HEAD_DIM;  // one cache position
  let kv_offset = kv_head * HEAD_DIM;                  // this KV head within a position
  let last_t = params.T - 1u;

  // q and the accumulators of the block's query heads in slices of WIDTH floats: slot
  // s = u * GROUP_HEADS + g is head h0 + g of token t0 + u (slices s * HEAD_SLICES + i). Tokens
  // past the end (a ragged last block) repeat the last one and are not stored.
  var qv: array<H, HEADS * HEAD_SLICES>;
  var acc: array<H, HEADS * HEAD_SLICES>; // running sums of exp(score - m) * V[j, :]
  var m: array<f32, HEADS>;               // running maxima of the scores so far
  var l: array<f32, HEADS>;               // running sums of exp(score - m)
  var pos: array<u32, QUERIES>;           // the position of token t0 + u
  for (var u = 0u; u < QUERIES; u++) {
    let t = min(t0 + u, last_t);
    pos[u] = start_pos() + t;
    for (var g = 0u; g < GROUP_HEADS; g++) {
      for (var i = 0u; i < HEAD_SLICES; i++) {
        qv[(u * GROUP_HEADS + g) * HEAD_SLICES + i] = q[((t * params.num_heads + h0 + g) * HEAD_DIM) / WIDTH + i];
        acc[(u * GROUP_HEADS + g) * HEAD_SLICES + i] = H();
      }
      m[u * GROUP_HEADS + g] = NEG_LARGE;
      l[u * GROUP_HEADS + g] = 0.0;
    }
  }

  // Every K/V row is loaded once for the block. The keys all its tokens see, [first_key of the
  // last, the first's position], go without masks; the others (a sliding window's first keys, the
  // causal tail past the first token) mask the tokens that do not see them (score_bias).
  let pos_first = pos[0];
  let pos_last = pos[QUERIES - 1u];
  let shared_first = first_key(pos_last);
  for (var j = first_key(pos_first); j < min(shared_first, pos_first + 1u); j++) {
    mask_keys(pos, j);
    attend_row(qv, &acc, &m, &l, (kv_row(j) * kv_row_stride + kv_offset) / WIDTH);
  }
  unmask_keys();
  for (var j = shared_first; j <= pos_first; j++) {
    attend_row(qv, &acc, &m, &l, (kv_row(j) * kv_row_stride + kv_offset) / WIDTH);
  }
  for (var j = pos_first + 1u; j <= pos_last; j++) {
    mask_keys(pos, j);
    attend_row(qv, &acc, &m, &l, (kv_row(j) * kv_row_stride + kv_offset) / WIDTH);
  }

  for (var u = 0u; u < QUERIES; u++) {
    if (t0 + u <= last_t) {
      let q_base = ((t0 + u) * params.num_heads + h0) * HEAD_DIM; // out[t0 + u, h0, 0]
      for (var g = 0u; g < GROUP_HEADS; g++) {
        let inv_l = 1.0 / l[u * GROUP_HEADS + g];
        for (var i = 0u; i < HEAD_SLICES; i++) {
          store_out(q_base + (g * HEAD_SLICES + i) * WIDTH, acc[(u * GROUP_HEADS + g) * HEAD_SLICES + i] * inv_l);
        }
      }
    }
  }
}

/** score_bias for key j: MASKED_SCORE for the slots of the tokens (at positions pos) that do not see it. */
fn mask_keys(pos: array<u32, QUERIES>, j: u32) {
  for (var u = 0u; u < QUERIES; u++) {
    let sees = first_key(pos[u]) <= j && j <= pos[u];
    for (var g = 0u; g < GROUP_HEADS; g++) {
      score_bias[u * GROUP_HEADS + g] = select(MASKED_SCORE, 0.0, sees);
    }
  }
}

fn unmask_keys() {
  for (var s = 0u; s < HEADS; s++) {
    score_bias[s] = 0.0;
  }
}

var<workgroup> q_shared: array<f32, MAX_HEAD_DIM>;     // this (t, h)'s query vector
var<workgroup> p_shared: array<f32, WORKGROUP_SIZE>;   // exp(score - m) of the current key block
var<workgroup> reduce_buf: array<f32, WORKGROUP_SIZE>;

// Workgroup-wide max / sum of one value per thread. Must be called by all threads (barriers).
fn workgroup_max(v: f32, lid: u32) -> f32 {
  reduce_buf[lid] = v;
  workgroupBarrier();
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      reduce_buf[lid] = max(reduce_buf[lid], reduce_buf[lid + stride]);
    }
    workgroupBarrier();
  }
  let result = reduce_buf[0];
  workgroupBarrier(); // all have read the result before reduce_buf is reused
  return result;
}

fn workgroup_sum(v: f32, lid: u32) -> f32 {
  reduce_buf[lid] = v;
  workgroupBarrier();
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      reduce_buf[lid] += reduce_buf[lid + stride];
    }
    workgroupBarrier();
  }
  let result = reduce_buf[0];
  workgroupBarrier();
  return result;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn per_workgroup(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let item = wg.y * grid.x + wg.x; // flat (t, h), uniform across the workgroup
  if (item >= params.T * params.num_heads) {
    return;
  }
  let t = item / params.num_heads;
  let h = item % params.num_heads;
  let kv_head = h / (params.num_heads / params.num_kv_heads);
  let head_dim = params.head_dim;
  let q_base = item * head_dim;                      // q[t, h, 0] (and out[t, h, 0])
  let kv_row_stride = params.num_kv_heads * head_dim; // one cache position
  let kv_offset = kv_head * head_dim;                // this KV head within a position

  for (var d = lid; d < head_dim; d += WORKGROUP_SIZE) {
    q_shared[d] = load_q1(q_base + d);
  }
  workgroupBarrier();

  // Causal mask: token t at position start_pos + t sees cache rows first_key(pos) ..= pos.
  let pos = start_pos() + t;
  let n_keys = pos + 1u;

  var m = NEG_LARGE; // running max of the scores so far
  var l = 0.0;       // running sum of exp(score - m)
  var acc: array<f32, DIMS_PER_THREAD>; // running sum of exp(score - m) * V[j, d] for owned d

  for (var j0 = first_key(pos); j0 < n_keys; j0 += WORKGROUP_SIZE) {
    // Scores: thread lid takes key j0 + lid.
    let j = j0 + lid;
    let valid = j < n_keys;
    var score = NEG_LARGE;
    if (valid) {
      let k_base = kv_row(j) * kv_row_stride + kv_offset;
      var dot = 0.0;
      for (var d = 0u; d < head_dim; d++) {
        dot += q_shared[d] * load_k1(k_base + d);
      }
      score = cap_score(dot * params.scale);
    }

    // Every block has at least one valid key (j0 < n_keys), so m_new is a real score.
    let m_new = max(m, workgroup_max(score, lid));
    var p = 0.0;
    if (valid) {
      p = exp(score - m_new);
    }
    p_shared[lid] = p;
    let block_sum = workgroup_sum(p, lid); // its barriers also publish p_shared
    let correction = exp(m - m_new);       // rescales what was summed under the old max
    l = l * correction + block_sum;

    let block_keys = min(WORKGROUP_SIZE, n_keys - j0);
    for (var c = 0u; c < DIMS_PER_THREAD; c++) {
      let d = lid + c * WORKGROUP_SIZE;
      if (d < head_dim) {
        var a = acc[c] * correction;
        for (var jj = 0u; jj < block_keys; jj++) {
          a += p_shared[jj] * load_v1(kv_row(j0 + jj) * kv_row_stride + kv_offset + d);
        }
        acc[c] = a;
      }
    }
    m = m_new;
    // p_shared is next written after workgroup_max's barriers, which every thread reaches only
    // after finishing the loop above: no extra barrier needed here.
  }

  for (var c = 0u; c < DIMS_PER_THREAD; c++) {
    let d = lid + c * WORKGROUP_SIZE;
    if (d < head_dim) {
      out[q_base + d] = acc[c] / l;
    }
  }
}

@compute @workgroup_size(THREAD_WORKGROUP_SIZE)
fn split_combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * THREAD_WORKGROUP_SIZE + lid; // flat (h, d)
  if (i >= params.num_heads * HEAD_DIM) {
    return;
  }
  out[i] = combine_chunks(i / HEAD_DIM, i % HEAD_DIM, start_pos(), 0u);
}

/**
 * Element d of query head h's output at position pos from the chunks' partials (from element
 * `base` of partials): split_combine's, and the batched decode attention's for each row
 * (kernels/attention-batch.ts takes this function from here).
 */
fn combine_chunks(h: u32, d: u32, pos: u32, base: u32) -> f32 {
  // Only the chunks that hold keys of this query: first_key(pos) / chunk_keys ..= pos / chunk_keys.
  // (A ring's chunks sit in slots chunk_slot(c); the chunks past the position are only a full cache's.)
  let c_lo = first_key(pos) / params.chunk_keys;
  let c_hi = min(pos / params.chunk_keys, chunk_limit(c_lo));
  let ml = base + params.num_heads * params.num_chunks * HEAD_DIM + 2u * h * params.num_chunks;
  var m = NEG_LARGE;
  for (var c = c_lo; c <= c_hi; c++) {
    m = max(m, partials[ml + 2u * chunk_slot(c)]);
  }
  var l = 0.0;
  var a = 0.0;
  for (var c = c_lo; c <= c_hi; c++) {
    let s = chunk_slot(c);
    let w = exp(partials[ml + 2u * s] - m);
    l += w * partials[ml + 2u * s + 1u];
    a += w * partials[base + (h * params.num_chunks + s) * HEAD_DIM + d];
  }
  return a / l;
}
