// stretch tune: the best training-free method and parameters for a model at a target length,
// chosen by scoring a grid on a held-out sample (src/eval/tune.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/timer.h"
#include "src/core/words.h"
#include "src/eval/retrieval.h"
#include "src/eval/tune.h"
#include "src/io/model_file.h"
#include "src/position/method.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct TuneArgs {
  ModelArgs model;
  std::string data;
  int64_t ctx = 0;
  int64_t windows = 8;
  int rounds = 1;
  std::string objective = "both";
  int64_t retrieval_trials = 4;
  int64_t span = 32;
};

// "12.3 (11.9-12.8)": an estimate and its 95% interval.
std::string WithInterval(const Interval& i, int digits) {
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f})", i.estimate, digits, i.low, digits, i.high,
                     digits);
}

// What a cell's far copy says, for the table: "4064", "none" or why it cannot be told
// (SeesBackDistance and SeesBackInformative, src/eval/retrieval.h: the rule of `score --protocol
// far-copy` and of the lab's report).
bool SeesBackInformative(const TuneCell& c) {
  return c.retrieval && stretch::SeesBackInformative(*c.retrieval);
}

std::string SeesBack(const TuneCell& c) {
  if (!c.retrieval) return "-";
  if (!c.retrieval->sees_back) return "not measured at L";
  if (!SeesBackInformative(c)) {
    return fmt::format(
        "not informative (copy - control at most {:+.3f} < {:.1f}: too weak a copy "
        "to follow)",
        c.retrieval->max_gain, kSeesBackMinGain);
  }
  if (*c.retrieval->sees_back == 0) return "none";
  return fmt::format("{}", *c.retrieval->sees_back);
}

// How far back a method that masks keys out can see at all: the window of window, lambda,
// blockwise, chunked and streaming (lambda and streaming also the first S tokens), or nullopt.
std::optional<std::string> MaskReach(const std::string& spec, int64_t train_len) {
  const Method m = ParseMethod(spec);
  if (m.mask.kind == MaskKind::kCausal) return std::nullopt;
  const int64_t sinks = m.mask.sinks > 0 ? m.mask.sinks : 4;  // lambda's default n
  // Window 0: L, but L - sinks for the streaming cache (method_check.cc's defaults).
  const int64_t w = m.mask.window > 0              ? m.mask.window
                    : MethodName(m) == "streaming" ? train_len - sinks
                                                   : train_len;
  switch (m.mask.kind) {
    case MaskKind::kLambda:
      return fmt::format("no key further than {} tokens back but the text's first {}", w, sinks);
    case MaskKind::kChunk: return fmt::format("no key outside its chunk of {} tokens", w);
    default: return fmt::format("no key further than {} tokens back", w);
  }
}

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
  fmt::print("sample: {} ({} tokens; the first {} of {} tokens scored per cell)\n", a.data,
             stream.tokens.size(), Counted(a.windows, "window"), a.ctx);
  if (a.windows < 2) {
    fmt::print(stderr,
               "warning: --windows 1: a loss interval is a bootstrap over windows, which one "
               "window cannot give (it reads as width 0), so no two cells can be told tied or "
               "apart; give --windows 4 or more to rank with intervals\n");
  }
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
  TuneResult result = r;
  const TuneObjective objective = ParseTuneObjective(a.objective);
  if (a.retrieval_trials > 0) {
    const TextEncoder encode = MidTextEncoder([&](std::string_view text) {
      std::vector<int> ids = loaded.tokenizer->EncodePrompt(text);
      if (!ids.empty() && ids.front() == loaded.tokenizer->bos()) ids.erase(ids.begin());
      return ids;
    });
    TuneRetrievalOptions ro;
    ro.trials = a.retrieval_trials;
    ro.copy.span = a.span;
    const TokenSpans docs = {std::span<const int>(stream.tokens)};
    MeasureTuneRetrieval(model, result, docs, encode, o, ro,
                         [&](const std::string& spec, size_t done, size_t total) {
                           fmt::print(stderr, "{}tune: far copy [{}/{}] {}{}",
                                      tty ? "\r\033[K" : "", done + 1, total, spec,
                                      tty ? "" : "\n");
                         });
    if (tty) fmt::print(stderr, "\r\033[K");
  }
  const TuneRanking k = RankTune(result, objective);
  fmt::print(
      "\n| rank | method | loss (nats, 95% interval) | accuracy | far copy: copy - control at the "
      "longest distance | sees back (tokens) | round |\n");
  fmt::print("| ---: | --- | --- | ---: | --- | ---: | --- |\n");
  for (size_t i = 0; i < k.order.size(); ++i) {
    const TuneCell& c = result.cells[k.order[i]];
    const std::optional<Interval> far = c.FarthestCopy();
    fmt::print("| {}{} | `{}` | {} | {:.4f} | {} | {} | {} |\n", i + 1, k.tied[i] ? " (tie)" : "",
               c.spec, WithInterval(c.loss, 4), c.summary.Accuracy(),
               far ? WithInterval(*far, 3) : std::string("-"), SeesBack(c),
               c.round == 0 ? "grid" : fmt::format("refine {}", c.round));
  }
  const TuneCell& best = result.cells[k.recommended];
  fmt::print(
      "\nscored {} cells ({} grid points refused by their method) in {:.0f} s, {} of {} tokens "
      "each; far copy: {} per distance for the best cell of each family\n"
      "objective: {} ({}); (tie): cannot be told apart from rank 1 ({})\n",
      result.cells.size(), result.refused, timer.Seconds(), Counted(best.summary.windows, "window"),
      a.ctx, Counted(a.retrieval_trials, "trial"), TuneObjectiveName(objective), k.note,
      objective == TuneObjective::kLoss || !k.retrieval_decided
          ? "its loss: the bootstrap interval of the difference, window by window, holds 0"
      : objective == TuneObjective::kRetrieval
          ? "the far-copy intervals overlap"
          : "the far-copy intervals overlap, and so does the loss: the bootstrap interval of the "
            "difference, window by window, holds 0");
  std::string sees;
  if (best.retrieval && !SeesBackInformative(best)) {
    sees = "; how far back it sees cannot be told: " + SeesBack(best);
  } else if (best.retrieval && best.retrieval->sees_back == 0) {
    sees = "; sees back: none (its copy at L is at its control)";
  } else if (best.retrieval && best.retrieval->sees_back) {
    sees = fmt::format("; sees back {} tokens of {}", *best.retrieval->sees_back, a.ctx);
    if (*best.retrieval->sees_back < a.ctx / 2) {
      sees += fmt::format(
          " (WARNING: it keeps copying from no further than {} tokens back, {:.2g} x L: it "
          "predicts long text without using most of it)",
          *best.retrieval->sees_back,
          static_cast<double>(*best.retrieval->sees_back) / static_cast<double>(L));
    }
  } else if (!best.retrieval) {
    sees =
        "; how far back it sees was not measured (--retrieval-trials 0, or not the best of "
        "its family)";
  }
  if (const std::optional<std::string> reach = MaskReach(best.spec, L)) {
    sees += fmt::format(
        "; WARNING: it sees {}: it avoids blowing up by never reading what lies beyond, whatever "
        "that holds",
        *reach);
  }
  fmt::print("recommended: --method {}  (loss {:.4f}, accuracy {:.4f}{})\n", best.spec,
             best.summary.MeanLoss(), best.summary.Accuracy(), sees);
  if (k.recommended != result.best) {
    const TuneCell& lb = result.cells[result.best];
    const std::optional<std::string> reach = MaskReach(lb.spec, L);
    fmt::print("lowest loss: --method {}  (loss {:.4f}; sees back {}{})\n", lb.spec,
               lb.summary.MeanLoss(), SeesBack(lb),
               reach ? fmt::format("; it sees {}", *reach) : std::string());
  }
}

}  // namespace

