// stretch score: next-token loss, perplexity and accuracy of a model on text, by position.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "src/core/error.h"
#include "src/core/timer.h"
#include "src/eval/score.h"
#include "src/io/text.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct ScoreArgs {
  ModelArgs model;
  std::string data;
  std::string tokens;
  ScoreOptions options;
  bool json = false;
  std::string json_out;
  std::string per_token;
};

nlohmann::json SummaryJson(const ScoreSummary& s) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const PositionBucket& b : s.buckets) {
    buckets.push_back({{"begin", b.begin},
                       {"end", b.end},
                       {"tokens", b.count},
                       {"loss", b.MeanLoss()},
                       {"perplexity", std::exp(b.MeanLoss())},
                       {"accuracy", b.Accuracy()}});
  }
  return {{"windows", s.windows},    {"tokens_scored", s.scored},
          {"loss", s.MeanLoss()},    {"perplexity", s.Perplexity()},
          {"accuracy", s.Accuracy()}, {"unscored_tail_tokens", s.unscored_tail},
          {"seconds", s.seconds},    {"by_position", buckets}};
}

void PrintTable(const ScoreArgs& args, const Loaded& loaded, const ScoreSummary& s,
                const std::string& protocol) {
  fmt::print("model: {}\n", loaded.model.source);
  fmt::print("data: {}\n", args.data.empty() ? args.tokens : args.data);
  fmt::print("protocol: {}\n", protocol);
  if (args.tokens.empty()) {
    fmt::print("{} windows of {} positions, {} tokens scored in {:.1f} s", s.windows,
               args.options.ctx, s.scored, s.seconds);
  } else {
    fmt::print("{} sequences, {} tokens scored in {:.1f} s", s.windows, s.scored, s.seconds);
  }
  if (s.unscored_tail > 0) fmt::print(" ({} tokens after the last whole window not scored)", s.unscored_tail);
  fmt::print("\n\n{:>13} {:>9} {:>8} {:>10} {:>8}\n", "positions", "tokens", "loss", "perplexity",
             "accuracy");
  for (const PositionBucket& b : s.buckets) {
    fmt::print("{:>13} {:>9} {:>8.4f} {:>10.3f} {:>8.4f}\n",
               fmt::format("{}-{}", b.begin, b.end - 1), b.count, b.MeanLoss(),
               std::exp(b.MeanLoss()), b.Accuracy());
  }
  fmt::print("{:>13} {:>9} {:>8.4f} {:>10.3f} {:>8.4f}\n", "all", s.scored, s.MeanLoss(),
             s.Perplexity(), s.Accuracy());
}

