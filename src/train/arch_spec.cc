#include "src/train/arch_spec.h"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/rel_map.h"

namespace stretch {
namespace {

int64_t PositiveInt(std::string_view flag, std::string_view piece, std::string_view text) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 1) {
    Fail("{} {}: \"{}\" is not a positive integer", flag, piece, text);
  }
  return v;
}

double PositiveNumber(std::string_view flag, std::string_view piece, std::string_view text) {
  try {
    size_t used = 0;
    const double v = std::stod(std::string(text), &used);
    if (used == text.size() && v > 0 && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  Fail("{} {}: \"{}\" is not a positive number", flag, piece, text);
}

// One layer of `layers=`: parts joined by '+' (rope | nope, full | window:W | chunk:C, base:B,
// pi:F, temp), e.g. "window:512+base:10000", "nope+temp".
LayerLayout ParseLayerToken(std::string_view spec, std::string_view token) {
  constexpr std::string_view kParts =
      "rope, nope, full, window:W, chunk:C, base:B, pi:F, temp, joined by +";
  LayerLayout l;
  size_t start = 0;
  while (start <= token.size()) {
    const size_t plus = token.find('+', start);
    const std::string_view part =
        token.substr(start, plus == std::string_view::npos ? std::string_view::npos : plus - start);
    start = plus == std::string_view::npos ? token.size() + 1 : plus + 1;
    const size_t colon = part.find(':');
    const std::string_view key = part.substr(0, colon);
    const std::string_view value = colon == std::string_view::npos ? "" : part.substr(colon + 1);
    const bool has_value = colon != std::string_view::npos;
    if (!has_value && part == "rope") {
      l.position = true;
    } else if (!has_value && part == "nope") {
      l.position = false;
    } else if (!has_value && part == "full") {
      l.window = l.chunk = 0;
    } else if (!has_value && part == "temp") {
      l.temperature = true;
    } else if (has_value && key == "window") {
      l.window = PositiveInt("attention spec", spec, value);
      l.chunk = 0;
    } else if (has_value && key == "chunk") {
      l.chunk = PositiveInt("attention spec", spec, value);
      l.window = 0;
    } else if (has_value && key == "base") {
      l.rope_base = PositiveNumber("attention spec", spec, value);
      if (l.rope_base <= 1.0) Fail("attention spec {}: base:{} (allowed: > 1)", spec, value);
    } else if (has_value && key == "pi") {
      l.rope_pi = PositiveNumber("attention spec", spec, value);
      if (l.rope_pi < 1.0) Fail("attention spec {}: pi:{} (allowed: a factor >= 1)", spec, value);
    } else {
      Fail("attention spec {}: layer \"{}\": unknown part \"{}\" (allowed: {})", spec, token, part,
           kParts);
    }
  }
  return l;
}

// layers=T1/T2/...: each token optionally N* (N copies), the list repeated over the layers.
std::vector<LayerLayout> ParseLayerList(std::string_view spec, std::string_view list,
                                        int n_layers) {
  std::vector<LayerLayout> pattern;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t slash = list.find('/', start);
    std::string_view token = list.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    start = slash == std::string_view::npos ? list.size() + 1 : slash + 1;
    int64_t copies = 1;
    if (const size_t star = token.find('*'); star != std::string_view::npos) {
      copies = PositiveInt("attention spec", spec, token.substr(0, star));
      token = token.substr(star + 1);
    }
    if (token.empty()) Fail("attention spec {}: an empty layer in layers={}", spec, list);
    const LayerLayout l = ParseLayerToken(spec, token);
    for (int64_t c = 0; c < copies && static_cast<int64_t>(pattern.size()) <= n_layers; ++c) {
      pattern.push_back(l);
    }
  }
  if (static_cast<int>(pattern.size()) > n_layers) {
    Fail(
        "attention spec {}: layers= lists more layers than the model's {} (allowed: at most {}; "
        "a shorter list repeats over the layers)",
        spec, n_layers, n_layers);
  }
  std::vector<LayerLayout> out(static_cast<size_t>(n_layers));
  for (size_t i = 0; i < out.size(); ++i) out[i] = pattern[i % pattern.size()];
  return out;
}

}  // namespace

