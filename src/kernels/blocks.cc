#include "src/kernels/blocks.h"

#include <bit>

namespace stretch {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf, NaN (payload kept)
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal half: a normal float; shift the leading 1 into the implicit bit
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// The block layouts and formulas: src/kernels/blocks.h.
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * 34;  // f16 d, int8 qs[32]
    const float d = HalfToFloat(LoadU16(blk));
    for (int j = 0; j < 32; ++j)
      dst[b * 32 + j] = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
  }
}

void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    // f16 d, uint8 qs[16]: value j < 16 is the low nibble of qs[j], value 16 + j its high nibble,
    // each less 8, times d
    const uint8_t* blk = src + b * 18;
    const float d = HalfToFloat(LoadU16(blk));
    float* y = dst + b * 32;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((blk[2 + j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((blk[2 + j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    // f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]: 144 bytes
    const uint8_t* blk = src + b * 144;
    const float d = HalfToFloat(LoadU16(blk));
    const float dmin = HalfToFloat(LoadU16(blk + 2));
    const uint8_t* scales = blk + 4;
    const uint8_t* q = blk + 16;
    float* y = dst + b * 256;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(is, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(is + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    // f16 d, f16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]: 176 bytes. Q4_K's layout with
    // a fifth bit per value: value l of sub-block j (32 values) has bit j of qh[l] as its bit 4.
    const uint8_t* blk = src + b * 176;
    const float d = HalfToFloat(LoadU16(blk));
    const float dmin = HalfToFloat(LoadU16(blk + 2));
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = blk + 16;
    const uint8_t* q = blk + 48;
    float* y = dst + b * 256;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(j, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        const int q1 = (q[l] & 0xF) | (((qh[l] >> j) & 1) << 4);
        *y++ = d1 * static_cast<float>(q1) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int q2 = (q[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4);
        *y++ = d2 * static_cast<float>(q2) - m2;
      }
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    // uint8 ql[128] (low 4 bits), uint8 qh[64] (high 2 bits), int8 scales[16], f16 d: 210 bytes
    const uint8_t* blk = src + b * 210;
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = HalfToFloat(LoadU16(blk + 208));
    float* y = dst + b * 256;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace stretch
