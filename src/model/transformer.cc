#include "src/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/memory.h"
#include "src/core/profile.h"
#include "src/core/threads.h"
#include "src/kernels/attention.h"
#include "src/kernels/half.h"
#include "src/kernels/ops.h"
#include "src/model/block.h"
#include "src/position/rope.h"

namespace stretch {

std::optional<KvCacheType> ParseKvCacheType(std::string_view name) {
  if (name == "f32") return KvCacheType::kF32;
  if (name == "f16") return KvCacheType::kF16;
  if (name == "bf16") return KvCacheType::kBF16;
  return std::nullopt;
}

std::string_view KvCacheTypeName(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF32: return "f32";
    case KvCacheType::kF16: return "f16";
    case KvCacheType::kBF16: return "bf16";
  }
  return "?";
}

namespace {
HalfType HalfOf(KvCacheType type) {
  return type == KvCacheType::kF16 ? HalfType::kF16 : HalfType::kBF16;
}
}  // namespace

KvCache::KvCache(const ModelConfig& config, int64_t capacity, KvCacheTypes types)
    : capacity_(capacity), kv_dim_(config.kv_dim()), types_(types) {
  STRETCH_CHECK(capacity > 0, "capacity={}", capacity);
  // Refused before a byte is taken: a cache beyond the machine would otherwise be zero-filled
  // for minutes (or swap) before the allocator gives up. A method with two key slots (ReRoPE,
  // Self-Extend) takes another copy of the keys later, as it runs.
  const int64_t need = BytesFor(config, capacity, types);
  if (const std::optional<int64_t> avail = AvailableMemoryBytes(); avail && need > *avail) {
    const int64_t per_position = BytesFor(config, 1, types);
    Fail(
        "the key/value cache for {} positions needs {} ({} per position: {} layers x keys ({}) "
        "and values ({}) of {} elements), more than the {} of memory available now; at most {} "
        "positions fit (a shorter context, 16-bit keys and values with --cache-type f16, or for "
        "generation a streaming cache of sinks and a window)",
        capacity, HumanBytes(need), HumanBytes(per_position), config.n_layers,
        KvCacheTypeName(types.k), KvCacheTypeName(types.v), config.kv_dim(), HumanBytes(*avail),
        *avail / per_position);
  }
  const size_t per_layer = static_cast<size_t>(capacity) * config.kv_dim();
  const size_t L = static_cast<size_t>(config.n_layers);
  key_slots_.assign(L, 1);
  if (types.k == KvCacheType::kF32) {
    k_.resize(L);
    for (auto& layer : k_) layer.resize(per_layer);
  } else {
    k16_.resize(L);
    for (auto& layer : k16_) layer.resize(per_layer);
  }
  if (types.v == KvCacheType::kF32) {
    v_.resize(L);
    for (auto& layer : v_) layer.resize(per_layer);
  } else {
    v16_.resize(L);
    for (auto& layer : v16_) layer.resize(per_layer);
  }
}

float* KvCache::Keys(int layer, int slot) {
  STRETCH_CHECK(types_.k == KvCacheType::kF32, "float32 keys of a {} cache",
                KvCacheTypeName(types_.k));
  return k_[static_cast<size_t>(layer)].data() + static_cast<size_t>(slot) * SlotFloats();
}

float* KvCache::Values(int layer) {
  STRETCH_CHECK(types_.v == KvCacheType::kF32, "float32 values of a {} cache",
                KvCacheTypeName(types_.v));
  return v_[static_cast<size_t>(layer)].data();
}

void KvCache::EnsureKeySlots(int layer, int slots) {
  int& have = key_slots_[static_cast<size_t>(layer)];
  if (slots <= have) return;
  const size_t n = static_cast<size_t>(slots) * SlotFloats();
  if (types_.k == KvCacheType::kF32) {
    k_[static_cast<size_t>(layer)].resize(n);
  } else {
    k16_[static_cast<size_t>(layer)].resize(n);
  }
  have = slots;
}

void KvCache::Truncate(int64_t length) {
  STRETCH_CHECK(length >= 0 && length <= length_, "truncate to {} of {}", length, length_);
  length_ = length;
}

int64_t KvCache::BytesFor(const ModelConfig& config, int64_t capacity, KvCacheTypes types) {
  return static_cast<int64_t>(config.n_layers) * capacity * config.kv_dim() *
         (KvCacheTypeBytes(types.k) + KvCacheTypeBytes(types.v));
}

int64_t KvCache::Bytes() const {
  int64_t bytes = 0;
  for (const auto& l : k_) bytes += static_cast<int64_t>(l.size() * sizeof(float));
  for (const auto& l : v_) bytes += static_cast<int64_t>(l.size() * sizeof(float));
  for (const auto& l : k16_) bytes += static_cast<int64_t>(l.size() * sizeof(uint16_t));
  for (const auto& l : v16_) bytes += static_cast<int64_t>(l.size() * sizeof(uint16_t));
  return bytes;
}

LayerMethodUse MethodUseOf(const LayerAttention& layer) {
  if (layer.Local()) return LayerMethodUse::kTrainedWindow;
  return layer.position == LayerPosition::kRope ? LayerMethodUse::kMethod
                                                : LayerMethodUse::kMaskAndLogn;
}

namespace {

// What a method changes in the rotation, for errors ("" when nothing).
std::string RopeChange(const AttentionPlan& p, double model_base) {
  if (p.dynamic) return "a dynamic frequency scale";
  if (p.method.rope.scaling != RopeScaling::kNone) return "the RoPE frequencies";
  if (!p.method.rel.IsIdentity()) return "the relative positions RoPE rotates by";
  if (p.method.rope.base != model_base) {
    return fmt::format("the RoPE base ({} instead of the model's {})", p.method.rope.base,
                       model_base);
  }
  return "";
}

}  // namespace

