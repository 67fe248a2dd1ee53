#include "src/io/model_checkpoint.h"

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/error.h"
#include "src/io/output_file.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/model/model_arch.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The file a model was read from: Model::source is "<path> (<format>)" for every loader, and a
// format may hold " (" itself ("x.gguf (GGUF version 3 (llama, F32))"), so the longest prefix
// ending before a " (" that exists is taken (or the whole source when it names a file). "" when
// none exists (a model made in memory).
std::string SourcePath(const std::string& source) {
  std::error_code ec;
  if (!source.empty() && fs::exists(source, ec)) return source;
  std::string found;
  for (size_t at = source.find(" ("); at != std::string::npos; at = source.find(" (", at + 1)) {
    const std::string prefix = source.substr(0, at);
    if (!prefix.empty() && fs::exists(prefix, ec)) found = prefix;
  }
  return found;
}

// Never write over an input: the model's file (a file inside it for a Hugging Face folder) or the
// tokenizer's file.
void CheckNotAnInput(const Model& model, const std::string& tokenizer_path,
                     const std::string& path) {
  const std::string source = SourcePath(model.source);
  std::error_code ec;
  if (!source.empty() &&
      (SamePath(path, source) || (fs::is_directory(source, ec) && PathWithin(path, source)))) {
    Fail("{}: is {} the model was read from ({}): refusing to write over an input", path,
         fs::is_directory(source, ec) ? "inside the folder" : "the file", model.source);
  }
  if (!tokenizer_path.empty() && SamePath(path, tokenizer_path)) {
    Fail("{}: is the tokenizer's file {}: refusing to write over an input", path, tokenizer_path);
  }
}

// The first field in which `got` differs from `want`, as "field: A, read back as B"; "" when none.
// Floats are compared by their shortest decimal form, which tells every two values apart.
std::string ConfigDifference(const ModelConfig& want, const ModelConfig& got) {
  std::string diff;
  auto field = [&diff](std::string_view name, const auto& a, const auto& b) {
    const std::string sa = fmt::format("{}", a), sb = fmt::format("{}", b);
    if (diff.empty() && sa != sb) diff = fmt::format("{}: {}, read back as {}", name, sa, sb);
  };
  const AttentionLayout &wa = want.attention, &ga = got.attention;
  field("block", ArchBlockName(want.block), ArchBlockName(got.block));
  field("dim", want.dim, got.dim);
  field("hidden_dim", want.hidden_dim, got.hidden_dim);
  field("n_layers", want.n_layers, got.n_layers);
  field("n_heads", want.n_heads, got.n_heads);
  field("n_kv_heads", want.n_kv_heads, got.n_kv_heads);
  field("key_dim", want.key_dim, got.key_dim);
  field("vocab_size", want.vocab_size, got.vocab_size);
  field("seq_len", want.seq_len, got.seq_len);
  field("shared_classifier", want.shared_classifier, got.shared_classifier);
  field("rope_base", want.rope_base, got.rope_base);
  field("rope_interpolation", want.rope_interpolation, got.rope_interpolation);
  field("norm_eps", want.norm_eps, got.norm_eps);
  field("qkv_bias", want.qkv_bias, got.qkv_bias);
  field("qk_norm", want.qk_norm, got.qk_norm);
  field("explicit_head_dim", want.explicit_head_dim, got.explicit_head_dim);
  field("position", LayerPositionName(wa.position), LayerPositionName(ga.position));
  field("layout entries", wa.layers.size(), ga.layers.size());
  for (size_t l = 0; l < wa.layers.size() && l < ga.layers.size(); ++l) {
    field(fmt::format("layer {} position", l), wa.layers[l].position, ga.layers[l].position);
    field(fmt::format("layer {} window", l), wa.layers[l].window, ga.layers[l].window);
    field(fmt::format("layer {} chunk", l), wa.layers[l].chunk, ga.layers[l].chunk);
    field(fmt::format("layer {} rope_base", l), wa.layers[l].rope_base, ga.layers[l].rope_base);
    field(fmt::format("layer {} rope_pi", l), wa.layers[l].rope_pi, ga.layers[l].rope_pi);
    field(fmt::format("layer {} temperature", l), wa.layers[l].temperature,
          ga.layers[l].temperature);
  }
  field("query_norm", wa.query_norm, ga.query_norm);
  field("key_norm", wa.key_norm, ga.key_norm);
  field("logit_scale", wa.logit_scale, ga.logit_scale);
  field("rope_fraction", wa.rope_fraction, ga.rope_fraction);
  field("xpos_scale_base", wa.xpos_scale_base, ga.xpos_scale_base);
  field("sandwich_dim", wa.sandwich_dim, ga.sandwich_dim);
  field("sandwich_lambda", wa.sandwich_lambda, ga.sandwich_lambda);
  field("position_log_scale", wa.position_log_scale, ga.position_log_scale);
  field("ssmax", wa.ssmax, ga.ssmax);
  field("log_length_scale", wa.log_length_scale, ga.log_length_scale);
  field("temperature_floor", wa.temperature_floor, ga.temperature_floor);
  field("temperature_scale", wa.temperature_scale, ga.temperature_scale);
  field("rope_map", wa.rope_map, ga.rope_map);
  return diff;
}

