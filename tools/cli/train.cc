// stretch train: train a small language model on the user's text with a chosen position scheme
// and attention layout; checkpoints in --out, resumable bit for bit.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/stop.h"
#include "src/core/threads.h"
#include "src/io/output_file.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "src/train/copy_data.h"
#include "src/train/train_run.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

using nlohmann::json;

// The flags. Those bound to `run` map onto TrainRunOptions as they are; the others are options
// whose absence means "the default, or the --init checkpoint's" (TrainRunOptionsOf).
struct TrainArgs {
  TrainRunOptions run;
  std::string config;
  std::string tokenizer = std::string(TokenizerKindName(TrainRunDefaults::tokenizer));
  int vocab_size = TrainRunDefaults::vocab_size;
  std::string block = TrainRunDefaults::block;
  std::string position = TrainRunDefaults::position;
  std::string attention = TrainRunDefaults::attention;
  int64_t seq_len = TrainRunDefaults::seq_len, warmup = 0;
  int dim = TrainRunDefaults::dim, layers = TrainRunDefaults::layers, heads = 0, kv_heads = 0,
      hidden_dim = 0;
  double min_lr = 0;
  std::string mix;  // --mix, parsed by TrainRunOptionsOf
  bool resume = false;
  int threads = 0;
};

// StoredRunOptions writes an unset option as its default's marker: 0 for heads, kv_heads and
// hidden_dim, a negative number for min_lr and warmup. Read back, such a value leaves the option
// unset (a flag given as 0 or negative is refused by its range).
bool IsUnsetMarker(const std::string& key, const json& value) {
  if (!value.is_number()) return false;
  const double v = value.get<double>();
  if (key == "heads" || key == "kv_heads" || key == "hidden_dim") return v == 0;
  if (key == "min_lr" || key == "warmup") return v < 0;
  return false;
}

// The flag that sets a stored key (the run's stretch.cli metadata, a --config file): the long
// flag's name with '_' for '-', except where the flag was renamed since. Stored keys are a file
// format and keep their names: seq_len is --train-len (issue 40: one name for one idea).
std::string FlagOf(std::string key) {
  if (key == "seq_len") return "--train-len";
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

// JSON values for options not given on the command line (--config FILE, and --resume's stored
// arguments). Keys are the long flag names with '_' for '-'. A value out of its flag's range is
// refused naming the file and the field it came from: the user typed no such flag.
void ApplyJson(CLI::App* app, const json& j, const std::string& what, bool override_given) {
  if (!j.is_object()) Fail("{}: expected a JSON object", what);
  for (const auto& [key, value] : j.items()) {
    CLI::Option* opt = app->get_option_no_throw(FlagOf(key));
    if (opt == nullptr)
      Fail("{}: unknown field \"{}\" (fields are the long flags of stretch train)", what, key);
    if (opt->count() > 0 && !override_given) continue;  // the command line wins
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    if (value.is_boolean()) text = value.get<bool>() ? "true" : "false";
    if (value.is_string() && text.empty()) continue;
    if (IsUnsetMarker(key, value)) continue;
    opt->clear();
    opt->add_result(text);
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      const std::string message = e.what();  // "--steps: found -5, expected a whole number ..."
      if (!override_given) Fail("--config {}: field \"{}\": {}", what, key, message);
      const size_t expected = message.find("expected ");
      Fail(
          "{}: stored option \"{}\" is {}: {} (stored by the run that wrote the checkpoint, not "
          "given on this command line: a damaged or edited checkpoint?)",
          what, key, text, expected == std::string::npos ? message : message.substr(expected));
    }
  }
}