RopeGeometry ModelGeometry(const ModelConfig& c) {
  return RopeGeometry{c.seq_len, c.head_dim(), static_cast<double>(c.rope_base),
                      static_cast<double>(c.rope_interpolation)};
}

RopeGeometry LayerGeometry(const ModelConfig& c, int l) {
  return RopeGeometry{c.seq_len, c.head_dim(), c.LayerRopeBase(l), c.LayerRopePi(l)};
}

std::string LayerAttentionText(const ModelConfig& c, int l) {
  const LayerAttention a = c.attention.Layer(l);
  std::string out(LayerPositionName(a.position));
  if (a.position == LayerPosition::kRope) {
    if (c.LayerRopeBase(l) != static_cast<double>(c.rope_base)) {
      out += fmt::format(" base {}", c.LayerRopeBase(l));
    }
    if (c.LayerRopePi(l) != static_cast<double>(c.rope_interpolation)) {
      out += fmt::format(" pi {}", c.LayerRopePi(l));
    }
  }
  out += a.window > 0  ? fmt::format(", window {}", a.window)
         : a.chunk > 0 ? fmt::format(", chunks of {}", a.chunk)
                       : std::string(", full");
  if (a.temperature) out += ", temperature";
  return out;
}

std::string AttentionLayoutText(const ModelConfig& c) {
  std::string out;
  int first = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = LayerAttentionText(c, first);
    const bool last = l + 1 == c.n_layers;
    if (!last && LayerAttentionText(c, l + 1) == b) continue;
    if (!out.empty()) out += "; ";
    out += first == l ? fmt::format("layer {}: ", l) : fmt::format("layers {}-{}: ", first, l);
    out += b;
    first = l + 1;
  }
  return out;
}