void ApplyBlockSpec(std::string_view spec, TrainArch& arch) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  constexpr std::string_view kAllowed = "llama, gau[:key=S]";
  if (name == "llama") {
    if (!rest.empty())
      Fail("block spec {}: llama takes no parameters (allowed: {})", spec, kAllowed);
    arch.model.block = ModelBlock::kLlama;
    return;
  }
  if (name != "gau")
    Fail("block spec {}: unknown block \"{}\" (allowed: {})", spec, name, kAllowed);
  arch.model.block = ModelBlock::kGau;
  // The paper's s = 128 (Hua et al. 2022, section 2), capped at the model's width.
  arch.model.key_dim = std::min(128, arch.model.dim);
  if (!rest.empty()) {
    if (!rest.starts_with("key=")) {
      Fail("block spec {}: unknown key in \"{}\" (allowed: key=S)", spec, rest);
    }
    const int64_t key = PositiveInt("block spec", spec, rest.substr(4));
    if (key > 65536) Fail("block spec {}: key={} (allowed: 2 .. 65536, even)", spec, key);
    arch.model.key_dim = static_cast<int>(key);
  }
}

namespace {

// The name, the key=value pieces and the spec of one --position value.
struct PositionSpec {
  std::string_view spec, name, rest;
  // Each key=value piece of `rest` handed to `set`, which returns false for an unknown key.
  template <class Set>
  void EachKey(std::string_view allowed_keys, Set&& set) const {
    std::string_view r = rest;
    while (!r.empty()) {
      const size_t comma = r.find(',');
      const std::string_view piece = r.substr(0, comma);
      r = comma == std::string_view::npos ? std::string_view() : r.substr(comma + 1);
      const size_t eq = piece.find('=');
      if (eq == std::string_view::npos || !set(piece.substr(0, eq), piece.substr(eq + 1))) {
        Fail("position spec {}: unknown key in \"{}\" (allowed for {}: {})", spec, piece, name,
             allowed_keys);
      }
    }
  }
};

// rope[:base=B,fraction=P,pi=F|ntk=F] and xpos[:...,gamma=G].
void ApplyRopeSpec(const PositionSpec& ps, TrainArch& arch) {
  const std::string_view spec = ps.spec, name = ps.name;
  arch.model.attention.position = LayerPosition::kRope;
  // XPOS: RoPE with a per-pair decay of scale base gamma (torchscale's default 512).
  if (name == "xpos") arch.model.attention.xpos_scale_base = kXposDefaultGamma;
  // pi=F, ntk=F: a factor F >= 1 (1: none); one of the two.
  std::optional<double> pi, ntk;
  auto factor = [&](std::string_view key, std::string_view value) {
    const double f = PositiveNumber("position spec", spec, value);
    if (f < 1.0) {
      Fail("position spec {}: {}={} (allowed: a factor F >= 1; {})", spec, key, value,
           key == "pi" ? "positions are divided by F" : "the base is scaled by F^(D/(D-2))");
    }
    return f;
  };
  ps.EachKey(name == "rope" ? "base=B, fraction=P, pi=F, ntk=F"
                            : "base=B, gamma=G, fraction=P, pi=F, ntk=F",
             [&](std::string_view key, std::string_view value) {
               if (key == "pi") {
                 pi = factor(key, value);
               } else if (key == "ntk") {
                 ntk = factor(key, value);
               } else if (key == "base") {
                 // theta_t = base^(-2t/D) falls with t only for a base > 1; the base is kept as a float.
                 const double b = PositiveNumber("position spec", spec, value);
                 if (b <= 1.0 || b > std::numeric_limits<float>::max()) {
                   Fail("position spec {}: base={} (allowed: 1 < B <= {:g})", spec, value,
                        std::numeric_limits<float>::max());
                 }
                 arch.model.rope_base = static_cast<float>(b);
               } else if (key == "fraction") {
                 arch.model.attention.rope_fraction = PositiveNumber("position spec", spec, value);
                 if (arch.model.attention.rope_fraction > 1.0) {
                   Fail(
                       "position spec {}: fraction={} (allowed: 0 < P <= 1, the share of RoPE's "
                       "frequency pairs that rotate)",
                       spec, value);
                 }
               } else if (key == "gamma" && name == "xpos") {
                 arch.model.attention.xpos_scale_base =
                     PositiveNumber("position spec", spec, value);
               } else {
                 return false;
               }
               return true;
             });
  if (pi && ntk) {
    Fail(
        "position spec {}: pi and ntk together (allowed: one of them: pi=F divides positions by "
        "F, ntk=F scales the base)",
        spec);
  }
  // PI (Chen et al. 2023, arXiv 2306.15595): position m rotated as m / F, every theta / F.
  if (pi) arch.model.rope_interpolation = static_cast<float>(*pi);
  // NTK-aware (bloc97; HF _compute_ntk_parameters): base' = base F^(D/(D-2)), resolved here
  // when the sizes are known (FinalizeArch).
  if (ntk) {
    arch.rope_ntk = *ntk;
    arch.rope_ntk_base = arch.model.rope_base;
    try {
      FinalizeArch(arch);
    } catch (const Error& e) {
      Fail("position spec {}: {}", spec, e.what());
    }
  }
}

// sandwich[:dim=D,lambda=X].
void ApplySandwichSpec(const PositionSpec& ps, TrainArch& arch) {
  const std::string_view spec = ps.spec;
  arch.model.attention.position = LayerPosition::kSandwich;
  arch.model.attention.sandwich_dim = kSandwichDefaultDim;
  arch.model.attention.sandwich_lambda = kSandwichDefaultLambda;
  ps.EachKey("dim=D, lambda=X", [&](std::string_view key, std::string_view value) {
    if (key == "dim") {
      const int64_t d = PositiveInt("position spec", spec, value);
      if (d % 2 != 0 || d > 65536)
        Fail("position spec {}: dim={} (allowed: even, 2 .. 65536)", spec, d);
      arch.model.attention.sandwich_dim = static_cast<int>(d);
    } else if (key == "lambda") {
      arch.model.attention.sandwich_lambda = PositiveNumber("position spec", spec, value);
    } else {
      return false;
    }
    return true;
  });
}

// The position schemes, for messages: the relative maps as their files give their usage.
std::string PositionSpecAllowed() {
  std::string out =
      "rope[:base=B,fraction=P,pi=F|ntk=F], xpos[:base=B,gamma=G,fraction=P,pi=F|ntk=F], nope, "
      "alibi, kerple-log, kerple-power, sandwich[:dim=D,lambda=X], or RoPE with a relative map: ";
  std::string_view sep;
  for (const RelMapDescriptor* map : RelMaps()) {
    if (map->train_usage.empty()) continue;
    out += sep;
    out += map->train_usage;
    sep = ", ";
  }
  return out;
}

}  // namespace

