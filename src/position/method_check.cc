// Position methods (method.h): validation against a model and a length, and the defaults that
// ResolveMethod fills.
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

namespace stretch {
namespace method_internal {

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

}  // namespace method_internal

using namespace method_internal;

// ---------------------------------------------------------------------------------------------
// Validation and defaults

namespace {

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
}

// What the defaults make of the rest.
void CheckResolvedDefaults(const Method& m, const RopeGeometry& geo, int64_t fed_len,
                           const std::string& where) {
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

}  // namespace

void ValidateMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  CheckGeometry(geo, fed_len);
  const std::string where = Where(m);
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
