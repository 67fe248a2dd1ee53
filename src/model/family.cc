#include "src/model/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace families {
// family_list.inc: one STRETCH_FAMILY(file) per file of src/model/families/ (CMakeLists.txt).
#define STRETCH_FAMILY(file) extern const ModelFamily file##_family;
#include "src/model/family_list.inc"
#undef STRETCH_FAMILY
}  // namespace families

namespace {

constexpr const ModelFamily* kFamilies[] = {
#define STRETCH_FAMILY(file) &families::file##_family,
#include "src/model/family_list.inc"
#undef STRETCH_FAMILY
};

int64_t Length(FamilyDim d, const ModelConfig& c) {
  switch (d) {
    case FamilyDim::kNone: return 0;
    case FamilyDim::kVocab: return c.vocab_size;
    case FamilyDim::kDim: return c.dim;
    case FamilyDim::kQuery: return int64_t{c.n_heads} * c.head_dim();
    case FamilyDim::kKv: return c.kv_dim();
    case FamilyDim::kHidden: return c.hidden_dim;
    case FamilyDim::kHead: return c.head_dim();
  }
  return 0;
}

int64_t RopeHeads(FamilyRopeRows r, const ModelConfig& c) {
  return r == FamilyRopeRows::kQueryHeads ? c.n_heads
         : r == FamilyRopeRows::kKvHeads  ? c.n_kv_heads
         : r == FamilyRopeRows::kOneHead  ? 1
                                          : 0;
}

FamilyTensorAt At(const FamilyTensor& t, const ModelConfig& c, WeightFormat format, int layer) {
  FamilyTensorAt a;
  const std::string pattern = format == WeightFormat::kGguf ? t.gguf : t.hf;
  a.name = layer >= 0 ? fmt::format(fmt::runtime(pattern), layer) : pattern;
  a.spec = &t;
  a.layer = layer;
  a.head_dim = c.head_dim();
  a.offset = format == WeightFormat::kHf && t.hf_plus_one ? 1.0f : 0.0f;
  if (t.Fused()) {
    int64_t rows = 0;
    for (const FamilyPart& p : t.parts) {
      a.parts.push_back({Length(p.rows, c), RopeHeads(p.rope_rows, c)});
      rows += a.parts.back().rows;
    }
    a.shape = {rows};
  } else {
    a.shape = {Length(t.rows, c)};
    a.rope_heads = RopeHeads(t.rope_rows, c);
  }
  if (t.Matrix()) a.shape.push_back(Length(t.cols, c));
  return a;
}

}  // namespace

std::span<const ModelFamily* const> ModelFamilies() { return kFamilies; }

const ModelFamily* FindFamilyByGguf(std::string_view general_architecture) {
  for (const ModelFamily* f : kFamilies) {
    if (general_architecture == f->gguf_architecture) return f;
  }
  return nullptr;
}

const ModelFamily* FindFamilyByHf(std::string_view architecture) {
  for (const ModelFamily* f : kFamilies) {
    for (const char* name : f->hf_architectures) {
      if (architecture == name) return f;
    }
  }
  return nullptr;
}

const ModelFamily& LlamaFamily() { return families::llama_family; }

const ModelFamily& FamilyOf(const ModelConfig& c) {
  const auto matches = [&](const ModelFamily& f) {
    return f.qkv_bias == c.qkv_bias && f.qk_norm == c.qk_norm && f.gemma_block == c.post_norms;
  };
  for (const ModelFamily* f : kFamilies) {  // the family it was read as, where it still fits
    if (!c.family.empty() && c.family == f->name && matches(*f)) return *f;
  }
  if (matches(LlamaFamily())) return LlamaFamily();  // stretch's own files are LLaMA's
  for (const ModelFamily* f : kFamilies) {
    if (matches(*f)) return *f;
  }
  Fail(
      "no model family has this model's choices (q/k/v biases: {}, per-head q/k norm: {}, "
      "Gemma's block: {})",
      c.qkv_bias, c.qk_norm, c.post_norms);
}

void SetFamilyBlock(const ModelFamily& family, ModelConfig& c) {
  c.qkv_bias = family.qkv_bias;
  c.qk_norm = family.qk_norm;
  c.post_norms = family.gemma_block;
  c.activation = family.gemma_block ? FfnActivation::kGeluTanh : FfnActivation::kSilu;
  // Gemma3TextScaledWordEmbedding: hidden_size ** 0.5, in the weights' type (float here).
  c.embed_scale = family.gemma_block ? std::sqrt(static_cast<float>(c.dim)) : 0.0f;
}

