// A whole training run from one options struct: the run's directory checked (one run per
// directory), the text read and tokenized (the token cache lives in the directory), the
// architecture built from the specs and sizes or taken from a checkpoint to fine-tune (`init`),
// the trainer's options with their defaults, the checkpoint to continue from loaded
// (`resume_from`), then the loop of src/train/run.h. `stretch train` (tools/cli/train.cc) maps its
// flags onto these options; anything else that trains (the lab) calls the same.
//
// Errors name the options' fields ("TrainRunOptions::seq_len 100000: ..."); the CLI writes the
// flag that sets each field in its place (tools/cli/common.h, WithFlagNames).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/training_tokenizer.h"
#include "src/train/run.h"

namespace stretch {

// What an unset option of TrainRunOptions stands for in a run from scratch (with `init`, the
// checkpoint's value instead).
struct TrainRunDefaults {
  static constexpr TokenizerKind tokenizer = TokenizerKind::kBytes;
  static constexpr int vocab_size = 4096;
  static constexpr const char* block = "llama";
  static constexpr const char* position = "rope";
  static constexpr const char* attention = "full";
  static constexpr int dim = 128;
  static constexpr int layers = 4;
  static constexpr int heads = 4;
  static constexpr int64_t seq_len = 128;
};

// The range of each numeric option (RunTraining refuses a value outside it, naming the option and
// the range, before it reads anything; `stretch train` checks its flags against the same). The
// upper bounds are far beyond what a CPU trains, and are there to refuse a typo or an overflow,
// not a size: whether a model fits is the memory estimate's to say (TrainingMemory).
struct TrainRunLimits {
  static constexpr int64_t max_vocab = 1 << 20;  // kTokenCacheMaxVocab's order; its own check
  static constexpr int64_t max_seq_len = 1 << 24;
  static constexpr int64_t max_steps = 1'000'000'000'000;
  static constexpr int64_t max_batch = 1 << 24;  // batch, accumulate and eval_windows
  static constexpr int64_t max_dim = 1 << 16;    // dim, heads and kv_heads
  static constexpr int64_t max_hidden = 1 << 20;
  static constexpr int64_t max_layers = 1 << 16;
  static constexpr double max_lr = 1e3;
  static constexpr double max_weight_decay = 1e3;
  static constexpr double max_clip = 1e30;
  static constexpr double max_valid_fraction = 0.99;
  static constexpr double max_passkey_share = 0.5;
  static constexpr int max_passkey_decoys = 4;
  static constexpr int64_t max_threads = 4096;
  static constexpr int64_t max_skip_nonfinite = 1000;
};

struct TrainRunOptions {
  std::string data;  // training text: a file, or a directory of *.txt files (one document each)
  std::string out;   // the run's directory: checkpoints, tokens.cache, train_log.jsonl
  // A checkpoint, or a run's directory (its newest complete checkpoint), to fine-tune from: its
  // parameters, its tokenizer (the data is tokenized with it) and its architecture. "": none.
  std::string init;
  // A checkpoint of the run in `out` to continue from, bit for bit, with the options the run
  // was started with (ReadTrainResume finds the newest one and those options). "": a new run.
  std::string resume_from;
  // Delete the run `out` holds (ClearRunDir) and start a new one there. Without it a new run
  // into a directory that holds another is refused.
  bool overwrite = false;
  // The build that trains (`stretch --version`'s id; the command sets it): each checkpoint names
  // it in its metadata (stretch.build), so that a model says which build wrote it. Not one of the
  // options a resumed run must match (StoredRunOptions leaves it out): a run continued by a later
  // build names that build in the checkpoints it writes. "": none written.
  std::string build;

