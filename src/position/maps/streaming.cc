// StreamingLLM's cache positions (Xiao et al. 2023, "Efficient Streaming Language Models with
// Attention Sinks", arXiv 2309.17453, section 3.2: "we focus on positions within the cache rather
// than those in the original text"): the cache keeps the first S tokens (the attention sinks) and
// the last W, and numbers them 0 .. S + W - 1 in cache order. The query at i sees the keys of the
// Lambda mask (j < S or i - j < W); a key in the window keeps its distance i - j (both move
// together in the cache), and a sink j outside it sits at distance min(i, S + W - 1) - j: its own
// position against the query's slot in a full cache.
//   segment 0 (near, i - j < W):  a = i,                   b = j
//   segment 1 (far, i - j >= W):  a = min(i, S + W - 1),   b = j
// One key slot: a key sits at its own position in both segments, so the engine keeps each key
// rotated at its place in the cache and re-rotates the window when the cache drops its oldest
// tokens (Transformer::Forward). The map has no spec of its own: the mask method `streaming`
// (src/position/method.cc) pairs it with the Lambda mask, whose window W and sinks S it takes.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {

extern const RelMapDescriptor streaming_map;
constinit const RelMapDescriptor streaming_map = [] {
  RelMapDescriptor d;
  d.name = "streaming";
  d.rank = 60;
  d.mask_only = true;
  d.segments = 2;
  d.key_slots = 1;
  d.slot_of = {0, 0, 0};
  // window = W, ints[0] = S: MakeAttentionPlan fills them from the Lambda mask.
  d.build = [](const RelMapMethod& rel, PositionMap& map) {
    map.window = rel.window;
    map.ints = rel.ints;
  };
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
    return static_cast<double>(seg == 0 ? i : std::min(i, m.ints[0] + m.window - 1));
  };
  d.key_pos = [](const PositionMap&, int, int64_t j) { return static_cast<double>(j); };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format(
        "StreamingLLM cache positions: {} sinks and a window of {}; a sink outside the window at "
        "distance min(i, {}) - j",
        m.ints[0], m.window, m.ints[0] + m.window - 1);
  };
  return d;
}();

}  // namespace stretch::rel_maps
