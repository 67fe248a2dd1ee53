#include "src/model/model_arch.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/method.h"
#include "src/position/rel_map.h"

namespace stretch {

using nlohmann::json;

namespace {

[[noreturn]] void Bad(std::string_view field, int64_t v, std::string_view allowed) {
  throw Error(fmt::format("model: {}={} (allowed: {})", field, v, allowed));
}
[[noreturn]] void BadValue(std::string_view field, double v, std::string_view allowed) {
  throw Error(fmt::format("model: {}={} (allowed: {})", field, v, allowed));
}

// Sizes, the GAU's widths and heads, and the layer list.
void ValidateSizes(const TrainArch& arch) {
  const ModelConfig& m = arch.model;
  if (m.dim < 2) Bad("dim", m.dim, ">= 2");
  if (arch.model.Gau()) {
    // One head: Z, Q, K of width S (gau_key_dim), U, V of width E (hidden_dim); the kernel runs
    // E / S copies of the head (src/train/gau_layer.h), so S must divide E.
    if (m.key_dim < 2 || m.key_dim % 2 != 0) {
      Bad("gau_key_dim", m.key_dim, "an even number >= 2 (RoPE rotates pairs)");
    }
    if (m.hidden_dim < 1 || m.hidden_dim % m.key_dim != 0) {
      Bad("hidden_dim (the GAU's expansion width e)", m.hidden_dim,
          fmt::format("a positive multiple of gau_key_dim={}: the attention kernel runs e / s "
                      "copies of the GAU's head, one per slice of V of width s",
                      m.key_dim));
    }
    if (m.n_heads != m.hidden_dim / m.key_dim || m.n_kv_heads != m.n_heads) {
      Bad("heads", m.n_heads,
          fmt::format("e / s = {} kernel heads (and as many kv heads, {} given): the copies of "
                      "the GAU's single head (ModelConfig::SetGau)",
                      m.hidden_dim / m.key_dim, m.n_kv_heads));
    }
  } else {
    if (m.explicit_head_dim < 0) Bad("head dim", m.explicit_head_dim, "0 (dim / heads) or above");
    if (m.n_heads < 1 || (m.explicit_head_dim == 0 && m.dim % m.n_heads != 0)) {
      Bad("heads", m.n_heads, "a divisor of dim");
    }
    if (m.head_dim() < 2 || m.head_dim() % 2 != 0) {
      Bad("head dim", m.head_dim(), "an even number >= 2");
    }
    if (m.n_kv_heads < 1 || m.n_heads % m.n_kv_heads != 0) {
      Bad("kv_heads", m.n_kv_heads, "a divisor of heads");
    }
    if (m.hidden_dim < 1) Bad("hidden_dim", m.hidden_dim, ">= 1");
  }
  if (m.n_layers < 1) Bad("layers", m.n_layers, ">= 1");
  if (m.vocab_size < 2) Bad("vocab_size", m.vocab_size, ">= 2");
  if (m.seq_len < 2) Bad("seq_len", m.seq_len, ">= 2");
  const AttentionLayout& layout = m.attention;
  if (static_cast<int>(layout.layers.size()) != m.n_layers) {
    Bad("layer layout entries", static_cast<int64_t>(layout.layers.size()),
        fmt::format("one per layer ({})", m.n_layers));
  }
  if (const std::string problem = LayerLayoutProblem(layout); !problem.empty()) {
    throw Error("model: " + problem);
  }
}

// RoPE's variants: p-RoPE's fraction, PI, NTK and its base.
void ValidateRope(const TrainArch& arch) {
  const ModelConfig& m = arch.model;
  const AttentionLayout& layout = m.attention;
  if (!(layout.rope_fraction > 0.0 && layout.rope_fraction <= 1.0)) {
    BadValue("rope fraction (p-RoPE)", layout.rope_fraction, "0 < p <= 1");
  }
  // RoPE's position interpolation (PI) and NTK-aware factor: finite, >= 1, one at a time, on
  // RoPE (or XPOS's rotation) without a training-time map (a map's spec has no key for them).
  const double pi = arch.model.rope_interpolation;
  if (!(std::isfinite(pi) && pi >= 1.0)) {
    BadValue("rope interpolation (pi)", pi, "a finite factor >= 1; 1: none");
  }
  if (!(std::isfinite(arch.rope_ntk) && arch.rope_ntk >= 1.0)) {
    BadValue("rope ntk factor", arch.rope_ntk, "a finite factor >= 1; 1: none");
  }
  if (pi != 1.0 || arch.rope_ntk != 1.0) {
    const std::string what =
        pi != 1.0 ? fmt::format("pi={}", pi) : fmt::format("ntk={}", arch.rope_ntk);
    if (pi != 1.0 && arch.rope_ntk != 1.0) {
      throw Error(fmt::format("model: pi={} and ntk={} together (allowed: one of them)", pi,
                              arch.rope_ntk));
    }
    if (layout.position != LayerPosition::kRope) {
      throw Error(fmt::format("model: {} on a model without RoPE (allowed: rope, xpos)", what));
    }
    if (!layout.rope_map.empty()) {
      throw Error(
          fmt::format("model: {} with the training-time map \"{}\" (allowed: plain "
                      "RoPE or XPOS)",
                      what, layout.rope_map));
    }
  }
  if (arch.rope_ntk != 1.0) {
    if (!(std::isfinite(arch.rope_ntk_base) && arch.rope_ntk_base > 1.0f)) {
      BadValue("rope ntk base", arch.rope_ntk_base, "the RoPE base ntk scales, > 1");
    }
    const float want = NtkRopeBase(arch.rope_ntk_base, arch.rope_ntk, arch.model.head_dim());
    if (arch.model.rope_base != want) {
      throw Error(
          fmt::format("model: rope_base={} with ntk={} from base {} (expected the NTK "
                      "base {} * {}^({} / {}) = {})",
                      arch.model.rope_base, arch.rope_ntk, arch.rope_ntk_base, arch.rope_ntk_base,
                      arch.rope_ntk, arch.model.head_dim(), arch.model.head_dim() - 2, want));
    }
  }
}

// XPOS, Sandwich, a training-time map, and the combinations that are refused.
void ValidateVariants(const TrainArch& arch) {
  const ModelConfig& m = arch.model;
  const AttentionLayout& layout = m.attention;
  if (!(std::isfinite(layout.xpos_scale_base) && layout.xpos_scale_base >= 0.0)) {
    BadValue("xpos gamma", layout.xpos_scale_base, "a finite number > 0; 0: no XPOS");
  }
  const bool xpos = layout.xpos_scale_base > 0.0;
  if (xpos && layout.position != LayerPosition::kRope) {
    throw Error(fmt::format("model: XPOS (gamma={}) on a model without RoPE (allowed: rope)",
                            layout.xpos_scale_base));
  }
  if (xpos && !layout.rope_map.empty()) {
    throw Error(fmt::format("model: XPOS with the training-time map \"{}\" (allowed: plain RoPE)",
                            layout.rope_map));
  }
  if (layout.position == LayerPosition::kSandwich &&
      (layout.sandwich_dim < 2 || layout.sandwich_dim % 2 != 0)) {
    Bad("sandwich dim", layout.sandwich_dim, "an even number >= 2");
  }
  if (!layout.rope_map.empty()) {
    Method map;
    try {
      map = ParseMethod(layout.rope_map);
    } catch (const Error& e) {
      throw Error(fmt::format("model: rope map \"{}\": {}", layout.rope_map, e.what()));
    }
    if (map.rel.IsIdentity() || layout.position != LayerPosition::kRope || arch.model.Gau()) {
      throw Error(
          fmt::format("model: rope map \"{}\" needs a relative map ({}), RoPE and the LLaMA block",
                      layout.rope_map, RelMapNames()));
    }
  }
  if (layout.position == LayerPosition::kSandwich && !std::isfinite(layout.sandwich_lambda)) {
    throw Error(fmt::format("model: sandwich lambda={} (allowed: a finite number)",
                            layout.sandwich_lambda));
  }
  if (m.Gau() && (xpos || layout.ssmax)) {
    throw Error(
        "model: XPOS and SSMax are not yet implemented for the GAU block (allowed with the "
        "GAU block: rope, nope, alibi, kerple-log, kerple-power, sandwich; keynorm, "
        "querynorm, cosine, logn)");
  }
}

}  // namespace

std::string LayerLayoutProblem(const AttentionLayout& a) {
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerLayout& s = a.layers[l];
    if (s.window < 0) {
      return fmt::format(
          "layer {}: window={} (allowed: 0 for full attention, or a positive "
          "integer)",
          l, s.window);
    }
    if (s.chunk < 0) {
      return fmt::format("layer {}: chunk={} (allowed: 0 for none, or a positive integer)", l,
                         s.chunk);
    }
    if (s.window > 0 && s.chunk > 0) {
      return fmt::format("layer {}: window={} and chunk={} (allowed: one of them)", l, s.window,
                         s.chunk);
    }
    if (!(s.rope_base == 0.0 || (std::isfinite(s.rope_base) && s.rope_base > 1.0))) {
      return fmt::format("layer {}: rope base={} (allowed: a number > 1, or 0 for the model's)", l,
                         s.rope_base);
    }
    if (!(s.rope_pi == 0.0 || (std::isfinite(s.rope_pi) && s.rope_pi >= 1.0))) {
      return fmt::format(
          "layer {}: rope pi={} (allowed: a factor >= 1, or 0 for the model's interpolation)", l,
          s.rope_pi);
    }
    if (!s.ModelRope() && !(s.position && a.position == LayerPosition::kRope)) {
      return fmt::format(
          "layer {}: a RoPE base or pi of its own on a layer without RoPE (allowed: base and pi "
          "on the layers of a rope or xpos model that keep their position)",
          l);
    }
    if (s.temperature && !(a.temperature_floor > 0.0)) {
      return fmt::format(
          "layer {}: temperature tuning without its floor scale (allowed: temperature=F/S in the "
          "attention spec, F > 0)",
          l);
    }
  }
  if (!(a.temperature_floor >= 0.0 && std::isfinite(a.temperature_floor) &&
        std::isfinite(a.temperature_scale) && a.temperature_scale >= 0.0)) {
    return fmt::format(
        "temperature floor={} scale={} (allowed: a floor > 0 and a scale >= 0, or 0 and 0 for "
        "none)",
        a.temperature_floor, a.temperature_scale);
  }
  return "";
}

