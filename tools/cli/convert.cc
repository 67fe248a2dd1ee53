// stretch convert: a model from one file format into another.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_checkpoint.h"
#include "src/io/output_file.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/gguf_vocabulary.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/model/family.h"
#include "src/position/method.h"
#include "tools/cli/common.h"

namespace stretch::cli {

namespace {

struct ConvertArgs {
  ModelArgs model;
  std::string out;
  std::string to;
  std::string type = "f32";
  std::string method;  // --method: "" keeps the input's own method (a GGUF file's), if any
};

uint32_t MatrixType(const std::string& type) {
  if (type == "f32") return static_cast<uint32_t>(GgmlType::kF32);
  if (type == "f16") return static_cast<uint32_t>(GgmlType::kF16);
  if (type == "bf16") return static_cast<uint32_t>(GgmlType::kBF16);
  if (type == "q8_0") return static_cast<uint32_t>(GgmlType::kQ8_0);
  Fail("--type: found '{}', expected f32, f16, bf16 or q8_0", type);
}

SafetensorsDtype HfDtype(const std::string& type) {
  if (type == "f32") return SafetensorsDtype::kF32;
  if (type == "f16") return SafetensorsDtype::kF16;
  if (type == "bf16") return SafetensorsDtype::kBF16;
  Fail("--type {}: Hugging Face folders hold f32, f16 or bf16 weights", type);
}

// The vocabulary to write with the model: a SentencePiece vocabulary run by score (`spm`: the
// --tokenizer file, llama2.c's, a SentencePiece tokenizer.model or a LLaMA-kind tokenizer.json;
// else the input's own: a GGUF file's SentencePiece vocabulary, a Hugging Face folder's
// tokenizer.model or LLaMA-kind tokenizer.json, a checkpoint's SentencePiece model), or, for GGUF
// files only, tokenizer.* keys as they are (`gguf_keys`: a GGUF file's byte-level vocabulary, a
// byte-level or SentencePiece-style BPE tokenizer.json as llama.cpp's converters write it). Neither when the
// input has none. Anything else is refused by name.
struct Vocabulary {
  std::optional<Tokenizer> spm;
  std::optional<GgufKeys> gguf_keys;
  std::optional<BpeTokenizer> bpe;  // Hugging Face folders: a BPE tokenizer.json to write
  std::vector<std::string> copied;  // Hugging Face folders: the input's tokenizer files as they are
  std::string what;                 // for the summary line
  HfSpecialIds ids;                 // its BOS and EOS, for a Hugging Face folder's config.json
};

std::string BpeWhat(const BpeTokenizer& bpe) {
  return fmt::format(", vocabulary of {} tokens ({})", bpe.vocab_size(),
                     bpe.options().chars ? "SentencePiece-style, as llama.cpp runs Gemma's"
                                         : "byte-level BPE, pre-tokenizer " +
                                               std::string(BpeSplitName(bpe.options().split)));
}

// A byte-level or SentencePiece-style BPE tokenizer.json (Gemma's form, or the legacy LLaMA form
// of a layout of its own: Phi-3's): GGUF keys as llama.cpp's converter writes them; for a Hugging
// Face folder, a byte-level one written out again, a SentencePiece-style one copied as it is (with
// the tokenizer_config.json beside it).
Vocabulary BpeVocabulary(const ConvertArgs& a, const std::string& json, const std::string& whose) {
  BpeTokenizer bpe = BpeTokenizer::FromTokenizerJson(json);
  if (a.to != "gguf" && a.to != "hf") {
    Fail("{}: a {} tokenizer.json has no form in {} files: expected --to gguf or --to hf", whose,
         bpe.options().chars ? "SentencePiece-style BPE (Gemma's form, or a layout of its own)"
                             : "byte-level BPE",
         a.to);
  }
  Vocabulary v;
  v.what = BpeWhat(bpe);
  v.ids = {bpe.bos(), bpe.eos()};
  if (a.to == "gguf") {
    v.gguf_keys = GgufVocabularyKeys(bpe);
  } else if (bpe.options().chars) {
    // As read: the file and the tokenizer_config.json beside it (which names BOS and EOS).
    v.copied.push_back(json);
    const auto config = std::filesystem::path(json).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(config)) v.copied.push_back(config.string());
  } else {
    v.bpe = std::move(bpe);
  }
  return v;
}

Vocabulary VocabularyToWrite(const ConvertArgs& a, const Loaded& loaded) {
  const std::string& path = loaded.header.path;
  const std::string& tok = a.model.tokenizer;
  Vocabulary v;
  if (!tok.empty()) {
    if (LooksLikeSentencePieceModel(tok)) {
      v.spm = Llama2cTokenizerFromSentencePiece(ReadSentencePieceVocabulary(tok));
    } else if (LooksLikeSentencePieceTokenizerJson(tok)) {
      v.spm = ReadSentencePieceTokenizerJson(tok);
    } else if (ReadInputHead(tok, 1) == "{") {
      return BpeVocabulary(a, tok, "--tokenizer " + tok);
    } else {
      v.spm = Tokenizer::LoadLlama2c(tok);
    }
  } else if (!loaded.header.own_tokenizer) {
    return v;
  } else if (GgufFile::Looks(path)) {
    const GgufFile g = GgufFile::Open(path);
    if (a.to == "gguf") {  // every key as it is, whatever its kind
      v.gguf_keys = GgufTokenizerKeys(g);
      v.what = ", the input's vocabulary";
      return v;
    } else if (g.StringOr("tokenizer.ggml.model", "") == "llama") {
      v.spm = ReadGgufTokenizer(g);
    } else if (a.to == "hf" && g.StringOr("tokenizer.ggml.model", "") == "gpt2") {
      v.bpe = BpeTokenizer::FromGguf(g);
      v.what = BpeWhat(*v.bpe);
      v.ids = {v.bpe->bos(), v.bpe->eos()};
      return v;
    } else {
      Fail("{}: its {} vocabulary (tokenizer.ggml.model) is written only into GGUF files so far",
           path, g.StringOr("tokenizer.ggml.model", "?"));
    }
  } else if (LooksLikeHfFolder(path)) {
    const std::string model = (std::filesystem::path(path) / "tokenizer.model").string();
    const std::string json = (std::filesystem::path(path) / "tokenizer.json").string();
    if (std::filesystem::exists(model)) {
      v.spm = Llama2cTokenizerFromSentencePiece(ReadSentencePieceVocabulary(model));
    } else if (LooksLikeSentencePieceTokenizerJson(json)) {
      v.spm = ReadSentencePieceTokenizerJson(json);
    } else {
      return BpeVocabulary(a, json, path + " (its tokenizer.json)");
    }
  } else if (loaded.header.checkpoint) {
    const SafetensorsFile file(path);
    const std::optional<TrainingTokenizer> t =
        ReadCheckpointTokenizer(file, loaded.model.config.vocab_size);
    if (!t) return v;
    if (t->kind() != "sentencepiece") {
      Fail(
          "{}: its {} tokenizer has no form in {} files (a model trained on raw bytes has no "
          "vocabulary file that llama.cpp or transformers read; expected a run trained with "
          "`stretch train --tokenizer bpe` or `unigram`, or --to stretch, which keeps the bytes)",
          path, t->kind(), a.to);
    }
    v.spm = Llama2cTokenizerFromSentencePiece(
        ParseSentencePieceModel(t->model(), path + " (its tokenizer.model)"));
  }
  // A layout of its own has the SentencePiece-style tokenizer.json form, as those models' own
  // folders hold it: Gemma's without the leading space, the legacy LLaMA form with it (Phi-3's,
  // Mistral's).
  if (v.spm && !v.spm->Llama2cLayout() && a.to == "hf") {
    DroppedMerges dropped;
    v.bpe = SentencePieceStyleBpeFromSpm(*v.spm, &dropped);
    if (dropped.count > 0) {
      Warn(fmt::format(
          "{}: {} merge(s) into or out of a control token, which llama.cpp's encoder makes from "
          "this vocabulary's scores, have no place in a tokenizer.json and are left out (the "
          "first: "
          "{}): a text that spells such a token may be cut otherwise by the folder",
          path, dropped.count, dropped.first));
    }
    v.what = BpeWhat(*v.bpe);
    v.ids = {v.spm->bos(), v.spm->eos()};
    v.spm.reset();
    return v;
  }
  if (v.spm && !v.spm->Llama2cLayout() && a.to != "gguf") {
    Fail(
        "{}: its vocabulary has its own layout (unknown, BOS, EOS ids {}, {}, {}{}{}), which "
        "stretch writes into GGUF files and Hugging Face folders only",
        tok.empty() ? path : "--tokenizer " + tok, v.spm->unk(), v.spm->bos(), v.spm->eos(),
        v.spm->add_space_prefix() ? "" : ", no leading space",
        v.spm->user_defined().empty() ? "" : ", user-defined tokens");
  }
  if (v.spm) {
    v.what = fmt::format(", vocabulary of {} tokens", v.spm->vocab_size());
    v.ids = {v.spm->bos(), v.spm->eos()};
  }
  return v;
}

void RunConvert(const ConvertArgs& a) {
  if (a.to != "gguf" && a.to != "hf" && a.to != "llama2c" && a.to != "stretch") {
    Fail("--to: found '{}', expected gguf, hf, llama2c or stretch", a.to);
  }
  if ((a.to == "llama2c" || a.to == "stretch") && a.type != "f32") {
    Fail("--type {}: {} files hold float32 only; leave --type out with --to {}", a.type,
         a.to == "llama2c" ? "llama2.c" : "stretch checkpoint", a.to);
  }
  if (a.to == "llama2c" && !a.model.tokenizer.empty()) {
    Warn(fmt::format(
        "--tokenizer {}: llama2.c files carry no vocabulary, so it is not written (it is still "
        "checked against the model); keep the tokenizer file beside the output",
        a.model.tokenizer));
  }
  const uint32_t matrix_type = a.to == "gguf" ? MatrixType(a.type) : 0;
  const SafetensorsDtype dtype = a.to == "hf" ? HfDtype(a.type) : SafetensorsDtype::kF32;
  const NamedPath inputs[] = {{"--model", a.model.model}, {"--tokenizer", a.model.tokenizer}};
  const NamedPath outputs[] = {
      {"--out", a.out, a.to == "hf" ? OutputForm::kDirectory : OutputForm::kFile}};
  CheckOutputPaths(inputs, outputs);
  // The partial files an earlier convert to the same files left when it was killed: the write
  // below removes them (AtomicFile::Commit), and the note says so.
  std::vector<std::string> stale;
  const OutputTarget target = ResolveOutput(outputs[0]);
  if (target.kind == OutputKind::kDirectory) {
    for (const char* name : {"config.json", "model.safetensors", "generation_config.json",
                             "tokenizer.model", "tokenizer.json", "tokenizer_config.json"}) {
      for (std::string& p : StalePartialFilesOf((std::filesystem::path(a.out) / name).string())) {
        stale.push_back(std::move(p));
      }
    }
  } else if (target.kind == OutputKind::kReplace) {
    stale = StalePartialFilesOf(target.path);  // beside the file a link leads to
  }
  const auto note_removed = [&stale, &a] {
    for (const std::string& p : stale) {
      if (!std::filesystem::exists(p)) {
        fmt::print(stderr,
                   "note: removed {}, left by an earlier write to --out {} that was killed\n", p,
                   a.out);
      }
    }
  };
  if (a.to == "hf") CheckInputsOutside(inputs, {"--out", a.out});
  const Loaded loaded = LoadModel(a.model, /*tokenizer_needed=*/false);
  // The position method the output asks for: --method, else the input's own (a GGUF file's
  // rope.scaling keys, a Hugging Face config's rope_scaling).
  const std::string spec = !a.method.empty() ? a.method : loaded.header.method_spec;
  const Method method = ParseMethod(spec.empty() ? "direct" : spec);
  if ((a.to == "llama2c" || a.to == "stretch") && !(method == Method{})) {
    Fail(
        "--to {}: the file has no place for the position method {}{}; give --method direct to "
        "write the weights without it",
        a.to, spec,
        a.method.empty() ? " (the input's own: " + loaded.header.method_source + ")" : "");
  }
  // A checkpoint re-written as a checkpoint keeps its tokenizer as it is (bytes included).
  if (a.to == "stretch" && loaded.header.checkpoint && a.model.tokenizer.empty()) {
    const std::optional<TrainingTokenizer> own = ReadCheckpointTokenizer(
        SafetensorsFile(loaded.header.path), loaded.model.config.vocab_size);
    if (own) {
      SaveModelAsCheckpoint(loaded.model, a.out, *own);
    } else {
      SaveModelAsCheckpoint(loaded.model, a.out, nullptr);
    }
    fmt::print("{} ({}) -> {} (stretch checkpoint)\n", loaded.header.path, loaded.header.format,
               a.out);
    note_removed();
    return;
  }
  const Vocabulary vocabulary = a.to == "llama2c" ? Vocabulary{} : VocabularyToWrite(a, loaded);
  const std::optional<Tokenizer>& tok = vocabulary.spm;
  std::string written;
  if (a.to == "gguf") {
    SaveGgufModel(loaded.model, a.out, matrix_type, tok ? &*tok : nullptr, &method,
                  vocabulary.gguf_keys ? &*vocabulary.gguf_keys : nullptr);
    written = fmt::format("GGUF version 3, {}, matrices {}",
                          FamilyOf(loaded.model.config).gguf_architecture, a.type);
    if (const int64_t w = loaded.model.config.attention.UniformWindow(); w > 0) {
      fmt::print(stderr,
                 "note: {} holds a sliding window of {} keys on every layer as {}.attention."
                 "sliding_window; llama.cpp does not read that key for this architecture and "
                 "attends to every key, so it agrees with the model only up to {} tokens\n",
                 a.out, w, FamilyOf(loaded.model.config).gguf_architecture, w);
    }
  } else if (a.to == "hf") {
    // The vocabulary both ways transformers reads it: tokenizer.model (its slow tokenizer,
    // libsentencepiece) and tokenizer.json (its fast one).
    std::vector<std::string> tokenizer_files;
    if (tok) tokenizer_files = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"};
    if (vocabulary.bpe) tokenizer_files = {"tokenizer.json", "tokenizer_config.json"};
    // The copied files take the names Hugging Face reads them by (--tokenizer may be named
    // anything).
    const char* const kCopiedNames[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t k = 0; k < vocabulary.copied.size(); ++k) {
      tokenizer_files.push_back(kCopiedNames[k]);
    }
    // A byte-level vocabulary that has no tokenizer.json form is refused before anything is
    // written.
    if (vocabulary.bpe) (void)SerializeBpeTokenizerJson(*vocabulary.bpe);
    SaveHfModel(loaded.model, a.out, dtype, tokenizer_files, &method, vocabulary.ids);
    const std::filesystem::path dir(a.out);
    if (tok) {
      SaveSentencePieceModel(*tok, (dir / "tokenizer.model").string());
      SaveSentencePieceTokenizerJson(*tok, (dir / "tokenizer.json").string());
      SaveSentencePieceTokenizerConfig(*tok, (dir / "tokenizer_config.json").string());
    }
    if (vocabulary.bpe) SaveBpeTokenizerFiles(*vocabulary.bpe, a.out);
    for (size_t k = 0; k < vocabulary.copied.size(); ++k) {
      const std::string& f = vocabulary.copied[k];
      const std::string bytes = ReadInputHead(f, INT64_MAX);
      AtomicFile out((dir / kCopiedNames[k]).string());
      out.Write(bytes.data(), bytes.size(), "the tokenizer file " + f);
      out.Commit();
    }
    written = ReadHfModelHeader(a.out).format;
  } else if (a.to == "stretch") {
    SaveModelAsCheckpoint(loaded.model, a.out, tok ? &*tok : nullptr);
    written = "stretch checkpoint";
  } else {
    SaveLlama2cVersion1(loaded.model, a.out);
    written = "llama2.c version 1";
    if (a.model.tokenizer.empty() && loaded.header.own_tokenizer) {
      Warn(fmt::format(
          "{}'s own vocabulary is not written: llama2.c files carry none, so {} reads text only "
          "with a tokenizer file beside it (--tokenizer){}",
          loaded.header.path, a.out,
          loaded.header.tokenizer_kind == "bytes"
              ? ", and a model trained on raw bytes has none: it can score token ids (--tokens) "
                "only; --to stretch keeps the bytes"
              : "; --to gguf or --to hf keeps it"));
    }
  }
  if (a.to == "gguf" && !tok && !vocabulary.gguf_keys) {
    Warn(fmt::format(
        "{} holds no vocabulary: llama.cpp does not load a GGUF file without one (stretch reads "
        "it with --tokenizer); give --tokenizer to write it in",
        a.out));
  }
  fmt::print("{} ({}) -> {} ({}{}{})\n", loaded.header.path, loaded.header.format, a.out, written,
             method == Method{} ? "" : ", method " + CanonicalSpec(method), vocabulary.what);
  note_removed();
}

}  // namespace

