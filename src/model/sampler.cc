#include "src/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace stretch {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  std::vector<int>& b = options_.banned;
  b.erase(std::remove_if(b.begin(), b.end(), [](int id) { return id < 0; }), b.end());
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
}

int Sampler::Sample(float* logits, int V) {
  // options_.banned is sorted, unique and non-negative (the constructor): ban those inside the
  // vocabulary unless that is all of it.
  const auto end = std::lower_bound(options_.banned.begin(), options_.banned.end(), V);
  if (end - options_.banned.begin() < V) {
    for (auto it = options_.banned.begin(); it != end; ++it) {
      logits[*it] = -std::numeric_limits<float>::infinity();
    }
  }
  if (options_.temperature <= 0.0f) {
    return static_cast<int>(std::max_element(logits, logits + V) - logits);
  }
  const float max = *std::max_element(logits, logits + V);
  std::vector<double> p(static_cast<size_t>(V));
  double sum = 0.0;
  for (int i = 0; i < V; ++i) {
    p[static_cast<size_t>(i)] =
        std::exp((static_cast<double>(logits[i]) - max) / options_.temperature);
    sum += p[static_cast<size_t>(i)];
  }
  std::vector<int> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  double keep = sum;
  size_t n = order.size();
  if (options_.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
             (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    });
    double cum = 0.0;
    for (n = 0; n < order.size();) {
      cum += p[static_cast<size_t>(order[n])];
      ++n;
      if (cum >= options_.top_p * sum) break;
    }
    keep = cum;
  }
  const double r = rng_.UniformDouble() * keep;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += p[static_cast<size_t>(order[i])];
    if (r < cum) return order[i];
  }
  return order[n - 1];
}

}  // namespace stretch