void ValidateArch(const TrainArch& arch) {
  if (const std::string what = arch.model.UntrainedBlock(); !what.empty()) {
    Fail("the model has {}: stretch runs such a block but does not train it", what);
  }
  ValidateSizes(arch);
  ValidateRope(arch);
  ValidateVariants(arch);
}

float NtkRopeBase(double base, double factor, int rotary_dim) {
  // NTK-aware scaled RoPE (bloc97 2023; HF _compute_ntk_parameters): base * factor^(d / (d - 2)),
  // so that the slowest pair's wavelength grows by `factor` while the fastest keeps its own.
  if (rotary_dim < 4) {
    Fail(
        "ntk={}: the rotary dim is {} (allowed: NTK needs a rotary dim >= 4, its exponent is "
        "d / (d - 2))",
        factor, rotary_dim);
  }
  const double d = rotary_dim;
  return static_cast<float>(base * std::pow(factor, d / (d - 2.0)));
}

void FinalizeArch(TrainArch& arch) {
  ModelConfig& m = arch.model;
  if (m.Gau() && m.key_dim > 0) m.SetGau(m.key_dim);  // R = E / S at the final expansion width
  if (arch.rope_ntk != 1.0) {
    STRETCH_CHECK(
        arch.model.Gau() ? arch.model.key_dim > 0 : arch.model.dim > 0 && arch.model.n_heads > 0,
        "ntk={}: the sizes (dim, heads or the GAU key width) must be set first", arch.rope_ntk);
    arch.model.rope_base = NtkRopeBase(arch.rope_ntk_base, arch.rope_ntk, arch.model.head_dim());
  }
}

