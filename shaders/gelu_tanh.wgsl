// A snippet composed in front of the kernels that gate a feed-forward (swiglu.wgsl,
// matmul_output.wgsl's SWIGLU, fused_matvec.wgsl's MODE_SWIGLU): GELU with the tanh approximation
// (Hendrycks & Gimpel, 2016), as torch's gelu(approximate='tanh') and Hugging Face's
// gelu_pytorch_tanh (Gemma's hidden_activation), for GeGLU: gelu_tanh(gate) * up.
//
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/π) (x + 0.044715 x³)
//                = x / (1 + exp(-2u))     (0.5 (1 + tanh(u)) = sigmoid(2u))
//
// The second form, the one computed, has no cancellation for negative x (1 + tanh(u) loses every
// digit there) and no overflow: for very negative x, exp(-2u) = inf and x / inf = -0, the limit;
// for large x, exp(-2u) = 0 and the result is x. (Composed by kernels/elementwise.ts,
// gatedActivationWgsl, with `const GELU_TANH: bool`: whether the kernel gates with it or with silu.)

const GELU_TWO_SQRT_2_OVER_PI: f32 = 1.5957691216057308; // 2 sqrt(2/π)

fn gelu_tanh(x: f32) -> f32 {
  return x / (1.0 + exp(-GELU_TWO_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
}

fn gelu_tanh4(x: vec4<f32>) -> vec4<f32> {
  return x / (1.0 + exp(-GELU_TWO_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
}