std::optional<SwaPattern> SwaPatternOf(const ModelConfig& c) {
  const AttentionLayout& a = c.attention;
  const auto& layers = a.layers;
  if (layers.empty() || static_cast<int>(layers.size()) != c.n_layers) return std::nullopt;
  AttentionLayout rest = a;
  rest.layers.clear();
  rest.logit_scale = 0.0;
  if (!rest.IsDefault()) return std::nullopt;
  const int64_t n = c.n_layers;
  for (int64_t P = 1; P <= n + 1; ++P) {
    SwaPattern p{P, 0, 0.0};
    bool fits = true;
    for (int64_t l = 0; l < n && fits; ++l) {
      const LayerLayout& x = layers[static_cast<size_t>(l)];
      if (l % P == P - 1) {
        fits = x == LayerLayout{};
      } else {
        if (p.window == 0) {
          p.window = x.window;
          p.local_base = x.rope_base;
        }
        fits = p.window > 0 && x == p.Local();
      }
    }
    if (fits && p.window > 0) return p;
  }
  return std::nullopt;
}

void SetSwaPattern(ModelConfig& c, const SwaPattern& p) {
  c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (l % p.period != p.period - 1) c.attention.layers[static_cast<size_t>(l)] = p.Local();
  }
}

bool FamilyHoldsLayout(const ModelFamily& family, const ModelConfig& c, bool scale_ok) {
  if (c.Gau()) return false;
  if (!family.softcaps && (c.attn_softcap != 0.0 || c.final_softcap != 0.0)) return false;
  if (family.swa_pattern > 0) {
    AttentionLayout a = c.attention;
    if (scale_ok) a.logit_scale = 0.0;
    if (a.IsPlain()) return true;
    // The local layers' RoPE as the family's files have it: a base of their own or the model's.
    const std::optional<SwaPattern> p = SwaPatternOf(c);
    return p.has_value() && (p->local_base > 0.0) == (family.swa_local_base > 0.0) &&
           (scale_ok || c.attention.logit_scale == 0.0);
  }
  return c.attention.IsPlain() ||
         (family.hf_window_architecture >= 0 && c.attention.UniformWindow() > 0);
}

namespace {
std::string Names(const std::function<void(std::vector<std::string>&)>& add) {
  std::vector<std::string> names;
  add(names);
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}
}  // namespace

std::string FamilyRelativeReason(const std::string& name) {
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static constexpr std::pair<const char*, const char*> kRelatives[] = {
      {"falcon", "it has a parallel attention/MLP block and LayerNorm"},
      {"qwen3moe", "its feed-forward is a mixture of experts"},
      {"qwen3_moe", "its feed-forward is a mixture of experts"},
      {"qwen2moe", "its feed-forward is a mixture of experts"},
      {"qwen2_moe", "its feed-forward is a mixture of experts"},
      {"qwenlm", "its attention is one fused c_attn projection (Qwen 1)"},
      {"gemma3forconditionalgeneration",
       "the multimodal model: stretch reads the text model (Gemma3ForCausalLM, model_type "
       "gemma3_text)"},
      {"gemma",
       "Gemma 1 is not read yet; Gemma 2 (Gemma2ForCausalLM) and Gemma 3's text model "
       "(Gemma3ForCausalLM) are"},
      {"phimoe", "its feed-forward is a mixture of experts"},
      {"phi",
       "Phi-1 and Phi-2 have LayerNorm, a parallel attention/MLP block, partial rotary and GELU "
       "(Phi-3 is read: Phi3ForCausalLM)"},
      {"mixtral", "its feed-forward is a mixture of experts"},
      {"llama4",
       "its feed-forward is a mixture of experts and its RoPE layers L2-normalize q and k "
       "(its attention layout alone trains here: stretch train --attention llama4=C/K)"},
  };
  for (const auto& [start, why] : kRelatives) {
    if (lower.starts_with(start)) return fmt::format(" ({})", why);
  }
  return "";
}

std::string KnownGgufArchitectures() {
  return Names([](std::vector<std::string>& v) {
    for (const ModelFamily* f : kFamilies) v.push_back(f->gguf_architecture);
  });
}

std::string KnownHfArchitectures() {
  return Names([](std::vector<std::string>& v) {
    for (const ModelFamily* f : kFamilies) {
      for (const char* a : f->hf_architectures) v.push_back(a);
    }
  });
}

