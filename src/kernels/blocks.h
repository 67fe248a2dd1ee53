// ggml's number formats as stored in GGUF files (and F16 / BF16 in safetensors): the 16-bit
// floats and the block formats Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, decoded one block at a time. The
// layouts and formulas are ggml's (ggml-common.h: block_q8_0, block_q4_0, block_q4_K, block_q5_K,
// block_q6_K; ggml-quants.c: dequantize_row_q8_0, dequantize_row_q4_0, dequantize_row_q4_K and
// dequantize_row_q5_K with get_scale_min_k4, dequantize_row_q6_K), written from their
// definitions with the float operations in the same order, so the values equal ggml's. These are
// the scalar definitions: the file readers (src/io/gguf.cc) and the products on compressed weights
// (src/kernels/packed.h) are checked against them.
#pragma once

#include <cstdint>
#include <cstring>

namespace stretch {

float HalfToFloat(uint16_t h);      // IEEE binary16, exact (subnormals, inf, NaN)
float BFloat16ToFloat(uint16_t b);  // the high half of a float32

// A little-endian uint16 at p (no alignment needed).
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Bytes of one block of each format, and its values.
inline constexpr int kQ8_0Bytes = 34, kQ8_0Elems = 32;    // f16 d, int8 qs[32]
inline constexpr int kQ4_0Bytes = 18, kQ4_0Elems = 32;    // f16 d, u8 qs[16]
inline constexpr int kQ4_KBytes = 144, kQ4_KElems = 256;  // f16 d, dmin, u8 scales[12], qs[128]
inline constexpr int kQ5_KBytes = 176, kQ5_KElems = 256;  // as Q4_K, u8 qh[32] before qs[128]
inline constexpr int kQ6_KBytes = 210, kQ6_KElems = 256;  // u8 ql[128], qh[64], i8 sc[16], f16 d

// Block decoders: n elements (a multiple of the block size) from `src`.
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n);
void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n);
void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n);
void DequantizeQ5_K(const uint8_t* src, float* dst, int64_t n);
void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n);

// Q4_K's and Q5_K's 8 sub-block scales and mins, 6 bits each, packed in 12 bytes: sub-blocks 0-3
// in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 from the low / high
// nibbles of bytes 8-11 with the top 2 bits of bytes 0-3 (scales) and 4-7 (mins) above them.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace stretch
