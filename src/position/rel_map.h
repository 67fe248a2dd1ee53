// Relative position maps as descriptors: which relative position a (query i, key j) pair is
// rotated by. Each map is one RelMapDescriptor in one file of src/position/maps/, holding its spec
// name and keys, its defaults and checks, its segments (src/position/plan.h) and its description;
// the generic code (method.cc, method_check.cc, plan.cc, src/eval, src/train) only goes through
// the descriptor. RelMaps() is the registry (rel_map.cc).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "src/position/method.h"

namespace stretch {

struct PositionMap;

// Where a spec key of a map is stored: RelMapMethod::window, ints[0], ints[1] (positive integers)
// or real (a number the map parses itself).
enum class RelSlot { kWindow, kInt0, kInt1, kReal };
struct RelKey {
  std::string_view name;
  RelSlot slot;
};

// The most segments a map has (the chunked map's three).
inline constexpr int kMaxRelSegments = 3;

struct RelMapDescriptor {
  // ------------------------------------------------------------------------------------------
  // The spec: `name[:key=value,...]`.
  std::string_view name;         // the spec name; empty for the identity (no spec of its own)
  std::span<const RelKey> keys;  // in the order CanonicalSpec prints them (before `base`)
  int rank = 0;                  // where the registry lists it: specs and messages, ascending
  // `stretch train --position` usage, e.g. `name[:window=W]` (empty: not a training-time map).
  std::string_view train_usage;
  // The real key's value from its text (the integer keys are read generically). Throws through
  // BadValue naming `shown` and `where`.
  double (*parse_real)(std::string_view shown, std::string_view text,
                       std::string_view where) = nullptr;

  // ------------------------------------------------------------------------------------------
  // Checks and defaults (method_check.cc calls them in its order; any may be null).
  // A hand-built real parameter out of range (the parser checks each value as it reads it).
  void (*check_real_range)(const RelMapMethod& rel, std::string_view where) = nullptr;
  // Given parameters that must be ordered against each other (no model needed).
  void (*check_pairs)(const RelMapMethod& rel, std::string_view where) = nullptr;
  // Given lengths against the model and the call.
  void (*check_call)(const RelMapMethod& rel, const RopeGeometry& geo, int64_t fed_len,
                     std::string_view where) = nullptr;
  // Fills the defaults for a call (`factor` the call's resolved scale s), without checks.
  void (*fill_defaults)(RelMapMethod& rel, const RopeGeometry& geo, int64_t fed_len,
                        double factor) = nullptr;
  // What the defaults make of the rest (rel resolved by fill_defaults).
  void (*check_resolved)(const RelMapMethod& rel, const RopeGeometry& geo,
                         std::string_view where) = nullptr;

  // ------------------------------------------------------------------------------------------
  // The segments (src/position/plan.h, PositionMap's functions of the same names).
  int segments = 1;
  int key_slots = 1;                           // at most kMaxKeySlots
  std::array<int, kMaxRelSegments> slot_of{};  // the key slot of each segment
  int unrotated_slot = -1;                     // a slot whose keys all sit at position 0, or -1
  // Every key beyond `window` is seen at distance `window` (min(i - j, window)): the map a
  // Lambda mask sees its sinks through. One map of the registry says so.
  bool clamps_at_window = false;
  // A map that only a mask method uses, with the mask's window and sinks (the streaming cache's
  // positions under the Lambda mask): no method of its own, not in RelMapNames.
  bool mask_only = false;
  // The PositionMap of a resolved method (its window, ints and real).
  void (*build)(const RelMapMethod& rel, PositionMap& map) = nullptr;
  int (*segment_of)(const PositionMap& m, int64_t i, int64_t j) = nullptr;
  int64_t (*segment_run_end)(const PositionMap& m, int64_t i, int64_t j) = nullptr;
  uint32_t (*segments_in)(const PositionMap& m, int64_t q_lo, int64_t q_hi, int64_t k_lo,
                          int64_t k_hi) = nullptr;
  double (*query_pos)(const PositionMap& m, int seg, int64_t i) = nullptr;
  double (*key_pos)(const PositionMap& m, int seg, int64_t j) = nullptr;
  // The first query of 0 .. N - 1 from which on the largest relative position is reached
  // (src/eval/rotation.cc); null: N - 1, for maps whose positions never decrease with i.
  int64_t (*first_widest_query)(const PositionMap& m, int64_t N) = nullptr;
  // What `stretch inspect` prints for the map.
  std::string (*describe)(const PositionMap& m) = nullptr;
  // llama.cpp's flags that select this map (MethodFromLlamaCpp); null: none. `type` is the
  // frequency scaling the other flags chose (none, linear, yarn).
  void (*from_llama_cpp)(const LlamaCppRopeFlags& flags, const std::string& type,
                         Method& m) = nullptr;

  bool IsIdentity() const { return name.empty(); }
};

// The registry: every map, identity first, by rank.
std::span<const RelMapDescriptor* const> RelMaps();
// The map of a spec name, or null.
const RelMapDescriptor* FindRelMap(std::string_view name);
// The map with clamps_at_window (a Lambda mask's).
const RelMapDescriptor& ClampMap();
// "name1, name2, ...": the maps with a spec name.
std::string RelMapNames();

// floor(a / b) for b > 0 and any sign of a.
inline int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// Maps of two segments split at an edge e on i - j: near (0) below it, far (1) from it on.
inline int NearFarSegmentOf(int64_t edge, int64_t i, int64_t j) { return i - j >= edge ? 1 : 0; }
inline int64_t NearFarRunEnd(int64_t edge, int64_t i, int64_t j) {
  // Far while i - j >= edge, i.e. j <= i - edge; near after.
  return j <= i - edge ? i - edge + 1 : std::numeric_limits<int64_t>::max();
}
inline uint32_t NearFarSegmentsIn(int64_t edge, int64_t q_lo, int64_t q_hi, int64_t k_lo,
                                  int64_t k_hi) {
  const int64_t d_lo = q_lo - k_hi, d_hi = q_hi - k_lo;
  uint32_t bits = 0;
  if (d_lo < edge) bits |= 1u;
  if (d_hi >= edge) bits |= 2u;
  return bits;
}

namespace rel_maps {
// The identity map, i - j (src/position/maps/identity.cc): the default of RelMapMethod.
extern const RelMapDescriptor identity_map;
}  // namespace rel_maps

}  // namespace stretch