void HalvesToInterleaved(std::vector<float>& w, int64_t heads, int64_t D, int64_t cols) {
  const size_t head = static_cast<size_t>(D * cols), row = static_cast<size_t>(cols);
  STRETCH_CHECK(w.size() == static_cast<size_t>(heads) * head, "{} values for {} heads of {}",
                w.size(), heads, head);
  std::vector<float> scratch(head);
  for (int64_t h = 0; h < heads; ++h) {
    float* x = w.data() + static_cast<size_t>(h) * head;
    std::copy(x, x + head, scratch.begin());
    for (int64_t i = 0; i < D / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::copy_n(scratch.data() + static_cast<size_t>(j * (D / 2) + i) * row, row,
                    x + static_cast<size_t>(2 * i + j) * row);
      }
    }
  }
}

std::vector<float> InterleavedToHalves(const std::vector<float>& w, int64_t heads, int64_t D,
                                       int64_t cols) {
  const size_t row = static_cast<size_t>(cols);
  STRETCH_CHECK(w.size() == static_cast<size_t>(heads * D) * row, "{} values for {} heads of {}",
                w.size(), heads, D * cols);
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < D / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::copy_n(w.data() + static_cast<size_t>(h * D + 2 * i + j) * row, row,
                    out.data() + static_cast<size_t>(h * D + j * (D / 2) + i) * row);
      }
    }
  }
  return out;
}

std::vector<FamilyTensorAt> FamilyTensors(const ModelFamily& family, const ModelConfig& c,
                                          WeightFormat format) {
  std::vector<FamilyTensorAt> out;
  const auto present = [&](const FamilyTensor& t) {
    switch (t.presence) {
      case FamilyPresence::kAlways: return true;
      case FamilyPresence::kUnlessTied: return !c.shared_classifier;
      case FamilyPresence::kQkvBias: return c.qkv_bias;
    }
    return true;
  };
  size_t first_layer = family.tensors.size();
  for (size_t i = 0; i < family.tensors.size(); ++i) {
    if (family.tensors[i].PerLayer()) {
      first_layer = i;
      break;
    }
  }
  for (size_t i = 0; i < first_layer; ++i) {
    if (present(family.tensors[i])) out.push_back(At(family.tensors[i], c, format, -1));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    for (const FamilyTensor& t : family.tensors) {
      if (t.PerLayer() && present(t)) out.push_back(At(t, c, format, l));
    }
  }
  for (size_t i = first_layer; i < family.tensors.size(); ++i) {
    const FamilyTensor& t = family.tensors[i];
    if (!t.PerLayer() && present(t)) out.push_back(At(t, c, format, -1));
  }
  return out;
}

std::vector<float>& FamilyTensorData(ModelWeights& w, const FamilyTensorAt& t) {
  STRETCH_CHECK(!t.spec->Fused(), "{}: a fused tensor has several weights", t.name);
  if (t.spec->PerLayer()) {
    STRETCH_CHECK(t.layer >= 0 && static_cast<size_t>(t.layer) < w.layers.size(),
                  "{}: layer {} of {}", t.name, t.layer, w.layers.size());
    return w.layers[static_cast<size_t>(t.layer)].*(t.spec->layer);
  }
  return w.*(t.spec->global);
}

const std::vector<float>& FamilyTensorData(const ModelWeights& w, const FamilyTensorAt& t) {
  return FamilyTensorData(const_cast<ModelWeights&>(w), t);
}

std::vector<std::vector<float>*> FamilyTensorMembers(ModelWeights& w, const FamilyTensorAt& t) {
  if (!t.spec->Fused()) return {&FamilyTensorData(w, t)};
  STRETCH_CHECK(t.layer >= 0 && static_cast<size_t>(t.layer) < w.layers.size(),
                "{}: layer {} of {}", t.name, t.layer, w.layers.size());
  std::vector<std::vector<float>*> out;
  for (const FamilyPart& p : t.spec->parts) {
    out.push_back(&(w.layers[static_cast<size_t>(t.layer)].*(p.layer)));
  }
  return out;
}

namespace {
// Values per row of the tensor: its columns (1 for a vector).
int64_t RowLength(const FamilyTensorAt& t) { return t.shape.size() > 1 ? t.shape[1] : 1; }
// The parts of `t` as (rows, rope heads), an unfused tensor being one part.
std::vector<FamilyTensorAt::Part> PartsOf(const FamilyTensorAt& t) {
  if (!t.parts.empty()) return t.parts;
  return {{t.shape[0], t.rope_heads}};
}
}  // namespace

