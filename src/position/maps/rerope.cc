// ReRoPE (Su 2023, "Rectified Rotary Position Embeddings"): `rerope[:window=w]`, relative position
// min(i - j, w).
//   segment 0 (near, i - j < w):  a = i, b = j
//   segment 1 (far, i - j >= w):  a = w, b = 0   (a - b = w)
// The far keys all sit at position 0: their slot is never rotated. Default: w = L/2. A Lambda
// mask sees its sinks through this map (clamps_at_window).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "src/position/method_internal.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {
namespace {

constexpr RelKey kKeys[] = {{"window", RelSlot::kWindow}};

}  // namespace

extern const RelMapDescriptor rerope_map;
constinit const RelMapDescriptor rerope_map = [] {
  RelMapDescriptor d;
  d.name = "rerope";
  d.keys = kKeys;
  d.rank = 10;
  d.train_usage = "rerope[:window=W]";
  d.check_call = [](const RelMapMethod& rel, const RopeGeometry&, int64_t fed_len,
                    std::string_view where) {
    if (rel.window > fed_len) {
      method_internal::LargerThanContext(where, "window", rel.window, fed_len);
    }
  };
  d.fill_defaults = [](RelMapMethod& rel, const RopeGeometry& geo, int64_t, double) {
    if (rel.window == 0) rel.window = std::max<int64_t>(1, geo.train_len / 2);
  };
  d.segments = 2;
  d.key_slots = 2;
  d.slot_of = {0, 1, 0};
  d.unrotated_slot = 1;
  d.clamps_at_window = true;
  d.build = [](const RelMapMethod& rel, PositionMap& map) { map.window = rel.window; };
  d.segment_of = [](const PositionMap& m, int64_t i, int64_t j) {
    return NearFarSegmentOf(m.window, i, j);
  };
  d.segment_run_end = [](const PositionMap& m, int64_t i, int64_t j) {
    return NearFarRunEnd(m.window, i, j);
  };
  d.segments_in = [](const PositionMap& m, int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) {
    return NearFarSegmentsIn(m.window, q_lo, q_hi, k_lo, k_hi);
  };
  d.query_pos = [](const PositionMap& m, int seg, int64_t i) {
    return static_cast<double>(seg == 0 ? i : m.window);
  };
  d.key_pos = [](const PositionMap&, int seg, int64_t j) {
    return seg == 0 ? static_cast<double>(j) : 0.0;
  };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format("ReRoPE, window w = {}: min(i - j, w)", m.window);
  };
  return d;
}();

}  // namespace stretch::rel_maps
