// Position methods (method.h) from the settings users know from other engines: llama.cpp's RoPE
// flags and an HF transformers `rope_scaling` object.
//
// Sources (read for the meanings and formulas only; nothing is copied): HF transformers'
// `rope_scaling` keys (src/transformers/modeling_rope_utils.py), and
//   llama.cpp common/arg.cpp (flag meanings), src/llama-context.cpp (yarn_ext_factor default:
//     1 for yarn, 0 otherwise), ggml rope_yarn (attention magnitude mscale = attn_factor *
//     (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0), examples/main (grp_attn_w % grp_attn_n).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/method.h"
#include "src/position/method_internal.h"
#include "src/position/rel_map.h"

namespace stretch {

using namespace method_internal;

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
// --grp-attn-n G --grp-attn-w W (group attention): the relative map whose file handles them
// (RelMapDescriptor::from_llama_cpp).

bool LlamaCppRopeFlags::Any() const {
  return rope_scaling || rope_scale || rope_freq_base || rope_freq_scale || yarn_orig_ctx ||
         yarn_ext_factor || yarn_attn_factor || yarn_beta_fast || yarn_beta_slow || grp_attn_n ||
         grp_attn_w;
}

namespace {

// --rope-scale and --rope-freq-scale (= 1 / the scale): the context expansion factor, or none.
std::optional<double> LlamaCppScale(const LlamaCppRopeFlags& f) {
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
  return scale;
}

// --rope-scaling, or what llama.cpp takes without it: linear with a scale, none without.
std::string LlamaCppScalingType(const LlamaCppRopeFlags& f, const std::optional<double>& scale) {
  std::string type;
  if (f.rope_scaling) {
    type = *f.rope_scaling;
    if (type != "none" && type != "linear" && type != "yarn") {
      Fail("--rope-scaling={} is not a scaling type (allowed: none, linear, yarn)", type);
    }
  } else {
    type = scale ? "linear" : "none";
  }
  return type;
}

// The yarn-* flags, each at a value with no effect or used by YaRN, into m.
void ApplyLlamaCppYarnFlags(const LlamaCppRopeFlags& f, const std::string& type,
                            const std::optional<double>& scale, Method& m) {
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
}

}  // namespace

Method MethodFromLlamaCpp(const LlamaCppRopeFlags& f) {
  const std::optional<double> scale = LlamaCppScale(f);
  const std::string type = LlamaCppScalingType(f, scale);
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
  ApplyLlamaCppYarnFlags(f, type, scale, m);
  for (const RelMapDescriptor* map : RelMaps()) {
    if (map->from_llama_cpp != nullptr) map->from_llama_cpp(f, type, m);
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

}  // namespace stretch
