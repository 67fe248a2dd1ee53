// Leaky ReRoPE (Su 2023): `leaky-rerope[:window=w,k=K]`, relative position i - j below w, else
// w + (i - j - w) / k.
//   segment 0 (near, i - j < w):  a = i,                b = j
//   segment 1 (far, i - j >= w):  a = w + (i - w) / k,  b = j / k
// Defaults: w = L/2; k the smallest k >= 1 with w + (L' - 1 - w) / k <= L - 1, i.e. the largest
// relative position (query L'-1 against key 0) stays inside training: Su introduces the leak to
// keep locality "while avoiding positions out of bounds" (kexue.fm/archives/9708), the rule
// self-extend's smallest group (reach=1) follows too. `k=s` (the call's scale L'/L, the default
// before 2026-11-29) maps far distances past L whenever s > 1: w + (sL - 1 - w) / s > L - 1; a
// model trained to copy read nothing back with it at 8x (far copy +0 points, against +72 at 256
// tokens back with k = 16). A resolved k below 1 is an error; k = 1 is the identity map. Its
// positions are fractions of k, the only map's that are not integers.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/core/error.h"
#include "src/position/method_internal.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {
namespace {

constexpr RelKey kKeys[] = {{"window", RelSlot::kWindow}, {"k", RelSlot::kReal}};

// The stored k before a call resolves it: 0 when not given (the default rule above), kScaleK for
// `k=s` (L'/L), else the number.
constexpr double kScaleK = -1.0;

double ParseK(std::string_view shown, std::string_view text, std::string_view where) {
  if (text == "s") return kScaleK;  // k = s = L'/L, resolved per call
  // k = 1 is the identity map (what `k=s` resolves to at s = 1), so a resolved spec printed by
  // CanonicalSpec parses again.
  constexpr std::string_view kAllowed = "a number >= 1, or s for k = L'/L";
  const double v = method_internal::ParseNumber(where, shown, text, kAllowed);
  if (!(v >= 1.0)) method_internal::BadValue(where, shown, text, "is below 1", kAllowed);
  return v;
}

}  // namespace

extern const RelMapDescriptor leaky_rerope_map;
constinit const RelMapDescriptor leaky_rerope_map = [] {
  RelMapDescriptor d;
  d.name = "leaky-rerope";
  d.keys = kKeys;
  d.rank = 20;
  d.train_usage = "leaky-rerope[:window=W,k=K]";
  d.parse_real = ParseK;
  d.check_real_range = [](const RelMapMethod& rel, std::string_view where) {
    if (rel.real != 0.0 && rel.real != kScaleK && !(rel.real >= 1.0 && std::isfinite(rel.real))) {
      Fail("{}: {}={} is out of range (allowed: {})", where, "k", rel.real,
           "a number >= 1, or s for k = L'/L");
    }
  };
  d.check_call = [](const RelMapMethod& rel, const RopeGeometry&, int64_t fed_len,
                    std::string_view where) {
    if (rel.window > fed_len) {
      method_internal::LargerThanContext(where, "window", rel.window, fed_len);
    }
  };
  d.fill_defaults = [](RelMapMethod& rel, const RopeGeometry& geo, int64_t fed_len, double factor) {
    if (rel.window == 0) rel.window = std::max<int64_t>(1, geo.train_len / 2);
    if (rel.real == kScaleK) {
      rel.real = factor;
    } else if (rel.real == 0.0) {
      // w + (L' - 1 - w) / k <= L - 1; a window at or past L - 1 leaves no such k (check_call
      // refuses a window past the call, and k = s is the fallback then).
      const double far = static_cast<double>(fed_len - 1 - rel.window);
      const double room = static_cast<double>(geo.train_len - 1 - rel.window);
      rel.real = far <= 0.0 ? 1.0 : room > 0.0 ? std::max(1.0, far / room) : std::max(1.0, factor);
    }
  };
  d.check_resolved = [](const RelMapMethod& rel, const RopeGeometry&, std::string_view where) {
    if (!(rel.real >= 1.0)) {
      Fail("{}: k={} is below 1 (allowed: k >= 1; k = 1 is the identity map)", where, rel.real);
    }
  };
  d.segments = 2;
  d.key_slots = 2;
  d.slot_of = {0, 1, 0};
  d.build = [](const RelMapMethod& rel, PositionMap& map) {
    map.window = rel.window;
    map.real = rel.real;  // k
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
    if (seg == 0) return static_cast<double>(i);
    return static_cast<double>(m.window) + static_cast<double>(i - m.window) / m.real;
  };
  d.key_pos = [](const PositionMap& m, int seg, int64_t j) {
    if (seg == 0) return static_cast<double>(j);
    return static_cast<double>(j) / m.real;
  };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format(
        "Leaky ReRoPE, window w = {}, k = {:g}: i - j below w, else "
        "w + (i - j - w) / k",
        m.window, m.real);
  };
  return d;
}();

}  // namespace stretch::rel_maps
