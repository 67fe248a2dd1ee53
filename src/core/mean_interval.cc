#include "src/core/mean_interval.h"

#include <cmath>

#include "src/core/check.h"

namespace stretch {

double StudentT975(int64_t df) {
  STRETCH_CHECK(df >= 1, "degrees of freedom must be at least 1");
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                      2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                      2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                      2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df <= 30) return kTable[df - 1];
  const double z = 1.959963984540054, n = static_cast<double>(df);
  return z + (z * z * z + z) / (4 * n) +
         (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

std::optional<std::pair<double, double>> RatioMeanInterval(std::span<const double> sums,
                                                           std::span<const double> counts) {
  STRETCH_CHECK(sums.size() == counts.size());
  const size_t n = sums.size();
  double total = 0, sum = 0;
  for (size_t w = 0; w < n; ++w) {
    total += counts[w];
    sum += sums[w];
  }
  if (n < 2 || total <= 0) return std::nullopt;
  const double mean = sum / total;
  double spread = 0;
  for (size_t w = 0; w < n; ++w) {
    const double d = sums[w] - mean * counts[w];
    spread += d * d;
  }
  const double se = std::sqrt(static_cast<double>(n) / static_cast<double>(n - 1) * spread) / total;
  const double half = StudentT975(static_cast<int64_t>(n) - 1) * se;
  return std::pair{mean - half, mean + half};
}

}  // namespace stretch