// The architecture stretch.config stores for `model`, checked as the reader checks it, and
// checked to read back as the model's own.
TrainArch ArchOf(const Model& model, const std::string& path) {
  // stretch.config has no key for these (train does not make them).
  if (const ModelConfig& c = model.config; c.qkv_bias || c.qk_norm || c.explicit_head_dim > 0) {
    Fail("{}: a stretch checkpoint cannot hold {}: {}; write it as GGUF or a Hugging Face folder",
         path, model.source,
         c.qkv_bias  ? "its q/k/v projections have biases (a Qwen 2 model)"
         : c.qk_norm ? "it RMS-normalizes each head's q and k (a Qwen 3 model)"
                     : "its heads are not dim / heads wide");
  }
  if (const std::string what = model.config.UntrainedBlock(); !what.empty()) {
    Fail(
        "{}: a stretch checkpoint cannot hold {}: it has {}; write it as GGUF or a Hugging Face "
        "folder",
        path, model.source, what);
  }
  try {
    ValidateAttentionLayout(model);
  } catch (const Error& e) {
    Fail("{}: cannot write the model as a checkpoint: {}", path, e.what());
  }
  TrainArch arch;
  arch.model = model.config;
  ModelConfig& c = arch.model;
  AttentionLayout& a = c.attention;
  // The file lists every layer; an empty list means {position, full attention} for each.
  if (a.layers.empty() && c.n_layers > 0) {
    a.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{});
  }
  // Settings no layer of this model reads, which the file has no place for.
  if (a.position != LayerPosition::kSandwich) {
    a.sandwich_dim = 0;
    a.sandwich_lambda = 0.0;
  }
  if (!c.Gau()) c.key_dim = 0;
  try {
    ValidateArch(arch);
  } catch (const Error& e) {
    Fail("{}: a stretch checkpoint cannot hold {}: {}", path, model.source, e.what());
  }
  const TrainArch back = ArchFromJson(ArchToJson(arch), path + " stretch.config");
  if (const std::string diff = ConfigDifference(arch.model, back.model); !diff.empty()) {
    Fail("{}: stretch.config cannot hold {}'s config ({}; expected the same)", path, model.source,
         diff);
  }
  return arch;
}

// Every tensor LoadCheckpointModel reads for `config`, in ModelWeights::ForEach order. Its names
// depend only on the layer count, the block, KERPLE, SSMax and the classifier, so they are taken
// from ZeroWeights of a copy with every size 1, without allocating the real sizes.
std::vector<std::string> CheckpointTensorNames(const ModelConfig& config) {
  ModelConfig unit = config;
  unit.dim = unit.hidden_dim = unit.vocab_size = 1;
  unit.n_heads = unit.n_kv_heads = 1;
  if (unit.Gau()) unit.key_dim = 1;
  ModelWeights w = ZeroWeights<float>(unit);
  std::vector<std::string> names;
  w.ForEach([&](const std::string& name, std::vector<float>&, bool) { names.push_back(name); });
  return names;
}

// "layers.3.bias_a" -> 3; -1 for a tensor outside the layers.
int LayerOf(const std::string& name) {
  constexpr std::string_view kPrefix = "layers.";
  if (!name.starts_with(kPrefix)) return -1;
  return std::stoi(name.substr(kPrefix.size()));
}