void ApplyPositionSpec(std::string_view spec, TrainArch& arch) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  const std::string kAllowed = PositionSpecAllowed();
  // Every field of the position scheme back to its default but the RoPE base, which a spec
  // without base= keeps (a checkpoint's, for --init: the base its weights were trained with).
  {
    const TrainArch defaults;
    arch.model.attention.rope_fraction = defaults.model.attention.rope_fraction;
    arch.rope_ntk = defaults.rope_ntk;
    arch.rope_ntk_base = defaults.rope_ntk_base;
    arch.model.rope_interpolation = defaults.model.rope_interpolation;
    arch.model.attention.xpos_scale_base = defaults.model.attention.xpos_scale_base;
    arch.model.attention.position = defaults.model.attention.position;
    arch.model.attention.rope_map.clear();
    arch.model.attention.sandwich_dim = defaults.model.attention.sandwich_dim;
    arch.model.attention.sandwich_lambda = defaults.model.attention.sandwich_lambda;
  }
  const PositionSpec ps{spec, name, rest};
  if (name == "rope" || name == "xpos") return ApplyRopeSpec(ps, arch);
  // A relative map at training time: RoPE whose full-attention layers see the map's positions.
  if (const RelMapDescriptor* map = FindRelMap(name); map != nullptr && !map->train_usage.empty()) {
    Method m;
    try {
      m = ParseMethod(spec);
    } catch (const Error& e) {
      Fail("position spec {}: {}", spec, e.what());
    }
    if (m.rope.scaling != RopeScaling::kNone || m.mask.kind != MaskKind::kCausal || m.logn) {
      Fail(
          "position spec {}: a training-time map takes its own keys only (window, k, group, ...), "
          "no frequency scaling, mask or +logn (put logn in the attention spec)",
          spec);
    }
    arch.model.attention.position = LayerPosition::kRope;
    arch.model.attention.rope_map = CanonicalSpec(m);
    return;
  }
  if (name == "sandwich") return ApplySandwichSpec(ps, arch);
  if (!rest.empty())
    Fail("position spec {}: {} takes no parameters (allowed: {})", spec, name, kAllowed);
  if (name == "nope") {
    arch.model.attention.position = LayerPosition::kNone;
  } else if (name == "alibi") {
    arch.model.attention.position = LayerPosition::kAlibi;
  } else if (name == "kerple-log") {
    arch.model.attention.position = LayerPosition::kKerpleLog;
  } else if (name == "kerple-power") {
    arch.model.attention.position = LayerPosition::kKerplePower;
  } else {
    Fail("position spec {}: unknown scheme \"{}\" (allowed: {})", spec, name, kAllowed);
  }
}

