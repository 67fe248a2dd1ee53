// Self-Extend (Jin et al. 2024, "LLM Maybe LongLM", arXiv 2401.01325): `self-extend[:group=G,
// window=W,reach=R]`, relative position i - j below W (the neighbour window), else
// floor(i/G) - floor(j/G) + W - floor(W/G) (grouped attention).
//   segment 0 (near, i - j < W):  a = i,                             b = j
//   segment 1 (far, i - j >= W):  a = floor(i/G) + W - floor(W/G),   b = floor(j/G)
// The group follows a reach R (0 < R <= 1): G is the smallest integer G >= 1 with
// floor((L'-1)/G) + W - floor(W/G) <= floor(R L) - 1, i.e. the largest relative position the
// model sees (query L'-1 against key 0) stays below floor(R L) (one short of "below R L" where
// R L is not whole: L = 128 at 16x takes G = 39 where 38 would land the farthest at 85 < 85.3).
// A context that fits the trained length (L' <= L) has nothing to extend: G = 1.
// Defaults, the authors' empirical rule (datamllab/LongLM README, "Emperical Rule"):
// "(1/2 ~ 2/3) x L > W + (N - W)/G", since "only a portion (1/2 ~ 2/3) of positions are well
// trained and SelfExtend should only leverage these well-trained relative position for
// extension"; "excessively small group sizes can degrade performance". So R = 2/3, the end of
// their range that keeps the smallest (most precise) group, and W = L/4, their own setting for
// Llama-2 (neighbor window 1,024 of 4,096; "512~1536 are feasible", section "How to choose the
// group_size and neighbor_window"). On the quick lab's models at 8x and 16x this reads prose back
// from 8L and 16L at +33..+48 points where W = L/2 with the smallest group (R = 1, the paper's
// maximal extension and the default before 2026-12-07) read +11..+29 (docs/training.md,
// thirty-fourth round). reach=1 (or group=G) chooses the smallest group the trained length
// allows. Below L = 3 the rule leaves no position (floor(2L/3) - 1 < 1): the bound is then L - 1.
// A resolved method names G, not R.
//
// llama.cpp's --grp-attn-n G --grp-attn-w W select it, with group G and neighbour window W (G = 1:
// off; W defaults to llama.cpp's 512 and must be a multiple of G, as llama.cpp asserts).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "src/core/error.h"
#include "src/position/method_internal.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {
namespace {

constexpr RelKey kKeys[] = {
    {"group", RelSlot::kInt0}, {"window", RelSlot::kWindow}, {"reach", RelSlot::kReal}};

constexpr std::string_view kReachAllowed = "a number in (0, 1]: a fraction of L";

double ParseReach(std::string_view shown, std::string_view text, std::string_view where) {
  const double v = method_internal::ParseNumber(where, shown, text, kReachAllowed);
  if (!(v > 0.0 && v <= 1.0)) {
    method_internal::BadValue(where, shown, text, "is not in (0, 1]", kReachAllowed);
  }
  return v;
}

// The largest relative position the grouped keys may take: floor(R L) - 1, for the default
// R = 2/3 in integers (L - 1 where that leaves none).
int64_t GroupBound(const RelMapMethod& rel, int64_t train_len) {
  if (rel.real == 0.0) {
    const int64_t rule = 2 * train_len / 3 - 1;
    return rule >= 1 ? rule : train_len - 1;
  }
  return static_cast<int64_t>(std::floor(rel.real * static_cast<double>(train_len))) - 1;
}

// The default group: 1 when the context fits the trained length, else the smallest G >= 1 with
// floor((L'-1)/G) + W - floor(W/G) <= bound. For G >= max(L', W + 1) the left side is W, so no
// G exists when W > bound.
std::optional<int64_t> DefaultGroup(int64_t bound, int64_t train_len, int64_t fed_len,
                                    int64_t window) {
  if (fed_len <= train_len) return 1;
  const int64_t last = std::max<int64_t>(fed_len, window + 1);
  for (int64_t g = 1; g <= last; ++g) {
    if ((fed_len - 1) / g + window - window / g <= bound) return g;
  }
  return std::nullopt;
}

void FromLlamaCpp(const LlamaCppRopeFlags& f, const std::string& type, Method& m);

}  // namespace

