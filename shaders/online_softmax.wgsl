// A snippet composed in front of the attention kernels that walk keys one at a time with an online
// softmax (attention.wgsl's per_thread, decode_attention.wgsl): the first key a query sees, and
// one key k, v for the HEADS query heads a thread serves (Milakov & Gimelshein, 2018; as in
// FlashAttention):
//
//   s_g = cap_score(q_g · k · scale)
//   m_g' = max(m_g, s_g),  l_g' = l_g · exp(m_g - m_g') + exp(s_g - m_g')
//   acc_g' = acc_g · exp(m_g - m_g') + exp(s_g - m_g') · v
//
// Every key pays the rescale (a factor of 1 while the max holds) and two exps, with no branch: on
// SwiftShader a branch that some lanes take makes every write to the state a masked one, which
// costs more than the exp it saves (docs/tuning.md#attention). The state is the caller's: head g's q
// and acc in slots g * HEAD_SLICES + i (slices of WIDTH floats), m[g] starting at NEG_LARGE (so
// the first key's rescale factor is exp(-huge) = 0) and l[g] at 0.
// Needs HEAD_DIM, HEADS, H, WIDTH, hsum, load_k / load_v, params.scale, params.window and
// `fn cap_score(s: f32) -> f32` (the score as it is, or soft-capped: kernels/attention.ts,
// scoreCapWgsl) from the kernel; its loops are unrolled with the kernel's (kernels/wgsl.ts,
// unrollConstLoops).

const NEG_LARGE: f32 = -1e30;
const HEAD_SLICES: u32 = HEAD_DIM / WIDTH;

// Added to head g's scores: 0, or MASKED_SCORE where a kernel serving several query tokens walks a
// key that some of them do not see (attention.wgsl's per_thread). Below NEG_LARGE, so that a
// masked key changes nothing even for a head that has seen no key yet: the max stays, the
// rescale factor is 1 and the key's weight exp(MASKED_SCORE - m) is 0.
var<private> score_bias: array<f32, HEADS>;
const MASKED_SCORE: f32 = -2e30;

fn attend_key(qv: array<H, HEADS * HEAD_SLICES>, acc: ptr<function, array<H, HEADS * HEAD_SLICES>>,
              m: ptr<function, array<f32, HEADS>>, l: ptr<function, array<f32, HEADS>>,
              k: array<H, HEAD_SLICES>, v: array<H, HEAD_SLICES>) {
  for (var g = 0u; g < HEADS; g++) {
    var dot = H();
    for (var i = 0u; i < HEAD_SLICES; i++) {
      dot += qv[g * HEAD_SLICES + i] * k[i];
    }
    let score = cap_score(hsum(dot) * params.scale) + score_bias[g];
    let m_new = max((*m)[g], score);
    let correction = exp((*m)[g] - m_new);
    (*m)[g] = m_new;
    (*l)[g] *= correction;
    for (var i = 0u; i < HEAD_SLICES; i++) {
      (*acc)[g * HEAD_SLICES + i] *= correction;
    }
    let e = exp(score - m_new);
    (*l)[g] += e;
    for (var i = 0u; i < HEAD_SLICES; i++) {
      (*acc)[g * HEAD_SLICES + i] += e * v[i];
    }
  }
}

/** The first cache row that the query at position pos sees (a sliding window of params.window; 0: none). */
fn first_key(pos: u32) -> u32 {
  if (params.window == 0u || pos < params.window) {
    return 0u;
  }
  return pos + 1u - params.window;
}

/** attend_key with the key and value of the cache row whose slices start at H element `base`. */
fn attend_row(qv: array<H, HEADS * HEAD_SLICES>, acc: ptr<function, array<H, HEADS * HEAD_SLICES>>,
              m: ptr<function, array<f32, HEADS>>, l: ptr<function, array<f32, HEADS>>, base: u32) {
  var k: array<H, HEAD_SLICES>;
  var v: array<H, HEAD_SLICES>;
  for (var i = 0u; i < HEAD_SLICES; i++) {
    k[i] = load_k(base + i);
    v[i] = load_v(base + i);
  }
  attend_key(qv, acc, m, l, k, v);
}
