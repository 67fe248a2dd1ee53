// A trained model at inference: the checkpoint's parameters run by src/model's Transformer must
// give the logits the trainer's forward gives (TrainTransformer<float, KernelAttention>), for every
// position scheme, logit variant and layer layout, in every inference path (one prefill, chunks,
// token-by-token decoding, the layer-major sequence forward); position methods apply to a trained
// layout by the rule of src/model/transformer.h, checked against a naive double forward written
// from that rule; checkpoint files load exactly, and bad ones are refused with the reason.
#include "src/io/stretch_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference/attention_backward.h"
#include "reference/layout_llama.h"
#include "reference/llama.h"
#include "reference/method_llama.h"
#include "reference/position.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/model/transformer.h"
#include "src/train/arch_spec.h"
#include "src/train/checkpoint.h"
#include "src/train/run_dir.h"
#include "src/train/trainer.h"
#include "tests/testing/checkpoint_edit.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

using testing::ErrorOf;

// ---------------------------------------------------------------------------------------------
// Models

// The reference attention (double, full matrices) behind TrainTransformer's Attn interface:
// forward only (the trainer's own definition of the model, in double).
struct RefAttentionForward {
  static void Forward(const double* q, const double* k, const double* v, double* out, double* lse,
                      const AttentionDims& d, double scale, const AttentionPlan& plan) {
    ref::TrainAttentionOptions<double> o;
    o.scale = scale;
    o.visible = [&plan](int64_t i, int64_t j) { return ref::MethodVisible(plan.method, i, j); };
    o.row_factor = [&plan](int64_t i) { return ref::MethodLogitFactor(plan, i); };
    o.bias = [&plan](int h, int64_t i, int64_t j) { return ref::BiasValue(plan.bias, h, i - j); };
    const int64_t nq = d.n_q * d.n_heads * d.head_dim, nk = d.n_kv * d.n_kv_heads * d.head_dim;
    const ref::TrainAttention<double> f = ref::TrainAttentionForward(
        std::vector<double>(q, q + nq), std::vector<double>(k, k + nk),
        std::vector<double>(v, v + nk),
        ref::AttentionShape{d.n_q, d.n_kv, d.q_pos0, d.n_heads, d.n_kv_heads, d.head_dim}, o);
    std::copy(f.out.begin(), f.out.end(), out);
    std::copy(f.lse.begin(), f.lse.end(), lse);
  }
  static void Backward(const double*, const double*, const double*, const double*, const double*,
                       const double*, double*, double*, double*, const AttentionDims&, double,
                       const AttentionPlan&, double*, double*) {
    STRETCH_CHECK(false, "forward only");
  }
};

// One trained variant: the flags `stretch train` takes.
struct Variant {
  std::string name;
  std::string position = "rope";
  std::string attention = "full";
  int kv_heads = 4;
  bool shared_classifier = false;
  std::vector<LayerLayout> layers = {};  // when set, replaces the layout of `attention`
  std::string block = "llama";           // or "gau:key=16": E = 64, R = 4 kernel heads
};

// A layout no --attention spec gives: a full RoPE layer, a full layer without position, and a
// windowed one (so a method meets all three kinds of layer at once).
const std::vector<LayerLayout> kMixed = {LayerLayout{true, 0}, LayerLayout{false, 0},
                                         LayerLayout{true, 12}};

std::vector<Variant> Variants() {
  return {
      {"rope"},
      {"nope", "nope"},
      {"alibi", "alibi"},
      {"kerple-log", "kerple-log"},
      {"kerple-power", "kerple-power"},
      {"keynorm", "rope", "keynorm"},
      {"querynorm", "rope", "querynorm"},
      {"cosine-scale", "rope", "cosine,scale=6"},
      {"window", "rope", "window=12"},
      {"hwfa", "rope", "hwfa=12"},
      {"hwfa2-alibi", "alibi", "hwfa2=12/2"},
      {"swan", "rope", "swan=12/2"},
      {"swan-kerple", "kerple-log", "keynorm,swan=12/3"},
      {"gqa", "rope", "full", 2},
      {"gqa-alibi-window", "alibi", "window=10", 1},
      {"shared-classifier", "rope", "full", 4, true},
      {"rope-base", "rope:base=500"},
      {"mixed", "rope", "keynorm", 4, false, kMixed},
      {"mixed-kerple", "kerple-power", "full", 2, false, kMixed},
      {"xpos", "xpos:gamma=64"},
      {"xpos-hwfa2", "xpos:gamma=48", "hwfa2=12/2", 2},
      {"xpos-cosine", "xpos:gamma=64", "cosine"},
      {"xpos-keynorm-hwfa2", "xpos:gamma=48", "keynorm,hwfa2=12/2", 2},
      {"sandwich", "sandwich:dim=16,lambda=2"},
      {"sandwich-swan", "sandwich", "swan=12/2"},
      {"p-rope", "rope:fraction=0.5"},
      {"p-rope-window", "rope:fraction=0.25", "keynorm,window=12"},
      {"ssmax", "rope", "ssmax"},
      {"ssmax-gqa-alibi", "alibi", "ssmax", 2},
      {"cosine-per-pos", "rope", "cosine=per-position"},
      {"logn", "rope", "logn"},
      {"keynorm-logn-alibi", "alibi", "keynorm,logn", 2},
      // The scales by the number of keys seen, on window layers (n at most 12 there).
      {"hwfa-ssmax-logn", "rope", "ssmax,logn,hwfa=12"},
      {"window-cosine-pp", "rope", "cosine=per-position,window=12"},
      {"cosine-pp-mixed", "kerple-log", "cosine=per-position", 4, false, kMixed},
      {"gau", "rope", "full", 1, false, {}, "gau:key=16"},
      {"gau-alibi", "alibi", "full", 1, false, {}, "gau:key=16"},
      {"gau-kerple-mixed", "kerple-power", "keynorm", 1, false, kMixed, "gau:key=8"},
      {"gau-cosine-window", "rope", "cosine,window=12", 1, true, {}, "gau:key=16"},
      {"gau-sandwich-pp", "sandwich", "cosine=per-position", 1, false, {}, "gau:key=32"},
      {"gau-nope-p-rope", "rope:fraction=0.5", "hwfa=12", 1, false, {}, "gau:key=16"},
      {"gau-logn", "rope", "logn", 1, false, {}, "gau:key=16"},
      {"pi", "rope:pi=2.5"},
      {"pi-mixed", "rope:base=500,pi=2", "keynorm", 2, false, kMixed},
      {"ntk", "rope:ntk=3"},
      // Per-layer RoPE and the layouts of current models (3 layers: local, global, local).
      // Gemma 3: windowed layers at base 300, the global one at the model's base and pi.
      {"gemma3", "rope:base=2000,pi=2", "gemma3=12/2,local-base=300"},
      // Llama 4: chunks of 8 with RoPE, the middle layer NoPE with the temperature tuning
      // (floor 4: it changes from position 3 on, inside the 59 tested positions).
      {"llama4", "rope", "llama4=8/2,temperature=4/0.5"},
      {"llama4-gqa-keynorm", "rope:base=700", "keynorm,llama4=10/3,temperature=6/0.3", 2},
      // Any mix: a chunked layer at its own base, a tuned NoPE layer, a full one with its own
      // base and pi.
      {"layers-mixed", "rope:base=800",
       "layers=chunk:10+base:50/nope+temp/base:5000+pi:3,"
       "temperature=5/0.4"},
      {"layers-xpos", "xpos:gamma=48", "layers=window:12+base:90/full+base:3000+pi:2"},
      {"gau-layers", "rope", "layers=chunk:8+base:400/full+pi:2", 1, false, {}, "gau:key=16"},
  };
}

