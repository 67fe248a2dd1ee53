// stretch lab: train small models at a short length, test them far beyond it with every
// training-free method, and write the records (src/lab/lab.h) and the report.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/stop.h"
#include "src/core/threads.h"
#include "src/core/timer.h"
#include "src/io/output_file.h"
#include "src/lab/gate.h"
#include "src/lab/lab.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct LabArgs {
  bool quick = false, full = false;
  std::string corpus, out = "lab";
  int cutoff_year = 2000;
  int64_t train_len = 0, steps = 0, batch = 0, windows = 0, passkey_trials = -1;
  int dim = 0, layers = 0, heads = 0, threads = 0;
  double lr = 0, passkey_share = -1;
  std::string tokenizer, methods, factors, models;
  int vocab_size = 0;
  bool no_tail = false, no_bos_rows = false;
  std::vector<std::string> stages;  // --stage, repeated
  bool no_stages = false;
  int64_t copy_trials = -1, text_copy_trials = -1;
  int64_t seed = 1;
  bool no_llama_passkey = false;
  bool score_not_informative = false;
  bool plan = false;
};

// The rank and size of an MPI job, from the environment mpirun (Open MPI) gives every process;
// (0, 1) when not started by mpirun.
std::pair<int, int> MpiRank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank == nullptr || size == nullptr) return {0, 1};
  return {std::atoi(rank), std::max(1, std::atoi(size))};
}

std::vector<int64_t> ParseFactors(const std::string& list) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    const std::string piece = list.substr(begin, comma - begin);
    char* end = nullptr;
    const long long v = std::strtoll(piece.c_str(), &end, 10);
    if (piece.empty() || end == nullptr || *end != '\0') {
      Fail("--factors {}: \"{}\" is not a whole number (expected e.g. 8,16)", list, piece);
    }
    out.push_back(v);
    begin = comma + 1;
  }
  return out;
}

// The preset's models named in `list` (comma-separated labels), in the list's order.
std::vector<LabModel> SelectModels(const std::vector<LabModel>& preset, const std::string& list,
                                   const char* preset_name) {
  std::vector<std::string> labels;
  for (const LabModel& m : preset) labels.push_back(m.label);
  std::vector<LabModel> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    const std::string label = list.substr(begin, comma - begin);
    begin = comma + 1;
    const auto it = std::find(labels.begin(), labels.end(), label);
    if (it == labels.end()) {
      Fail("--models {}: no model \"{}\" in the {} lab (its models: {})", list, label, preset_name,
           fmt::join(labels, ","));
    }
    for (const LabModel& m : out) {
      if (m.label == label) Fail("--models {}: \"{}\" is named twice", list, label);
    }
    out.push_back(preset[static_cast<size_t>(it - labels.begin())]);
  }
  return out;
}

