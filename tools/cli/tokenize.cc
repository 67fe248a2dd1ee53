// stretch tokenize: the token ids a model's tokenizer gives for a text, as llama.cpp's
// llama-tokenize prints them (for checking one engine's tokenizer against another's).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/model_file.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct TokenizeArgs {
  ModelArgs model;
  std::string prompt;
  std::string file;
  bool ids = false;
  bool no_bos = false;
  bool no_parse_special = false;
  bool show_count = false;
};

void RunTokenize(const TokenizeArgs& a) {
  if (a.prompt.empty() == a.file.empty()) {
    Fail("give the text as --prompt TEXT or --file FILE (found {})",
         a.prompt.empty() ? "neither" : "both");
  }
  std::string text = a.prompt;
  if (!a.file.empty()) {
    CheckRegularInput(a.file, "a text file", "--file");
    text = ReadInputHead(a.file, INT64_MAX);
  }
  CheckRegularInputOrDirectory(a.model.model, kModelInputKind, "--model");
  const std::unique_ptr<TextTokenizer> tok = LoadModelTokenizer(a.model.model, a.model.tokenizer);
  std::vector<int> ids =
      a.no_parse_special ? tok->EncodePrompt(text) : tok->EncodePromptParsingSpecial(text);
  // The vocabulary adds BOS when a prompt of plain text begins with it.
  const std::vector<int> probe = tok->EncodePrompt("a");
  const bool adds_bos = tok->bos() >= 0 && !probe.empty() && probe.front() == tok->bos();
  if (a.no_bos && adds_bos && !ids.empty() && ids.front() == tok->bos()) ids.erase(ids.begin());
  if (a.ids) {
    fmt::print("[{}]\n", fmt::join(ids, ", "));
  } else {
    // Each token with its text as the decoder gives it (a token that ends inside a character
    // shows nothing until the next completes it).
    const std::unique_ptr<TokenTextDecoder> decoder = tok->Decoder({});
    for (const int id : ids) {
      std::string piece = decoder->Next(id);
      fmt::print("{:>6} -> '{}'\n", id, piece);
    }
  }
  if (a.show_count) fmt::print("Total number of tokens: {}\n", ids.size());
}

}  // namespace

void RegisterTokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "tokenize",
      "Print the token ids a model's tokenizer gives for a text: the model's own (a GGUF file's "
      "vocabulary, a Hugging Face folder's tokenizer.json or tokenizer.model, a checkpoint's) or "
      "--tokenizer's. As llama.cpp's llama-tokenize: BOS first when the vocabulary adds one "
      "(--no-bos leaves it out), special tokens spelled in the text are those tokens "
      "(--no-parse-special reads them as text), one line per token with its text, or --ids for "
      "the list alone. Reads no weights of a GGUF file or Hugging Face folder; a GGUF file "
      "holding only a vocabulary (llama.cpp's ggml-vocab-*.gguf) serves as the model.\n"
      "Example: stretch tokenize -m model.gguf -p \"Hello world\" --ids");
  AddModelOptions(sub, a->model, /*tokenizer_needed=*/true);
  sub->add_option("--prompt,-p", a->prompt, "The text");
  sub->add_option("--file,-f", a->file, "A file whose whole content is the text");
  sub->add_flag("--ids", a->ids, "Print only the ids, as a list [1, 2, 3]");
  sub->add_flag("--no-bos", a->no_bos, "Leave out the BOS token the vocabulary would add");
  sub->add_flag("--no-parse-special", a->no_parse_special,
                "Read special tokens spelled in the text as text");
  sub->add_flag("--show-count", a->show_count, "Print the number of tokens after them");
  sub->callback([a] { RunTokenize(*a); });
}

}  // namespace stretch::cli
