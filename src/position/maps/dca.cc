// Dual Chunk Attention (An et al. 2024, arXiv 2402.17463; ChunkLlama, github.com/HKUNLP/ChunkLlama
// chunkllama_attn_replace.py): `dca[:chunk=C,window=W]` cuts positions into chunks of
// c = C - W tokens (C the chunk size, W the local window); keys sit at b = j mod c and the
// query's position depends on how many chunks back the key is:
//   segment 0, same chunk:      a = i mod c
//   segment 1, previous chunk:  a = min(i mod c + c, C)
//   segment 2, older chunks:    a = min(2c - 1, C)   (the successive map at i mod c = c - 1)
// so a query's position never passes C. One key slot (j mod c for all three segments).
//
// Defaults: C = L * 3 // 4 and W = L // 16, ChunkLlama's (replace_with_chunkllama:
// `chunk_size = pretraining_length * 3 // 4`, `local_window = pretraining_length // 16`).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::rel_maps {
namespace {

constexpr RelKey kKeys[] = {{"chunk", RelSlot::kInt0}, {"window", RelSlot::kWindow}};

void CheckWindowBelowChunk(int64_t window, int64_t chunk, std::string_view where) {
  if (window >= chunk) {
    Fail("{}: window={} is not below chunk={} (allowed: 1 <= window < chunk)", where, window,
         chunk);
  }
}

// PositionMap: ints[0] = C (chunk size), ints[1] = c = C - W (chunk length).
int64_t ChunkSize(const PositionMap& m) { return m.ints[0]; }
int64_t ChunkLen(const PositionMap& m) { return m.ints[1]; }

}  // namespace

extern const RelMapDescriptor dca_map;
constinit const RelMapDescriptor dca_map = [] {
  RelMapDescriptor d;
  d.name = "dca";
  d.keys = kKeys;
  d.rank = 50;
  d.train_usage = "dca";
  d.check_pairs = [](const RelMapMethod& rel, std::string_view where) {
    if (rel.ints[0] != 0 && rel.window != 0) {
      CheckWindowBelowChunk(rel.window, rel.ints[0], where);
    }
  };
  d.check_call = [](const RelMapMethod& rel, const RopeGeometry& geo, int64_t,
                    std::string_view where) {
    if (rel.ints[0] > geo.train_len) {
      Fail("{}: chunk={} is larger than the training length ({} tokens) (allowed: 2 .. {})", where,
           rel.ints[0], geo.train_len, geo.train_len);
    }
  };
  d.fill_defaults = [](RelMapMethod& rel, const RopeGeometry& geo, int64_t, double) {
    if (rel.ints[0] == 0) rel.ints[0] = std::max<int64_t>(1, geo.train_len * 3 / 4);
    if (rel.window == 0) rel.window = std::max<int64_t>(1, geo.train_len / 16);
  };
  d.check_resolved = [](const RelMapMethod& rel, const RopeGeometry&, std::string_view where) {
    CheckWindowBelowChunk(rel.window, rel.ints[0], where);
  };
  d.segments = 3;
  d.key_slots = 1;
  d.slot_of = {0, 0, 0};
  d.build = [](const RelMapMethod& rel, PositionMap& map) {
    map.window = rel.window;
    map.ints[0] = rel.ints[0];
    map.ints[1] = rel.ints[0] - rel.window;
    STRETCH_CHECK(map.ints[1] >= 1, "dca chunk={} window={}", rel.ints[0], rel.window);
  };
  d.segment_of = [](const PositionMap& m, int64_t i, int64_t j) {
    const int64_t back = FloorDiv(i, ChunkLen(m)) - FloorDiv(j, ChunkLen(m));
    return back <= 0 ? 0 : (back == 1 ? 1 : 2);
  };
  d.segment_run_end = [](const PositionMap& m, int64_t, int64_t j) {
    return (FloorDiv(j, ChunkLen(m)) + 1) * ChunkLen(m);
  };
  d.segments_in = [](const PositionMap& m, int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) {
    const int64_t c = ChunkLen(m);
    const int64_t lo = FloorDiv(q_lo, c) - FloorDiv(k_hi, c);
    const int64_t hi = FloorDiv(q_hi, c) - FloorDiv(k_lo, c);
    uint32_t bits = 0;
    if (lo <= 0) bits |= 1u;
    if (lo <= 1 && hi >= 1) bits |= 2u;
    if (hi >= 2) bits |= 4u;
    return bits;
  };
  d.query_pos = [](const PositionMap& m, int seg, int64_t i) {
    const int64_t c = ChunkLen(m);
    const int64_t r = i % c;
    if (seg == 0) return static_cast<double>(r);
    if (seg == 1) return static_cast<double>(std::min(r + c, ChunkSize(m)));
    return static_cast<double>(std::min(2 * c - 1, ChunkSize(m)));
  };
  d.key_pos = [](const PositionMap& m, int, int64_t j) {
    return static_cast<double>(j % ChunkLen(m));
  };
  // Its positions depend on i mod c: the last c queries cover every residue, each with at least
  // as many chunks behind it as any earlier query of the same residue.
  d.first_widest_query = [](const PositionMap& m, int64_t N) {
    return std::max<int64_t>(0, N - ChunkLen(m));
  };
  d.describe = [](const PositionMap& m) -> std::string {
    return fmt::format(
        "Dual Chunk Attention, chunk size {}, local window {} (chunks of {} "
        "positions): intra-, successive- and inter-chunk maps",
        ChunkSize(m), m.window, ChunkLen(m));
  };
  return d;
}();

}  // namespace stretch::rel_maps
