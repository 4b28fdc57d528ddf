// Rotary position embedding (RoFormer, Su et al. 2021), in place on x [T, num_heads, head_dim].
//
// Token t sits at position p = start_pos + t. For pair i < head_dim/2 the angle is
// p * inv_freq[i], and the pair (a, b) becomes (a cos - b sin, a sin + b cos). Which two
// dimensions form pair i depends on the checkpoint's layout:
//   pairing 0 ('adjacent'): (x[2i], x[2i+1])        - llama.cpp / GGUF, Meta's original code
//   pairing 1 ('halves'):   (x[i], x[i + head_dim/2]) - Hugging Face Llama
// One invocation per pair; each rotates its own two elements, so in place is safe.

struct Params {
  T: u32,
  num_heads: u32,
  head_dim: u32,
  start_pos: u32,
  pairing: u32, // 0 = adjacent, 1 = halves
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;    // [T, num_heads, head_dim]
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;   // [head_dim / 2]

const WORKGROUP_SIZE: u32 = 256u;

// sin and cos of the rotation angle, computed here rather than with the builtins: WGSL only
// promises an absolute error of 2^-11 for sin/cos, and only on [-π, π] (SwiftShader's are off by
// ~2e-4 at small angles), while the angles reach thousands of radians at long positions. This
// keeps RoPE equally accurate (~1e-7) on every GPU.
//
// Reduction: q = round(angle / (π/2)), r = angle - q·π/2 in [-π/4, π/4], with π/2 split in three
// (Cody-Waite): PIO2_HI and PIO2_MID have 8 and 11 significant bits, so q·PIO2_HI and q·PIO2_MID
// are exact while |q| < 2^13 (angles below ~12800 rad; beyond, precision degrades gently). Then the Cephes sinf/cosf polynomials on r, and the quadrant q
// picks which of ±sin r, ±cos r is sin(angle) and cos(angle).
const TWO_OVER_PI: f32 = 0.63661977236758134;
const PIO2_HI: f32 = 1.5703125;
const PIO2_MID: f32 = 4.837512969970703125e-4;
const PIO2_LO: f32 = 7.549789954891882e-8;

/** (sin(angle), cos(angle)) */
fn sin_cos(angle: f32) -> vec2<f32> {
  let q = round(angle * TWO_OVER_PI);
  let r = ((angle - q * PIO2_HI) - q * PIO2_MID) - q * PIO2_LO;
  let z = r * r;
  let sin_r = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
  let cos_r = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
  switch (i32(q) & 3) {
    case 0: { return vec2<f32>(sin_r, cos_r); }
    case 1: { return vec2<f32>(cos_r, -sin_r); }  // angle = r + π/2
    case 2: { return vec2<f32>(-sin_r, -cos_r); } // angle = r + π
    default: { return vec2<f32>(-cos_r, sin_r); } // angle = r + 3π/2
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let half_dim = params.head_dim / 2u;
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

  let p = f32(params.start_pos + t);
  let sc = sin_cos(p * inv_freq[i]);
  let s = sc.x;
  let c = sc.y;
  let a = x[ia];
  let b = x[ib];
  x[ia] = a * c - b * s;
  x[ib] = a * s + b * c;
}
