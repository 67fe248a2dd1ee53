#include "tools/cli/common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include <filesystem>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/threads.h"
#include "src/eval/rotation.h"
#include "src/io/llama2c.h"
#include "src/io/model_file.h"
#include "src/model/family.h"
#include "src/model/transformer.h"
#include "src/position/plan.h"

namespace stretch::cli {

void AddCacheTypeOptions(CLI::App* app, CacheTypeArgs& args) {
  app->add_option("--cache-type", args.both,
                  "How the KV cache stores keys and values: f32 (exact, the default), f16 or bf16 "
                  "(16-bit floats, half the memory: each key and value rounded to nearest once, "
                  "then widened back to float32 for attention, one layer at a time)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app->add_option("--cache-type-k", args.k, "The keys' type alone (-ctk, llama.cpp's flag)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app->add_option("--cache-type-v", args.v, "The values' type alone (-ctv, llama.cpp's flag)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
}

KvCacheTypes ResolveCacheTypes(const CacheTypeArgs& args) {
  if (!args.both.empty() && (!args.k.empty() || !args.v.empty())) {
    Fail("--cache-type {} with -ctk / -ctv: give one or the other", args.both);
  }
  const auto type = [](const std::string& name, const char* flag) {
    if (name.empty()) return KvCacheType::kF32;
    const std::optional<KvCacheType> t = ParseKvCacheType(name);
    if (!t) Fail("{} {}: expected f32, f16 or bf16", flag, name);
    return *t;
  };
  if (!args.both.empty()) {
    const KvCacheType t = type(args.both, "--cache-type");
    return {t, t};
  }
  return {type(args.k, "-ctk"), type(args.v, "-ctv")};
}

void AddModelOptions(CLI::App* app, ModelArgs& args, bool tokenizer_needed) {
  app->add_option(
         "--model,-m", args.model,
         fmt::format("The model: a llama2.c checkpoint (legacy or version 1 export, e.g. "
                     "../shared/models/stories260K/stories260K.bin, with --tokenizer), a stretch "
                     "checkpoint written by `stretch train` (OUT/step-NNNNNNNN.safetensors: it "
                     "carries its own tokenizer and attention layout), a training run's "
                     "directory OUT (its newest complete checkpoint), a GGUF file of the {} "
                     "architecture (llama.cpp's format; F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, "
                     "Q6_K tensors, "
                     "its own vocabulary or --tokenizer for text), or a Hugging Face folder "
                     "(config.json of {}, and safetensors). The format is told by the file's "
                     "content",
                     KnownGgufArchitectures(), KnownHfArchitectures()))
      ->required();
  app->add_option("--tokenizer,-t", args.tokenizer,
                  std::string("Tokenizer file for a llama2.c or GGUF model, told by content: "
                              "llama2.c's (tok512.bin, tokenizer.bin), a SentencePiece "
                              "tokenizer.model, or a Hugging Face tokenizer.json of byte-level "
                              "BPE (GPT-2's kind); its vocabulary size must equal the model's. ") +
                      (tokenizer_needed ? "Required for llama2.c models; " : "") +
                      "refused with a stretch checkpoint, which has its own");
  app->add_option("--threads", args.threads, "Threads to use (default: all cores)")
      ->check(Whole(0, TrainRunLimits::max_threads));
}

WeightStorage WeightStorageOf(const std::string& weights) {
  return weights == "stored" ? WeightStorage::kAsStored : WeightStorage::kFloat32;
}

void AddWeightStorageOption(CLI::App* app, std::string& weights) {
  weights = "stored";
  app->add_option(
         "--weights", weights,
         "How a GGUF model's or a Hugging Face folder's weight matrices are held in "
         "memory. stored (default): a GGUF file's F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and "
         "Q6_K matrices stay as the file stores them, read where the file is mapped, "
         "and an HF folder's F16 and BF16 ones likewise where its safetensors files "
         "are mapped (2 bytes a weight); the products decode them as they go, so a run takes about "
         "the file's size plus the KV cache. f32: every tensor converted to float32 "
         "when the model loads (4 bytes per weight; the exact path that stretch's tests "
         "check). As llama.cpp does, decode on Q8_0, Q4_K and Q6_K matrices multiplies x "
         "quantized to 8 bits per block, and every product on BF16 matrices x "
         "rounded to bfloat16 (faster; each product moves by about 0.2-0.5%); the other "
         "products agree with f32 within float32 rounding. Environment "
         "STRETCH_PACKED_DOT=float for float products everywhere, int8 for the rounded x "
         "everywhere it applies. Other model formats load as float32 either way")
      ->check(CLI::IsMember({"stored", "f32"}));
}

ModelHeader ReadModelHeader(const std::string& model) {
  CheckRegularInputOrDirectory(model, kModelInputKind, "--model");
  std::vector<std::string> notes;
  ModelHeader h = ReadModelFileHeader(model, &notes);
  for (const std::string& line : notes) fmt::print(stderr, "model: {}\n", line);
  return h;
}

Loaded LoadModel(const ModelArgs& args, bool tokenizer_needed) {
  if (args.threads > 0) SetNumThreads(args.threads);
  CheckRegularInputOrDirectory(args.model, kModelInputKind, "--model");
  // A missing tokenizer is left to the loader: with a model that carries its own, the flag
  // itself is what is refused.
  if (!args.tokenizer.empty() && !InputKindOf(args.tokenizer).empty()) {
    CheckRegularInput(args.tokenizer, kTokenizerInputKind, "--tokenizer");
  }
  std::vector<std::string> notes;
  Loaded loaded = LoadModelFile(
      args.model, {args.tokenizer, tokenizer_needed, WeightStorageOf(args.weights)}, &notes);
  for (const std::string& line : notes) fmt::print(stderr, "model: {}\n", line);
  return loaded;
}

void AddOldName(CLI::App* app, CLI::Option* canonical, const std::string& old_name) {
  const std::string now = canonical->get_name();
  app->add_option(
         old_name,
         [canonical, old_name, now](const CLI::results_t& results) {
           // The canonical option is registered first, so its own values are in by now.
           if (canonical->count() > 0) {
             throw CLI::ValidationError(
                 old_name, fmt::format("the former name of {}; give one of them, not both", now));
           }
           fmt::print(stderr, "note: {} is now {}; {} will be removed in a later release\n",
                      old_name, now, old_name);
           canonical->add_result(results);
           canonical->run_callback();  // its checks (ranges, numbers) as if it had been typed
           return true;
         },
         "")
      ->expected(1)
      ->allow_extra_args(false)
      ->group("");  // hidden: --help shows the new name, whose description mentions the old
}

void Warn(std::string_view line) { fmt::print(stderr, "warning: {}\n", line); }

std::string DidYouMean(std::string_view word, const std::vector<std::string>& names) {
  // Levenshtein distance, one row at a time.
  const auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  // A beginning of exactly one name, of 2 letters or more ("sc" for score; "t" begins three).
  const std::string* begun = nullptr;
  size_t begins = 0;
  for (const std::string& name : names) {
    if (word.size() >= 2 && name.starts_with(word)) {
      begun = &name;
      ++begins;
    }
  }
  if (begins == 1) return fmt::format(" (did you mean \"{}\"?)", *begun);
  const size_t allowed = word.size() <= 4 ? 1 : 2;
  const std::string* best = nullptr;
  size_t best_distance = allowed + 1;
  for (const std::string& name : names) {
    const size_t d = distance(word, name);
    if (d < best_distance) {
      best = &name;
      best_distance = d;
    }
  }
  return best == nullptr ? "" : fmt::format(" (did you mean \"{}\"?)", *best);
}

void NoteMethodCaveats(const ModelConfig& config, std::span<const SweepCell> cells) {
  std::map<size_t, const SweepCell*> longest;  // by method
  for (const SweepCell& c : cells) {
    const SweepCell*& l = longest[c.method];
    if (l == nullptr || c.ctx > l->ctx) l = &c;
  }
  for (const auto& [method, cell] : longest) {
    const std::string note = DoubleLogNNote(config, cell->plan);
    if (!note.empty()) fmt::print(stderr, "note: {}\n", note);
    const std::string yarn = YarnOutsideItsRegimeNote(ModelGeometry(config), cell->plan);
    if (!yarn.empty()) fmt::print(stderr, "note: {} at {}: {}\n", cell->resolved, cell->ctx, yarn);
    for (const auto& [l, m] : cell->plan.layer_methods) {  // --layer-method: each layer's own
      const RopeGeometry geo = LayerGeometry(config, l);
      const AttentionPlan own = MakeAttentionPlan(m, geo, cell->plan.fed_len);
      const std::string twice = DoubleLogNNote(config, own);
      if (!twice.empty()) fmt::print(stderr, "note: layer {}'s own method: {}\n", l, twice);
      const std::string outside = YarnOutsideItsRegimeNote(geo, own);
      if (!outside.empty()) {
        fmt::print(stderr, "note: layer {}'s own method {} at {}: {}\n", l,
                   CanonicalSpec(own.method), cell->ctx, outside);
      }
    }
  }
}

std::string CanonicalSpecWithLayers(const SweepMethod& m) {
  std::string out = CanonicalSpec(m.method);
  for (const auto& [l, own] : m.layer_methods) {
    out += fmt::format(" [layer {}: {}]", l, CanonicalSpec(own));
  }
  return out;
}

std::string WithFlagNames(std::string message) {
  // Longer names first where one is a prefix of another (none today; kept in that order).
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"ModelFileOptions::tokenizer_path", "--tokenizer"},
      {"ScoreOptions::max_windows", "--windows"},
      {"ScoreOptions::stride", "--stride"},
      {"ScoreOptions::bucket", "--bucket"},
      {"ScoreOptions::tail", "--tail"},
      {"ScoreOptions::ctx", "--ctx"},
      {"PlanSweep contexts", "--ctx"},
      {"PlanSweep methods", "--method"},
      {"position spec", "--position"},  // stretch train's specs (src/train/arch_spec.h)
      {"attention spec", "--attention"},
      {"block spec", "--block"},
      {"TrainerOptions::schedule.lr", "--lr"},
      // stretch train (src/train/train_run.h): each field as its flag
      {"TrainRunOptions::data", "--data"},
      {"TrainRunOptions::out", "--out"},
      {"LabOptions::out", "--out"},
      {"LabOptions::train_len", "--train-len"},
      {"TrainRunOptions::init", "--init"},
      {"TrainRunOptions::resume_from", "--resume"},
      {"TrainRunOptions::overwrite", "--overwrite"},
      {"TrainRunOptions::tokenizer", "--tokenizer"},
      {"TrainRunOptions::vocab_size", "--vocab-size"},
      {"TrainRunOptions::block", "--block"},
      {"TrainRunOptions::position", "--position"},
      {"TrainRunOptions::attention", "--attention"},
      {"TrainRunOptions::dim", "--dim"},
      {"TrainRunOptions::layers", "--layers"},
      {"TrainRunOptions::heads", "--heads"},
      {"TrainRunOptions::kv_heads", "--kv-heads"},
      {"TrainRunOptions::hidden_dim", "--hidden-dim"},
      {"TrainRunOptions::seq_len", "--train-len"},
      {"TrainRunOptions::perturb", "--perturb"},
      {"TrainRunOptions::steps", "--steps"},
      {"TrainRunOptions::batch", "--batch"},
      {"TrainRunOptions::accumulate", "--accumulate"},
      {"TrainRunOptions::min_lr", "--min-lr"},
      {"TrainRunOptions::lr", "--lr"},
      {"TrainRunOptions::warmup", "--warmup"},
      {"TrainRunOptions::weight_decay", "--weight-decay"},
      {"TrainRunOptions::clip", "--clip"},
      {"TrainRunOptions::valid_fraction", "--valid-fraction"},
      {"TrainRunOptions::seed", "--seed"},
      {"TrainRunOptions::save_every", "--save-every"},
      {"TrainRunOptions::eval_every", "--eval-every"},
      {"TrainRunOptions::eval_windows", "--eval-windows"},
      {"TrainRunOptions::log_every", "--log-every"},
      {"TrainRunOptions::passkey_share", "--passkey-share"},
      {"TrainRunOptions::bos_rows", "--bos-rows"},
      {"TrainRunOptions::copy_mix", "--mix"},
      {"TrainRunOptions::copy_span_min", "--copy-span-min"},
      {"TrainRunOptions::copy_span_max", "--copy-span-max"},
      {"TrainRunOptions::copy_alphabet_min", "--copy-alphabet-min"},
      {"TrainRunOptions::copy_strings", "--copy-strings"},
      {"TrainRunOptions::passkey_phrasings", "--passkey-phrasings"},
      {"TrainRunOptions::passkey_filler", "--passkey-filler"},
      {"TrainRunOptions::passkey_decoys", "--passkey-decoys"},
      {"TrainRunOptions::skip_nonfinite", "--skip-nonfinite"},
      {"TrainerOptions::skip_nonfinite", "--skip-nonfinite"},
  };
  for (const auto& [field, flag] : kFlags) {
    for (size_t at = message.find(field); at != std::string::npos;
         at = message.find(field, at + flag.size())) {
      message.replace(at, field.size(), flag);
    }
  }
  return message;
}

