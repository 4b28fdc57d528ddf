// A snippet composed in front of the kernels that write f16 KV caches (kv_cache.wgsl, decode_attention.wgsl):
// the IEEE binary16 bits of an f32, rounded to nearest, ties to even, by integer math
// (pack2x16float leaves the rounding to the platform); overflow gives ±inf and NaN 0x7e00, like
// f32ToF16Bits in src/model/quantize.ts, so the CPU reference can round the same way.

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
