// Decode attention as a dispatch of its own (decode_attention.wgsl has the math and its notes): one
// thread per work item, THREADS items a workgroup (fewer on CPU devices, where SwiftShader walks
// every SIMD group of a workgroup, idle or not). The layer kernel (decode_layer.wgsl) runs the same
// items as one of its phases instead.
//
// Composed in front (kernels/attention.ts, decodeAttentionSpec): THREADS, the helpers decode_attention.wgsl
// lists, reading the bindings below, and decode_attention.wgsl itself.

struct Params {
  start_pos: u32,
  num_heads: u32,
  num_kv_heads: u32,
  head_dim: u32,
  scale: f32,      // the scores' factor: 1 / sqrt(head_dim) by default
  window: u32,     // sliding window in positions; 0: none
  chunk_keys: u32, // cache rows per chunk
  num_chunks: u32, // chunks per head
  pairing: u32,    // RoPE: 0 = adjacent, 1 = halves
  softcap: f32,    // scores soft-capped at this (the softcap variant's cap_score); 0: not read
  rotary_dims: u32, // RoPE: the rotated elements of a head (read by the rope_params variant)
  magnitude: f32,  // RoPE: cos and sin times this (read by the rope_params variant)
  qk_eps: f32,     // the per-head q/k RMSNorm's eps (read by the qk_norm variant)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;       // [num_heads, head_dim]
@group(0) @binding(2) var<storage, read> qkv: array<f32>;             // [q_dim + 2 kv_dim]
@group(0) @binding(3) var<storage, read_write> k_cache: array<KV>;    // [rows, num_kv_heads, head_dim]
@group(0) @binding(4) var<storage, read_write> v_cache: array<KV>;
@group(0) @binding(6) var<storage, read> inv_freq: array<f32>;        // [rotary_dims / 2]
// (The qk_norm variant: the q and k norms' gammas [head_dim] at bindings 9 and 10, decodeAttentionHelpersWgsl.)

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let item = (wg.y * grid.x + wg.x) * THREADS + lid; // flat (block of heads, chunk)
  if (item < (params.num_heads / HEADS) * params.num_chunks) {
    attend_item(item); // no barriers in this kernel
  }
}
