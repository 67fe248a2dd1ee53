// The identity map: a (query i, key j) pair is rotated by i - j, plain RoPE. One segment, keys at
// j, queries at i. It has no spec name of its own: every method without a relative map uses it.
#include <cstdint>
#include <limits>
#include <string>

#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {

extern const RelMapDescriptor identity_map;
constinit const RelMapDescriptor identity_map = [] {
  RelMapDescriptor d;
  d.name = "";
  d.keys = {};
  d.rank = 0;
  d.segments = 1;
  d.key_slots = 1;
  d.slot_of = {0, 0, 0};
  d.build = [](const RelMapMethod&, PositionMap&) {};
  d.segment_of = [](const PositionMap&, int64_t, int64_t) { return 0; };
  d.segment_run_end = [](const PositionMap&, int64_t, int64_t) {
    return std::numeric_limits<int64_t>::max();
  };
  d.segments_in = [](const PositionMap&, int64_t, int64_t, int64_t, int64_t) { return 1u; };
  d.query_pos = [](const PositionMap&, int, int64_t i) { return static_cast<double>(i); };
  d.key_pos = [](const PositionMap&, int, int64_t j) { return static_cast<double>(j); };
  d.describe = [](const PositionMap&) -> std::string {
    return "identity: a (query i, key j) pair is rotated by its true distance i - j";
  };
  return d;
}();

}  // namespace stretch::rel_maps