namespace {

// The config's "position" names (XPOS is RoPE with xpos_scale_base > 0, written as "xpos").
constexpr std::array<std::pair<LayerPosition, const char*>, 6> kPositions = {{
    {LayerPosition::kRope, "rope"},
    {LayerPosition::kNone, "nope"},
    {LayerPosition::kAlibi, "alibi"},
    {LayerPosition::kKerpleLog, "kerple-log"},
    {LayerPosition::kKerplePower, "kerple-power"},
    {LayerPosition::kSandwich, "sandwich"},
}};

constexpr std::array<std::pair<ModelBlock, const char*>, 2> kBlocks = {{
    {ModelBlock::kLlama, "llama"},
    {ModelBlock::kGau, "gau"},
}};

// Log-n, SSMax or the per-position lambda beside a window or chunk layer: the layouts whose
// scales changed when n became the keys a query sees (AttentionPlan::VisibleKeys), where a
// config carries "log_n_keys" (ArchToJson, ArchFromJson).
bool CountsKeysOnLocalLayer(const AttentionLayout& a) {
  return (a.log_length_scale || a.position_log_scale || a.ssmax) &&
         std::any_of(a.layers.begin(), a.layers.end(),
                     [](const LayerLayout& l) { return l.Local(); });
}

}  // namespace