namespace {

// The integer a flag's text names, as a whole decimal number ("+7", "-3", "0042"), or nullopt
// with `why` set. CLI11 reads integers with strtoll's base 0 (so "010" would be 8 and "0x10" 16)
// and clamps what overflows; the text is rewritten here to plain decimal digits, which CLI11 then
// reads as written.
std::optional<int64_t> WholeNumber(std::string& text, bool is_unsigned, std::string& why) {
  std::string_view t = text;
  bool negative = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    negative = t[0] == '-';
    t.remove_prefix(1);
  }
  if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    why = "a whole number written in decimal digits";
    return std::nullopt;
  }
  while (t.size() > 1 && t[0] == '0') t.remove_prefix(1);
  if (is_unsigned) {
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || (negative && v != 0)) {
      why = fmt::format("a whole number in [0, {}]", std::numeric_limits<uint64_t>::max());
      return std::nullopt;
    }
    text = std::string(t);
    return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(v);
  }
  const std::string digits = (negative ? "-" : "") + std::string(t);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    why = fmt::format("a whole number in [{}, {}]", std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::max());
    return std::nullopt;
  }
  text = digits;
  return v;
}

std::optional<double> FiniteNumber(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string RangeText(double lo, double hi, bool open_low) {
  const auto bound = [](double x) {
    return std::isinf(x) ? std::string(x < 0 ? "-inf" : "inf") : fmt::format("{}", x);
  };
  return fmt::format("{}{}, {}]", open_low ? "(" : "[", bound(lo), bound(hi));
}

}  // namespace