std::vector<float> FamilyTensorValues(const ModelWeights& w, const FamilyTensorAt& t, bool halves) {
  const int64_t cols = RowLength(t);
  const std::vector<std::vector<float>*> members =
      FamilyTensorMembers(const_cast<ModelWeights&>(w), t);
  const std::vector<FamilyTensorAt::Part> parts = PartsOf(t);
  std::vector<float> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::vector<float>& x = *members[i];
    STRETCH_CHECK(static_cast<int64_t>(x.size()) == parts[i].rows * cols,
                  "{}: part {} has {} values, expected {}", t.name, i, x.size(),
                  parts[i].rows * cols);
    if (halves && parts[i].rope_heads > 0) {
      const std::vector<float> h = InterleavedToHalves(x, parts[i].rope_heads, t.head_dim, cols);
      out.insert(out.end(), h.begin(), h.end());
    } else {
      out.insert(out.end(), x.begin(), x.end());
    }
  }
  if (t.offset != 0.0f) {
    for (float& v : out) v -= t.offset;
  }
  return out;
}

void SetFamilyTensorValues(ModelWeights& w, const FamilyTensorAt& t, std::vector<float> values,
                           bool halves) {
  const int64_t cols = RowLength(t);
  const std::vector<std::vector<float>*> members = FamilyTensorMembers(w, t);
  const std::vector<FamilyTensorAt::Part> parts = PartsOf(t);
  int64_t total = 0;
  for (const FamilyTensorAt::Part& p : parts) total += p.rows * cols;
  STRETCH_CHECK(static_cast<int64_t>(values.size()) == total, "{}: {} values, expected {}", t.name,
                values.size(), total);
  if (parts.size() == 1) {
    *members[0] = std::move(values);
  } else {
    size_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t n = static_cast<size_t>(parts[i].rows * cols);
      members[i]->assign(values.begin() + static_cast<std::ptrdiff_t>(at),
                         values.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (halves && parts[i].rope_heads > 0) {
      HalvesToInterleaved(*members[i], parts[i].rope_heads, t.head_dim, cols);
    }
    if (t.offset != 0.0f) {
      for (float& v : *members[i]) v += t.offset;
    }
  }
}

void SetFamilyTensorPacked(ModelWeights& w, const FamilyTensorAt& t, const PackedMatrix& m,
                           bool halves) {
  const int64_t cols = RowLength(t);
  STRETCH_CHECK(t.spec->Matrix() && m.rows == t.shape[0] && m.cols == cols,
                "{}: packed ({}, {}), expected ({}, {})", t.name, m.rows, m.cols, t.shape[0], cols);
  STRETCH_CHECK(t.offset == 0.0f, "{}: a packed matrix with an offset", t.name);
  const std::vector<FamilyTensorAt::Part> parts = PartsOf(t);
  PackedMatrix whole = m;
  const bool permute = halves && std::any_of(parts.begin(), parts.end(),
                                             [](const auto& p) { return p.rope_heads > 0; });
  if (permute) {  // rows h D + j D/2 + i (halves) go to h D + 2 i + j (interleaved)
    const auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(m.Bytes()));
    const int64_t rb = m.RowBytes(), D = t.head_dim;
    int64_t base = 0;
    for (const FamilyTensorAt::Part& p : parts) {
      for (int64_t r = 0; r < p.rows; ++r) {
        int64_t from = r;
        if (p.rope_heads > 0) {
          const int64_t h = r / D, in = r % D, i = in / 2, j = in % 2;
          from = h * D + j * (D / 2) + i;
        }
        std::copy_n(m.Row(base + from), rb, bytes->data() + (base + r) * rb);
      }
      base += p.rows;
    }
    whole.data = bytes->data();
    whole.owner = bytes;
  }
  if (t.spec->global != nullptr) {
    STRETCH_CHECK(t.spec->global == &ModelWeights::token_embedding ||
                      t.spec->global == &ModelWeights::classifier,
                  "{}: no packed form for this global tensor", t.name);
    (t.spec->global == &ModelWeights::token_embedding ? w.packed_embedding : w.packed_classifier) =
        whole;
    (w.*(t.spec->global)).clear();
    return;
  }
  LayerWeights& L = w.layers[static_cast<size_t>(t.layer)];
  if (!t.spec->Fused()) {
    L.packed.emplace_back(t.spec->layer, whole);
    (L.*(t.spec->layer)).clear();
    return;
  }
  int64_t base = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    L.packed.emplace_back(t.spec->parts[i].layer, whole.RowRange(base, parts[i].rows));
    (L.*(t.spec->parts[i].layer)).clear();
    base += parts[i].rows;
  }
}

}  // namespace stretch
