// The op harness (after ggml's test-backend-ops): every op of ops.h that has a backward, and the
// attention kernel under every position scheme, as rows of one case table. A case is a small
// struct (shapes, parameters, a one-line description, an error budget with its reason, the step
// of its central differences); one float run per case (OpRun) prepares the inputs from the
// case's seed and calls the kernel. The runner has three modes:
//   compare   the float kernel against a double-precision reference (tests/kernels/
//             op_harness_test.cc, which holds the reference side: reference/ stays out of the
//             library);
//   gradient  the backward against central differences of the double forward (the same test);
//   timing    the median seconds of repeated float runs (TimeOp below; `stretch bench`).
//
// Shapes, in ops.h's letters: T rows, C channels, K and N a linear map's input and output width,
// F FFN width, V vocabulary, D head dim, H heads; for attention also S keys, G kv heads and
// q_pos0, the position of query row 0 (attention.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/aligned.h"
#include "src/kernels/attention.h"
#include "src/position/plan.h"

namespace stretch::op_cases {

enum class Op {
  kLinear,             // y = x W^T (MatMulRows; LinearBackward)
  kEmbedding,          // out[t] = E[tokens[t]]
  kRmsNorm,            // RmsNorm; RmsNormBackward
  kSwiGlu,             // h = silu(g) u (SwiGlu; SwiGluBackward)
  kRope,               // RopeInterleaved; RopeInterleavedBackward
  kL2Normalize,        // QueryNorm / KeyNorm's y = x / |x|
  kPairScale,          // XPOS's per-pair factors on q and k
  kHeadScale,          // SSMax's s_h w_t on q
  kCrossEntropy,       // mean -log softmax(logits)[target]
  kAttention,          // AttentionForward
  kAttentionBackward,  // AttentionBackward (after the forward that gives out and lse)
};
std::string_view OpName(Op op);

// What a case adds to a position method's plan: the variants of models trained with them
// (attention.h's AttentionPlan fields), one at a time.
enum class Variant {
  kNone,
  kAlibi,           // bias -a_h d, Press et al.'s slopes
  kKerpleLog,       // bias -a_h log(1 + b_h d)
  kKerplePower,     // bias -a_h d^b_h
  kSandwich,        // bias a_h sum_t cos(d w_t)
  kXpos,            // XPOS decay, gamma 16 (a strong one, so that it shows at a few dozen keys)
  kQueryNorm,       // q / |q|
  kKeyNorm,         // k / |k|
  kCosine,          // both: cosine attention
  kCosineLogScale,  // both, and the per-position lambda ln(n_i / 2), n_i the keys query i sees
  kSsmax,           // SSMax's s_h ln(n_i) on the logits
};
std::string_view VariantName(Variant v);

// How the attention kernel gets q and k.
enum class Rotation {
  kNone,        // no plan: causal, q and k used as given (the model's plain path)
  kKernel,      // raw q and k; a KernelRotation of the call (every method)
  kPrerotated,  // q and k rotated at their positions before the call (methods whose keys keep
                // one rotation: KeysRotatedOnce), timed with the call
};

struct OpShape {
  int64_t T = 0;       // rows (attention: query rows)
  int C = 0;           // Linear K; RmsNorm C; SwiGlu F; Rope / L2 / PairScale / HeadScale D;
                       // CrossEntropy V; Embedding C; attention D
  int N = 0;           // Linear N; Embedding V
  int H = 0;           // heads (attention: query heads)
  int G = 0;           // attention: kv heads
  int64_t S = 0;       // attention: keys
  int64_t q_pos0 = 0;  // attention: position of query row 0; Rope: position of row 0
};

// The error a compare run may show, per output element i:
//   ops:        |kernel - reference| <= eps_multiple * eps_float * magnitude(i), magnitude(i) the
//               sum of the magnitudes of the terms element i is made of (the op's reference
//               computes it);
//   attention:  max |kernel - reference| <= baseline_factor * (a plain float32 implementation's
//               max error against the same reference) + eps_multiple * eps_float * max(1, |ref|).
struct ErrorBudget {
  double eps_multiple = 0;
  double baseline_factor = 0;
  std::string_view reason;  // where the numbers come from
};

struct OpCase {
  Op op = Op::kLinear;
  std::string name;         // unique, [A-Za-z0-9_] only (a test name)
  std::string description;  // one line
  OpShape shape;
  // Attention: the method's spec ("" with Rotation::kNone) at training length train_len, what
  // the plan adds, and how q and k reach the kernel.
  std::string method;
  int64_t train_len = 16;
  Variant variant = Variant::kNone;
  Rotation rotation = Rotation::kNone;
  ErrorBudget budget;
  double grad_step = 1e-5;  // h of the central differences (tests/testing/gradcheck.h)
  int64_t grad_coords = 0;  // coordinates checked per argument; 0: every one
  uint64_t seed = 1;
  // Attention forward: k and v (w and v below) laid out (G, S, D), kv head by kv head, as a
  // model's KV cache holds them (KvCache, src/model/transformer.h), instead of (S, G, D).
  bool kv_head_major = false;
};

// Every row: each op of ops.h with a backward; the attention forward under every method of the
// spec registry (src/position/method.h's MethodSpecNames), every variant, grouped-query layouts,
// decode and the plain path; the attention backward under every static method and bias.
std::vector<OpCase> AllCases();

// The spec a small case uses for a registered method name: the name with parameters that fit a
// call of `fed` tokens at training length `train_len` and a head dim D, so that every segment of
// its relative map, or its window, is met within a few dozen keys.
std::string SmallSpec(std::string_view name, int D);

// An attention case of `stretch bench`: L queries from 0 against L keys, 8 heads (D = 8: 4 kv
// heads, the shape of stories260K; else 8), the method at training length 4096 ("" for the
// plain path), q and k prerotated when the method's keys keep one rotation, else rotated in the
// kernel; keys and values kv head by kv head (kv_head_major), as the model's cache holds them.
OpCase BenchAttentionCase(int64_t L, int D, const std::string& method);

// One case's float inputs and outputs, and its kernel calls. The arrays by op (all dense):
//   Linear:        x (T, K), w = W (N, K), out (T, N)
//   Embedding:     x = E (N=V, C), ids tokens (T), out (T, C)
//   RmsNorm:       x (T, C), w (C), out (T, C)
//   SwiGlu:        x = g (T, F), w = u (T, F), out (T, F)
//   Rope:          x (T, H, D), out (T, H, D); angles of positions q_pos0 .. q_pos0 + T - 1
//   L2Normalize:   x (T, H, D), out
//   PairScale:     x (T, H, D), w = factors (T, D/2), out
//   HeadScale:     x (T, H, D), w = s (H), v = row weights ln(t + 1) (T), out
//   CrossEntropy:  x = logits (T, V), ids targets (T; one row unscored), loss the mean
//   Attention:     x = q (T, H, D), w = k (S, G, D), v (S, G, D) (or both (G, S, D):
//                  kv_head_major), out (T, H, D), lse (T, H)
// and, after Backward, the gradients of x, w, v (dx, dw, dv) for dout (out's shape). A forward-only
// attention case holds no dout and no lse (the kernel computes none), as a model's forward.
class OpRun {
 public:
  explicit OpRun(const OpCase& c);
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  void Forward();
  void Backward();  // attention: after Forward (it reads out and lse)
  // FLOPs of one Forward of an attention case (4 D per visible query-key pair per head); 0 for
  // the other ops.
  double AttentionFlops() const;

