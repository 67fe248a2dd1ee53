// Position methods (method.h): validation against a model and a length, and the defaults that
// ResolveMethod fills.
//
// Defaults that ResolveMethod fills (L training length, L' fed length, s the call's scale):
//   factor (s)         max(1, L'/L) when the spec gives none: the scale is fixed per call from the
//                      call's length (DESIGN.md's "locally static" choice); dynamic methods ignore
//                      it and use s_i = max(L, i + 1)/L per query.
//   base               the model's.            orig         L.
//   a relative map     its file's (src/position/maps/).
//   window (mask)      window = L.
//   lambda             window = L, sinks = 4: StreamingLLM's attention sinks (Xiao et al. 2023,
//                      arXiv 2309.17453; github.com/mit-han-lab/streaming-llm
//                      examples/run_streaming_llama.py: `--start_size` defaults to 4).
//   streaming          sinks = 4, window = L - sinks: the cache's S + W positions stay below L.
//   blockwise          window B = L (rounded down to even): blockwise causal attention, the test-time
//                      mask of XPOS (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv
//                      2212.10554; the first author's torchscale fork, github.com/sunyt32/torchscale
//                      architecture/decoder.py: blocks of block_size, stepped by half_block_size).
//                      Query i sees its own half-block of B/2 positions and the previous one, so
//                      every relative position stays below B = L; a query sees B/2 + 1 .. B keys. (That
//                      fork's cached decoding keeps a slightly wider span at half-block starts; we
//                      take the prefill mask as the definition, so decoding equals prefill.)
// A default never goes below 1. Defaults are not checked against L' ("window larger than the
// context" is an error for a value the user gave, not for L/2 on a short call), so ResolveMethod
// takes an unresolved method: resolving twice may reject what the first resolution filled in.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/method.h"
#include "src/position/method_internal.h"
#include "src/position/rel_map.h"

