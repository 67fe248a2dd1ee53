#include "src/io/stretch_checkpoint.h"

#include <fmt/format.h>

#include <limits>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/words.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ParseMetadataJson(const SafetensorsFile& f, const char* key) {
  try {
    return json::parse(f.GetMetadata(key));
  } catch (const json::exception& e) {
    Fail("{}: metadata {} is not JSON ({})", f.path(), key, e.what());
  }
}

// Training state and tokenizer tensors a checkpoint may hold besides the parameters.
bool IsTrainingStateTensor(const std::string& name) {
  return name.starts_with("optim.") || name.starts_with("rng.") || name.starts_with("train.") ||
         name == "tokenizer.model";
}

CheckpointHeader ReadHeaderOf(const SafetensorsFile& f) {
  const std::string& path = f.path();
  // Format and version first, then the architecture.
  const std::optional<std::string> format = f.FindMetadata("stretch.format");
  if (format != kCheckpointFormat) {
    Fail(
        "{}: not a stretch checkpoint (metadata stretch.format = \"{}\", expected \"{}\"): "
        "models are read from stretch checkpoints (safetensors written by `stretch train`) and "
        "llama2.c .bin files",
        path, format.value_or(""), kCheckpointFormat);
  }
  const std::optional<std::string> version = f.FindMetadata("stretch.version");
  if (version != std::to_string(kCheckpointVersion)) {
    Fail("{}: checkpoint version \"{}\" (this stretch reads version {})", path,
         version.value_or(""), kCheckpointVersion);
  }
  CheckpointHeader h;
  h.path = path;
  h.arch = ArchFromJson(ParseMetadataJson(f, "stretch.config"), path + " stretch.config");
  h.config = h.arch.model;
  const uint64_t step = f.Read<uint64_t>(std::string(kCheckpointStepTensor), {})[0];
  if (step > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    Fail("{}: tensor '{}' is {}, expected a step count below 2^63", path, kCheckpointStepTensor,
         step);
  }
  h.step = static_cast<int64_t>(step);
  if (f.FindMetadata("stretch.tokenizer")) {
    const json t = ParseMetadataJson(f, "stretch.tokenizer");
    if (!t.is_object() || !t.contains("kind") || !t.at("kind").is_string()) {
      Fail("{}: metadata stretch.tokenizer = {}: expected an object with a \"kind\" string", path,
           t.dump());
    }
    h.tokenizer_kind = t.at("kind").get<std::string>();
  }
  return h;
}

}  // namespace

Model InferenceModel(const TrainArch& arch, ModelWeights weights, std::string source) {
  Model m;
  m.config = arch.model;
  m.source = std::move(source);
  m.weights = std::move(weights);
  // The trainer keeps KERPLE parameters for every layer of a KERPLE model, and uses them only
  // where the layer has its position (LayerPlan); the inference model holds them exactly there.
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    const LayerPosition pos = m.config.attention.Layer(static_cast<int>(l)).position;
    if (pos != LayerPosition::kKerpleLog && pos != LayerPosition::kKerplePower) {
      m.weights.layers[l].bias_a.clear();
      m.weights.layers[l].bias_b.clear();
    }
  }
  ValidateAttentionLayout(m);
  return m;
}

bool LooksLikeSafetensors(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size < 10) return false;
  const std::string head = ReadInputHead(path, 9);  // a device or FIFO is never opened
  if (head.size() != 9) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(head.data());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return n >= 2 && n <= static_cast<uint64_t>(SafetensorsFile::kMaxHeaderBytes) && n <= size - 8 &&
         b[8] == '{';
}

CheckpointHeader ReadCheckpointHeader(const std::string& path) {
  return ReadHeaderOf(SafetensorsFile(path));
}

CheckpointHeader ReadCheckpointHeader(const SafetensorsFile& file) { return ReadHeaderOf(file); }

void SealCheckpoint(SafetensorsWriter& w) {
  w.SetMetadata(std::string(kCheckpointChecksumKey),
                fmt::format("{:016x}", w.ContentDigest(kCheckpointChecksumKey)));
}

void VerifyCheckpoint(const SafetensorsFile& f) {
  const std::optional<std::string> stored = f.FindMetadata(kCheckpointChecksumKey);
  if (!stored) return;
  const std::string found = fmt::format("{:016x}", f.ContentDigest(kCheckpointChecksumKey));
  if (found != *stored) {
    Fail(
        "{}: damaged: its content hashes to {}, but it was written with checksum {} (metadata "
        "{}): a changed byte in its tensors or metadata",
        f.path(), found, *stored, kCheckpointChecksumKey);
  }
}

