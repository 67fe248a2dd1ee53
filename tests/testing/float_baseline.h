// Accuracy judged against a baseline (FlashAttention's habit): the kernel's max error against a
// float64 reference, beside a plain float32 implementation's max error against the same
// reference, and the reference's largest magnitude, from which a test states its budget.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace stretch::testing {

struct BaselineError {
  double err = 0;        // max |got - want| (infinite where got is not finite)
  double baseline = 0;   // max |naive - want|
  double magnitude = 0;  // max |want|
};

template <typename Got>
BaselineError MeasureAgainstBaseline(const Got& got, const std::vector<double>& want,
                                     const std::vector<float>& naive) {
  BaselineError e;
  for (size_t i = 0; i < want.size(); ++i) {
    e.err = std::max(e.err, std::isfinite(got[i]) ? std::abs(got[i] - want[i])
                                                  : std::numeric_limits<double>::infinity());
    e.baseline = std::max(e.baseline, std::abs(double{naive[i]} - want[i]));
    e.magnitude = std::max(e.magnitude, std::abs(want[i]));
  }
  return e;
}

}  // namespace stretch::testing
