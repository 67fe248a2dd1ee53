// The segment decomposition of relative maps (src/position/plan.cc) against the maps as their
// papers define them (reference/position.h), pair by pair, and the tile/run classification the kernel
// relies on: SegmentsIn never misses a segment, SegmentRunEnd never spans a change.
#include "src/position/plan.h"

#include <gtest/gtest.h>

#include <cmath>
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

// The count of keys a query sees, which sets the trained log-n's and SSMax's n, against the keys
// the paper's mask admits counted one by one (reference/position.h), for every mask kind; and
// the trained log-n factor from it: ln(n) / ln L, so 1 at most under a window of L.
TEST(AttentionPlan, VisibleKeysCountsTheMasksKeys) {
  for (const char* spec :
       {"direct", "window:window=50", "window:window=1", "lambda:sinks=4,window=50",
        "lambda:sinks=49,window=50", "blockwise:window=40", "chunked:window=48", "rerope:window=40",
        "self-extend:group=3,window=20"}) {
    AttentionPlan p = MakeAttentionPlan(ParseMethod(spec), RopeGeometry{64, 8, 10000.0}, 400);
    p.log_length_scale = true;
    for (int64_t i = 0; i < 400; ++i) {
      ASSERT_EQ(p.VisibleKeys(i), ref::KeysSeen(p.method, i)) << spec << " i=" << i;
      ASSERT_NEAR(p.LogitScale(i), ref::MethodLogitFactor(p, i), 1e-12) << spec << " i=" << i;
    }
  }
  AttentionPlan w =
      MakeAttentionPlan(ParseMethod("window:window=64"), RopeGeometry{64, 8, 10000.0}, 400);
  w.log_length_scale = true;
  EXPECT_DOUBLE_EQ(w.LogitScale(399), 1.0);  // 64 keys seen, trained at L = 64
  EXPECT_DOUBLE_EQ(w.LogitScale(31), std::log(32.0) / std::log(64.0));
  AttentionPlan c = MakeAttentionPlan(ParseMethod("direct"), RopeGeometry{64, 8, 10000.0}, 400);
  c.log_length_scale = true;
  EXPECT_DOUBLE_EQ(c.LogitScale(399), std::log(400.0) / std::log(64.0));  // causal: i + 1
}

}  // namespace
}  // namespace stretch
