// Position methods (method.h): the spec grammar, canonical printing, the llama.cpp and HF
// translations, validation, defaults, and the frequency math of every RoPE scaling.
//
// Defaults that ResolveMethod fills (L training length, L' fed length, s the call's scale):
//   factor (s)         max(1, L'/L) when the spec gives none: the scale is fixed per call from the
//                      call's length (DESIGN.md's "locally static" choice); dynamic methods ignore
//                      it and use s_i = max(L, i + 1)/L per query.
//   base               the model's.            orig         L.
//   rerope window      L/2.                    leaky window L/2, leaky k = s (`k=s`); a resolved
//                                              k below 1 is an error, k = 1 is the identity map.
//   self-extend        window W = L/2; group G = the smallest integer G >= 1 with
//                      floor((L'-1)/G) + W - floor(W/G) <= L - 1, i.e. the largest relative
//                      position the model sees (query L'-1 against key 0) stays inside training.
//   window (mask)      window = L.
//   lambda             window = L, sinks = 4: StreamingLLM's attention sinks (Xiao et al. 2023,
//                      arXiv 2309.17453; github.com/mit-han-lab/streaming-llm
//                      examples/run_streaming_llama.py: `--start_size` defaults to 4).
//   blockwise          window B = L (rounded down to even): blockwise causal attention, the test-time
//                      mask of XPOS (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv
//                      2212.10554; the first author's torchscale fork, github.com/sunyt32/torchscale
//                      architecture/decoder.py: blocks of block_size, stepped by half_block_size).
//                      Query i sees its own half-block of B/2 positions and the previous one, so
//                      every relative position stays below B = L; a query sees B/2 + 1 .. B keys. (That
//                      fork's cached decoding keeps a slightly wider span at half-block starts; we
//                      take the prefill mask as the definition, so decoding equals prefill.)
//   string             shift S = int(0.33 * L) and local window W = 128, STRING's defaults
//                      (An et al. 2024, arXiv 2410.18745; github.com/HKUNLP/STRING README:
//                      `shifted_offset=int(0.33 * L), small_local_value=128`, with L the
//                      model's max_position_embeddings). Ours: W is capped at S/2 (at least 1)
//                      so that the small models of this project (L = 256 .. 1024, where 128 would
//                      reach or pass S) still shift positions down; for L >= 776 the cap is 128.
//   dca                chunk = L * 3 // 4 and local window = L // 16, ChunkLlama's defaults
//                      (Dual Chunk Attention, An et al. 2024, arXiv 2402.17463;
//                      github.com/HKUNLP/ChunkLlama chunkllama_attn_replace.py,
//                      replace_with_chunkllama: `chunk_size = pretraining_length * 3 // 4`,
//                      `local_window = pretraining_length // 16`). Keys sit at j mod (chunk -
//                      window) and a query's position never passes chunk (src/position/plan.h).
// A default never goes below 1. Defaults are not checked against L' ("window larger than the
// context" is an error for a value the user gave, not for L/2 on a short call), so ResolveMethod
// takes an unresolved method: resolving twice may reject what the first resolution filled in.
//
// Formula sources (read for the formulas only; nothing is copied):
//   HF transformers src/transformers/modeling_rope_utils.py:
//     _compute_linear_scaling_rope_parameters,
//     _compute_ntk_parameters / _compute_dynamic_ntk_parameters, _compute_yarn_parameters
//     (find_correction_dim, find_correction_range with `truncate`, linear_ramp_factor,
//     get_mscale, the attention_factor rule), _compute_llama3_parameters,
//     _compute_longrope_parameters.
//   llama.cpp common/arg.cpp (flag meanings), src/llama-context.cpp (yarn_ext_factor default:
//     1 for yarn, 0 otherwise), ggml rope_yarn (attention magnitude mscale = attn_factor *
//     (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0), examples/main (grp_attn_w % grp_attn_n).
#include "src/position/method.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/rope.h"