const char* ArchBlockName(ModelBlock b) {
  for (const auto& [k, name] : kBlocks) {
    if (k == b) return name;
  }
  return "?";
}

const char* ArchPositionName(const AttentionLayout& a) {
  if (a.position == LayerPosition::kRope && a.xpos_scale_base > 0.0) return "xpos";
  for (const auto& [k, name] : kPositions) {
    if (k == a.position) return name;
  }
  return "?";
}

json ArchToJson(const TrainArch& a) {
  const ModelConfig& m = a.model;
  const AttentionLayout& at = m.attention;
  json layout = json::array();
  for (const LayerLayout& l : at.layers) {
    json entry = {{"position", l.position}, {"window", l.window}};
    // Written only when set, so that the configs of earlier runs compare equal (as below).
    if (l.chunk != 0) entry["chunk"] = l.chunk;
    if (l.rope_base != 0.0) entry["rope_base"] = l.rope_base;
    if (l.rope_pi != 0.0) entry["rope_pi"] = l.rope_pi;
    if (l.temperature) entry["temperature"] = true;
    layout.push_back(entry);
  }
  // The file counts the GAU's one head ("heads": 1); the config its R = E / S kernel heads.
  json j = {{"block", ArchBlockName(m.block)},
            {"dim", m.dim},
            {"hidden_dim", m.hidden_dim},
            {"layers", m.n_layers},
            {"heads", m.Gau() ? 1 : m.n_heads},
            {"kv_heads", m.Gau() ? 1 : m.n_kv_heads},
            {"vocab_size", m.vocab_size},
            {"seq_len", m.seq_len},
            {"shared_classifier", m.shared_classifier},
            {"rope_base", m.rope_base},
            {"norm_eps", m.norm_eps},
            {"position", ArchPositionName(at)},
            {"logits",
             {{"query_norm", a.model.attention.query_norm},
              {"key_norm", a.model.attention.key_norm},
              {"scale", a.model.attention.logit_scale}}},
            {"layout", layout}};
  if (a.model.Gau()) j["gau_key_dim"] = a.model.key_dim;  // LLaMA: absent (it has no such size)
  // Fields that came with the later variants are written only when they are not the default,
  // so that configs of earlier runs compare equal (resume checks the architecture by its JSON).
  if (a.model.attention.rope_fraction != 1.0) j["rope_fraction"] = a.model.attention.rope_fraction;
  if (m.rope_interpolation != 1.0f) j["rope_interpolation"] = m.rope_interpolation;
  if (a.rope_ntk != 1.0) {  // rope_base above is the resolved one; these say where it came from
    j["rope_ntk"] = a.rope_ntk;
    j["rope_ntk_base"] = a.rope_ntk_base;
  }
  if (!a.model.attention.rope_map.empty()) j["rope_map"] = a.model.attention.rope_map;
  if (at.xpos_scale_base > 0.0) j["xpos_gamma"] = at.xpos_scale_base;
  if (a.model.attention.position == LayerPosition::kSandwich) {
    j["sandwich_dim"] = a.model.attention.sandwich_dim;
    j["sandwich_lambda"] = a.model.attention.sandwich_lambda;
  }
  if (a.model.attention.log_length_scale) j["logits"]["log_length"] = true;
  if (a.model.attention.position_log_scale) j["logits"]["position_lambda"] = true;
  if (a.model.attention.ssmax) j["logits"]["ssmax"] = true;
  // Those scales' n is the number of keys a query sees (AttentionPlan::VisibleKeys): on a window
  // or chunk layer, at most its width. Written where that matters (a local layer), so that a
  // checkpoint of the versions before, which counted i + 1 there too, is told apart
  // (ArchFromJson), and the configs of every other model stay as they were (--resume compares).
  if (CountsKeysOnLocalLayer(at)) j["logits"]["log_n_keys"] = "seen";
  if (at.temperature_floor != 0.0 || at.temperature_scale != 0.0) {
    j["logits"]["temperature"] = {{"floor", at.temperature_floor}, {"scale", at.temperature_scale}};
  }
  return j;
}

