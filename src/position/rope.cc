#include "src/position/rope.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"

namespace stretch {

std::vector<double> RopeThetas(double base, int rotary_dim) {
  STRETCH_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim={}", rotary_dim);
  STRETCH_CHECK(base > 1.0, "base={}", base);
  std::vector<double> thetas(static_cast<size_t>(rotary_dim / 2));
  for (int t = 0; t < rotary_dim / 2; ++t) {
    thetas[static_cast<size_t>(t)] = std::pow(base, -2.0 * t / rotary_dim);
  }
  return thetas;
}

RopeTable MakeRopeTableAt(const std::vector<double>& thetas, int64_t pos0,
                          const std::vector<double>& positions) {
  RopeTable table;
  const int64_t n = static_cast<int64_t>(positions.size());
  const size_t P = thetas.size();
  table.pos0 = pos0;
  table.n = n;
  table.pairs = static_cast<int>(P);
  table.cos.resize(static_cast<size_t>(n) * P);
  table.sin.resize(static_cast<size_t>(n) * P);
  // Integer positions (all but Leaky ReRoPE's): p * theta from two small tables by the
  // angle-addition formula, in double: p = 64 a + b, cos(p theta) = cos(64 a theta) cos(b theta)
  // - sin(64 a theta) sin(b theta) (and sin alike), both tables filled with std::cos/std::sin, so
  // each entry is within a few double ulps of the direct value, 1e-9 of a float ulp. This turns
  // n * P cos/sin calls into (n / 64 + 64) * P of them plus 6 flops per entry.
  constexpr int64_t kFine = 64;
  bool integral = n > 0;
  double max_abs = 0.0;
  for (double p : positions) {
    integral = integral && p == std::floor(p) && std::abs(p) < 1e12;
    max_abs = std::max(max_abs, std::abs(p));
  }
  if (!integral) {
#pragma omp parallel for schedule(static) if (n * static_cast <int64_t>(P) > 8192)
    for (int64_t r = 0; r < n; ++r) {
      for (size_t t = 0; t < P; ++t) {
        const double a = positions[static_cast<size_t>(r)] * thetas[t];
        table.cos[static_cast<size_t>(r) * P + t] = static_cast<float>(std::cos(a));
        table.sin[static_cast<size_t>(r) * P + t] = static_cast<float>(std::sin(a));
      }
    }
    return table;
  }
  const int64_t n_coarse = static_cast<int64_t>(max_abs) / kFine + 1;
  std::vector<double> fc(P * kFine), fs(P * kFine), cc(P * static_cast<size_t>(n_coarse)),
      cs(cc.size());
  for (size_t t = 0; t < P; ++t) {
    for (int64_t b = 0; b < kFine; ++b) {
      fc[t * kFine + b] = std::cos(static_cast<double>(b) * thetas[t]);
      fs[t * kFine + b] = std::sin(static_cast<double>(b) * thetas[t]);
    }
    for (int64_t a = 0; a < n_coarse; ++a) {
      cc[t * n_coarse + a] = std::cos(static_cast<double>(a * kFine) * thetas[t]);
      cs[t * n_coarse + a] = std::sin(static_cast<double>(a * kFine) * thetas[t]);
    }
  }
#pragma omp parallel for schedule(static) if (n * static_cast <int64_t>(P) > 8192)
  for (int64_t r = 0; r < n; ++r) {
    const double p = positions[static_cast<size_t>(r)];
    const int64_t m = static_cast<int64_t>(std::abs(p));
    const double sign = p < 0 ? -1.0 : 1.0;  // cos is even, sin is odd
    const int64_t a = m / kFine, b = m % kFine;
    for (size_t t = 0; t < P; ++t) {
      const double ca = cc[t * n_coarse + a], sa = cs[t * n_coarse + a];
      const double cb = fc[t * kFine + b], sb = fs[t * kFine + b];
      table.cos[static_cast<size_t>(r) * P + t] = static_cast<float>(ca * cb - sa * sb);
      table.sin[static_cast<size_t>(r) * P + t] = static_cast<float>(sign * (sa * cb + ca * sb));
    }
  }
  return table;
}

RopeTable MakeRopeTable(const std::vector<double>& thetas, int64_t pos0, int64_t n) {
  std::vector<double> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<double>(pos0 + i);
  return MakeRopeTableAt(thetas, pos0, positions);
}

}  // namespace stretch