LabOptions OptionsOf(const LabArgs& a) {
  LabOptions o = a.full ? FullLab() : QuickLab();
  o.corpus.path = a.corpus;
  o.corpus.cutoff_year = a.cutoff_year;
  o.out = a.out;
  if (a.train_len > 0) o.train_len = a.train_len;
  if (a.steps > 0) o.steps = a.steps;
  if (a.batch > 0) o.batch = a.batch;
  if (a.windows > 0) o.windows = a.windows;
  if (a.passkey_trials >= 0) o.passkey_trials = a.passkey_trials;
  if (a.dim > 0) o.dim = a.dim;
  if (a.layers > 0) o.layers = a.layers;
  if (a.heads > 0) o.heads = a.heads;
  if (a.lr > 0) o.lr = a.lr;
  if (a.passkey_share >= 0) o.passkey_share = a.passkey_share;
  if (!a.tokenizer.empty()) o.tokenizer = a.tokenizer;
  if (a.vocab_size > 0) o.vocab_size = a.vocab_size;
  if (!a.methods.empty()) o.methods = SplitMethodList(a.methods);
  if (!a.models.empty()) o.models = SelectModels(o.models, a.models, a.full ? "--full" : "--quick");
  if (!a.factors.empty()) o.factors = ParseFactors(a.factors);
  if (a.no_tail) o.tail = false;
  if (a.no_bos_rows) o.bos_rows = false;
  if (a.copy_trials >= 0) o.copy_trials = a.copy_trials;
  if (a.text_copy_trials >= 0) o.text_copy_trials = a.text_copy_trials;
  o.seed = static_cast<uint64_t>(a.seed);
  if (a.no_llama_passkey) o.passkey_llama = false;
  o.score_not_informative = a.score_not_informative;
  o.plan_only = a.plan;
  // Training: the stages given, or the preset's, or (--no-stages) one run of --steps at --lr.
  if (a.no_stages && !a.stages.empty()) {
    Fail(
        "--no-stages and --stage: give one of them (--stage replaces the preset's stages, "
        "--no-stages trains one run of --steps steps at --lr)");
  }
  // A model's own MIX for a preset stage (LabModel::stage_mix; no preset gives one now) belongs
  // to the preset's stages: stages given here, or none, are every model's recipe as given.
  if (a.no_stages || !a.stages.empty()) {
    for (LabModel& m : o.models) m.stage_mix.clear();
  }
  if (a.no_stages) o.stages.clear();
  if (!a.stages.empty()) {
    o.stages.clear();
    for (const std::string& text : a.stages) o.stages.push_back(ParseLabStage(text, "--stage"));
  }
  if (!o.stages.empty()) {
    std::vector<std::string> given;
    if (a.steps > 0) given.push_back(fmt::format("--steps {}", a.steps));
    if (a.lr > 0) given.push_back(fmt::format("--lr {}", a.lr));
    if (a.passkey_share >= 0) given.push_back(fmt::format("--passkey-share {}", a.passkey_share));
    if (!given.empty()) {
      std::vector<std::string> texts;
      for (const LabStage& st : o.stages) texts.push_back(LabStageText(st));
      Fail(
          "{}: the lab trains in stages ({}), each with its own steps, learning rate and mix; "
          "expected --no-stages with {} (one run, as labs before stages), or the stages "
          "given with --stage NAME:STEPS:LR:MIX",
          fmt::join(given, ", "), fmt::join(texts, " then "), given.size() == 1 ? "it" : "them");
    }
  }
  std::tie(o.rank, o.ranks) = MpiRank();
  o.build = BuildId();
  return o;
}

void RunLabCommand(const LabArgs& a) {
  if (a.quick && a.full) Fail("--quick and --full: give one of them");
  LabOptions o = OptionsOf(a);
  // Warnings first: they hold whatever else is wrong with the command line.
  if (a.vocab_size > 0 && o.tokenizer == "bytes") {
    Warn(fmt::format(
        "--vocab-size {} has no effect with the bytes tokenizer (its vocabulary is fixed); it "
        "sizes --tokenizer bpe or unigram",
        a.vocab_size));
  }
  if (!a.corpus.empty()) CheckRegularInputOrDirectory(a.corpus, kTextInputKind, "--data");
  // The lab's folder: "-" or an existing file of another kind is refused before anything starts.
  ResolveOutput({"--out", o.out, OutputForm::kDirectory});
  const std::string who = o.ranks > 1 ? fmt::format("lab[{}/{}]", o.rank, o.ranks) : "lab";
  if (a.threads > 0) {
    SetNumThreads(a.threads);
  } else if (o.ranks > 1) {
    // Each rank takes its share of the cores.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_node = local ? std::max(1, std::atoi(local)) : o.ranks;
    SetNumThreads(std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) / per_node));
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) {
    fmt::print(stderr, "{}{}: {}\n", tty ? "\r\033[K" : "", who, WithFlagNames(line));
  };
  // On a terminal the progress line is redrawn in place; in a log, one line every 20 s.
  Timer since_print;
  bool printed = false;
  cb.progress = [&](const std::string& line) {
    if (tty) {
      fmt::print(stderr, "\r\033[K{}", line.substr(0, 150));
    } else if (!printed || since_print.Seconds() >= 20) {
      fmt::print(stderr, "{}\n", line);
      since_print.Reset();
      printed = true;
    }
  };
  namespace fs = std::filesystem;
  const fs::path marker = fs::path(o.out) / fmt::format(".rank-{}-of-{}.done", o.rank, o.ranks);
  std::error_code ec;
  fs::remove(marker, ec);
  const LabResult r = RunLab(o, cb);
  if (tty) fmt::print(stderr, "\r\033[K");
  if (o.plan_only) {
    fmt::print(
        "{}: plan only (--plan): nothing trained or scored; the same command without --plan "
        "runs it\n",
        who);
    return;
  }
  fmt::print(
      "{}: {} cells scored, {} found done, {} not applicable, {} left unscored by the copy gate, "
      "in {:.0f} s; records: {}\n",
      who, r.cells_done, r.cells_skipped, r.cells_refused, r.cells_held_back, r.seconds,
      r.records_path);
  if (o.ranks > 1) {
    // Rank 0 writes the report once every rank has finished (each leaves a marker file).
    std::ofstream(marker.string()).put('\n');
    if (o.rank != 0) return;
    for (int waited = 0;; ++waited) {
      int done = 0;
      for (int k = 0; k < o.ranks; ++k) {
        done += fs::exists(fs::path(o.out) / fmt::format(".rank-{}-of-{}.done", k, o.ranks), ec);
      }
      if (done == o.ranks) break;
      if (waited % 30 == 0) cb.note(fmt::format("waiting for {} more rank(s)", o.ranks - done));
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  const WrittenReport w =
      WriteLabReport(LabResultFiles(o.out), (fs::path(o.out) / "report").string());
  fmt::print("\n{}\n", w.report.accuracy_markdown);
  fmt::print("report: {} (tables.md, CSVs and {} plots beside it)\n", w.paths.back(),
             w.report.plots);
  int heat_maps = 0;
  for (const std::string& p : w.paths) {
    const std::string name = fs::path(p).filename().string();
    if (name.size() < 4 || name.substr(name.size() - 4) != ".svg") continue;
    if (name.rfind("passkey_", 0) == 0) {
      ++heat_maps;
    } else {
      fmt::print("  plot: {}\n", p);
    }
  }
  if (heat_maps > 0) {
    fmt::print("  and {} passkey heat maps (passkey_<model>_<method>.svg)\n", heat_maps);
  }
}

}  // namespace