CLI::Validator Whole(int64_t lo, int64_t hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::string given = text;
        std::string why;
        const std::optional<int64_t> v = WholeNumber(text, lo >= 0, why);
        if (!v || *v < lo || *v > hi) {
          return fmt::format("found {}, expected a whole number in {}", given, range);
        }
        return "";
      },
      range, "whole number in " + range);
}

CLI::Validator Real(double lo, double hi, bool open_low) {
  const std::string range = RangeText(lo, hi, open_low);
  return CLI::Validator(
      [lo, hi, open_low, range](std::string& text) -> std::string {
        const std::optional<double> v = FiniteNumber(text);
        if (!v || *v < lo || *v > hi || (open_low && *v == lo)) {
          return fmt::format("found {}, expected a finite number in {}", text, range);
        }
        return "";
      },
      range, "finite number in " + range);
}

void AddNumberChecks(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const auto starts = [&](std::string_view prefix) { return type.rfind(prefix, 0) == 0; };
    if (starts("UINT") || starts("INT")) {
      const bool is_unsigned = starts("UINT");
      opt->check(CLI::Validator(
          [is_unsigned](std::string& text) -> std::string {
            const std::string given = text;
            std::string why;
            if (!WholeNumber(text, is_unsigned, why)) {
              return fmt::format("found {}, expected {}", given, why);
            }
            return "";
          },
          "", "whole number"));
    } else if (starts("FLOAT")) {
      opt->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (!FiniteNumber(text)) return fmt::format("found {}, expected a finite number", text);
            return "";
          },
          "", "finite number"));
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) AddNumberChecks(*sub);
}

