#include "src/io/model_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/bpe_tokenizer.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/hf_tokenizer_json.h"
#include "src/io/llama2c.h"
#include "src/io/spm_model.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer.h"
#include "src/position/method.h"

namespace stretch {

namespace {

// --model as a file path: a directory means its newest complete checkpoint, unless it is a
// Hugging Face folder (a config.json in it: a training run's directory never has one).
std::string ResolveModelPath(const std::string& model, std::vector<std::string>* notes) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model, ec) || LooksLikeHfFolder(model)) return model;
  return NewestCheckpointIn(model, notes);
}

// A file whose first non-blank byte is '{' (a Hugging Face tokenizer.json).
bool LooksLikeJsonObject(const std::string& path) {
  const std::string head = ReadInputHead(path, 4096);  // a device or FIFO is never opened
  const size_t first = head.find_first_not_of(" \n\r\t");
  return first != std::string::npos && head[first] == '{';
}

// Stretch checkpoints are told by content: a safetensors header (LooksLikeSafetensors). A file
// named *.safetensors that does not look like one is opened as safetensors anyway, so that its
// error says what is wrong with it rather than what a llama2.c reader makes of it.
bool IsCheckpointPath(const std::string& path) {
  return LooksLikeSafetensors(path) || std::filesystem::path(path).extension() == ".safetensors";
}

void SetGgufHeader(const GgufFile& file, ModelFileHeader& h) {
  GgufModelHeader g = ReadGgufModelHeader(file);
  h.format = std::move(g.format);
  h.config = g.config;
  h.own_tokenizer = GgufHasVocabulary(file);
  h.method_spec = std::move(g.method_spec);
  h.method_source = std::move(g.method_source);
  h.provenance = std::move(g.provenance);
}

// The tokenizer file a Hugging Face folder carries: tokenizer.model (SentencePiece, the LLaMA
// family's), else tokenizer.json (byte-level BPE, or LLaMA's SentencePiece BPE as transformers
// converts it: LoadTokenizerFile tells them apart); "" for none.
std::string HfTokenizerFile(const std::string& dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// A Hugging Face folder's header: linear scaling is the model's own interpolation (as a GGUF
// file's), any other rope_scaling the method the folder asks for.
void SetHfHeader(const std::string& dir, ModelFileHeader& h) {
  const HfModelHeader hf = ReadHfModelHeader(dir);
  h.format = hf.format;
  h.config = hf.config;
  h.own_tokenizer = !HfTokenizerFile(dir).empty();
  if (hf.rope_type == "linear") {
    h.config.rope_interpolation = static_cast<float>(hf.rope_linear_factor);
  } else if (!hf.rope_scaling_json.empty()) {
    try {
      h.method_spec = CanonicalSpec(MethodFromHfRopeScaling(hf.rope_scaling_json));
    } catch (const Error& e) {
      Fail("{}: config.json rope_scaling {}: {}", dir, hf.rope_scaling_json, e.what());
    }
    h.method_source = "config.json rope_scaling " + hf.rope_scaling_json;
  }
  h.provenance.push_back(fmt::format("seq_len {} <- config.json{}", h.config.seq_len,
                                     h.config.seq_len == hf.max_position_embeddings
                                         ? " max_position_embeddings"
                                         : " rope_scaling.original_max_position_embeddings"));
}

}  // namespace

ModelFileHeader ReadModelFileHeader(const std::string& model, std::vector<std::string>* notes) {
  ModelFileHeader h;
  h.path = ResolveModelPath(model, notes);
  if (LooksLikeHfFolder(h.path)) {
    SetHfHeader(h.path, h);
    return h;
  }
  if (IsCheckpointPath(h.path)) {
    const CheckpointHeader c = ReadCheckpointHeader(h.path);
    h.format = "stretch checkpoint";
    h.config = c.config;
    h.checkpoint = true;
    h.step = c.step;
    h.tokenizer_kind = c.tokenizer_kind;
    h.own_tokenizer = true;
    return h;
  }
  if (GgufFile::Looks(h.path)) {
    const GgufFile file = GgufFile::Open(h.path);
    SetGgufHeader(file, h);
    return h;
  }
  const Llama2cHeader l = ReadLlama2cHeader(h.path);
  h.format = l.format;
  h.config = l.config;
  return h;
}

namespace {

// A NaN or an infinity in a weight is refused by name: the kernels would not always pass it on
// (a NaN logit can lose every max() of a softmax and vanish), so a damaged model could score as
// a finite, wrong loss.
void CheckFiniteWeights(LoadedModel& loaded) {
  loaded.model.weights.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end()) {
      Fail("{}: tensor {} holds {} at element {} of {}: expected finite weights (a damaged file?)",
           loaded.header.path, name, *bad, bad - v.begin(), v.size());
    }
  });
}

