// Products of many rows on BF16 matrices in bfloat16 dot products (issue 43), as llama.cpp's CPU
// backend multiplies BF16 weights: x is rounded to bfloat16 once per product (ggml's vec_dot_type
// for GGML_TYPE_BF16 is BF16; llamafile's tinyBLAS multiplies such pairs with vdpbf16ps where the
// CPU has AVX512_BF16), and each pair of products bf16(x) w, exact in float32, is added into
// float32 sums (VDPBF16PS: two products a step, each sum rounded to nearest even, denormals
// flushed to zero). The weights are read as the file holds them, never widened to float32.
//
// What it changes: x's rounding to bfloat16 (relative error at most 2^-9 per value) moves each
// product by about 0.2% of its size over random signs (tests/kernels/packed_bf16_test.cc reports
// it); the float products of the sgemm on decoded panels stay the exact path (STRETCH_PACKED_DOT
// =float). Measured on one core of this project's AMD EPYC (Zen 4), 512 rows of x times an 8192
// x 2048 BF16 matrix: 320-345 GFLOP/s against oneDNN's f32 sgemm's 140-180 on the same values.
// On this project's Intel Xeon the same kernel makes 69-78 GFLOP/s and oneDNN's bfloat16 matmul
// on the AMX tiles 370-490: there the many-row products take that (Bf16MatmulForManyRows).
#pragma once

#include <cstdint>
#include <vector>

#include "src/kernels/packed.h"

namespace stretch {

// Whether this build has the vector kernel (AVX512_BF16 with AVX512BW/VL). Elsewhere
// PackedBf16Rows computes the same products in portable code (x rounded, the sums in float32),
// far slower than the sgemm, which callers should then use.
bool PackedBf16Available();

// x (T, K) rounded to bfloat16 for PackedBf16Rows: out (T, K), each value to the nearest (ties to
// even), as src/kernels/half.h narrows.
void RoundRowsToBf16(const float* x, int64_t T, int64_t K, std::vector<uint16_t>* out);

// One thread: y[t * ldy + (r - r0)] = W[r] . xb[t] + beta y[...] for t < T, r0 <= r < r1 (beta 0:
// y is not read). W.type BF16 with an even number of columns; xb = RoundRowsToBf16(x, T, W.cols).
void PackedBf16Rows(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                    int64_t ldy, int64_t r0, int64_t r1);

// Whether PackedLinear's many-row products on BF16 matrices run Bf16MatmulRows: where oneDNN's
// bfloat16 matmul runs on AMX tiles (Intel Xeons since Sapphire Rapids), 5-6x PackedBf16Rows
// there (src/kernels/packed_bf16_amx.cc has the figures); elsewhere PackedBf16Rows. The
// environment's STRETCH_BF16_MATMUL=own chooses PackedBf16Rows everywhere, =onednn oneDNN's
// matmul whatever it runs on.
bool Bf16MatmulForManyRows();

// PackedBf16Rows' contract through oneDNN's bfloat16 matmul (one thread): the same products of
// the rounded x with the rows, added in float32 in another order.
void Bf16MatmulRows(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                    int64_t ldy, int64_t r0, int64_t r1);

// One row (decode), one thread: y[r - r0] = W[r] . xb + beta y[r - r0] for r0 <= r < r1 (beta 0:
// y is not read), xb = x (W.cols values) rounded to bfloat16. Each row is read once, in memory
// order (one stream per thread, as the other one-row products: src/kernels/packed_rows.h), 64
// products an instruction pair where the float kernel widens and multiplies 16 at a time.
void PackedBf16DotRows(const PackedMatrix& W, const uint16_t* xb, float beta, float* y, int64_t r0,
                       int64_t r1);

namespace packed_bf16_internal {
// The portable form that PackedBf16Rows uses where the vector kernel is not compiled, for the
// tests on machines that have the vector one.
void RowsPortable(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                  int64_t ldy, int64_t r0, int64_t r1);
}  // namespace packed_bf16_internal

}  // namespace stretch
