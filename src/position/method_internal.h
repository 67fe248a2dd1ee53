// Internal to src/position's method files (method.cc: names, keys and the spec grammar;
// method_translate.cc: llama.cpp flags and HF rope_scaling; method_check.cc: validation and
// defaults; rope.cc: frequencies): the table of method names and their keys, and the helpers
// they share.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "src/position/method.h"

namespace stretch::method_internal {

// ---------------------------------------------------------------------------------------------
// Names and keys

// Spec keys, in the order CanonicalSpec prints them.
enum class Key : int {
  kFactor,
  kGroup,
  kShift,
  kSinks,
  kChunk,
  kWindow,
  kK,
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
    "factor", "group",  "shift",          "sinks",    "chunk", "window", "k",
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

struct MethodInfo {
  std::string_view name;
  RopeScaling scaling;
  ScaleMode mode;
  RelMapKind rel;
  MaskKind mask;
  KeySet keys;
};

inline constexpr MethodInfo kMethods[] = {
    {"direct", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kCausal,
     Keys()},
    {"pi", RopeScaling::kLinear, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kCausal,
     Keys(Key::kFactor)},
    {"ntk", RopeScaling::kNtk, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kCausal,
     Keys(Key::kFactor)},
    {"ntk-fixed", RopeScaling::kNtkFixed, ScaleMode::kStatic, RelMapKind::kIdentity,
     MaskKind::kCausal, Keys(Key::kFactor)},
    {"yarn", RopeScaling::kYarn, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kCausal,
     kYarnKeys | Bit(Key::kFactor)},
    {"llama3", RopeScaling::kLlama3, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kCausal,
     Keys(Key::kFactor, Key::kOrig, Key::kLow, Key::kHigh)},
    {"longrope", RopeScaling::kLongRope, ScaleMode::kStatic, RelMapKind::kIdentity,
     MaskKind::kCausal,
     Keys(Key::kFactor, Key::kOrig, Key::kAttentionFactor, Key::kShort, Key::kLong)},
    {"dynamic-ntk", RopeScaling::kNtk, ScaleMode::kDynamic, RelMapKind::kIdentity,
     MaskKind::kCausal, Keys()},
    {"dynamic-yarn", RopeScaling::kYarn, ScaleMode::kDynamic, RelMapKind::kIdentity,
     MaskKind::kCausal, kYarnKeys},
    {"rerope", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kReRope, MaskKind::kCausal,
     Keys(Key::kWindow)},
    {"leaky-rerope", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kLeakyReRope,
     MaskKind::kCausal, Keys(Key::kWindow, Key::kK)},
    {"self-extend", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kSelfExtend,
     MaskKind::kCausal, Keys(Key::kGroup, Key::kWindow)},
    {"string", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kString, MaskKind::kCausal,
     Keys(Key::kShift, Key::kWindow)},
    {"dca", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kDca, MaskKind::kCausal,
     Keys(Key::kChunk, Key::kWindow)},
    {"window", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kWindow,
     Keys(Key::kWindow)},
    {"lambda", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kLambda,
     Keys(Key::kSinks, Key::kWindow)},
    {"blockwise", RopeScaling::kNone, ScaleMode::kStatic, RelMapKind::kIdentity, MaskKind::kBlock,
     Keys(Key::kWindow)},
};

std::string KnownNames();
std::string KeyList(KeySet keys);
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
// "1/2.5/4"
std::string JoinList(const std::vector<double>& v);
// Sets one key of `m` (a method of kind `info`) from its text. `shown` is the key's name as the
// user wrote it (a spec key or an HF key) for messages.
void SetKey(const MethodInfo& info, Method& m, Key key, std::string_view shown,
            std::string_view text, std::string_view where);

// `method "yarn"`
std::string Where(const Method& m);
// Checks between fields that need no model: beta_fast > beta_slow, high > low, and the pairs of
// given lengths that must be ordered (STRING window < shift, Lambda sinks < window, DCA window <
// chunk). Defaults are checked by ValidateMethod once they are known.
void CheckFieldPairs(const Method& m, std::string_view where);

// YaRN's attention scale for a factor s: 1 + 0.1 mscale ln s (1 for s <= 1).
double GetMscale(double scale, double mscale);

}  // namespace stretch::method_internal
