// stretch train: train a small language model on the user's text with a chosen position scheme
// and attention layout; checkpoints in --out, resumable bit for bit.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/threads.h"
#include "src/core/timer.h"
#include "src/io/output_file.h"
#include "src/train/arch_spec.h"
#include "src/train/checkpoint.h"
#include "src/train/data.h"
#include "src/train/run.h"
#include "src/train/run_dir.h"
#include "src/train/trainer.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TrainArgs {
  std::string data, out, config, init;
  std::string tokenizer = "bytes";
  int vocab_size = 4096;
  std::string block = "llama";
  std::string position = "rope";
  std::string attention = "full";
  std::string perturb = "none";
  int64_t seq_len = 128, steps = 2000, batch = 16, warmup = -1, save_every = 500, eval_every = 100,
          eval_windows = 64, log_every = 10;
  int dim = 128, layers = 4, heads = 0, kv_heads = 0, hidden_dim = 0, accumulate = 1;
  double lr = 1e-3, min_lr = -1, weight_decay = 0.1, clip = 1.0, valid_fraction = 0.1;
  uint64_t seed = 1;
  bool resume = false;
  bool overwrite = false;  // an action of this invocation, never stored with the run
  int threads = 0;
};

// Every field a run needs to be repeated exactly (what --resume restores), as JSON.
json ArgsToJson(const TrainArgs& a) {
  return {{"data", a.data},
          {"tokenizer", a.tokenizer},
          {"vocab_size", a.vocab_size},
          {"block", a.block},
          {"position", a.position},
          {"attention", a.attention},
          {"seq_len", a.seq_len},
          {"steps", a.steps},
          {"batch", a.batch},
          {"warmup", a.warmup},
          {"save_every", a.save_every},
          {"eval_every", a.eval_every},
          {"eval_windows", a.eval_windows},
          {"log_every", a.log_every},
          {"dim", a.dim},
          {"layers", a.layers},
          {"heads", a.heads},
          {"kv_heads", a.kv_heads},
          {"hidden_dim", a.hidden_dim},
          {"accumulate", a.accumulate},
          {"lr", a.lr},
          {"min_lr", a.min_lr},
          {"weight_decay", a.weight_decay},
          {"clip", a.clip},
          {"valid_fraction", a.valid_fraction},
          {"seed", a.seed},
          {"init", a.init},
          {"perturb", a.perturb}};
}

// JSON values for options not given on the command line (--config FILE, and --resume's stored
// arguments). Keys are the long flag names with '_' for '-'.
void ApplyJson(CLI::App* app, const json& j, const std::string& what, bool override_given) {
  if (!j.is_object()) Fail("{}: expected a JSON object", what);
  for (const auto& [key, value] : j.items()) {
    std::string flag = "--" + key;
    std::replace(flag.begin() + 2, flag.end(), '_', '-');
    CLI::Option* opt = app->get_option_no_throw(flag);
    if (opt == nullptr)
      Fail("{}: unknown field \"{}\" (fields are the long flags of stretch train)", what, key);
    if (opt->count() > 0 && !override_given) continue;  // the command line wins
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    if (value.is_boolean()) text = value.get<bool>() ? "true" : "false";
    if (value.is_string() && text.empty()) continue;
    opt->clear();
    opt->add_result(text);
    opt->run_callback();
  }
}

// The newest complete checkpoint in dir (newer files that do not read as one are reported and
// passed over), or nullopt when there is none.
std::optional<std::string> NewestCheckpoint(const std::string& dir) {
  if (StepFiles(dir).empty()) return std::nullopt;
  std::vector<std::string> skipped;
  try {
    const std::string path = NewestCheckpointIn(dir, &skipped);
    for (const std::string& line : skipped) fmt::print(stderr, "train: {}\n", line);
    return path;
  } catch (const Error&) {
    for (const std::string& line : skipped) fmt::print(stderr, "train: {}\n", line);
    return std::nullopt;
  }
}

