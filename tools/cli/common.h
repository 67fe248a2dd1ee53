// Pieces shared by the subcommands of the `stretch` command.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/memory.h"
#include "src/eval/sweep.h"
#include "src/io/model_file.h"
#include "src/io/text.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/config.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "src/position/plan.h"    // kMaxContext
#include "src/train/train_run.h"  // TrainRunLimits

namespace stretch::cli {

struct ModelArgs {
  std::string model;
  std::string tokenizer;
  int threads = 0;  // 0: all cores
  // --weights (AddWeightStorageOption): "stored" or "f32"; commands without the flag load float32.
  std::string weights = "f32";
};

// --model, --tokenizer and --threads, with their help text. --model takes a llama2.c .bin file
// (with --tokenizer), a stretch checkpoint (step-NNNNNNNN.safetensors from `stretch train`, which
// carries its own tokenizer: --tokenizer is then refused), or a run's directory (its newest
// complete checkpoint). `tokenizer_needed`: the command needs text (generate) — a llama2.c model
// without --tokenizer is then an error.
void AddModelOptions(CLI::App* app, ModelArgs& args, bool tokenizer_needed);
// --weights stored|f32 for the commands that only run the model (score, generate, tune, bench):
// how a GGUF file's matrices are held. Sets `weights` to "stored", the default of those commands.
void AddWeightStorageOption(CLI::App* app, std::string& weights);
WeightStorage WeightStorageOf(const std::string& weights);

// --cache-type (keys and values alike) and llama.cpp's -ctk / -ctv (each on its own): f32, f16
// or bf16 (src/model/transformer.h's KvCacheType).
struct CacheTypeArgs {
  std::string both, k, v;
};
void AddCacheTypeOptions(CLI::App* app, CacheTypeArgs& args);
// The types asked for (float32 where nothing is given); throws stretch::Error for an unknown name
// or --cache-type given with -ctk / -ctv.
KvCacheTypes ResolveCacheTypes(const CacheTypeArgs& args);

// What --model names, from its header alone (src/io/model_file.h); notes on skipped newer
// checkpoints of a directory go to stderr.
using ModelHeader = ModelFileHeader;
ModelHeader ReadModelHeader(const std::string& model);

using Loaded = LoadedModel;
// Loads the model (and its tokenizer: --tokenizer for llama2.c files, the checkpoint's own for
// stretch checkpoints), checks that their vocabularies agree and applies --threads. With
// `tokenizer_needed`, a model without a tokenizer is an error. Throws stretch::Error with the
// file, field, found and expected values.
Loaded LoadModel(const ModelArgs& args, bool tokenizer_needed);

// One name for one idea across the subcommands (issue 40): a name that changed stays for one
// release as a hidden alias of the new one. `old_name` (e.g. "--corpus") is left out of --help
// and feeds `canonical`, which then counts as given; using it prints a note on stderr naming the
// new spelling ("note: --corpus is now --data; --corpus will be removed in a later release").
// Giving both is an error. Register it after `canonical`.
void AddOldName(CLI::App* app, CLI::Option* canonical, const std::string& old_name);

// " (did you mean \"score\"?)" for the one name of `names` that `word` begins (2 letters or more),
// else the nearest (edit distance, a typo's at most: 1 up to 4 letters, 2 beyond); "" for none.
std::string DidYouMean(std::string_view word, const std::vector<std::string>& names);

// A flag that has no effect in the combination given: one line "warning: ..." on stderr, and the
// run goes on (a flag that would mislead the result is refused instead, not warned about).
void Warn(std::string_view line);

// For each method of `cells` whose +logn doubles the model's trained log-n beyond L
// (DoubleLogNNote), or that is YaRN on a model trained too short for its ramp
// (YarnOutsideItsRegimeNote), one line "note: ..." on stderr, at its longest context; the same for
// each layer's own method (--layer-method).
void NoteMethodCaveats(const ModelConfig& config, std::span<const SweepCell> cells);

// CanonicalSpec of the method, then " [layer L: SPEC]" for each layer's own (--layer-method): the
// JSON reports' "canonical".
std::string CanonicalSpecWithLayers(const SweepMethod& m);

// The library's errors name the fields of its options (e.g. "ScoreOptions::tail: found 40,
// expected 1..32"); the command sets those fields from flags. This writes each field the message
// names as the flag that sets it ("--tail: found 40, expected 1..32"); other text is unchanged.
std::string WithFlagNames(std::string message);

// What each input flag expects, for the checks every command makes on its input paths before
// any work (src/core/input_file.h: a device, a FIFO or a socket is refused by name).
inline constexpr const char* kTextInputKind = "a text file or a directory of *.txt files";
inline constexpr const char* kModelInputKind =
    "a model file (llama2.c, GGUF or stretch checkpoint) or a directory (a Hugging Face folder or "
    "a training run)";
inline constexpr const char* kTokenizerInputKind =
    "a tokenizer file (llama2.c's tok512.bin, a SentencePiece tokenizer.model or a "
    "tokenizer.json)";

// How --method applies to a trained model's layers (src/model/transformer.h), for --help.
inline constexpr const char* kTrainedLayoutMethodRule =
    "How a method applies to a trained layout: layers trained with a window keep that window and "
    "plain RoPE (no method, no +logn: their distances never exceed the window); full-attention "
    "RoPE layers take the method as it is; full-attention layers without RoPE (NoPE, ALiBi, "
    "KERPLE) take the method's mask (window, lambda, blockwise) and +logn and keep their bias. A "
    "method that changes RoPE (pi, ntk, yarn, llama3, longrope, dynamic-*, rerope, "
    "leaky-rerope, self-extend, string, dca, direct:base=B) is refused on a model with no "
    "full-attention RoPE layer, and on a mixed model changes its full-attention RoPE layers "
    "only.";

using stretch::HumanBytes;  // src/core/memory.h

// Numeric flags. Every number a user types is checked before any work, with the allowed range in
// the error ("--steps: found -3, expected a whole number in [1, 1000000000000]"):
//   Whole(lo, hi)         an integer in [lo, hi], written as one (no "1e3", no "7.5"); values
//                         beyond the option's own type are refused too, never clamped.
//   Real(lo, hi, open)    a finite number in [lo, hi] (or (lo, hi] with `open_low`); NaN and
//                         infinities are refused.
// AddNumberChecks walks every option of every subcommand once they are registered and refuses
// what no number of the option's type can be: NaN or an infinity for a FLOAT, a sign or an
// overflow for an INT or UINT (CLI11 would clamp 99999999999999999999 to the type's largest
// value, and read -1 as 18446744073709551615 for a UINT). Ranges proper are the options' own.
CLI::Validator Whole(int64_t lo, int64_t hi);
CLI::Validator Real(double lo, double hi, bool open_low = false);
void AddNumberChecks(CLI::App& app);

// The position method, from exactly one of three sources:
//   --method SPEC (stretch's spec, src/position/method.h; `score` also takes --methods and lists),
//   llama.cpp's flags (--rope-scaling, --rope-scale, --rope-freq-base, --rope-freq-scale,
//     --yarn-orig-ctx, --yarn-ext-factor, --yarn-attn-factor, --yarn-beta-fast, --yarn-beta-slow,
//     --grp-attn-n, --grp-attn-w),
//   an HF `rope_scaling` object (--rope-scaling-json '{"rope_type":"yarn","factor":4}').
// Default: `direct`.
struct MethodArgs {
  std::vector<std::string> specs;  // every --method / --methods value, as given
  std::string hf_json;             // --rope-scaling-json
  // llama.cpp's flags, read into plain values; the Option pointers tell which were given.
  std::string rope_scaling;
  double rope_scale = 0, rope_freq_base = 0, rope_freq_scale = 0, yarn_ext_factor = 0,
         yarn_attn_factor = 0, yarn_beta_fast = 0, yarn_beta_slow = 0;
  int64_t yarn_orig_ctx = 0, grp_attn_n = 0, grp_attn_w = 0;
  CLI::Option* method_option = nullptr;
  CLI::Option* hf_option = nullptr;
  std::string stream_cache;  // --stream-cache sinks=S,window=W
  CLI::Option* stream_option = nullptr;
  std::vector<std::string> layer_methods;  // --layer-method L=SPEC, as given (score only)
  // llama.cpp's flags with what copies each into LlamaCppRopeFlags when given.
  std::vector<std::pair<CLI::Option*, std::function<void(LlamaCppRopeFlags&)>>> llama_options;
};

// Registers the three sources on `app`. With `several` (score), --method and --methods take
// lists and may be repeated; otherwise one method.
void AddMethodOptions(CLI::App* app, MethodArgs& args, bool several);

// Splits a --methods list into specs. Specs contain commas themselves (yarn:factor=4,beta_fast=32),
// so a comma starts a new method only when the piece after it begins with a method name: its text
// before the first ':' or '+' starts with a letter and holds no '='. Every other piece (key=value)
// continues the spec before it. Throws stretch::Error on an empty piece.
std::vector<std::string> SplitMethodList(std::string_view list);

// The methods the flags select (parsed; not yet checked against a model or a context: see
// PlanSweep / Transformer::SetMethod). Throws stretch::Error naming both flags when more than one
// source is given, and ParseMethod's / MethodFromLlamaCpp's / MethodFromHfRopeScaling's errors.
// With none of the three given, the method the model file asks for (`model`: its header's
// method_spec, e.g. a GGUF file's YaRN keys; a note on stderr says so and how to run plain RoPE),
// else `direct`. A source the user gives replaces the file's method whole (it is not merged with
// it, unlike llama.cpp's flags, which override one field each).
std::vector<SweepMethod> MethodsFromArgs(const MethodArgs& args,
                                         const ModelHeader* model = nullptr);
// The same for commands that run one method; more than one is an error.
SweepMethod OneMethodFromArgs(const MethodArgs& args, std::string_view command,
                              const ModelHeader* model = nullptr);

// What a model brings to the frequency math (as Transformer::Geometry), from its header alone.
RopeGeometry GeometryOf(const ModelConfig& config);

// The subcommands; each registers itself on `app` and runs when selected.
void RegisterGenerate(CLI::App& app);
void RegisterScore(CLI::App& app);
void RegisterInspect(CLI::App& app);
void RegisterBench(CLI::App& app);
void RegisterTrain(CLI::App& app);
void RegisterLab(CLI::App& app);
void RegisterReport(CLI::App& app);
void RegisterTune(CLI::App& app);
void RegisterTokenize(CLI::App& app);
void RegisterConvert(CLI::App& app);
void RegisterConformance(CLI::App& app);

// The commit this binary was built from, as `git describe --always --dirty` gave it at build time
// (cmake/build_id.cmake), or a phrase saying the sources were not a git checkout.
const char* BuildId();

}  // namespace stretch::cli
