// Rotary position embedding (RoFormer, Su et al. 2021), in place on x [T, num_heads, head_dim].
//
// Token t sits at position p = start_pos + t. The first rotary_dims elements of each head rotate
// (all of them, head_dim, unless the model rotates part: HF partial_rotary_factor, llama.cpp
// n_dims); the rest pass through. For pair i < rotary_dims/2 the angle is p * inv_freq[i], and
// the pair (a, b) becomes m (a cos - b sin, a sin + b cos), m = magnitude (1, or LongRoPE's
// attention factor). Which two dimensions form pair i depends on the checkpoint's layout:
//   pairing 0 ('adjacent'): (x[2i], x[2i+1])           - llama.cpp / GGUF, Meta's original code
//   pairing 1 ('halves'):   (x[i], x[i + rotary_dims/2]) - Hugging Face Llama
// One invocation per pair; each rotates its own two elements, so in place is safe.
//
// Composed in front of this file (kernels/elementwise.ts): sin_cos.wgsl's `fn sin_cos(angle) -> vec2<f32>`;
// and (positionWgsl) `fn start_pos() -> u32`, the position
// of token 0: params.start_pos, or (the reusable decode step) params.start_pos plus a u32 that the
// queue writes into a small storage buffer before each step, so the bind group never changes.

struct Params {
  T: u32,
  num_heads: u32,
  head_dim: u32,
  start_pos: u32,
  pairing: u32, // 0 = adjacent, 1 = halves
  rotary_dims: u32, // the rotated elements of a head (even, <= head_dim)
  magnitude: f32,   // cos and sin times this
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;    // [T, num_heads, head_dim]
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;   // [rotary_dims / 2]

const WORKGROUP_SIZE: u32 = 256u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let half_dim = params.rotary_dims / 2u;
  let n = params.T * params.num_heads * half_dim; // pairs in all
  let pair = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (pair >= n) {
    return;
  }
  let i = pair % half_dim;            // pair index within the head
  let head = pair / half_dim;         // flat (t, h)
  let t = head / params.num_heads;
  let base = head * params.head_dim;  // start of this head's vector in x

  var ia: u32;
  var ib: u32;
  if (params.pairing == 0u) {
    ia = base + 2u * i;
    ib = ia + 1u;
  } else {
    ia = base + i;
    ib = ia + half_dim;
  }

  let p = f32(start_pos() + t);
  let sc = sin_cos(p * inv_freq[i]) * params.magnitude;
  let s = sc.x;
  let c = sc.y;
  let a = x[ia];
  let b = x[ib];
  x[ia] = a * c - b * s;
  x[ib] = a * s + b * c;
}
