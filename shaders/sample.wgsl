// The sampling chain on the GPU (src/sampling/sampler-bank.ts drives it; test/reference/sampler.ts
// is its CPU reference and documents the chain). A dispatch samples one step of each of its rows
// (workgroup_id.y), every row a sequence of the bank with its own parameters and regions, each
// with the arithmetic it has alone. One step is a fixed series of dispatches, chosen at encode
// time from the rows' parameters:
//
//   prepare        (chunks)  z = processed logits (the mask, bias, penalties, min_tokens ban),
//                            stored as order-preserving u32 keys; per chunk: raw max and sum of exp
//                            (for the log-softmax), argmax of z, the chunk's top-N raw logits
//   reduce         (1 wg)    log-sum-exp of the raw logits, argmax of z, the top-N alternatives
//                            into the record; greedy: the token is the argmax, done
//   weigh          (chunks)  e = exp((z - max z) / T); per chunk: count of e > 0 and sum of e
//   reduce_weights (1 wg)    the totals; sets up the selections (top_k, then top_p)
//   histogram      (chunks)  } x 8 per selection: a radix select over the key, 4 bits a round,
//   select_digit   (1 wg)    } counting and weighing the candidates under the prefix found so far
//   draw_mass      (chunks)  the survivors' mass per chunk, summed in id order
//   draw           (1 wg)    u (Philox) x the survivors' mass, located by chunk, then by id
//
// Greedy stops after `reduce` (2 dispatches); temperature alone runs 6; top_k or top_p add 16
// each. Small vocabularies (up to 64 chunks) run the same functions in the same order as one
// dispatch of one workgroup (`fused`, with workgroup barriers between the phases): a dispatch
// costs more than the work there.
//
// Why this shape: every filter keeps a prefix of one order (z descending, id ascending), so the
// survivors are "key > cut, or key == cut and id <= last tie", found by a radix select in O(V)
// per round with no sort. Results are the same on every adapter: fixed chunks of CHUNK ids,
// workgroup sizes set by the vocabulary alone, every float sum in a fixed order (no atomics, no
// subgroups); only the rounding of exp/log differs between adapters. Barriers: one per
// single-workgroup pass (SwiftShader pays heavily for each).
//
// A chunk is CHUNK consecutive ids; chunk passes run one invocation per chunk. The WG-wide
// passes give invocation t the chunks [t * per, (t + 1) * per), per = ceil(chunks / WG).

// The constants this shader shares with the sampler (CHUNK, QUADS_PER_CHUNK, CHUNK_WORKGROUP,
// MAX_TOP, the history flags SEEN, BANNED and COUNT_MASK, STATE_WORDS, CHUNK_STRIDE, the sequence
// flags HAS_BIAS, USES_HISTORY and CONSTRAINED, DIGIT_ROUNDS, RECORD_WORDS) and WG, the
// invocations of the single-workgroup passes, come from src/sampling/sample-layout.ts, prepended
// as a prelude, with ROWS, the bank's states (and the most rows of a dispatch). WG is set from
// the vocabulary alone, so every adapter sums in the same order.

// work[]: the state words, then CHUNK_STRIDE words per chunk, then the top-N merge lists.
const S_MAX_RAW: u32 = 0u;      // f32
const S_LSE: u32 = 1u;          // f32: log-sum-exp of the raw logits
const S_MAX_KEY: u32 = 2u;      // key of max z
const S_ARGMAX: u32 = 3u;       // its id (lowest on ties)
const S_NPOS: u32 = 4u;         // candidates: z finite and e > 0
const S_MASS: u32 = 5u;         // f32: their sum of e
const S_MODE: u32 = 6u;         // selection running: 0 none, 1 top_k, 2 top_p
const S_SHIFT: u32 = 7u;        // the digit this round finds
const S_PREFIX: u32 = 8u;       // the key bits found so far
const S_COUNT_ABOVE: u32 = 9u;  // candidates with a key above the prefix's range
const S_MASS_ABOVE: u32 = 10u;  // f32: their mass
const S_WANT_RANK: u32 = 11u;   // top_k: the rank of the cut
const S_WANT_MASS: u32 = 12u;   // f32, top_p: the mass the prefix must reach (+inf: take all)
const S_LOW_KEY: u32 = 13u;     // keys below are out (top_k's cut during top_p); at least 1
const S_LOW_TIES: u32 = 14u;    // how many of the ties at S_LOW_KEY are in (top_k's)
const S_CUT_KEY: u32 = 15u;     // survivors: key > cut, or key == cut and id <= S_CUT_LAST
const S_CUT_LAST: u32 = 16u;
const S_TOKEN: u32 = 17u;

/** No id: above every id, so any id wins a tie-break against it. */
const NO_ID: u32 = 0xffffffffu;

struct Sequence {
  vocab: u32,
  num_chunks: u32,
  n_top: u32,        // top alternatives per token (0..20)
  min_tokens: u32,
  temperature: f32,
  top_k: u32,        // 0: off
  top_p: f32,        // 1: off
  min_p: f32,        // 0: off
  repetition: f32,
  presence: f32,
  frequency: f32,
  key0: u32,         // Philox key: the seed
  key1: u32,
  stream: u32,       // Philox counter word 0: the choice index
  quads: u32,        // ceil(vocab / 4): where e starts in vals
  flags: u32,        // HAS_BIAS | USES_HISTORY: skip the loads a sequence does not need; CONSTRAINED: the masks apply
}