// One directory holds one run. Inputs never lie inside --out (a new run there would replace them,
// --overwrite would delete them); a directory holding another run is refused unless the run is
// resumed, or --overwrite asks for its files to be deleted first.
void CheckRunDirectory(const TrainArgs& a, bool resuming) {
  std::vector<NamedPath> inputs = {{"--data", a.data}, {"--config", a.config}};
  if (!resuming) inputs.push_back({"--init", a.init});  // a resumed run reads its own checkpoint
  CheckInputsOutside(inputs, {"--out", a.out});
  if (resuming) return;
  const RunDirContents held = ScanRunDir(a.out);
  if (!held.HoldsRun()) return;
  if (!a.overwrite) {
    Fail(
        "--out {} holds another run ({}): continue it with --resume, delete it and start over "
        "with --overwrite, or choose another --out",
        a.out, held.Describe());
  }
  const int64_t removed = ClearRunDir(a.out);
  fmt::print(stderr, "train: --overwrite: deleted the earlier run in {} ({}; {} files)\n", a.out,
             held.Describe(), removed);
}

// What --init takes from a checkpoint: the architecture and the tokenizer. (A run started with
// --init and resumed takes them from the checkpoint it resumes: the very ones it started with,
// and the --init file need not exist any more.)
struct InitSource {
  std::string path;
  TrainArch arch;
  TrainingTokenizer tokenizer = TrainingTokenizer::Bytes();
  // The checkpoint run's --tokenizer (bytes, bpe, unigram) from its stored arguments, when they
  // agree with its tokenizer's kind; "" when unknown.
  std::string tokenizer_flag;

  std::string TokenizerText() const {
    return fmt::format("{} tokenizer, vocabulary {}",
                       tokenizer_flag.empty() ? std::string(tokenizer.kind()) : tokenizer_flag,
                       tokenizer.vocab_size());
  }
};

InitSource ReadInitSource(const std::string& path) {
  const SafetensorsFile f(path);
  InitSource s;
  s.path = path;
  s.arch = ReadCheckpointInfo(f).arch;
  std::optional<TrainingTokenizer> tok = ReadCheckpointTokenizer(f, s.arch.model.vocab_size);
  if (!tok) {
    Fail(
        "{}: the checkpoint carries no tokenizer (metadata stretch.tokenizer; expected one: "
        "--init tokenizes the new data with the checkpoint's own tokenizer)",
        path);
  }
  s.tokenizer = *tok;
  if (const std::optional<std::string> cli = f.FindMetadata("stretch.cli")) {
    const json j = json::parse(*cli, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("tokenizer") && j.at("tokenizer").is_string()) {
      const std::string flag = j.at("tokenizer").get<std::string>();
      const bool bytes = s.tokenizer.kind() == "bytes";
      if ((flag == "bytes") == bytes && (flag == "bytes" || flag == "bpe" || flag == "unigram")) {
        s.tokenizer_flag = flag;
      }
    }
  }
  return s;
}

// --tokenizer / --vocab-size given with --init must name the checkpoint's tokenizer: a vocabulary
// trained anew on other text would give the same ids other meanings.
void CheckTokenizerFlags(CLI::App* app, const TrainArgs& a, const InitSource& s) {
  const TrainingTokenizer& t = s.tokenizer;
  if (app->count("--tokenizer") > 0) {
    const bool bytes = ParseTokenizerKind(a.tokenizer) == TokenizerKind::kBytes;
    const bool same = bytes ? t.kind() == "bytes"
                            : t.kind() != "bytes" &&
                                  (s.tokenizer_flag.empty() || s.tokenizer_flag == a.tokenizer);
    if (!same) {
      Fail(
          "--tokenizer {}: --init {} takes the checkpoint's tokenizer ({}), expected --tokenizer "
          "to name it or be left out (the new data is tokenized with the checkpoint's "
          "vocabulary, so that every id means what it meant in training)",
          a.tokenizer, s.path, s.TokenizerText());
    }
  }
  if (app->count("--vocab-size") > 0 && a.vocab_size != t.vocab_size()) {
    Fail(
        "--vocab-size {}: --init {} takes the checkpoint's tokenizer ({}), expected --vocab-size "
        "{} or none",
        a.vocab_size, s.path, s.TokenizerText(), t.vocab_size());
  }
}

