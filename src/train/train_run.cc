#include "src/train/train_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "src/core/dir_lock.h"
#include "src/core/error.h"
#include "src/core/memory.h"
#include "src/core/words.h"
#include "src/io/output_file.h"
#include "src/io/passkey.h"
#include "src/kernels/gemm.h"
#include "src/model/model_arch.h"
#include "src/train/arch_spec.h"
#include "src/train/checkpoint.h"
#include "src/train/copy_data.h"
#include "src/train/positions.h"
#include "src/train/run_dir.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Note = std::function<void(const std::string&)>;

constexpr const char* kCorpusMetadata = "stretch.corpus";
// The copy readout's rows come from Rng(seed ^ this), a stream the batches never use.
constexpr uint64_t kCopyProbeSeed = 0x636f70792d70726fULL;  // "copy-pro"

void Tell(const Note& note, const std::string& line) {
  if (note) note(line);
}

// The options every run needs: a directory, and not both resuming and deleting the run there.
void CheckRunTarget(const TrainRunOptions& o, bool resuming) {
  if (o.out.empty()) Fail("TrainRunOptions::out is required: the directory for checkpoints");
  if (o.overwrite && resuming) {
    Fail(
        "TrainRunOptions::overwrite and TrainRunOptions::resume_from contradict each other: "
        "TrainRunOptions::resume_from continues the run in TrainRunOptions::out, "
        "TrainRunOptions::overwrite deletes it");
  }
}

// Every numeric option within TrainRunLimits, before anything is read or written: a NaN weight
// decay or a negative warm-up is refused here by name, not deep inside the optimizer or never.
// heads, kv_heads and hidden_dim may be 0 ("the default", as StoredRunOptions writes them unset).
void CheckRunOptions(const TrainRunOptions& o) {
  using L = TrainRunLimits;
  const auto whole = [](const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      Fail("TrainRunOptions::{}: found {}, expected a whole number in [{}, {}]", field, v, lo, hi);
    }
  };
  const auto real = [](const char* field, double v, double lo, double hi, bool open_low) {
    if (!(std::isfinite(v) && v >= lo && v <= hi && !(open_low && v == lo))) {
      Fail("TrainRunOptions::{}: found {}, expected a finite number in {}{}, {}]", field, v,
           open_low ? "(" : "[", lo, hi);
    }
  };
  if (o.vocab_size) whole("vocab_size", *o.vocab_size, 260, L::max_vocab);
  if (o.dim) whole("dim", *o.dim, 1, L::max_dim);
  if (o.layers) whole("layers", *o.layers, 1, L::max_layers);
  if (o.heads) whole("heads", *o.heads, 0, L::max_dim);
  if (o.kv_heads) whole("kv_heads", *o.kv_heads, 0, L::max_dim);
  if (o.hidden_dim) whole("hidden_dim", *o.hidden_dim, 0, L::max_hidden);
  if (o.seq_len) whole("seq_len", *o.seq_len, 1, L::max_seq_len);
  whole("steps", o.steps, 1, L::max_steps);
  whole("batch", o.batch, 1, L::max_batch);
  whole("accumulate", o.accumulate, 1, L::max_batch);
  real("lr", o.lr, 0, L::max_lr, true);
  if (o.min_lr) real("min_lr", *o.min_lr, 0, L::max_lr, false);
  if (o.warmup) whole("warmup", *o.warmup, 0, L::max_steps);
  real("weight_decay", o.weight_decay, 0, L::max_weight_decay, false);
  real("clip", o.clip, 0, L::max_clip, false);
  real("valid_fraction", o.valid_fraction, 0, L::max_valid_fraction, true);
  whole("save_every", o.save_every, 1, L::max_steps);
  whole("eval_every", o.eval_every, 0, L::max_steps);
  whole("eval_windows", o.eval_windows, 1, L::max_batch);
  whole("log_every", o.log_every, 1, L::max_steps);
  real("passkey_share", o.passkey_share, 0, L::max_passkey_share, false);
  const CopyMix& m = o.copy_mix;
  for (const CopyMixKind& k : kCopyMixKinds) {
    const double v = m.*k.share;
    if (k.kind != RowKind::kPasskey && !(std::isfinite(v) && v >= 0.0 && v <= 1.0)) {
      Fail("TrainRunOptions::copy_mix: {} share {}: expected a finite number in [0, 1]",
           RowKindName(k.kind), v);
    }
  }
  const double shares = o.passkey_share + (1.0 - m.text()) - m.passkey;
  if (shares > 1.0 + 1e-9) {
    Fail(
        "TrainRunOptions::copy_mix {} with TrainRunOptions::passkey_share {}: the shares add up "
        "to {}, expected at most 1",
        CopyMixText(m), o.passkey_share, shares);
  }
  whole("copy_span_min", o.copy_span_min, 0, L::max_seq_len);
  whole("copy_span_max", o.copy_span_max, 0, L::max_seq_len);
  const size_t letters = o.copy_strings.empty() ? kCopyStringChars.size() : o.copy_strings.size();
  if (o.copy_alphabet_min != 0 &&
      (o.copy_alphabet_min < 2 || o.copy_alphabet_min > static_cast<int64_t>(letters))) {
    Fail(
        "TrainRunOptions::copy_alphabet_min: found {}, expected 0 (off) or 2..{} (the string "
        "alphabet's size)",
        o.copy_alphabet_min, letters);
  }
  for (size_t i = 0; i < o.copy_strings.size(); ++i) {
    const char c = o.copy_strings[i];
    if (c < 0x21 || c > 0x7e || o.copy_strings.find(c) != i) {
      Fail(
          "TrainRunOptions::copy_strings \"{}\": character {} (byte {}): expected distinct "
          "printable ASCII characters, not space",
          o.copy_strings, i + 1, static_cast<int>(static_cast<unsigned char>(c)));
    }
  }
  whole("skip_nonfinite", o.skip_nonfinite, 0, L::max_skip_nonfinite);
  whole("passkey_decoys", o.passkey_decoys, 0, L::max_passkey_decoys);
  if (!o.passkey_filler.empty() && o.passkey_filler != "mixed") {
    Fail("TrainRunOptions::passkey_filler \"{}\": expected \"\" (text) or \"mixed\"",
         o.passkey_filler);
  }
  if (!o.passkey_phrasings.empty() && o.passkey_phrasings != "varied") {
    Fail(
        "TrainRunOptions::passkey_phrasings \"{}\": expected \"\" (stretch's layout) or \"varied\"",
        o.passkey_phrasings);
  }
}

