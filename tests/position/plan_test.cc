// The segment decomposition of relative maps (src/position/plan.cc) against the maps as their
// papers define them (reference/position.h), pair by pair, and the tile/run classification the kernel
// relies on: SegmentsIn never misses a segment, SegmentRunEnd never spans a change.
#include "src/position/plan.h"

#include <gtest/gtest.h>

#include <string>

#include "reference/position.h"

namespace stretch {
namespace {

const char* const kSpecs[] = {"direct",
                              "rerope:window=40",
                              "leaky-rerope:window=40,k=4",
                              "self-extend:group=3,window=20",
                              "string:shift=40,window=8",
                              "dca:chunk=48",
                              "lambda:sinks=4,window=50",
                              "streaming:sinks=4,window=50",
                              "window:window=50"};

TEST(PositionMap, SegmentsGiveTheIssuesRelativePositions) {
  for (const char* spec : kSpecs) {
    const AttentionPlan p = MakeAttentionPlan(ParseMethod(spec), RopeGeometry{64, 8, 10000.0}, 400);
    for (int64_t i = 0; i < 400; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        if (!ref::MethodVisible(p.method, i, j)) continue;
        // Positions are integers or k-fractions below 1e3: double is exact to ~1e-13.
        ASSERT_NEAR(p.map.RelPos(i, j), ref::MethodRelPos(p.method, i, j), 1e-9)
            << spec << " i=" << i << " j=" << j;
      }
    }
  }
}

TEST(PositionMap, TileSegmentsAndRunsAreConsistent) {
  for (const char* spec : kSpecs) {
    const AttentionPlan p = MakeAttentionPlan(ParseMethod(spec), RopeGeometry{64, 8, 10000.0}, 400);
    const PositionMap& m = p.map;
    for (int64_t q_lo = 0; q_lo < 400; q_lo += 13) {
      for (int64_t k_lo = 0; k_lo <= q_lo + 12; k_lo += 11) {
        const uint32_t bits = m.SegmentsIn(q_lo, q_lo + 12, k_lo, k_lo + 10);
        for (int64_t i = q_lo; i <= q_lo + 12; ++i) {
          for (int64_t j = k_lo; j <= k_lo + 10 && j <= i; ++j) {
            ASSERT_TRUE(bits & (1u << m.SegmentOf(i, j))) << spec << " i=" << i << " j=" << j;
          }
        }
      }
    }
    for (int64_t i = 0; i < 400; i += 7) {
      for (int64_t j = 0; j <= i;) {
        const int64_t end = std::min<int64_t>(i + 1, m.SegmentRunEnd(i, j));
        ASSERT_GT(end, j) << spec;
        for (int64_t x = j; x < end; ++x) ASSERT_EQ(m.SegmentOf(i, x), m.SegmentOf(i, j)) << spec;
        j = end;
      }
    }
  }
}

}  // namespace
}  // namespace stretch