namespace stretch {
namespace {

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
constexpr std::string_view kKeyNames[] = {
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
constexpr KeySet kYarnKeys = Keys(Key::kOrig, Key::kBetaFast, Key::kBetaSlow, Key::kAttentionFactor,
                                  Key::kMscale, Key::kMscaleAllDim, Key::kTruncate);

struct MethodInfo {
  std::string_view name;
  RopeScaling scaling;
  ScaleMode mode;
  RelMapKind rel;
  MaskKind mask;
  KeySet keys;
};

constexpr MethodInfo kMethods[] = {
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

std::string KnownNames() {
  std::string out;
  for (const MethodInfo& info : kMethods) {
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

const MethodInfo* FindMethod(std::string_view name) {
  for (const MethodInfo& info : kMethods) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

const MethodInfo& FindMethodOrDie(std::string_view name) {
  const MethodInfo* info = FindMethod(name);
  STRETCH_CHECK(info != nullptr, "method {}", name);
  return *info;
}

// The table row of a method. A method built by hand may combine parts that no spec name
// expresses (say a relative map over YaRN); it is named after its relative map, else its mask,
// else its rope part, and CanonicalSpec prints that name's keys only.
const MethodInfo& InfoOf(const Method& m) {
  for (const MethodInfo& info : kMethods) {
    if (info.scaling == m.rope.scaling && info.mode == m.rope.mode && info.rel == m.rel.kind &&
        info.mask == m.mask.kind) {
      return info;
    }
  }
  for (const MethodInfo& info : kMethods) {
    if (m.rel.kind != RelMapKind::kIdentity && info.rel == m.rel.kind) return info;
  }
  for (const MethodInfo& info : kMethods) {
    if (m.mask.kind != MaskKind::kCausal && info.mask == m.mask.kind) return info;
  }
  for (const MethodInfo& info : kMethods) {
    if (info.rel == RelMapKind::kIdentity && info.mask == MaskKind::kCausal &&
        info.scaling == m.rope.scaling && info.mode == m.rope.mode) {
      return info;
    }
  }
  for (const MethodInfo& info : kMethods) {
    if (info.rel == RelMapKind::kIdentity && info.mask == MaskKind::kCausal &&
        info.scaling == m.rope.scaling) {
      return info;
    }
  }
  return kMethods[0];
}

Method MethodOf(const MethodInfo& info) {
  Method m;
  m.rope.scaling = info.scaling;
  m.rope.mode = info.mode;
  m.rel.kind = info.rel;
  m.mask.kind = info.mask;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Values

// `where` names the object: `method "yarn"`, `rope_scaling (rope_type "yarn")`.
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

// Sets one key of `m` (a method of kind `info`) from its text. `shown` is the key's name as the
// user wrote it (a spec key or an HF key) for messages.
void SetKey(const MethodInfo& info, Method& m, Key key, std::string_view shown,
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
    case Key::kK:
      if (text == "s") {
        m.rel.leaky_k = 0.0;  // k = s = L'/L, resolved per call
      } else {
        // k = 1 is the identity map (what `k=s` resolves to at s = 1), so a resolved spec
        // printed by CanonicalSpec parses again.
        constexpr std::string_view kAllowed = "a number >= 1, or s for k = L'/L";
        const double v = ParseNumber(where, shown, text, kAllowed);
        if (!(v >= 1.0)) BadValue(where, shown, text, "is below 1", kAllowed);
        m.rel.leaky_k = v;
      }
      return;
    case Key::kOrig: m.rope.original_length = ParsePositiveInteger(where, shown, text); return;
    case Key::kWindow: {
      const int64_t v = ParsePositiveInteger(where, shown, text);
      if (info.mask != MaskKind::kCausal) {
        m.mask.window = v;
      } else {
        m.rel.window = v;
      }
      return;
    }
    case Key::kGroup: m.rel.group = ParsePositiveInteger(where, shown, text); return;
    case Key::kShift: m.rel.shift = ParsePositiveInteger(where, shown, text); return;
    case Key::kChunk: m.rel.chunk = ParsePositiveInteger(where, shown, text); return;
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

// The key's value in canonical text, or nothing when it is the default.
std::optional<std::string> KeyText(const MethodInfo& info, const Method& m, Key key) {
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
    case Key::kWindow:
      return integer(info.mask != MaskKind::kCausal ? m.mask.window : m.rel.window);
    case Key::kK: return number(m.rel.leaky_k, 0.0);
    case Key::kGroup: return integer(m.rel.group);
    case Key::kShift: return integer(m.rel.shift);
    case Key::kChunk: return integer(m.rel.chunk);
    case Key::kSinks: return integer(m.mask.sinks);
    case Key::kCount: break;
  }
  STRETCH_CHECK(false, "key {}", static_cast<int>(key));
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Checks

std::string Where(const Method& m) { return fmt::format("method \"{}\"", InfoOf(m).name); }

// Checks between fields that need no model: beta_fast > beta_slow, high > low, and the pairs of
// given lengths that must be ordered (STRING window < shift, Lambda sinks < window, DCA window <
// chunk). Defaults are checked by ValidateMethod once they are known.
void CheckFieldPairs(const Method& m, std::string_view where) {
  if (m.rope.scaling == RopeScaling::kYarn && !(m.rope.beta_fast > m.rope.beta_slow)) {
    Fail("{}: beta_fast={} is not above beta_slow={} (allowed: beta_fast > beta_slow > 0)", where,
         m.rope.beta_fast, m.rope.beta_slow);
  }
  if (m.rope.scaling == RopeScaling::kLlama3 &&
      !(m.rope.high_freq_factor > m.rope.low_freq_factor)) {
    Fail("{}: high={} is not above low={} (allowed: high > low > 0)", where,
         m.rope.high_freq_factor, m.rope.low_freq_factor);
  }
  if (m.rel.kind == RelMapKind::kString && m.rel.shift != 0 && m.rel.window != 0 &&
      m.rel.window >= m.rel.shift) {
    Fail("{}: window={} is not below shift={} (allowed: 1 <= window < shift)", where, m.rel.window,
         m.rel.shift);
  }
  if (m.rel.kind == RelMapKind::kDca && m.rel.chunk != 0 && m.rel.window != 0 &&
      m.rel.window >= m.rel.chunk) {
    Fail("{}: window={} is not below chunk={} (allowed: 1 <= window < chunk)", where, m.rel.window,
         m.rel.chunk);
  }
  if (m.mask.kind == MaskKind::kLambda && m.mask.sinks != 0 && m.mask.window != 0 &&
      m.mask.sinks >= m.mask.window) {
    Fail("{}: sinks={} is not below window={} (allowed: 1 <= sinks < window)", where, m.mask.sinks,
         m.mask.window);
  }
  if (m.mask.kind == MaskKind::kBlock && m.mask.window != 0 &&
      (m.mask.window < 2 || m.mask.window % 2 != 0)) {
    Fail(
        "{}: window={} is not an even number >= 2 (allowed: 2, 4, 6, ...: a query sees its own "
        "half-block of window/2 positions and the one before it)",
        where, m.mask.window);
  }
}

// Field ranges, for methods built by hand (the parser checks each value as it reads it).
void CheckFieldRanges(const Method& m, std::string_view where) {
  auto bad = [&](std::string_view key, auto value, std::string_view allowed) {
    Fail("{}: {}={} is out of range (allowed: {})", where, key, value, allowed);
  };
  const RopeMethod& r = m.rope;
  if (r.factor != 0.0 && !(r.factor >= 1.0 && std::isfinite(r.factor))) {
    bad("factor", r.factor, "a number >= 1, or 0 for the call's scale");
  }
  if (r.base != 0.0 && !(r.base > 1.0 && std::isfinite(r.base))) {
    bad("base", r.base, "a number > 1, or 0 for the model's");
  }
  if (r.original_length < 0) bad("orig", r.original_length, "a positive integer, or 0 for L");
  if (r.scaling == RopeScaling::kYarn) {
    if (!(r.beta_slow > 0.0 && std::isfinite(r.beta_slow))) {
      bad("beta_slow", r.beta_slow, "a number > 0");
    }
    if (!std::isfinite(r.beta_fast)) bad("beta_fast", r.beta_fast, "a number > beta_slow");
    if (!(r.mscale >= 0.0 && std::isfinite(r.mscale))) bad("mscale", r.mscale, "a number > 0");
    if (!(r.mscale_all_dim >= 0.0 && std::isfinite(r.mscale_all_dim))) {
      bad("mscale_all_dim", r.mscale_all_dim, "a number > 0");
    }
  }
  if (r.scaling == RopeScaling::kYarn || r.scaling == RopeScaling::kLongRope) {
    if (!(r.attention_factor >= 0.0 && std::isfinite(r.attention_factor))) {
      bad("attention_factor", r.attention_factor, "a number > 0, or 0 for the formula's");
    }
  }
  if (r.scaling == RopeScaling::kLlama3) {
    if (!(r.low_freq_factor > 0.0 && std::isfinite(r.low_freq_factor))) {
      bad("low", r.low_freq_factor, "a number > 0");
    }
    if (!std::isfinite(r.high_freq_factor)) bad("high", r.high_freq_factor, "a number > low");
  }
  if (r.mode == ScaleMode::kDynamic) {
    if (r.scaling != RopeScaling::kNtk && r.scaling != RopeScaling::kYarn) {
      Fail(
          "{}: a dynamic scale needs NTK or YaRN frequencies (allowed: dynamic-ntk, "
          "dynamic-yarn)",
          where);
    }
    if (r.factor != 0.0) {
      Fail(
          "{}: factor={} is not allowed for a dynamic method (allowed: no factor; query i uses "
          "s_i = max(L, i + 1) / L)",
          where, r.factor);
    }
  }
  const RelMapMethod& rel = m.rel;
  if (rel.window < 0) bad("window", rel.window, "a positive integer");
  if (rel.group < 0) bad("group", rel.group, "a positive integer");
  if (rel.shift < 0) bad("shift", rel.shift, "a positive integer");
  if (rel.chunk < 0) bad("chunk", rel.chunk, "a positive integer");
  if (rel.leaky_k != 0.0 && !(rel.leaky_k >= 1.0 && std::isfinite(rel.leaky_k))) {
    bad("k", rel.leaky_k, "a number >= 1, or 0 for k = L'/L");
  }
  if (m.mask.window < 0) bad("window", m.mask.window, "a positive integer");
  if (m.mask.sinks < 0) bad("sinks", m.mask.sinks, "a positive integer");
}

// Self-Extend's default group: the smallest G >= 1 with floor((L'-1)/G) + W - floor(W/G) <= L-1.
// For G >= max(L', W + 1) the left side is W, so no G exists when W > L - 1.
std::optional<int64_t> SelfExtendGroup(int64_t train_len, int64_t fed_len, int64_t window) {
  const int64_t last = std::max<int64_t>(fed_len, window + 1);
  for (int64_t g = 1; g <= last; ++g) {
    if ((fed_len - 1) / g + window - window / g <= train_len - 1) return g;
  }
  return std::nullopt;
}

// Every default filled in, without checks (see the table at the top of this file).
Method FillDefaults(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  Method r = m;
  const int64_t L = geo.train_len;
  const int64_t half = std::max<int64_t>(1, L / 2);
  r.rope.factor = CallScale(m.rope, geo, fed_len);
  if (r.rope.base == 0.0) r.rope.base = geo.base;
  if (r.rope.original_length == 0) r.rope.original_length = L;
  RelMapMethod& rel = r.rel;
  switch (rel.kind) {
    case RelMapKind::kIdentity: break;
    case RelMapKind::kReRope:
      if (rel.window == 0) rel.window = half;
      break;
    case RelMapKind::kLeakyReRope:
      if (rel.window == 0) rel.window = half;
      if (rel.leaky_k == 0.0) rel.leaky_k = r.rope.factor;
      break;
    case RelMapKind::kSelfExtend:
      if (rel.window == 0) rel.window = half;
      if (rel.group == 0) rel.group = SelfExtendGroup(L, fed_len, rel.window).value_or(0);
      break;
    case RelMapKind::kString:
      if (rel.shift == 0) {
        rel.shift = std::max<int64_t>(1, static_cast<int64_t>(0.33 * static_cast<double>(L)));
      }
      if (rel.window == 0) rel.window = std::max<int64_t>(1, std::min<int64_t>(128, rel.shift / 2));
      break;
    case RelMapKind::kDca:
      if (rel.chunk == 0) rel.chunk = std::max<int64_t>(1, L * 3 / 4);
      if (rel.window == 0) rel.window = std::max<int64_t>(1, L / 16);
      break;
  }
  switch (r.mask.kind) {
    case MaskKind::kCausal: break;
    case MaskKind::kWindow:
      if (r.mask.window == 0) r.mask.window = L;
      break;
    case MaskKind::kLambda:
      if (r.mask.window == 0) r.mask.window = L;
      if (r.mask.sinks == 0) r.mask.sinks = 4;
      break;
    case MaskKind::kBlock:
      if (r.mask.window == 0) r.mask.window = std::max<int64_t>(2, L / 2 * 2);
      break;
  }
  return r;
}

double GetMscale(double scale, double mscale) {
  // HF _compute_yarn_parameters.get_mscale
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Specs

std::string_view MethodName(const Method& m) { return InfoOf(m).name; }

Method ParseMethod(std::string_view spec) {
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
  if (info == nullptr) Fail("unknown method \"{}\" (known: {})", name, KnownNames());
  const std::string where = fmt::format("method \"{}\"", info->name);
  Method m = MethodOf(*info);
  m.logn = logn;
  if (colon == std::string_view::npos) return m;

  std::string_view rest = body.substr(colon + 1);
  if (rest.empty()) Fail("{}: nothing after ':' (allowed keys: {})", where, KeyList(info->keys));
  KeySet seen = 0;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      Fail("{}: \"{}\" is not key=value (allowed keys: {})", where, item, KeyList(info->keys));
    }
    const std::string_view key_text = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    int key = 0;
    while (key < static_cast<int>(Key::kCount) && kKeyNames[key] != key_text) ++key;
    const KeySet bit = key < static_cast<int>(Key::kCount) ? KeySet{1} << key : 0;
    if (!(info->keys & bit)) {
      if (key_text == "factor" && info->mode == ScaleMode::kDynamic) {
        Fail(
            "{}: factor={} is not allowed for a dynamic method (allowed keys: {}; query i uses "
            "s_i = max(L, i + 1) / L)",
            where, value, KeyList(info->keys));
      }
      Fail("{}: unknown key \"{}\" (allowed: {})", where, key_text, KeyList(info->keys));
    }
    if (seen & bit) Fail("{}: key \"{}\" given twice", where, key_text);
    seen |= bit;
    SetKey(*info, m, static_cast<Key>(key), key_text, value, where);
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
  for (int k = 0; k < static_cast<int>(Key::kCount); ++k) {
    if (!(info.keys & (KeySet{1} << k))) continue;
    const std::optional<std::string> text = KeyText(info, m, static_cast<Key>(k));
    if (!text) continue;
    out += sep;
    out += kKeyNames[k];
    out += '=';
    out += *text;
    sep = ',';
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
  return SameRope(a.rope, b.rope) && a.rel.kind == b.rel.kind && a.rel.window == b.rel.window &&
         a.rel.leaky_k == b.rel.leaky_k && a.rel.group == b.rel.group &&
         a.rel.shift == b.rel.shift && a.rel.chunk == b.rel.chunk && a.mask.kind == b.mask.kind &&
         a.mask.window == b.mask.window && a.mask.sinks == b.mask.sinks && a.logn == b.logn;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp flags
//
// --rope-scale s and --rope-freq-scale 1/s set one llama.cpp parameter (freq_scale; 0 = the
// model's); --rope-freq-base B the base (0 = the model's). With no --rope-scaling, a scale means
// linear, as llama.cpp's help says ("defaults to linear unless specified by the model": there is
// no model file here to specify anything). --rope-scaling none never scales.
//
// YaRN: ggml's rope_yarn rotates by theta_interp (1 - r) + theta_extrap r with r = ramp *
// ext_factor, the ramp over floor/ceil correction dims as HF's truncate=true, so ext_factor = 1
// (the value llama.cpp gives -1 = unset for yarn) is HF's YaRN; other values are refused.
// --yarn-attn-factor F: the kernel multiplies cos and sin by mscale = F * (1 + 0.1 ln s) when
// ext_factor != 0 (F = 1 by default), so F scales YaRN's attention factor; it becomes
// attention_factor = F * (0.1 ln s + 1), which needs s. (Newer llama.cpp recomputes
// yarn_attn_factor from the model for yarn and drops a user's value; we keep the documented
// meaning of the flag, "scale sqrt(t) or attention magnitude".) -1 (newer llama.cpp's "unset")
// and 1 leave it alone. --yarn-beta-fast/--yarn-beta-slow -1 mean unset (newer llama.cpp).
// --grp-attn-n G --grp-attn-w W: Self-Extend with group G and neighbour window W (G = 1: off;
// W defaults to llama.cpp's 512 and must be a multiple of G, as llama.cpp asserts).

bool LlamaCppRopeFlags::Any() const {
  return rope_scaling || rope_scale || rope_freq_base || rope_freq_scale || yarn_orig_ctx ||
         yarn_ext_factor || yarn_attn_factor || yarn_beta_fast || yarn_beta_slow || grp_attn_n ||
         grp_attn_w;
}

Method MethodFromLlamaCpp(const LlamaCppRopeFlags& f) {
  std::optional<double> scale;
  if (f.rope_scale) {
    const double v = *f.rope_scale;
    if (!(std::isfinite(v) && v >= 1.0)) {
      Fail("--rope-scale={} is below 1 (allowed: a context expansion factor >= 1)", v);
    }
    scale = v;
  }
  if (f.rope_freq_scale && *f.rope_freq_scale != 0.0) {
    const double v = *f.rope_freq_scale;
    if (!(std::isfinite(v) && v > 0.0 && v <= 1.0)) {
      Fail(
          "--rope-freq-scale={} is not in (0, 1] (allowed: 1/s for a scale s >= 1, or 0 for the "
          "model's)",
          v);
    }
    if (scale && std::abs(*scale * v - 1.0) > 1e-6) {
      Fail(
          "--rope-scale={} and --rope-freq-scale={} disagree (allowed: --rope-freq-scale = "
          "1/--rope-scale, or only one of them)",
          *scale, v);
    }
    if (!scale) scale = 1.0 / v;
  }
  std::string type;
  if (f.rope_scaling) {
    type = *f.rope_scaling;
    if (type != "none" && type != "linear" && type != "yarn") {
      Fail("--rope-scaling={} is not a scaling type (allowed: none, linear, yarn)", type);
    }
  } else {
    type = scale ? "linear" : "none";
  }
  Method m;
  if (type == "none") {
    if (scale && *scale != 1.0) {
      Fail(
          "--rope-scaling none with a scale of {} (allowed: no --rope-scale/--rope-freq-scale, "
          "or 1: llama.cpp never scales with none)",
          *scale);
    }
  } else if (type == "linear") {
    m = MethodOf(FindMethodOrDie("pi"));
  } else {
    m = MethodOf(FindMethodOrDie("yarn"));
  }
  if (scale && type != "none") m.rope.factor = *scale;
  if (f.rope_freq_base && *f.rope_freq_base != 0.0) {
    const double v = *f.rope_freq_base;
    if (!(std::isfinite(v) && v > 1.0)) {
      Fail("--rope-freq-base={} is not above 1 (allowed: a base > 1, or 0 for the model's)", v);
    }
    m.rope.base = v;
  }

  // The yarn-* flags, each at a value with no effect or used by YaRN.
  const bool yarn = type == "yarn";
  auto needs_yarn = [&](std::string_view flag, auto value) {
    Fail("{}={} needs --rope-scaling yarn (found: {})", flag, value, type);
  };
  if (f.yarn_orig_ctx && *f.yarn_orig_ctx != 0) {
    if (*f.yarn_orig_ctx < 0) {
      Fail("--yarn-orig-ctx={} is negative (allowed: a positive length, or 0 for the model's)",
           *f.yarn_orig_ctx);
    }
    if (!yarn) needs_yarn("--yarn-orig-ctx", *f.yarn_orig_ctx);
    m.rope.original_length = *f.yarn_orig_ctx;
  }
  if (f.yarn_ext_factor && *f.yarn_ext_factor != -1.0) {
    const double v = *f.yarn_ext_factor;
    if (yarn && v != 1.0) {
      Fail(
          "--yarn-ext-factor={} is not supported (allowed: -1 or 1 with yarn: HF's YaRN; 0 is "
          "full interpolation, i.e. --rope-scaling linear)",
          v);
    }
    if (!yarn && v != 0.0) {
      Fail("--yarn-ext-factor={} with --rope-scaling {} is not supported (allowed: -1 or 0)", v,
           type);
    }
  }
  if (f.yarn_beta_fast && *f.yarn_beta_fast != -1.0) {
    const double v = *f.yarn_beta_fast;
    if (!yarn) {
      if (v != RopeMethod{}.beta_fast) needs_yarn("--yarn-beta-fast", v);
    } else if (!(std::isfinite(v) && v > 0.0)) {
      Fail("--yarn-beta-fast={} is not positive (allowed: a number > 0, or -1 for 32)", v);
    } else {
      m.rope.beta_fast = v;
    }
  }
  if (f.yarn_beta_slow && *f.yarn_beta_slow != -1.0) {
    const double v = *f.yarn_beta_slow;
    if (!yarn) {
      if (v != RopeMethod{}.beta_slow) needs_yarn("--yarn-beta-slow", v);
    } else if (!(std::isfinite(v) && v > 0.0)) {
      Fail("--yarn-beta-slow={} is not positive (allowed: a number > 0, or -1 for 1)", v);
    } else {
      m.rope.beta_slow = v;
    }
  }
  if (yarn && !(m.rope.beta_fast > m.rope.beta_slow)) {
    Fail("--yarn-beta-fast={} is not above --yarn-beta-slow={} (allowed: beta_fast > beta_slow)",
         m.rope.beta_fast, m.rope.beta_slow);
  }
  if (f.yarn_attn_factor && *f.yarn_attn_factor != -1.0 && *f.yarn_attn_factor != 1.0) {
    const double v = *f.yarn_attn_factor;
    if (!yarn) needs_yarn("--yarn-attn-factor", v);
    if (!(std::isfinite(v) && v > 0.0)) {
      Fail("--yarn-attn-factor={} is not positive (allowed: a number > 0, or -1 or 1 for none)", v);
    }
    if (!scale) {
      Fail(
          "--yarn-attn-factor={} needs --rope-scale or --rope-freq-scale (it multiplies YaRN's "
          "0.1 ln s + 1, which depends on the scale s)",
          v);
    }
    m.rope.attention_factor = v * GetMscale(*scale, 1.0);
  }

  // Self-Extend.
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
    m = MethodOf(FindMethodOrDie("self-extend"));
    m.rope.base = base;
    m.rel.group = g;
    m.rel.window = w;
  } else if (f.grp_attn_w) {
    Fail("--grp-attn-w={} has no effect without --grp-attn-n (allowed: with --grp-attn-n >= 2)",
         *f.grp_attn_w);
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// HF rope_scaling

namespace {

struct HfKey {
  std::string_view hf;
  Key key;
};
constexpr HfKey kHfKeys[] = {
    {"factor", Key::kFactor},
    {"original_max_position_embeddings", Key::kOrig},
    {"beta_fast", Key::kBetaFast},
    {"beta_slow", Key::kBetaSlow},
    {"attention_factor", Key::kAttentionFactor},
    {"mscale", Key::kMscale},
    {"mscale_all_dim", Key::kMscaleAllDim},
    {"truncate", Key::kTruncate},
    {"low_freq_factor", Key::kLow},
    {"high_freq_factor", Key::kHigh},
    {"short_factor", Key::kShort},
    {"long_factor", Key::kLong},
    // HF's newer `rope_parameters` carries the base next to the scaling.
    {"rope_theta", Key::kBase},
};

std::string HfKeyList(const MethodInfo& info) {
  std::string out = "rope_type";
  for (const HfKey& k : kHfKeys) {
    const bool dynamic_factor = k.key == Key::kFactor && info.mode == ScaleMode::kDynamic;
    if ((info.keys & Bit(k.key)) || dynamic_factor) {
      out += ", ";
      out += k.hf;
    }
  }
  return out;
}

std::string JsonNumberText(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return fmt::format("{}", v.get<uint64_t>());
  if (v.is_number_integer()) return fmt::format("{}", v.get<int64_t>());
  return fmt::format("{}", v.get<double>());
}

// The JSON value as the spec text SetKey reads.
std::string JsonValueText(std::string_view where, std::string_view hf_key, Key key,
                          const nlohmann::json& v) {
  if (key == Key::kTruncate) {
    if (!v.is_boolean()) BadValue(where, hf_key, v.dump(), "is not a boolean", "true or false");
    return v.get<bool>() ? "true" : "false";
  }
  if (key == Key::kShort || key == Key::kLong) {
    constexpr std::string_view kAllowed = "a non-empty list of positive numbers";
    if (!v.is_array() || v.empty()) BadValue(where, hf_key, v.dump(), "is not a list", kAllowed);
    std::string out;
    for (const nlohmann::json& x : v) {
      if (!x.is_number()) {
        BadValue(where, hf_key, v.dump(), fmt::format("has {}, which is not a number", x.dump()),
                 kAllowed);
      }
      if (!out.empty()) out += '/';
      out += JsonNumberText(x);
    }
    return out;
  }
  if (!v.is_number()) BadValue(where, hf_key, v.dump(), "is not a number", "a JSON number");
  return JsonNumberText(v);
}

}  // namespace

Method MethodFromHfRopeScaling(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail("rope_scaling: not valid JSON ({})", e.what());
  }
  if (!j.is_object()) Fail("rope_scaling: {} is not a JSON object", j.dump());

  constexpr std::string_view kTypes = "default, linear, dynamic, yarn, llama3, longrope";
  std::optional<std::string> type;
  for (const char* field : {"rope_type", "type"}) {
    const auto it = j.find(field);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) {
      Fail("rope_scaling: {}={} is not a string (allowed: {})", field, it->dump(), kTypes);
    }
    const std::string value = it->get<std::string>();
    if (type && *type != value) {
      Fail(
          "rope_scaling: rope_type=\"{}\" and type=\"{}\" disagree (allowed: one of them, or "
          "both the same)",
          *type, value);
    }
    type = value;
  }
  if (!type) Fail("rope_scaling: no rope_type (or type) given (allowed: {})", kTypes);
  std::string_view name;
  if (*type == "default") {
    name = "direct";
  } else if (*type == "linear") {
    name = "pi";
  } else if (*type == "dynamic") {
    name = "dynamic-ntk";
  } else if (*type == "yarn" || *type == "llama3" || *type == "longrope") {
    name = *type;
  } else {
    Fail("rope_scaling: rope_type=\"{}\" is not supported (allowed: {})", *type, kTypes);
  }
  const MethodInfo& info = FindMethodOrDie(name);
  const std::string where = fmt::format("rope_scaling (rope_type \"{}\")", *type);
  Method m = MethodOf(info);
  for (const auto& [hf_key, value] : j.items()) {
    if (hf_key == "rope_type" || hf_key == "type") continue;
    if (value.is_null()) continue;  // HF reads every key with .get(): null is "not given"
    const HfKey* found = nullptr;
    for (const HfKey& k : kHfKeys) {
      if (k.hf == hf_key) found = &k;
    }
    if (found != nullptr && found->key == Key::kFactor && info.mode == ScaleMode::kDynamic) {
      // HF's dynamic NTK: base * (f * n / L - (f - 1))^(d/(d-2)) for n > L tokens. stretch's
      // dynamic-ntk is f = 1: base * s_i^(d/(d-2)), s_i = max(L, i + 1) / L.
      if (!(value.is_number() && value.get<double>() == 1.0)) {
        Fail(
            "{}: factor={} is not supported (allowed: 1; stretch's dynamic-ntk is HF's dynamic "
            "with factor 1, base * s_i^(d/(d-2)) for s_i = max(L, i + 1) / L)",
            where, value.dump());
      }
      continue;
    }
    if (found == nullptr || !(info.keys & Bit(found->key))) {
      Fail("{}: unknown key \"{}\" (allowed: {})", where, hf_key, HfKeyList(info));
    }
    SetKey(info, m, found->key, hf_key, JsonValueText(where, hf_key, found->key, value), where);
  }
  CheckFieldPairs(m, where);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Frequencies

double CallScale(const RopeMethod& rope, const RopeGeometry& geo, int64_t fed_len) {
  if (rope.factor != 0.0) return rope.factor;
  STRETCH_CHECK(geo.train_len > 0, "train_len={}", geo.train_len);
  return std::max(1.0, static_cast<double>(fed_len) / static_cast<double>(geo.train_len));
}

RopeFrequencies ComputeFrequencies(const RopeMethod& rope, const RopeGeometry& geo, double s) {
  STRETCH_CHECK(geo.rotary_dim > 0 && geo.rotary_dim % 2 == 0, "rotary_dim={}", geo.rotary_dim);
  STRETCH_CHECK(geo.train_len > 0, "train_len={}", geo.train_len);
  STRETCH_CHECK(std::isfinite(s) && s >= 1.0, "s={}", s);
  STRETCH_CHECK(std::isfinite(geo.interpolation) && geo.interpolation >= 1.0, "interpolation={}",
                geo.interpolation);
  const int d = geo.rotary_dim;
  const size_t pairs = static_cast<size_t>(d / 2);
  const double base = rope.base != 0.0 ? rope.base : geo.base;
  const double orig =
      static_cast<double>(rope.original_length != 0 ? rope.original_length : geo.train_len);
  RopeFrequencies f;
  switch (rope.scaling) {
    case RopeScaling::kNone: f.thetas = RopeThetas(base, d); break;
    case RopeScaling::kLinear:
      // HF _compute_linear_scaling_rope_parameters: inv_freq /= factor.
      f.thetas = RopeThetas(base, d);
      for (double& t : f.thetas) t /= s;
      break;
    case RopeScaling::kNtk: {
      // HF _compute_ntk_parameters: base * factor^(dim / (dim - 2)); the dynamic variant is the
      // same at s_i (HF's _compute_dynamic_ntk_parameters with factor 1).
      STRETCH_CHECK(d > 2, "ntk needs rotary_dim > 2, got {}", d);
      f.thetas = RopeThetas(base * std::pow(s, static_cast<double>(d) / (d - 2)), d);
      break;
    }
    case RopeScaling::kNtkFixed:
      // RoPE as a beta-base encoding (Su's blog; "NTK-fixed" in the ReRoPE literature): base * s.
      f.thetas = RopeThetas(base * s, d);
      break;
    case RopeScaling::kYarn: {
      // HF _compute_yarn_parameters with factor = s and original_max_position_embeddings = orig.
      // find_correction_dim(r) = d ln(orig / (2 pi r)) / (2 ln base): the pair index whose
      // wavelength fits r times into orig. Pairs below `low` (fast) keep their frequency, pairs
      // above `high` (slow) are interpolated (theta / s), with a linear ramp in between.
      auto correction_dim = [&](double rotations) {
        return d * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
      };
      double low = correction_dim(rope.beta_fast);
      double high = correction_dim(rope.beta_slow);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(d - 1));
      if (low == high) high += 0.001;  // HF linear_ramp_factor: prevent singularity
      f.thetas = RopeThetas(base, d);
      for (size_t t = 0; t < pairs; ++t) {
        const double ramp = std::clamp((static_cast<double>(t) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // inv_freq_extrapolation_factor
        const double theta = f.thetas[t];
        f.thetas[t] = theta / s * (1.0 - extrapolation) + theta * extrapolation;
      }
      if (rope.attention_factor != 0.0) {
        f.attention_factor = rope.attention_factor;
      } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
        f.attention_factor = GetMscale(s, rope.mscale) / GetMscale(s, rope.mscale_all_dim);
      } else {
        f.attention_factor = GetMscale(s, 1.0);
      }
      break;
    }
    case RopeScaling::kLlama3: {
      // HF _compute_llama3_parameters with factor = s, old_context_len = orig: wavelengths
      // shorter than orig/high keep theta, longer than orig/low get theta/s, and in between
      // smooth = (orig / wavelen - low) / (high - low) mixes (1 - smooth) theta/s + smooth theta.
      const double low = rope.low_freq_factor;
      const double high = rope.high_freq_factor;
      const double low_freq_wavelen = orig / low;
      const double high_freq_wavelen = orig / high;
      f.thetas = RopeThetas(base, d);
      for (double& theta : f.thetas) {
        const double wavelen = 2.0 * std::numbers::pi / theta;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          theta /= s;
        } else {
          const double smooth = (orig / wavelen - low) / (high - low);
          theta = (1.0 - smooth) * theta / s + smooth * theta;
        }
      }
      break;
    }
    case RopeScaling::kLongRope: {
      // HF _compute_longrope_parameters: inv_freq = 1 / (ext_factors * base^(2t/d)), the long
      // list when the sequence is longer than orig, else the short one; attention factor
      // sqrt(1 + ln(factor) / ln(orig)) for factor > 1. Here the sequence is s * L long and
      // factor is s (the call's scale).
      const bool use_long = s * static_cast<double>(geo.train_len) > orig;
      const std::vector<double>& ext = use_long ? rope.long_factor : rope.short_factor;
      STRETCH_CHECK(ext.size() == pairs, "longrope {} list has {} factors for {} pairs",
                    use_long ? "long" : "short", ext.size(), pairs);
      f.thetas = RopeThetas(base, d);
      for (size_t t = 0; t < pairs; ++t) f.thetas[t] /= ext[t];
      if (rope.attention_factor != 0.0) {
        f.attention_factor = rope.attention_factor;
      } else {
        f.attention_factor = s <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(s) / std::log(orig));
      }
      break;
    }
  }
  // The model's own position interpolation (PI, Chen et al. 2023, arXiv 2306.15595: position m
  // rotated as m / F; HF _compute_linear_scaling_rope_parameters: inv_freq / factor), trained
  // into it (`stretch train --position rope:pi=F`): it divides every theta, and the method above
  // (pi, ntk, ntk-fixed; ValidateMethod refuses the wavelength rules of yarn, llama3 and longrope
  // on such a model) applies on top of it.
  if (geo.interpolation != 1.0) {
    for (double& t : f.thetas) t /= geo.interpolation;
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// Validation and defaults

void ValidateMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  if (geo.train_len < 1) {
    Fail("model: train_len={} is not positive (allowed: the training length >= 1)", geo.train_len);
  }
  if (geo.rotary_dim <= 0 || geo.rotary_dim % 2 != 0) {
    Fail("model: rotary_dim={} is not a positive even number (allowed: 2, 4, 6, ...)",
         geo.rotary_dim);
  }
  if (!(std::isfinite(geo.base) && geo.base > 1.0)) {
    Fail("model: base={} is not above 1 (allowed: a RoPE base > 1)", geo.base);
  }
  if (!(std::isfinite(geo.interpolation) && geo.interpolation >= 1.0)) {
    Fail(
        "model: interpolation={} is not a finite number >= 1 (allowed: the factor F >= 1 its "
        "positions are divided by, PI; 1: none)",
        geo.interpolation);
  }
  if (fed_len < 1) Fail("call: length={} is not positive (allowed: >= 1 token)", fed_len);

  const std::string where = Where(m);
  CheckFieldRanges(m, where);
  CheckFieldPairs(m, where);

  const RopeMethod& rope = m.rope;
  const int pairs = geo.rotary_dim / 2;
  if (geo.interpolation != 1.0 &&
      (rope.scaling == RopeScaling::kYarn || rope.scaling == RopeScaling::kLlama3 ||
       rope.scaling == RopeScaling::kLongRope)) {
    // Their per-pair rule compares the base's wavelengths with the original length; on a model
    // trained with PI the trained wavelengths are F times longer, and no source defines how the
    // two compose.
    Fail(
        "{}: picks the frequency pairs to scale by their wavelengths, but this model was trained "
        "with position interpolation (positions divided by {}), whose wavelengths that rule does "
        "not know (allowed on such a model: direct, pi, ntk, ntk-fixed, dynamic-ntk, the "
        "relative maps and the masks)",
        where, geo.interpolation);
  }
  if (rope.scaling == RopeScaling::kNtk && geo.rotary_dim <= 2) {
    Fail(
        "{}: rotary_dim={} is too small for NTK scaling (allowed: rotary_dim >= 4, the exponent "
        "is d/(d-2))",
        where, geo.rotary_dim);
  }
  if (rope.scaling == RopeScaling::kLongRope) {
    for (const auto& [key, list] :
         {std::pair{"short", &rope.short_factor}, std::pair{"long", &rope.long_factor}}) {
      if (static_cast<int>(list->size()) != pairs) {
        Fail(
            "{}: {} has {} factors (allowed: rotary_dim/2 = {} positive numbers separated by "
            "'/')",
            where, key, list->size(), pairs);
      }
      for (double v : *list) {
        if (!(v > 0.0 && std::isfinite(v))) {
          Fail("{}: {}={} has {}, which is not positive (allowed: positive numbers)", where, key,
               JoinList(*list), v);
        }
      }
    }
  }

  // Lengths the user gave, against the call.
  const RelMapMethod& rel = m.rel;
  auto larger = [&](std::string_view key, int64_t v) {
    Fail("{}: {}={} is larger than the context ({} tokens) (allowed: 1 .. {})", where, key, v,
         fed_len, fed_len);
  };
  switch (rel.kind) {
    case RelMapKind::kIdentity: break;
    case RelMapKind::kReRope:
    case RelMapKind::kLeakyReRope:
      if (rel.window > fed_len) larger("window", rel.window);
      break;
    case RelMapKind::kSelfExtend:
      if (rel.window != 0 && rel.window >= fed_len) {
        Fail("{}: window={} is not smaller than the context ({} tokens) (allowed: 1 .. {})", where,
             rel.window, fed_len, fed_len - 1);
      }
      break;
    case RelMapKind::kString:
      if (rel.shift > fed_len) larger("shift", rel.shift);
      if (rel.window > fed_len) larger("window", rel.window);
      break;
    case RelMapKind::kDca:
      if (rel.chunk > geo.train_len) {
        Fail("{}: chunk={} is larger than the training length ({} tokens) (allowed: 2 .. {})",
             where, rel.chunk, geo.train_len, geo.train_len);
      }
      break;
  }
  if (m.mask.kind != MaskKind::kCausal && m.mask.window > fed_len) {
    larger("window", m.mask.window);
  }

  // What the defaults make of the rest.
  const Method r = FillDefaults(m, geo, fed_len);
  switch (r.rel.kind) {
    case RelMapKind::kIdentity:
    case RelMapKind::kReRope: break;
    case RelMapKind::kLeakyReRope:
      if (!(r.rel.leaky_k >= 1.0)) {
        Fail("{}: k={} is below 1 (allowed: k >= 1; k = 1 is the identity map)", where,
             r.rel.leaky_k);
      }
      break;
    case RelMapKind::kSelfExtend:
      if (r.rel.group == 0) {
        Fail(
            "{}: window={} leaves no group that keeps relative positions below L = {} "
            "(allowed: window <= {} when group is not given)",
            where, r.rel.window, geo.train_len, geo.train_len - 1);
      }
      break;
    case RelMapKind::kString:
      if (r.rel.window >= r.rel.shift) {
        Fail("{}: window={} is not below shift={} (allowed: 1 <= window < shift)", where,
             r.rel.window, r.rel.shift);
      }
      break;
    case RelMapKind::kDca:
      if (r.rel.window >= r.rel.chunk) {
        Fail("{}: window={} is not below chunk={} (allowed: 1 <= window < chunk)", where,
             r.rel.window, r.rel.chunk);
      }
      break;
  }
  if (r.mask.kind == MaskKind::kLambda && r.mask.sinks >= r.mask.window) {
    Fail("{}: sinks={} is not below window={} (allowed: 1 <= sinks < window)", where, r.mask.sinks,
         r.mask.window);
  }
}

Method ResolveMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  ValidateMethod(m, geo, fed_len);
  return FillDefaults(m, geo, fed_len);
}

}  // namespace stretch