// Why no checkpoint was found, for the message that says so: each file passed over with its
// reason (a damaged file is the common case, and its reason is what the user needs), or that no
// file is named like a checkpoint.
std::string PassedOverText(const std::vector<std::string>& notes) {
  if (notes.empty()) return " (no file named step-NNNNNNNN.safetensors)";
  std::string text = ": every candidate was passed over:";
  for (const std::string& line : notes) text += "\n  " + line;
  return text;
}

// The newest complete checkpoint in dir (newer files that do not read as one are noted and
// passed over), or nullopt when there is none.
std::optional<std::string> NewestCheckpoint(const std::string& dir,
                                            std::vector<std::string>& notes) {
  if (StepFiles(dir).empty()) return std::nullopt;
  try {
    return NewestCheckpointIn(dir, &notes);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// One directory holds one run. Inputs never lie inside `out` (a new run there would replace
// them, `overwrite` would delete them); a directory holding another run is refused unless the
// run is resumed, or `overwrite` asks for its files to be deleted first.
void CheckRunDirectory(const TrainRunOptions& o, bool resuming, const Note& note) {
  std::vector<NamedPath> inputs = {{"TrainRunOptions::data", o.data}};
  if (!resuming) inputs.push_back({"TrainRunOptions::init", o.init});  // resuming reads `out`
  CheckInputsOutside(inputs, {"TrainRunOptions::out", o.out});
  if (resuming) return;
  const RunDirContents held = ScanRunDir(o.out);
  if (!held.HoldsRun()) return;
  if (!o.overwrite) {
    Fail(
        "TrainRunOptions::out {} holds another run ({}): continue it with "
        "TrainRunOptions::resume_from, delete it and start over with TrainRunOptions::overwrite, "
        "or choose another TrainRunOptions::out",
        o.out, held.Describe());
  }
  const int64_t removed = ClearRunDir(o.out);
  Tell(note, fmt::format("TrainRunOptions::overwrite: deleted the earlier run in {} ({}; {} files)",
                         o.out, held.Describe(), removed));
}

// What `init` takes from a checkpoint: the architecture and the tokenizer. (A run started with
// `init` and resumed takes them from the checkpoint it resumes: the very ones it started with,
// and the `init` file need not exist any more.)
struct InitSource {
  std::string path;
  TrainArch arch;
  TrainingTokenizer tokenizer = TrainingTokenizer::Bytes();
  // The checkpoint run's tokenizer option (bytes, bpe, unigram) from its stored options, when it
  // agrees with its tokenizer's kind.
  std::optional<TokenizerKind> tokenizer_option;

  std::string TokenizerText() const {
    return fmt::format("{} tokenizer, vocabulary {}",
                       tokenizer_option ? TokenizerKindName(*tokenizer_option) : tokenizer.kind(),
                       tokenizer.vocab_size());
  }
};

InitSource ReadInitSource(const std::string& path) {
  const SafetensorsFile f(path);
  InitSource s;
  s.path = path;
  s.arch = ReadCheckpointHeader(f).arch;  // a converted checkpoint has no stretch.train
  std::optional<TrainingTokenizer> tok = ReadCheckpointTokenizer(f, s.arch.model.vocab_size);
  if (!tok) {
    Fail(
        "{}: the checkpoint carries no tokenizer (metadata stretch.tokenizer; expected one: "
        "TrainRunOptions::init tokenizes the new data with the checkpoint's own tokenizer)",
        path);
  }
  s.tokenizer = *tok;
  if (const std::optional<std::string> stored = f.FindMetadata("stretch.cli")) {
    const json j = json::parse(*stored, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("tokenizer") && j.at("tokenizer").is_string()) {
      const std::string name = j.at("tokenizer").get<std::string>();
      const bool bytes = s.tokenizer.kind() == "bytes";
      if ((name == "bytes") == bytes && (name == "bytes" || name == "bpe" || name == "unigram")) {
        s.tokenizer_option = ParseTokenizerKind(name);
      }
    }
  }
  return s;
}

// A tokenizer or vocab_size set with `init` must name the checkpoint's tokenizer: a vocabulary
// trained anew on other text would give the same ids other meanings.
void CheckTokenizerOptions(const TrainRunOptions& o, const InitSource& s) {
  const TrainingTokenizer& t = s.tokenizer;
  if (o.tokenizer) {
    const bool same =
        *o.tokenizer == TokenizerKind::kBytes
            ? t.kind() == "bytes"
            : t.kind() != "bytes" && (!s.tokenizer_option || *s.tokenizer_option == *o.tokenizer);
    if (!same) {
      Fail(
          "TrainRunOptions::tokenizer {}: TrainRunOptions::init {} takes the checkpoint's "
          "tokenizer ({}), expected TrainRunOptions::tokenizer to name it or be left out (the new "
          "data is tokenized with the checkpoint's vocabulary, so that every id means what it "
          "meant in training)",
          TokenizerKindName(*o.tokenizer), s.path, s.TokenizerText());
    }
  }
  if (o.vocab_size && *o.vocab_size != t.vocab_size()) {
    Fail(
        "TrainRunOptions::vocab_size {}: TrainRunOptions::init {} takes the checkpoint's "
        "tokenizer ({}), expected TrainRunOptions::vocab_size {} or none",
        *o.vocab_size, s.path, s.TokenizerText(), t.vocab_size());
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
  if (l.log_length_scale) out += "; trained log-n";
  if (l.ssmax) out += "; ssmax";
  return out;
}

// The architecture of the options (a run from scratch); vocab_size is the tokenizer's.
TrainArch ArchFromOptions(const TrainRunOptions& o, int64_t seq_len, int vocab_size) {
  using D = TrainRunDefaults;
  TrainArch arch;
  ModelConfig& m = arch.model;
  const int dim = o.dim.value_or(D::dim);
  const int heads = o.heads.value_or(0), kv_heads = o.kv_heads.value_or(0);
  const int hidden_dim = o.hidden_dim.value_or(0);
  m.dim = dim;
  m.n_layers = o.layers.value_or(D::layers);
  ApplyBlockSpec(o.block.value_or(D::block), arch);
  if (arch.model.Gau()) {
    // One head whose width is the key width; e = 2 dim as in the paper and GAU-alpha.
    if (heads > 1 || kv_heads > 1) {
      Fail(
          "TrainRunOptions::heads {} TrainRunOptions::kv_heads {}: the GAU block has a single "
          "head (its width: TrainRunOptions::block gau:key=S)",
          heads, kv_heads);
    }
    m.hidden_dim = hidden_dim > 0 ? hidden_dim : 2 * dim;
    m.SetGau(m.key_dim);  // R = E / S kernel heads
  } else {
    m.n_heads = heads > 0 ? heads : D::heads;
    m.n_kv_heads = kv_heads > 0 ? kv_heads : m.n_heads;
    m.hidden_dim = hidden_dim > 0 ? hidden_dim : (8 * dim / 3 + 15) / 16 * 16;
  }
  m.vocab_size = vocab_size;
  m.seq_len = static_cast<int>(seq_len);
  m.shared_classifier = false;
  ApplyPositionSpec(o.position.value_or(D::position), arch);
  ApplyAttentionSpec(o.attention.value_or(D::attention), arch);
  return arch;
}

// `init`: the checkpoint's architecture (block, sizes, position, attention, vocabulary), trained
// at seq_len, with the position and attention specs replaced when set. A size or block that is
// set must equal the checkpoint's: its parameters are loaded as they are. `changed` receives a
// line per change.
TrainArch ArchFromInit(const TrainRunOptions& o, int64_t seq_len, const InitSource& s,
                       std::vector<std::string>& changed) {
  TrainArch arch = s.arch;
  ModelConfig& m = arch.model;
  auto same = [&](const char* field, const std::optional<int>& given, int64_t have) {
    if (given && *given != have) {
      Fail(
          "TrainRunOptions::{} {}: the checkpoint {} has {}={} (TrainRunOptions::init keeps the "
          "checkpoint's sizes, whose parameters it loads; expected TrainRunOptions::{} {} or no "
          "TrainRunOptions::{})",
          field, *given, s.path, field, have, field, have, field);
    }
  };
  same("dim", o.dim, m.dim);
  same("layers", o.layers, m.n_layers);
  // The GAU's one head (its R = E / S kernel copies are not an option).
  same("heads", o.heads, m.Gau() ? 1 : m.n_heads);
  same("kv_heads", o.kv_heads, m.Gau() ? 1 : m.n_kv_heads);
  same("hidden_dim", o.hidden_dim, m.hidden_dim);
  if (o.block) {
    TrainArch given = arch;
    ApplyBlockSpec(*o.block, given);
    if (BlockSpecOf(given) != BlockSpecOf(arch)) {
      Fail(
          "TrainRunOptions::block {}: the checkpoint {} has block {} (TrainRunOptions::init keeps "
          "the checkpoint's block, whose parameters it loads; expected TrainRunOptions::block {} "
          "or no TrainRunOptions::block)",
          *o.block, s.path, BlockSpecOf(arch), BlockSpecOf(arch));
    }
  }
  if (m.seq_len != seq_len) changed.push_back(fmt::format("seq_len {} -> {}", m.seq_len, seq_len));
  m.seq_len = static_cast<int>(seq_len);
  if (o.position) {
    const std::string before = PositionSpecOf(arch);
    ApplyPositionSpec(*o.position, arch);
    if (PositionSpecOf(arch) != before) {
      changed.push_back(fmt::format("position {} -> {}", before, PositionSpecOf(arch)));
    }
  }
  if (o.attention) {
    const std::string before = AttentionText(arch);
    ApplyAttentionSpec(*o.attention, arch);
    if (AttentionText(arch) != before) {
      changed.push_back(fmt::format("attention {} -> {}", before, AttentionText(arch)));
    }
  }
  return arch;
}

// Most of a training step is matrix products. They run on oneDNN (src/kernels/gemm.h), which
// picks its kernels from the CPU's feature bits; with STRETCH_GEMM=openblas they run on OpenBLAS,
// and on a CPU with AVX-512 an OPENBLAS_CORETYPE of an AVX2 kernel set (Haswell, Zen) caps every
// product at half the FMA peak (~1.4x slower steps of the 4-layer d = 256 benchmark than with
// SkylakeX's kernels: docs/performance.md). The user's setting is kept (it may be deliberate);
// this says what it costs.
std::optional<std::string> BlasKernelHint() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (ActiveGemmLibrary() != GemmLibrary::kOpenBlas) return std::nullopt;
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (core == nullptr || !__builtin_cpu_supports("avx512f")) return std::nullopt;
  std::string c(core);
  std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (c == avx512) return std::nullopt;
  }
  return fmt::format(
      "this CPU has AVX-512, but OPENBLAS_CORETYPE={} limits OpenBLAS (STRETCH_GEMM=openblas) to "
      "narrower kernels; "
      "try OPENBLAS_CORETYPE=SkylakeX (1.4x faster steps in docs/performance.md's benchmark)",
      core);
#else
  return std::nullopt;
#endif
}

// What a training run holds, estimated from the architecture, before any of it is allocated:
// each parameter four times (value, gradient, AdamW's two moments), and per token of a micro-batch
// what the forward keeps for the backward (TrainActs: per layer the LLaMA block's x, a, q, att,
// x1, f, k, v, lse, g, u, h and the norms' inputs, the GAU's equivalents; the final rows and
// logits), plus one layer's worth for the backward's work. Floats throughout.
struct TrainingMemory {
  int64_t parameters = 0;   // bytes
  int64_t activations = 0;  // bytes, for the whole micro-batch
  int64_t total() const { return parameters + activations; }
};

TrainingMemory EstimateTrainingMemory(const TrainArch& arch, int64_t batch, int64_t seq_len) {
  const ModelConfig& m = arch.model;
  const double C = m.dim, F = m.hidden_dim, KV = m.kv_dim(), H = m.n_heads, V = m.vocab_size;
  const double norms = (m.attention.query_norm ? C : 0) + (m.attention.key_norm ? KV : 0) +
                       (m.attention.ssmax ? C : 0);
  const double per_layer =
      m.Gau() ? 3 * C + 4 * F + 2 * m.key_dim + 1 : 5 * C + 2 * KV + H + 3 * F + norms;
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq_len);
  const double floats = tokens * ((m.n_layers + 1) * per_layer + C + V);
  TrainingMemory t;
  t.parameters = 16 * m.ParameterCount();
  t.activations = static_cast<int64_t>(std::min(4.0 * floats, 9e18));
  return t;
}