  const OpCase& c() const { return c_; }
  const AttentionPlan* plan() const { return c_.rotation == Rotation::kNone ? nullptr : &plan_; }
  float scale() const { return scale_; }           // attention: the kernel's scale
  const RopeTable& rope() const { return rope_; }  // Rope: the angles of its rows

  AlignedVector<float> x, w, v, out, lse, dout, dx, dw, dv;
  std::vector<int> ids;
  double loss = 0;  // CrossEntropy: the mean, in double as CrossEntropyForward returns it
  std::vector<double> dbias_a, dbias_b;  // KERPLE's per-head gradients (H)

 private:
  void ForwardOp();
  void BackwardOp();
  void ForwardAttention();
  void BackwardAttention();

  OpCase c_;
  AttentionPlan plan_;
  float scale_ = 0;
  RopeTable rope_;  // Rope
};

// The plan of an attention case: its method resolved for S keys, with its variant.
AttentionPlan CasePlan(const OpCase& c);

// Timing mode: the median seconds of `repeats` runs after one untimed warm-up run (Forward, or
// Forward then Backward with `backward`; the backward's time alone is reported then).
struct Timing {
  double seconds = 0;
  int repeats = 0;
};
Timing TimeOp(OpRun& run, int repeats, bool backward);
// The seconds of one run (with `backward`: Forward untimed, then Backward timed).
double TimeOnce(OpRun& run, bool backward);

// The median of a list of values (the mean of the middle two for an even count).
double Median(std::vector<double> v);

}  // namespace stretch::op_cases