std::string AttentionVariantsText(const ModelConfig& c) {
  const AttentionLayout& a = c.attention;
  std::vector<std::string> parts;
  if (c.attn_softcap > 0.0) {
    parts.push_back(
        fmt::format("attention logits soft-capped at {:.6g} (cap tanh(x / cap))", c.attn_softcap));
  }
  if (c.final_softcap > 0.0) {
    parts.push_back(fmt::format("output logits soft-capped at {:.6g}", c.final_softcap));
  }
  if (a.logit_scale > 0.0) {  // Gemma's query_pre_attn_scalar, cosine attention's scale
    parts.push_back(fmt::format("q . k times {:.6g} (the default 1/sqrt(head dim) is {:.6g})",
                                a.logit_scale, 1.0 / std::sqrt(static_cast<double>(c.head_dim()))));
  }
  if (a.rope_fraction != 1.0) {
    parts.push_back(fmt::format("p-RoPE: {} of {} frequency pairs rotate (fraction {})",
                                a.RotatedPairs(c.head_dim()), c.head_dim() / 2, a.rope_fraction));
  }
  if (a.xpos_scale_base > 0.0) {
    parts.push_back(fmt::format("XPOS decay on RoPE layers (scale base {})", a.xpos_scale_base));
  }
  if (a.sandwich_dim > 0) {
    parts.push_back(
        fmt::format("Sandwich bias (dim {}, lambda {})", a.sandwich_dim, a.sandwich_lambda));
  }
  // n: the keys query i sees (i + 1, or at most the window on a local layer or under a mask).
  if (a.ssmax) parts.push_back("SSMax: logits times s_h ln(n), s_h learned per layer and head");
  if (a.position_log_scale) parts.push_back("per-position lambda: logits times ln(n / 2)");
  if (a.log_length_scale) {
    parts.push_back("trained log-n: logits times ln(n) / ln L, n the keys query i sees (i + 1)");
  }
  if (a.temperature_floor > 0.0) {
    parts.push_back(
        fmt::format("temperature tuning (Llama 4) on the layers marked so: logits times "
                    "ln(floor((i + 1) / {}) + 1) * {} + 1",
                    a.temperature_floor, a.temperature_scale));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

bool MethodChangesRope(const AttentionPlan& method_plan, double model_base) {
  return !RopeChange(method_plan, model_base).empty();
}

std::string DoubleLogNNote(const ModelConfig& config, const AttentionPlan& method_plan) {
  const int64_t L = method_plan.geo.train_len;
  if (!method_plan.logn || !config.attention.log_length_scale || method_plan.fed_len <= L) {
    return "";
  }
  // Both factors at the last query (AttentionPlan::LogitScale): +logn's by position, the trained
  // one by the keys the query sees, which a mask (window, lambda) keeps at most its own: a window
  // of at most L leaves the trained factor at 1 or below, and nothing twice.
  const int64_t last = method_plan.fed_len - 1;
  const double lnL = std::log(static_cast<double>(L));
  const double by_position = std::log(static_cast<double>(last + 1)) / lnL;
  const double trained = std::log(static_cast<double>(method_plan.VisibleKeys(last))) / lnL;
  if (trained <= 1.0) return "";
  return fmt::format(
      "method \"{}\": its +logn multiplies logits that the model's own trained log-n already "
      "multiplies by ln(n) / ln L, so at {} tokens the last query's take {:.2f} x {:.2f} = {:.2f}; "
      "drop +logn for the trained factor alone (on the quick lab's KeyNorm model of seed 1 at 8x, "
      "the doubled factor read no passkey where the trained one read 19 of 20: docs/training.md, "
      "thirtieth round)",
      CanonicalSpec(method_plan.method), method_plan.fed_len, by_position, trained,
      by_position * trained);
}

std::string LayerMethodsText(const ModelConfig& config, const AttentionPlan& method_plan) {
  std::string out;
  for (const auto& [l, m] : method_plan.layer_methods) {
    const AttentionPlan p = MakeAttentionPlan(m, LayerGeometry(config, l), method_plan.fed_len);
    out += fmt::format(" [layer {}: {}]", l, CanonicalSpec(p.method));
  }
  return out;
}

void CheckMethodFitsLayout(const ModelConfig& config, const AttentionPlan& method_plan) {
  std::vector<int> own;
  for (const auto& [l, m] : method_plan.layer_methods) {
    if (l < 0 || l >= config.n_layers) {
      Fail("a method of its own for layer {}: the model has layers 0 to {}", l,
           config.n_layers - 1);
    }
    if (std::find(own.begin(), own.end(), l) != own.end()) {
      Fail("layer {} is given a method of its own twice", l);
    }
    own.push_back(l);
    if (MethodUseOf(config.attention.Layer(l)) != LayerMethodUse::kMethod) {
      Fail(
          "layer {} ({}) takes no method of its own: only full-attention RoPE layers do (layers "
          "trained with a window or chunks keep plain RoPE; layers without RoPE have no rotation "
          "to change; this model: {})",
          l, LayerAttentionText(config, l), AttentionLayoutText(config));
    }
    AttentionPlan layer_plan;
    try {
      layer_plan = MakeAttentionPlan(m, LayerGeometry(config, l), method_plan.fed_len);
    } catch (const Error& e) {
      Fail("layer {}'s own method: {}", l, e.what());
    }
    if (method_plan.Streaming() || layer_plan.Streaming()) {
      Fail("layer {}: the streaming cache (method streaming) runs on every layer or on none", l);
    }
  }
  const std::string change = RopeChange(method_plan, static_cast<double>(config.rope_base));
  bool rope_full = false, full = false;
  for (int l = 0; l < config.n_layers; ++l) {
    const LayerMethodUse use = MethodUseOf(config.attention.Layer(l));
    rope_full |= use == LayerMethodUse::kMethod;
    full |= use != LayerMethodUse::kTrainedWindow;
  }
  // First: on a model whose every layer keeps its trained window, no method but direct applies
  // (the streaming cache's refusal below offers masks, which such a model refuses too).
  if (!full && (!change.empty() || method_plan.mask != MaskKind::kCausal || method_plan.logn ||
                method_plan.Streaming())) {
    Fail(
        "method \"{}\" applies to no layer of this model ({}): every layer was trained with a "
        "window or chunks, keeps them and needs no method (allowed on this model: direct)",
        CanonicalSpec(method_plan.method), AttentionLayoutText(config));
  }
  if (method_plan.Streaming() && (!config.attention.IsPlain() || config.Gau())) {
    // Its positions are the cache's; a trained window, a bias or another block would each need
    // its own rule for tokens that have left the cache.
    Fail(
        "method \"{}\" (the streaming cache) runs on the LLaMA attention with RoPE in every "
        "layer, and this model has another layout ({}) (allowed on this model: lambda, window, "
        "the other methods)",
        CanonicalSpec(method_plan.method), AttentionLayoutText(config));
  }
  if (change.empty() || rope_full) return;
  Fail(
      "method \"{}\" changes {}, but this model has no full-attention RoPE layer for it to "
      "apply to ({}): layers trained with a window or chunks keep them and plain RoPE, and layers "
      "without RoPE have no rotation to change (allowed on this model: direct, and a mask with or "
      "without +logn, e.g. window:window=W, lambda, blockwise, direct+logn, which the "
      "full-attention layers take)",
      CanonicalSpec(method_plan.method), change, AttentionLayoutText(config));
}

AttentionPlan LayerAttentionPlan(const ModelConfig& config, const LayerWeights* layer_weights,
                                 int l, const AttentionPlan& method_plan) {
  LayerHeadValues values;
  if (layer_weights != nullptr) {
    values.bias_a.assign(layer_weights->bias_a.begin(), layer_weights->bias_a.end());
    values.bias_b.assign(layer_weights->bias_b.begin(), layer_weights->bias_b.end());
    values.ssmax.assign(layer_weights->ssmax.begin(), layer_weights->ssmax.end());
  }
  return LayerAttentionPlan(config, l, method_plan, values);
}

AttentionPlan LayerAttentionPlan(const ModelConfig& config, int l, const AttentionPlan& method_plan,
                                 const LayerHeadValues& values) {
  const AttentionLayout& layout = config.attention;
  const LayerAttention a = layout.Layer(l);
  AttentionPlan p;
  const RopeGeometry geo = LayerGeometry(config, l);
  const RopeGeometry model_geo = ModelGeometry(config);
  const auto own = std::find_if(method_plan.layer_methods.begin(), method_plan.layer_methods.end(),
                                [l](const auto& lm) { return lm.first == l; });
  STRETCH_CHECK(own == method_plan.layer_methods.end() || MethodUseOf(a) == LayerMethodUse::kMethod,
                "layer {}: CheckMethodFitsLayout refuses a method of its own here", l);
  switch (MethodUseOf(a)) {
    case LayerMethodUse::kMethod:
      if (own != method_plan.layer_methods.end()) {
        try {
          p = MakeAttentionPlan(own->second, geo, method_plan.fed_len);
        } catch (const Error& e) {
          Fail("layer {}'s own method: {}", l, e.what());
        }
        break;
      }
      if (geo.base == model_geo.base && geo.interpolation == model_geo.interpolation) {
        p = method_plan;
        break;
      }
      // A layer with a RoPE of its own (Gemma 3's global layers: another base, linear scaling)
      // takes the method as asked, resolved for its base and interpolation (a method's own
      // base=B stays B): the frequency rules read the layer's wavelengths.
      try {
        p = MakeAttentionPlan(method_plan.requested, geo, method_plan.fed_len);
      } catch (const Error& e) {
        Fail("layer {} (RoPE base {}, interpolation {}): {}", l, geo.base, geo.interpolation,
             e.what());
      }
      break;
    case LayerMethodUse::kTrainedWindow: {
      // Plain RoPE at the layer's base, the trained window or chunks, no logn: the plan of the
      // method window:window=W or chunked:window=C, so that plan.method says what it does.
      Method local;
      local.mask.kind = a.window > 0 ? MaskKind::kWindow : MaskKind::kChunk;
      local.mask.window = a.window > 0 ? a.window : a.chunk;
      // The window is the model's, not the call's: a call shorter than it (a short prompt) sees
      // all its keys, as under causal attention, and is not refused as a method's window would be.
      p = MakeAttentionPlan(local, geo, std::max(method_plan.fed_len, local.mask.window));
      break;
    }
    case LayerMethodUse::kMaskAndLogn:
      // The method's mask and log-n; q and k are never rotated, so no map, no dynamic
      // frequencies, and no attention factor (YaRN's compensates for its frequency change).
      p = method_plan;
      p.map = PositionMap{};
      p.dynamic = false;
      p.freq.attention_factor = 1.0;
      break;
  }
  p.query_norm = layout.query_norm;
  p.key_norm = layout.key_norm;
  p.softcap = config.attn_softcap;  // Gemma 2, every layer
  // The trainer's LayerPlan and its ops outside the kernel (src/train/transformer_train.h): the
  // per-position lambda and SSMax on every layer; p-RoPE and XPOS on the RoPE layers.
  // Per-head values come per position head (position_heads(): the GAU's one head) and go to
  // every kernel head (the GAU's R copies repeat its head's value, as the trainer's LayerPlan).
  const int copies = config.n_heads / config.position_heads();
  auto per_kernel_head = [&](const auto& per_head) {
    std::vector<double> out;
    for (const auto& v : per_head) out.insert(out.end(), static_cast<size_t>(copies), double(v));
    return out;
  };
  const std::vector<double> zeros(static_cast<size_t>(config.position_heads()), 0.0);
  p.position_log_scale = layout.position_log_scale;
  p.log_length_scale = layout.log_length_scale;
  if (a.temperature) {
    p.temperature_floor = layout.temperature_floor;
    p.temperature_scale = layout.temperature_scale;
  }
  if (layout.ssmax) p.ssmax = per_kernel_head(values.ssmax.empty() ? zeros : values.ssmax);
  if (a.position == LayerPosition::kRope) {
    p.LeavePairsUnrotated(layout.RotatedPairs(config.head_dim()));
    p.xpos_scale_base = layout.xpos_scale_base;
  }
  switch (a.position) {
    case LayerPosition::kRope:
    case LayerPosition::kNone: break;
    case LayerPosition::kSandwich:
      p.bias = SandwichBias(
          std::vector<double>(static_cast<size_t>(config.n_heads), layout.sandwich_lambda),
          layout.sandwich_dim, std::max<int64_t>(1, method_plan.fed_len));
      break;
    case LayerPosition::kAlibi:
      p.bias.kind = BiasKind::kAlibi;
      p.bias.a = per_kernel_head(AlibiSlopes(config.position_heads()));
      break;
    case LayerPosition::kKerpleLog:
    case LayerPosition::kKerplePower:
      p.bias.kind =
          a.position == LayerPosition::kKerpleLog ? BiasKind::kKerpleLog : BiasKind::kKerplePower;
      if (!values.bias_a.empty()) {
        p.bias.a = per_kernel_head(values.bias_a);
        p.bias.b = per_kernel_head(values.bias_b);
      } else {  // the plan's shape only (CheckMethodFitsLayout, inspect)
        p.bias.a = p.bias.b = per_kernel_head(zeros);
      }
      break;
  }
  return p;
}

Transformer::Transformer(const Model& model) : model_(model) {
  ValidateAttentionLayout(model);
  if (model.config.Gau()) ones_.assign(static_cast<size_t>(model.config.dim), 1.0f);
  SetMethod(Method{}, std::max(1, model.config.seq_len));
}

Transformer Transformer::Fork() const {
  Transformer t(model_);
  t.plan_ = plan_;
  t.method_key_ = method_key_;
  t.layers_ = layers_;
  t.rotations_ = rotations_;
  t.prefill_chunk_ = prefill_chunk_;
  t.sequence_chunk_ = sequence_chunk_;
  t.kv_types_ = kv_types_;
  return t;
}

RopeGeometry Transformer::Geometry() const { return ModelGeometry(model_.config); }

int Transformer::MaxKeySlots() const {
  int slots = 1;
  for (const LayerRun& run : layers_) slots = std::max(slots, run.key_slots);
  return slots;
}

void Transformer::SetMethod(const Method& method, int64_t fed_len) {
  SetPlan(MakeAttentionPlan(method, Geometry(), fed_len));
}

void Transformer::SetPlan(AttentionPlan plan) {
  const ModelConfig& c = model_.config;
  const RopeGeometry geo = Geometry();
  // (The base may differ: a method can set its own, `direct:base=B`.)
  if (plan.geo.train_len != geo.train_len || plan.geo.rotary_dim != geo.rotary_dim ||
      plan.geo.interpolation != geo.interpolation) {
    Fail(
        "{}: the plan of {} was resolved for another model (trained length {}, rotary dim {}, "
        "interpolation {:g}), expected this model's ({}, {}, {:g})",
        model_.source, CanonicalSpec(plan.method), plan.geo.train_len, plan.geo.rotary_dim,
        plan.geo.interpolation, geo.train_len, geo.rotary_dim, geo.interpolation);
  }
  CheckMethodFitsLayout(c, plan);
  std::vector<LayerRun> layers(static_cast<size_t>(c.n_layers));
  // One rotation per kind of RoPE layer: the method's or plain RoPE (local layers), at each RoPE
  // base and interpolation the layers have.
  struct RotationKey {
    bool method;
    double base, pi;
    int own_method_layer;  // a layer with a method of its own (layer_methods) rotates alone; -1
    bool operator==(const RotationKey&) const = default;
  };
  std::vector<RotationKey> keys;
  std::vector<Rotation> rotations;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerRun& run = layers[static_cast<size_t>(l)];
    run.plan = LayerAttentionPlan(c, &model_.weights.layers[static_cast<size_t>(l)], l, plan);
    const LayerAttention a = c.attention.Layer(l);
    if (a.position != LayerPosition::kRope) {
      run.rotation = -1;
    } else {
      const bool own = std::any_of(plan.layer_methods.begin(), plan.layer_methods.end(),
                                   [l](const auto& lm) { return lm.first == l; });
      const RotationKey key{MethodUseOf(a) == LayerMethodUse::kMethod, c.LayerRopeBase(l),
                            c.LayerRopePi(l), own ? l : -1};
      const auto found = std::find(keys.begin(), keys.end(), key);
      run.rotation = static_cast<int>(found - keys.begin());
      if (found == keys.end()) {
        keys.push_back(key);
        rotations.emplace_back().plan_layer = l;
      }
    }
    // A layer that never rotates has the identity map and static frequencies (LayerAttentionPlan).
    STRETCH_CHECK(run.rotation >= 0 || run.plan.KeysRotatedOnce(), "layer {}", l);
    run.key_slots = run.plan.KeysRotatedOnce() || run.plan.dynamic ? 1 : run.plan.map.KeySlots();
  }
  plan_ = std::move(plan);
  method_key_ = CanonicalSpec(plan_.method) + LayerMethodsText(c, plan_);
  layers_ = std::move(layers);
  rotations_ = std::move(rotations);
}

int64_t Transformer::ActivationBytes(const ModelConfig& c, int64_t T) {
  // x (T, C); xb (T, max(C, G D)); q, att (T, H D) each; h1, h3 (T, F); k, v staging
  // (T, 2 G D); the GAU's Q and K before their copies (T, 2 S). For LLaMA H D = C and G D <= C.
  const int64_t C = c.dim, Q = int64_t{c.n_heads} * c.head_dim(), KV = c.kv_dim();
  const int64_t gau_qk = c.Gau() ? 2 * int64_t{c.key_dim} : 0;
  return T * (C + std::max(C, KV) + 2 * Q + 2 * int64_t{c.hidden_dim} + 2 * KV + gau_qk) *
         static_cast<int64_t>(sizeof(float));
}

void Transformer::CheckTokens(std::span<const int> tokens, int64_t pos0) const {
  // All ids are checked before any chunk runs, so an error leaves the cache as it was.
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int tok = tokens[t];
    if (tok < 0 || tok >= model_.config.vocab_size) {
      Fail("token id {} at position {} is outside the vocabulary (0..{})", tok,
           pos0 + static_cast<int64_t>(t), model_.config.vocab_size - 1);
    }
  }
}

