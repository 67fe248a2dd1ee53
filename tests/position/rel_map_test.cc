// The registry of relative maps (src/position/rel_map.h): every map's descriptor is complete and
// consistent, and the registry lists the maps in the order specs and messages name them.
#include "src/position/rel_map.h"

#include <gtest/gtest.h>

#include <string>

#include "src/position/method.h"
#include "src/position/plan.h"

namespace stretch {
namespace {

TEST(RelMapRegistry, ListsTheMapsInSpecOrder) {
  EXPECT_EQ(RelMapNames(), "rerope, leaky-rerope, self-extend, string, dca");
  ASSERT_FALSE(RelMaps().empty());
  EXPECT_TRUE(RelMaps()[0]->IsIdentity());
  EXPECT_EQ(RelMaps()[0], &rel_maps::identity_map);
  EXPECT_EQ(FindRelMap("no-such-map"), nullptr);
  EXPECT_EQ(FindRelMap(""), nullptr);  // the identity has no spec name
}

TEST(RelMapRegistry, EveryDescriptorIsComplete) {
  int clamps = 0, identities = 0;
  int rank = -1;
  for (const RelMapDescriptor* map : RelMaps()) {
    SCOPED_TRACE(std::string(map->name));
    EXPECT_GT(map->rank, rank);  // distinct ranks: a stable order
    rank = map->rank;
    identities += map->IsIdentity() ? 1 : 0;
    clamps += map->clamps_at_window ? 1 : 0;
    if (!map->IsIdentity()) {
      EXPECT_EQ(FindRelMap(map->name), map);
      EXPECT_EQ(ParseMethod(map->name).rel.map, map);
      EXPECT_EQ(MethodName(ParseMethod(map->name)), map->name);
    }
    EXPECT_GE(map->segments, 1);
    EXPECT_LE(map->segments, kMaxRelSegments);
    EXPECT_GE(map->key_slots, 1);
    EXPECT_LE(map->key_slots, kMaxKeySlots);
    for (int seg = 0; seg < map->segments; ++seg) {
      EXPECT_GE(map->slot_of[static_cast<size_t>(seg)], 0);
      EXPECT_LT(map->slot_of[static_cast<size_t>(seg)], map->key_slots);
    }
    EXPECT_LT(map->unrotated_slot, map->key_slots);
    for (const RelKey& key : map->keys) {
      if (key.slot == RelSlot::kReal) {
        EXPECT_NE(map->parse_real, nullptr) << key.name;
      }
    }
    EXPECT_NE(map->build, nullptr);
    EXPECT_NE(map->segment_of, nullptr);
    EXPECT_NE(map->segment_run_end, nullptr);
    EXPECT_NE(map->segments_in, nullptr);
    EXPECT_NE(map->query_pos, nullptr);
    EXPECT_NE(map->key_pos, nullptr);
    EXPECT_NE(map->describe, nullptr);
  }
  EXPECT_EQ(identities, 1);
  EXPECT_EQ(clamps, 1);  // the map a Lambda mask sees its sinks through
  EXPECT_TRUE(ClampMap().clamps_at_window);
}

}  // namespace
}  // namespace stretch
