// A snippet composed in front of the kernels that rotate by RoPE angles (rope.wgsl, decode_attention.wgsl).
//
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