namespace {

constexpr const char* kMethodExamples =
    "e.g. direct (plain RoPE), pi:factor=4, ntk, yarn:factor=8,beta_fast=32, dynamic-yarn, "
    "llama3, rerope:window=256, leaky-rerope:window=256,k=4, self-extend:group=8,window=128, "
    "self-extend (by default the neighbour window is L/4 and the group the smallest that lands "
    "the farthest keys less than 2L/3 back, rounded down, the authors' empirical rule; no group "
    "within L; reach=0.75 for 3L/4, reach=1 for the smallest group that stays inside L), "
    "window:window=256, "
    "lambda:sinks=4,window=384, blockwise (XPOS's "
    "blockwise causal mask), "
    "string, dca, streaming:sinks=4,window=508 (StreamingLLM's cache positions), "
    "nbce:beta=0.25,pool=entropy (naive-Bayes context extension: the context read as chunks "
    "that each fit the trained length; score needs --tail, generate --context); add +logn for "
    "log-n scaling (on a model trained with log-n it multiplies the model's own factor again: "
    "score says so in a note). A factor left out is the call's s = context / "
    "trained length. An unknown name or key lists the allowed ones";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A piece of a --methods list that begins a method: its text before the first ':' or '+' is a
// word (starts with a letter) with no '='.
bool StartsMethod(std::string_view piece) {
  const std::string_view head = piece.substr(0, piece.find_first_of(":+"));
  return !head.empty() && std::isalpha(static_cast<unsigned char>(head.front())) &&
         head.find('=') == std::string_view::npos;
}

}  // namespace

