#include "src/model/family.h"

#include <fmt/format.h>

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
  }
  return 0;
}

FamilyTensorAt At(const FamilyTensor& t, const ModelConfig& c, WeightFormat format, int layer) {
  FamilyTensorAt a;
  const std::string pattern = format == WeightFormat::kGguf ? t.gguf : t.hf;
  a.name = layer >= 0 ? fmt::format(fmt::runtime(pattern), layer) : pattern;
  a.shape = {Length(t.rows, c)};
  if (t.Matrix()) a.shape.push_back(Length(t.cols, c));
  a.spec = &t;
  a.layer = layer;
  a.rope_heads = t.rope_rows == FamilyRopeRows::kQueryHeads ? c.n_heads
                 : t.rope_rows == FamilyRopeRows::kKvHeads  ? c.n_kv_heads
                                                            : 0;
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

std::vector<FamilyTensorAt> FamilyTensors(const ModelFamily& family, const ModelConfig& c,
                                          WeightFormat format) {
  std::vector<FamilyTensorAt> out;
  const auto present = [&](const FamilyTensor& t) {
    return t.presence == FamilyPresence::kAlways || !c.shared_classifier;
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

}  // namespace stretch
