// One-row products of packed matrices (src/kernels/packed.h) in integers, as llama.cpp computes
// decode (issue 43): x is quantized once per product to 8-bit integers with a float scale per
// block, and each block of a row is multiplied by integer dot products, so the weights' quants
// are never converted to float. ggml's formulas (ggml-quants.c, ggml-cpu/quants.c):
//
//   x for Q4_K, Q6_K:  quantize_row_q8_K_ref, per 256 values: d_x = 1 / (127 / max|x|), q_x the
//                      nearest integer to x (127 / max|x|), ties to even (nearest_int), and the
//                      sums of q_x over each 16 values (block_q8_K's bsums);
//   x for Q8_0:        the same per 32 values (quantize_row_q8_0's AVX path rounds the same way;
//                      d_x stays float32 here where ggml rounds it to f16);
//   vec_dot_q4_K_q8_K  W[r] . x = sum_b d_x (d (sum_j sc_j (q_j . qx_j)) - dmin (sum_j m_j
//                      sum(qx_j)))                                      (8 sub-blocks of 32)
//   vec_dot_q6_K_q8_K  W[r] . x = sum_b d_x d (sum_g sc_g (q_g . qx_g - 32 sum(qx_g)))
//                                                                        (16 groups of 16; q 0..63)
//   vec_dot_q8_0_q8_0  W[r] . x = sum_b d_x d (q . qx)                 (32 values per block)
//
// The integer sums in parentheses are exact (int32); each block's two floats are multiplied and
// the blocks summed in float32. So the result is the double dot of the scalar decoders'
// (src/kernels/blocks.h) row with the quantized x (QuantizedInput::Value) within float32 rounding
// of one term per block, far tighter than PackedDotRows' bound; it differs from PackedDotRows by
// the quantization of x (0.5-0.8% rms of the results for normal x and typical scales, 4096
// columns: tests/kernels/packed_int8_test.cc reports it).
#pragma once

#include <cstdint>
#include <vector>

#include "src/kernels/packed.h"

namespace stretch {

// x quantized for the products on one type of matrix: per block of Block() values (256 for Q4_K
// and Q6_K, ggml's block_q8_K; 32 for Q8_0, block_q8_0) a float scale d, and the values as int8,
// x[k] ~ d[k / Block()] q[k]; per 16 values the sum of q (ggml's bsums).
struct QuantizedInput {
  PackedType type = PackedType::kQ8_0;  // the matrices it is for
  int64_t n = 0;                        // values
  std::vector<float> d;                 // n / Block()
  std::vector<int8_t> q;                // n
  std::vector<int16_t> sums;            // n / 16: sum of q over values 16 i .. 16 i + 15

  int64_t Block() const { return type == PackedType::kQ8_0 ? 32 : 256; }
  // The value that the products multiply: d q, as float (exact but for its one rounding).
  float Value(int64_t k) const {
    return d[static_cast<size_t>(k / Block())] * q[static_cast<size_t>(k)];
  }
};

// Whether PackedDotRowsInt8 has vector kernels for `type` on this build's CPU (Q8_0, Q4_K, Q6_K
// with AVX-512 VNNI); elsewhere it computes the same sums in portable code, slower than
// PackedDotRows, which the callers should then use.
bool PackedInt8Available(PackedType type);

// out = x (n values, n a multiple of the type's block, finite; a non-finite value makes its
// block's d NaN, so the products that use it are NaN as with float x). `for_type`: Q8_0, Q4_K or
// Q6_K. Reuses out's storage.
void QuantizeInput(const float* x, int64_t n, PackedType for_type, QuantizedInput* out);

// One thread: y[r - r0] = W[r] . x + beta * y[r - r0] for r0 <= r < r1 (beta 0: y is not read),
// W.type Q8_0, Q4_K or Q6_K, xq = QuantizeInput(x, W.cols, W.type).
void PackedDotRowsInt8(const PackedMatrix& W, const QuantizedInput& xq, float beta, float* y,
                       int64_t r0, int64_t r1);

namespace packed_int8_internal {
// The portable kernels that PackedDotRowsInt8 uses where the vector ones are not compiled, for
// the tests on machines that have the vector ones.
void DotRowsPortable(const PackedMatrix& W, const QuantizedInput& xq, float beta, float* y,
                     int64_t r0, int64_t r1);
}  // namespace packed_int8_internal

}  // namespace stretch