// The layout and logits of an architecture, for the banner.
std::string AttentionText(const TrainArch& arch) {
  std::string out = LayoutText(arch);
  const AttentionLayout& l = arch.model.attention;
  if (l.query_norm) out += "; querynorm";
  if (l.key_norm) out += "; keynorm";
  if (l.logit_scale > 0.0) out += fmt::format("; scale {}", l.logit_scale);
  if (l.position_log_scale) out += "; per-position lambda";
  if (l.logn) out += "; logn";
  if (l.ssmax) out += "; ssmax";
  return out;
}

// The architecture of the flags (a run from scratch); vocab_size is the tokenizer's.
TrainArch ArchFromFlags(const TrainArgs& a, int vocab_size) {
  TrainArch arch;
  ModelConfig& m = arch.model;
  m.dim = a.dim;
  m.n_layers = a.layers;
  ApplyBlockSpec(a.block, arch);
  if (arch.model.Gau()) {
    // One head whose width is the key width; e = 2 dim as in the paper and GAU-alpha.
    if (a.heads > 1 || a.kv_heads > 1) {
      Fail(
          "--heads {} --kv-heads {}: the GAU block has a single head (its width: --block "
          "gau:key=S)",
          a.heads, a.kv_heads);
    }
    m.hidden_dim = a.hidden_dim > 0 ? a.hidden_dim : 2 * a.dim;
    m.SetGau(m.key_dim);  // R = E / S kernel heads
  } else {
    m.n_heads = a.heads > 0 ? a.heads : 4;
    m.n_kv_heads = a.kv_heads > 0 ? a.kv_heads : m.n_heads;
    m.hidden_dim = a.hidden_dim > 0 ? a.hidden_dim : (8 * a.dim / 3 + 15) / 16 * 16;
  }
  m.vocab_size = vocab_size;
  m.seq_len = static_cast<int>(a.seq_len);
  m.shared_classifier = false;
  ApplyPositionSpec(a.position, arch);
  ApplyAttentionSpec(a.attention, arch);
  return arch;
}

// --init: the checkpoint's architecture (block, sizes, position, attention, vocabulary), trained
// at the new --seq-len, with --position and --attention replaced when given on the command line
// (or in --config). A size or block flag given must equal the checkpoint's: its parameters are
// loaded as they are. `changed` receives a line per change.
TrainArch ArchFromInit(CLI::App* app, const TrainArgs& a, const InitSource& s,
                       std::vector<std::string>& changed) {
  TrainArch arch = s.arch;
  ModelConfig& m = arch.model;
  auto same = [&](const char* flag, int64_t given, int64_t have, const char* what) {
    if (app->count(flag) > 0 && given != have) {
      Fail(
          "{} {}: the checkpoint {} has {}={} (--init keeps the checkpoint's sizes, whose "
          "parameters it loads; expected {} {} or no {})",
          flag, given, s.path, what, have, flag, have, flag);
    }
  };
  same("--dim", a.dim, m.dim, "dim");
  same("--layers", a.layers, m.n_layers, "layers");
  // The GAU's one head (its R = E / S kernel copies are not a flag).
  same("--heads", a.heads, m.Gau() ? 1 : m.n_heads, "heads");
  same("--kv-heads", a.kv_heads, m.Gau() ? 1 : m.n_kv_heads, "kv_heads");
  same("--hidden-dim", a.hidden_dim, m.hidden_dim, "hidden_dim");
  if (app->count("--block") > 0) {
    TrainArch given = arch;
    ApplyBlockSpec(a.block, given);
    if (BlockSpecOf(given) != BlockSpecOf(arch)) {
      Fail(
          "--block {}: the checkpoint {} has block {} (--init keeps the checkpoint's block, "
          "whose parameters it loads; expected --block {} or no --block)",
          a.block, s.path, BlockSpecOf(arch), BlockSpecOf(arch));
    }
  }
  if (m.seq_len != a.seq_len) {
    changed.push_back(fmt::format("seq_len {} -> {}", m.seq_len, a.seq_len));
  }
  m.seq_len = static_cast<int>(a.seq_len);
  if (app->count("--position") > 0) {
    const std::string before = PositionSpecOf(arch);
    ApplyPositionSpec(a.position, arch);
    if (PositionSpecOf(arch) != before) {
      changed.push_back(fmt::format("position {} -> {}", before, PositionSpecOf(arch)));
    }
  }
  if (app->count("--attention") > 0) {
    const std::string before = AttentionText(arch);
    ApplyAttentionSpec(a.attention, arch);
    if (AttentionText(arch) != before) {
      changed.push_back(fmt::format("attention {} -> {}", before, AttentionText(arch)));
    }
  }
  return arch;
}

