// Position methods (method.h): the names, their keys and the spec grammar with its canonical
// printing. The llama.cpp and HF translations are in method_translate.cc, validation and defaults
// in method_check.cc, the frequency math of every RoPE scaling in rope.cc.
#include "src/position/method.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/method_internal.h"
#include "src/position/rel_map.h"

namespace stretch {
namespace rel_maps {
extern const RelMapDescriptor streaming_map;
}  // namespace rel_maps
namespace method_internal {

namespace {

constexpr MethodInfo kRopeMethods[] = {
    {"direct", RopeScaling::kNone, ScaleMode::kStatic, nullptr, MaskKind::kCausal, Keys()},
    {"pi", RopeScaling::kLinear, ScaleMode::kStatic, nullptr, MaskKind::kCausal,
     Keys(Key::kFactor)},
    {"ntk", RopeScaling::kNtk, ScaleMode::kStatic, nullptr, MaskKind::kCausal, Keys(Key::kFactor)},
    {"ntk-fixed", RopeScaling::kNtkFixed, ScaleMode::kStatic, nullptr, MaskKind::kCausal,
     Keys(Key::kFactor)},
    {"yarn", RopeScaling::kYarn, ScaleMode::kStatic, nullptr, MaskKind::kCausal,
     kYarnKeys | Bit(Key::kFactor)},
    {"llama3", RopeScaling::kLlama3, ScaleMode::kStatic, nullptr, MaskKind::kCausal,
     Keys(Key::kFactor, Key::kOrig, Key::kLow, Key::kHigh)},
    {"longrope", RopeScaling::kLongRope, ScaleMode::kStatic, nullptr, MaskKind::kCausal,
     Keys(Key::kFactor, Key::kOrig, Key::kAttentionFactor, Key::kShort, Key::kLong)},
    {"dynamic-ntk", RopeScaling::kNtk, ScaleMode::kDynamic, nullptr, MaskKind::kCausal, Keys()},
    {"dynamic-yarn", RopeScaling::kYarn, ScaleMode::kDynamic, nullptr, MaskKind::kCausal,
     kYarnKeys},
    // LongRoPE's set chosen per query position (i + 1 > orig: long), every key re-rotated.
    {"dynamic-longrope", RopeScaling::kLongRope, ScaleMode::kDynamic, nullptr, MaskKind::kCausal,
     Keys(Key::kOrig, Key::kAttentionFactor, Key::kShort, Key::kLong)},
};
constexpr MethodInfo kMaskMethods[] = {
    {"window", RopeScaling::kNone, ScaleMode::kStatic, nullptr, MaskKind::kWindow,
     Keys(Key::kWindow)},
    {"lambda", RopeScaling::kNone, ScaleMode::kStatic, nullptr, MaskKind::kLambda,
     Keys(Key::kSinks, Key::kWindow)},
    {"blockwise", RopeScaling::kNone, ScaleMode::kStatic, nullptr, MaskKind::kBlock,
     Keys(Key::kWindow)},
    // Llama 4's chunked attention (HF modeling_llama4, attention_chunk_size): window = the chunk.
    {"chunked", RopeScaling::kNone, ScaleMode::kStatic, nullptr, MaskKind::kChunk,
     Keys(Key::kWindow)},
    // StreamingLLM: the Lambda mask with the cache's positions (src/position/maps/streaming.cc).
    {"streaming", RopeScaling::kNone, ScaleMode::kStatic, &rel_maps::streaming_map,
     MaskKind::kLambda, Keys(Key::kSinks, Key::kWindow)},
};

std::vector<MethodInfo> BuildMethods() {
  std::vector<MethodInfo> out;
  for (MethodInfo info : kRopeMethods) {
    info.rel = &rel_maps::identity_map;
    out.push_back(info);
  }
  for (const RelMapDescriptor* map : RelMaps()) {
    if (map->IsIdentity() || map->mask_only) continue;
    out.push_back(
        {map->name, RopeScaling::kNone, ScaleMode::kStatic, map, MaskKind::kCausal, Keys()});
  }
  for (MethodInfo info : kMaskMethods) {
    if (info.rel == nullptr) info.rel = &rel_maps::identity_map;
    out.push_back(info);
  }
  return out;
}

}  // namespace

std::span<const MethodInfo> Methods() {
  static const std::vector<MethodInfo> methods = BuildMethods();
  return methods;
}

std::string KnownNames() {
  std::string out;
  for (const MethodInfo& info : Methods()) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

std::string KeyList(KeySet keys) {
  std::string out;
  for (int k = 0; k < static_cast<int>(Key::kCount); ++k) {
    if (!(keys & (KeySet{1} << k))) continue;
    if (!out.empty()) out += ", ";
    out += kKeyNames[k];
  }
  return out;
}

std::string AllowedKeys(const MethodInfo& info) {
  std::string out;
  for (const RelKey& key : info.rel->keys) {
    out += key.name;
    out += ", ";
  }
  return out + KeyList(info.keys);
}

const MethodInfo* FindMethod(std::string_view name) {
  for (const MethodInfo& info : Methods()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

const MethodInfo& FindMethodOrDie(std::string_view name) {
  const MethodInfo* info = FindMethod(name);
  STRETCH_CHECK(info != nullptr, "method {}", name);
  return *info;
}

const MethodInfo& InfoOf(const Method& m) {
  const std::span<const MethodInfo> methods = Methods();
  for (const MethodInfo& info : methods) {
    if (info.scaling == m.rope.scaling && info.mode == m.rope.mode && info.rel == m.rel.map &&
        info.mask == m.mask.kind) {
      return info;
    }
  }
  for (const MethodInfo& info : methods) {
    if (!m.rel.IsIdentity() && info.rel == m.rel.map) return info;
  }
  for (const MethodInfo& info : methods) {
    if (m.mask.kind != MaskKind::kCausal && info.mask == m.mask.kind) return info;
  }
  for (const MethodInfo& info : methods) {
    if (info.rel->IsIdentity() && info.mask == MaskKind::kCausal &&
        info.scaling == m.rope.scaling && info.mode == m.rope.mode) {
      return info;
    }
  }
  for (const MethodInfo& info : methods) {
    if (info.rel->IsIdentity() && info.mask == MaskKind::kCausal &&
        info.scaling == m.rope.scaling) {
      return info;
    }
  }
  return methods[0];
}

Method MethodOf(const MethodInfo& info) {
  Method m;
  m.rope.scaling = info.scaling;
  m.rope.mode = info.mode;
  m.rel.map = info.rel;
  m.mask.kind = info.mask;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Values

[[noreturn]] void BadValue(std::string_view where, std::string_view key, std::string_view text,
                           std::string_view problem, std::string_view allowed) {
  Fail("{}: {}={} {} (allowed: {})", where, key, text, problem, allowed);
}

// A plain decimal number (4, 0.5, 1e-3, 1e+20): what fmt's "{}" prints, read back exactly.
double ParseNumber(std::string_view where, std::string_view key, std::string_view text,
                   std::string_view allowed) {
  double v = 0.0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, v, std::chars_format::general);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    BadValue(where, key, text, "is not a number", allowed);
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(v)) {
    BadValue(where, key, text, "is not a finite number", allowed);
  }
  return v;
}

int64_t ParsePositiveInteger(std::string_view where, std::string_view key, std::string_view text) {
  int64_t v = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v <= 0) {
    BadValue(where, key, text, "is not a positive integer", "a positive integer");
  }
  return v;
}

std::vector<double> ParseList(std::string_view where, std::string_view key, std::string_view text) {
  constexpr std::string_view kAllowed = "positive numbers separated by '/'";
  std::vector<double> out;
  size_t at = 0;
  while (true) {
    const size_t slash = text.find('/', at);
    const std::string_view item =
        text.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    double v = 0.0;
    const auto [ptr, ec] =
        std::from_chars(item.data(), item.data() + item.size(), v, std::chars_format::general);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() ||
        !std::isfinite(v)) {
      BadValue(where, key, text, fmt::format("has \"{}\", which is not a number", item), kAllowed);
    }
    if (!(v > 0.0)) {
      BadValue(where, key, text, fmt::format("has {}, which is not positive", item), kAllowed);
    }
    out.push_back(v);
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return out;
}

std::string JoinList(const std::vector<double>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += '/';
    out += fmt::format("{}", v[i]);
  }
  return out;
}

void SetKey(const MethodInfo& /*info*/, Method& m, Key key, std::string_view shown,
            std::string_view text, std::string_view where) {
  switch (key) {
    case Key::kFactor: {
      const double v = ParseNumber(where, shown, text, "a number >= 1");
      if (!(v >= 1.0)) BadValue(where, shown, text, "is below 1", "a number >= 1");
      m.rope.factor = v;
      return;
    }
    case Key::kBase: {
      const double v = ParseNumber(where, shown, text, "a number > 1");
      if (!(v > 1.0)) BadValue(where, shown, text, "is not above 1", "a number > 1");
      m.rope.base = v;
      return;
    }
    case Key::kBetaFast:
    case Key::kBetaSlow:
    case Key::kAttentionFactor:
    case Key::kMscale:
    case Key::kMscaleAllDim:
    case Key::kLow:
    case Key::kHigh: {
      const double v = ParseNumber(where, shown, text, "a number > 0");
      if (!(v > 0.0)) BadValue(where, shown, text, "is not positive", "a number > 0");
      switch (key) {
        case Key::kBetaFast: m.rope.beta_fast = v; break;
        case Key::kBetaSlow: m.rope.beta_slow = v; break;
        case Key::kAttentionFactor: m.rope.attention_factor = v; break;
        case Key::kMscale: m.rope.mscale = v; break;
        case Key::kMscaleAllDim: m.rope.mscale_all_dim = v; break;
        case Key::kLow: m.rope.low_freq_factor = v; break;
        default: m.rope.high_freq_factor = v; break;
      }
      return;
    }
    case Key::kTruncate:
      if (text == "true") {
        m.rope.truncate = true;
      } else if (text == "false") {
        m.rope.truncate = false;
      } else {
        BadValue(where, shown, text, "is not true or false", "true or false");
      }
      return;
    case Key::kShort: m.rope.short_factor = ParseList(where, shown, text); return;
    case Key::kLong: m.rope.long_factor = ParseList(where, shown, text); return;
    case Key::kOrig: m.rope.original_length = ParsePositiveInteger(where, shown, text); return;
    case Key::kWindow: m.mask.window = ParsePositiveInteger(where, shown, text); return;
    case Key::kSinks:
      if (text == "0") {
        BadValue(where, shown, text, "is not a positive integer",
                 "a positive integer; a Lambda mask without sinks is `window:window=W`");
      }
      m.mask.sinks = ParsePositiveInteger(where, shown, text);
      return;
    case Key::kCount: break;
  }
  STRETCH_CHECK(false, "key {}", static_cast<int>(key));
}

// A relative map's key.
void SetRelKey(const RelMapDescriptor& map, RelMapMethod& rel, RelSlot slot, std::string_view shown,
               std::string_view text, std::string_view where) {
  switch (slot) {
    case RelSlot::kWindow: rel.window = ParsePositiveInteger(where, shown, text); return;
    case RelSlot::kInt0: rel.ints[0] = ParsePositiveInteger(where, shown, text); return;
    case RelSlot::kInt1: rel.ints[1] = ParsePositiveInteger(where, shown, text); return;
    case RelSlot::kReal: rel.real = map.parse_real(shown, text, where); return;
  }
}

std::optional<std::string> RelKeyText(const RelMapMethod& rel, RelSlot slot) {
  const int64_t v = slot == RelSlot::kWindow ? rel.window
                    : slot == RelSlot::kInt0 ? rel.ints[0]
                    : slot == RelSlot::kInt1 ? rel.ints[1]
                                             : 0;
  if (slot == RelSlot::kReal) {
    if (rel.real == 0.0) return std::nullopt;
    if (rel.real < 0.0) return "s";  // a symbolic value: leaky-rerope's k=s (L'/L)
    return fmt::format("{}", rel.real);
  }
  if (v == 0) return std::nullopt;
  return fmt::format("{}", v);
}

// The key's value in canonical text, or nothing when it is the default.
std::optional<std::string> KeyText(const Method& m, Key key) {
  auto number = [](double v, double default_value) -> std::optional<std::string> {
    if (v == default_value) return std::nullopt;
    return fmt::format("{}", v);
  };
  auto integer = [](int64_t v) -> std::optional<std::string> {
    if (v == 0) return std::nullopt;
    return fmt::format("{}", v);
  };
  switch (key) {
    case Key::kFactor: return number(m.rope.factor, 0.0);
    case Key::kBase: return number(m.rope.base, 0.0);
    case Key::kBetaFast: return number(m.rope.beta_fast, RopeMethod{}.beta_fast);
    case Key::kBetaSlow: return number(m.rope.beta_slow, RopeMethod{}.beta_slow);
    case Key::kAttentionFactor: return number(m.rope.attention_factor, 0.0);
    case Key::kMscale: return number(m.rope.mscale, 0.0);
    case Key::kMscaleAllDim: return number(m.rope.mscale_all_dim, 0.0);
    case Key::kTruncate:
      if (m.rope.truncate == RopeMethod{}.truncate) return std::nullopt;
      return std::string(m.rope.truncate ? "true" : "false");
    case Key::kOrig: return integer(m.rope.original_length);
    case Key::kLow: return number(m.rope.low_freq_factor, RopeMethod{}.low_freq_factor);
    case Key::kHigh: return number(m.rope.high_freq_factor, RopeMethod{}.high_freq_factor);
    case Key::kShort:
      if (m.rope.short_factor.empty()) return std::nullopt;
      return JoinList(m.rope.short_factor);
    case Key::kLong:
      if (m.rope.long_factor.empty()) return std::nullopt;
      return JoinList(m.rope.long_factor);
    case Key::kWindow: return integer(m.mask.window);
    case Key::kSinks: return integer(m.mask.sinks);
    case Key::kCount: break;
  }
  STRETCH_CHECK(false, "key {}", static_cast<int>(key));
  return std::nullopt;
}

}  // namespace method_internal

using namespace method_internal;

// ---------------------------------------------------------------------------------------------
// Specs

std::string_view MethodName(const Method& m) { return InfoOf(m).name; }

std::vector<std::string_view> MethodSpecNames() {
  std::vector<std::string_view> names;
  for (const method_internal::MethodInfo& info : method_internal::Methods()) {
    names.push_back(info.name);
  }
  return names;
}

Method ParseMethod(std::string_view spec, std::string_view also_known) {
  std::string_view body = spec;
  bool logn = false;
  const size_t plus = body.rfind('+');
  if (plus != std::string_view::npos) {
    const std::string_view suffix = body.substr(plus + 1);
    // A '+' inside a number (1e+20) is followed by digits; a suffix is a word.
    const bool word = suffix.empty() || !(suffix[0] >= '0' && suffix[0] <= '9');
    if (suffix == "logn") {
      logn = true;
      body = body.substr(0, plus);
      if (body.ends_with("+logn")) Fail("method spec \"{}\": +logn given twice", spec);
    } else if (word) {
      Fail("method spec \"{}\": unknown suffix \"+{}\" (allowed: +logn)", spec, suffix);
    }
  }
  const size_t colon = body.find(':');
  const std::string_view name = body.substr(0, colon);
  const MethodInfo* info = FindMethod(name);
  if (info == nullptr) {
    Fail("unknown method \"{}\" (known: {}{}{})", name, KnownNames(),
         also_known.empty() ? "" : ", ", also_known);
  }
  const std::string where = fmt::format("method \"{}\"", info->name);
  Method m = MethodOf(*info);
  m.logn = logn;
  if (colon == std::string_view::npos) return m;

  std::string_view rest = body.substr(colon + 1);
  if (rest.empty()) Fail("{}: nothing after ':' (allowed keys: {})", where, AllowedKeys(*info));
  const std::span<const RelKey> map_keys = info->rel->keys;
  // A map's keys take the bits above the rope and mask keys.
  constexpr int kMapBit0 = static_cast<int>(Key::kCount);
  STRETCH_CHECK(kMapBit0 + map_keys.size() <= 32, "{} keys", map_keys.size());
  KeySet seen = 0;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      Fail("{}: \"{}\" is not key=value (allowed keys: {})", where, item, AllowedKeys(*info));
    }
    const std::string_view key_text = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    size_t map_key = 0;
    while (map_key < map_keys.size() && map_keys[map_key].name != key_text) ++map_key;
    int key = 0;
    while (key < static_cast<int>(Key::kCount) && kKeyNames[key] != key_text) ++key;
    const KeySet bit = map_key < map_keys.size()             ? KeySet{1} << (kMapBit0 + map_key)
                       : key < static_cast<int>(Key::kCount) ? KeySet{1} << key
                                                             : 0;
    if (map_key == map_keys.size() && !(info->keys & bit)) {
      if (key_text == "factor" && info->mode == ScaleMode::kDynamic) {
        Fail(
            "{}: factor={} is not allowed for a dynamic method (allowed keys: {}; query i uses "
            "s_i = max(L, i + 1) / L)",
            where, value, AllowedKeys(*info));
      }
      Fail("{}: unknown key \"{}\" (allowed: {})", where, key_text, AllowedKeys(*info));
    }
    if (seen & bit) Fail("{}: key \"{}\" given twice", where, key_text);
    seen |= bit;
    if (map_key < map_keys.size()) {
      SetRelKey(*info->rel, m.rel, map_keys[map_key].slot, key_text, value, where);
    } else {
      SetKey(*info, m, static_cast<Key>(key), key_text, value, where);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  CheckFieldPairs(m, where);
  return m;
}

std::string CanonicalSpec(const Method& m) {
  const MethodInfo& info = InfoOf(m);
  std::string out(info.name);
  char sep = ':';
  auto add = [&](std::string_view key, const std::optional<std::string>& text) {
    if (!text) return;
    out += sep;
    out += key;
    out += '=';
    out += *text;
    sep = ',';
  };
  for (const RelKey& key : info.rel->keys) add(key.name, RelKeyText(m.rel, key.slot));
  for (int k = 0; k < static_cast<int>(Key::kCount); ++k) {
    if (!(info.keys & (KeySet{1} << k))) continue;
    add(kKeyNames[k], KeyText(m, static_cast<Key>(k)));
  }
  if (m.logn) out += "+logn";
  return out;
}

namespace {
bool SameRope(const RopeMethod& a, const RopeMethod& b) {
  return a.scaling == b.scaling && a.mode == b.mode && a.factor == b.factor && a.base == b.base &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
         a.attention_factor == b.attention_factor && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.truncate == b.truncate &&
         a.original_length == b.original_length && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor && a.short_factor == b.short_factor &&
         a.long_factor == b.long_factor;
}
}  // namespace

bool operator==(const Method& a, const Method& b) {
  return SameRope(a.rope, b.rope) && a.rel.map == b.rel.map && a.rel.window == b.rel.window &&
         a.rel.ints == b.rel.ints && a.rel.real == b.rel.real && a.mask.kind == b.mask.kind &&
         a.mask.window == b.mask.window && a.mask.sinks == b.mask.sinks && a.logn == b.logn;
}

}  // namespace stretch