/** One row of a dispatch: the sequence state it samples with, its step, and where its data lies (element offsets). */
struct RowStep {
  state: u32,        // its Sequence in seqs[], and its regions of the state buffers below
  step: u32,         // token index in the sequence: Philox counter word 1, min_tokens
  logits: u32,       // its logits in logits[]
  token: u32,        // its token in token_out[]
  hist: u32,         // its quads in history[] and bias[]
  vals: u32,         // its quads in vals[]
  work: u32,         // its words in work[]
  record: u32,       // its record slot's words in records[]
  mask: u32,         // its record slot's mask words in masks[]
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

/** A dispatch's rows: workgroup_id.y is the row; rows past `rows` do nothing. */
struct Step {
  rows: u32,
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
  row: array<RowStep, ROWS>,
}

@group(0) @binding(0) var<uniform> seqs: array<Sequence, ROWS>;
@group(0) @binding(1) var<uniform> stp: Step;
// Per-id arrays are read four ids a load (SwiftShader pays per load, with Dawn's bounds checks).
@group(0) @binding(2) var<storage, read_write> history: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> vals: array<vec4<u32>>; // quads [0, Q): z keys; [Q, 2Q): e (f32 bits)
@group(0) @binding(5) var<storage, read_write> work: array<u32>;
@group(0) @binding(6) var<storage, read_write> records: array<u32>;
// Structured output: per record slot, ceil(vocab / 32) words, bit id & 31 of word id >> 5 set for
// the ids the step may pick. A disallowed id is treated as one past the vocabulary: key 0, never a
// candidate, before anything else applies. The raw logprobs ignore it.
@group(0) @binding(7) var<storage, read> masks: array<u32>;
@group(1) @binding(0) var<storage, read> logits: array<f32>;
@group(1) @binding(1) var<storage, read_write> token_out: array<u32>;

// The row this workgroup samples (enter_row): its sequence, its step and its regions.
var<private> seq: Sequence;
var<private> row_step: u32;
var<private> row_logits: u32;
var<private> row_token: u32;
var<private> row_hist: u32;
var<private> row_vals: u32;
var<private> row_work: u32;
var<private> row_record: u32;
var<private> row_mask: u32;

/**
 * Points this workgroup at row r of the dispatch; false when the row does not take part (past the
 * dispatch's rows, or `sampling_only` and the row is greedy). Uniform: every invocation of the
 * workgroup gets the same answer, so an entry point may return on it before its barriers.
 */
fn enter_row(r: u32, sampling_only: bool) -> bool {
  if (r >= stp.rows) { return false; }
  let rs = stp.row[r];
  if (sampling_only && seqs[rs.state].temperature == 0.0) { return false; }
  seq = seqs[rs.state];
  row_step = rs.step;
  row_logits = rs.logits;
  row_token = rs.token;
  row_hist = rs.hist;
  row_vals = rs.vals;
  row_work = rs.work;
  row_record = rs.record;
  row_mask = rs.mask;
  return true;
}

// ---- keys: u32 in the order of the floats; 0 = not a candidate ----

/**
 * The order-preserving keys of four floats; NaN and -inf give 0 (never a candidate), -0 is +0.
 * The chunk pass keys four ids a call; single keys are component x.
 */
fn z_key4(x: vec4<f32>) -> vec4<u32> {
  var b = bitcast<vec4<u32>>(x);
  let dead = ((b & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u)) | (b == vec4<u32>(0xff800000u));
  b = select(b, vec4<u32>(0u), b == vec4<u32>(0x80000000u));
  let key = select(b | vec4<u32>(0x80000000u), ~b, (b & vec4<u32>(0x80000000u)) != vec4<u32>(0u));
  return select(key, vec4<u32>(0u), dead);
}

/** The float of a key (not 0). */
fn key_value(k: u32) -> f32 {
  if ((k & 0x80000000u) != 0u) { return bitcast<f32>(k & 0x7fffffffu); }
  return bitcast<f32>(~k);
}

/** The keys of raw logits for the top-N alternatives: NaN gives 0 (never listed), -inf is listed. */
fn raw_key4(x: vec4<f32>) -> vec4<u32> {
  let b = bitcast<vec4<u32>>(x);
  let nan = (b & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
  return select(select(z_key4(x), vec4<u32>(1u), b == vec4<u32>(0xff800000u)), vec4<u32>(0u), nan);
}

fn raw_key(x: f32) -> u32 {
  return raw_key4(vec4<f32>(x)).x;
}

fn neg_inf() -> f32 {
  return bitcast<f32>(0xff800000u | (seq.vocab & 0u));
}

fn pos_inf() -> f32 {
  return bitcast<f32>(0x7f800000u | (seq.vocab & 0u));
}

/** e = exp((z - max z) / T) for a candidate key; the one formula of weigh and select_digit. */
fn weight(k: u32, max_key: u32) -> f32 {
  return exp((key_value(k) - key_value(max_key)) / seq.temperature);
}

fn getf(i: u32) -> f32 {
  return bitcast<f32>(work[row_work + i]);
}

fn setf(i: u32, x: f32) {
  work[row_work + i] = bitcast<u32>(x);
}

fn chunk_base(c: u32) -> u32 {
  return STATE_WORDS + c * CHUNK_STRIDE;
}

fn merge_base(t: u32) -> u32 {
  return STATE_WORDS + seq.num_chunks * CHUNK_STRIDE + t * MAX_TOP;
}

fn chunk_end(c: u32) -> u32 {
  return min(seq.vocab, (c + 1u) * CHUNK);
}

/** One past the last quad of chunk c (the last chunk's may hold ids past the vocabulary). */
fn quad_end(c: u32) -> u32 {
  return (chunk_end(c) + 3u) / 4u;
}

fn per_thread() -> u32 {
  return (seq.num_chunks + WG - 1u) / WG;
}

/** Whether (ka, ia) comes before (kb, ib): higher key, or the same key and lower id. */
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
  return ka > kb || (ka == kb && ia < ib);
}

// ---- Philox4x32-10 (src/sampling/philox.ts); this section is also compiled alone by the tests ----

fn mul_hi(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu;
  let ah = a >> 16u;
  let bl = b & 0xffffu;
  let bh = b >> 16u;
  let ll = al * bl;
  let lh = al * bh;
  let hl = ah * bl;
  let hh = ah * bh;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return hh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}

fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
  var c = counter;
  var k = key;
  for (var r = 0u; r < 10u; r++) {
    if (r > 0u) {
      k = k + vec2<u32>(0x9e3779b9u, 0xbb67ae85u);
    }
    let hi0 = mul_hi(0xd2511f53u, c.x);
    let lo0 = 0xd2511f53u * c.x;
    let hi1 = mul_hi(0xcd9e8d57u, c.z);
    let lo1 = 0xcd9e8d57u * c.z;
    c = vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// ---- the record and the history ----

/** u in [0, 1) for this step: the top 24 bits of the first word, exactly. */
fn uniform01() -> f32 {
  let w = philox(vec4<u32>(seq.stream, row_step, 0u, 0u), vec2<u32>(seq.key0, seq.key1)).x;
  return f32(w >> 8u) * (1.0 / 16777216.0);
}


/** Ends the step: the token where the next step reads it, its record, and its count. */
fn finish(token: u32, lse: f32) {
  token_out[row_token] = token;
  work[row_work + S_TOKEN] = token;
  records[row_record] = token;
  records[row_record + 1u] = bitcast<u32>(logits[row_logits + token] - lse);
  let h = history[row_hist + (token >> 2u)][token & 3u];
  history[row_hist + (token >> 2u)][token & 3u] = ((h & COUNT_MASK) + 1u) | (h & BANNED) | SEEN;
}

// ---- prepare / reduce ----

/** z from four raw logits, their bias and their history words: bias, repetition penalty, presence/frequency (test/reference/penalties.ts). */
fn processed4(raw: vec4<f32>, b: vec4<f32>, h: vec4<u32>) -> vec4<f32> {
  var x = raw + b;
  if (seq.repetition != 1.0) {
    let penalized = select(x * seq.repetition, x / seq.repetition, x > vec4<f32>(0.0));
    x = select(x, penalized, (h & vec4<u32>(SEEN)) != vec4<u32>(0u));
  }
  let c = h & vec4<u32>(COUNT_MASK);
  return select(x, x - (vec4<f32>(c) * seq.frequency + seq.presence), c > vec4<u32>(0u));
}

// The chunk's ids go four at a time, as vectors: keys, argmax and the log-sum-exp of the raw
// logits each keep one partial per component (ids i with i % 4 == j), combined at the end of the
// chunk in component order. Dynamic indexing into vectors and a branch per id made this loop the
// greedy step's whole cost on SwiftShader. Only the top-N list (logprobs) walks the ids singly.
fn prepare_chunk(c: u32) {
  let start = c * CHUNK;
  let end = chunk_end(c);
  let banned_now = row_step < seq.min_tokens;
  let use_bias = (seq.flags & HAS_BIAS) != 0u;
  let use_history = (seq.flags & USES_HISTORY) != 0u;
  let constrained = (seq.flags & CONSTRAINED) != 0u;
  let n_top = seq.n_top;
  let lane = vec4<u32>(0u, 1u, 2u, 3u);
  let last = seq.vocab - 1u;
  var best_key = vec4<u32>(0u);
  var best_id = vec4<u32>(start) + lane;
  // The lowest allowed id per component (constrained): the chunk's argmax when no key is above 0.
  var first_allowed = vec4<u32>(NO_ID);
  // Online log-sum-exp of the raw logits (NaN and -inf skipped): s = sum of exp(raw - m).
  var m = vec4<f32>(neg_inf());
  var s = vec4<f32>(0.0);
  var top_ids: array<u32, MAX_TOP>;
  var top_keys: array<u32, MAX_TOP>;
  var top_n = 0u;
  for (var q = start >> 2u; q < quad_end(c); q++) {
    var h = vec4<u32>(0u);
    if (use_history) { h = history[row_hist + q]; }
    var b = vec4<f32>(0.0);
    if (use_bias) { b = bias[row_hist + q]; }
    let ids = vec4<u32>(q * 4u) + lane;
    let valid = ids < vec4<u32>(end); // ids past the vocabulary keep key 0: never candidates
    let raw = vec4<f32>(logits[row_logits + ids.x], logits[row_logits + (min(ids.y, last))], logits[row_logits + (min(ids.z, last))], logits[row_logits + (min(ids.w, last))]);
    var banned = !valid;
    if (constrained) {
      // The quad's four bits sit in one word: bits 4 (q & 7) .. 4 (q & 7) + 3 of word q >> 3.
      let bits = vec4<u32>(masks[row_mask + (q >> 3u)] >> ((q & 7u) * 4u)) >> lane;
      let allowed = valid & ((bits & vec4<u32>(1u)) != vec4<u32>(0u));
      banned = !allowed;
      first_allowed = min(first_allowed, select(vec4<u32>(NO_ID), ids, allowed));
    }
    if (banned_now) { banned = banned | ((h & vec4<u32>(BANNED)) != vec4<u32>(0u)); }
    let keys = select(z_key4(processed4(raw, b, h)), vec4<u32>(0u), banned);
    let better = keys > best_key; // strict: the lowest id of a component wins its ties
    best_key = select(best_key, keys, better);
    best_id = select(best_id, ids, better);
    let rk = raw_key4(raw);
    let finite = valid & (rk > vec4<u32>(1u));
    let m_new = select(m, max(m, raw), finite);
    // exp(0) = 1 exactly where raw is the new m: no inf - inf (an infinite logit). s is rescaled
    // only once it holds something, when m is finite: a component that has seen nothing yet keeps
    // s = 0 without an exp(-inf), whose value WGSL does not promise.
    let term = select(exp(raw - m_new), vec4<f32>(1.0), raw == m_new);
    let rescaled = select(s * exp(select(m - m_new, vec4<f32>(0.0), m == m_new)), vec4<f32>(0.0), s == vec4<f32>(0.0));
    s = rescaled + select(vec4<f32>(0.0), term, finite);
    m = m_new;
    vals[row_vals + q] = keys;
    // The chunk's top-N raw logits: ids come in ascending order, so a tie never displaces.
    if (n_top > 0u) {
      for (var j = 0u; j < 4u; j++) {
        let r = rk[j];
        if (!valid[j] || r == 0u || (top_n == n_top && r <= top_keys[n_top - 1u])) { continue; }
        var at = select(n_top - 1u, top_n, top_n < n_top);
        while (at > 0u && top_keys[at - 1u] < r) {
          top_keys[at] = top_keys[at - 1u];
          top_ids[at] = top_ids[at - 1u];
          at--;
        }
        top_keys[at] = r;
        top_ids[at] = ids[j];
        top_n = min(top_n + 1u, n_top);
      }
    }
  }
  var key = best_key.x;
  var id = best_id.x;
  var mc = m.x;
  for (var j = 1u; j < 4u; j++) {
    if (before(best_key[j], best_id[j], key, id)) {
      key = best_key[j];
      id = best_id[j];
    }
    mc = max(mc, m[j]);
  }
  var sc = 0.0;
  if (mc > neg_inf()) {
    for (var j = 0u; j < 4u; j++) {
      if (m[j] > neg_inf()) { sc += s[j] * exp(m[j] - mc); }
    }
  }
  if (key == 0u) {
    // Nothing finite in the chunk: its first id, or its first allowed id (NO_ID: none), so that
    // the argmax of a step whose allowed logits are all -inf or NaN is still an allowed id.
    id = start;
    if (constrained) { id = min(min(first_allowed.x, first_allowed.y), min(first_allowed.z, first_allowed.w)); }
  }
  let base = chunk_base(c);
  setf(base, mc);
  setf(base + 1u, sc);
  work[row_work + base + 2u] = key;
  work[row_work + base + 3u] = id;
  work[row_work + base + 4u] = top_n;
  for (var j = 0u; j < top_n; j++) { work[row_work + base + 8u + j] = top_ids[j]; }
}

var<workgroup> sh_m: array<f32, WG>;
var<workgroup> sh_s: array<f32, WG>;
var<workgroup> sh_key: array<u32, WG>;
var<workgroup> sh_id: array<u32, WG>;

/** Inserts raw logit `id` into the sorted list at `base` of `n` (capacity n_top); returns the new n. */
fn top_insert(base: u32, n: u32, id: u32) -> u32 {
  let n_top = seq.n_top;
  let rk = raw_key(logits[row_logits + id]);
  if (rk == 0u) { return n; }
  if (n == n_top) {
    let last = work[row_work + base + n_top - 1u];
    if (!before(rk, id, raw_key(logits[row_logits + last]), last)) { return n; }
  }
  var at = select(n_top - 1u, n, n < n_top);
  while (at > 0u) {
    let prev = work[row_work + base + at - 1u];
    if (!before(rk, id, raw_key(logits[row_logits + prev]), prev)) { break; }
    work[row_work + base + at] = prev;
    at--;
  }
  work[row_work + base + at] = id;
  return min(n + 1u, n_top);
}

fn reduce_part(t: u32) {
  let per = per_thread();
  let c0 = min(seq.num_chunks, t * per);
  let c1 = min(seq.num_chunks, c0 + per);
  var m = neg_inf();
  var best_key = 0u;
  var best_id = 0xffffffffu;
  for (var c = c0; c < c1; c++) {
    let b = chunk_base(c);
    m = max(m, getf(b));
    let k = work[row_work + b + 2u];
    let id = work[row_work + b + 3u];
    if (before(k, id, best_key, best_id)) {
      best_key = k;
      best_id = id;
    }
  }
  var s = 0.0;
  if (m > neg_inf()) {
    for (var c = c0; c < c1; c++) {
      let b = chunk_base(c);
      let mc = getf(b);
      if (mc > neg_inf()) { s += getf(b + 1u) * exp(mc - m); }
    }
  }
  // This invocation's top-N list from its chunks' lists, into its merge slot.
  var n = 0u;
  if (seq.n_top > 0u) {
    let mb = merge_base(t);
    for (var c = c0; c < c1; c++) {
      let b = chunk_base(c);
      let cn = work[row_work + b + 4u];
      for (var j = 0u; j < cn; j++) { n = top_insert(mb, n, work[row_work + b + 8u + j]); }
    }
  }
  sh_m[t] = m;
  sh_s[t] = s;
  sh_key[t] = best_key;
  sh_id[t] = best_id;
  sh_top_n[t] = n;
}

fn reduce_final() {

  var gm = neg_inf();
  var gkey = 0u;
  var gid = 0xffffffffu;
  for (var i = 0u; i < WG; i++) {
    gm = max(gm, sh_m[i]);
    if (before(sh_key[i], sh_id[i], gkey, gid)) {
      gkey = sh_key[i];
      gid = sh_id[i];
    }
  }
  // Nothing finite: the lowest (allowed) id, as on the CPU; id 0 when the mask allows nothing.
  if (gid >= seq.vocab) { gid = 0u; }
  var gs = 0.0;
  if (gm > neg_inf()) {
    for (var i = 0u; i < WG; i++) {
      if (sh_m[i] > neg_inf()) { gs += sh_s[i] * exp(sh_m[i] - gm); }
    }
  }
  let lse = select(neg_inf(), gm + log(gs), gm > neg_inf());
  setf(S_MAX_RAW, gm);
  setf(S_LSE, lse);
  work[row_work + S_MAX_KEY] = gkey;
  work[row_work + S_ARGMAX] = gid;

  // The alternatives: merge the 256 lists (their heads walk down; each list is sorted).
  var count = 0u;
  if (seq.n_top > 0u) {
    let heads = &sh_heads;
    for (var i = 0u; i < WG; i++) { (*heads)[i] = 0u; }
    for (; count < seq.n_top; count++) {
      var pick = WG;
      var pk = 0u;
      var pid = 0xffffffffu;
      for (var i = 0u; i < WG; i++) {
        if ((*heads)[i] < sh_top_n[i]) {
          let id = work[row_work + (merge_base(i) + (*heads)[i])];
          let k = raw_key(logits[row_logits + id]);
          if (before(k, id, pk, pid)) {
            pick = i;
            pk = k;
            pid = id;
          }
        }
      }
      if (pick == WG) { break; }
      (*heads)[pick]++;
      records[row_record + 4u + 2u * count] = pid;
      records[row_record + 5u + 2u * count] = bitcast<u32>(logits[row_logits + pid] - lse);
    }
  }
  records[row_record + 2u] = count;
  records[row_record + 3u] = 0u;
  if (seq.temperature == 0.0) { finish(gid, lse); }
}

var<workgroup> sh_top_n: array<u32, WG>;

// ---- weigh / reduce_weights ----

fn weigh_chunk(c: u32) {
  let max_key = work[row_work + S_MAX_KEY];
  var count = 0u;
  var mass = 0.0;
  for (var q = c * QUADS_PER_CHUNK; q < quad_end(c); q++) {
    let k4 = vals[row_vals + q];
    var e4 = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
      if (k4[j] == 0u) { continue; }
      let e = weight(k4[j], max_key);
      if (e > 0.0) { // else underflow (or NaN from an infinite max): not a candidate
        e4[j] = e;
        count++;
        mass += e;
      }
    }
    vals[row_vals + seq.quads + q] = bitcast<vec4<u32>>(e4);
  }
  let b = chunk_base(c);
  work[row_work + b] = count;
  setf(b + 1u, mass);
}

var<workgroup> sh_u: array<u32, WG>;

/** Starts the top_p selection over keys >= low_key (with `low_ties` of the ties at low_key). */
fn start_top_p(mass: f32, low_key: u32, low_ties: u32) {
  work[row_work + S_MODE] = 2u;
  setf(S_WANT_MASS, seq.top_p * mass);
  work[row_work + S_LOW_KEY] = low_key;
  work[row_work + S_LOW_TIES] = low_ties;
  work[row_work + S_SHIFT] = 28u;
  work[row_work + S_PREFIX] = 0u;
  work[row_work + S_COUNT_ABOVE] = 0u;
  setf(S_MASS_ABOVE, 0.0);
}

fn reduce_weights_part(t: u32) {
  let per = per_thread();
  let c0 = min(seq.num_chunks, t * per);
  let c1 = min(seq.num_chunks, c0 + per);
  var count = 0u;
  var mass = 0.0;
  for (var c = c0; c < c1; c++) {
    count += work[row_work + (chunk_base(c))];
    mass += getf(chunk_base(c) + 1u);
  }
  sh_u[t] = count;
  sh_s[t] = mass;
}

fn reduce_weights_final() {
  var n = 0u;
  var total = 0.0;
  for (var i = 0u; i < WG; i++) {
    n += sh_u[i];
    total += sh_s[i];
  }
  work[row_work + S_NPOS] = n;
  setf(S_MASS, total);
  // Everything survives unless a selection below moves the cut.
  work[row_work + S_CUT_KEY] = 1u;
  work[row_work + S_CUT_LAST] = 0xffffffffu;
  work[row_work + S_MODE] = 0u;
  if (seq.top_k > 0u && seq.top_k < n) {
    work[row_work + S_MODE] = 1u;
    work[row_work + S_WANT_RANK] = seq.top_k;
    work[row_work + S_LOW_KEY] = 1u;
    work[row_work + S_LOW_TIES] = 0xffffffffu;
    work[row_work + S_SHIFT] = 28u;
    work[row_work + S_PREFIX] = 0u;
    work[row_work + S_COUNT_ABOVE] = 0u;
    setf(S_MASS_ABOVE, 0.0);
  } else if (seq.top_p < 1.0 && n > 1u) {
    start_top_p(total, 1u, 0xffffffffu);
  }
}

// ---- the radix select: histogram / select_digit ----

fn key_at(i: u32) -> u32 {
  return vals[row_vals + (i >> 2u)][i & 3u];
}

fn e_at(i: u32) -> f32 {
  return bitcast<f32>(vals[row_vals + (seq.quads + (i >> 2u))][i & 3u]);
}

/** The key bits above the current digit must equal the prefix's. */
fn high_mask(shift: u32) -> u32 {
  if (shift >= 28u) { return 0u; }
  return 0xffffffffu << (shift + 4u);
}

fn histogram_chunk(c: u32) {
  if (work[row_work + S_MODE] == 0u) { return; }
  let shift = work[row_work + S_SHIFT];
  let prefix = work[row_work + S_PREFIX];
  let low_key = work[row_work + S_LOW_KEY];
  let mask = high_mask(shift);
  var counts: array<u32, 16>;
  var masses: array<f32, 16>;
  for (var j = 0u; j < 16u; j++) {
    counts[j] = 0u;
    masses[j] = 0.0;
  }
  for (var q = c * QUADS_PER_CHUNK; q < quad_end(c); q++) {
    let k4 = vals[row_vals + q];
    let hit = (k4 >= vec4<u32>(low_key)) & (((k4 ^ vec4<u32>(prefix)) & vec4<u32>(mask)) == vec4<u32>(0u));
    if (!any(hit)) { continue; }
    let e4 = bitcast<vec4<f32>>(vals[row_vals + seq.quads + q]);
    for (var j = 0u; j < 4u; j++) {
      if (!hit[j] || !(e4[j] > 0.0)) { continue; }
      let d = (k4[j] >> shift) & 15u;
      counts[d] += 1u;
      masses[d] += e4[j];
    }
  }
  let b = chunk_base(c);
  for (var j = 0u; j < 16u; j++) {
    work[row_work + b + j] = counts[j];
    setf(b + 16u + j, masses[j]);
  }
}

/** The id of the `t`-th (1-based) candidate with key `k`, in id order, from the last round's per-chunk counts of digit `d`. */
fn nth_tie(k: u32, d: u32, t: u32) -> u32 {
  var left = t;
  for (var c = 0u; c < seq.num_chunks; c++) {
    let n = work[row_work + (chunk_base(c) + d)];
    if (n < left) {
      left -= n;
      continue;
    }
    for (var i = c * CHUNK; i < chunk_end(c); i++) {
      if (key_at(i) == k && e_at(i) > 0.0) {
        left--;
        if (left == 0u) { return i; }
      }
    }
  }
  return 0xffffffffu;
}

var<workgroup> sh_f: array<f32, WG>;
var<workgroup> sh_pair_u: array<u32, 256>;
var<workgroup> sh_pair_f: array<f32, 256>;
var<workgroup> sh_heads: array<u32, WG>;

fn select_part(t: u32) {
  // Pair (digit d, lane l) sums digit d over the chunks l, l + 16, ... in that order, whatever WG is.
  for (var pair = t; pair < 256u; pair += WG) {
    let d = pair >> 4u;
    let lane = pair & 15u;
    var count = 0u;
    var mass = 0.0;
    for (var c = lane; c < seq.num_chunks; c += 16u) {
      count += work[row_work + (chunk_base(c) + d)];
      mass += getf(chunk_base(c) + 16u + d);
    }
    sh_pair_u[pair] = count;
    sh_pair_f[pair] = mass;
  }
}

/** Digit j's candidates over all chunks: its 16 lanes in order (no private arrays: they cost SwiftShader seconds of compile). */
fn digit_count(j: u32) -> u32 {
  var n = 0u;
  for (var l = 0u; l < 16u; l++) { n += sh_pair_u[j * 16u + l]; }
  return n;
}

fn digit_mass(j: u32) -> f32 {
  var s = 0.0;
  for (var l = 0u; l < 16u; l++) { s += sh_pair_f[j * 16u + l]; }
  return s;
}

fn select_final() {
  let mode = work[row_work + S_MODE];
  if (mode == 0u) { return; }

  // Walk the digits from the highest: the cut is in the first digit that reaches the goal.
  var count_above = work[row_work + S_COUNT_ABOVE];
  var mass_above = getf(S_MASS_ABOVE);
  let want_rank = work[row_work + S_WANT_RANK];
  let want_mass = getf(S_WANT_MASS);
  var pick = 16u;
  var lowest = 16u;
  for (var jj = 0u; jj < 16u; jj++) {
    let j = 15u - jj;
    let count = digit_count(j);
    if (count == 0u) { continue; }
    let mass = digit_mass(j);
    lowest = j;
    let reaches = select(mass_above + mass >= want_mass, count_above + count >= want_rank, mode == 1u);
    if (reaches) {
      pick = j;
      break;
    }
    count_above += count;
    mass_above += mass;
  }
  if (pick == 16u) {
    // Never reached (top_p's mass, by rounding): take everything, down to the lowest key.
    if (lowest == 16u) { work[row_work + S_MODE] = 0u; return; }
    pick = lowest;
    count_above -= digit_count(lowest);
    mass_above -= digit_mass(lowest);
    setf(S_WANT_MASS, pos_inf());
  }
  let shift = work[row_work + S_SHIFT];
  let prefix = work[row_work + S_PREFIX] | (pick << shift);
  work[row_work + S_PREFIX] = prefix;
  work[row_work + S_COUNT_ABOVE] = count_above;
  setf(S_MASS_ABOVE, mass_above);
  if (shift > 0u) {
    work[row_work + S_SHIFT] = shift - 4u;
    return;
  }

  // The cut key is found; `ties` candidates have it. How many of them are in:
  let ties = digit_count(pick);
  let e = weight(prefix, work[row_work + S_MAX_KEY]);
  var take = ties;
  if (mode == 1u) {
    take = want_rank - count_above;
  } else {
    let want = getf(S_WANT_MASS);
    if (want < pos_inf()) {
      // The fewest ties (all weigh e) that bring the mass to the goal.
      take = u32(clamp(ceil((want - mass_above) / e), 1.0, f32(ties)));
      while (take > 1u && mass_above + f32(take - 1u) * e >= want) { take--; }
      while (take < ties && mass_above + f32(take) * e < want) { take++; }
    }
    if (prefix == work[row_work + S_LOW_KEY]) { take = min(take, work[row_work + S_LOW_TIES]); }
  }
  take = max(take, 1u);

  if (mode == 1u && seq.top_p < 1.0 && take + count_above > 1u) {
    start_top_p(mass_above + f32(take) * e, prefix, take);
    return;
  }
  work[row_work + S_MODE] = 0u;
  work[row_work + S_CUT_KEY] = prefix;
  if (take < ties) {
    work[row_work + S_CUT_LAST] = nth_tie(prefix, pick, take);
  } else {
    work[row_work + S_CUT_LAST] = 0xffffffffu;
  }
}

// ---- the draw ----

fn survives(i: u32, k: u32, e: f32, cut_key: u32, cut_last: u32, max_key: u32) -> bool {
  if (k < cut_key || (k == cut_key && i > cut_last)) { return false; }
  if (!(e > 0.0)) { return false; }
  if (seq.min_p > 0.0 && !(e >= seq.min_p || k == max_key)) { return false; }
  return true;
}

fn draw_mass_chunk(c: u32) {
  let cut_key = work[row_work + S_CUT_KEY];
  let cut_last = work[row_work + S_CUT_LAST];
  let max_key = work[row_work + S_MAX_KEY];
  var mass = 0.0;
  for (var q = c * QUADS_PER_CHUNK; q < quad_end(c); q++) {
    let k4 = vals[row_vals + q];
    if (all(k4 < vec4<u32>(cut_key))) { continue; }
    let e4 = bitcast<vec4<f32>>(vals[row_vals + seq.quads + q]);
    for (var j = 0u; j < 4u; j++) {
      if (survives(q * 4u + j, k4[j], e4[j], cut_key, cut_last, max_key)) { mass += e4[j]; }
    }
  }
  setf(chunk_base(c), mass);
}

fn draw_part(t: u32) {
  let per = per_thread();
  let c0 = min(seq.num_chunks, t * per);
  let c1 = min(seq.num_chunks, c0 + per);
  var mass = 0.0;
  for (var c = c0; c < c1; c++) { mass += getf(chunk_base(c)); }
  sh_f[t] = mass;
}

fn draw_final() {
  let per = per_thread();
  let lse = getf(S_LSE);
  var total = 0.0;
  for (var i = 0u; i < WG; i++) { total += sh_f[i]; }
  let u = uniform01(); // drawn even when nothing can be: step s always uses number s
  if (!(total > 0.0)) {
    finish(work[row_work + S_ARGMAX], lse);
    return;
  }
  let goal = u * total;
  // The first range, then chunk, then id whose cumulative mass exceeds the goal. Partial sums
  // round differently at each level, so a level that never exceeds it falls back to its last
  // non-empty entry (only within rounding of the end).
  var acc = 0.0;
  var range = 0u;
  var acc_range = 0.0;
  for (var i = 0u; i < WG; i++) {
    if (!(sh_f[i] > 0.0)) { continue; }
    range = i;
    acc_range = acc;
    if (acc + sh_f[i] > goal) { break; }
    acc += sh_f[i];
  }
  acc = acc_range;
  var chunk = 0u;
  var acc_chunk = acc;
  let r0 = min(seq.num_chunks, range * per);
  let r1 = min(seq.num_chunks, r0 + per);
  for (var c = r0; c < r1; c++) {
    let m = getf(chunk_base(c));
    if (!(m > 0.0)) { continue; }
    chunk = c;
    acc_chunk = acc;
    if (acc + m > goal) { break; }
    acc += m;
  }
  let cut_key = work[row_work + S_CUT_KEY];
  let cut_last = work[row_work + S_CUT_LAST];
  let max_key = work[row_work + S_MAX_KEY];
  var token = work[row_work + S_ARGMAX];
  var local = 0.0;
  for (var i = chunk * CHUNK; i < chunk_end(chunk); i++) {
    let e = e_at(i);
    if (!survives(i, key_at(i), e, cut_key, cut_last, max_key)) { continue; }
    local += e;
    token = i;
    if (acc_chunk + local > goal) { break; }
  }
  finish(token, lse);
}

// ---- entry points: one dispatch per pass (large vocabularies), or all passes in one ----
//
// Every dispatch samples the rows of its Step, one a workgroup row (workgroup_id.y); the passes
// only a sampled step runs (after `reduce`) skip greedy rows, and a row whose selections are done
// runs the remaining histogram / select_digit rounds as no-ops (S_MODE 0): a dispatch may serve
// rows of different shapes, each with exactly the arithmetic it would have alone.

@compute @workgroup_size(CHUNK_WORKGROUP)
fn prepare(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (!enter_row(gid.y, false)) { return; }
  if (gid.x < seq.num_chunks) { prepare_chunk(gid.x); }
}

@compute @workgroup_size(WG)
fn reduce(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  if (!enter_row(wid.y, false)) { return; }
  reduce_part(t);
  phase();
  if (t == 0u) { reduce_final(); }
}

@compute @workgroup_size(CHUNK_WORKGROUP)
fn weigh(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (!enter_row(gid.y, true)) { return; }
  if (gid.x < seq.num_chunks) { weigh_chunk(gid.x); }
}

@compute @workgroup_size(WG)
fn reduce_weights(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  if (!enter_row(wid.y, true)) { return; }
  reduce_weights_part(t);
  phase();
  if (t == 0u) { reduce_weights_final(); }
}

@compute @workgroup_size(CHUNK_WORKGROUP)
fn histogram(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (!enter_row(gid.y, true)) { return; }
  if (gid.x < seq.num_chunks) { histogram_chunk(gid.x); }
}

@compute @workgroup_size(WG)
fn select_digit(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  if (!enter_row(wid.y, true)) { return; }
  select_part(t);
  phase();
  if (t == 0u) { select_final(); }
}

@compute @workgroup_size(CHUNK_WORKGROUP)
fn draw_mass(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (!enter_row(gid.y, true)) { return; }
  if (gid.x < seq.num_chunks) { draw_mass_chunk(gid.x); }
}

@compute @workgroup_size(WG)
fn draw(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  if (!enter_row(wid.y, true)) { return; }
  draw_part(t);
  phase();
  if (t == 0u) { draw_final(); }
}

/** Storage writes of one phase are seen by the whole workgroup in the next. */
fn phase() {
  storageBarrier();
  workgroupBarrier();
}

/**
 * The whole step in one workgroup, for small vocabularies where a dispatch costs more than its
 * work: the same functions in the same order, the chunks shared out among the invocations.
 */
@compute @workgroup_size(WG)
fn fused(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  if (!enter_row(wid.y, false)) { return; }
  // Read from the uniform, not the private copy: the early return and the rounds stay uniform.
  let own = seqs[stp.row[wid.y].state];
  let chunks = seq.num_chunks;
  for (var c = t; c < chunks; c += WG) { prepare_chunk(c); }
  phase();
  reduce_part(t);
  phase();
  if (t == 0u) { reduce_final(); }
  if (own.temperature == 0.0) { return; }
  phase();
  for (var c = t; c < chunks; c += WG) { weigh_chunk(c); }
  phase();
  reduce_weights_part(t);
  phase();
  if (t == 0u) { reduce_weights_final(); }
  phase();
  let rounds = DIGIT_ROUNDS * (select(0u, 1u, own.top_k > 0u) + select(0u, 1u, own.top_p < 1.0));
  for (var r = 0u; r < rounds; r++) {
    for (var c = t; c < chunks; c += WG) { histogram_chunk(c); }
    phase();
    select_part(t);
    phase();
    if (t == 0u) { select_final(); }
    phase();
  }
  for (var c = t; c < chunks; c += WG) { draw_mass_chunk(c); }
  phase();
  draw_part(t);
  phase();
  if (t == 0u) { draw_final(); }
}
