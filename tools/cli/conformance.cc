// stretch conformance: writes the conformance pack (src/eval/conformance.h), or checks this build
// against one.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "src/core/error.h"
#include "src/eval/conformance.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct ConformanceArgs {
  std::string out;
  std::string check;
  int64_t tokens = 512;
  double tolerance = 1e-4;
};

void RunConformance(const ConformanceArgs& a) {
  if (a.out.empty() == a.check.empty()) {
    Fail(
        "conformance: give --out DIR (write a pack) or --check DIR (check this build), one of "
        "them");
  }
  if (!a.out.empty()) {
    ConformanceOptions o;
    o.out = a.out;
    o.tokens = a.tokens;
    const auto cases = WriteConformancePack(o);
    fmt::print(
        "conformance: {} cases (families plain and with their files' RoPE scalings), {} "
        "tokens each, written to {}\n",
        cases.size(), a.tokens, a.out);
    return;
  }
  const auto problems = CheckConformancePack(a.check, a.tolerance);
  for (const std::string& p : problems) fmt::print("{}\n", p);
  if (!problems.empty()) {
    Fail("conformance: {} file(s) of {} disagree with the pack by more than {} nats",
         problems.size(), a.check, a.tolerance);
  }
  fmt::print("conformance: every file of {} agrees with its log-probabilities within {} nats\n",
             a.check, a.tolerance);
}

}  // namespace

void RegisterConformance(CLI::App& app) {
  auto a = std::make_shared<ConformanceArgs>();
  CLI::App* sub = app.add_subcommand(
      "conformance",
      "Write the conformance pack: for each model family stretch reads (llama, Mistral's window, "
      "qwen2, qwen3, phi3, gemma2, gemma3), a tiny random-weight model as a GGUF file and as a "
      "Hugging Face folder, plain and with each RoPE scaling its files can state (pi, yarn, "
      "llama3, longrope, Gemma 3's linear), a fixed token stream four times the models' trained "
      "length, and the "
      "log-probability stretch gives each next token (DIR/README.md says the layout). Another "
      "engine checks itself by loading the files and comparing; --check DIR checks this build "
      "against a pack written by another.\n"
      "Example: stretch conformance --out pack && stretch conformance --check pack");
  sub->add_option("--out,-o", a->out, "the folder to write the pack to (new)");
  sub->add_option("--check", a->check, "a pack to check this build against");
  sub->add_option("--tokens", a->tokens, "the stream's length (default 512)")
      ->check(Whole(2, 1 << 16));
  sub->add_option("--tolerance", a->tolerance,
                  "--check: the largest difference in nats taken as agreement (default 1e-4)")
      ->check(CLI::PositiveNumber);
  sub->callback([a] { RunConformance(*a); });
}

}  // namespace stretch::cli