void ApplyAttentionSpec(std::string_view spec, TrainArch& arch) {
  const int n = arch.model.n_layers;
  arch.model.attention.layers.assign(static_cast<size_t>(n), LayerLayout{});
  {  // the logits back to their defaults
    AttentionLayout& a = arch.model.attention;
    const AttentionLayout defaults;
    a.query_norm = defaults.query_norm;
    a.key_norm = defaults.key_norm;
    a.logit_scale = defaults.logit_scale;
    a.log_length_scale = defaults.log_length_scale;
    a.position_log_scale = defaults.position_log_scale;
    a.ssmax = defaults.ssmax;
    a.temperature_floor = defaults.temperature_floor;
    a.temperature_scale = defaults.temperature_scale;
  }
  bool cosine = false;
  constexpr std::string_view kAllowed =
      "keynorm, querynorm, cosine, cosine=per-position, scale=X, logn, ssmax, full, window=W, "
      "chunk=C, hwfa=W, hwfa2=W/K, swan=W/K, gemma3=W/K, llama4=C/K, layers=L1/L2/..., "
      "local-base=B (with gemma3), temperature=F/S";
  std::string_view layout_piece = "full";  // the last piece that set the layers
  std::optional<double> local_base;
  std::optional<std::pair<double, double>> temperature;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string_view piece = spec.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (piece.empty()) Fail("attention spec {}: an empty piece (allowed: {})", spec, kAllowed);
    const size_t eq = piece.find('=');
    const std::string_view key = piece.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : piece.substr(eq + 1);
    auto window_every = [&](int64_t& w, int64_t& k) {
      const size_t slash = value.find('/');
      if (slash == std::string_view::npos) {
        Fail("attention spec {}: {} wants W/K (a window and a period), got \"{}\"", spec, key,
             value);
      }
      w = PositiveInt("attention spec", piece, value.substr(0, slash));
      k = PositiveInt("attention spec", piece, value.substr(slash + 1));
    };
    if (piece == "keynorm") {
      arch.model.attention.key_norm = true;
    } else if (piece == "querynorm") {
      arch.model.attention.query_norm = true;
    } else if (piece == "cosine" || piece == "cosine=per-position") {
      arch.model.attention.key_norm = arch.model.attention.query_norm = true;
      arch.model.attention.position_log_scale = piece == "cosine=per-position";
      cosine = true;
    } else if (piece == "logn") {
      arch.model.attention.log_length_scale = true;
    } else if (piece == "ssmax") {
      arch.model.attention.ssmax = true;
    } else if (key == "scale") {
      arch.model.attention.logit_scale = PositiveNumber("attention spec", piece, value);
    } else if (piece == "full") {
      for (LayerLayout& l : arch.model.attention.layers) l = LayerLayout{};
      layout_piece = key;
    } else if (key == "window") {
      const int64_t w = PositiveInt("attention spec", piece, value);
      for (LayerLayout& l : arch.model.attention.layers) l = LayerLayout{true, w};
      layout_piece = key;
    } else if (key == "chunk") {
      const int64_t c = PositiveInt("attention spec", piece, value);
      for (LayerLayout& l : arch.model.attention.layers) l = LayerLayout{true, 0, c};
      layout_piece = key;
    } else if (key == "gemma3" || key == "llama4") {
      // Gemma 3 (HF Gemma3Config: sliding_window_pattern = 6, layer i global when (i + 1) % 6 ==
      // 0): local layers with a window of W at the local base (rope_local_base_freq, 10,000),
      // global ones full at the model's base and interpolation (--position rope:base=B,pi=F).
      // Llama 4 (HF Llama4TextConfig: no_rope_layer_interval = 4, attention_chunk_size): RoPE
      // layers chunked by C, every K-th layer full attention without RoPE and with the
      // temperature tuning (floor scale C, attention scale 0.1 unless temperature=F/S says).
      int64_t w = 0, k = 0;
      window_every(w, k);
      for (int i = 0; i < n; ++i) {
        const bool global = (i + 1) % k == 0;
        LayerLayout& l = arch.model.attention.layers[static_cast<size_t>(i)];
        if (key == "gemma3") {
          l = global ? LayerLayout{} : LayerLayout{true, w};
        } else {
          l = global ? LayerLayout{.position = false, .temperature = true}
                     : LayerLayout{true, 0, w};
        }
      }
      if (key == "llama4") {
        arch.model.attention.temperature_floor = static_cast<double>(w);
        arch.model.attention.temperature_scale = 0.1;
      }
      layout_piece = key;
    } else if (key == "layers") {
      arch.model.attention.layers = ParseLayerList(spec, value, n);
      layout_piece = key;
    } else if (key == "local-base") {
      local_base = PositiveNumber("attention spec", piece, value);
      if (*local_base <= 1.0) Fail("attention spec {}: {} (allowed: a base > 1)", spec, piece);
    } else if (key == "temperature") {
      const size_t slash = value.find('/');
      if (slash == std::string_view::npos) {
        Fail(
            "attention spec {}: temperature wants F/S (the floor scale and the attention scale: "
            "logits times ln(floor((i + 1) / F) + 1) * S + 1), got \"{}\"",
            spec, value);
      }
      temperature = {PositiveNumber("attention spec", piece, value.substr(0, slash)),
                     PositiveNumber("attention spec", piece, value.substr(slash + 1))};
    } else if (key == "hwfa") {
      const int64_t w = PositiveInt("attention spec", piece, value);
      for (int i = 0; i < n; ++i) {
        arch.model.attention.layers[static_cast<size_t>(i)] =
            i + 1 < n ? LayerLayout{true, w} : LayerLayout{false, 0};
      }
      layout_piece = key;
    } else if (key == "hwfa2" || key == "swan") {
      int64_t w = 0, k = 0;
      window_every(w, k);
      for (int i = 0; i < n; ++i) {
        const bool full = (i + 1) % k == 0;
        arch.model.attention.layers[static_cast<size_t>(i)] =
            full ? LayerLayout{key == "hwfa2", 0} : LayerLayout{true, w};
      }
      layout_piece = key;
    } else {
      Fail("attention spec {}: unknown piece \"{}\" (allowed: {})", spec, piece, kAllowed);
    }
  }
  AttentionLayout& a = arch.model.attention;
  if (layout_piece != "llama4") a.temperature_floor = a.temperature_scale = 0.0;
  if (local_base) {
    if (layout_piece != "gemma3") {
      Fail(
          "attention spec {}: local-base=B sets the base of gemma3=W/K's local layers, and the "
          "layers come from {} (allowed: local-base with gemma3)",
          spec, layout_piece);
    }
  }
  if (layout_piece == "gemma3") {
    // Gemma 3's local layers: RoPE at rope_local_base_freq (10,000 unless local-base=B) without
    // the rope_scaling of the global layers (HF Gemma3: rotary_emb_local is a default RoPE).
    for (LayerLayout& l : a.layers) {
      if (l.window > 0) {
        l.rope_base = local_base.value_or(10000.0);
        l.rope_pi = 1.0;
      }
    }
  }
  const bool tuned = std::any_of(a.layers.begin(), a.layers.end(),
                                 [](const LayerLayout& l) { return l.temperature; });
  if (temperature) {
    if (!tuned) {
      Fail(
          "attention spec {}: temperature=F/S but no layer is tuned (allowed: with llama4=C/K, "
          "or layers=... with +temp on some layers)",
          spec);
    }
    a.temperature_floor = temperature->first;
    a.temperature_scale = temperature->second;
  } else if (tuned && a.temperature_floor == 0.0) {
    Fail(
        "attention spec {}: layers with +temp need temperature=F/S (Llama 4: F = its chunk, "
        "8192, S = 0.1)",
        spec);
  }
  // Cosine attention's lambda (Su Jianlin's definitions): 4 ln(L / 2) for the training length L, or
  // per position 4 ln((i + 1) / 2) (the scale 4 times the plan's per-position factor); a given
  // scale=X replaces the 4 ln(L / 2) or the 4.
  if (cosine && arch.model.attention.logit_scale == 0.0) {
    STRETCH_CHECK(arch.model.seq_len >= 3, "seq_len={} must be set first", arch.model.seq_len);
    arch.model.attention.logit_scale =
        arch.model.attention.position_log_scale ? 4.0 : 4.0 * std::log(0.5 * arch.model.seq_len);
  }
}

