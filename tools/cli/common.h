// Pieces shared by the subcommands of the `stretch` command.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "src/io/tokenizer.h"
#include "src/model/config.h"

namespace stretch::cli {

struct ModelArgs {
  std::string model;
  std::string tokenizer;
  int threads = 0;  // 0: all cores
};

// --model, --tokenizer and --threads, with their help text.
void AddModelOptions(CLI::App* app, ModelArgs& args, bool tokenizer_required);

struct Loaded {
  Model model;
  std::optional<Tokenizer> tokenizer;
};
// Loads the checkpoint (and the tokenizer when given), checks that their vocabularies agree and
// applies --threads. Throws stretch::Error with the file, field, found and expected values.
Loaded LoadModel(const ModelArgs& args);

std::string HumanBytes(int64_t bytes);

// The subcommands; each registers itself on `app` and runs when selected.
void RegisterGenerate(CLI::App& app);
void RegisterScore(CLI::App& app);
void RegisterInspect(CLI::App& app);
void RegisterBench(CLI::App& app);

}  // namespace stretch::cli