// Refuses a run that would not fit in the memory available now, with the estimate and what
// would fit.
void CheckTrainingFits(const TrainArch& arch, int64_t batch, int64_t seq_len) {
  const std::optional<int64_t> avail = AvailableMemoryBytes();
  const TrainingMemory need = EstimateTrainingMemory(arch, batch, seq_len);
  if (!avail || need.total() <= *avail) return;
  const int64_t per_row = EstimateTrainingMemory(arch, 1, seq_len).activations;
  const int64_t rows = (*avail - need.parameters) / std::max<int64_t>(per_row, 1);
  Fail(
      "this run needs about {} of memory, more than the {} available now: {} for the {} "
      "parameters (value, gradient and AdamW's two moments, 4 bytes each) and {} for the "
      "activations of TrainRunOptions::batch {} x TrainRunOptions::seq_len {} tokens; {}",
      HumanBytes(need.total()), HumanBytes(*avail), HumanBytes(need.parameters),
      arch.model.ParameterCount(), HumanBytes(need.activations), batch, seq_len,
      rows >= 1 ? fmt::format("at most TrainRunOptions::batch {} fits at this length (with "
                              "TrainRunOptions::accumulate to keep the tokens per step)",
                              rows)
                : std::string("the parameters alone do not fit: fewer TrainRunOptions::layers "
                              "or a smaller TrainRunOptions::dim"));
}