std::string BlockSpecOf(const TrainArch& arch) {
  return arch.model.Gau() ? fmt::format("gau:key={}", arch.model.key_dim) : std::string("llama");
}

std::string PositionSpecOf(const TrainArch& arch) {
  switch (arch.model.attention.position) {
    case LayerPosition::kRope: {
      const AttentionLayout& a = arch.model.attention;
      if (!a.rope_map.empty()) return a.rope_map;
      // NTK: the base it scales (model.rope_base is the scaled one), so that the spec parses
      // back to the same architecture.
      const float base = arch.rope_ntk != 1.0 ? arch.rope_ntk_base : arch.model.rope_base;
      const bool xpos = a.xpos_scale_base > 0.0;
      std::string out = fmt::format("{}:base={}", xpos ? "xpos" : "rope", base);
      if (xpos) out += fmt::format(",gamma={}", a.xpos_scale_base);
      if (a.rope_fraction != 1.0) out += fmt::format(",fraction={}", a.rope_fraction);
      if (arch.model.rope_interpolation != 1.0f) {
        out += fmt::format(",pi={}", arch.model.rope_interpolation);
      }
      if (arch.rope_ntk != 1.0) out += fmt::format(",ntk={}", arch.rope_ntk);
      return out;
    }
    case LayerPosition::kSandwich:
      return fmt::format("sandwich:dim={},lambda={}", arch.model.attention.sandwich_dim,
                         arch.model.attention.sandwich_lambda);
    case LayerPosition::kNone: return "nope";
    case LayerPosition::kAlibi: return "alibi";
    case LayerPosition::kKerpleLog: return "kerple-log";
    case LayerPosition::kKerplePower: return "kerple-power";
  }
  return "?";
}

std::string LayoutText(const TrainArch& arch) {
  std::string out;
  for (size_t i = 0; i < arch.model.attention.layers.size(); ++i) {
    const LayerLayout& l = arch.model.attention.layers[i];
    if (!out.empty()) out += " / ";
    out += l.window > 0  ? fmt::format("window {}", l.window)
           : l.chunk > 0 ? fmt::format("chunks of {}", l.chunk)
                         : std::string("full");
    if (!l.position) out += " (no position)";
    if (l.rope_base != 0.0) out += fmt::format(" base {}", l.rope_base);
    if (l.rope_pi != 0.0) out += fmt::format(" pi {}", l.rope_pi);
    if (l.temperature) out += " (temperature)";
  }
  return out;
}

}  // namespace stretch