void RegisterConvert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert",
      "Write a model in another file format: a GGUF file (llama.cpp, Ollama, LM Studio: the "
      "model family's architecture, " +
          KnownGgufArchitectures() +
          ", matrices in "
          "float32, float16, bfloat16 or 8-bit Q8_0), a Hugging Face folder (config.json of " +
          KnownHfArchitectures() +
          ", model.safetensors in float32, float16 or bfloat16, "
          "tokenizer.model), a "
          "llama2.c checkpoint (float32) or a stretch checkpoint (float32; scored, generated from "
          "and fine-tuned with --init like one trained here). The input is any model stretch "
          "reads, "
          "told apart by its content. Only plain models of a family can be written to GGUF, "
          "Hugging "
          "Face and llama2.c files: a model trained here with another position scheme, attention "
          "layout or the GAU block is refused, since these formats cannot say so; a Qwen 2 model "
          "(q/k/v biases) or a Qwen 3 model (per-head q/k norms, heads wider than dim / heads) "
          "goes "
          "to GGUF and Hugging Face folders only. So does a Mistral model (one sliding window of W "
          "keys on every layer, also a model trained here with that layout and nothing else): a "
          "MistralForCausalLM folder with its sliding_window, or GGUF with llama.attention."
          "sliding_window, a key llama.cpp does not read (it then attends to every key, and agrees "
          "with the model only up to W tokens).\n"
          "The vocabulary goes with the model: --tokenizer (llama2.c's tok512.bin, a SentencePiece "
          "tokenizer.model or a LLaMA-kind tokenizer.json), else the input's own (a GGUF file's, a "
          "Hugging Face folder's tokenizer.model or tokenizer.json, a checkpoint's SentencePiece "
          "model). llama.cpp needs it to load a GGUF "
          "file. llama2.c files carry none. A byte-level BPE tokenizer.json (Llama 3, Qwen) or "
          "Gemma's goes into GGUF files as llama.cpp's own converter writes it (Gemma's as a "
          "SentencePiece vocabulary scored by its merges); into a Hugging Face folder a byte-level "
          "one "
          "(also a GGUF file's) is written as tokenizer.json and tokenizer_config.json, a "
          "Gemma-style folder's files are copied, and a GGUF file's SentencePiece vocabulary "
          "without the leading space (Gemma's) is written as Gemma's own tokenizer.json is, its "
          "merges from the scores.\n"
          "Example: stretch convert -m stories260K.bin -t tok512.bin --to gguf --out "
          "stories260K.gguf\n"
          "Example: stretch convert -m stories260K.gguf --to hf --type bf16 --out stories260K-hf");
  AddModelOptions(sub, a->model, /*tokenizer_needed=*/false);
  sub->add_option("--out,-o", a->out,
                  "The file to write (a folder for --to hf; never one of the inputs)")
      ->required();
  sub->add_option("--to", a->to, "Target format: gguf, hf, llama2c or stretch")->required();
  sub->add_option("--method", a->method,
                  "The position method the file tells llama.cpp, transformers (and stretch) to "
                  "run. GGUF: yarn:factor=F (rope.scaling.type yarn, the model's trained length "
                  "as original_context_length), llama3:factor=F (per-pair divisors, "
                  "rope_freqs.weight), pi:factor=F (linear scaling). Hugging Face: config.json's "
                  "rope_scaling for pi, yarn, llama3, longrope (with a factor) and dynamic-ntk. "
                  "direct writes none. Default: the input's own (a GGUF file's, a folder's), "
                  "else none");
  sub->add_option("--type", a->type,
                  "Weight type: f32 (exact), f16, bf16, or for GGUF q8_0 (8 bits per weight plus "
                  "a float16 scale per 32; GGUF norms stay float32)")
      ->capture_default_str();
  sub->callback([a] { RunConvert(*a); });
}

}  // namespace stretch::cli