// The options of the flags (and of --config and --resume's stored arguments, which count as
// given): a flag given sets its option.
TrainRunOptions TrainRunOptionsOf(CLI::App* app, const TrainArgs& a) {
  TrainRunOptions o = a.run;
  o.build = BuildId();
  const auto given = [&](const char* flag) { return app->count(flag) > 0; };
  if (given("--tokenizer")) o.tokenizer = ParseTokenizerKind(a.tokenizer);
  if (given("--vocab-size")) o.vocab_size = a.vocab_size;
  if (given("--block")) o.block = a.block;
  if (given("--position")) o.position = a.position;
  if (given("--attention")) o.attention = a.attention;
  if (given("--train-len")) o.seq_len = a.seq_len;
  if (given("--dim")) o.dim = a.dim;
  if (given("--layers")) o.layers = a.layers;
  if (given("--heads")) o.heads = a.heads;
  if (given("--kv-heads")) o.kv_heads = a.kv_heads;
  if (given("--hidden-dim")) o.hidden_dim = a.hidden_dim;
  if (given("--min-lr")) o.min_lr = a.min_lr;
  if (given("--warmup")) o.warmup = a.warmup;
  if (given("--mix")) {
    // --mix names the whole mix, its passkey share included (0 when it names none), unless
    // --passkey-share gives that share on its own.
    const CopyMix mix = ParseCopyMix(a.mix, "--mix");
    o.copy_mix = mix;
    o.copy_mix.passkey = 0.0;
    if (!given("--passkey-share")) {
      o.passkey_share = mix.passkey;
    } else if (mix.passkey > 0.0 && mix.passkey != a.run.passkey_share) {
      Fail("--mix {}: passkey={} disagrees with --passkey-share {}; give the share once", a.mix,
           mix.passkey, a.run.passkey_share);
    }
  }
  return o;
}

void PrintNote(const std::string& line) { fmt::print(stderr, "train: {}\n", WithFlagNames(line)); }

// The stored options that a resumed run may change: how far it goes, how often it saves,
// validates and reports, and how many non-finite batches it may pass over. Everything else is the
// run's, and a different value given with --resume is refused with the stored one rather than
// dropped.
constexpr std::string_view kResumeMayChange[] = {"steps",        "save_every", "eval_every",
                                                 "eval_windows", "log_every",  "skip_nonfinite"};