void Transformer::Embed(const int* tokens, int64_t T, float* x) const {
  const int C = model_.config.dim;
  const PackedMatrix& packed = model_.weights.packed_embedding;
  for (int64_t t = 0; t < T; ++t) {
    if (!packed.empty()) {  // the token's row decoded
      DequantizeRows(packed, tokens[t], 1, x + t * C);
      continue;
    }
    std::memcpy(x + t * C,
                model_.weights.token_embedding.data() + static_cast<size_t>(tokens[t]) * C,
                sizeof(float) * C);
  }
  // The GAU's Embedding-Norm: RMSNorm without gain.
  if (model_.config.Gau()) RmsNorm(x, ones_.data(), x, T, C, model_.config.norm_eps);
  // Gemma's embedding scale (ModelConfig::embed_scale), one float product per value.
  if (const float scale = model_.config.embed_scale; scale != 0.0f) {
    for (int64_t i = 0; i < T * C; ++i) x[i] *= scale;
  }
}

void Transformer::ReserveScratch(int64_t T) {
  const ModelConfig& c = model_.config;
  const size_t TC = static_cast<size_t>(T) * c.dim;
  const size_t TQ = static_cast<size_t>(T) * c.n_heads * c.head_dim();  // TC, or T E (GAU)
  const size_t TKV = static_cast<size_t>(T) * c.kv_dim();
  if (xb_.size() < std::max(TC, TKV)) xb_.resize(std::max(TC, TKV));  // also a rotated key copy
  if (q_.size() < TQ) {
    q_.resize(TQ);
    att_.resize(TQ);
  }
  if (h1_.size() < static_cast<size_t>(T) * c.hidden_dim) {
    h1_.resize(static_cast<size_t>(T) * c.hidden_dim);
    h3_.resize(static_cast<size_t>(T) * c.hidden_dim);
  }
  if (kv_tmp_.size() < 2 * static_cast<size_t>(T) * c.kv_dim()) {
    kv_tmp_.resize(2 * static_cast<size_t>(T) * c.kv_dim());
  }
  if (c.Gau() && gau_qk_.size() < 2 * static_cast<size_t>(T) * c.key_dim) {
    gau_qk_.resize(2 * static_cast<size_t>(T) * c.key_dim);
  }
}

