// Appends the K and V rows of T new tokens to f16 KV caches: each cache word holds two halves
// (element 2i in the low 16 bits, 2i + 1 in the high), so no shader-f16 feature is needed.
//
//   k_cache[offset + i] = f16(k[2i]) | f16(k[2i + 1]) << 16,   i < n  (and likewise V)
//
// The conversion rounds to nearest, ties to even, by integer math (pack2x16float leaves the
// rounding to the platform); overflow gives ±inf and NaN 0x7e00, like f32ToF16Bits in
// src/model/quantize.ts, so the CPU reference can round the same way.

struct Params {
  n: u32,      // words to write (T * kv_dim / 2)
  offset: u32, // first word in the caches (start_pos * kv_dim / 2)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;

const WORKGROUP_SIZE: u32 = 256u;

fn f16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let exp = (b >> 23u) & 0xffu;
  let mant = b & 0x7fffffu;
  if (exp == 0xffu) {
    if (mant != 0u) {
      return 0x7e00u;
    }
    return sign | 0x7c00u;
  }
  let e = i32(exp) - 112; // f16 exponent field
  if (e >= 31) {
    return sign | 0x7c00u;
  }
  if (e <= 0) {
    // Subnormal (or zero): a multiple of 2^-24.
    let shift = u32(14 - e);
    if (shift > 24u) {
      return sign;
    }
    let full = mant | 0x800000u;
    var q = full >> shift;
    let rem = full & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
      q += 1u;
    }
    return sign | q;
  }
  var q = (u32(e) << 10u) | (mant >> 13u);
  let rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) == 1u)) {
    q += 1u; // a carry into the exponent is right (up to inf)
  }
  return sign | q;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn write_kv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  k_cache[params.offset + i] = f16_bits(k[2u * i]) | (f16_bits(k[2u * i + 1u]) << 16u);
  v_cache[params.offset + i] = f16_bits(v[2u * i]) | (f16_bits(v[2u * i + 1u]) << 16u);
}