std::string ValueText(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The options StoredRunOptions writes only when they are not their default: each with its
// default, where `j` lacks it.
void AddUnstoredDefaults(json& j) {
  const json defaults = {{"passkey_share", 0.0},    {"bos_rows", false},
                         {"skip_nonfinite", 0},     {"mix", ""},
                         {"copy_span_min", 0},      {"copy_span_max", 0},
                         {"copy_alphabet_min", 0},  {"copy_strings", ""},
                         {"passkey_phrasings", ""}, {"passkey_filler", ""},
                         {"passkey_decoys", 0}};
  for (const auto& [key, value] : defaults.items()) {
    if (!j.contains(key)) j[key] = value;
  }
}

// A flag of two values whose default is stored as "" (so that runs from before the flag store
// nothing): `name` becomes "", `other` stays, anything else is refused naming both.
std::function<std::string(std::string)> DefaultOrOther(std::string name, std::string other) {
  return [name, other](std::string v) {
    if (v != name && v != other && !v.empty()) {
      throw CLI::ValidationError(fmt::format("\"{}\": expected {} or {}", v, name, other));
    }
    return v == name ? std::string() : v;
  };
}

// The keys of the run's options whose flags were given (on the command line or in --config).
std::vector<std::string> GivenKeys(CLI::App* app) {
  std::vector<std::string> keys;
  json every = StoredRunOptions(TrainRunOptions{});
  AddUnstoredDefaults(every);
  for (const auto& [key, value] : every.items()) {
    const CLI::Option* opt = app->get_option_no_throw(FlagOf(key));
    if (opt != nullptr && opt->count() > 0) keys.push_back(key);
  }
  // --mix sets the passkey share too (TrainRunOptionsOf).
  if (app->count("--mix") > 0 &&
      std::find(keys.begin(), keys.end(), "passkey_share") == keys.end()) {
    keys.push_back("passkey_share");
  }
  return keys;
}

// `options` are the stored ones; `asked` what the flags said. A flag of kResumeMayChange applies
// (with a note); a path names the same file or is refused; any other flag must repeat the stored
// value.
void ReconcileResume(const TrainRunOptions& asked, const std::vector<std::string>& given,
                     const TrainResume& resume, TrainRunOptions& options) {
  const std::string& checkpoint = resume.checkpoint;
  json want = StoredRunOptions(asked);
  json have = resume.stored;
  // Written only when not their default (StoredRunOptions).
  AddUnstoredDefaults(want);
  AddUnstoredDefaults(have);
  for (const std::string& key : given) {
    if (!want.contains(key) || !have.contains(key)) continue;
    const std::string flag = FlagOf(key);
    const bool may_change = std::find(std::begin(kResumeMayChange), std::end(kResumeMayChange),
                                      key) != std::end(kResumeMayChange);
    if (may_change) {
      if (want[key] != have[key]) {
        PrintNote(fmt::format("{} {} (the run was started with {}): applies from here on{}", flag,
                              ValueText(want[key]), ValueText(have[key]),
                              key == "steps" ? "; the learning rate's cosine now ends there" : ""));
      }
      continue;
    }
    const bool same = (key == "data" || key == "init")
                          ? SamePath(ValueText(want[key]), ValueText(have[key]))
                          : want[key] == have[key];
    if (!same) {
      Fail(
          "{} {}: the run in {} was started with {} {} ({} stores it), and --resume continues it "
          "with its own options; expected {} {} or no {} (with --resume only --steps, "
          "--save-every, --eval-every, --eval-windows, --log-every and --skip-nonfinite may "
          "change)",
          flag, ValueText(want[key]), asked.out, flag, ValueText(have[key]), checkpoint, flag,
          ValueText(have[key]), flag);
    }
  }
  for (const std::string& key : given) {
    if (key == "steps") options.steps = asked.steps;
    if (key == "save_every") options.save_every = asked.save_every;
    if (key == "eval_every") options.eval_every = asked.eval_every;
    if (key == "eval_windows") options.eval_windows = asked.eval_windows;
    if (key == "log_every") options.log_every = asked.log_every;
    if (key == "skip_nonfinite") options.skip_nonfinite = asked.skip_nonfinite;
  }
}

void PrintProgress(const TrainProgress& p) {
  if (p.stats.skipped > 0) {
    PrintNote(fmt::format(
        "step {}: passed over {} batch(es) with a non-finite loss or gradient before it "
        "(--skip-nonfinite); the last: {}",
        p.stats.step, p.stats.skipped, p.stats.skipped_why));
  }
  if (!p.report) return;
  std::string line = fmt::format(
      "step {}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3f}  {:.0f} tok/s  ETA {:.0f}s", p.stats.step,
      p.steps, p.stats.loss, p.stats.lr, p.stats.grad_norm, p.tokens_per_s, p.eta_seconds);
  if (p.eval) {
    line += fmt::format("  val loss {:.4f}", p.eval->loss);
    // Its 95% interval over the held-out windows (2 or more).
    if (p.eval->loss_ci_known) {
      line += fmt::format(" ({:.4f}-{:.4f})", p.eval->loss_lo, p.eval->loss_hi);
    }
    line += fmt::format(" acc {:.3f}", p.eval->accuracy);
  }
  // Copy kinds against their controls, passkey keys read back whole (digits).
  if (p.copy) line += "  " + CopyReadoutText(*p.copy);
  fmt::print(stderr, "{}\n", line);
}

// Flags given that have no effect with the rest of the options: a warning each.
void WarnIneffective(const std::vector<std::string>& given, const TrainRunOptions& o) {
  const auto has = [&](std::string_view key) {
    return std::find(given.begin(), given.end(), key) != given.end();
  };
  // With --init the tokenizer is the checkpoint's, and RunTraining checks --vocab-size against it.
  if (has("vocab_size") && o.init.empty() &&
      o.tokenizer.value_or(TrainRunDefaults::tokenizer) == TokenizerKind::kBytes) {
    Warn(fmt::format(
        "--vocab-size {} has no effect with the bytes tokenizer (its vocabulary is fixed at {}); "
        "it sizes --tokenizer bpe or unigram",
        o.vocab_size.value_or(0), TrainingTokenizer::Bytes().vocab_size()));
  }
  if (has("eval_windows") && o.eval_every == 0) {
    Warn(fmt::format(
        "--eval-windows {} has no effect with --eval-every 0 (no validation runs); give "
        "--eval-every N to validate every N steps",
        o.eval_windows));
  }
  for (const char* key : {"passkey_phrasings", "passkey_filler", "passkey_decoys"}) {
    if (has(key) && o.passkey_share == 0.0) {
      Warn(
          fmt::format("{} has no effect without passkey documents; give --passkey-share F or --mix "
                      "passkey=F",
                      FlagOf(key)));
    }
  }
}

void RunTrain(CLI::App* app, TrainArgs& a) {
  if (!a.config.empty()) {
    CheckRegularInput(a.config, "a JSON file of train options", "--config");
    json j;
    try {
      j = json::parse(ReadInputFile(a.config, "a JSON file of train options"));
    } catch (const json::exception& e) {
      Fail("--config {}: not valid JSON ({})", a.config, e.what());
    }
    ApplyJson(app, j, a.config, false);
  }
  if (!a.run.data.empty()) CheckRegularInputOrDirectory(a.run.data, kTextInputKind, "--data");
  std::string resume_from;
  const TrainRunOptions asked = TrainRunOptionsOf(app, a);
  // A run's folder: "-" or an existing file of another kind is refused before anything is read.
  if (!asked.out.empty()) ResolveOutput({"--out", asked.out, OutputForm::kDirectory});
  // What the user gave (command line, --config), before --resume fills in the stored options.
  const std::vector<std::string> given = GivenKeys(app);
  std::optional<TrainResume> resume;
  if (a.resume) {
    resume = ReadTrainResume(asked);
    for (const std::string& line : resume->notes) PrintNote(line);
    const int threads = a.threads;
    ApplyJson(app, resume->stored, resume->checkpoint + " stretch.cli", true);
    a.threads = threads;
    // Stored only when not 0 (StoredRunOptions): a run stored without it had none.
    if (!resume->stored.contains("passkey_share")) a.run.passkey_share = 0.0;
    if (!resume->stored.contains("bos_rows")) a.run.bos_rows = false;
    if (!resume->stored.contains("skip_nonfinite")) a.run.skip_nonfinite = 0;
    if (!resume->stored.contains("mix")) {
      a.mix.clear();
      a.run.copy_mix = CopyMix{};
    }
    if (!resume->stored.contains("copy_span_min")) a.run.copy_span_min = 0;
    if (!resume->stored.contains("copy_span_max")) a.run.copy_span_max = 0;
    if (!resume->stored.contains("copy_alphabet_min")) a.run.copy_alphabet_min = 0;
    if (!resume->stored.contains("copy_strings")) a.run.copy_strings.clear();
    if (!resume->stored.contains("passkey_phrasings")) a.run.passkey_phrasings.clear();
    if (!resume->stored.contains("passkey_filler")) a.run.passkey_filler.clear();
    if (!resume->stored.contains("passkey_decoys")) a.run.passkey_decoys = 0;
    resume_from = resume->checkpoint;
  }
  TrainRunOptions options = TrainRunOptionsOf(app, a);
  options.resume_from = resume_from;
  if (resume) ReconcileResume(asked, given, *resume, options);
  WarnIneffective(given, options);
  // The library checks its own inputs (--data, --init); --config is the command's.
  const std::vector<NamedPath> config = {{"--config", a.config}};
  if (!options.out.empty()) CheckInputsOutside(config, {"--out", options.out});
  if (a.threads > 0) SetNumThreads(a.threads);
  const TrainLoopResult done = RunTraining(options, {PrintNote, PrintProgress});
  // A checkpoint is written at the last step: none new means the run had no step left to train.
  fmt::print("train: {} steps done; checkpoints in {} ({}); log {}\n", done.steps_done, options.out,
             done.last_saved.empty() ? "no new checkpoint: the run had reached its steps already"
                                     : "latest " + done.last_saved,
             done.log_path);
}

}  // namespace

