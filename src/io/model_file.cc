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
#include "src/core/words.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/io/tokenizer/tokenizer.h"
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

// The first bytes of a file for messages, as hex and as text: 58 47 55 46 03 00 ("XGUF..").
std::string DescribeHead(std::string_view head) {
  const std::string_view shown = head.substr(0, 16);
  std::string hex;
  for (const char ch : shown) {
    hex += fmt::format("{}{:02x}", hex.empty() ? "" : " ", static_cast<unsigned char>(ch));
  }
  return fmt::format("{} (\"{}\"){}", hex, PrintableAscii(shown, '.'),
                     head.size() > shown.size() ? " ..." : "");
}

uint64_t LittleEndianAt(std::string_view head, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(head[at + i])) << (8 * i);
  }
  return v;
}

// A GGUF file whose 4-byte magic is damaged and the rest is not: a version 1..3, counts of
// tensors and keys that fit, and a first key that is a short printable string (GGUF writers put
// "general.architecture" first). A llama2.c legacy header has no such string at offset 32.
bool LooksLikeGgufWithDamagedMagic(std::string_view head) {
  if (head.size() < 32) return false;
  const uint64_t version = LittleEndianAt(head, 4, 4);
  const uint64_t n_tensors = LittleEndianAt(head, 8, 8), n_kv = LittleEndianAt(head, 16, 8);
  const uint64_t key_len = LittleEndianAt(head, 24, 8);
  if (version < 1 || version > 3 || n_tensors > (uint64_t{1} << 32) || n_kv > (1u << 20) ||
      key_len < 1 || key_len > 256 || 32 + key_len > head.size()) {
    return false;
  }
  for (size_t i = 32; i < 32 + key_len; ++i) {
    if (!IsPrintableAscii(head[i])) return false;
  }
  return true;
}

// A file that the llama2.c reader (the last one tried: the legacy format has no magic) refused:
// when its content says it is something else, that is the message rather than what the llama2.c
// reader made of it ("dim=1179993927").
[[noreturn]] void FailNotLlama2c(const std::string& path, const Error& llama2c_error) {
  const std::string head = ReadInputHead(path, int64_t{64} << 10);
  const std::string_view what =
      "a model (a llama2.c checkpoint, a GGUF file, a stretch checkpoint, a Hugging Face folder "
      "or a training run's directory)";
  if (head.empty()) Fail("{}: empty file: expected {}", path, what);
  if (LooksLikeGgufWithDamagedMagic(head)) {
    Fail(
        "{}: looks like a GGUF file (version {}, first key \"{}\") whose magic is damaged: "
        "starts with {}, expected \"GGUF\" (47 47 55 46)",
        path, LittleEndianAt(head, 4, 4),
        head.substr(32, static_cast<size_t>(LittleEndianAt(head, 24, 8))),
        DescribeHead(head.substr(0, 4)));
  }
  if (std::filesystem::path(path).extension() == ".gguf") {
    Fail("{}: named *.gguf but starts with {}: expected the GGUF magic \"GGUF\" (47 47 55 46)",
         path, DescribeHead(head));
  }
  const char* tokenizer = LooksLikeSentencePieceModel(path) ? "a SentencePiece tokenizer.model"
                          : LooksLikeJsonObject(path)       ? "a JSON file (a tokenizer.json?)"
                          : LooksLikeLlama2cTokenizer(head) ? "a llama2.c tokenizer"
                                                            : nullptr;
  if (tokenizer != nullptr) {
    Fail(
        "{}: {} given as the model: expected {} (a tokenizer goes to ModelFileOptions::"
        "tokenizer_path)",
        path, tokenizer, what);
  }
  Fail(
      "{}: not a GGUF file, a stretch checkpoint or a llama2.c version 1 file (starts with {}); "
      "read as a llama2.c legacy checkpoint: {}",
      path, DescribeHead(head), llama2c_error.what());
}