void WriteModelCheckpoint(const Model& model, const std::string& path,
                          const TrainingTokenizer* tokenizer, const std::string& tokenizer_path) {
  CheckNotAnInput(model, tokenizer_path, path);
  const TrainArch arch = ArchOf(model, path);
  const ModelConfig& c = arch.model;
  if (model.weights.layers.size() != static_cast<size_t>(c.n_layers)) {
    Fail("{}: {} has {} layers of weights, its config {} (expected the same)", path, model.source,
         model.weights.layers.size(), c.n_layers);
  }
  if (tokenizer != nullptr && tokenizer->vocab_size() != c.vocab_size) {
    Fail(
        "{}: the tokenizer ({}) has {} tokens, the model ({}) has vocab_size {} (expected the "
        "same)",
        path, tokenizer->kind(), tokenizer->vocab_size(), model.source, c.vocab_size);
  }

  // The model's tensors by name. ForEach only reads them here (it takes its struct mutable).
  std::map<std::string, const std::vector<float>*> have;
  const_cast<ModelWeights&>(model.weights)
      .ForEach([&](const std::string& name, std::vector<float>& v, bool) { have[name] = &v; });
  SafetensorsWriter w;
  for (const std::string& name : CheckpointTensorNames(c)) {
    const std::vector<int64_t> shape = WeightShape(c, name);
    int64_t numel = 1;
    for (const int64_t d : shape) numel *= d;
    const auto it = have.find(name);
    if (it == have.end()) {
      // KERPLE's parameters of a layer without position: the file holds them, no layer reads them.
      const int l = LayerOf(name);
      const LayerPosition p = l >= 0 ? c.attention.Layer(l).position : LayerPosition::kRope;
      if ((name.ends_with(".bias_a") || name.ends_with(".bias_b")) && c.attention.Kerple() &&
          p != LayerPosition::kKerpleLog && p != LayerPosition::kKerplePower) {
        w.AddOwned<float>(name, shape, std::vector<float>(static_cast<size_t>(numel), 0.0f));
        continue;
      }
      Fail("{}: {} has no tensor '{}' (expected one of shape {} for its architecture)", path,
           model.source, name, FormatShape(shape));
    }
    const std::vector<float>& v = *it->second;
    if (static_cast<int64_t>(v.size()) != numel) {
      Fail("{}: {}: tensor '{}' has {} values, expected {} (shape {})", path, model.source, name,
           v.size(), numel, FormatShape(shape));
    }
    w.Add<float>(name, shape, std::span<const float>(v));
    have.erase(it);
  }
  for (const auto& [name, v] : have) {
    if (v->empty()) continue;  // a tensor of the other block that this layer does not hold
    Fail(
        "{}: {} has a tensor '{}' ({} values) that its architecture ({} block, position {}, "
        "shared_classifier {}) has no place for in a checkpoint: it would be lost",
        path, model.source, name, v->size(), ArchBlockName(c.block), ArchPositionName(c.attention),
        c.shared_classifier);
  }

  w.AddOwned<uint64_t>(std::string(kCheckpointStepTensor), {}, std::vector<uint64_t>{0});
  if (tokenizer != nullptr && !tokenizer->model().empty()) {
    const std::string& bytes = tokenizer->model();
    w.AddOwned<uint8_t>(std::string(kCheckpointTokenizerTensor),
                        {static_cast<int64_t>(bytes.size())},
                        std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  w.SetMetadata("stretch.format", std::string(kCheckpointFormat));
  w.SetMetadata("stretch.version", std::to_string(kCheckpointVersion));
  w.SetMetadata("stretch.config", ArchToJson(arch).dump());
  if (tokenizer != nullptr) {
    // As the trainer writes it (src/train/train_run.cc, ExtrasOf).
    w.SetMetadata("stretch.tokenizer", json{{"kind", std::string(tokenizer->kind())},
                                            {"vocab_size", tokenizer->vocab_size()},
                                            {"bos", tokenizer->bos_id()}}
                                           .dump());
  }
  w.SetMetadata("stretch.converted_from", model.source);
  SealCheckpoint(w);
  w.Write(path);
}

}  // namespace

void SaveModelAsCheckpoint(const Model& model, const std::string& path,
                           const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    WriteModelCheckpoint(model, path, nullptr, "");
    return;
  }
  CheckNotAnInput(model, tokenizer->path(), path);
  if (tokenizer->vocab_size() != model.config.vocab_size) {
    Fail(
        "{}: the tokenizer {} has {} tokens, the model ({}) has vocab_size {} (expected the "
        "same)",
        path, tokenizer->path(), tokenizer->vocab_size(), model.source, model.config.vocab_size);
  }
  std::string bytes;
  try {
    bytes = SerializeSentencePieceModel(*tokenizer);
  } catch (const Error& e) {
    Fail("{}: the tokenizer cannot be stored as a SentencePiece model: {}", path, e.what());
  }
  std::optional<TrainingTokenizer> spm;
  try {
    spm = TrainingTokenizer::Load("sentencepiece", bytes);
  } catch (const Error& e) {
    Fail("{}: the tokenizer {} as a SentencePiece model: {}", path, tokenizer->path(), e.what());
  }
  WriteModelCheckpoint(model, path, &*spm, tokenizer->path());
}

void SaveModelAsCheckpoint(const Model& model, const std::string& path,
                           const TrainingTokenizer& tokenizer) {
  WriteModelCheckpoint(model, path, &tokenizer, "");
}

}  // namespace stretch
