// A snippet composed in front of every kernel that picks the greedy token from logits:
// decode_layer.wgsl's GREEDY phase (one sequence: kernels/decode-layer.ts; its rows variant:
// kernels/decode-layer-rows.ts) and batch_greedy.wgsl (kernels/batch-rows.ts). The pick is the
// GPU sampler's at temperature 0 without bias, penalties or alternatives: the argmax of the
// logits, the lowest id on ties, and its log-softmax log(exp(l_max) / Σ exp(l)) =
// -log Σ exp(l - l_max). Batch invariance rests on it being one code: a token a batched step
// picks, and its logprob, are the one-sequence step's bit for bit.
//
// Each of the WG threads keeps a running maximum and sum over ids lid, lid + WG, ... in ascending
// order, so a strict > keeps the lowest id (greedy_scan); one thread then merges the WG threads'
// parts in thread order (greedy_merge), so the sums' order is fixed by the vocabulary and WG.
// Needs WG, `logits: array<f32>` and GREEDY_PARTS (the parts in workgroup memory: WG for each
// set of logits the workgroup picks from at once) from the kernel.

/** A running pick: the largest logit seen, the sum of exp(l - m) over the ids seen, m's lowest id. */
struct Greedy {
  m: f32,
  sum: f32,
  id: u32,
}

/** Each thread's part of the picks running at once: thread t's of pick j at j * WG + t. */
var<workgroup> greedy_parts: array<Greedy, GREEDY_PARTS>;

/** Thread lid's part of the pick over logits[base + r], r = lid, lid + WG, ... below count. */
fn greedy_scan(base: u32, count: u32, lid: u32) -> Greedy {
  var m = -3.0e38; // not -inf: exp(l - m) stays 0 for l = -inf
  var sum = 0.0;
  var id = 0u;
  for (var r = lid; r < count; r += WG) {
    let l = logits[base + r];
    if (l > m) {
      sum = sum * exp(m - l) + 1.0;
      m = l;
      id = r;
    } else {
      sum += exp(l - m);
    }
  }
  return Greedy(m, sum, id);
}

/** The pick of the WG parts from greedy_parts[first], merged in thread order. */
fn greedy_merge(first: u32) -> Greedy {
  var m = greedy_parts[first].m;
  var sum = greedy_parts[first].sum;
  var id = greedy_parts[first].id;
  for (var t = 1u; t < WG; t++) {
    let part = greedy_parts[first + t];
    if (part.m > m) {
      sum = sum * exp(m - part.m) + part.sum;
      m = part.m;
      id = part.id;
    } else {
      sum += part.sum * exp(part.m - m);
      if (part.m == m) { id = min(id, part.id); }
    }
  }
  return Greedy(m, sum, id);
}
