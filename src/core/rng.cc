#include "src/core/rng.h"

#include <cmath>
#include <numbers>

namespace stretch {

double Rng::Normal() {
  double u1 = UniformDouble();
  while (u1 <= 0.0) u1 = UniformDouble();
  const double u2 = UniformDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace stretch
