#include "src/core/sees_back.h"

#include <algorithm>
#include <vector>

namespace stretch {
namespace {

// The index in `points` (sorted by distance) of the reference for SeesBackDistance, or -1.
int64_t ReferenceIndex(const std::vector<CopyAtDistance>& points, int64_t train_len) {
  int64_t ref = -1;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].distance <= train_len) ref = static_cast<int64_t>(i);
  }
  return ref;
}

std::vector<CopyAtDistance> SortedPoints(std::span<const CopyAtDistance> points) {
  std::vector<CopyAtDistance> p(points.begin(), points.end());
  std::stable_sort(p.begin(), p.end(), [](const CopyAtDistance& a, const CopyAtDistance& b) {
    return a.distance < b.distance;
  });
  return p;
}

}  // namespace

int64_t SeesBackReference(std::span<const CopyAtDistance> points, int64_t train_len) {
  const std::vector<CopyAtDistance> p = SortedPoints(points);
  const int64_t ref = ReferenceIndex(p, train_len);
  return ref < 0 ? 0 : p[static_cast<size_t>(ref)].distance;
}

std::optional<int64_t> SeesBackDistance(std::span<const CopyAtDistance> points, int64_t train_len,
                                        double tolerance) {
  const std::vector<CopyAtDistance> p = SortedPoints(points);
  const int64_t ref = ReferenceIndex(p, train_len);
  if (ref < 0) return std::nullopt;
  if (!p[static_cast<size_t>(ref)].above_control) return 0;
  const double floor = p[static_cast<size_t>(ref)].accuracy - tolerance;
  int64_t best = p[static_cast<size_t>(ref)].distance;
  for (size_t j = static_cast<size_t>(ref) + 1; j < p.size(); ++j) {
    // 1e-12: "within 10 points" holds at exactly 10 points despite rounding of the accuracies.
    if (!p[j].above_control || p[j].accuracy < floor - 1e-12) break;
    best = p[j].distance;
  }
  return best;
}

}  // namespace stretch