namespace stretch {
namespace method_internal {

// ---------------------------------------------------------------------------------------------
// Checks

[[noreturn]] void LargerThanContext(std::string_view where, std::string_view key, int64_t v,
                                    int64_t fed_len) {
  Fail("{}: {}={} is larger than the context ({} tokens) (allowed: 1 .. {})", where, key, v,
       fed_len, fed_len);
}

std::string Where(const Method& m) { return fmt::format("method \"{}\"", InfoOf(m).name); }

// Checks between fields that need no model: beta_fast > beta_slow, high > low, and the pairs of
// given lengths that must be ordered (a relative map's, Lambda sinks < window). Defaults are
// checked by ValidateMethod once they are known.
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
  if (m.rel.map->check_pairs != nullptr) m.rel.map->check_pairs(m.rel, where);
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
    if (r.scaling != RopeScaling::kNtk && r.scaling != RopeScaling::kYarn &&
        r.scaling != RopeScaling::kLongRope) {
      Fail(
          "{}: a dynamic scale needs NTK, YaRN or LongRoPE frequencies (allowed: dynamic-ntk, "
          "dynamic-yarn, dynamic-longrope)",
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
  for (const RelKey& key : rel.map->keys) {
    const int64_t v = key.slot == RelSlot::kInt0   ? rel.ints[0]
                      : key.slot == RelSlot::kInt1 ? rel.ints[1]
                                                   : 0;
    if (v < 0) bad(key.name, v, "a positive integer");
  }
  if (rel.map->check_real_range != nullptr) rel.map->check_real_range(rel, where);
  if (m.mask.window < 0) bad("window", m.mask.window, "a positive integer");
  if (m.mask.sinks < 0) bad("sinks", m.mask.sinks, "a positive integer");
}

// Every default filled in, without checks (see the table at the top of this file).
Method FillDefaults(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  Method r = m;
  const int64_t L = geo.train_len;
  r.rope.factor = CallScale(m.rope, geo, fed_len);
  if (r.rope.base == 0.0) r.rope.base = geo.base;
  if (r.rope.original_length == 0) r.rope.original_length = L;
  if (r.rel.map->fill_defaults != nullptr) {
    r.rel.map->fill_defaults(r.rel, geo, fed_len, r.rope.factor);
  }
  switch (r.mask.kind) {
    case MaskKind::kCausal: break;
    case MaskKind::kWindow:
      if (r.mask.window == 0) r.mask.window = L;
      break;
    case MaskKind::kLambda:
      if (r.mask.sinks == 0) r.mask.sinks = 4;
      // The streaming cache holds S + W tokens: W = L - S keeps every position inside training.
      if (r.mask.window == 0) {
        r.mask.window = r.rel.map->mask_only ? std::max<int64_t>(1, L - r.mask.sinks) : L;
      }
      break;
    case MaskKind::kBlock:
      if (r.mask.window == 0) r.mask.window = std::max<int64_t>(2, L / 2 * 2);
      break;
    case MaskKind::kChunk:
      if (r.mask.window == 0) r.mask.window = L;
      break;
  }
  return r;
}

}  // namespace method_internal

using namespace method_internal;

// ---------------------------------------------------------------------------------------------
// Validation and defaults

namespace {

// A map that only a mask method uses (the streaming cache's positions) with that mask and plain
// RoPE: its positions are the cache's, which frequency scaling, a dynamic scale or log-n (all
// functions of the position in the text) would not know.
void CheckMaskOnlyMap(const Method& m, const std::string& where) {
  if (m.mask.kind != MaskKind::kLambda) {
    Fail("{}: the {} positions need the Lambda mask (sinks and a window)", where, m.rel.map->name);
  }
  if (m.rope.scaling != RopeScaling::kNone || m.rope.mode != ScaleMode::kStatic || m.logn) {
    Fail(
        "{}: the streaming cache numbers positions inside the cache, and runs plain RoPE there "
        "(allowed: streaming[:sinks=S,window=W,base=B], without frequency scaling or +logn)",
        where);
  }
}

// The model's geometry and the call's length.
void CheckGeometry(const RopeGeometry& geo, int64_t fed_len) {
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
}

// The frequency scaling against the model: PI-trained models, NTK's exponent, LongRoPE's lists.
void CheckRopeAgainstModel(const Method& m, const RopeGeometry& geo, const std::string& where) {
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
}

// Lengths the user gave, against the call.
void CheckLengthsAgainstCall(const Method& m, const RopeGeometry& geo, int64_t fed_len,
                             const std::string& where) {
  if (m.rel.map->check_call != nullptr) m.rel.map->check_call(m.rel, geo, fed_len, where);
  if (m.mask.kind != MaskKind::kCausal && m.mask.window > fed_len) {
    LargerThanContext(where, "window", m.mask.window, fed_len);
  }
}

// What the defaults make of the rest.
void CheckResolvedDefaults(const Method& m, const RopeGeometry& geo, int64_t fed_len,
                           const std::string& where) {
  const Method r = FillDefaults(m, geo, fed_len);
  if (r.rel.map->check_resolved != nullptr) r.rel.map->check_resolved(r.rel, geo, where);
  if (r.mask.kind == MaskKind::kLambda && r.mask.sinks >= r.mask.window) {
    Fail("{}: sinks={} is not below window={} (allowed: 1 <= sinks < window)", where, r.mask.sinks,
         r.mask.window);
  }
}

}  // namespace

void ValidateMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  CheckGeometry(geo, fed_len);
  const std::string where = Where(m);
  if (m.rel.map->mask_only) CheckMaskOnlyMap(m, where);
  CheckFieldRanges(m, where);
  CheckFieldPairs(m, where);
  CheckRopeAgainstModel(m, geo, where);
  CheckLengthsAgainstCall(m, geo, fed_len, where);
  CheckResolvedDefaults(m, geo, fed_len, where);
}

Method ResolveMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  ValidateMethod(m, geo, fed_len);
  return FillDefaults(m, geo, fed_len);
}

}  // namespace stretch
