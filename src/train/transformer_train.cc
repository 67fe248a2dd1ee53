#include "src/train/transformer_train.h"

#include <cmath>
#include <memory>

#include "src/core/error.h"
#include "src/position/rope.h"

namespace stretch {

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
    if (m.n_heads < 1 || m.dim % m.n_heads != 0) Bad("heads", m.n_heads, "a divisor of dim");
    if (m.head_dim() % 2 != 0) Bad("head dim (dim / heads)", m.head_dim(), "an even number");
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
  for (const LayerLayout& l : layout.layers) {
    if (l.window < 0) Bad("window", l.window, "0 (full attention) or a positive integer");
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

void ValidateArch(const TrainArch& arch) {
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
HeadRows Rows(const float* x, int heads, int D) { return {x, int64_t{heads} * D, D}; }
HeadRowsMut RowsMut(float* x, int heads, int D) { return {x, int64_t{heads} * D, D}; }
}  // namespace

void KernelAttention::Forward(const float* q, const float* k, const float* v, float* out,
                              float* lse, const AttentionDims& dims, float scale,
                              const AttentionPlan& plan) {
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  params.lse = lse;
  const int H = dims.n_heads, G = dims.n_kv_heads, D = dims.head_dim;
  // A plan with a relative map takes raw q and k: the kernel rotates q per segment and reads
  // the keys rotated once per key slot.
  std::unique_ptr<KernelRotation> map;
  if (!plan.map.IsIdentity()) {
    STRETCH_CHECK(dims.q_pos0 == 0 && dims.n_q == dims.n_kv, "training: whole sequences");
    map = std::make_unique<KernelRotation>(plan, Rows(k, G, D), dims);
    map->Into(params);
  }
  AttentionForward(Rows(q, H, D), Rows(k, G, D), Rows(v, G, D), RowsMut(out, H, D), dims, params);
}

void KernelAttention::Backward(const float* q, const float* k, const float* v, const float* out,
                               const float* dout, const float* lse, float* dq, float* dk, float* dv,
                               const AttentionDims& dims, float scale, const AttentionPlan& plan,
                               double* dbias_a, double* dbias_b) {
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  const int H = dims.n_heads, G = dims.n_kv_heads, D = dims.head_dim;
  std::unique_ptr<KernelRotation> map;
  if (!plan.map.IsIdentity()) {  // dq, dk come back for the raw q and k
    map = std::make_unique<KernelRotation>(plan, Rows(k, G, D), dims);
    map->Into(params);
  }
  AttentionGrads grads{RowsMut(dq, H, D), RowsMut(dk, G, D), RowsMut(dv, G, D), dbias_a, dbias_b};
  AttentionBackward(Rows(q, H, D), Rows(k, G, D), Rows(v, G, D), Rows(out, H, D), Rows(dout, H, D),
                    lse, dims, params, grads);
}

}  // namespace stretch