TrainArch ArchFromJson(const json& j, const std::string& what) {
  TrainArch a;
  ModelConfig& m = a.model;
  // "block" came with the GAU block; a config without it (older checkpoints) is a LLaMA one.
  const std::string block = j.is_object() && j.contains("block")
                                ? JsonField<std::string>(j, "block", what)
                                : std::string("llama");
  bool block_found = false;
  for (const auto& [k, name] : kBlocks) {
    if (block == name) {
      a.model.block = k;
      block_found = true;
    }
  }
  if (!block_found) Fail("{}: block \"{}\" (allowed: llama, gau)", what, block);
  if (a.model.Gau()) a.model.key_dim = JsonField<int>(j, "gau_key_dim", what);
  m.dim = JsonField<int>(j, "dim", what);
  m.hidden_dim = JsonField<int>(j, "hidden_dim", what);
  m.n_layers = JsonField<int>(j, "layers", what);
  m.n_heads = JsonField<int>(j, "heads", what);
  m.n_kv_heads = JsonField<int>(j, "kv_heads", what);
  m.vocab_size = JsonField<int>(j, "vocab_size", what);
  m.seq_len = JsonField<int>(j, "seq_len", what);
  m.shared_classifier = JsonField<bool>(j, "shared_classifier", what);
  m.rope_base = JsonField<float>(j, "rope_base", what);
  m.norm_eps = JsonField<float>(j, "norm_eps", what);
  const std::string pos = JsonField<std::string>(j, "position", what);
  bool found = pos == "xpos";
  if (found) a.model.attention.xpos_scale_base = kXposDefaultGamma;  // a later "xpos_gamma" wins
  for (const auto& [k, name] : kPositions) {
    if (pos == name) {
      a.model.attention.position = k;
      found = true;
    }
  }
  if (pos == "sandwich") {
    a.model.attention.sandwich_dim = kSandwichDefaultDim;
    a.model.attention.sandwich_lambda = kSandwichDefaultLambda;
  }
  if (!found) {
    Fail(
        "{}: position \"{}\" (allowed: rope, nope, alibi, kerple-log, kerple-power, sandwich, "
        "xpos)",
        what, pos);
  }
  if (j.contains("rope_fraction"))
    a.model.attention.rope_fraction = JsonField<double>(j, "rope_fraction", what);
  if (j.contains("rope_interpolation")) {
    m.rope_interpolation = JsonField<float>(j, "rope_interpolation", what);
  }
  if (j.contains("rope_ntk")) {  // ValidateArch checks rope_base against these
    a.rope_ntk = JsonField<double>(j, "rope_ntk", what);
    a.rope_ntk_base = JsonField<float>(j, "rope_ntk_base", what);
  }
  if (j.contains("rope_map"))
    a.model.attention.rope_map = JsonField<std::string>(j, "rope_map", what);
  if (j.contains("xpos_gamma"))
    a.model.attention.xpos_scale_base = JsonField<double>(j, "xpos_gamma", what);
  if (j.contains("sandwich_dim"))
    a.model.attention.sandwich_dim = JsonField<int>(j, "sandwich_dim", what);
  if (j.contains("sandwich_lambda"))
    a.model.attention.sandwich_lambda = JsonField<double>(j, "sandwich_lambda", what);
  const json logits = JsonField<json>(j, "logits", what);
  a.model.attention.query_norm = JsonField<bool>(logits, "query_norm", what + " logits");
  a.model.attention.key_norm = JsonField<bool>(logits, "key_norm", what + " logits");
  a.model.attention.logit_scale = JsonField<double>(logits, "scale", what + " logits");
  // "logn" was the log-n of earlier versions, max(1, ln(i + 1) / ln L): 1 at every trained
  // position, so a model trained with it learned nothing from it, and "logn" in --attention now
  // means "log_length" (ln(i + 1) / ln L everywhere). Such a checkpoint is refused rather than
  // silently resumed or scored under the new meaning.
  if (logits.contains("logn") && JsonField<bool>(logits, "logn", what + " logits")) {
    Fail(
        "{} logits: \"logn\": true was written by an earlier stretch, whose training log-n "
        "(max(1, ln(i + 1) / ln L)) had no effect at the trained positions; --attention logn now "
        "trains with ln(i + 1) / ln L at every position (\"log_length\"). Train the model again",
        what);
  }
  if (logits.contains("log_length")) {
    a.model.attention.log_length_scale = JsonField<bool>(logits, "log_length", what + " logits");
  }
  if (logits.contains("position_lambda")) {
    a.model.attention.position_log_scale =
        JsonField<bool>(logits, "position_lambda", what + " logits");
  }
  if (logits.contains("ssmax"))
    a.model.attention.ssmax = JsonField<bool>(logits, "ssmax", what + " logits");
  const json layout = JsonField<json>(j, "layout", what);
  if (!layout.is_array()) Fail("{}: layout is not a list", what);
  for (const json& l : layout) {
    const std::string where = what + " layout";
    LayerLayout s{JsonField<bool>(l, "position", where), JsonField<int64_t>(l, "window", where)};
    if (l.contains("chunk")) s.chunk = JsonField<int64_t>(l, "chunk", where);
    if (l.contains("rope_base")) s.rope_base = JsonField<double>(l, "rope_base", where);
    if (l.contains("rope_pi")) s.rope_pi = JsonField<double>(l, "rope_pi", where);
    if (l.contains("temperature")) s.temperature = JsonField<bool>(l, "temperature", where);
    a.model.attention.layers.push_back(s);
  }
  if (logits.contains("temperature")) {
    const json t = JsonField<json>(logits, "temperature", what + " logits");
    a.model.attention.temperature_floor = JsonField<double>(t, "floor", what + " temperature");
    a.model.attention.temperature_scale = JsonField<double>(t, "scale", what + " temperature");
  }
  // Versions before "log_n_keys" took n = i + 1 on every layer, window and chunk layers too, where
  // n is now the keys the layer lets a query see: such a model with a local layer would be scored
  // under a scale it was not trained with, so it is refused; without one nothing changed.
  const bool seen = logits.contains("log_n_keys") &&
                    JsonField<std::string>(logits, "log_n_keys", what + " logits") == "seen";
  if (CountsKeysOnLocalLayer(a.model.attention) && !seen) {
    Fail(
        "{} logits: a model with window or chunk layers and log-n, SSMax or a per-position lambda, "
        "written by an earlier stretch that took n = i + 1 on those layers too; n is now the "
        "number of keys the layer lets a query see (at most its window), so this model would run "
        "under a scale it was not trained with. Train the model again",
        what);
  }
  if (m.Gau()) {
    if (m.n_heads != 1 || m.n_kv_heads != 1) {
      Fail("{}: GAU with heads={}, kv_heads={} (expected 1 and 1: the GAU block has a single head)",
           what, m.n_heads, m.n_kv_heads);
    }
    if (m.key_dim > 0) m.SetGau(m.key_dim);  // R = E / S kernel heads (ValidateArch checks S)
  }
  try {
    ValidateArch(a);
  } catch (const Error& e) {
    Fail("{}: {}", what, e.what());
  }
  return a;
}