void RegisterLab(CLI::App& app) {
  auto a = std::make_shared<LabArgs>();
  CLI::App* cmd = app.add_subcommand(
      "lab",
      "Train short, test long: trains small models at a short length (default 128 tokens) with "
      "pre-training variants, then tests each far beyond it (8x and 16x) with every "
      "training-free method, and records loss and accuracy by protocol.\n"
      "Training: in stages (--stage; the presets' teach copying with synthetic copy rows first, "
      "then mix text, copies and passkeys), or one run (--no-stages); every training row "
      "begins with BOS, as every scored window does (--no-bos-rows: as labs before "
      "2026-12-04).\n"
      "Protocols: non-repeat (real text, longer than trained), repeat (a training-length sample "
      "repeated: within reach of a window of L; and periods of 2L and 4L, beyond it, against "
      "fresh text), far copy (a span of text or of random letters and its copy at the end, at "
      "distances from L to the whole length, against a control with nothing to copy), fixed "
      "tail (the same last tokens scored with more and more context before them), passkey (a "
      "number hidden in the text, asked for at the end; stretch's layout and llama.cpp's; against "
      "a control with no number in the text). Every "
      "accuracy and loss carries a 95% interval.\n"
      "Copy gate: before its cells beyond L, each model is measured at L on far copy (text and "
      "random) and passkey (at least " +
          std::to_string(kGateMinPasskeyTrials) +
          " trials a depth); a part that fails (copy - control < 20 points, or its interval "
          "not above 0; passkey < 80%) marks the retrieval cells that need it \"not "
          "informative\", with the reason, in the records and the report; its far-copy and "
          "passkey cells beyond L are then left unscored (shown \"-\"; --score-not-informative "
          "scores them).\n"
          "Records go to OUT/results.jsonl, one line per cell; run the same command again to "
          "resume after an interruption. `mpirun -np N stretch lab ...` shares the models among "
          "N processes.");
  cmd->add_flag(
      "--quick", a->quick,
      "the quick lab (default): a RoPE model and a KeyNorm model, both with log-n "
      "(dim 128, 2 layers), trained in the copy curriculum's stages, tested with direct, "
      "pi, ntk, ntk+logn, yarn, rerope, rerope+logn, leaky-rerope, self-extend, "
      "self-extend:reach=1 (the smallest group, its farthest keys at L - 1, beside the "
      "default's 2L/3), window and lambda at 8x and 16x. How long it takes depends on the machine "
      "and on what else "
      "runs on it: the lab times a few training steps and scoring passes here before it "
      "starts and prints its estimate (\"estimated time: about ...\")");
  cmd->add_flag(
      "--full", a->full,
      "the seeds' experiments: their attention variants (RoPE, QueryNorm, KeyNorm, cosine, "
      "each with and without log-n) on the LLaMA block, their own block (a single-head GAU, "
      "which does not learn to copy at this size: its retrieval cells are marked not "
      "informative), window, HWFA, ALiBi, KERPLE, XPOS, NoPE, Sandwich, and the layouts of "
      "Gemma 3 and Llama 4; tested with the quick lab's methods but lambda, and with "
      "self-extend+logn (half of the variants are trained without log-n); hours");
  CLI::Option* data =
      cmd->add_option("--data", a->corpus,
                      "text to train and test on: a folder of *.txt documents or one text file "
                      "(default: the State of the Union addresses in data/sotu, installed by "
                      "scripts/setup.sh; formerly --corpus)");
  AddOldName(cmd, data, "--corpus");
  cmd->add_option("--cutoff-year", a->cutoff_year,
                  "for files named YYYY_*.txt: those of this year and later are the test text")
      ->capture_default_str();
  cmd->add_option("--out,-o", a->out, "the lab's folder: models, results.jsonl, report")
      ->capture_default_str();
  using L = TrainRunLimits;
  cmd->add_option("--train-len", a->train_len, "training length L in tokens (default 128)")
      ->check(Whole(1, L::max_seq_len));
  cmd->add_option("--steps", a->steps,
                  "training steps per model with --no-stages (default 600, full 3000)")
      ->check(Whole(1, L::max_steps));
  cmd->add_option("--batch", a->batch, "training windows per step (default 16)")
      ->check(Whole(1, L::max_batch));
  cmd->add_option("--dim", a->dim, "model width (default 128)")->check(Whole(1, L::max_dim));
  cmd->add_option("--layers", a->layers, "blocks (default 2)")->check(Whole(1, L::max_layers));
  cmd->add_option("--heads", a->heads, "attention heads of the LLaMA block (default 4)")
      ->check(Whole(1, L::max_dim));
  cmd->add_option("--lr", a->lr, "peak learning rate with --no-stages (default 2e-3)")
      ->check(Real(0, L::max_lr, /*open_low=*/true));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "bytes (default) or a SentencePiece bpe / unigram tokenizer trained on the "
                  "corpus");
  cmd->add_option("--vocab-size", a->vocab_size,
                  "vocabulary of a bpe / unigram tokenizer (a warning with bytes, whose "
                  "vocabulary is fixed)")
      ->check(Whole(260, L::max_vocab));
  cmd->add_option("--methods", a->methods,
                  "training-free methods to test, a comma list of --method specs (see `stretch "
                  "score --help`); `nbce[:...]` runs on the fixed tail and the passkey, where the "
                  "question is its query, and is skipped by name on the other protocols");
  cmd->add_option(
      "--models", a->models,
      "only these models of the preset, a comma list of their names (--quick: rope-logn, "
      "RoPE with log-n scaling in training, and keynorm-logn, KeyNorm with log-n, whose first "
      "stage trains with plain keys, KeyNorm from the second on (Su's form: q.k / |k|, the key's "
      "length in place of sqrt(head dim)); --full: rope, "
      "rope-logn, querynorm, ..., gau, window, ..., gemma3, llama4; a wrong name "
      "lists them all)");
  cmd->add_option("--factors", a->factors,
                  "test lengths as multiples of the training length (default 8,16)");
  cmd->add_option("--windows", a->windows,
                  "sequences per repeat / non-repeat cell (quick 8, full 32)")
      ->check(Whole(1, 1 << 20));
  cmd->add_option("--passkey-trials", a->passkey_trials, "passkey trials per length and depth")
      ->check(Whole(0, 1 << 20));
  cmd->add_option("--passkey-share", a->passkey_share,
                  "with --no-stages: share of training windows that are passkey documents, so that "
                  "small models learn the task (default 0.05; stages give theirs in MIX)")
      ->check(Real(0, L::max_passkey_share));
  cmd->add_flag("--no-tail", a->no_tail, "skip the fixed-tail protocol");
  cmd->add_flag("--no-bos-rows", a->no_bos_rows,
                "train as labs before 2026-12-04 did, the text rows beginning anywhere in their "
                "document while the passkey and copy rows begin with BOS (to resume such a lab); "
                "by default every row begins with BOS, as every window scored does "
                "(`stretch train --bos-rows`)");
  std::vector<std::string> preset;
  for (const LabStage& st : QuickLab().stages) preset.push_back(LabStageText(st));
  cmd->add_option(
         "--stage", a->stages,
         fmt::format(
             "a training stage, NAME:STEPS:LR:MIX, repeated in order (replaces the "
             "preset's stages, which are {}, for every model). Each "
             "stage trains STEPS steps at peak "
             "learning rate LR on rows drawn by MIX (as `stretch train --mix`: periodic, "
             "gapped, textcopy, randcopy, textperiodic, textdecoy and textfar copy rows, passkey "
             "documents, "
             "text for the rest; alphabet-min=N, strings=CHARS, span=A..B, phrasings=varied, "
             "filler=mixed and decoys=N in the list are `stretch train --copy-alphabet-min`, "
             "`--copy-strings`, `--copy-span-min`/`--copy-span-max`, `--passkey-phrasings`, "
             "`--passkey-filler` and `--passkey-decoys`), starting from the "
             "previous "
             "stage's last checkpoint, in OUT/models/<model>/<i>-<NAME>. Small models "
             "trained on text alone never learn to copy, and then every retrieval cell "
             "reads zero: the stages teach copying first (docs/training.md)",
             fmt::join(preset, " then ")))
      ->allow_extra_args(false);
  cmd->add_flag("--no-stages", a->no_stages,
                "train each model in one run of --steps steps at --lr with --passkey-share "
                "passkey documents (the lab before stages; its folders resume as they were)");
  cmd->add_option("--copy-trials", a->copy_trials,
                  "far-copy trials per distance and material (quick 16, full 32), and of the copy "
                  "gate at L; 0: no far-copy cells")
      ->check(Whole(0, 1 << 20));
  cmd->add_option("--text-copy-trials", a->text_copy_trials,
                  "far-copy trials per distance on text beyond L (quick 48: prose is copied 20-35 "
                  "points above its control, and 16 trials leave +-7 points; full: as "
                  "--copy-trials); 0: as --copy-trials")
      ->check(Whole(0, 1 << 20));
  cmd->add_option("--seed", a->seed,
                  "seeds every model's training (its initial weights and rows) and the scoring's "
                  "draws (spans, passkeys, bootstrap); default 1. The intervals of the tables "
                  "cover the draws of one trained model, not the training: the same lab trained "
                  "with another seed can move a far-copy margin by 10-30 points (docs/training.md, "
                  "seventeenth round), so run a few seeds into separate --out folders before "
                  "reading a difference between methods as a property of the method: `stretch "
                  "report A/results.jsonl B/results.jsonl --out R` shows each seed's models as "
                  "rows of their own (\"rope [seed 2]\")")
      ->check(Whole(1, int64_t{1} << 40));
  cmd->add_flag("--no-llama-passkey", a->no_llama_passkey,
                "no passkey cells in llama.cpp's llama-passkey layout (only stretch's own)");
  cmd->add_flag("--score-not-informative", a->score_not_informative,
                "also score the far-copy and passkey cells beyond L of a model that failed the "
                "copy gate part they need (by default they are left unscored: whatever they read, "
                "they cannot tell keeping from forgetting, and they are most of such a model's "
                "scoring time)");
  cmd->add_flag("--plan", a->plan,
                "print the plan and how long it will take (timed now, on this machine: one "
                "training step and a few scoring passes), then stop without training or scoring; "
                "OUT keeps the corpus split, and the same command without --plan starts the lab");
  cmd->add_option("--threads", a->threads, "threads (default: all cores, or a share per rank)")
      ->check(Whole(0, L::max_threads));
  cmd->callback([a] {
    InstallStopHandlers();  // Ctrl-C records the cell at hand first (src/core/stop.h)
    RunLabCommand(*a);
  });
}

}  // namespace stretch::cli