void Transformer::PrepareRotation(int r, int64_t pos0, int64_t T) {
  Rotation& rot = rotations_[r];
  const AttentionPlan& plan = layers_[static_cast<size_t>(rot.plan_layer)].plan;
  if (plan.KeysRotatedOnce()) {
    rot.rope = MakeRopeTable(plan.freq.thetas, pos0, T);
  } else if (!plan.dynamic) {
    rot.tables.Prepare(plan, pos0, T);
  }
}

void Transformer::Forward(std::span<const int> tokens, KvCache& cache, std::vector<float>& hidden,
                          Rows rows) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int C = model_.config.dim;
  // The streaming cache keeps the sinks and the last window - 1 tokens when it is full, so any
  // number of tokens goes through a cache that holds those and at least one more (a cache that
  // never fills, for a short text, may be smaller).
  const bool streaming = plan_.Streaming();
  const int64_t streaming_keep = streaming ? plan_.sinks + plan_.window - 1 : 0;
  const bool drops = streaming && cache.length() + T > cache.capacity();
  if (drops && cache.capacity() <= streaming_keep) {
    Fail(
        "KV cache: a capacity of {} positions cannot hold the streaming cache's {} sinks and "
        "window of {} (allowed: a capacity of at least {}; StreamingCacheCapacity gives one)",
        cache.capacity(), plan_.sinks, plan_.window, streaming_keep + 1);
  }
  if (!streaming && cache.length() + T > cache.capacity()) {
    Fail("KV cache: {} cached + {} new tokens exceed its capacity of {} positions", cache.length(),
         T, cache.capacity());
  }
  if (cache.length() > 0 && cache.method_ != method_key_) {
    Fail(
        "the KV cache holds {} positions made under method \"{}\"; clear it before running "
        "method \"{}\"",
        cache.length(), cache.method_, method_key_);
  }
  if (streaming && !(cache.types() == KvCacheTypes{})) {
    Fail(
        "the streaming cache keeps float32 keys and values (it rotates its kept keys again in "
        "place), not {} keys and {} values: use --cache-type f32 with it",
        KvCacheTypeName(cache.types().k), KvCacheTypeName(cache.types().v));
  }
  CheckTokens(tokens, cache.length());
  cache.method_ = method_key_;
  for (int l = 0; l < model_.config.n_layers; ++l) {
    cache.EnsureKeySlots(l, layers_[static_cast<size_t>(l)].key_slots);
  }
  int64_t chunk = std::max<int64_t>(1, prefill_chunk_);
  if (drops) chunk = std::min(chunk, cache.capacity() - streaming_keep);
  const bool last_only = rows == Rows::kLast;
  // kLast: every chunk runs in the first rows of `hidden`, and the last row moves to its front.
  hidden.resize(static_cast<size_t>(last_only ? std::min(chunk, T) : T) * C);
  const int L = model_.config.n_layers;
  for (int64_t start = 0; start < T; start += chunk) {
    const int64_t n = std::min(chunk, T - start);
    const bool last_chunk = start + n == T;
    if (streaming && cache.length_ + n > cache.capacity_) DropOldestWindow(cache);
    const int64_t pos0 = cache.length_;
    float* x = hidden.data() + (last_only ? 0 : start * C);
    ReserveScratch(n);
    {
      profile::Scope s(profile::kEmbed);
      Embed(tokens.data() + start, n, x);
    }
    for (size_t r = 0; r < rotations_.size(); ++r) PrepareRotation(static_cast<int>(r), pos0, n);
    for (int l = 0; l < L; ++l) {
      // kLast: the last layer goes on past the attention for the text's last token only.
      const int64_t out_rows = !last_only || l + 1 < L ? -1 : (last_chunk ? 1 : 0);
      const size_t li = static_cast<size_t>(l);
      KvStore kv{.cap = cache.capacity_, .types = cache.types_};
      if (cache.types_.k == KvCacheType::kF32) {
        kv.k = cache.k_[li].data();
      } else {
        kv.k16 = cache.k16_[li].data();
      }
      if (cache.types_.v == KvCacheType::kF32) {
        kv.v = cache.v_[li].data();
      } else {
        kv.v16 = cache.v16_[li].data();
      }
      Layer(l, x, n, pos0, kv, out_rows);
    }
    cache.length_ = pos0 + n;
    profile::Scope s(profile::kNorm);
    if (!last_only) {
      RmsNorm(x, model_.weights.final_norm.data(), x, n, C, model_.config.norm_eps);
    } else if (last_chunk) {
      RmsNorm(x + (n - 1) * C, model_.weights.final_norm.data(), hidden.data(), 1, C,
              model_.config.norm_eps);
    }
  }
  if (last_only) hidden.resize(T > 0 ? static_cast<size_t>(C) : 0);
}