  // Unset: TrainRunDefaults; with `init`, the checkpoint's. With `init` a tokenizer, vocab_size,
  // block or size that is set must equal the checkpoint's (its parameters are loaded as they
  // are); a position or attention spec that is set replaces the checkpoint's.
  std::optional<TokenizerKind> tokenizer;  // bytes, or a SentencePiece tokenizer trained on data
  std::optional<int> vocab_size;           // of a bpe / unigram tokenizer
  std::optional<std::string> block;        // block spec (src/train/arch_spec.h)
  std::optional<std::string> position;     // position spec
  std::optional<std::string> attention;    // attention spec: logits and layer layout
  std::optional<int> dim;                  // model width
  std::optional<int> layers;               // blocks
  std::optional<int> heads;                // unset or 0: 4 (the GAU block has one)
  std::optional<int> kv_heads;             // unset or 0: heads
  // Unset or 0: SwiGLU width 8/3 dim rounded up to 16; GAU expansion width 2 dim.
  std::optional<int> hidden_dim;
  std::optional<int64_t> seq_len;  // training length L: tokens per window

  std::string perturb = "none";   // position perturbation spec (src/train/positions.h)
  int64_t steps = 2000;           // optimizer steps of the whole run
  int64_t batch = 16;             // windows per micro-batch
  int accumulate = 1;             // micro-batches per optimizer step
  double lr = 1e-3;               // peak learning rate
  std::optional<double> min_lr;   // at the last step (cosine); unset: lr / 10
  std::optional<int64_t> warmup;  // linear warm-up steps; unset: min(100, steps / 10)
  double weight_decay = 0.1;      // AdamW's decoupled weight decay
  double clip = 1.0;              // global gradient norm clip; 0: none
  double valid_fraction = 0.1;    // share of the documents held out for validation
  uint64_t seed = 1;              // initialization, split and batches
  int64_t save_every = 500;       // a checkpoint every this many steps (and at the last)
  int64_t eval_every = 100;       // validation every this many steps; 0: never
  int64_t eval_windows = 64;      // held-out windows per validation
  int64_t log_every = 10;         // TrainProgress::report every this many steps
  // Share of the training rows, in [0, 0.5], replaced by passkey documents of the training length
  // (src/io/passkey.h: a random number hidden in training text and asked for at the end; the rule
  // in src/train/run.h, TrainingData). 0: none, and the batches are those of a run without it.
  // Needs seq_len >= PasskeyMinCtx (61 with the bytes tokenizer).
  double passkey_share = 0.0;
  // Shares of the training rows, with passkey_share adding up to at most 1, replaced by synthetic
  // copy documents of the training length (src/train/copy_data.h: periodic and gapped random
  // strings, textcopy spans pasted inside training text), so that small models learn to copy.
  // Its `passkey` member is unused (passkey_share is the passkey share). None: the batches are
  // those of a run without it.
  CopyMix copy_mix;
  // Every training row begins with BOS: a text window's first token is replaced by it, so a row
  // reads BOS and the T tokens after it, as `stretch score` feeds a window (BOS, then the text).
  // The passkey and synthetic copy rows always begin with BOS; without this the text rows almost
  // never do (a window starts at a random place in its document), and a model learns BOS as the
  // sign of a synthetic row: scored after BOS, it expects a copy or a question at the end of its
  // window and predicts plain text there worse than anywhere else (docs/training.md, sixteenth
  // round). false: the windows as they are (runs from before it existed).
  bool bos_rows = false;
  // The copied strings' lengths in tokens; 0: DefaultCopySpans (T/16 and 5T/16).
  int64_t copy_span_min = 0;
  int64_t copy_span_max = 0;
  // 0: the copy rows' strings draw from the whole string alphabet. k in [2, 26]: each periodic or
  // gapped training row draws from a random subset of k..26 letters (CopyAlphabets::draw_min), so
  // that finding a copy's source needs several tokens matched, as in prose. The readout's rows
  // keep the whole alphabet.
  int64_t copy_alphabet_min = 0;
  // The characters of the copy rows' strings (CopyAlphabets::string); "": kCopyStringChars, the
  // 26 lowercase letters. Must share no token with the gap alphabet (kCopyGapChars), e.g.
  // "abcdefghijklmnopqrstuvwxyz0123456789" to copy digits too, as a passkey's key is.
  std::string copy_strings;
  // How the passkey documents are phrased: "" stretch's own layout in every one (runs before this
  // option), "varied" each drawn from VariedPasskeyFormats (src/io/passkey.h), so that the model
  // learns to retrieve a key rather than one phrase.
  std::string passkey_phrasings;
  // The passkey documents' filler: "" the text window (runs before this option), "mixed" half of
  // them a block of the window, 16 to 3T/8 tokens, repeated to fill the row, as llama.cpp's
  // llama-passkey repeats its five junk sentences (TrainingData::passkey_repeated_filler).
  std::string passkey_filler;
  // Decoys written over each passkey document's filler (AddPasskeyDecoys, src/io/passkey.h):
  // sentences shaped like the needle with another noun and number, " The door is 48213. ", so that
  // the key is found by the question's words rather than by "a number follows". 0: none (runs
  // before this option). At most TrainRunLimits::max_passkey_decoys.
  int passkey_decoys = 0;
  // Batches with a non-finite loss or gradient that one step may pass over, drawing the next one
  // instead (TrainerOptions::skip_nonfinite); then the run stops with the tensors named. 0: the
  // first one stops the run.
  int skip_nonfinite = 0;
};

// The options as each checkpoint stores them (metadata stretch.cli), so that the run can be
// repeated: keys are the long flags of `stretch train` with '_' for '-', an unset option is
// written as its default (negative for min_lr and warmup: "the default"). RunTraining stores the
// resolved options: `init` the checkpoint file, and with `init` the checkpoint's tokenizer and
// its seq_len when none is set. passkey_share, bos_rows, skip_nonfinite, copy_span_min,
// copy_span_max, copy_alphabet_min, copy_strings, passkey_phrasings, passkey_filler and
// passkey_decoys are written only when not 0, and copy_mix (as "mix", CopyMixText) only when it has copy rows, so
// that the stored options of runs without them are those of runs from before they existed (a
// resumed run whose stored options lack one resumes with 0 / none).
nlohmann::json StoredRunOptions(const TrainRunOptions& options);

// Where a run stands: its newest complete checkpoint and the options stored in it.
struct TrainResume {
  std::string checkpoint;
  nlohmann::json stored;           // StoredRunOptions of the run, as the checkpoint holds them
  std::vector<std::string> notes;  // newer files passed over as incomplete, one line each
};

// The newest complete checkpoint in options.out, and its stored options. Refuses what RunTraining
// would refuse of a resumed run first (no `out`, `overwrite`), a directory without a complete
// checkpoint, and a checkpoint without stored options.
TrainResume ReadTrainResume(const TrainRunOptions& options);

struct TrainRunCallbacks {
  // Lines for a person, in order, before the first step: newer checkpoints passed over, a run
  // deleted by `overwrite`, the data, the parameter count and architecture, what `init` took
  // from its checkpoint and what changed, the unigram entropy, a note on the BLAS kernels, where
  // the run resumed or was initialized from.
  std::function<void(const std::string&)> note;
  std::function<void(const TrainProgress&)> progress;  // every step (RunTrainingLoop)
};

// The architecture a run from scratch with these options builds for a tokenizer of `vocab_size`
// tokens (finalized and validated): what RunTraining trains, without reading any data.
TrainArch RunArchitecture(const TrainRunOptions& options, int vocab_size);

// The shortest row a passkey document fits in with this tokenizer and passkey_phrasings ("" or
// "varied": the longest of the phrasings): PasskeyMinCtx (src/io/passkey.h).
int64_t PasskeyRowMinLength(const TrainingTokenizer& tokenizer, std::string_view phrasings);

// Throws stretch::Error when the run has passkey documents (passkey_share > 0) and rows of
// `seq_len` tokens cannot hold one with this tokenizer and its passkey_phrasings (the needle, the
// question, the key two or three times and a few filler tokens: PasskeyMinCtx, src/io/passkey.h;
// 61 with the bytes tokenizer and stretch's own layout). RunTraining checks it once the tokenizer
// is known; the lab checks it before planning where the tokenizer is bytes.
void CheckPasskeyRowsFit(const TrainRunOptions& options, int64_t seq_len,
                         const TrainingTokenizer& tokenizer);

// Prepares the run and trains it to `steps`. Throws stretch::Error naming the field and value
// at fault, or through the data, the specs, the trainer and the checkpoints.
TrainLoopResult RunTraining(const TrainRunOptions& options,
                            const TrainRunCallbacks& callbacks = {});

}  // namespace stretch