TrainerOptions TrainerOptionsOf(const TrainRunOptions& o) {
  TrainerOptions t;
  t.batch = o.batch;
  t.accumulate = o.accumulate;
  t.schedule = LrSchedule{o.lr, o.min_lr.value_or(o.lr / 10),
                          o.warmup.value_or(std::min<int64_t>(100, o.steps / 10)), o.steps};
  t.adamw.weight_decay = o.weight_decay;
  t.clip = o.clip;
  t.seed = o.seed;
  t.perturb = ParsePerturbation(o.perturb, "TrainRunOptions::perturb");
  t.skip_nonfinite = o.skip_nonfinite;
  return t;
}

// "N parameters; dim D, L layers, H heads; position P; layers: ..."
std::string ModelBanner(const TrainArch& arch, int64_t n_params) {
  const ModelConfig& m = arch.model;
  const std::string block_text =
      m.Gau() ? fmt::format("GAU blocks (key width {}, expansion {})", m.key_dim, m.hidden_dim)
              : fmt::format("{} heads", m.n_heads);
  const std::string ntk_text =
      arch.rope_ntk != 1.0
          ? fmt::format(" (NTK-aware: RoPE base {} -> {})", arch.rope_ntk_base, m.rope_base)
          : "";
  return fmt::format("{} parameters; dim {}, {} layers, {}; position {}{}; layers: {}{}{}",
                     n_params, m.dim, m.n_layers, block_text, PositionSpecOf(arch), ntk_text,
                     LayoutText(arch), m.attention.key_norm ? "; keynorm" : "",
                     m.attention.query_norm ? "; querynorm" : "");
}

// What a run with `init` took from the checkpoint, and what it changed.
std::string InitSummary(const InitSource& s, const std::vector<std::string>& changed) {
  std::string change_text;
  for (const std::string& c : changed) change_text += (change_text.empty() ? "" : ", ") + c;
  const ModelConfig& f = s.arch.model;
  return fmt::format(
      "TrainRunOptions::init {}: from the checkpoint: {}; block {}, dim {}, {} layers, {} heads "
      "({} kv), hidden {}, position {}, attention {}; changed: {}",
      s.path, s.TokenizerText(), BlockSpecOf(s.arch), f.dim, f.n_layers, f.n_heads, f.n_kv_heads,
      f.hidden_dim, PositionSpecOf(s.arch), AttentionText(s.arch),
      changed.empty() ? std::string("nothing") : change_text);
}

