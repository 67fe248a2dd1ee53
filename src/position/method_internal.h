// Internal to src/position's method files (method.cc: names, keys and the spec grammar;
// method_translate.cc: llama.cpp flags and HF rope_scaling; method_check.cc: validation and
// defaults; rope.cc: frequencies): the table of method names and their keys, and the helpers
// they share.
#pragma once

#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/position/method.h"
#include "src/position/rel_map.h"

namespace stretch::method_internal {

// ---------------------------------------------------------------------------------------------
// Names and keys

// Spec keys of the rope and mask parts, in the order CanonicalSpec prints them. A relative map's
// own keys (RelMapDescriptor::keys) print before them.
enum class Key : int {
  kFactor,
  kSinks,
  kWindow,
  kOrig,
  kBetaFast,
  kBetaSlow,
  kAttentionFactor,
  kMscale,
  kMscaleAllDim,
  kTruncate,
  kLow,
  kHigh,
  kShort,
  kLong,
  kBase,
  kCount,
};
// clang-format off
inline constexpr std::string_view kKeyNames[] = {
    "factor", "sinks",  "window",
    "orig",   "beta_fast", "beta_slow",   "attention_factor", "mscale", "mscale_all_dim",
    "truncate", "low",  "high",           "short",    "long",  "base",
};
// clang-format on
static_assert(std::size(kKeyNames) == static_cast<size_t>(Key::kCount));

using KeySet = uint32_t;
constexpr KeySet Bit(Key k) { return KeySet{1} << static_cast<int>(k); }
// Every method accepts base.
template <typename... K>
constexpr KeySet Keys(K... k) {
  return (Bit(Key::kBase) | ... | Bit(k));
}
inline constexpr KeySet kYarnKeys =
    Keys(Key::kOrig, Key::kBetaFast, Key::kBetaSlow, Key::kAttentionFactor, Key::kMscale,
         Key::kMscaleAllDim, Key::kTruncate);

// One spec name: a rope scaling, a relative map (with its own keys besides `keys`) and a mask.
struct MethodInfo {
  std::string_view name;
  RopeScaling scaling;
  ScaleMode mode;
  const RelMapDescriptor* rel;
  MaskKind mask;
  KeySet keys;
};

// Every spec name: the rope methods, one per relative map of the registry (rel_map.h), the masks.
std::span<const MethodInfo> Methods();

std::string KnownNames();
std::string KeyList(KeySet keys);
// The keys a spec name takes, for messages: its map's keys, then KeyList(info.keys).
std::string AllowedKeys(const MethodInfo& info);
const MethodInfo* FindMethod(std::string_view name);
const MethodInfo& FindMethodOrDie(std::string_view name);
// The table row of a method. A method built by hand may combine parts that no spec name
// expresses (say a relative map over YaRN); it is named after its relative map, else its mask,
// else its rope part, and CanonicalSpec prints that name's keys only.
const MethodInfo& InfoOf(const Method& m);
Method MethodOf(const MethodInfo& info);

// `where` names the object: `method "yarn"`, `rope_scaling (rope_type "yarn")`.
[[noreturn]] void BadValue(std::string_view where, std::string_view key, std::string_view text,
                           std::string_view problem, std::string_view allowed);
// A plain decimal number (4, 0.5, 1e-3, 1e+20), read back exactly; `allowed` for messages.
double ParseNumber(std::string_view where, std::string_view key, std::string_view text,
                   std::string_view allowed);
int64_t ParsePositiveInteger(std::string_view where, std::string_view key, std::string_view text);
// "1/2.5/4"
std::string JoinList(const std::vector<double>& v);
// Sets one key of `m` (a method of kind `info`) from its text. `shown` is the key's name as the
// user wrote it (a spec key or an HF key) for messages.
void SetKey(const MethodInfo& info, Method& m, Key key, std::string_view shown,
            std::string_view text, std::string_view where);

// "{where}: {key}={v} is larger than the context ({fed_len} tokens) (allowed: 1 .. {fed_len})"
[[noreturn]] void LargerThanContext(std::string_view where, std::string_view key, int64_t v,
                                    int64_t fed_len);

// `method "yarn"`
std::string Where(const Method& m);
// Checks between fields that need no model: beta_fast > beta_slow, high > low, and the pairs of
// given lengths that must be ordered (a relative map's, Lambda sinks < window). Defaults are
// checked by ValidateMethod once they are known.
void CheckFieldPairs(const Method& m, std::string_view where);

// YaRN's attention scale for a factor s: 1 + 0.1 mscale ln s (1 for s <= 1).
double GetMscale(double scale, double mscale);

}  // namespace stretch::method_internal