CheckpointModel LoadCheckpointModel(const std::string& path) {
  const SafetensorsFile f(path);
  VerifyCheckpoint(f);
  CheckpointModel out;
  out.header = ReadHeaderOf(f);
  const TrainArch& arch = out.header.arch;
  // The sizes come from the file: bound what they ask for by the bytes the file holds before
  // allocating (the safetensors header is already checked against the file's size).
  const ModelConfig& m = arch.model;
  const double C = m.dim, F = m.hidden_dim, V = m.vocab_size, KV = m.kv_dim(), S = m.key_dim;
  const double per_layer =
      arch.model.Gau() ? 3 * F * C + S * C + 4 * S : 2 * C + 2 * C * C + 2 * KV * C + 3 * F * C;
  const double floats =
      V * C * (m.shared_classifier ? 1 : 2) + C + m.n_layers * (per_layer + 2 * m.n_heads);
  if (floats * sizeof(float) > static_cast<double>(f.file_bytes())) {
    Fail(
        "{}: stretch.config describes about {:.0f} parameters ({:.0f} bytes as float32), but the "
        "file holds {} bytes (expected a file at least that large)",
        path, floats, floats * sizeof(float), f.file_bytes());
  }
  // Exact coverage: every parameter is read with its shape below; every other tensor must be
  // training state or the tokenizer.
  ModelWeights params = ZeroWeights<float>(arch.model);
  std::set<std::string> names;
  params.ForEach([&](const std::string& name, std::vector<float>&, bool) { names.insert(name); });
  for (const SafetensorsTensor& t : f.tensors()) {
    if (names.count(t.name) == 0 && !IsTrainingStateTensor(t.name)) {
      Fail(
          "{}: tensor '{}' is not a parameter of the architecture in stretch.config ({} "
          "block, position {}, {} layers; expected token_embedding, layers.N.{{{}{}{}}}, "
          "final_norm{}, and training state optim.*, rng.*, train.*, tokenizer.model): a "
          "checkpoint of another block or model is not supported at inference",
          path, t.name,
          arch.model.Gau() ? fmt::format("gau:key={}", arch.model.key_dim) : std::string("llama"),
          ArchPositionName(arch.model.attention), arch.model.n_layers,
          arch.model.Gau() ? "gau_u, gau_v, gau_z, gau_o, gamma_q, beta_q, gamma_k, beta_k"
                           : "attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3",
          params.layers.empty() || params.layers[0].bias_a.empty() ? "" : ", bias_a, bias_b",
          arch.model.attention.ssmax ? ", ssmax" : "",
          arch.model.shared_classifier ? "" : ", classifier");
    }
  }
  params.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
    f.ReadInto<float>(name, WeightShape(arch.model, name), std::span<float>(v));
  });
  // The build that wrote it (metadata stretch.build, src/train/checkpoint.h), named where it reads
  // as an id: printable ASCII of at most 80 characters (the file may come from anywhere).
  std::string written_by;
  if (const std::optional<std::string> build = f.FindMetadata("stretch.build");
      build && !build->empty() && build->size() <= 80 &&
      std::all_of(build->begin(), build->end(), IsPrintableAscii)) {
    written_by = ", written by stretch " + *build;
  }
  out.model = InferenceModel(
      arch, std::move(params),
      fmt::format("{} (stretch checkpoint, step {}{})", path, out.header.step, written_by));
  out.tokenizer = ReadCheckpointTokenizer(f, out.model.config.vocab_size);
  return out;
}

std::optional<TrainingTokenizer> ReadCheckpointTokenizer(const SafetensorsFile& f, int vocab_size) {
  const std::string& path = f.path();
  const std::optional<std::string> meta = f.FindMetadata("stretch.tokenizer");
  if (!meta) return std::nullopt;
  json t;
  try {
    t = json::parse(*meta);
  } catch (const json::exception& e) {
    Fail("{}: metadata stretch.tokenizer is not JSON ({})", path, e.what());
  }
  const std::string kind = JsonField<std::string>(t, "kind", path + " stretch.tokenizer");
  std::string model;
  if (f.Find(std::string(kCheckpointTokenizerTensor)) != nullptr) {
    const std::vector<uint8_t> bytes = f.Read<uint8_t>(std::string(kCheckpointTokenizerTensor));
    model.assign(bytes.begin(), bytes.end());
  }
  std::optional<TrainingTokenizer> tok;
  try {
    tok = TrainingTokenizer::Load(kind, model);
  } catch (const Error& e) {
    Fail("{}: stretch.tokenizer (with tensor {}): {}", path, kCheckpointTokenizerTensor, e.what());
  }
  if (t.contains("vocab_size") && t.at("vocab_size") != tok->vocab_size()) {
    Fail(
        "{}: stretch.tokenizer vocab_size = {}, but its {} model has {} tokens (expected the "
        "same)",
        path, t.at("vocab_size").dump(), kind, tok->vocab_size());
  }
  if (tok->vocab_size() != vocab_size) {
    Fail("{}: the tokenizer ({}) has {} tokens, the model's vocab_size is {} (expected the same)",
         path, kind, tok->vocab_size(), vocab_size);
  }
  return tok;
}

TextStream EncodeTextPath(const std::string& path, const TrainingTokenizer& tokenizer) {
  return EncodeTextPath(path, [&tokenizer](const std::string& text) {
    const std::vector<int32_t> ids = tokenizer.Encode(text);
    return std::vector<int>(ids.begin(), ids.end());
  });
}