// A run's directory given as `init`: its newest complete checkpoint (the file the run is stored
// as starting from); a file as it is.
std::string InitCheckpointFile(const std::string& init, const Note& note) {
  if (init.empty() || !fs::is_directory(init)) return init;
  std::vector<std::string> skipped;
  const std::optional<std::string> newest = NewestCheckpoint(init, skipped);
  if (!newest) {
    Fail("TrainRunOptions::init {}: no complete checkpoint in this directory{}", init,
         PassedOverText(skipped));
  }
  for (const std::string& line : skipped) Tell(note, line);
  return *newest;
}

// The init checkpoint's architecture and tokenizer (a resumed run's: of the checkpoint it
// resumes), with what they resolve in the options: the checkpoint's tokenizer and, when unset,
// its seq_len.
std::optional<InitSource> ReadInit(TrainRunOptions& o, bool resuming) {
  if (o.init.empty()) return std::nullopt;
  InitSource init = ReadInitSource(resuming ? o.resume_from : o.init);
  if (!resuming) {
    CheckTokenizerOptions(o, init);
    // The stored options name the tokenizer the run really uses.
    if (init.tokenizer_option) o.tokenizer = init.tokenizer_option;
    if (init.tokenizer.kind() != "bytes") o.vocab_size = init.tokenizer.vocab_size();
  }
  // No seq_len set: the checkpoint's (a fine-tune usually sets a longer one).
  if (!o.seq_len) o.seq_len = init.arch.model.seq_len;
  return init;
}

// The fingerprint of the corpus a checkpoint's run was trained on (metadata stretch.corpus), or
// nullopt for checkpoints written before runs stored one.
std::optional<TokenFingerprint> StoredCorpus(const SafetensorsFile& f, const std::string& path) {
  const std::optional<std::string> stored = f.FindMetadata(kCorpusMetadata);
  if (!stored) return std::nullopt;
  const json j = json::parse(*stored, nullptr, /*allow_exceptions=*/false);
  TokenFingerprint c;
  const bool ok = j.is_object() && j.contains("documents") && j["documents"].is_number_integer() &&
                  j.contains("tokens") && j["tokens"].is_number_integer() && j.contains("hash") &&
                  j["hash"].is_string();
  if (ok) {
    c.documents = j["documents"].get<int64_t>();
    c.tokens = j["tokens"].get<int64_t>();
    const std::string hex = j["hash"].get<std::string>();
    const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), c.hash, 16);
    if (ec == std::errc() && end == hex.data() + hex.size() && hex.size() == 16) return c;
  }
  Fail(
      "{}: metadata {}: found {}, expected {{\"documents\": N, \"tokens\": N, \"hash\": 16 hex "
      "digits}}",
      path, kCorpusMetadata, *stored);
}

// The run's checkpoint extras: the tokenizer, the resolved options and the corpus's fingerprint.
CheckpointExtras ExtrasOf(const TrainRunOptions& resolved, const TrainingTokenizer& tokenizer,
                          const TokenFingerprint& corpus) {
  CheckpointExtras extras;
  extras.metadata[kCorpusMetadata] = json{
      {"documents", corpus.documents},
      {"tokens", corpus.tokens},
      {"hash", fmt::format("{:016x}",
                           corpus.hash)}}.dump();
  extras.tokenizer_model = tokenizer.model();
  extras.metadata["stretch.tokenizer"] = json{
      {"kind", std::string(tokenizer.kind())},
      {"vocab_size", tokenizer.vocab_size()},
      {"bos", tokenizer.bos_id()}}.dump();
  extras.metadata["stretch.cli"] = StoredRunOptions(resolved).dump();
  if (!resolved.build.empty()) extras.metadata["stretch.build"] = resolved.build;
  return extras;
}

}  // namespace

json StoredRunOptions(const TrainRunOptions& o) {
  using D = TrainRunDefaults;
  json j = {{"data", o.data},
            {"tokenizer", std::string(TokenizerKindName(o.tokenizer.value_or(D::tokenizer)))},
            {"vocab_size", o.vocab_size.value_or(D::vocab_size)},
            {"block", o.block.value_or(D::block)},
            {"position", o.position.value_or(D::position)},
            {"attention", o.attention.value_or(D::attention)},
            {"seq_len", o.seq_len.value_or(D::seq_len)},
            {"steps", o.steps},
            {"batch", o.batch},
            {"warmup", o.warmup.value_or(-1)},
            {"save_every", o.save_every},
            {"eval_every", o.eval_every},
            {"eval_windows", o.eval_windows},
            {"log_every", o.log_every},
            {"dim", o.dim.value_or(D::dim)},
            {"layers", o.layers.value_or(D::layers)},
            {"heads", o.heads.value_or(0)},
            {"kv_heads", o.kv_heads.value_or(0)},
            {"hidden_dim", o.hidden_dim.value_or(0)},
            {"accumulate", o.accumulate},
            {"lr", o.lr},
            {"min_lr", o.min_lr.value_or(-1.0)},
            {"weight_decay", o.weight_decay},
            {"clip", o.clip},
            {"valid_fraction", o.valid_fraction},
            {"seed", o.seed},
            {"init", o.init},
            {"perturb", o.perturb}};
  if (o.passkey_share != 0.0) j["passkey_share"] = o.passkey_share;
  if (o.bos_rows) j["bos_rows"] = true;
  if (o.skip_nonfinite != 0) j["skip_nonfinite"] = o.skip_nonfinite;
  if (o.copy_mix.HasCopy()) j["mix"] = CopyMixText(o.copy_mix);
  if (o.copy_span_min != 0) j["copy_span_min"] = o.copy_span_min;
  if (o.copy_span_max != 0) j["copy_span_max"] = o.copy_span_max;
  if (o.copy_alphabet_min != 0) j["copy_alphabet_min"] = o.copy_alphabet_min;
  if (!o.copy_strings.empty()) j["copy_strings"] = o.copy_strings;
  if (!o.passkey_phrasings.empty()) j["passkey_phrasings"] = o.passkey_phrasings;
  if (!o.passkey_filler.empty()) j["passkey_filler"] = o.passkey_filler;
  if (o.passkey_decoys != 0) j["passkey_decoys"] = o.passkey_decoys;
  return j;
}