// The llama2.c header, or the message above when the file is not a llama2.c checkpoint.
Llama2cHeader ReadLlama2cHeaderOrTellKind(const std::string& path) {
  try {
    return ReadLlama2cHeader(path);
  } catch (const Llama2cSizeError& e) {
    // A valid header, the size wrong: a damaged checkpoint, said as such, even where its first
    // bytes also pass for a tokenizer's (a checkpoint cut to its header does).
    CheckRegularInput(path, "a model file");
    // A version 1 file has its magic: the size is its fault, whatever the name. A legacy one
    // named *.gguf is told as a GGUF file that lacks its magic.
    const std::string head = ReadInputHead(path, 4);
    const bool version1 = head.size() == 4 && LittleEndianAt(head, 0, 4) == 0x616b3432;
    if (!version1 && std::filesystem::path(path).extension() == ".gguf") FailNotLlama2c(path, e);
    throw;
  } catch (const Error& e) {
    CheckRegularInput(path, "a model file");  // a device or FIFO: said as such
    const std::string head = ReadInputHead(path, 4);
    // A version 1 file has a magic: its own message is the right one.
    if (head.size() == 4 && LittleEndianAt(head, 0, 4) == 0x616b3432) throw;
    FailNotLlama2c(path, e);
  }
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
  const StoredWeights stored = GgufStoredWeightBytes(file);
  h.stored_weight_bytes = stored.bytes;
  h.stored_types = stored.types;
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
  const StoredWeights stored = HfStoredWeightBytes(dir);
  h.stored_weight_bytes = stored.bytes;
  h.stored_types = stored.types;
  h.own_tokenizer = !HfTokenizerFile(dir).empty();
  if (hf.rope_scaling_json.empty()) {
    h.method_source = "config.json: no rope_scaling";
  } else if (hf.rope_type == "linear") {
    h.config.rope_interpolation = static_cast<float>(hf.rope_linear_factor);
    h.method_source = fmt::format(
        "config.json rope_scaling {} (linear: the model's own position interpolation, factor {})",
        hf.rope_scaling_json, hf.rope_linear_factor);
  } else {
    try {
      Method m = MethodFromHfRopeScaling(hf.rope_scaling_json);
      if (m.rope.scaling == RopeScaling::kLongRope && m.rope.factor == 0.0 &&
          hf.max_position_embeddings > h.config.seq_len) {
        // transformers' _compute_longrope_parameters: without a factor (Phi-3's configs give
        // none), max_position_embeddings / original_max_position_embeddings, which sets the
        // attention factor at every length (not the call's scale).
        m.rope.factor = static_cast<double>(hf.max_position_embeddings) / h.config.seq_len;
      }
      h.method_spec = CanonicalSpec(m);
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
  const Llama2cHeader l = ReadLlama2cHeaderOrTellKind(h.path);
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
    loaded.model = LoadHfModel(dir, options.storage);
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
    const Llama2cHeader header = ReadLlama2cHeaderOrTellKind(loaded.header.path);
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
  loaded.model = gguf ? LoadGgufModel(*file, options.storage) : LoadLlama2c(loaded.header.path);
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

std::unique_ptr<TextTokenizer> LoadModelTokenizer(const std::string& model,
                                                  const std::string& tokenizer_path) {
  const std::string path = ResolveModelPath(model, nullptr);
  const bool hf = LooksLikeHfFolder(path);
  if (!hf && !GgufFile::Looks(path)) {
    return std::move(LoadModelFile(model, {tokenizer_path, true}).tokenizer);
  }
  // A GGUF file with a vocabulary and no weights (llama.cpp's ggml-vocab-*.gguf) is a tokenizer.
  const bool vocabulary_only = !hf && tokenizer_path.empty() &&
                               GgufFile::Open(path).FindTensor("token_embd.weight") == nullptr &&
                               GgufHasVocabulary(path);
  const int vocab = vocabulary_only ? -1 : ReadModelFileHeader(path).config.vocab_size;
  if (!tokenizer_path.empty()) return LoadTokenizerFile(tokenizer_path, path, vocab);
  if (hf) {
    const std::string own = HfTokenizerFile(path);
    if (own.empty()) {
      Fail(
          "{}: the Hugging Face folder holds no tokenizer.model or tokenizer.json; give a "
          "tokenizer file",
          path);
    }
    return LoadTokenizerFile(own, path, vocab);
  }
  const GgufFile file = GgufFile::Open(path);
  if (!GgufHasVocabulary(file)) {
    Fail("{}: the GGUF file carries no vocabulary (tokenizer.ggml.tokens); give a tokenizer file",
         path);
  }
  if (file.StringOr("tokenizer.ggml.model", "") == "gpt2") {
    BpeTokenizer t = BpeTokenizer::FromGguf(file);
    if (vocab >= 0 && t.vocab_size() != vocab) {
      Fail("{}: its vocabulary (tokenizer.ggml.tokens) has {} tokens, the model {}", path,
           t.vocab_size(), vocab);
    }
    return MakeBpeTextTokenizer(std::move(t));
  }
  Tokenizer t = ReadGgufTokenizer(file);
  if (vocab >= 0) CheckVocabMatches(path, vocab, t);
  return MakeLlama2cTextTokenizer(std::move(t));
}

std::unique_ptr<TextTokenizer> LoadTokenizerFile(const std::string& path,
                                                 const std::string& model_path, int model_vocab) {
  // The kind is told by content first, so that no reader reports what it made of another kind's
  // bytes (a GGUF file read as a llama2.c tokenizer has "max_token_length=1179993927").
  const std::string_view kinds =
      "a tokenizer file (llama2.c's tok512.bin, a SentencePiece tokenizer.model or a "
      "tokenizer.json)";
  CheckRegularInput(path, kinds);
  const std::string head = ReadInputHead(path, int64_t{64} << 10);
  if (head.empty()) Fail("{}: empty file: expected {}", path, kinds);
  if (GgufFile::Looks(path)) {
    Fail(
        "{}: a GGUF file given as ModelFileOptions::tokenizer_path: a GGUF file carries its own "
        "vocabulary (give it as the model); expected {}",
        path, kinds);
  }
  if (LooksLikeSafetensors(path)) {
    Fail(
        "{}: a safetensors file (a stretch checkpoint?) given as "
        "ModelFileOptions::tokenizer_path: a stretch checkpoint carries its own tokenizer (give "
        "it as the model); expected {}",
        path, kinds);
  }
  if (head.size() >= 4 && LittleEndianAt(head, 0, 4) == 0x616b3432) {
    Fail(
        "{}: a llama2.c version 1 checkpoint (magic \"ak42\") given as "
        "ModelFileOptions::tokenizer_path: give it as the model; expected {}",
        path, kinds);
  }
  std::unique_ptr<TextTokenizer> t;
  if (LooksLikeSentencePieceModel(path)) {
    t = LoadSentencePieceModel(path);
  } else if (LooksLikeSentencePieceTokenizerJson(path)) {
    Tokenizer l = ReadSentencePieceTokenizerJson(path);
    CheckVocabMatches(model_path, model_vocab, l);
    return MakeLlama2cTextTokenizer(std::move(l));
  } else if (LooksLikeJsonObject(path)) {
    t = MakeBpeTextTokenizer(BpeTokenizer::FromTokenizerJson(path));
  } else if (LooksLikeLlama2cTokenizer(head)) {
    Tokenizer l = Tokenizer::LoadLlama2c(path);
    CheckVocabMatches(model_path, model_vocab, l);
    return MakeLlama2cTextTokenizer(std::move(l));
  } else if (head[0] == '\x0A') {
    // Starts as a SentencePiece ModelProto (field 1, a piece) that the sniffer did not accept:
    // the SentencePiece reader says what is wrong with it (a NaN score, a cut piece).
    t = LoadSentencePieceModel(path);
  } else {
    Fail("{}: not a llama2.c tokenizer, a SentencePiece model or a tokenizer.json: starts with {}",
         path, DescribeHead(head));
  }
  if (t->vocab_size() != model_vocab) {
    Fail("tokenizer {} has {} tokens, but the model {} has a vocabulary of {}", path,
         t->vocab_size(), model_path, model_vocab);
  }
  return t;
}

}  // namespace stretch