std::string CheckpointTextProtocolText() {
  return "Text files are encoded whole with the checkpoint's own tokenizer (bytes: one token per "
         "byte; SentencePiece: as the trainer encoded its documents), no BOS or EOS inside the "
         "stream. A directory means its *.txt files in name order, each encoded on its own, "
         "concatenated.";
}

namespace {

// The new suffix of the decoded prompt + generated ids at each step (the decoding of a token
// depends on its neighbours).
class CheckpointDecoder : public TokenTextDecoder {
 public:
  CheckpointDecoder(const TrainingTokenizer& tokenizer, std::span<const int> prompt)
      : tok_(tokenizer), ids_(prompt.begin(), prompt.end()), emitted_(tok_.Decode(ids_)) {}
  std::string Next(int token) override {
    ids_.push_back(token);
    const std::string text = tok_.Decode(ids_);
    if (!text.starts_with(emitted_)) {
      // The decoding of earlier tokens changed (rare): what is printed stays; go on from here.
      emitted_ = text;
      held_ = 0;
      return tok_.Decode(std::span<const int32_t>(&ids_.back(), 1));
    }
    std::string fresh = text.substr(emitted_.size());
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
    held_ = fresh.ends_with(kReplacement) ? kReplacement.size() : 0;
    fresh.resize(fresh.size() - held_);
    emitted_ += fresh;
    return fresh;
  }
  std::string Finish() override {
    if (held_ == 0) return "";
    const std::string text = tok_.Decode(ids_);
    held_ = 0;
    if (!text.starts_with(emitted_)) return "";
    std::string rest = text.substr(emitted_.size());
    emitted_ = text;
    return rest;
  }

 private:
  const TrainingTokenizer& tok_;
  std::vector<int32_t> ids_;
  std::string emitted_;  // decoded text emitted so far (the prompt's included)
  size_t held_ = 0;      // bytes at the end of the decoded text held back
};

class CheckpointTextTokenizer : public TextTokenizer {
 public:
  explicit CheckpointTextTokenizer(TrainingTokenizer tokenizer) : tok_(std::move(tokenizer)) {}
  std::string Name() const override {
    return fmt::format("the checkpoint's {} tokenizer (vocabulary {})", tok_.kind(),
                       tok_.vocab_size());
  }
  int vocab_size() const override { return tok_.vocab_size(); }
  int bos() const override { return tok_.bos_id(); }
  int eos() const override { return tok_.eos_id(); }
  std::vector<int> EncodePrompt(std::string_view text) const override {
    std::vector<int> ids = {tok_.bos_id()};
    if (!text.empty()) {
      const std::vector<int32_t> body = tok_.Encode(text);
      ids.insert(ids.end(), body.begin(), body.end());
    }
    return ids;
  }
  TextStream EncodeText(const std::string& path) const override {
    return EncodeTextPath(path, tok_);
  }
  std::string ProtocolText() const override { return CheckpointTextProtocolText(); }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const override {
    return std::make_unique<CheckpointDecoder>(tok_, prompt);
  }

 private:
  TrainingTokenizer tok_;
};

}  // namespace

std::unique_ptr<TextTokenizer> MakeCheckpointTextTokenizer(TrainingTokenizer tokenizer) {
  return std::make_unique<CheckpointTextTokenizer>(std::move(tokenizer));
}

std::string StepFileName(int64_t step) { return fmt::format("step-{:08d}.safetensors", step); }

int64_t StepOfFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "step-", kSuffix = ".safetensors";
  if (name.size() != kPrefix.size() + 8 + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return -1;
  }
  int64_t step = 0;
  for (const char c : name.substr(kPrefix.size(), 8)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<std::pair<int64_t, std::string>> StepFiles(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int64_t step = StepOfFileName(e.path().filename().string());
    if (step >= 0) found.emplace_back(step, e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

std::string NewestCheckpointIn(const std::string& dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail("{}: not a directory", dir);
  const std::vector<std::pair<int64_t, std::string>> found = StepFiles(dir);
  for (const auto& [step, path] : found) {
    try {
      // Complete: the whole header validates against the file's size, and it is ours.
      const SafetensorsFile f(path);
      const std::optional<std::string> format = f.FindMetadata("stretch.format");
      if (format != kCheckpointFormat) {
        Fail("{}: not a stretch checkpoint (metadata stretch.format = \"{}\", expected \"{}\")",
             path, format.value_or(""), kCheckpointFormat);
      }
      VerifyCheckpoint(f);  // a damaged file is passed over for the one before it
      return path;
    } catch (const Error& e) {
      if (skipped != nullptr) skipped->push_back(fmt::format("skipping {}: {}", path, e.what()));
    }
  }
  Fail("{}: no complete checkpoint (step-NNNNNNNN.safetensors) in this directory{}", dir,
       found.empty() ? std::string()
                     : fmt::format(" ({} file(s) named like one failed to read)", found.size()));
}

}  // namespace stretch
