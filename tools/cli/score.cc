// stretch score: next-token loss, perplexity and accuracy of a model on text, by position; with
// several methods or lengths, the table of methods x lengths.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/timer.h"
#include "src/eval/score.h"
#include "src/eval/sweep.h"
#include "src/io/llama2c.h"
#include "src/io/output_file.h"
#include "src/io/text.h"
#include "tools/cli/common.h"
#include "tools/cli/score_protocol.h"

namespace stretch::cli {
namespace {

struct ScoreArgs {
  ModelArgs model;
  MethodArgs method;
  std::string data;
  std::string tokens;
  std::vector<int64_t> contexts = {512};  // --ctx, a comma list
  ScoreOptions options;                   // stride, bucket, max_windows, tail, progress
  bool json = false;
  std::string json_out;
  std::string per_token;
  CLI::Option* bucket_option = nullptr;  // --bucket, to tell whether it was given
  ProtocolArgs protocols;                // --protocol and its flags
  CacheTypeArgs cache_type;
};

std::string InputName(const ScoreArgs& args) { return args.data.empty() ? args.tokens : args.data; }

// The single-run report: one method, one length, loss by position.
void PrintSingle(const ScoreArgs& args, const Loaded& loaded, const SweepCell& cell,
                 const std::string& protocol) {
  const ScoreSummary& s = cell.summary;
  fmt::print("model: {}\n", loaded.model.source);
  fmt::print("data: {}\n", InputName(args));
  fmt::print("method: {}\n", cell.resolved);
  fmt::print("protocol: {}\n", protocol);
  if (!args.tokens.empty()) {
    fmt::print("{} sequences, {} tokens scored in {:.1f} s", s.windows, s.scored, s.seconds);
  } else if (args.options.tail > 0) {
    fmt::print(
        "{} windows of {} positions, the last {} of each scored: {} tokens scored in "
        "{:.1f} s",
        s.windows, cell.ctx, args.options.tail, s.scored, s.seconds);
  } else {
    fmt::print("{} windows of {} positions, {} tokens scored in {:.1f} s", s.windows, cell.ctx,
               s.scored, s.seconds);
  }
  if (s.unscored_tail > 0) {
    fmt::print(" ({} tokens after the last whole window not scored)", s.unscored_tail);
  }
  fmt::print("\n\n{:>13} {:>9} {:>8} {:>17} {:>10} {:>8} {:>15}\n", "positions", "tokens", "loss",
             "loss 95%", "perplexity", "accuracy", "accuracy 95%");
  // The intervals: over the windows (a t-interval, the windows as samples); "-" with one window.
  auto row = [](const std::string& label, int64_t count, double loss, double accuracy,
                const MeanIntervals& ci) {
    fmt::print("{:>13} {:>9} {:>8.4f} {:>17} {:>10.3f} {:>8.4f} {:>15}\n", label, count, loss,
               ci.known ? fmt::format("{:.4f}-{:.4f}", ci.loss_lo, ci.loss_hi) : "-",
               std::exp(loss), accuracy,
               ci.known ? fmt::format("{:.4f}-{:.4f}", ci.accuracy_lo, ci.accuracy_hi) : "-");
  };
  for (const PositionBucket& b : s.buckets) {
    if (b.count == 0) continue;  // the fixed tail scores only the last positions
    row(fmt::format("{}-{}", b.begin, b.end - 1), b.count, b.MeanLoss(), b.Accuracy(), b.ci);
  }
  row("all", s.scored, s.MeanLoss(), s.Accuracy(), s.ci);
  fmt::print(
      "(95% intervals over the {} windows: their tokens are not independent, so the windows "
      "are the samples)\n",
      s.windows);
}

void PrintProduct(const ScoreArgs& args, const Loaded& loaded,
                  const std::vector<SweepMethod>& methods, const std::vector<SweepCell>& cells,
                  const std::string& protocol, double seconds) {
  fmt::print("model: {}\n", loaded.model.source);
  fmt::print("data: {}\n", InputName(args));
  fmt::print("protocol: {}\n", protocol);
  fmt::print(
      "{} methods x {} lengths scored in {:.1f} s; each cell: mean next-token loss (nats) "
      "/ accuracy{}, each +- the half width of its 95% interval over the windows (none with one "
      "window)\n\n",
      methods.size(), args.contexts.size(), seconds,
      args.options.tail > 0
          ? fmt::format(" on the same last {} tokens of every sample", args.options.tail)
          : std::string());
  fmt::print("{}", SweepTableText(methods, args.contexts, cells));
}

// Windows' stride: null for --tokens and the fixed tail (no stride); for text windows the stride
// given, or when none was given the window length (one length) or null (several: each column's
// own length).
nlohmann::json StrideJson(const ScoreArgs& args, int64_t single_ctx) {
  if (!args.tokens.empty() || args.options.tail > 0) return nullptr;
  if (args.options.stride != 0) return args.options.stride;
  if (single_ctx > 0) return single_ctx;
  return nullptr;
}

std::string CsvQuote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void RunScore(const ScoreArgs& args) {
  if (!args.protocols.specs.empty()) {
    // The protocols build their own sequences from the text: the stream flags do not apply.
    if (!args.tokens.empty()) Fail("--protocol builds its sequences from --data, not --tokens");
    if (args.options.tail > 0) Fail("--tail is a protocol of its own: give it without --protocol");
    if (args.options.stride != 0) Fail("--stride applies to text windows, not to --protocol");
    if (!args.per_token.empty()) Fail("--per-token is not written with --protocol");
    if (args.options.max_windows != 0) {
      Fail("--windows applies to text windows; with --protocol give --trials");
    }
    ProtocolRunArgs run;
    run.model = args.model;
    run.method = args.method;
    run.data = args.data;
    run.contexts = args.contexts;
    run.protocols = args.protocols;
    run.json = args.json;
    run.json_out = args.json_out;
    run.progress = args.options.progress;
    run.kv_types = ResolveCacheTypes(args.cache_type);
    RunScoreProtocols(run);
    return;
  }
  if (args.data.empty() == args.tokens.empty()) {
    Fail("give exactly one of --data (text) or --tokens (token ids); found {}",
         args.data.empty() ? "neither" : "both");
  }
  if (!args.tokens.empty() && args.options.stride != 0) {
    Fail("--stride applies to text (--data), not to --tokens sequences, which are fed whole");
  }
  if (!args.data.empty()) CheckRegularInputOrDirectory(args.data, kTextInputKind, "--data");
  if (!args.tokens.empty()) {
    CheckRegularInput(args.tokens, "a text file of token ids (one sequence per line)", "--tokens");
  }
  // Everything that can be checked before the (possibly long) run is checked first: the flags,
  // then every (method, length) pair against the model's header (before the weights are loaded
  // and the text is encoded) and, for a trained model, against its layer layout, then the
  // input's length.
  const ModelHeader header = ReadModelHeader(args.model.model);
  const std::vector<SweepMethod> methods = MethodsFromArgs(args.method, &header);
  std::vector<NamedPath> inputs = {{"--model", header.path},
                                   {"--tokenizer", args.model.tokenizer},
                                   {"--data", args.data},
                                   {"--tokens", args.tokens}};
  const std::vector<NamedPath> outputs = {
      {"--json-out", args.json_out, OutputForm::kFileOrStdout},
      {"--per-token", args.per_token, OutputForm::kFileOrStdout}};
  CheckOutputPaths(inputs, outputs);
  if (!args.data.empty() && args.model.tokenizer.empty() && !header.own_tokenizer) {
    Fail(
        "--data needs --tokenizer to turn the text into tokens (a llama2.c model, or a GGUF file "
        "without a vocabulary; stretch checkpoints and most GGUF files carry their own)");
  }
  std::vector<SweepCell> planned =
      PlanSweep(header.config, methods, args.contexts, args.options, !args.tokens.empty());
  NoteMethodCaveats(header.config, planned);
  const bool single = planned.size() == 1;
  if (!single && args.bucket_option->count() > 0 && !args.json && args.json_out.empty()) {
    Warn(fmt::format(
        "--bucket {}: the table of several methods or lengths shows no position buckets; they "
        "are in the JSON report (--json, --json-out)",
        args.options.bucket));
  }

  ModelArgs model_args = args.model;
  model_args.model = header.path;  // a run's directory resolved once
  Loaded loaded = LoadModel(model_args, /*tokenizer_needed=*/!args.data.empty());
  Transformer model(loaded.model);
  // Scoring runs without a KV cache (ForwardSequence): its keys and values are rounded as a cache
  // of these types would store them.
  model.set_kv_types(ResolveCacheTypes(args.cache_type));

  std::string protocol;
  nlohmann::json input;
  TextStream stream;
  std::vector<std::vector<int>> sequences;
  SweepInput sweep_input;
  if (!args.data.empty()) {
    Timer t;
    stream = loaded.tokenizer->EncodeText(args.data);
    fmt::print(stderr, "encoded {} bytes of text into {} tokens in {:.2f} s\n", stream.bytes,
               stream.tokens.size(), t.Seconds());
    protocol = loaded.tokenizer->ProtocolText() + " " +
               (args.options.tail > 0
                    ? FixedTailProtocolText() + fmt::format(" Here tail = {}.", args.options.tail)
                    : StreamProtocolText());
    input = {{"data", args.data},
             {"files", stream.files},
             {"bytes", stream.bytes},
             {"stream_tokens", stream.tokens.size()}};
    sweep_input.stream = stream.tokens;
  } else {
    sequences = ReadTokenFile(args.tokens, loaded.model.config.vocab_size);
    protocol = SequenceProtocolText();
    input = {{"tokens", args.tokens}, {"sequences", sequences.size()}};
    sweep_input.sequences = &sequences;
  }

  CheckSweepInput(sweep_input, args.contexts, args.options);
  for (const std::string& file : stream.files) inputs.push_back({"--data", file});
  CheckOutputPaths(inputs, outputs);  // the files a --data directory holds

  // Output files are written to temporary names once everything has been checked and renamed
  // into place when complete: an interrupted or failed run leaves what was there before.
  std::unique_ptr<AtomicFile> json_out;
  if (!args.json_out.empty()) json_out = std::make_unique<AtomicFile>(outputs[0]);
  std::unique_ptr<AtomicFile> csv;
  if (!args.per_token.empty()) {
    csv = std::make_unique<AtomicFile>(outputs[1]);
    csv->Write(single ? "" : "method,ctx,");
    csv->Write("window,position,target,loss,correct\n");
  }
  SweepTokenSink sink;
  if (csv) {
    sink = [&csv, &methods, single](const SweepCell& cell, const TokenRecord& r) {
      if (!single) csv->Write(fmt::format("{},{},", CsvQuote(methods[cell.method].spec), cell.ctx));
      csv->Write(fmt::format("{},{},{},{:.6f},{}\n", r.window, r.position, r.target, r.loss,
                             r.correct ? 1 : 0));
    };
  }

  Timer timer;
  SweepCellDone done;
  if (!single && args.options.progress) {
    done = [&methods, &timer](const SweepCell& cell, size_t k, size_t n) {
      const double elapsed = timer.Seconds();
      fmt::print(stderr,
                 "score [{}/{}] {} @ {}: loss {:.4f}, accuracy {:.4f}, {} windows in {:.1f} s{}\n",
                 k + 1, n, methods[cell.method].spec, cell.ctx, cell.summary.MeanLoss(),
                 cell.summary.Accuracy(), cell.summary.windows, cell.summary.seconds,
                 k + 1 < n ? fmt::format("; ~{:.0f} s left", elapsed / (k + 1) * (n - k - 1))
                           : std::string());
    };
  }
  // Every text window starts with the tokenizer's own BOS (llama2.c's 1; a stretch checkpoint's
  // bytes tokenizer's 256).
  ScoreOptions options = args.options;
  if (loaded.tokenizer) options.bos = loaded.tokenizer->bos();
  const std::vector<SweepCell> cells =
      ScoreSweep(model, methods, std::move(planned), sweep_input, options, sink, done);
  if (csv) csv->Commit();

  nlohmann::json method_list = nlohmann::json::array();
  for (const SweepMethod& m : methods) {
    method_list.push_back({{"spec", m.spec}, {"canonical", CanonicalSpecWithLayers(m)}});
  }
  nlohmann::json report = {
      {"build", BuildId()},
      {"model", loaded.model.source},
      {"tokenizer", loaded.tokenizer ? loaded.tokenizer->Name() : args.model.tokenizer},
      {"input", input},
      {"methods", method_list},
      {"contexts", args.contexts},
      {"stride", StrideJson(args, single ? cells[0].ctx : 0)},
      {"tail", args.options.tail > 0 ? nlohmann::json(args.options.tail) : nlohmann::json(nullptr)},
      {"bucket", args.options.bucket},
      {"max_windows", args.options.max_windows},
      {"protocol", protocol},
      {"cells", SweepCellsJson(methods, cells)}};
  if (single) {  // the single-run fields, as before
    report["ctx"] = cells[0].ctx;
    report["method"] = cells[0].resolved;
    report["result"] = SummaryJson(cells[0].summary);
  }
  // Paths and file names may hold bytes that are not UTF-8: replace them rather than fail.
  const std::string json_text =
      report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  // An output on standard output (-) is a stream for another program: the report is not
  // printed into it.
  const bool stdout_taken = (json_out && json_out->kind() == OutputKind::kStdout) ||
                            (csv && csv->kind() == OutputKind::kStdout);
  if (stdout_taken) {
    // nothing more on standard output
  } else if (args.json) {
    fmt::print("{}\n", json_text);
  } else if (single) {
    PrintSingle(args, loaded, cells[0], protocol);
  } else {
    PrintProduct(args, loaded, methods, cells, protocol, timer.Seconds());
  }
  if (json_out) {
    json_out->Write(json_text + "\n");
    json_out->Commit();
  }
  for (const AtomicFile* f : {json_out.get(), csv.get()}) {
    for (const std::string& p : f ? f->removed_partials() : std::vector<std::string>{}) {
      fmt::print(stderr, "note: removed {}, left by an earlier write to {} that was killed\n", p,
                 f->path());
    }
  }
}

}  // namespace

void RegisterScore(CLI::App& app) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* sub = app.add_subcommand(
      "score",
      "Measure how well a model predicts text: the mean next-token loss (negative log "
      "probability, in nats), perplexity (exp of the loss) and accuracy (how often the most "
      "likely token is the right one), overall and by position in the window, each with its 95% "
      "interval over the windows (their tokens are not independent: the windows are the "
      "samples; none with one window). Positions beyond "
      "the length the model was trained on show whether it extrapolates.\n"
      "Text (--data): " +
          TextProtocolText() + "\n" + StreamProtocolText() + "\nFixed tail (--tail K): " +
          FixedTailProtocolText() + "\nToken ids (--tokens): " + SequenceProtocolText() +
          "\nSeveral methods (--methods a,b,c) and/or lengths (--ctx 512,1024,2048) score every "
          "pair and print one table, rows methods, columns lengths; every pair is checked "
          "before the first is scored. A method given without a factor is resolved per length "
          "(s = ctx / trained length); the report shows the resolved spec of each cell.\n"
          "Example: stretch score -m stories260K.bin -t tok512.bin --data "
          "../shared/data/tinystories --ctx 512\n"
          "Example: stretch score -m stories260K.bin -t tok512.bin --data "
          "../shared/data/tinystories --methods direct,pi,yarn,self-extend:group=8,window=128 "
          "--ctx 512,1024,2048,4096 --tail 256 --windows 8\n"
          "A model you trained: --model OUT/step-NNNNNNNN.safetensors (or the run's directory "
          "OUT for its newest checkpoint) with no --tokenizer: the checkpoint carries its "
          "tokenizer and its attention layout, which run exactly as trained. " +
          std::string(kTrainedLayoutMethodRule) +
          "\nExample: stretch score -m runs/rope --data ../shared/data/gutenberg --methods "
          "direct,yarn,rerope:window=64 --ctx 128,512,2048\n" +
          ProtocolHelpText());
  AddModelOptions(sub, args->model, /*tokenizer_needed=*/false);
  AddWeightStorageOption(sub, args->model.weights);
  AddMethodOptions(sub, args->method, /*several=*/true);
  sub->add_option("--data", args->data, "Text file, or a directory of *.txt files, to score");
  sub->add_option("--tokens", args->tokens,
                  "File of whitespace-separated token ids, one sequence per line, scored exactly "
                  "as given (instead of --data)");
  sub->add_option("--ctx,-c,--ctx-size", args->contexts,
                  "Window length(s) N in tokens (positions 0..N-1); a comma list (512,1024,2048) "
                  "or the flag repeated gives one table column per length (-c and --ctx-size are "
                  "llama.cpp's spellings)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->capture_default_str()
      ->check(Whole(2, kMaxContext));  // a window predicts from position 1 on
  sub->add_option("--stride", args->options.stride,
                  "Start a window every S tokens (default N: no overlap). With S < N, later "
                  "windows score only their last S positions (sliding-window perplexity)")
      ->check(Whole(1, kMaxContext));
  sub->add_option("--tail", args->options.tail,
                  "Fixed-tail protocol: cut the text into samples of the longest --ctx and score "
                  "only the last K tokens of each at every length, so that every length scores "
                  "the same targets with more or less context before them (K <= the shortest "
                  "--ctx)")
      ->check(Whole(1, kMaxContext));
  args->bucket_option =
      sub->add_option("--bucket", args->options.bucket,
                      "Width of the position buckets in the report (one method at one length) "
                      "and in the JSON report")
          ->capture_default_str()
          ->check(Whole(1, kMaxContext));
  CLI::Option* windows =
      sub->add_option("--windows", args->options.max_windows,
                      "Score only the first K windows of each (method, length) cell (default: "
                      "all; formerly --max-windows)")
          ->check(Whole(1, std::numeric_limits<int64_t>::max()));
  AddOldName(sub, windows, "--max-windows");
  sub->add_flag("--json", args->json,
                "Print the report as JSON instead of a table: every cell's numbers, the resolved "
                "method spec per cell, and the protocol");
  sub->add_option("--json-out", args->json_out,
                  "Also write the JSON report to this file (- for standard output, where the "
                  "table is then not printed)");
  sub->add_option("--per-token", args->per_token,
                  "Write one CSV row per scored token (window, position, target, loss, correct; "
                  "with several cells, method and ctx first) to compare with another engine "
                  "token by token (- for standard output, where the table is then not printed)");
  AddProtocolOptions(sub, args->protocols);
  AddCacheTypeOptions(sub, args->cache_type);
  sub->add_flag("--no-progress{false}", args->options.progress,
                "No progress lines on stderr (one per (method, length) cell: windows done and "
                "time left)");
  sub->callback([args] { RunScore(*args); });
}

}  // namespace stretch::cli
