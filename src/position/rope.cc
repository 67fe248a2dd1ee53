#include "src/position/rope.h"

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

RopeTable MakeRopeTable(const std::vector<double>& thetas, int64_t pos0, int64_t n) {
  RopeTable table;
  table.pos0 = pos0;
  table.n = n;
  table.pairs = static_cast<int>(thetas.size());
  const size_t size = static_cast<size_t>(n) * thetas.size();
  table.cos.resize(size);
  table.sin.resize(size);
#pragma omp parallel for schedule(static) if (size > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const double pos = static_cast<double>(pos0 + i);
    for (size_t t = 0; t < thetas.size(); ++t) {
      const double angle = pos * thetas[t];
      table.cos[static_cast<size_t>(i) * thetas.size() + t] = static_cast<float>(std::cos(angle));
      table.sin[static_cast<size_t>(i) * thetas.size() + t] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

}  // namespace stretch