TrainResume ReadTrainResume(const TrainRunOptions& options) {
  CheckRunTarget(options, /*resuming=*/true);
  TrainResume r;
  const std::optional<std::string> newest = NewestCheckpoint(options.out, r.notes);
  if (!newest) {
    Fail("TrainRunOptions::resume_from: no complete checkpoint in {}{}", options.out,
         PassedOverText(r.notes));
  }
  r.checkpoint = *newest;
  const SafetensorsFile f(r.checkpoint);
  const std::optional<std::string> stored = f.FindMetadata("stretch.cli");
  if (!stored) Fail("{}: has no stored arguments (stretch.cli) to resume with", r.checkpoint);
  r.stored = json::parse(*stored, nullptr, /*allow_exceptions=*/false);
  if (!r.stored.is_object()) {
    Fail("{}: stretch.cli: found {}, expected a JSON object of the run's options", r.checkpoint,
         r.stored.is_discarded() ? std::string("text that is not JSON") : r.stored.type_name());
  }
  return r;
}

TrainArch RunArchitecture(const TrainRunOptions& options, int vocab_size) {
  CheckRunOptions(options);  // the ranges before any size is used (layers: the layer list)
  TrainArch arch =
      ArchFromOptions(options, options.seq_len.value_or(TrainRunDefaults::seq_len), vocab_size);
  FinalizeArch(arch);
  ValidateArch(arch);
  return arch;
}

int64_t PasskeyRowMinLength(const TrainingTokenizer& tokenizer, std::string_view phrasings) {
  const TextEncoder plain = [&](std::string_view text) { return tokenizer.Encode(text); };
  int64_t shortest = PasskeyMinCtx(EncodePasskeyPieces(plain));
  if (phrasings == "varied") {
    for (const PasskeyFormat& f : VariedPasskeyFormats()) {
      shortest = std::max(shortest, PasskeyMinCtx(EncodePasskeyPieces(plain, f)));
    }
  }
  return shortest;
}

void CheckPasskeyRowsFit(const TrainRunOptions& o, int64_t seq_len,
                         const TrainingTokenizer& tokenizer) {
  if (!(o.passkey_share > 0.0)) return;
  const bool varied = o.passkey_phrasings == "varied";
  const int64_t shortest = PasskeyRowMinLength(tokenizer, o.passkey_phrasings);
  if (seq_len < shortest) {
    Fail(
        "TrainRunOptions::seq_len {}: too short for passkey documents "
        "(TrainRunOptions::passkey_share {}{}): the needle, the question, the key {} and a few "
        "filler tokens need TrainRunOptions::seq_len >= {} with this tokenizer",
        seq_len, o.passkey_share, varied ? ", TrainRunOptions::passkey_phrasings varied" : "",
        varied ? "two or three times" : "twice", shortest);
  }
}