LoadedModel LoadModelFileUnchecked(const std::string& model, const ModelFileOptions& options,
                                   std::vector<std::string>* notes) {
  LoadedModel loaded;
  loaded.header.path = ResolveModelPath(model, notes);
  if (LooksLikeHfFolder(loaded.header.path)) {
    const std::string& dir = loaded.header.path;
    SetHfHeader(dir, loaded.header);
    const std::string own = HfTokenizerFile(dir);
    const std::string tokenizer = !options.tokenizer_path.empty() ? options.tokenizer_path : own;
    if (options.tokenizer_needed && tokenizer.empty()) {
      Fail(
          "ModelFileOptions::tokenizer_path is required with the Hugging Face folder {}: it holds "
          "no tokenizer.model or tokenizer.json",
          dir);
    }
    loaded.model = LoadHfModel(dir);
    loaded.model.config.rope_interpolation = loaded.header.config.rope_interpolation;
    if (!tokenizer.empty()) {
      loaded.tokenizer = LoadTokenizerFile(tokenizer, dir, loaded.model.config.vocab_size);
    }
    return loaded;
  }
  if (IsCheckpointPath(loaded.header.path)) {
    if (!options.tokenizer_path.empty()) {
      Fail(
          "ModelFileOptions::tokenizer_path {}: {} is a stretch checkpoint, which carries its own "
          "tokenizer; leave ModelFileOptions::tokenizer_path out",
          options.tokenizer_path, loaded.header.path);
    }
    CheckpointModel c = LoadCheckpointModel(loaded.header.path);
    loaded.header.format = "stretch checkpoint";
    loaded.header.config = c.header.config;
    loaded.header.checkpoint = true;
    loaded.header.step = c.header.step;
    loaded.header.tokenizer_kind = c.header.tokenizer_kind;
    loaded.model = std::move(c.model);
    loaded.header.own_tokenizer = c.tokenizer.has_value();
    if (c.tokenizer) {
      loaded.tokenizer = MakeCheckpointTextTokenizer(std::move(*c.tokenizer));
    } else if (options.tokenizer_needed) {
      Fail(
          "{}: the checkpoint carries no tokenizer (no metadata stretch.tokenizer), expected "
          "one to turn text into tokens (such a checkpoint can only be given token ids)",
          loaded.header.path);
    }
    return loaded;
  }
  // A GGUF file or a llama2.c checkpoint: the tokenizer is a llama2.c tokenizer file when one is
  // given, else a GGUF file's own vocabulary (below).
  const bool gguf = GgufFile::Looks(loaded.header.path);
  // A GGUF file is mapped and parsed once for its header, weights and vocabulary.
  std::optional<GgufFile> file;
  if (gguf) {
    file.emplace(GgufFile::Open(loaded.header.path));
    SetGgufHeader(*file, loaded.header);
  } else {
    const Llama2cHeader header = ReadLlama2cHeader(loaded.header.path);
    loaded.header.format = header.format;
    loaded.header.config = header.config;
  }
  // A GGUF file's own vocabulary (SentencePiece or GPT-2's byte-level BPE) serves when no
  // tokenizer file is given.
  const bool own_vocabulary = gguf && options.tokenizer_path.empty() && loaded.header.own_tokenizer;
  if (options.tokenizer_needed && options.tokenizer_path.empty() && !own_vocabulary) {
    Fail(
        "ModelFileOptions::tokenizer_path is required with a {} model ({}): a llama2.c "
        "tokenizer file such as tok512.bin{}",
        gguf ? "GGUF" : "llama2.c", loaded.header.path,
        gguf ? " (the GGUF file carries no vocabulary)" : "");
  }
  loaded.model = gguf ? LoadGgufModel(*file) : LoadLlama2c(loaded.header.path);
  if (own_vocabulary && file->StringOr("tokenizer.ggml.model", "") == "gpt2") {
    BpeTokenizer t = BpeTokenizer::FromGguf(*file);
    if (t.vocab_size() != loaded.model.config.vocab_size) {
      Fail("{}: its vocabulary (tokenizer.ggml.tokens) has {} tokens, the model {}", model,
           t.vocab_size(), loaded.model.config.vocab_size);
    }
    loaded.tokenizer = MakeBpeTextTokenizer(std::move(t));
  } else if (own_vocabulary) {
    Tokenizer t = ReadGgufTokenizer(*file);
    CheckVocabMatches(model, loaded.model.config.vocab_size, t);
    loaded.tokenizer = MakeLlama2cTextTokenizer(std::move(t));
  } else if (!options.tokenizer_path.empty()) {
    loaded.tokenizer =
        LoadTokenizerFile(options.tokenizer_path, model, loaded.model.config.vocab_size);
  }
  return loaded;
}

}  // namespace

LoadedModel LoadModelFile(const std::string& model, const ModelFileOptions& options,
                          std::vector<std::string>* notes) {
  LoadedModel loaded = LoadModelFileUnchecked(model, options, notes);
  CheckFiniteWeights(loaded);
  return loaded;
}

std::unique_ptr<TextTokenizer> LoadTokenizerFile(const std::string& path,
                                                 const std::string& model_path, int model_vocab) {
  std::unique_ptr<TextTokenizer> t;
  if (LooksLikeSentencePieceModel(path)) {
    t = LoadSentencePieceModel(path);
  } else if (LooksLikeSentencePieceTokenizerJson(path)) {
    Tokenizer l = ReadSentencePieceTokenizerJson(path);
    CheckVocabMatches(model_path, model_vocab, l);
    return MakeLlama2cTextTokenizer(std::move(l));
  } else if (LooksLikeJsonObject(path)) {
    t = MakeBpeTextTokenizer(BpeTokenizer::FromTokenizerJson(path));
  } else {
    Tokenizer l = Tokenizer::LoadLlama2c(path);
    CheckVocabMatches(model_path, model_vocab, l);
    return MakeLlama2cTextTokenizer(std::move(l));
  }
  if (t->vocab_size() != model_vocab) {
    Fail("tokenizer {} has {} tokens, but the model {} has a vocabulary of {}", path,
         t->vocab_size(), model_path, model_vocab);
  }
  return t;
}

}  // namespace stretch
