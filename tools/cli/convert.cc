// stretch convert: a model from one file format into another.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/llama2c.h"
#include "src/io/output_file.h"
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

void RunConvert(const ConvertArgs& a) {
  if (a.to != "gguf" && a.to != "llama2c") {
    Fail(
        "--to: found '{}', expected gguf or llama2c (Hugging Face folders and stretch "
        "checkpoints as targets are not built yet)",
        a.to);
  }
  if (a.to == "llama2c" && a.type != "f32") {
    Fail("--type {}: llama2.c files hold float32 only; leave --type out with --to llama2c", a.type);
  }
  const uint32_t matrix_type = MatrixType(a.type);
  const NamedPath inputs[] = {{"--model", a.model.model}, {"--tokenizer", a.model.tokenizer}};
  const NamedPath outputs[] = {{"OUT", a.out}};
  CheckOutputPaths(inputs, outputs);
  const Loaded loaded = LoadModel(a.model, /*tokenizer_needed=*/false);
  // The position method the output asks for: --method, else the input's own (a GGUF file's).
  const std::string spec = !a.method.empty() ? a.method : loaded.header.method_spec;
  const Method method = ParseMethod(spec.empty() ? "direct" : spec);
  if (a.to == "gguf") {
    // The vocabulary: the llama2.c tokenizer file when given, else the input GGUF file's own.
    std::unique_ptr<Tokenizer> tok;
    std::optional<GgufFile> vocabulary;
    if (!a.model.tokenizer.empty()) {
      tok = std::make_unique<Tokenizer>(Tokenizer::LoadLlama2c(a.model.tokenizer));
    } else if (loaded.header.own_tokenizer && GgufFile::Looks(loaded.header.path)) {
      vocabulary.emplace(GgufFile::Open(loaded.header.path));
    }
    SaveGgufModel(loaded.model, a.out, matrix_type, tok.get(), &method,
                  vocabulary ? &*vocabulary : nullptr);
  } else {
    if (!(method == Method{})) {
      Fail(
          "--to llama2c: the file has no place for the position method {}{}; give --method "
          "direct to write the weights without it",
          spec, a.method.empty() ? " (the input's own: " + loaded.header.method_source + ")" : "");
    }
    SaveLlama2cVersion1(loaded.model, a.out);
  }
  fmt::print("{} ({}) -> {} ({}{}{})\n", loaded.header.path, loaded.header.format, a.out,
             a.to == "gguf" ? "GGUF version 3, llama" : "llama2.c version 1",
             a.to == "gguf" ? ", matrices " + a.type : "",
             method == Method{} ? "" : ", method " + CanonicalSpec(method));
}

}  // namespace

void RegisterConvert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert",
      "Write a model in another file format: a GGUF file (llama.cpp, Ollama, LM Studio: the "
      "\"llama\" architecture, matrices in float32, float16, bfloat16 or 8-bit Q8_0) or a "
      "llama2.c checkpoint (float32). The input is any model stretch reads, told apart by its "
      "content. Only plain LLaMA models can be written: a model trained here with another "
      "position scheme, attention layout or the GAU block is refused, since these formats "
      "cannot say so.\n"
      "With --tokenizer (a llama2.c tokenizer file) the GGUF file also carries the vocabulary, "
      "which llama.cpp needs to load it; a GGUF input's own vocabulary is carried over.\n"
      "Example: stretch convert -m stories260K.bin -t tok512.bin --to gguf --out stories260K.gguf");
  AddModelOptions(sub, a->model, /*tokenizer_needed=*/false);
  sub->add_option("--out,-o", a->out, "The file to write (never one of the inputs)")->required();
  sub->add_option("--to", a->to, "Target format: gguf or llama2c")->required();
  sub->add_option("--method", a->method,
                  "The position method the GGUF file tells llama.cpp (and stretch) to run: "
                  "yarn:factor=F (rope.scaling.type yarn, the model's trained length as "
                  "original_context_length), llama3:factor=F (per-pair divisors, "
                  "rope_freqs.weight), pi:factor=F (linear scaling) or direct. Default: the "
                  "input's own (a GGUF file's), else none");
  sub->add_option("--type", a->type,
                  "GGUF matrix type: f32 (exact), f16, bf16 or q8_0 (8 bits per weight plus a "
                  "float16 scale per 32); norms stay float32")
      ->capture_default_str();
  sub->callback([a] { RunConvert(*a); });
}

}  // namespace stretch::cli