extern const RelMapDescriptor self_extend_map;
constinit const RelMapDescriptor self_extend_map = [] {
  RelMapDescriptor d;
  d.name = "self-extend";
  d.keys = kKeys;
  d.rank = 30;
  d.train_usage = "self-extend[:group=G,window=W,reach=R]";
  d.parse_real = ParseReach;
  d.check_real_range = [](const RelMapMethod& rel, std::string_view where) {
    if (rel.real != 0.0 && !(rel.real > 0.0 && rel.real <= 1.0)) {
      Fail("{}: reach={} is out of range (allowed: {})", where, rel.real, kReachAllowed);
    }
    if (rel.real != 0.0 && rel.ints[0] != 0) {
      Fail(
          "{}: group={} and reach={} both given (allowed: one of them; reach chooses the group "
          "per call)",
          where, rel.ints[0], rel.real);
    }
  };
  d.check_call = [](const RelMapMethod& rel, const RopeGeometry&, int64_t fed_len,
                    std::string_view where) {
    if (rel.window != 0 && rel.window >= fed_len) {
      Fail("{}: window={} is not smaller than the context ({} tokens) (allowed: 1 .. {})", where,
           rel.window, fed_len, fed_len - 1);
    }
  };
  d.fill_defaults = [](RelMapMethod& rel, const RopeGeometry& geo, int64_t fed_len, double) {
    if (rel.window == 0) rel.window = std::max<int64_t>(1, geo.train_len / 4);
    if (rel.ints[0] == 0) {
      rel.ints[0] = DefaultGroup(GroupBound(rel, geo.train_len), geo.train_len, fed_len, rel.window)
                        .value_or(0);
      if (rel.ints[0] != 0) rel.real = 0.0;  // resolved: the group says it all
    }
  };
  d.check_resolved = [](const RelMapMethod& rel, const RopeGeometry& geo, std::string_view where) {
    if (rel.ints[0] == 0) {
      const int64_t bound = GroupBound(rel, geo.train_len);
      Fail(
          "{}: window={} leaves no group that keeps relative positions at most {}{} "
          "(allowed: window <= {} when group is not given)",
          where, rel.window, bound,
          rel.real == 0.0
              ? fmt::format(" (2/3 of L = {}, less 1: the default reach)", geo.train_len)
              : fmt::format(" (reach={} of L = {}, less 1)", rel.real, geo.train_len),
          bound);
    }
  };
  d.segments = 2;
  d.key_slots = 2;
  d.slot_of = {0, 1, 0};
  d.build = [](const RelMapMethod& rel, PositionMap& map) {
    map.window = rel.window;
    map.ints[0] = rel.ints[0];  // G
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
    const int64_t g = m.ints[0];
    return static_cast<double>(FloorDiv(i, g) + m.window - FloorDiv(m.window, g));
  };
  d.key_pos = [](const PositionMap& m, int seg, int64_t j) {
    if (seg == 0) return static_cast<double>(j);
    return static_cast<double>(FloorDiv(j, m.ints[0]));
  };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format(
        "Self-Extend, group G = {}, neighbour window W = {}: i - j below W, else "
        "floor(i/G) - floor(j/G) + W - floor(W/G)",
        m.ints[0], m.window);
  };
  d.from_llama_cpp = FromLlamaCpp;
  return d;
}();

namespace {

// --grp-attn-n, --grp-attn-w on plain RoPE: m becomes self-extend at m's base.
void FromLlamaCpp(const LlamaCppRopeFlags& f, const std::string& type, Method& m) {
  if (f.grp_attn_n && *f.grp_attn_n != 1) {
    const int64_t g = *f.grp_attn_n;
    if (g <= 0) Fail("--grp-attn-n={} is not positive (allowed: 1 for off, or a group >= 2)", g);
    const int64_t w = f.grp_attn_w.value_or(512);
    if (w <= 0) Fail("--grp-attn-w={} is not positive (allowed: a positive width)", w);
    if (w % g != 0) {
      Fail(
          "--grp-attn-w={} is not a multiple of --grp-attn-n={} (allowed: a multiple, as "
          "llama.cpp requires)",
          w, g);
    }
    if (type != "none") {
      Fail(
          "--grp-attn-n={} (Self-Extend) with --rope-scaling {} (allowed: no frequency scaling: "
          "Self-Extend runs on plain RoPE)",
          g, type);
    }
    const double base = m.rope.base;
    m = Method{};
    m.rel.map = &self_extend_map;
    m.rope.base = base;
    m.rel.ints[0] = g;
    m.rel.window = w;
  } else if (f.grp_attn_w) {
    Fail("--grp-attn-w={} has no effect without --grp-attn-n (allowed: with --grp-attn-n >= 2)",
         *f.grp_attn_w);
  }
}

}  // namespace

}  // namespace stretch::rel_maps
