// Internal to src/kernels (packed_dot.cc, packed_int8.cc): how the one-row products on packed
// matrices walk their rows, shared by the float and the integer kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "src/kernels/packed.h"

namespace stretch::packed_internal {

// Rows a step. One (kStreamRows) reads the matrix in its memory order: each thread one sequential
// stream, which the hardware prefetchers follow best. Four (kGroupRows, as GemvRows in
// src/kernels/gemm.cc) load x once per four rows for four streams in flight: fewer instructions
// per row, for the kernels bound by their instructions rather than by memory (the float K-quant
// kernels of packed_dot.cc). Decode of a Llama-3.2-1B-shaped model, 2 threads of this project's AMD
// EPYC, 5 interleaved rounds, median tokens/s, one row / four: BF16 15.4 / 12.5, Q8_0 (int8) 30.3
// / 23.2, Q4_K_M (int8) 47.3 / 38.5, Q4_K_M (float) 32.2 / 37.5 (docs/performance.md).
inline constexpr int kStreamRows = 1;
inline constexpr int kGroupRows = 4;
// Prefetch distance in rows (GemvRows' eight: two groups of four ahead).
inline constexpr int64_t kAheadRows = 8;

// Runs rows(std::integral_constant<int, R>, row pointer, out) on groups of kGroup rows, then on
// the rest one at a time, and applies beta: y[r - r0] = dot (+ beta y[r - r0] when beta != 0).
template <int kGroup, class Rows>
void ForRowGroups(const PackedMatrix& W, float beta, float* y, int64_t r0, int64_t r1,
                  Rows&& rows) {
  const auto finish = [&](int64_t r, float dot) {
    float& o = y[r - r0];
    o = beta == 0.0f ? dot : dot + beta * o;
  };
  float dots[kGroup];
  int64_t r = r0;
  if constexpr (kGroup > 1) {
    for (; r + kGroup <= r1; r += kGroup) {
      rows(std::integral_constant<int, kGroup>(), W.Row(r), dots);
      for (int i = 0; i < kGroup; ++i) finish(r + i, dots[i]);
    }
  }
  for (; r < r1; ++r) {
    rows(std::integral_constant<int, 1>(), W.Row(r), dots);
    finish(r, dots[0]);
  }
}

}  // namespace stretch::packed_internal