void RegisterTune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Which method should I use for this model at this length? Scores the training-free "
      "methods (position interpolation, NTK, YaRN, ReRoPE, Self-Extend, windows, ...) over a "
      "grid of their parameters on a sample of your text, refines around the best, then "
      "measures for the best cell of each family how far back it still copies text (far "
      "copy: a span early in the context repeated at the end, against a control with "
      "nothing to copy), and prints every cell ranked with 95% intervals (ties marked), how "
      "far back each sees, and the recommended --method spec. Use text the model was not "
      "trained on.\n"
      "Example: stretch tune -m stories260K.bin -t tok512.bin --data tinystories.txt --ctx 4096 "
      "(a model trained at 512 tokens, tuned for 8 times that)");
  AddModelOptions(cmd, a->model, /*tokenizer_needed=*/true);
  AddWeightStorageOption(cmd, a->model.weights);
  cmd->add_option("--data", a->data, "a held-out text sample: a file or a folder of *.txt")
      ->required();
  cmd->add_option("--ctx,-c,--ctx-size", a->ctx,
                  "the target length in tokens (e.g. 8 x the training length; -c and "
                  "--ctx-size are llama.cpp's spellings)")
      ->required()
      ->check(Whole(2, kMaxContext));
  cmd->add_option("--windows", a->windows, "windows of --ctx tokens scored per cell")
      ->capture_default_str()
      ->check(Whole(1, 1 << 20));
  cmd->add_option("--rounds", a->rounds, "rounds of refinement around the best cell")
      ->capture_default_str()
      ->check(Whole(0, 64));
  cmd->add_option("--objective", a->objective,
                  "what the ranking optimises: loss (predicting the text), retrieval (copying "
                  "from far back: far copy at the longest distance, copy minus its control) or "
                  "both (the default: the methods tied for the best retrieval, then by loss). "
                  "Loss alone favours sliding windows, which predict text well but never use "
                  "what lies beyond their window")
      ->capture_default_str()
      ->check(CLI::IsMember({"loss", "retrieval", "both"}));
  cmd->add_option("--retrieval-trials", a->retrieval_trials,
                  "far-copy trials per distance, for the best cell of each method family "
                  "(distances from L/4 to the whole --ctx); 0: no retrieval measured, rank by "
                  "loss")
      ->capture_default_str()
      ->check(Whole(0, 1 << 16));
  cmd->add_option("--span", a->span, "tokens in each far-copy span")
      ->capture_default_str()
      ->check(Whole(8, 1 << 16));
  cmd->callback([a] { RunTuneCommand(*a); });
}

}  // namespace stretch::cli
