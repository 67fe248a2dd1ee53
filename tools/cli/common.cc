#include "tools/cli/common.h"

#include <fmt/format.h>

#include "src/core/threads.h"
#include "src/io/llama2c.h"

namespace stretch::cli {

void AddModelOptions(CLI::App* app, ModelArgs& args, bool tokenizer_required) {
  app->add_option("--model,-m", args.model,
                  "Checkpoint file: llama2.c format (legacy or version 1 export), e.g. "
                  "../shared/models/stories260K/stories260K.bin")
      ->required();
  auto* tok = app->add_option("--tokenizer,-t", args.tokenizer,
                              "Tokenizer file in llama2.c format (tok512.bin, tokenizer.bin); its "
                              "vocabulary size must equal the model's");
  if (tokenizer_required) tok->required();
  app->add_option("--threads", args.threads, "Threads to use (default: all cores)")
      ->check(CLI::NonNegativeNumber);
}

Loaded LoadModel(const ModelArgs& args) {
  if (args.threads > 0) SetNumThreads(args.threads);
  Loaded loaded{LoadLlama2c(args.model), std::nullopt};
  if (!args.tokenizer.empty()) {
    loaded.tokenizer = Tokenizer::LoadLlama2c(args.tokenizer);
    CheckVocabMatches(args.model, loaded.model.config.vocab_size, *loaded.tokenizer);
  }
  return loaded;
}

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace stretch::cli