int64_t Transformer::StreamingCacheCapacity() const {
  if (!plan_.Streaming()) return 0;
  // Room for a second window: the cache drops its oldest tokens once per window - 1 new ones.
  return plan_.sinks + 2 * plan_.window - 1;
}

void Transformer::DropOldestWindow(KvCache& cache) {
  const ModelConfig& c = model_.config;
  const int G = c.n_kv_heads, D = c.head_dim();
  const int64_t S = plan_.sinks, keep = plan_.window - 1, cap = cache.capacity_;
  const int64_t from = cache.length_ - keep;  // the first token kept after the sinks
  const int64_t shift = from - S;             // how far each kept token moves down
  if (shift <= 0) return;
  // Every kept window key moves from position p to p - shift: rotated by -shift (R(p - shift) =
  // R(-shift) R(p)), in float from angles computed in double, as the kernel's tables are.
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerRun& run = layers_[static_cast<size_t>(l)];
    std::optional<RopeTable> back;
    if (run.rotation >= 0) back = MakeRopeTableAt(run.plan.freq.thetas, 0, {-double(shift)});
    float* vc = cache.Values(l);
    for (int slot = 0; slot < cache.key_slots(l); ++slot) {
      float* kc = cache.Keys(l, slot);
      for (int g = 0; g < G; ++g) {
        float* dst = kc + (static_cast<size_t>(g) * cap + S) * D;
        std::memmove(dst, kc + (static_cast<size_t>(g) * cap + from) * D,
                     sizeof(float) * static_cast<size_t>(keep) * D);
        if (!back) continue;
        for (int64_t r = 0; r < keep; ++r) {
          RotatePairs(dst + r * D, back->pairs, back->cos.data(), back->sin.data());
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      std::memmove(vc + (static_cast<size_t>(g) * cap + S) * D,
                   vc + (static_cast<size_t>(g) * cap + from) * D,
                   sizeof(float) * static_cast<size_t>(keep) * D);
    }
  }
  cache.length_ = S + keep;
}

void Transformer::ForwardSequence(std::span<const int> tokens, std::vector<float>& hidden,
                                  int64_t first_row) {
  const ModelConfig& c = model_.config;
  const int64_t T = static_cast<int64_t>(tokens.size());
  CheckTokens(tokens, 0);
  if (first_row < 0 || (T > 0 && first_row >= T)) {
    Fail("ForwardSequence: first row {} outside the sequence's rows 0..{}", first_row, T - 1);
  }
  // GAU blocks update every row (GauBlockForward ignores out_rows): they run whole.
  if (c.Gau()) first_row = 0;
  hidden.resize(static_cast<size_t>(T) * c.dim);
  if (T == 0) return;
  const size_t kv = static_cast<size_t>(T) * c.kv_dim();
  const size_t slots = static_cast<size_t>(MaxKeySlots());
  if (seq_k_.size() < kv * slots) seq_k_.resize(kv * slots);
  if (seq_v_.size() < kv) seq_v_.resize(kv);
  {
    profile::Scope s(profile::kEmbed);
    Embed(tokens.data(), T, hidden.data());
  }
  const int64_t chunk = std::max<int64_t>(1, sequence_chunk_);
  ReserveScratch(std::min(chunk, T));
  const KvStore store{.k = seq_k_.data(), .v = seq_v_.data(), .cap = T, .types = kv_types_};
  for (int l = 0; l < c.n_layers; ++l) {
    const int r = layers_[static_cast<size_t>(l)].rotation;
    // The last layer's rows before first_row: keys and values only, in chunks that end there.
    const int64_t split = l + 1 == c.n_layers ? first_row : 0;
    for (int64_t start = 0; start < split; start += chunk) {
      const int64_t n = std::min(chunk, split - start);
      if (r >= 0) PrepareRotation(r, start, n);
      Layer(l, hidden.data() + start * c.dim, n, start, store, /*out_rows=*/0);
    }
    for (int64_t start = split; start < T; start += chunk) {
      const int64_t n = std::min(chunk, T - start);
      if (r >= 0) PrepareRotation(r, start, n);
      Layer(l, hidden.data() + start * c.dim, n, start, store);
    }
  }
  profile::Scope s(profile::kNorm);
  float* rows = hidden.data() + first_row * c.dim;
  RmsNorm(rows, model_.weights.final_norm.data(), rows, T - first_row, c.dim, c.norm_eps);
}

void Transformer::Layer(int l, float* x, int64_t T, int64_t pos0, const KvStore& kv,
                        int64_t out_rows) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[static_cast<size_t>(l)];
  const int KV = c.kv_dim();
  float* k_new = kv_tmp_.data();                                // (T, G*D)
  float* v_new = kv_tmp_.data() + static_cast<size_t>(T) * KV;  // (T, G*D)
  if (c.Gau()) {
    // V goes straight to the new values (T, E) = R slices of width S; Q and K (T, S) go to the R
    // kernel heads as copies (src/model/block.h).
    const int S = c.key_dim, R = c.n_heads;
    float* gq = gau_qk_.data();  // (T, S)
    float* gk = gq + static_cast<size_t>(T) * S;
    const GauBlockBuffers<float> b{.u = h1_.data(),
                                   .v = v_new,
                                   .z = h3_.data(),
                                   .q = gq,
                                   .k = gk,
                                   .att = att_.data(),
                                   .g = h1_.data(),
                                   .o = xb_.data(),
                                   .ones = ones_.data()};
    GauBlockForward(lw, GauConfigOf(c, l), x, T, b, [&] {
      for (int64_t t = 0; t < T; ++t) {
        for (int r = 0; r < R; ++r) {
          std::memcpy(q_.data() + (t * R + r) * S, gq + t * S, sizeof(float) * S);
          std::memcpy(k_new + (t * R + r) * S, gk + t * S, sizeof(float) * S);
        }
      }
      Attend(l, T, pos0, kv);
    });
    return;
  }
  // The block's scratch: xb_ holds a (and, inside Attend, a rotated key copy), then f; h1_ holds
  // g, then silu(g) * u.
  const LlamaBlockBuffers<float> b{.a = xb_.data(),
                                   .q = q_.data(),
                                   .k = k_new,
                                   .v = v_new,
                                   .att = att_.data(),
                                   .f = xb_.data(),
                                   .g = h1_.data(),
                                   .u = h3_.data(),
                                   .h = h1_.data()};
  LlamaBlockForward(
      lw, c, x, T, b, [&] { Attend(l, T, pos0, kv, /*queries=*/out_rows != 0); }, out_rows);
}