constexpr int kL = 24;  // training length

TrainArch ArchOf(const Variant& v) {
  TrainArch a;
  ModelConfig& m = a.model;
  m.dim = 32;
  m.hidden_dim = 48;
  m.n_layers = 3;
  m.n_heads = 4;
  m.n_kv_heads = v.kv_heads;
  m.vocab_size = 37;
  m.seq_len = kL;
  m.shared_classifier = v.shared_classifier;
  ApplyBlockSpec(v.block, a);
  if (a.model.Gau()) {  // one head; E = 2 dim as `stretch train` makes it
    m.hidden_dim = 2 * m.dim;
    m.SetGau(m.key_dim);
  }
  ApplyPositionSpec(v.position, a);
  ApplyAttentionSpec(v.attention, a);
  if (!v.layers.empty()) a.model.attention.layers = v.layers;
  ValidateArch(a);
  return a;
}

std::vector<int> RandomIds(int64_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& x : t) x = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab));
  return t;
}

TrainerOptions FewSteps() {
  TrainerOptions o;
  o.batch = 2;
  o.schedule = LrSchedule{3e-2, 3e-2, 0, 4};  // large steps: KERPLE's a, b move visibly
  o.seed = 5;
  o.clip = 0;
  return o;
}

// The trainer's InitParams, then 4 optimizer steps on random windows (so KERPLE's parameters
// and the norms' gains are no longer at their initial values).
std::unique_ptr<Trainer> TrainFewSteps(const TrainArch& arch) {
  auto trainer = std::make_unique<Trainer>(arch, FewSteps());
  const int V = arch.model.vocab_size;
  const BatchSource source = [V](Rng& rng, int64_t B, std::vector<int>& tokens) {
    tokens.resize(static_cast<size_t>(B * (kL + 1)));
    for (int& t : tokens) t = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(V));
  };
  for (int s = 0; s < 4; ++s) trainer->Step(source);
  // The GAU starts with gamma_q, gamma_k ~ N(0, 0.02^2) (InitParams), so after 4 steps its
  // logits are still ~0 and its attention nearly uniform whatever the positions: shift gamma
  // by 1 so that positions matter and a wrong mask, bias or rotation shows.
  if (arch.model.Gau()) {
    for (LayerWeights& l : trainer->params().layers) {
      for (float& g : l.gamma_q) g += 1.0f;
      for (float& g : l.gamma_k) g += 1.0f;
    }
  }
  return trainer;
}

// ---------------------------------------------------------------------------------------------
// Forwards

// The trainer's logits (T, V) for `tokens` at positions 0 .. T-1.
template <typename Real, class Attn>
std::vector<double> TrainerLogits(const TrainArch& arch, const ModelWeights& p,
                                  const std::vector<int>& tokens) {
  ModelWeightsOf<Real> pr = ZeroWeights<Real>(arch.model);
  ModelWeights pf = p;
  std::vector<std::vector<float>*> src;
  pf.ForEach([&](const std::string&, std::vector<float>& t, bool) { src.push_back(&t); });
  size_t i = 0;
  pr.ForEach([&](const std::string&, std::vector<Real>& t, bool) {
    t.assign(src[i]->begin(), src[i]->end());
    ++i;
  });
  TrainTransformer<Real, Attn> model(arch);
  std::vector<int> with_target = tokens;
  with_target.push_back(0);
  TrainActs<Real> acts;
  model.Forward(pr, with_target, 1, acts);
  return std::vector<double>(acts.logits.begin(), acts.logits.end());
}

// kLast...: Forward keeping only the last token's hidden state (Transformer::Rows::kLast), whose
// logits are the last row of what the other paths give (only that row is compared).
// kSequenceFrom: the sequence forward asked for the rows from the middle on (a probe's end:
// ForwardSequence's first_row), compared on those rows.
enum class RunPath {
  kPrefill,
  kChunks7,
  kDecode,
  kSequence,
  kLastPrefill,
  kLastChunks7,
  kSequenceFrom
};
constexpr RunPath kPaths[] = {RunPath::kPrefill,     RunPath::kChunks7,     RunPath::kDecode,
                              RunPath::kSequence,    RunPath::kLastPrefill, RunPath::kLastChunks7,
                              RunPath::kSequenceFrom};
const char* PathName(RunPath p) {
  switch (p) {
    case RunPath::kPrefill: return "prefill";
    case RunPath::kChunks7: return "chunks of 7";
    case RunPath::kDecode: return "decode";
    case RunPath::kSequence: return "sequence";
    case RunPath::kLastPrefill: return "prefill, last row only";
    case RunPath::kLastChunks7: return "chunks of 7, last row only";
    case RunPath::kSequenceFrom: return "sequence, rows from the middle on";
  }
  return "?";
}
bool LastRowOnly(RunPath p) { return p == RunPath::kLastPrefill || p == RunPath::kLastChunks7; }
// The first row kSequenceFrom asks for: the middle, inside a chunk of 19.
int64_t FirstRowOf(RunPath p, size_t tokens) {
  return p == RunPath::kSequenceFrom ? static_cast<int64_t>(tokens / 2) : 0;
}

