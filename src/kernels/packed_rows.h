// Internal to src/kernels (packed_dot.cc, packed_int8.cc): how the one-row products on packed
// matrices walk their rows, shared by the float and the integer kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "src/kernels/packed.h"

namespace stretch::packed_internal {

// Rows processed together (GemvRows' four in src/kernels/gemm.cc: x is loaded once per four rows,
// four streams in flight).
inline constexpr int kRows = 4;
// Prefetch distance in rows (GemvRows' eight: two groups of four ahead).
inline constexpr int64_t kAheadRows = 8;

// Runs rows(std::integral_constant<int, R>, row pointer, out) on groups of kRows rows, then on
// the rest one at a time, and applies beta: y[r - r0] = dot (+ beta y[r - r0] when beta != 0).
template <class Rows>
void ForRowGroups(const PackedMatrix& W, float beta, float* y, int64_t r0, int64_t r1,
                  Rows&& rows) {
  const auto finish = [&](int64_t r, float dot) {
    float& o = y[r - r0];
    o = beta == 0.0f ? dot : dot + beta * o;
  };
  float dots[kRows];
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) {
    rows(std::integral_constant<int, kRows>(), W.Row(r), dots);
    for (int i = 0; i < kRows; ++i) finish(r + i, dots[i]);
  }
  for (; r < r1; ++r) {
    rows(std::integral_constant<int, 1>(), W.Row(r), dots);
    finish(r, dots[0]);
  }
}

}  // namespace stretch::packed_internal