// Most of a training step is OpenBLAS's sgemm. On a CPU with AVX-512, OPENBLAS_CORETYPE set to
// an AVX2 kernel set (Haswell, Zen: as this project's environment sets it) caps every product at
// half the FMA peak; with SkylakeX's kernels the 4-layer d = 256 benchmark steps ~1.4x faster
// (docs/performance.md). The user's setting is kept (it may be deliberate); this says what it
// costs.
std::optional<std::string> BlasKernelHint() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (core == nullptr || !__builtin_cpu_supports("avx512f")) return std::nullopt;
  std::string c(core);
  std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (c == avx512) return std::nullopt;
  }
  return fmt::format(
      "this CPU has AVX-512, but OPENBLAS_CORETYPE={} limits OpenBLAS to narrower kernels; "
      "try OPENBLAS_CORETYPE=SkylakeX (1.4x faster steps in docs/performance.md's benchmark)",
      core);
#else
  return std::nullopt;
#endif
}

void RunTrain(CLI::App* app, TrainArgs& a) {
  if (!a.config.empty()) {
    std::ifstream in(a.config);
    if (!in) Fail("--config {}: cannot open the file", a.config);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      Fail("--config {}: not valid JSON ({})", a.config, e.what());
    }
    ApplyJson(app, j, a.config, false);
  }
  if (a.out.empty()) Fail("--out is required: the directory for checkpoints");
  if (a.overwrite && a.resume) {
    Fail(
        "--overwrite and --resume contradict each other: --resume continues the run in --out, "
        "--overwrite deletes it");
  }
  std::optional<std::string> resume_from;
  if (a.resume) {
    resume_from = NewestCheckpoint(a.out);
    if (!resume_from) Fail("--resume: no complete checkpoint in {}", a.out);
    const SafetensorsFile f(*resume_from);
    const std::optional<std::string> stored = f.FindMetadata("stretch.cli");
    if (!stored) Fail("{}: has no stored arguments (stretch.cli) to resume with", *resume_from);
    const int threads = a.threads;
    ApplyJson(app, json::parse(*stored), *resume_from + " stretch.cli", true);
    a.threads = threads;
    a.resume = true;
  }
  if (a.data.empty()) Fail("--data is required: a text file or a directory of *.txt files");
  if (a.threads > 0) SetNumThreads(a.threads);

  // --init: the architecture and tokenizer of the checkpoint (of the resumed one on --resume).
  std::optional<InitSource> init;
  if (!a.init.empty()) {
    if (!resume_from && fs::is_directory(a.init)) {  // a run's directory: its newest checkpoint
      const std::optional<std::string> newest = NewestCheckpoint(a.init);
      if (!newest) Fail("--init {}: no complete checkpoint in this directory", a.init);
      a.init = *newest;  // stored so: the file this run started from
    }
  }
  CheckRunDirectory(a, resume_from.has_value());
  fs::create_directories(a.out);
  if (!a.init.empty()) {
    init = ReadInitSource(resume_from ? *resume_from : a.init);
    if (!resume_from) {
      CheckTokenizerFlags(app, a, *init);
      // The stored arguments name the tokenizer the run really uses.
      if (!init->tokenizer_flag.empty()) a.tokenizer = init->tokenizer_flag;
      if (init->tokenizer.kind() != "bytes") a.vocab_size = init->tokenizer.vocab_size();
      // No --seq-len given: the checkpoint's length (a fine-tune usually gives a longer one).
      if (app->get_option("--seq-len")->count() == 0) a.seq_len = init->arch.model.seq_len;
    }
  }

  // Data: tokenizer, cache next to the checkpoints, split by document.
  DataOptions dopt;
  dopt.corpus.path = a.data;
  dopt.tokenizer.kind = ParseTokenizerKind(a.tokenizer);
  dopt.tokenizer.vocab_size = a.vocab_size;
  dopt.cache_path = (fs::path(a.out) / kTokenCacheName).string();
  const CorpusData data = init ? LoadCorpusData(dopt, init->tokenizer) : LoadCorpusData(dopt);
  const std::string tokenizer_text =
      init ? "the checkpoint's " + init->TokenizerText()
           : fmt::format("{} tokenizer, vocabulary {}", a.tokenizer, data.tokenizer.vocab_size());
  fmt::print(stderr, "train: {} documents, {} tokens ({}; cache {})\n", data.documents.size(),
             data.documents.n_tokens(), tokenizer_text, data.cache_note);
  SplitOptions sopt;
  sopt.valid_fraction = a.valid_fraction;
  sopt.seed = a.seed;
  const DataSplit split = SplitDocuments(data.documents, sopt);
  const WindowSampler sampler(split.train, a.seq_len);
  if (sampler.n_windows() == 0) {
    Fail("--seq-len {}: no training document has {} tokens", a.seq_len, a.seq_len + 1);
  }
  const std::vector<Window> valid = ValidationWindows(split.valid, a.seq_len, TailWindow::kDrop);
  const Entropy entropy = UnigramEntropy(split.train, data.tokenizer.vocab_size());

  // Architecture: from the flags, or from the --init checkpoint (a resumed --init run: exactly
  // the one it started with, which LoadCheckpointInto compares with the file anyway).
  std::vector<std::string> changed;
  TrainArch arch;
  if (!init) {
    arch = ArchFromFlags(a, data.tokenizer.vocab_size());
  } else if (resume_from) {
    arch = init->arch;
  } else {
    arch = ArchFromInit(app, a, *init, changed);
  }
  FinalizeArch(arch);  // NTK's base, at the final sizes
  ValidateArch(arch);
  const ModelConfig& m = arch.model;
  TrainerOptions topt;
  topt.batch = a.batch;
  topt.accumulate = a.accumulate;
  topt.schedule =
      LrSchedule{a.lr, a.min_lr >= 0 ? a.min_lr : a.lr / 10,
                 a.warmup >= 0 ? a.warmup : std::min<int64_t>(100, a.steps / 10), a.steps};
  topt.adamw.weight_decay = a.weight_decay;
  topt.clip = a.clip;
  topt.seed = a.seed;
  topt.perturb = ParsePerturbation(a.perturb, "--perturb");
  Trainer trainer(arch, topt);
  int64_t n_params = 0;
  for (const Param& p : trainer.registry().params()) n_params += p.numel();
  const std::string block_text =
      arch.model.Gau()
          ? fmt::format("GAU blocks (key width {}, expansion {})", arch.model.key_dim, m.hidden_dim)
          : fmt::format("{} heads", m.n_heads);
  const std::string ntk_text =
      arch.rope_ntk != 1.0
          ? fmt::format(" (NTK-aware: RoPE base {} -> {})", arch.rope_ntk_base, m.rope_base)
          : "";
  fmt::print(stderr, "train: {} parameters; dim {}, {} layers, {}; position {}{}; layers: {}{}{}\n",
             n_params, m.dim, m.n_layers, block_text, PositionSpecOf(arch), ntk_text,
             LayoutText(arch), arch.model.attention.key_norm ? "; keynorm" : "",
             arch.model.attention.query_norm ? "; querynorm" : "");
  if (init && !resume_from) {
    std::string change_text;
    for (const std::string& c : changed) change_text += (change_text.empty() ? "" : ", ") + c;
    const TrainArch& from = init->arch;
    const ModelConfig& f = from.model;
    fmt::print(stderr,
               "train: --init {}: from the checkpoint: {}; block {}, dim {}, {} layers, {} heads "
               "({} kv), hidden {}, position {}, attention {}; changed: {}\n",
               init->path, init->TokenizerText(), BlockSpecOf(from), f.dim, f.n_layers, f.n_heads,
               f.n_kv_heads, f.hidden_dim, PositionSpecOf(from), AttentionText(from),
               changed.empty() ? std::string("nothing") : change_text);
  }
  fmt::print(stderr, "train: unigram entropy of the training tokens: {:.3f} nats/token\n",
             entropy.nats);
  if (const std::optional<std::string> hint = BlasKernelHint()) {
    fmt::print(stderr, "train: note: {}\n", *hint);
  }
  if (resume_from) {
    LoadCheckpointInto(trainer, SafetensorsFile(*resume_from));
    fmt::print(stderr, "train: resumed from {} at step {}\n", *resume_from, trainer.step());
  } else if (!a.init.empty()) {
    LoadParamsInto(trainer, SafetensorsFile(a.init));
    fmt::print(stderr, "train: parameters initialized from {}\n", a.init);
  }

  CheckpointExtras extras;
  extras.tokenizer_model = data.tokenizer.model();
  extras.metadata["stretch.tokenizer"] = json{
      {"kind", std::string(data.tokenizer.kind())},
      {"vocab_size", data.tokenizer.vocab_size()},
      {"bos", data.tokenizer.bos_id()}}.dump();
  extras.metadata["stretch.cli"] = ArgsToJson(a).dump();

  TrainLoopOptions loop;
  loop.out = a.out;
  loop.steps = a.steps;
  loop.eval_every = a.eval_every;
  loop.eval_windows = a.eval_windows;
  loop.log_every = a.log_every;
  loop.save_every = a.save_every;
  loop.extras = std::move(extras);
  const TrainingData training{&split, &sampler, valid};
  const TrainLoopResult done = RunTrainingLoop(trainer, training, loop, [](const TrainProgress& p) {
    if (!p.report) return;
    std::string line = fmt::format(
        "step {}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3f}  {:.0f} tok/s  ETA {:.0f}s", p.stats.step,
        p.steps, p.stats.loss, p.stats.lr, p.stats.grad_norm, p.tokens_per_s, p.eta_seconds);
    if (p.eval) line += fmt::format("  val loss {:.4f} acc {:.3f}", p.eval->loss, p.eval->accuracy);
    fmt::print(stderr, "{}\n", line);
  });
  fmt::print("train: {} steps done; checkpoints in {} (latest {}); log {}\n", done.steps_done,
             a.out, done.last_saved.empty() ? "none new" : done.last_saved, done.log_path);
}

}  // namespace