TrainLoopResult RunTraining(const TrainRunOptions& options, const TrainRunCallbacks& callbacks) {
  const Note& note = callbacks.note;
  const bool resuming = !options.resume_from.empty();
  CheckRunTarget(options, resuming);
  if (options.data.empty()) {
    Fail("TrainRunOptions::data is required: a text file or a directory of *.txt files");
  }
  CheckRunOptions(options);
  TrainRunOptions o = options;  // resolved below: init, tokenizer, vocab_size, seq_len
  if (!resuming) {
    o.init = InitCheckpointFile(o.init, note);
    // Stored as absolute paths, so that the run resumes on the same files from any directory.
    o.data = fs::absolute(o.data).lexically_normal().string();
    if (!o.init.empty()) o.init = fs::absolute(o.init).lexically_normal().string();
  }
  if (!resuming && o.init.empty()) {
    // A run from scratch: its architecture and memory are known before any file is written
    // (checked again below with the tokenizer's real vocabulary).
    const TokenizerKind kind = o.tokenizer.value_or(TrainRunDefaults::tokenizer);
    const int vocab = kind == TokenizerKind::kBytes
                          ? TrainingTokenizer::Bytes().vocab_size()
                          : o.vocab_size.value_or(TrainRunDefaults::vocab_size);
    const int64_t seq_len = o.seq_len.value_or(TrainRunDefaults::seq_len);
    TrainArch arch = ArchFromOptions(o, seq_len, vocab);
    FinalizeArch(arch);
    ValidateArch(arch);
    CheckTrainingFits(arch, o.batch, seq_len);
  }
  // One process at a time in a run's folder (src/core/dir_lock.h), locked before anything is
  // written or cleared there: two runs started together into one empty folder both passed the
  // "holds another run" check and wrote over each other's checkpoints.
  std::error_code exists_ec;
  const bool made_out = !fs::exists(o.out, exists_ec);
  fs::create_directories(o.out);
  const DirLock lock(DirLock::PathIn(o.out), "TrainRunOptions::out " + o.out);
  if (lock.takeover_note()) Tell(note, *lock.takeover_note());
  try {
    CheckRunDirectory(o, resuming, note);
  } catch (const Error&) {
    if (made_out) {  // a refusal leaves no folder behind
      fs::remove(lock.path(), exists_ec);
      fs::remove(o.out, exists_ec);
    }
    throw;
  }
  for (const std::string& path : RemoveStalePartialFiles(o.out)) {
    Tell(note, fmt::format("removed {}: the partial file of a write that was killed", path));
  }
  const std::optional<InitSource> init = ReadInit(o, resuming);
  const int64_t seq_len = o.seq_len.value_or(TrainRunDefaults::seq_len);

  // Data: tokenizer, cache next to the checkpoints, split by document.
  DataOptions dopt;
  dopt.corpus.path = o.data;
  dopt.tokenizer.kind = o.tokenizer.value_or(TrainRunDefaults::tokenizer);
  dopt.tokenizer.vocab_size = o.vocab_size.value_or(TrainRunDefaults::vocab_size);
  dopt.cache_path = (fs::path(o.out) / kTokenCacheName).string();
  // A resumed run reads its corpus with its own tokenizer and refuses another corpus (before the
  // token cache is touched); a checkpoint from before runs stored the corpus is not checked.
  std::optional<TrainingTokenizer> run_tokenizer;
  if (resuming) {
    const SafetensorsFile f(o.resume_from);
    dopt.expected = StoredCorpus(f, o.resume_from);
    if (!dopt.expected) {
      Tell(note, fmt::format("{} stores no corpus fingerprint (written before they were): the "
                             "corpus in TrainRunOptions::data {} is taken as the run's own",
                             o.resume_from, o.data));
    }
    if (!init) {
      ModelConfig header = ReadCheckpointHeader(f).arch.model;
      run_tokenizer = ReadCheckpointTokenizer(f, header.vocab_size);
    }
  }
  const CorpusData data = init            ? LoadCorpusData(dopt, init->tokenizer)
                          : run_tokenizer ? LoadCorpusData(dopt, *run_tokenizer)
                                          : LoadCorpusData(dopt);
  const std::string tokenizer_text =
      init ? "the checkpoint's " + init->TokenizerText()
           : fmt::format("{} tokenizer, vocabulary {}", TokenizerKindName(dopt.tokenizer.kind),
                         data.tokenizer.vocab_size());
  Tell(note,
       fmt::format("{}, {} ({}; cache {})", Counted(data.documents.size(), "document"),
                   Counted(data.documents.n_tokens(), "token"), tokenizer_text, data.cache_note));
  // Passkey documents, with the run's tokenizer.
  PasskeyPieces passkey;
  std::vector<PasskeyPieces> passkey_variants;  // --passkey-phrasings varied
  if (o.passkey_share > 0.0) {
    const TextEncoder plain = [&](std::string_view text) { return data.tokenizer.Encode(text); };
    passkey = EncodePasskeyPieces(plain);
    if (o.passkey_phrasings == "varied") {
      for (const PasskeyFormat& f : VariedPasskeyFormats()) {
        passkey_variants.push_back(EncodePasskeyPieces(plain, f));
      }
    }
    CheckPasskeyRowsFit(o, seq_len, data.tokenizer);
  }
  // Copy documents and the readout's alphabets and spans, with the run's tokenizer.
  // Mid-text tokens: a SentencePiece tokenizer encodes a character alone with its dummy-prefix
  // space, one token that every character would then share (and the alphabets could not be
  // disjoint), where the rows put the characters side by side as in a word.
  const TextEncoder encode =
      MidTextEncoder([&](std::string_view text) { return data.tokenizer.Encode(text); });
  const CopySpans defaults = DefaultCopySpans(seq_len);
  const CopySpans spans{o.copy_span_min != 0 ? o.copy_span_min : defaults.min,
                        o.copy_span_max != 0 ? o.copy_span_max : defaults.max};
  const bool spans_set = o.copy_span_min != 0 || o.copy_span_max != 0;
  if (o.copy_mix.HasCopy() || spans_set) {
    CheckCopySpans(
        spans, seq_len,
        fmt::format("TrainRunOptions::copy_span_min {}, TrainRunOptions::copy_span_max {}",
                    spans.min, spans.max));
  }
  std::optional<CopyAlphabets> alphabets;
  if (o.copy_mix.NeedsAlphabets()) {
    alphabets = EncodeCopyAlphabets(
        encode, o.copy_strings.empty()
                    ? kCopyStringChars
                    : std::string_view(o.copy_strings));  // refused here: the run needs them
  } else if (o.eval_every > 0) {
    try {
      alphabets = EncodeCopyAlphabets(
          encode, o.copy_strings.empty() ? kCopyStringChars : std::string_view(o.copy_strings));
    } catch (const Error& e) {
      Tell(note, fmt::format("no copy readout at the evaluations: {}", e.what()));
    }
  }
  SplitOptions sopt;
  sopt.valid_fraction = o.valid_fraction;
  sopt.seed = o.seed;
  const DataSplit split = SplitDocuments(data.documents, sopt);
  const WindowSampler sampler(split.train, seq_len);  // refuses documents all too short
  const std::vector<Window> valid = ValidationWindows(split.valid, seq_len, TailWindow::kDrop);
  const Entropy entropy = UnigramEntropy(split.train, data.tokenizer.vocab_size());

  // Architecture: from the options, or from the init checkpoint (a resumed init run: exactly the
  // one it started with, which LoadCheckpointInto compares with the file anyway).
  std::vector<std::string> changed;
  TrainArch arch = !init      ? ArchFromOptions(o, seq_len, data.tokenizer.vocab_size())
                   : resuming ? init->arch
                              : ArchFromInit(o, seq_len, *init, changed);
  FinalizeArch(arch);  // NTK's base, at the final sizes
  ValidateArch(arch);
  CheckTrainingFits(arch, o.batch, seq_len);
  Trainer trainer(arch, TrainerOptionsOf(o));
  int64_t n_params = 0;
  for (const Param& p : trainer.registry().params()) n_params += p.numel();
  Tell(note, ModelBanner(arch, n_params));
  if (init && !resuming) Tell(note, InitSummary(*init, changed));
  Tell(note,
       fmt::format("unigram entropy of the training tokens: {:.3f} nats/token", entropy.nats));
  if (const std::optional<std::string> hint = BlasKernelHint()) Tell(note, "note: " + *hint);
  if (resuming) {
    LoadCheckpointInto(trainer, SafetensorsFile(o.resume_from));
    // A consistent checkpoint under another step's name (renamed, or copied over another) would
    // resume the run at a step its name, its log and the files beside it disagree with.
    const int64_t named = StepOfFileName(fs::path(o.resume_from).filename().string());
    if (named >= 0 && named != trainer.step()) {
      Fail("{}: named step {} but holds step {} (tensor {}): renamed or copied from another step",
           o.resume_from, named, trainer.step(), kCheckpointStepTensor);
    }
    Tell(note, fmt::format("resumed from {} at step {}", o.resume_from, trainer.step()));
    if (o.steps < trainer.step()) {
      Fail(
          "TrainRunOptions::steps {}: the run in {} is already at step {} ({}); expected "
          "TrainRunOptions::steps >= {} to continue it",
          o.steps, o.out, trainer.step(), o.resume_from, trainer.step());
    }
  } else if (init) {
    LoadParamsInto(trainer, SafetensorsFile(o.init));
    Tell(note, fmt::format("parameters initialized from {}", o.init));
  }

  TrainLoopOptions loop;
  loop.out = o.out;
  loop.steps = o.steps;
  loop.eval_every = o.eval_every;
  loop.eval_windows = o.eval_windows;
  loop.log_every = o.log_every;
  loop.save_every = o.save_every;
  loop.extras = ExtrasOf(o, data.tokenizer, FingerprintOf(data.documents));
  TrainingData training{&split, &sampler, valid};
  training.bos = data.tokenizer.bos_id();
  if (o.bos_rows) {
    STRETCH_CHECK(training.bos >= 0, "a training tokenizer has a BOS (TrainingTokenizer::Load)");
    training.bos_rows = true;
    Tell(note, "TrainRunOptions::bos_rows: every training row begins with BOS");
  } else if (o.passkey_share > 0.0 || o.copy_mix.HasCopy()) {
    Tell(note,
         "TrainRunOptions::bos_rows is off: the passkey and synthetic copy rows begin with BOS, "
         "the text rows do not, so the model may take BOS as the sign of a synthetic row and "
         "predict text scored after BOS worse (docs/training.md, sixteenth round)");
  }
  if (o.copy_mix.HasCopy()) {
    training.copy_mix = o.copy_mix;
    training.copy_mix.passkey = 0.0;  // passkey_share's
    if (alphabets) training.alphabets = *alphabets;
    training.alphabets.draw_min = o.copy_alphabet_min;  // the training rows' only
    training.spans = spans;
    Tell(note, fmt::format("TrainRunOptions::copy_mix {}: those shares of the training rows are "
                           "copy documents of {} tokens, strings of {}..{} tokens",
                           CopyMixText(o.copy_mix), seq_len + 1, spans.min, spans.max));
  }
  // The readout: held-out text windows (never trained on) and its own seed (never the batches').
  if (o.eval_every > 0 && alphabets && 2 * spans.max <= seq_len - 1) {
    std::vector<std::vector<int>> windows;
    for (const Window& w : valid) {
      if (static_cast<int64_t>(windows.size()) == o.eval_windows) break;
      const std::span<const int> t =
          split.valid.Document(w.document)
              .subspan(static_cast<size_t>(w.offset), static_cast<size_t>(seq_len + 1));
      windows.emplace_back(t.begin(), t.end());
    }
    if (windows.size() < 2) windows.clear();  // a control needs another window than its row's
    const PasskeyPieces pieces = o.passkey_share > 0.0 ? passkey : EncodePasskeyPieces(encode);
    training.probe = MakeCopyProbe(*alphabets, spans, training.bos, seq_len, o.eval_windows,
                                   windows, &pieces, o.seed ^ kCopyProbeSeed);
  }
  if (o.passkey_share > 0.0) {
    training.passkey_share = o.passkey_share;
    training.passkey = passkey;
    training.passkey_variants = passkey_variants;
    training.passkey_repeated_filler = o.passkey_filler == "mixed";
    training.passkey_decoys = o.passkey_decoys;
    if (o.passkey_decoys > 0) {
      training.decoys =
          EncodePasskeyDecoys([&](std::string_view text) { return data.tokenizer.Encode(text); });
    }
    Tell(note,
         fmt::format("TrainRunOptions::passkey_share {}: that share of the training rows are "
                     "passkey documents of {} tokens{}{}{}",
                     o.passkey_share, seq_len + 1,
                     passkey_variants.empty()
                         ? ""
                         : fmt::format(", each in one of {} phrasings", passkey_variants.size()),
                     o.passkey_filler == "mixed"
                         ? ", half of them with a block of text repeated as their filler"
                         : "",
                     o.passkey_decoys > 0
                         ? fmt::format(", up to {} decoy sentence(s) in each", o.passkey_decoys)
                         : ""));
  }
  return RunTrainingLoop(trainer, training, loop, callbacks.progress);
}

}  // namespace stretch
