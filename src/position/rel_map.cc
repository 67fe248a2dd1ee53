// The registry of relative maps (rel_map.h).
//
// Adding a map = one source file in src/position/maps/ defining its RelMapDescriptor
// `stretch::rel_maps::<file name>_map` (the build lists that folder into this registry, and
// `rank` places it among the others), its reference in reference/position.h (the map as its paper
// defines it, pair by pair), and its rows in the tests (tests/position: its spec, defaults and
// errors; its segments are checked against the reference there).
#include "src/position/rel_map.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "src/core/check.h"

namespace stretch {

namespace rel_maps {
// rel_map_list.inc: one STRETCH_REL_MAP(file) per file of src/position/maps/ (CMakeLists.txt).
#define STRETCH_REL_MAP(file) extern const RelMapDescriptor file##_map;
#include "src/position/rel_map_list.inc"
#undef STRETCH_REL_MAP
}  // namespace rel_maps

namespace {

#define STRETCH_REL_MAP(file) &rel_maps::file##_map,
constexpr const RelMapDescriptor* kUnsorted[] = {
#include "src/position/rel_map_list.inc"
};
#undef STRETCH_REL_MAP

std::array<const RelMapDescriptor*, std::size(kUnsorted)> Sorted() {
  std::array<const RelMapDescriptor*, std::size(kUnsorted)> out;
  std::copy(std::begin(kUnsorted), std::end(kUnsorted), out.begin());
  std::stable_sort(
      out.begin(), out.end(),
      [](const RelMapDescriptor* a, const RelMapDescriptor* b) { return a->rank < b->rank; });
  return out;
}

}  // namespace

std::span<const RelMapDescriptor* const> RelMaps() {
  static const auto maps = Sorted();
  return maps;
}

const RelMapDescriptor* FindRelMap(std::string_view name) {
  for (const RelMapDescriptor* map : RelMaps()) {
    if (!map->IsIdentity() && map->name == name) return map;
  }
  return nullptr;
}

const RelMapDescriptor& ClampMap() {
  for (const RelMapDescriptor* map : RelMaps()) {
    if (map->clamps_at_window) return *map;
  }
  STRETCH_CHECK(false, "no relative map clamps at its window");
  return rel_maps::identity_map;
}

std::string RelMapNames() {
  std::string out;
  for (const RelMapDescriptor* map : RelMaps()) {
    if (map->IsIdentity() || map->mask_only) continue;
    if (!out.empty()) out += ", ";
    out += map->name;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// RelMapMethod (method.h)

namespace {
const RelKey& KeyOf(const RelMapDescriptor& map, std::string_view key) {
  for (const RelKey& k : map.keys) {
    if (k.name == key) return k;
  }
  STRETCH_CHECK(false, "map \"{}\" has no key \"{}\"", map.name, key);
  return map.keys[0];
}
}  // namespace

bool RelMapMethod::IsIdentity() const { return map->IsIdentity(); }

double RelMapMethod::Param(std::string_view key) const {
  switch (KeyOf(*map, key).slot) {
    case RelSlot::kWindow: return static_cast<double>(window);
    case RelSlot::kInt0: return static_cast<double>(ints[0]);
    case RelSlot::kInt1: return static_cast<double>(ints[1]);
    case RelSlot::kReal: return real;
  }
  return 0.0;
}

void RelMapMethod::SetParam(std::string_view key, double value) {
  switch (KeyOf(*map, key).slot) {
    case RelSlot::kWindow: window = static_cast<int64_t>(value); return;
    case RelSlot::kInt0: ints[0] = static_cast<int64_t>(value); return;
    case RelSlot::kInt1: ints[1] = static_cast<int64_t>(value); return;
    case RelSlot::kReal: real = value; return;
  }
}

}  // namespace stretch
