// 16-bit floats for the KV cache (`--cache-type f16|bf16`, src/model/transformer.h's KvCache):
// float32 values narrowed to IEEE binary16 (F16) or bfloat16 (BF16), each rounded to the nearest
// representable value (ties to even), and widened back exactly. F16 keeps 11 significant bits
// (relative rounding error at most 2^-11) over magnitudes 6e-8..65504 (larger ones become inf);
// BF16 keeps 8 bits (at most 2^-8) over float32's whole range. Vectorized with Highway (F16C's
// vcvtps2ph / vcvtph2ps where the CPU has them); the results equal the scalar converters of the
// GGUF writer and reader (src/io/gguf.h), which tests/kernels/half_test.cc checks.
#pragma once

#include <cstdint>

namespace stretch {

enum class HalfType : uint8_t { kF16, kBF16 };

// dst[i] = narrow(src[i]), i < n.
void FloatsToHalves(const float* src, uint16_t* dst, int64_t n, HalfType type);
// dst[i] = widen(src[i]), exact.
void HalvesToFloats(const uint16_t* src, float* dst, int64_t n, HalfType type);
// x[i] = widen(narrow(x[i])): what a value becomes after a trip through the 16-bit store.
void RoundThroughHalves(float* x, int64_t n, HalfType type);

}  // namespace stretch