void RegisterTrain(CLI::App& app) {
  using L = TrainRunLimits;
  auto args = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a small language model on your own text, with the position scheme and attention "
      "layout of your choice, at a short length; then test it long with `stretch score`.\n"
      "Each step samples --batch windows of --train-len tokens at random from the training "
      "documents (a held-out tenth of the documents, --valid-fraction, is used for validation "
      "only), runs the model forward and backward, clips the gradient norm (--clip) and takes an "
      "AdamW step; the learning rate warms up over --warmup steps and then follows a cosine down "
      "to --min-lr. Checkpoints (safetensors with the configuration, tokenizer, optimizer state "
      "and "
      "random state) go to --out every --save-every steps and at the end; `--resume` continues a "
      "run from its newest complete checkpoint exactly as if it had never stopped.\n"
      "Example: stretch train --data ../shared/data/gutenberg --out runs/rope --train-len 128 "
      "--steps 3000 --dim 192 --layers 4 --heads 4 --position rope --attention full");
  sub->add_option("--data", args->run.data,
                  "Training text: a file, or a directory of *.txt files (one document each)");
  sub->add_option(
      "--out,-o", args->run.out,
      "Directory for checkpoints (step-NNNNNNNN.safetensors), the token cache and train_log.jsonl");
  sub->add_option("--config", args->config,
                  "JSON file with any of these options (keys: the long flag names, '_' for '-', "
                  "and seq_len for --train-len as checkpoints store it); flags given on the "
                  "command line win");
  sub->add_flag("--resume", args->resume,
                "Continue the run in --out from its newest complete checkpoint, with the arguments "
                "stored in it");
  sub->add_flag("--overwrite", args->run.overwrite,
                "Delete the run that --out holds (its checkpoints, token cache and "
                "train_log.jsonl; nothing else) and start a new one there. Without it, a new run "
                "into a directory that holds another is refused");
  sub->add_option("--init", args->run.init,
                  "Fine-tune from this checkpoint: its parameters, its tokenizer (the new --data "
                  "is tokenized with it; --tokenizer / --vocab-size, if given, must name it) and "
                  "its architecture (block, sizes, position, attention). --train-len is the new "
                  "training length (default: the checkpoint's); --position and --attention given "
                  "here replace the "
                  "checkpoint's (a --position without base= keeps the checkpoint's RoPE base); a "
                  "size or block flag that differs from the checkpoint is an error. E.g. --init "
                  "runs/rope --position rope:pi=4 --train-len 512 --steps 1000 (the file, or a "
                  "run's directory: its newest checkpoint)");
  sub->add_option("--tokenizer", args->tokenizer,
                  "Tokenizer trained on --data: bytes, bpe or unigram (SentencePiece)")
      ->capture_default_str();
  sub->add_option("--vocab-size", args->vocab_size,
                  "Vocabulary size for bpe / unigram (a warning with bytes, whose vocabulary is "
                  "fixed)")
      ->capture_default_str()
      ->check(Whole(260, L::max_vocab));
  CLI::Option* train_len =
      sub->add_option("--train-len", args->seq_len,
                      "Training length L: tokens per window (formerly --seq-len; stored in the "
                      "checkpoint as seq_len)")
          ->capture_default_str()
          ->check(Whole(1, L::max_seq_len));
  AddOldName(sub, train_len, "--seq-len");
  sub->add_option("--steps", args->run.steps, "Optimizer steps in the whole run")
      ->capture_default_str()
      ->check(Whole(1, L::max_steps));
  sub->add_option("--batch", args->run.batch, "Windows per micro-batch")
      ->capture_default_str()
      ->check(Whole(1, L::max_batch));
  sub->add_option("--accumulate", args->run.accumulate,
                  "Micro-batches per optimizer step (gradient accumulation)")
      ->capture_default_str()
      ->check(Whole(1, L::max_batch));
  sub->add_option("--dim", args->dim, "Model width")
      ->capture_default_str()
      ->check(Whole(1, L::max_dim));
  sub->add_option("--layers", args->layers, "Transformer blocks")
      ->capture_default_str()
      ->check(Whole(1, L::max_layers));
  sub->add_option("--heads", args->heads,
                  "Attention heads (dim / heads must be even; default 4; the GAU block has one)")
      ->check(Whole(1, L::max_dim));
  sub->add_option("--kv-heads", args->kv_heads,
                  "Key/value heads (grouped-query attention; default: --heads)")
      ->check(Whole(1, L::max_dim));
  sub->add_option("--hidden-dim", args->hidden_dim,
                  "SwiGLU width (default: 8/3 dim rounded up to 16); GAU: the expansion width e of "
                  "U and V (default: 2 dim; a multiple of the key width)")
      ->check(Whole(1, L::max_hidden));
  sub->add_option(
         "--block", args->block,
         "Block: llama (pre-norm attention + SwiGLU) or gau[:key=S] (post-norm single-head Gated "
         "Attention Unit, as GAU-alpha: key width S, default min(128, dim))")
      ->capture_default_str();
  sub->add_option("--position", args->position,
                  "How attention knows where tokens are: rope[:base=B,fraction=P,pi=F|ntk=F] "
                  "(RoPE; P < 1 is p-RoPE: only that share of the frequency pairs rotates, the "
                  "slowest are left out; pi=F is position interpolation, every position divided "
                  "by F (Chen et al. 2023); ntk=F is NTK-aware RoPE, the base times "
                  "F^(D/(D-2)) for head dim D: the two ways to fine-tune with --init at F times "
                  "the length), xpos[:base=B,gamma=G] (RoPE whose scores also decay with "
                  "distance, scale base G, default 512; pi and ntk change its rotation only), "
                  "nope (nothing), alibi (a fixed linear distance penalty per head), kerple-log, "
                  "kerple-power (learned distance penalties), sandwich[:dim=D,lambda=X] (a bias "
                  "from the inner product of two sinusoidal position embeddings of dimension D, "
                  "default 128, times X)")
      ->capture_default_str();
  sub->add_option("--attention", args->attention,
                  "Logits and layer layout, a comma list. Logits: keynorm, querynorm (unit-length "
                  "keys / queries), cosine (both, times lambda = 4 ln(L/2)), "
                  "cosine=per-position (lambda = 4 ln(n/2) for query i, n = i+1 the keys it sees), "
                  "scale=X (instead "
                  "of 1/sqrt(head dim) or lambda), logn (logits of query i times ln(n)/ln L, "
                  "n = i+1 the keys it sees, in training and after: the seeds' log-n models), "
                  "ssmax (a learned per-head s times ln(n), SSMax); under a window, on a window "
                  "layer or with a masked method n is the keys the window lets the query see. "
                  "Layout: full, window=W (each token sees the last W), chunk=C (the "
                  "text cut into chunks of C, each token sees its own chunk), hwfa=W, "
                  "hwfa2=W/K, swan=W/K, gemma3=W/K (Gemma 3: every K-th layer full attention "
                  "at the --position RoPE, the others a window of W at RoPE base 10000, or "
                  "local-base=B), llama4=C/K (Llama 4: every K-th layer full attention without "
                  "RoPE and with temperature tuning, the others chunks of C; "
                  "temperature=F/S: logits times ln(floor((i+1)/F)+1)*S+1, default F=C, "
                  "S=0.1), layers=L1/L2/... (one entry per layer, repeated over the layers; "
                  "N*L repeats one; an entry joins rope|nope, full|window:W|chunk:C, base:B, "
                  "pi:F, temp with +, e.g. layers=5*window:512+base:10000/full+pi:8)")
      ->capture_default_str();
  sub->add_option("--lr", args->run.lr, "Peak learning rate")
      ->capture_default_str()
      ->check(Real(0, L::max_lr, /*open_low=*/true));
  sub->add_option("--min-lr", args->min_lr, "Learning rate at the last step (default: lr / 10)")
      ->check(Real(0, L::max_lr));
  sub->add_option("--warmup", args->warmup, "Warm-up steps (default: min(100, steps / 10))")
      ->check(Whole(0, L::max_steps));
  sub->add_option("--weight-decay", args->run.weight_decay,
                  "AdamW decoupled weight decay (not on norms)")
      ->capture_default_str()
      ->check(Real(0, L::max_weight_decay));
  sub->add_option("--perturb", args->run.perturb,
                  "Position perturbation of the training windows (RoPE only): none, "
                  "randomized:max=M (each window's positions are a sorted random sample below M, "
                  "so longer distances are seen; Ruoss et al. 2023), pose:max=M[,chunks=N] (PoSE: "
                  "the window is cut into N pieces moved apart by random skips, positions below "
                  "M; Zhu et al. 2023). Evaluation uses the true positions")
      ->capture_default_str();
  sub->add_option("--clip", args->run.clip,
                  "Clip the global gradient norm to this (0: no clipping)")
      ->capture_default_str()
      ->check(Real(0, L::max_clip));
  sub->add_option("--seed", args->run.seed, "Seed of the initialization, the split and the batches")
      ->capture_default_str();
  sub->add_option("--save-every", args->run.save_every, "Checkpoint every N steps (and at the end)")
      ->capture_default_str()
      ->check(Whole(1, L::max_steps));
  sub->add_option("--eval-every", args->run.eval_every,
                  "Validation loss and accuracy every N steps (0: never)")
      ->capture_default_str()
      ->check(Whole(0, L::max_steps));
  sub->add_option("--eval-windows", args->run.eval_windows,
                  "Held-out windows per validation (a warning with --eval-every 0)")
      ->capture_default_str()
      ->check(Whole(1, L::max_batch));
  sub->add_option("--log-every", args->run.log_every, "Progress line every N steps")
      ->capture_default_str()
      ->check(Whole(1, L::max_steps));
  sub->add_option("--valid-fraction", args->run.valid_fraction,
                  "Fraction of documents held out for validation")
      ->capture_default_str()
      ->check(Real(0, L::max_valid_fraction, /*open_low=*/true));
  sub->add_option("--passkey-share", args->run.passkey_share,
                  "Share of the training windows (0 to 0.5) replaced by passkey documents of the "
                  "same length: a random 5-digit number hidden at a random depth in training "
                  "text (\" The key is 48213. \"), asked for at the end (\" What is the key? The "
                  "key is 48213\"). A small model trained on prose alone cannot retrieve it at "
                  "any length; with e.g. 0.1 it learns the task at --train-len, and the passkey "
                  "evaluation then asks whether it still finds the key in longer texts. Needs "
                  "--train-len >= 61 with the bytes tokenizer. 0: none")
      ->capture_default_str()
      ->check(Real(0, L::max_passkey_share));
  sub->add_flag("--bos-rows", args->run.bos_rows,
                "Begin every training row with BOS, as `stretch score` begins every window it "
                "scores: a text window's first token is replaced by BOS. Give it with --mix or "
                "--passkey-share, whose rows always begin with BOS: without it the text rows "
                "almost never do, the model learns BOS as the sign of a synthetic row, and scored "
                "after BOS it predicts plain text at the end of its window worse than anywhere "
                "else. `stretch lab` trains with it");
  sub->add_option(
         "--mix", args->mix,
         "What the training rows are, as shares that add up to at most 1 (text, the training "
         "windows themselves, takes what the others leave), e.g. "
         "text=0.5,textcopy=0.3,gapped=0.1,passkey=0.1. Small models trained on text alone never "
         "learn to copy from earlier in their window, so every retrieval test reads zero; rows "
         "that can only be predicted by copying teach it within a few million tokens. Kinds: "
         "periodic (a random string of lowercase letters repeated until the row is full: the "
         "easiest copying, learnt first), gapped (a string, a gap of capitals and marks, the same "
         "string again: copying over any distance up to --train-len), textcopy (a window of "
         "training text in which a span of it is pasted again later: copying inside prose), "
         "randcopy (a window of training text with a random string written into it twice, "
         "nothing marking where either begins: the copy is found only by matching the string, "
         "as the retrieval tests need), textperiodic (a piece of training text repeated until the "
         "row is full: prose that pays to copy), textdecoy (a textcopy row with pieces of the "
         "copied span, two to four "
         "tokens each, written elsewhere in the row and going on otherwise: the copy is found only "
         "by matching more than a few tokens back, as prose in a long context needs), textfar (a "
         "textcopy row whose copy lies in the far half of the distances the row can hold), "
         "textedge (a "
         "textfar row whose distance reaches the row's end, the copy cut there), "
         "passkey (as "
         "--passkey-share, of which it is "
         "another spelling). A curriculum that works (docs/training.md; `stretch lab`'s stages): "
         "periodic=1 with --copy-span-min 4 --copy-span-max 12, then --init from it with "
         "gapped=1, then gapped=1 with "
         "--copy-alphabet-min 3, then text with randcopy, gapped and passkey rows, then "
         "textperiodic added. Copied strings are --copy-span-min..--copy-span-max tokens long. "
         "Each "
         "evaluation (--eval-every) also reads copying back on fixed held-out rows: copy (gapped), "
         "textcopy and randcopy accuracy against controls with nothing to copy, and passkeys")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              ParseCopyMix(text, "--mix");
            } catch (const Error& e) {
              return std::string(e.what());
            }
            return std::string();
          },
          "KIND=SHARE,...", "mix"));
  sub->add_option("--copy-span-min", args->run.copy_span_min,
                  "Shortest copied string of --mix's copy rows and of the copy readout, in tokens "
                  "(default: --train-len / 16, at least 2)")
      ->check(Whole(2, L::max_seq_len));
  sub->add_option(
         "--copy-span-max", args->run.copy_span_max,
         "Longest copied string, in tokens; at most (--train-len - 1) / 2, as a gapped row "
         "holds two copies (default: 5 --train-len / 16)")
      ->check(Whole(2, L::max_seq_len));
  sub->add_option("--copy-alphabet-min", args->run.copy_alphabet_min,
                  "Each periodic or gapped row of --mix draws its strings from a random subset of "
                  "N..26 letters (default: all 26 in every row). With few letters a character "
                  "recurs often, so the model learns to find a copy's source by matching several "
                  "characters at once, which copying prose needs")
      ->check(Whole(2, 26));
  sub->add_option("--copy-strings", args->run.copy_strings,
                  "The characters of --mix's copy strings (default: the 26 lowercase letters); "
                  "none may be a capital or one of .,;:- (the gaps' characters). Add digits, "
                  "abcdefghijklmnopqrstuvwxyz0123456789, for a model that should copy a passkey's "
                  "key, which is digits");
  sub->add_option("--passkey-phrasings", args->run.passkey_phrasings,
                  "How the passkey documents of --passkey-share (or --mix passkey=) are phrased: "
                  "one (default): stretch's own layout, \" The key is 12345. \" ... \" What is "
                  "the key? The key is \", in every one; varied: each in one of six phrasings "
                  "(a secret number, a code said twice, a password, ...; never llama.cpp's \"pass "
                  "key\", so that its layout stays unseen), so that the model learns to retrieve "
                  "a key rather than one sentence")
      ->transform(DefaultOrOther("one", "varied"));
  sub->add_option(
         "--passkey-filler", args->run.passkey_filler,
         "The text around the key in the passkey documents: text (default): a window of "
         "the training text; mixed: half of the documents take a block of 16 to 3/8 "
         "--train-len tokens of that window repeated instead, as llama.cpp's llama-passkey "
         "repeats its junk sentences, so that the model also retrieves from repetitive "
         "filler (without it the lab's models answer llama.cpp's question with prose once "
         "its junk repeats three times or more: docs/training.md)")
      ->transform(DefaultOrOther("text", "mixed"));
  sub->add_option("--passkey-decoys", args->run.passkey_decoys,
                  "Write up to N decoy sentences over each passkey document's filler (default 0): "
                  "shaped like the needle with another noun and number, \" The door is 48213. "
                  "\", so that the model finds the key by the question's words rather than by "
                  "\"the number after 'is'\"")
      ->check(Whole(0, L::max_passkey_decoys));
  sub->add_option("--skip-nonfinite", args->run.skip_nonfinite,
                  "When a batch gives a loss or gradient that is not a finite number (NaN or "
                  "infinity: the run diverged, or a batch is pathological), pass over up to N such "
                  "batches in a row, drawing the next batch instead and applying nothing of the "
                  "bad one, with a note naming the tensors. 0 (the default): stop the run at the "
                  "first one, its last checkpoint intact")
      ->capture_default_str()
      ->check(Whole(0, L::max_skip_nonfinite));
  sub->add_option("--threads", args->threads, "Threads (default: all cores)")
      ->check(Whole(0, L::max_threads));
  sub->callback([sub, args] {
    InstallStopHandlers();  // Ctrl-C saves the step at hand first (src/core/stop.h)
    RunTrain(sub, *args);
  });
}

}  // namespace stretch::cli
