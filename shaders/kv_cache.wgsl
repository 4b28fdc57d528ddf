// Appends the K and V rows of T new tokens to the KV caches, at row start_pos() (composed in front
// of this file by kernels/wgsl.ts, positionWgsl: params.start_pos, or that plus a u32 read from a storage
// buffer for the reusable decode step).
//
// `write_kv`: f16 caches. Each cache word holds two halves (element 2i in the low 16 bits, 2i + 1
// in the high), so no shader-f16 feature is needed.
//
//   k_cache[start_pos() * row_len + i] = f16(k[2i]) | f16(k[2i + 1]) << 16,   i < n  (and likewise V)
//
// `write_kv_f32`: f32 caches, one element per thread (row_len and n count floats).
//
// The conversion (f16_bits.wgsl, composed in front of this file) rounds to nearest, ties to even.
// `fn cache_index(i: u32) -> u32` (composed in front, kvWriteIndexWgsl) places word or float i of
// the T rows: start_pos() * row_len + i, or in a ring of R rows (a sliding-window layer's cache)
// ((start_pos() + i / row_len) mod R) * row_len + i mod row_len.

struct Params {
  n: u32,         // words (f16) or floats (f32) to write: T rows
  start_pos: u32, // the cache row of the first token
  row_len: u32,   // words (f16: kv_dim / 2) or floats (f32: kv_dim) of one cache row
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(5) var<storage, read_write> k_cache_f32: array<f32>;
@group(0) @binding(6) var<storage, read_write> v_cache_f32: array<f32>;

const WORKGROUP_SIZE: u32 = 256u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn write_kv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  let o = cache_index(i);
  k_cache[o] = f16_bits(k[2u * i]) | (f16_bits(k[2u * i + 1u]) << 16u);
  v_cache[o] = f16_bits(v[2u * i]) | (f16_bits(v[2u * i + 1u]) << 16u);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn write_kv_f32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  let o = cache_index(i);
  k_cache_f32[o] = k[i];
  v_cache_f32[o] = v[i];
}