std::vector<std::string> SplitMethodList(std::string_view list) {
  std::vector<std::string> specs;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string_view piece = Trim(list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (piece.empty()) {
      Fail(
          "--methods \"{}\": empty method spec between commas (expected a list such as "
          "direct,yarn:factor=4,beta_fast=32,pi)",
          list);
    }
    if (specs.empty() || StartsMethod(piece)) {
      specs.emplace_back(piece);
    } else {
      specs.back() += ",";
      specs.back() += piece;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return specs;
}

void AddMethodOptions(CLI::App* app, MethodArgs& args, bool several) {
  const std::string spec_help =
      several
          ? std::string(
                "Position method(s) (default: the one the model file asks for, such as a GGUF "
                "file's YaRN settings, else direct). A comma list, or the flag repeated, scores "
                "every method at every --ctx and prints one table (rows methods, columns "
                "lengths). Specs hold commas themselves, so a comma starts a new method only "
                "when the text after it begins with a method name (a word with no '=' before "
                "the next ':' or '+'); key=value pieces continue the method before them: "
                "`direct,yarn:factor=4,beta_fast=32,pi` is three methods. Specs: ") +
                kMethodExamples
          : std::string(
                "Position method as a spec name[:key=value,...][+logn] (default: the one the "
                "model file asks for, such as a GGUF file's YaRN settings, else direct). ") +
                kMethodExamples;
  args.method_option =
      app->add_option(several ? "--method,--methods" : "--method", args.specs, spec_help);
  args.method_option->allow_extra_args(false);
  if (!several) args.method_option->expected(1);

  // Each llama.cpp flag reads into a plain value and, when given, copies it into its field of
  // LlamaCppRopeFlags (CLI11 2.1 has no std::optional options).
  const std::string llama = "llama.cpp's flag (instead of --method): ";
  auto add = [&](const char* name, auto& value, auto field, const std::string& help) {
    CLI::Option* o = app->add_option(name, value, llama + help);
    args.llama_options.push_back({o, [&value, field](LlamaCppRopeFlags& f) { f.*field = value; }});
  };
  using F = LlamaCppRopeFlags;
  add("--rope-scaling", args.rope_scaling, &F::rope_scaling,
      "frequency scaling: none, linear or yarn");
  add("--rope-scale", args.rope_scale, &F::rope_scale, "context scale factor s (linear and yarn)");
  add("--rope-freq-base", args.rope_freq_base, &F::rope_freq_base,
      "RoPE base (default: the model's)");
  add("--rope-freq-scale", args.rope_freq_scale, &F::rope_freq_scale,
      "1/s, another way to give the scale");
  add("--yarn-orig-ctx", args.yarn_orig_ctx, &F::yarn_orig_ctx,
      "YaRN's original context (default: the trained length)");
  add("--yarn-ext-factor", args.yarn_ext_factor, &F::yarn_ext_factor,
      "YaRN extrapolation mix (-1 or 1: HF's YaRN)");
  add("--yarn-attn-factor", args.yarn_attn_factor, &F::yarn_attn_factor,
      "YaRN attention factor multiplier");
  add("--yarn-beta-fast", args.yarn_beta_fast, &F::yarn_beta_fast, "YaRN beta_fast (default 32)");
  add("--yarn-beta-slow", args.yarn_beta_slow, &F::yarn_beta_slow, "YaRN beta_slow (default 1)");
  add("--grp-attn-n", args.grp_attn_n, &F::grp_attn_n, "Self-Extend group size G");
  add("--grp-attn-w", args.grp_attn_w, &F::grp_attn_w, "Self-Extend neighbour window W");
  args.hf_option = app->add_option(
      "--rope-scaling-json", args.hf_json,
      "An HF transformers `rope_scaling` object as JSON (instead of --method), e.g. "
      "'{\"rope_type\":\"yarn\",\"factor\":4}'");
  args.stream_option = app->add_option(
      "--stream-cache", args.stream_cache,
      "Endless text with bounded memory (StreamingLLM, instead of --method): `sinks=S,window=W` "
      "keeps the first S tokens (the attention sinks) and the last W in the KV cache and numbers "
      "them by their place in it, so no position reaches S + W however long the text grows. "
      "Plain RoPE otherwise. Defaults: S = 4, W = trained length - S; `--stream-cache default` "
      "takes both. The same as --method streaming:sinks=S,window=W");
  if (several) {
    app->add_option(
        "--layer-method", args.layer_methods,
        "L=SPEC: layer L (counted from 0) runs SPEC instead of each --method, every other layer "
        "the method; repeat it for more layers. A diagnostic of where a method acts: on the "
        "quick lab's 2-layer models YaRN in layer 0 alone costs the far copy that ReRoPE there "
        "keeps, YaRN in layer 1 costs nothing (docs/training.md, thirty-fifth round). Only "
        "full-attention RoPE layers take one; rows are labelled \"METHOD [layer L: SPEC]\"");
  }
}

namespace {

// --layer-method L=SPEC values, parsed: (L, ParseMethod(SPEC)). Throws stretch::Error naming the
// value for a missing or non-numeric L, a negative one, or a bad SPEC.
std::vector<std::pair<int, Method>> LayerMethodsFromArgs(const MethodArgs& args) {
  std::vector<std::pair<int, Method>> out;
  for (const std::string& value : args.layer_methods) {
    const size_t eq = value.find('=');
    const std::string layer = value.substr(0, eq);
    char* end = nullptr;
    const long l = std::strtol(layer.c_str(), &end, 10);
    if (eq == std::string::npos || layer.empty() || *end != '\0' || l < 0 || l > 1000000) {
      Fail("--layer-method {}: expected L=SPEC, L a layer index from 0 (e.g. 0=rerope)", value);
    }
    try {
      out.emplace_back(static_cast<int>(l), ParseMethod(value.substr(eq + 1)));
    } catch (const Error& e) {
      Fail("--layer-method {}: {}", value, e.what());
    }
  }
  return out;
}

}  // namespace

std::vector<SweepMethod> MethodsFromArgs(const MethodArgs& args, const ModelHeader* model) {
  std::vector<std::string> sources;
  if (args.method_option != nullptr && args.method_option->count() > 0) {
    sources.push_back(args.method_option->get_name());
  }
  LlamaCppRopeFlags llama;
  bool llama_given = false;
  for (const auto& [option, set] : args.llama_options) {
    if (option->count() == 0) continue;
    if (!llama_given) sources.push_back(option->get_name());
    llama_given = true;
    set(llama);
  }
  if (args.hf_option != nullptr && args.hf_option->count() > 0) {
    sources.push_back(args.hf_option->get_name());
  }
  const bool stream_given = args.stream_option != nullptr && args.stream_option->count() > 0;
  if (stream_given) sources.push_back(args.stream_option->get_name());
  if (sources.size() > 1) {
    Fail(
        "{} and {} both select the position method (allowed: one source: --method SPEC, "
        "llama.cpp's --rope-*/--yarn-*/--grp-attn-* flags, --rope-scaling-json, or "
        "--stream-cache)",
        sources[0], sources[1]);
  }
  std::vector<SweepMethod> methods;
  if (stream_given) {
    const std::string spec =
        args.stream_cache == "default" ? "streaming" : "streaming:" + args.stream_cache;
    Method m;
    try {
      m = ParseMethod(spec);
    } catch (const Error& e) {
      Fail("--stream-cache {}: {} (allowed: sinks=S,window=W, either may be left out, or default)",
           args.stream_cache, e.what());
    }
    methods.push_back({spec, std::move(m)});
  } else if (llama_given) {
    const Method m = MethodFromLlamaCpp(llama);
    methods.push_back({CanonicalSpec(m), m});
  } else if (args.hf_option != nullptr && args.hf_option->count() > 0) {
    const Method m = MethodFromHfRopeScaling(args.hf_json);
    methods.push_back({CanonicalSpec(m), m});
  } else if (!args.specs.empty()) {
    for (const std::string& value : args.specs) {
      for (std::string& spec : SplitMethodList(value)) {
        methods.push_back(ParseSweepMethod(std::move(spec)));
      }
    }
  } else if (model != nullptr && !model->method_spec.empty()) {
    Method m;
    try {
      m = ParseMethod(model->method_spec);
    } catch (const Error& e) {
      Fail("{}: the method its {} asks for: {}", model->path, model->method_source, e.what());
    }
    fmt::print(stderr, "method: {} (the model file's own: {}); --method direct runs plain RoPE\n",
               model->method_spec, model->method_source);
    methods.push_back({model->method_spec, std::move(m)});
  } else {
    methods.push_back({"direct", Method{}});
  }
  const std::vector<std::pair<int, Method>> layers = LayerMethodsFromArgs(args);
  for (SweepMethod& m : methods) {
    for (size_t k = 0; k < layers.size(); ++k) {
      m.spec += fmt::format(" [layer {}: {}]", layers[k].first,
                            args.layer_methods[k].substr(args.layer_methods[k].find('=') + 1));
    }
    m.layer_methods = layers;
  }
  return methods;
}

SweepMethod OneMethodFromArgs(const MethodArgs& args, std::string_view command,
                              const ModelHeader* model) {
  std::vector<SweepMethod> methods = MethodsFromArgs(args, model);
  if (methods.size() != 1) {
    std::string names;
    for (const SweepMethod& m : methods) names += (names.empty() ? "" : "; ") + m.spec;
    Fail(
        "--method: {} runs one method, found {} ({}) (allowed: one spec; `score --methods` "
        "compares several)",
        command, methods.size(), names);
  }
  return std::move(methods.front());
}

RopeGeometry GeometryOf(const ModelConfig& config) {
  return RopeGeometry{config.seq_len, config.head_dim(), static_cast<double>(config.rope_base),
                      static_cast<double>(config.rope_interpolation)};
}

}  // namespace stretch::cli