void RunScore(const ScoreArgs& args) {
  if (args.data.empty() == args.tokens.empty()) {
    Fail("give exactly one of --data (text) or --tokens (token ids); found {}",
         args.data.empty() ? "neither" : "both");
  }
  if (!args.data.empty() && args.model.tokenizer.empty()) {
    Fail("--data needs --tokenizer to turn the text into tokens");
  }
  // Everything that can be checked before the (possibly long) run is checked here.
  ValidateScoreOptions(args.options);
  if (!args.tokens.empty() && args.options.stride != 0) {
    Fail("--stride applies to text (--data), not to --tokens sequences, which are fed whole");
  }
  std::unique_ptr<std::ofstream> json_out;
  if (!args.json_out.empty()) {
    json_out = std::make_unique<std::ofstream>(args.json_out);
    if (!*json_out) Fail("--json-out {}: cannot open for writing", args.json_out);
  }
  Loaded loaded = LoadModel(args.model);
  Transformer model(loaded.model);

  std::unique_ptr<std::ofstream> csv;
  if (!args.per_token.empty()) {
    csv = std::make_unique<std::ofstream>(args.per_token);
    if (!*csv) Fail("--per-token {}: cannot open for writing", args.per_token);
    *csv << "window,position,target,loss,correct\n";
  }
  TokenSink sink;
  if (csv) {
    sink = [&csv](const TokenRecord& r) {
      *csv << fmt::format("{},{},{},{:.6f},{}\n", r.window, r.position, r.target, r.loss,
                          r.correct ? 1 : 0);
    };
  }

  ScoreSummary summary;
  std::string protocol;
  nlohmann::json input;
  if (!args.data.empty()) {
    Timer t;
    const TextStream stream = EncodeTextPath(args.data, *loaded.tokenizer);
    fmt::print(stderr, "encoded {} bytes of text into {} tokens in {:.2f} s\n", stream.bytes,
               stream.tokens.size(), t.Seconds());
    protocol = TextProtocolText() + " " + StreamProtocolText();
    input = {{"data", args.data}, {"files", stream.files}, {"bytes", stream.bytes},
             {"stream_tokens", stream.tokens.size()}};
    summary = ScoreStream(model, stream.tokens, args.options, sink);
  } else {
    const auto sequences = ReadTokenFile(args.tokens, loaded.model.config.vocab_size);
    protocol = SequenceProtocolText();
    input = {{"tokens", args.tokens}, {"sequences", sequences.size()}};
    summary = ScoreSequences(model, sequences, args.options, sink);
  }
  if (csv) {
    csv->flush();
    if (!*csv) Fail("--per-token {}: write failed", args.per_token);
  }

  nlohmann::json report = {
      {"model", loaded.model.source},
      {"tokenizer", args.model.tokenizer},
      {"input", input},
      {"ctx", args.options.ctx},
      {"stride", args.tokens.empty()
                     ? nlohmann::json(args.options.stride == 0 ? args.options.ctx : args.options.stride)
                     : nlohmann::json(nullptr)},
      {"bucket", args.options.bucket},
      {"method", "direct (RoPE at true positions)"},
      {"protocol", protocol},
      {"result", SummaryJson(summary)}};
  // Paths and file names may hold bytes that are not UTF-8: replace them rather than fail.
  const std::string json_text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  if (args.json) {
    fmt::print("{}\n", json_text);
  } else {
    PrintTable(args, loaded, summary, protocol);
  }
  if (json_out) {
    *json_out << json_text << "\n";
    json_out->flush();
    if (!*json_out) Fail("--json-out {}: write failed", args.json_out);
  }
}

}  // namespace

void RegisterScore(CLI::App& app) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* sub = app.add_subcommand(
      "score",
      "Measure how well a model predicts text: the mean next-token loss (negative log "
      "probability, in nats), perplexity (exp of the loss) and accuracy (how often the most "
      "likely token is the right one), overall and by position in the window. Positions beyond "
      "the length the model was trained on show whether it extrapolates.\n"
      "Text (--data): " + TextProtocolText() + "\n" + StreamProtocolText() +
          "\nToken ids (--tokens): " + SequenceProtocolText() +
          "\nExample: stretch score -m stories260K.bin -t tok512.bin --data "
          "../shared/data/tinystories --ctx 512");
  AddModelOptions(sub, args->model, /*tokenizer_required=*/false);
  sub->add_option("--data", args->data, "Text file, or a directory of *.txt files, to score");
  sub->add_option("--tokens", args->tokens,
                  "File of whitespace-separated token ids, one sequence per line, scored exactly "
                  "as given (instead of --data)");
  sub->add_option("--ctx", args->options.ctx, "Window length N in tokens (positions 0..N-1)")
      ->capture_default_str();
  sub->add_option("--stride", args->options.stride,
                  "Start a window every S tokens (default N: no overlap). With S < N, later "
                  "windows score only their last S positions (sliding-window perplexity)");
  sub->add_option("--bucket", args->options.bucket, "Width of the position buckets in the report")
      ->capture_default_str();
  sub->add_option("--max-windows", args->options.max_windows,
                  "Score only the first K windows (default: all)");
  sub->add_flag("--json", args->json, "Print the report as JSON instead of a table");
  sub->add_option("--json-out", args->json_out, "Also write the JSON report to this file");
  sub->add_option("--per-token", args->per_token,
                  "Write one CSV row per scored token (window, position, target, loss, correct) "
                  "to compare with another engine token by token");
  sub->add_flag("--no-progress{false}", args->options.progress, "No progress line on stderr");
  sub->callback([args] { RunScore(*args); });
}

}  // namespace stretch::cli