std::vector<double> InferenceLogits(const Model& m, const std::vector<int>& tokens, RunPath path,
                                    const std::string& spec = "direct") {
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden;
  const int64_t first = FirstRowOf(path, tokens.size());
  if (path == RunPath::kSequence || path == RunPath::kSequenceFrom) {
    model.set_prefill_chunk(19);  // several chunks per layer
    model.ForwardSequence(tokens, hidden, first);
  } else {
    const bool seven = path == RunPath::kChunks7 || path == RunPath::kLastChunks7;
    model.set_prefill_chunk(path == RunPath::kDecode ? 1 : seven ? 7 : 4096);
    // Capacity above the length: a mix-up of capacity and length strides shows.
    KvCache cache(m.config, static_cast<int64_t>(tokens.size()) + 9);
    model.Forward(tokens, cache, hidden,
                  LastRowOnly(path) ? Transformer::Rows::kLast : Transformer::Rows::kAll);
  }
  const int64_t rows = LastRowOnly(path) ? 1 : static_cast<int64_t>(tokens.size()) - first;
  EXPECT_EQ(hidden.size(), static_cast<size_t>((first + rows) * m.config.dim)) << PathName(path);
  std::vector<float> logits(static_cast<size_t>(rows * m.config.vocab_size));
  model.Logits(hidden.data() + first * m.config.dim, rows, logits.data());
  return std::vector<double>(logits.begin(), logits.end());
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// |got - want| for what `path` gave: all of want, or its last row for the last-row-only paths.
double PathDiff(const std::vector<double>& got, const std::vector<double>& want, RunPath path,
                int vocab) {
  if (path == RunPath::kSequenceFrom) {
    const int64_t rows = static_cast<int64_t>(want.size()) / vocab;
    return MaxAbsDiff(
        got, std::vector<double>(want.begin() + FirstRowOf(path, rows) * vocab, want.end()));
  }
  if (!LastRowOnly(path)) return MaxAbsDiff(got, want);
  return MaxAbsDiff(got, std::vector<double>(want.end() - vocab, want.end()));
}
// ---------------------------------------------------------------------------------------------
// The trained layout runs as trained

// Tolerance. The trainer and the inference engine evaluate the same float32 function of the same
// float weights; their results differ only by rounding: (1) RoPE's cos/sin tables are made in
// double and rounded to float by two recipes (the trainer: cos(t theta) per entry; the engine:
// angle addition from two small tables), which may differ by one float ulp; (2) QueryNorm /
// KeyNorm: the trainer divides q and k by their norms in float before the kernel, the kernel
// folds 1/|q| (computed in double) into the row's scale and divides keys in the tile; (3) chunked
// prefill and decoding split the keys into other tiles and flash-decoding chunks, so the online
// softmax sums in another order; (4) BLAS blocks a T-row product differently from a 1-row one.
// Each is a float32 rounding of the same quantity, so the two results differ by at most about
// the sum of their errors against the exact result. The exact result is the trainer's forward in
// double (naive reference attention); e_f = |trainer float - exact| measures how large float32
// rounding is for this model and input. The bound is 8 e_f (as tests/model/transformer_test.cc):
// an engine twice to four times less lucky than the trainer still passes, while a wrong
// position, mask, bias, norm, scale or classifier errs by O(0.1 .. 1) (LayoutIsNotVacuous).
TEST(InferenceModel, EveryTrainedVariantMatchesTheTrainerInEveryPath) {
  const std::vector<int> tokens = RandomIds(2 * kL + 11, 37, 7);  // beyond L: 59 positions
  for (const Variant& v : Variants()) {
    const TrainArch arch = ArchOf(v);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const ModelWeights& p = trainer->params();
    const std::vector<double> exact = TrainerLogits<double, RefAttentionForward>(arch, p, tokens);
    const std::vector<double> trained = TrainerLogits<float, KernelAttention>(arch, p, tokens);
    const double e_f = MaxAbsDiff(trained, exact);
    EXPECT_GT(e_f, 0.0) << v.name;
    const Model m = InferenceModel(arch, p, "test " + v.name);
    double worst = 0;
    for (RunPath path : kPaths) {
      const std::vector<double> got = InferenceLogits(m, tokens, path);
      const double d = PathDiff(got, trained, path, arch.model.vocab_size);
      worst = std::max(worst, d);
      EXPECT_LE(d, 8 * e_f) << v.name << " " << PathName(path) << ": float32 error " << e_f;
    }
    std::printf("  %-18s max |inference - trainer| = %.3g  (trainer float32 error %.3g)\n",
                v.name.c_str(), worst, e_f);
  }
}

// A text shorter than a layer's trained window or chunk runs (the window is the model's, not the
// call's): as the trainer on the same short text.
TEST(InferenceModel, TextsShorterThanTheTrainedWindowRun) {
  const std::vector<int> tokens = RandomIds(5, 37, 13);
  for (const Variant& v : std::vector<Variant>{
           {"hwfa2", "rope", "hwfa2=12/2"}, {"llama4", "rope", "llama4=8/2,temperature=4/0.5"}}) {
    const TrainArch arch = ArchOf(v);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const ModelWeights& p = trainer->params();
    const std::vector<double> exact = TrainerLogits<double, RefAttentionForward>(arch, p, tokens);
    const double e_f = MaxAbsDiff(TrainerLogits<float, KernelAttention>(arch, p, tokens), exact);
    const Model m = InferenceModel(arch, p, "test " + v.name);
    for (RunPath path : kPaths) {
      EXPECT_LE(PathDiff(InferenceLogits(m, tokens, path), exact, path, arch.model.vocab_size),
                8 * e_f + 1e-6)
          << v.name << " " << PathName(path);
    }
  }
}

// Not vacuous: run each layout as if it were a plain LLaMA model (RoPE, full attention,
// 1/sqrt(D), no norms, no bias) and the logits move far beyond the tolerance above.
TEST(InferenceModel, LayoutIsNotVacuous) {
  const std::vector<int> tokens = RandomIds(2 * kL + 11, 37, 8);
  for (const Variant& v : Variants()) {
    if (v.attention == "full" && v.position.starts_with("rope")) continue;  // the plain model
    const TrainArch arch = ArchOf(v);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const ModelWeights& p = trainer->params();
    const std::vector<double> trained = TrainerLogits<float, KernelAttention>(arch, p, tokens);
    Model plain = InferenceModel(arch, p, "plain");
    plain.config.attention = AttentionLayout{};
    for (LayerWeights& w : plain.weights.layers)
      w.bias_a.clear(), w.bias_b.clear(), w.ssmax.clear();
    EXPECT_GT(MaxAbsDiff(InferenceLogits(plain, tokens, RunPath::kPrefill), trained), 1e-2)
        << v.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Methods on a trained layout

// The naive forward of the trained model under a method: reference/layout_llama.h, from the rule
// at the top of src/model/transformer.h and the methods' definitions.
template <typename T>
std::vector<T> RuleForwardRef(const TrainArch& arch, const ModelWeights& p, const std::string& spec,
                              const std::vector<int>& tokens) {
  return ref::LayoutForwardRef<T>(arch.model, p, spec, tokens);
}

template <typename T>
std::vector<double> AsDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

struct MethodCase {
  Variant variant;
  std::vector<std::string> specs;
};

// Tolerance: 8x a plain float32 run of the same naive forward, as tests/model/
// method_model_test.cc (the engine sums in other orders; a wrong mask, relative position, factor
// or layer rule errs by O(0.1 .. 1): MethodsChangeTheLayersTheRuleSays).
TEST(InferenceModel, MethodsOnTrainedLayoutsMatchTheRuleReference) {
  const std::vector<MethodCase> cases = {
      // Full RoPE layers: the method as it is (also against reference/method_llama.h below).
      {{"rope"}, {"window:window=20", "rerope:window=16", "yarn:factor=3+logn", "dynamic-ntk"}},
      // Windowed RoPE layers keep their window and plain RoPE; the full RoPE layer takes it.
      {{"hwfa2", "rope", "hwfa2=12/2"},
       {"rerope:window=16", "self-extend:group=3,window=14", "yarn+logn",
        "lambda:sinks=2,window=20"}},
      // Full NoPE layer: mask and +logn; windowed RoPE layers unchanged.
      {{"swan", "rope", "swan=12/2"},
       {"window:window=20+logn", "blockwise:window=16", "direct+logn"}},
      // No RoPE at all: masks and +logn.
      {{"nope", "nope"}, {"window:window=20", "lambda:sinks=3,window=18+logn"}},
      {{"alibi", "alibi", "querynorm"}, {"window:window=20+logn", "blockwise:window=20"}},
      {{"kerple-power", "kerple-power", "cosine,scale=5"}, {"direct+logn", "window:window=16"}},
      {{"gqa-rope", "rope", "keynorm", 2}, {"rerope:window=16", "window:window=20+logn"}},
      // Full RoPE, full NoPE and windowed layers at once: each takes its part of the method
      // (the NoPE layer YaRN's mask and +logn, not its attention factor).
      {{"mixed", "rope", "full", 4, false, kMixed},
       {"yarn:factor=3+logn", "rerope:window=16", "lambda:sinks=2,window=20", "dynamic-yarn"}},
      {{"mixed-alibi", "alibi", "full", 2, false, kMixed}, {"direct+logn", "window:window=20"}},
      // The later variants: XPOS with the blockwise mask its paper tests with, and with maps.
      {{"xpos", "xpos:gamma=64"}, {"blockwise:window=16", "rerope:window=16", "yarn"}},
      {{"xpos-mixed", "xpos:gamma=48", "full", 2, false, kMixed},
       {"leaky-rerope:window=12,k=3", "dynamic-ntk"}},
      {{"xpos-cosine", "xpos:gamma=48", "cosine,scale=5", 2}, {"rerope:window=16", "yarn"}},
      {{"p-rope", "rope:fraction=0.5"}, {"pi", "dynamic-yarn", "self-extend:group=3,window=14"}},
      {{"sandwich-mixed", "sandwich:dim=16,lambda=2", "full", 4, false, kMixed},
       {"window:window=20+logn", "blockwise:window=16"}},
      {{"ssmax", "rope", "ssmax", 2}, {"ntk", "window:window=20+logn", "rerope:window=16"}},
      {{"cosine-per-pos", "rope", "cosine=per-position"},
       {"yarn+logn", "lambda:sinks=2,window=20"}},
      // Trained log-n (ln(i + 1) / ln L at every position) under methods, +logn on top of it,
      // and on a layout with full RoPE, full NoPE and windowed layers.
      {{"logn", "rope", "logn"}, {"direct", "ntk+logn", "rerope:window=16", "dynamic-yarn"}},
      {{"logn-mixed", "rope", "keynorm,logn", 2, false, kMixed}, {"yarn", "window:window=20"}},
      // The GAU block: its one head (R kernel copies) takes the method like a LLaMA head.
      {{"gau", "rope", "full", 1, false, {}, "gau:key=16"},
       {"rerope:window=16", "yarn+logn", "dynamic-ntk", "lambda:sinks=2,window=20"}},
      {{"gau-mixed", "rope", "keynorm", 1, false, kMixed, "gau:key=8"},
       {"self-extend:group=3,window=14", "window:window=20+logn"}},
      {{"gau-alibi", "alibi", "full", 1, false, {}, "gau:key=16"}, {"blockwise:window=16"}},
      // Per-layer RoPE: the global layer takes the method at its own base and pi; the local
      // layers keep their windows or chunks at their bases; a tuned NoPE layer takes the mask.
      {{"gemma3", "rope:base=2000,pi=2", "gemma3=12/2,local-base=300"},
       {"ntk", "rerope:window=16", "dynamic-ntk", "window:window=20+logn"}},
      {{"gemma3-nopi", "rope:base=2000", "gemma3=12/2"},
       {"yarn:factor=3+logn", "dynamic-yarn", "lambda:sinks=2,window=20", "chunked:window=16"}},
      {{"llama4", "rope", "llama4=8/2,temperature=4/0.5"},
       {"window:window=20+logn", "direct+logn", "chunked:window=16"}},
      {{"layers-mixed", "rope:base=800",
        "layers=chunk:10+base:50/nope+temp/base:5000+pi:3,temperature=5/0.4"},
       {"ntk", "self-extend:group=3,window=14", "dynamic-ntk", "lambda:sinks=2,window=20"}},
      {{"gau-layers", "rope", "layers=chunk:8+base:400/full+pi:2", 1, false, {}, "gau:key=16"},
       {"rerope:window=16", "dynamic-ntk"}},
  };
  const std::vector<int> tokens = RandomIds(2 * kL + 11, 37, 9);
  for (const MethodCase& mc : cases) {
    const TrainArch arch = ArchOf(mc.variant);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const ModelWeights& p = trainer->params();
    const Model m = InferenceModel(arch, p, "test " + mc.variant.name);
    for (const std::string& spec : mc.specs) {
      const std::vector<double> exact = AsDouble(RuleForwardRef<double>(arch, p, spec, tokens));
      const std::vector<double> plain = AsDouble(RuleForwardRef<float>(arch, p, spec, tokens));
      const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;
      double worst = 0;
      for (RunPath path : kPaths) {
        const double d =
            PathDiff(InferenceLogits(m, tokens, path, spec), exact, path, arch.model.vocab_size);
        worst = std::max(worst, d);
        EXPECT_LE(d, tol) << mc.variant.name << " " << spec << " " << PathName(path);
      }
      std::printf("  %-13s %-30s max |inference - rule reference| = %.3g (tolerance %.3g)\n",
                  mc.variant.name.c_str(), spec.c_str(), worst, tol);
    }
  }
}

// Not vacuous for the per-layer settings: the reference with one of them dropped (a layer's own
// base and pi, chunks read as a window of the same size, the temperature tuning) is far from the
// engine, so a test above would fail if the engine dropped it.
TEST(InferenceModel, PerLayerRopeReferenceIsNotVacuous) {
  const std::vector<int> tokens = RandomIds(2 * kL + 11, 37, 12);
  struct Perturbed {
    const char* what;
    std::function<void(LayerLayout&)> change;
  };
  const std::vector<Perturbed> perturbations = {
      {"own base and pi dropped", [](LayerLayout& l) { l.rope_base = l.rope_pi = 0.0; }},
      {"chunks read as a window",
       [](LayerLayout& l) {
         if (l.chunk > 0) std::swap(l.chunk, l.window);
       }},
      {"temperature dropped", [](LayerLayout& l) { l.temperature = false; }},
  };
  // Each with a method that its full-attention layers take (llama4 has no full RoPE layer).
  const std::vector<std::pair<Variant, std::string>> cases = {
      {{"gemma3", "rope:base=2000,pi=2", "gemma3=12/2,local-base=300"}, "ntk"},
      {{"llama4", "rope", "llama4=8/2,temperature=4/0.5"}, "direct+logn"},
      {{"layers-mixed", "rope:base=800",
        "layers=chunk:10+base:50/nope+temp/base:5000+pi:3,temperature=5/0.4"},
       "ntk"}};
  for (const auto& [v, spec] : cases) {
    const TrainArch arch = ArchOf(v);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const ModelWeights& p = trainer->params();
    const Model m = InferenceModel(arch, p, "test " + v.name);
    const std::vector<double> got = InferenceLogits(m, tokens, RunPath::kPrefill, spec);
    const std::vector<double> exact = AsDouble(RuleForwardRef<double>(arch, p, spec, tokens));
    const double tol =
        8 * MaxAbsDiff(AsDouble(RuleForwardRef<float>(arch, p, spec, tokens)), exact) + 1e-6;
    EXPECT_LE(MaxAbsDiff(got, exact), tol) << v.name;
    for (const Perturbed& pert : perturbations) {
      TrainArch changed = arch;
      for (LayerLayout& l : changed.model.attention.layers) pert.change(l);
      if (changed.model.attention.layers == arch.model.attention.layers) continue;  // not in it
      const double d = MaxAbsDiff(got, AsDouble(RuleForwardRef<double>(changed, p, spec, tokens)));
      EXPECT_GT(d, 10 * tol) << v.name << ": " << pert.what;
      std::printf("  %-13s %-26s |engine - perturbed reference| = %.3g (tolerance %.3g)\n",
                  v.name.c_str(), pert.what, d, tol);
    }
  }
}

// Not vacuous: on a mixed model (windowed RoPE layers and a full RoPE layer) each method changes
// the output, and the per-layer plans are those of the rule: windowed layers keep their window
// and plain RoPE, the full layer takes the method.
TEST(InferenceModel, MethodsChangeTheLayersTheRuleSays) {
  const std::vector<int> tokens = RandomIds(2 * kL + 11, 37, 10);
  const TrainArch arch = ArchOf({"hwfa2", "rope", "hwfa2=12/2"});
  const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
  const Model m = InferenceModel(arch, trainer->params(), "hwfa2");
  const std::vector<double> direct = InferenceLogits(m, tokens, RunPath::kPrefill);
  for (const std::string spec : {"rerope:window=16", "yarn", "window:window=16", "direct+logn"}) {
    EXPECT_GT(MaxAbsDiff(InferenceLogits(m, tokens, RunPath::kPrefill, spec), direct), 1e-3)
        << spec;
  }
  Transformer model(m);
  model.SetMethod(ParseMethod("rerope:window=16"), 59);
  EXPECT_EQ(model.layer_plan(0).mask, MaskKind::kWindow);
  EXPECT_EQ(model.layer_plan(0).window, 12);
  EXPECT_TRUE(model.layer_plan(0).map.IsIdentity());
  EXPECT_EQ(model.layer_plan(1).map.map, FindRelMap("rerope"));
  EXPECT_EQ(model.layer_plan(1).mask, MaskKind::kCausal);
}

// A RoPE checkpoint's full layers under a method equal the LLaMA path's double reference
// (reference/method_llama.h), exactly as tests/model/method_model_test.cc checks llama2.c models.
TEST(InferenceModel, RopeCheckpointUnderMethodsMatchesTheDoubleReference) {
  for (const Variant& v : {Variant{"rope"}, Variant{"gqa", "rope", "full", 2}}) {
    const TrainArch arch = ArchOf(v);
    const std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const Model m = InferenceModel(arch, trainer->params(), "rope");
    const std::vector<int> tokens = RandomIds(3 * kL, 37, 11);
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (const std::string spec : {"window:window=20", "rerope:window=16",
                                   "leaky-rerope:window=16,k=3", "pi", "dynamic-yarn"}) {
      const AttentionPlan plan = MakeAttentionPlan(
          ParseMethod(spec), RopeGeometry{kL, m.config.head_dim(), m.config.rope_base}, n);
      const ref::PositionRef pos = ref::MethodPositionRef(plan);
      const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
      const std::vector<double> plain = AsDouble(ref::LlamaForwardRef<float>(m, tokens, pos));
      const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;
      for (RunPath path : kPaths) {
        EXPECT_LE(
            PathDiff(InferenceLogits(m, tokens, path, spec), exact, path, m.config.vocab_size), tol)
            << v.name << " " << spec << " " << PathName(path);
      }
    }
  }
}

// A training-time relative map needs nothing at inference: the model is scored with any
// --method (the trained map included), and its layout is plain RoPE.
TEST(InferenceModel, TrainingTimeMapIsScoredWithAnyMethod) {
  TrainArch mapped = ArchOf({"rerope", "rerope:window=8"});
  EXPECT_EQ(mapped.model.attention.rope_map, "rerope:window=8");
  EXPECT_EQ(mapped.model.attention.Layer(0).position, LayerPosition::kRope);
}

TEST(InferenceModel, RopeChangingMethodWithoutFullRopeLayerIsRefused) {
  struct Refusal {
    Variant variant;
    std::string spec;
    std::string expect;
  };
  const std::vector<Refusal> refusals = {
      {{"nope", "nope"}, "yarn", "no full-attention RoPE layer"},
      {{"alibi", "alibi"}, "rerope:window=8", "no full-attention RoPE layer"},
      {{"kerple", "kerple-log"}, "dynamic-ntk", "no full-attention RoPE layer"},
      {{"hwfa", "rope", "hwfa=12"}, "pi", "no full-attention RoPE layer"},
      {{"swan", "rope", "swan=12/2"}, "direct:base=500", "RoPE base"},
      {{"window", "rope", "window=12"}, "window:window=8", "applies to no layer"},
      {{"window", "rope", "window=12"}, "direct+logn", "applies to no layer"},
  };
  for (const Refusal& r : refusals) {
    const TrainArch arch = ArchOf(r.variant);
    const Model m = InferenceModel(arch, TrainFewSteps(arch)->params(), "m");
    Transformer model(m);
    const std::string e = ErrorOf([&] { model.SetMethod(ParseMethod(r.spec), 48); });
    EXPECT_NE(e.find(r.expect), std::string::npos) << r.variant.name << " " << r.spec << ": " << e;
    // The model is left under its previous method, usable.
    EXPECT_EQ(CanonicalSpec(model.plan().method),
              CanonicalSpec(MakeAttentionPlan(Method{}, model.Geometry(), kL).method));
  }
  // Allowed: a mask on a model without RoPE, and a RoPE method on a mixed model.
  for (const auto& [variant, spec] : std::vector<std::pair<Variant, std::string>>{
           {{"nope", "nope"}, "window:window=16+logn"},
           {{"hwfa", "rope", "hwfa=12"}, "lambda:sinks=2,window=16"},
           {{"hwfa2", "rope", "hwfa2=12/3"}, "yarn"}}) {
    const TrainArch arch = ArchOf(variant);
    const Model m = InferenceModel(arch, TrainFewSteps(arch)->params(), "m");
    Transformer model(m);
    EXPECT_NO_THROW(model.SetMethod(ParseMethod(spec), 48)) << variant.name << " " << spec;
  }
}

// Each layer's cache holds its own plan's key slots: rerope needs two copies of each key in the
// full RoPE layer and one in the windowed ones.
TEST(InferenceModel, KeySlotsArePerLayer) {
  const TrainArch arch = ArchOf({"hwfa2", "rope", "hwfa2=12/2"});
  const Model m = InferenceModel(arch, TrainFewSteps(arch)->params(), "m");
  Transformer model(m);
  model.SetMethod(ParseMethod("rerope:window=16"), 40);
  KvCache cache(m.config, 40);
  std::vector<float> hidden;
  model.Forward(RandomIds(30, 37, 12), cache, hidden);
  EXPECT_EQ(cache.key_slots(0), 1);
  EXPECT_EQ(cache.key_slots(1), 2);
  EXPECT_EQ(cache.key_slots(2), 1);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint files

class CheckpointFile : public testing::TempDirTest {
 protected:
  CheckpointFile() : TempDirTest("stretch_inference_model_") {}

  // Trains `v` a few steps and saves it as NAME.safetensors (no tokenizer: the vocabulary of
  // 37 fits none).
  std::string Save(const Variant& v, const std::string& name = "step-00000004") {
    const TrainArch arch = ArchOf(v);
    std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
    const std::string path = Path(name + ".safetensors");
    SaveCheckpoint(*trainer, path);
    return path;
  }
};

using testing::EditCheckpoint;
using TensorCopy = testing::TensorBytes;
void Rewrite(const std::string& from, const std::string& to, const testing::CheckpointEdit& edit) {
  EditCheckpoint(from, to, edit);
}

TEST_F(CheckpointFile, LoadsExactlyWhatTheTrainerHolds) {
  // The test variants have a vocabulary of 37: no tokenizer fits, so this one has none.
  std::unique_ptr<Trainer> trainer;
  const TrainArch arch = ArchOf({"kerple", "kerple-power", "keynorm,hwfa=12"});
  trainer = TrainFewSteps(arch);
  const std::string path = Path("step-00000004.safetensors");
  SaveCheckpoint(*trainer, path);
  EXPECT_TRUE(LooksLikeSafetensors(path));
  const CheckpointModel c = LoadCheckpointModel(path);
  EXPECT_EQ(c.header.step, 4);
  EXPECT_FALSE(c.tokenizer.has_value());
  const Model direct = InferenceModel(arch, trainer->params(), "direct");
  ASSERT_EQ(c.model.weights.layers.size(), direct.weights.layers.size());
  EXPECT_EQ(c.model.weights.token_embedding, direct.weights.token_embedding);
  EXPECT_EQ(c.model.weights.classifier, direct.weights.classifier);
  for (size_t l = 0; l < direct.weights.layers.size(); ++l) {
    const LayerWeights &a = c.model.weights.layers[l], &b = direct.weights.layers[l];
    EXPECT_EQ(a.wq, b.wq);
    EXPECT_EQ(a.w2, b.w2);
    EXPECT_EQ(a.bias_a, b.bias_a);
    EXPECT_EQ(a.bias_b, b.bias_b);
    EXPECT_EQ(c.model.config.attention.Layer(static_cast<int>(l)).position,
              direct.config.attention.Layer(static_cast<int>(l)).position);
    EXPECT_EQ(c.model.config.attention.layers[l].window, direct.config.attention.layers[l].window);
  }
  // The last layer of hwfa has no position: no KERPLE parameters at inference.
  EXPECT_TRUE(c.model.weights.layers.back().bias_a.empty());
  EXPECT_EQ(c.model.config.attention.Layer(c.model.config.n_layers - 1).position,
            LayerPosition::kNone);
  EXPECT_TRUE(c.model.config.attention.key_norm);
  EXPECT_EQ(c.model.config.LogitScale(), arch.model.LogitScale());
  const std::vector<int> tokens = RandomIds(40, 37, 13);
  EXPECT_EQ(InferenceLogits(c.model, tokens, RunPath::kPrefill),
            InferenceLogits(direct, tokens, RunPath::kPrefill));
}

TEST_F(CheckpointFile, CarriesItsTokenizer) {
  Variant v{"bytes-vocab"};
  TrainArch arch = ArchOf(v);
  arch.model.vocab_size = 258;
  std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
  CheckpointExtras extras;
  extras.metadata["stretch.tokenizer"] = R"({"kind":"bytes","vocab_size":258,"bos":256})";
  const std::string path = Path("step-00000004.safetensors");
  SaveCheckpoint(*trainer, path, extras);
  const CheckpointModel c = LoadCheckpointModel(path);
  ASSERT_TRUE(c.tokenizer.has_value());
  EXPECT_EQ(c.tokenizer->kind(), "bytes");
  EXPECT_EQ(c.header.tokenizer_kind, "bytes");
  // A tokenizer that does not fit the model is refused.
  const std::string bad = Path("bad.safetensors");
  Rewrite(path, bad, [](auto& meta, auto&) {
    meta["stretch.tokenizer"] = R"({"kind":"sentencepiece","vocab_size":258,"bos":1})";
  });
  EXPECT_NE(ErrorOf([&] { LoadCheckpointModel(bad); }).find("stretch.tokenizer"),
            std::string::npos);
}

// The model's source names the build that wrote the checkpoint (metadata stretch.build) where it
// reads as an id; a value that would not print as one (a line break, 81 characters) is left out.
TEST_F(CheckpointFile, NamesTheBuildThatWroteIt) {
  std::unique_ptr<Trainer> trainer = TrainFewSteps(ArchOf({"rope"}));
  const std::string none = Path("step-00000004.safetensors");
  SaveCheckpoint(*trainer, none);
  EXPECT_EQ(LoadCheckpointModel(none).model.source, none + " (stretch checkpoint, step 4)");
  const auto with_build = [&](const std::string& name, const std::string& build) {
    const std::string path = Path(name);
    Rewrite(none, path, [&](auto& meta, auto&) { meta["stretch.build"] = build; });
    return LoadCheckpointModel(path).model.source;
  };
  EXPECT_EQ(with_build("a.safetensors", "33d992a1e485-dirty"),
            Path("a.safetensors") +
                " (stretch checkpoint, step 4, written by stretch 33d992a1e485-dirty)");
  EXPECT_EQ(with_build("b.safetensors", "33d992a1e485\n\x1b[2J"),
            Path("b.safetensors") + " (stretch checkpoint, step 4)");
  EXPECT_EQ(with_build("c.safetensors", std::string(81, 'a')),
            Path("c.safetensors") + " (stretch checkpoint, step 4)");
  EXPECT_EQ(with_build("d.safetensors", std::string(80, 'a')),
            Path("d.safetensors") + " (stretch checkpoint, step 4, written by stretch " +
                std::string(80, 'a') + ")");
}

TEST_F(CheckpointFile, NewestCompleteCheckpointOfADirectory) {
  const TrainArch arch = ArchOf({"rope"});
  std::unique_ptr<Trainer> trainer = TrainFewSteps(arch);
  SaveCheckpoint(*trainer, Path("step-00000004.safetensors"));
  SaveCheckpoint(*trainer, Path("step-00000002.safetensors"));
  testing::WriteBytes(Path("step-00000009.safetensors"), "not a checkpoint");  // newest, broken
  std::vector<std::string> skipped;
  EXPECT_EQ(NewestCheckpointIn(dir_.string(), &skipped), Path("step-00000004.safetensors"));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000009"), std::string::npos) << skipped[0];
  std::filesystem::create_directories(dir_ / "empty");
  EXPECT_NE(ErrorOf([&] {
              NewestCheckpointIn((dir_ / "empty").string());
            }).find("no complete checkpoint"),
            std::string::npos);
}

TEST_F(CheckpointFile, MismatchedBlocksAndUnknownTensorsAreRefused) {
  const std::string path = Save({"rope"});
  // "block": "gau" in the architecture (the GAU trainer's checkpoints).
  const std::string gau = Path("gau.safetensors");
  Rewrite(path, gau, [](auto& meta, auto& tensors) {
    nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
    c["block"] = "gau";
    c["gau_key_dim"] = 8;
    meta["stretch.config"] = c.dump();
    for (TensorCopy& t : tensors) {
      if (t.name.ends_with(".wq")) t.name.replace(t.name.size() - 3, 3, ".gau_z");
    }
  });
  // A LLaMA model's sizes under a GAU architecture: refused by the architecture's own check.
  std::string e = ErrorOf([&] { LoadCheckpointModel(gau); });
  EXPECT_NE(e.find("the GAU block has a single head"), std::string::npos) << e;
  // With the GAU's sizes, the LLaMA tensors are not GAU parameters, and the error names the
  // block.
  const std::string gau1 = Path("gau1.safetensors");
  Rewrite(path, gau1, [](auto& meta, auto& tensors) {
    nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
    c["block"] = "gau";
    c["gau_key_dim"] = 8;
    c["heads"] = c["kv_heads"] = 1;
    meta["stretch.config"] = c.dump();
    for (TensorCopy& t : tensors) {
      if (t.name.ends_with(".wq")) t.name.replace(t.name.size() - 3, 3, ".gau_z");
    }
  });
  e = ErrorOf([&] { LoadCheckpointModel(gau1); });
  EXPECT_NE(e.find("is not a parameter of the architecture"), std::string::npos) << e;
  EXPECT_NE(e.find("gau:key=8 block"), std::string::npos) << e;
  EXPECT_EQ(ReadCheckpointHeader(gau1).config.block, ModelBlock::kGau);
  // "block": "llama" is what the trainer may write: accepted.
  const std::string llama = Path("llama.safetensors");
  Rewrite(path, llama, [](auto& meta, auto&) {
    nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
    c["block"] = "llama";
    meta["stretch.config"] = c.dump();
  });
  EXPECT_NO_THROW(LoadCheckpointModel(llama));
  // A tensor the architecture does not have.
  const std::string extra = Path("extra.safetensors");
  Rewrite(path, extra, [](auto&, auto& tensors) {
    tensors.push_back({"layers.0.gau_u", SafetensorsDtype::kF32, {2}, std::vector<std::byte>(8)});
  });
  e = ErrorOf([&] { LoadCheckpointModel(extra); });
  EXPECT_NE(e.find("'layers.0.gau_u' is not a parameter"), std::string::npos) << e;
  // A missing parameter.
  const std::string missing = Path("missing.safetensors");
  Rewrite(path, missing, [](auto&, auto& tensors) {
    std::erase_if(tensors, [](const TensorCopy& t) { return t.name == "layers.1.w3"; });
  });
  e = ErrorOf([&] { LoadCheckpointModel(missing); });
  EXPECT_NE(e.find("layers.1.w3"), std::string::npos) << e;
}

TEST_F(CheckpointFile, CorruptAndForeignFilesAreRefusedWithTheReason) {
  const std::string path = Save({"rope"});
  const std::string bytes = testing::ReadBytes(path);
  // Truncated.
  testing::WriteBytes(Path("truncated.safetensors"), bytes.substr(0, bytes.size() / 2));
  std::string e = ErrorOf([&] { LoadCheckpointModel(Path("truncated.safetensors")); });
  EXPECT_NE(e.find("truncated.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // A safetensors file that is not a stretch checkpoint.
  SafetensorsWriter w;
  w.AddOwned<float>("weight", {2}, {1.0f, 2.0f});
  w.Write(Path("foreign.safetensors"));
  e = ErrorOf([&] { LoadCheckpointModel(Path("foreign.safetensors")); });
  EXPECT_NE(e.find("not a stretch checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("stretch.format"), std::string::npos) << e;
  // Another version.
  Rewrite(path, Path("v2.safetensors"), [](auto& meta, auto&) { meta["stretch.version"] = "2"; });
  e = ErrorOf([&] { LoadCheckpointModel(Path("v2.safetensors")); });
  EXPECT_NE(e.find("version \"2\""), std::string::npos) << e;
  // A damaged architecture.
  Rewrite(path, Path("arch.safetensors"), [](auto& meta, auto&) {
    nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
    c["heads"] = 3;
    meta["stretch.config"] = c.dump();
  });
  e = ErrorOf([&] { LoadCheckpointModel(Path("arch.safetensors")); });
  EXPECT_NE(e.find("heads=3"), std::string::npos) << e;
  // Sizes far beyond what the file holds: refused before anything is allocated from them.
  Rewrite(path, Path("huge.safetensors"), [](auto& meta, auto&) {
    nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
    c["dim"] = 1 << 20;
    c["hidden_dim"] = 1 << 30;
    meta["stretch.config"] = c.dump();
  });
  e = ErrorOf([&] { LoadCheckpointModel(Path("huge.safetensors")); });
  EXPECT_NE(e.find("but the file holds"), std::string::npos) << e;
  // Non-finite KERPLE parameters.
  const std::string kerple = Save({"kerple", "kerple-log"}, "kerple");
  Rewrite(kerple, Path("nan.safetensors"), [](auto&, auto& tensors) {
    for (TensorCopy& t : tensors) {
      if (t.name == "layers.2.bias_b") {
        const float nan = std::nanf("");
        std::memcpy(t.bytes.data(), &nan, sizeof nan);
      }
    }
  });
  e = ErrorOf([&] { LoadCheckpointModel(Path("nan.safetensors")); });
  EXPECT_NE(e.find("layer 2"), std::string::npos) << e;
  // Content, not the name, tells a checkpoint: a llama2.c file and a text file do not look
  // like safetensors; a checkpoint under another name does.
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.vocab_size = 10;
  c.seq_len = 16;
  Model m;
  m.config = c;
  m.weights.token_embedding.assign(80, 0.5f);
  m.weights.layers.resize(1);
  LayerWeights& l = m.weights.layers[0];
  l.attn_norm.assign(8, 1.0f);
  l.ffn_norm.assign(8, 1.0f);
  l.wq.assign(64, 0.1f);
  l.wk.assign(64, 0.1f);
  l.wv.assign(64, 0.1f);
  l.wo.assign(64, 0.1f);
  l.w1.assign(128, 0.1f);
  l.w2.assign(128, 0.1f);
  l.w3.assign(128, 0.1f);
  m.weights.final_norm.assign(8, 1.0f);
  SaveLlama2cVersion1(m, Path("model.bin"));
  EXPECT_FALSE(LooksLikeSafetensors(Path("model.bin")));
  testing::WriteBytes(Path("text.txt"), "{\"hello\": 1}\n");
  EXPECT_FALSE(LooksLikeSafetensors(Path("text.txt")));
  EXPECT_FALSE(LooksLikeSafetensors(dir_.string()));
  std::filesystem::copy_file(path, Path("model.ckpt"));
  EXPECT_TRUE(LooksLikeSafetensors(Path("model.ckpt")));
  EXPECT_NO_THROW(LoadCheckpointModel(Path("model.ckpt")));
}

}  // namespace
}  // namespace stretch
