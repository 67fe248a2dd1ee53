// stretch tune: the best training-free method and parameters for a model at a target length,
// chosen by scoring a grid on a held-out sample (src/eval/tune.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/timer.h"
#include "src/eval/tune.h"
#include "src/io/model_file.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct TuneArgs {
  ModelArgs model;
  std::string data;
  int64_t ctx = 0;
  int64_t windows = 8;
  int rounds = 1;
};

void RunTuneCommand(const TuneArgs& a) {
  CheckRegularInputOrDirectory(a.data, kTextInputKind, "--data");
  const ModelHeader header = ReadModelHeader(a.model.model);
  if (a.ctx < 2) Fail("--ctx: found {}, expected the target length in tokens (>= 2)", a.ctx);
  if (a.model.tokenizer.empty() && !header.own_tokenizer) {
    Fail(
        "--data needs --tokenizer to turn the text into tokens (a llama2.c model, or a GGUF file "
        "without a vocabulary)");
  }
  ModelArgs margs = a.model;
  margs.model = header.path;
  Loaded loaded = LoadModel(margs, /*tokenizer_needed=*/true);
  Transformer model(loaded.model);
  const TextStream stream = loaded.tokenizer->EncodeText(a.data);
  const int64_t L = loaded.model.config.seq_len;
  fmt::print("model: {} (trained at L = {} tokens)\ntarget length: {} tokens ({:.3g} x L)\n",
             header.path, L, a.ctx, static_cast<double>(a.ctx) / static_cast<double>(L));
  fmt::print("sample: {} ({} tokens; the first {} windows of {} scored per cell)\n", a.data,
             stream.tokens.size(), a.windows, a.ctx);
  TuneOptions o;
  o.ctx = a.ctx;
  o.windows = a.windows;
  o.refine_rounds = a.rounds;
  o.bos = loaded.tokenizer->bos();
  const bool tty = isatty(fileno(stderr)) != 0;
  Timer timer;
  const TuneResult r =
      RunTune(model, stream.tokens, o, [&](const TuneCell& c, size_t done, size_t total) {
        fmt::print(stderr, "{}tune [{}/{}{}] {}: loss {:.4f}{}", tty ? "\r\033[K" : "", done, total,
                   c.round > 0 ? ", refining" : "", c.spec, c.summary.MeanLoss(), tty ? "" : "\n");
      });
  if (tty) fmt::print(stderr, "\r\033[K");
  std::vector<size_t> order(r.cells.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return r.cells[x].summary.MeanLoss() < r.cells[y].summary.MeanLoss();
  });
  fmt::print("\n| rank | method | loss (nats) | perplexity | accuracy | round |\n");
  fmt::print("| ---: | --- | ---: | ---: | ---: | --- |\n");
  for (size_t k = 0; k < order.size(); ++k) {
    const TuneCell& c = r.cells[order[k]];
    fmt::print("| {} | `{}` | {:.4f} | {:.3f} | {:.4f} | {} |\n", k + 1, c.spec,
               c.summary.MeanLoss(), c.summary.Perplexity(), c.summary.Accuracy(),
               c.round == 0 ? "grid" : fmt::format("refine {}", c.round));
  }
  const TuneCell& best = r.cells[r.best];
  fmt::print(
      "\nscored {} cells ({} grid points refused by their method) in {:.0f} s, {} windows of {} "
      "tokens each\nbest: --method {}  (loss {:.4f}, accuracy {:.4f})\n",
      r.cells.size(), r.refused, timer.Seconds(), best.summary.windows, a.ctx, best.spec,
      best.summary.MeanLoss(), best.summary.Accuracy());
}

}  // namespace

void RegisterTune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Which method should I use for this model at this length? Scores the training-free "
      "methods (position interpolation, NTK, YaRN, ReRoPE, Self-Extend, windows, ...) over a "
      "grid of their parameters on a sample of your text, refines around the best, and prints "
      "every cell ranked by loss and the best --method spec. Use text the model was not "
      "trained on.");
  AddModelOptions(cmd, a->model, /*tokenizer_needed=*/true);
  cmd->add_option("--data", a->data, "a held-out text sample: a file or a folder of *.txt")
      ->required();
  cmd->add_option("--ctx", a->ctx, "the target length in tokens (e.g. 8 x the training length)")
      ->required()
      ->check(Whole(1, kMaxContext));
  cmd->add_option("--windows", a->windows, "windows of --ctx tokens scored per cell")
      ->capture_default_str()
      ->check(Whole(1, 1 << 20));
  cmd->add_option("--rounds", a->rounds, "rounds of refinement around the best cell")
      ->capture_default_str()
      ->check(Whole(0, 64));
  cmd->callback([a] { RunTuneCommand(*a); });
}

}  // namespace stretch::cli