void Transformer::Attend(int l, int64_t T, int64_t pos0, const KvStore& kv, bool queries) {
  const int64_t cap = kv.cap;
  const ModelConfig& c = model_.config;
  const int H = c.n_heads, G = c.n_kv_heads, D = c.head_dim(), KV = c.kv_dim();
  const int64_t QW = int64_t{H} * D;  // a query row's width: C (LLaMA), E (GAU)
  float* k_new = kv_tmp_.data();
  const float* v_new = kv_tmp_.data() + static_cast<size_t>(T) * KV;
  const LayerRun& run = layers_[static_cast<size_t>(l)];
  const AttentionPlan& plan = run.plan;
  // Null for a layer without RoPE, whose plan then always has KeysRotatedOnce (nothing to do).
  Rotation* rot = run.rotation >= 0 ? &rotations_[run.rotation] : nullptr;
  const bool rotate_here = plan.KeysRotatedOnce();
  profile::Scope rope_scope(profile::kRope);
  if (rotate_here && rot != nullptr) {
    RopeInterleaved(q_.data(), T, H, QW, D, rot->rope);
    RopeInterleaved(k_new, T, G, KV, D, rot->rope);
  }

  // Scatter the new rows into the (G, cap, D) layouts: values once, keys once per key slot,
  // rotated for that slot (static plans with a relative map) or as they are (after RoPE above, or
  // raw for dynamic plans).
  const int slots = run.key_slots;
  const size_t slot_floats = static_cast<size_t>(cap) * KV;
  // Threads over the rows (a 2,048-token prefill moves 6 MiB per layer and tensor). Each row
  // goes to float32 storage (rounded through a 16-bit type when `type` says so: ForwardSequence)
  // or to 16-bit storage.
  auto scatter = [&](const float* src_rows, float* dst_base, uint16_t* dst16_base,
                     KvCacheType type) {
    ParallelFor(T, WorkGrain(T, T * KV, 32768), [&](int64_t t0, int64_t t1) {
      for (int g = 0; g < G; ++g) {
        for (int64_t t = t0; t < t1; ++t) {
          const size_t at = (static_cast<size_t>(g) * cap + pos0 + t) * D;
          const float* src = src_rows + static_cast<size_t>(t) * KV + static_cast<size_t>(g) * D;
          if (dst16_base != nullptr) {
            FloatsToHalves(src, dst16_base + at, D, HalfOf(type));
            continue;
          }
          std::memcpy(dst_base + at, src, sizeof(float) * D);
          if (type != KvCacheType::kF32) RoundThroughHalves(dst_base + at, D, HalfOf(type));
        }
      }
    });
  };
  auto key_slot = [&](int slot) {
    const size_t off = static_cast<size_t>(slot) * slot_floats;
    return std::pair{kv.k != nullptr ? kv.k + off : nullptr,
                     kv.k16 != nullptr ? kv.k16 + off : nullptr};
  };
  scatter(v_new, kv.v, kv.v16, kv.types.v);
  if (rotate_here || plan.dynamic) {
    scatter(k_new, kv.k, kv.k16, kv.types.k);
  } else {
    for (int slot = 0; slot < slots; ++slot) {
      float* rows = k_new;
      if (!plan.map.SlotIsUnrotated(slot)) {
        // The rotated copy goes to xb_ (T * max(C, KV) floats), free until the output projection.
        std::memcpy(xb_.data(), k_new, sizeof(float) * static_cast<size_t>(T) * KV);
        RotateKeySlot(plan, rot->tables, slot, xb_.data(), T, G, KV, D);
        rows = xb_.data();
      }
      const auto [f32, f16] = key_slot(slot);
      scatter(rows, f32, f16, kv.types.k);
    }
  }
  // What the kernel reads: the float32 storage, or the keys and values 0 .. S - 1 widened from
  // the 16-bit storage into wide_k_ (slots, G, S, D) and wide_v_ (G, S, D).
  const int64_t S = pos0 + T;
  auto widen = [&](const uint16_t* src, float* dst, KvCacheType type) {
    ParallelFor(G, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        HalvesToFloats(src + static_cast<size_t>(g) * cap * D, dst + static_cast<size_t>(g) * S * D,
                       S * D, HalfOf(type));
      }
    });
  };
  const float* kc = kv.k;
  const float* vc = kv.v;
  int64_t k_stride = cap * D, v_stride = cap * D;
  size_t k_slot_floats = slot_floats;
  if (kv.k16 != nullptr) {
    k_slot_floats = static_cast<size_t>(S) * KV;
    if (wide_k_.size() < k_slot_floats * static_cast<size_t>(slots)) {
      wide_k_.resize(k_slot_floats * static_cast<size_t>(slots));
    }
    for (int slot = 0; slot < slots; ++slot) {
      widen(key_slot(slot).second, wide_k_.data() + static_cast<size_t>(slot) * k_slot_floats,
            kv.types.k);
    }
    kc = wide_k_.data();
    k_stride = S * D;
  }
  if (kv.v16 != nullptr) {
    if (wide_v_.size() < static_cast<size_t>(S) * KV) wide_v_.resize(static_cast<size_t>(S) * KV);
    widen(kv.v16, wide_v_.data(), kv.types.v);
    vc = wide_v_.data();
    v_stride = S * D;
  }
  HeadRows key_slots[2];
  for (int slot = 0; slot < slots && slot < 2; ++slot) {
    key_slots[slot] = HeadRows{kc + static_cast<size_t>(slot) * k_slot_floats, D, k_stride};
  }

  rope_scope.Stop();
  if (!queries) return;
  profile::Scope kernel_scope(profile::kAttention);
  AttentionDims dims;
  dims.n_q = T;
  dims.n_kv = pos0 + T;
  dims.q_pos0 = pos0;
  dims.n_heads = H;
  dims.n_kv_heads = G;
  dims.head_dim = D;
  AttentionParams params;
  // The scale in double rounded once to float, as the trainer rounds it.
  params.scale = static_cast<float>(c.LogitScale());
  params.plan = &plan;
  if (rotate_here) {
    params.qk = QkRotated{};
  } else if (plan.dynamic) {
    params.qk = QkDynamicRotation{};
  } else {
    params.qk = QkStaticRotation{&rot->tables, key_slots};
  }
  AttentionForward(HeadRows{q_.data(), QW, D}, HeadRows{kc, D, k_stride}, HeadRows{vc, D, v_stride},
                   HeadRowsMut{att_.data(), QW, D}, dims, params);
}

void Transformer::Logits(const float* hidden, int64_t T, float* logits) const {
  const ModelConfig& c = model_.config;
  profile::Scope s(profile::kClassifier);
  LinearForward<float>(hidden, model_.weights.ClassifierMatrix(), logits, T, c.dim, c.vocab_size);
  if (const double cap = c.final_softcap; cap > 0.0) {  // Gemma 2: cap tanh(logit / cap)
    const float fc = static_cast<float>(cap), inv = static_cast<float>(1.0 / cap);
    const int64_t n = T * c.vocab_size;
    ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) logits[i] = fc * std::tanh(logits[i] * inv);
    });
  }
}

}  // namespace stretch
