// STRING (An et al. 2024, "Why Does the Effective Context Length of LLMs Fall Short?", arXiv
// 2410.18745): `string[:shift=S,window=W]`, relative position i - j below S, else i - j - S + W:
// the far positions shifted down by S - W onto well-trained ones.
//   segment 0 (near, i - j < S):  a = i,          b = j
//   segment 1 (far, i - j >= S):  a = i - S + W,  b = j
// Both segments keep keys at j: one key slot.
//
// Defaults: shift S = int(0.33 * L) and local window W = 128, STRING's (github.com/HKUNLP/STRING
// README: `shifted_offset=int(0.33 * L), small_local_value=128`, with L the model's
// max_position_embeddings). Ours: W is capped at S/2 (at least 1) so that the small models of this
// project (L = 256 .. 1024, where 128 would reach or pass S) still shift positions down; for
// L >= 776 the cap is 128.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/core/error.h"
#include "src/position/method_internal.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {
namespace {

constexpr RelKey kKeys[] = {{"shift", RelSlot::kInt0}, {"window", RelSlot::kWindow}};

void CheckWindowBelowShift(int64_t window, int64_t shift, std::string_view where) {
  if (window >= shift) {
    Fail("{}: window={} is not below shift={} (allowed: 1 <= window < shift)", where, window,
         shift);
  }
}

}  // namespace

extern const RelMapDescriptor string_map;
constinit const RelMapDescriptor string_map = [] {
  RelMapDescriptor d;
  d.name = "string";
  d.keys = kKeys;
  d.rank = 40;
  d.train_usage = "string";
  d.check_pairs = [](const RelMapMethod& rel, std::string_view where) {
    if (rel.ints[0] != 0 && rel.window != 0) {
      CheckWindowBelowShift(rel.window, rel.ints[0], where);
    }
  };
  d.check_call = [](const RelMapMethod& rel, const RopeGeometry&, int64_t fed_len,
                    std::string_view where) {
    if (rel.ints[0] > fed_len) {
      method_internal::LargerThanContext(where, "shift", rel.ints[0], fed_len);
    }
    if (rel.window > fed_len) {
      method_internal::LargerThanContext(where, "window", rel.window, fed_len);
    }
  };
  d.fill_defaults = [](RelMapMethod& rel, const RopeGeometry& geo, int64_t, double) {
    int64_t& shift = rel.ints[0];
    if (shift == 0) {
      shift = std::max<int64_t>(1, static_cast<int64_t>(0.33 * static_cast<double>(geo.train_len)));
    }
    if (rel.window == 0) rel.window = std::max<int64_t>(1, std::min<int64_t>(128, shift / 2));
  };
  d.check_resolved = [](const RelMapMethod& rel, const RopeGeometry&, std::string_view where) {
    CheckWindowBelowShift(rel.window, rel.ints[0], where);
  };
  d.segments = 2;
  d.key_slots = 1;
  d.slot_of = {0, 0, 0};
  d.build = [](const RelMapMethod& rel, PositionMap& map) {
    map.window = rel.window;
    map.ints[0] = rel.ints[0];  // S
  };
  d.segment_of = [](const PositionMap& m, int64_t i, int64_t j) {
    return NearFarSegmentOf(m.ints[0], i, j);
  };
  d.segment_run_end = [](const PositionMap& m, int64_t i, int64_t j) {
    return NearFarRunEnd(m.ints[0], i, j);
  };
  d.segments_in = [](const PositionMap& m, int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) {
    return NearFarSegmentsIn(m.ints[0], q_lo, q_hi, k_lo, k_hi);
  };
  d.query_pos = [](const PositionMap& m, int seg, int64_t i) {
    return static_cast<double>(seg == 0 ? i : i - m.ints[0] + m.window);
  };
  d.key_pos = [](const PositionMap&, int, int64_t j) { return static_cast<double>(j); };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format(
        "STRING, shift S = {}, local window W = {}: i - j below S, else "
        "i - j - S + W",
        m.ints[0], m.window);
  };
  return d;
}();

}  // namespace stretch::rel_maps