void ValidateAttentionLayout(const Model& model) {
  const ModelConfig& c = model.config;
  const AttentionLayout& layout = c.attention;
  const std::string& what = model.source;
  if (!layout.layers.empty() && static_cast<int>(layout.layers.size()) != c.n_layers) {
    Fail("{}: attention layout has {} layer entries, expected one per layer ({})", what,
         layout.layers.size(), c.n_layers);
  }
  if (!(layout.logit_scale >= 0.0 && std::isfinite(layout.logit_scale))) {
    Fail("{}: logit scale {} is out of range (allowed: a positive number, or 0 for 1/sqrt(D))",
         what, layout.logit_scale);
  }
  if (c.Gau() && !(c.key_dim > 0 && c.key_dim % 2 == 0 && c.hidden_dim % c.key_dim == 0 &&
                   c.n_heads == c.hidden_dim / c.key_dim && c.n_kv_heads == c.n_heads)) {
    Fail(
        "{}: GAU sizes: key dim {}, expansion {}, {} heads / {} kv heads (expected an even key "
        "dim S dividing the expansion E, and E / S heads and kv heads)",
        what, c.key_dim, c.hidden_dim, c.n_heads, c.n_kv_heads);
  }
  if (!(layout.rope_fraction > 0.0 && layout.rope_fraction <= 1.0)) {
    Fail("{}: rope fraction {} (allowed: 0 < P <= 1)", what, layout.rope_fraction);
  }
  if (!(layout.xpos_scale_base >= 0.0 && std::isfinite(layout.xpos_scale_base))) {
    Fail("{}: XPOS scale base {} (allowed: a positive number, or 0 for none)", what,
         layout.xpos_scale_base);
  }
  if (layout.xpos_scale_base > 0.0 && c.head_dim() > 512) {
    Fail("{}: XPOS with head dim {} (allowed: head dim <= 512, the kernel's per-tile decay limit)",
         what, c.head_dim());
  }
  if (const std::string problem = LayerLayoutProblem(layout); !problem.empty()) {
    Fail("{}: {}", what, problem);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = layout.Layer(l);
    if (a.position == LayerPosition::kSandwich &&
        !(layout.sandwich_dim > 0 && layout.sandwich_dim % 2 == 0 &&
          std::isfinite(layout.sandwich_lambda))) {
      Fail(
          "{}: layer {}: Sandwich dim {} and lambda {} (allowed: an even dim > 0, a finite "
          "lambda)",
          what, l, layout.sandwich_dim, layout.sandwich_lambda);
    }
    if (static_cast<size_t>(l) >= model.weights.layers.size()) continue;  // the loader's check
    const LayerWeights& w = model.weights.layers[static_cast<size_t>(l)];
    const size_t want =
        (a.position == LayerPosition::kKerpleLog || a.position == LayerPosition::kKerplePower)
            ? static_cast<size_t>(c.position_heads())
            : 0;
    if (w.bias_a.size() != want || w.bias_b.size() != want) {
      Fail(
          "{}: layer {} ({}): KERPLE parameters bias_a, bias_b have {} and {} entries, expected "
          "{} each",
          what, l, LayerPositionName(a.position), w.bias_a.size(), w.bias_b.size(), want);
    }
    for (size_t h = 0; h < want; ++h) {
      if (!std::isfinite(w.bias_a[h]) || !std::isfinite(w.bias_b[h])) {
        Fail("{}: layer {}: KERPLE parameters of head {} are a={}, b={} (expected finite numbers)",
             what, l, h, w.bias_a[h], w.bias_b[h]);
      }
    }
    const size_t want_s = layout.ssmax ? static_cast<size_t>(c.position_heads()) : 0;
    if (w.ssmax.size() != want_s) {
      Fail("{}: layer {}: SSMax parameters have {} entries, expected {}", what, l, w.ssmax.size(),
           want_s);
    }
    for (const float s : w.ssmax) {
      if (!std::isfinite(s)) Fail("{}: layer {}: SSMax parameter {} (expected finite)", what, l, s);
    }
  }
}

}  // namespace stretch