void RegisterTrain(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a small language model on your own text, with the position scheme and attention "
      "layout of your choice, at a short length; then test it long with `stretch score`.\n"
      "Each step samples --batch windows of --seq-len tokens at random from the training "
      "documents (a held-out tenth of the documents, --valid-fraction, is used for validation "
      "only), runs the model forward and backward, clips the gradient norm (--clip) and takes an "
      "AdamW step; the learning rate warms up over --warmup steps and then follows a cosine down "
      "to --min-lr. Checkpoints (safetensors with the configuration, tokenizer, optimizer state "
      "and "
      "random state) go to --out every --save-every steps and at the end; `--resume` continues a "
      "run from its newest complete checkpoint exactly as if it had never stopped.\n"
      "Example: stretch train --data ../shared/data/gutenberg --out runs/rope --seq-len 128 "
      "--steps 3000 --dim 192 --layers 4 --heads 4 --position rope --attention full");
  sub->add_option("--data", args->data,
                  "Training text: a file, or a directory of *.txt files (one document each)");
  sub->add_option(
      "--out", args->out,
      "Directory for checkpoints (step-NNNNNNNN.safetensors), the token cache and train_log.jsonl");
  sub->add_option("--config", args->config,
                  "JSON file with any of these options (keys: the long flag names, '_' for '-'); "
                  "flags given on the command line win");
  sub->add_flag("--resume", args->resume,
                "Continue the run in --out from its newest complete checkpoint, with the arguments "
                "stored in it");
  sub->add_flag("--overwrite", args->overwrite,
                "Delete the run that --out holds (its checkpoints, token cache and "
                "train_log.jsonl; nothing else) and start a new one there. Without it, a new run "
                "into a directory that holds another is refused");
  sub->add_option("--init", args->init,
                  "Fine-tune from this checkpoint: its parameters, its tokenizer (the new --data "
                  "is tokenized with it; --tokenizer / --vocab-size, if given, must name it) and "
                  "its architecture (block, sizes, position, attention). --seq-len is the new "
                  "training length (default: the checkpoint's); --position and --attention given "
                  "here replace the "
                  "checkpoint's (a --position without base= keeps the checkpoint's RoPE base); a "
                  "size or block flag that differs from the checkpoint is an error. E.g. --init "
                  "runs/rope --position rope:pi=4 --seq-len 512 --steps 1000 (the file, or a "
                  "run's directory: its newest checkpoint)");
  sub->add_option("--tokenizer", args->tokenizer,
                  "Tokenizer trained on --data: bytes, bpe or unigram (SentencePiece)")
      ->capture_default_str();
  sub->add_option("--vocab-size", args->vocab_size, "Vocabulary size for bpe / unigram")
      ->capture_default_str();
  sub->add_option("--seq-len", args->seq_len, "Training length L: tokens per window")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--steps", args->steps, "Optimizer steps in the whole run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--batch", args->batch, "Windows per micro-batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--accumulate", args->accumulate,
                  "Micro-batches per optimizer step (gradient accumulation)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--dim", args->dim, "Model width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--layers", args->layers, "Transformer blocks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--heads", args->heads,
                  "Attention heads (dim / heads must be even; default 4; the GAU block has one)");
  sub->add_option("--kv-heads", args->kv_heads,
                  "Key/value heads (grouped-query attention; default: --heads)");
  sub->add_option("--hidden-dim", args->hidden_dim,
                  "SwiGLU width (default: 8/3 dim rounded up to 16); GAU: the expansion width e of "
                  "U and V (default: 2 dim; a multiple of the key width)");
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
                  "cosine=per-position (lambda = 4 ln((i+1)/2) for query i), scale=X (instead "
                  "of 1/sqrt(head dim) or lambda), logn (logits times max(1, ln(i+1)/ln L): 1 "
                  "while training, growing past L), ssmax (a learned per-head s times ln(i+1), "
                  "SSMax). Layout: full, window=W, hwfa=W, hwfa2=W/K, swan=W/K")
      ->capture_default_str();
  sub->add_option("--lr", args->lr, "Peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", args->min_lr, "Learning rate at the last step (default: lr / 10)");
  sub->add_option("--warmup", args->warmup, "Warm-up steps (default: min(100, steps / 10))");
  sub->add_option("--weight-decay", args->weight_decay,
                  "AdamW decoupled weight decay (not on norms)")
      ->capture_default_str();
  sub->add_option("--perturb", args->perturb,
                  "Position perturbation of the training windows (RoPE only): none, "
                  "randomized:max=M (each window's positions are a sorted random sample below M, "
                  "so longer distances are seen; Ruoss et al. 2023), pose:max=M[,chunks=N] (PoSE: "
                  "the window is cut into N pieces moved apart by random skips, positions below "
                  "M; Zhu et al. 2023). Evaluation uses the true positions")
      ->capture_default_str();
  sub->add_option("--clip", args->clip, "Clip the global gradient norm to this (0: no clipping)")
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Seed of the initialization, the split and the batches")
      ->capture_default_str();
  sub->add_option("--save-every", args->save_every, "Checkpoint every N steps (and at the end)")
      ->capture_default_str();
  sub->add_option("--eval-every", args->eval_every,
                  "Validation loss and accuracy every N steps (0: never)")
      ->capture_default_str();
  sub->add_option("--eval-windows", args->eval_windows, "Held-out windows per validation")
      ->capture_default_str();
  sub->add_option("--log-every", args->log_every, "Progress line every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--valid-fraction", args->valid_fraction,
                  "Fraction of documents held out for validation")
      ->capture_default_str();
  sub->add_option("--threads", args->threads, "Threads (default: all cores)");
  sub->callback([sub, args] { RunTrain(sub, *args); });
}

}  // namespace stretch::cli
