// The op harness's rows (op_cases.h): each op with its shapes and error budget, then the attention
// kernel under every registered method, every variant and the grouped-query layouts.
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "src/kernels/op_cases.h"
#include "src/position/method.h"

namespace stretch::op_cases {

namespace {

// The budgets, each with where its numbers come from (tests/kernels/ops_test.cc and
// ops_backward_test.cc derive the same ones). eps is float's, 2^-23.
constexpr ErrorBudget kExact{0, 0, "a copy: exact"};
constexpr std::string_view kDotReason =
    "a float dot product of K terms errs by at most K eps sum|x_k w_k| (Higham, Accuracy and "
    "Stability, 2nd ed., 3.1)";
constexpr ErrorBudget kRmsNormBudget{
    4, 0, "the sum of squares in double; the scale and the product by w in float: 4 eps |out|"};
constexpr ErrorBudget kSwiGluBudget{
    8, 0, "expf within 1 ulp; with the division and two products, 8 eps |out|"};
constexpr ErrorBudget kRopeBudget{
    3, 0, "cos/sin rounded to float (eps/2 each), two products and a sum: 3 eps (|x0| + |x1|)"};
constexpr ErrorBudget kL2Budget{
    2, 0, "1/|x| in double rounded to float (eps/2) and one product (eps/2): eps |y|, doubled"};
constexpr ErrorBudget kPairScaleBudget{1, 0, "one float product: eps/2 |y|, doubled"};
constexpr ErrorBudget kHeadScaleBudget{
    2, 0, "s_h w_t rounded to float (eps/2) and one product (eps/2): eps |y|, doubled"};
constexpr ErrorBudget kCrossEntropyBudget{
    1e-6, 0,
    "the float run does the double run's arithmetic (exp and sums in double) on the same values: "
    "they differ by double rounding, 1e-6 float eps relative is far above it"};
constexpr ErrorBudget kAttentionBudget{
    8, 4,
    "within 4x of a plain float32 implementation's error plus 8 ulp of the output's magnitude "
    "(tests/kernels/attention_test.cc): the kernel's extra roundings (float cos/sin tables, the "
    "rotation's products, the scale folded into q, sums in tiles) are each O(eps) relative "
    "perturbations of the terms whose float rounding makes the baseline's error"};

std::string TestName(std::string text) {
  for (char& ch : text) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return text;
}

void AddOpCases(std::vector<OpCase>& out) {
  auto add = [&](Op op, std::string suffix, std::string description, OpShape shape,
                 ErrorBudget budget) {
    OpCase c;
    c.op = op;
    c.name = TestName(std::string(OpName(op)) + suffix);
    c.description = std::move(description);
    c.shape = shape;
    c.budget = budget;
    c.seed = 100 + out.size();
    out.push_back(std::move(c));
  };
  // T = 1 takes the gemv path of MatMulRows and of the backward's products.
  add(Op::kLinear, "_T1", "y = x W^T, one row (gemv), K = 37, N = 19", {1, 37, 19},
      {37, 0, kDotReason});
  add(Op::kLinear, "_T5", "y = x W^T, 5 rows (gemm), K = 37, N = 19", {5, 37, 19},
      {37, 0, kDotReason});
  add(Op::kEmbedding, "", "rows of E (V = 5, C = 8) for 6 tokens, one repeated", {6, 8, 5}, kExact);
  add(Op::kRmsNorm, "", "RMSNorm of 3 rows of 96 channels", {3, 96}, kRmsNormBudget);
  add(Op::kSwiGlu, "", "silu(g) u on 4 x 64 gates of sd 4 (saturated to linear)", {4, 64},
      kSwiGluBudget);
  add(Op::kLinear, "_T64", "y = x W^T, 64 rows (gemm), K = 37, N = 19", {64, 37, 19},
      {37, 0, kDotReason});
  // Far positions: angles up to ~1050 rad.
  add(Op::kRope, "_far", "RoPE of 50 rows x 3 heads x D 16 at positions 1000..1049",
      {50, 16, 0, 3, 0, 0, 1000}, kRopeBudget);
  add(Op::kL2Normalize, "", "q / |q| on 3 rows x 2 heads x D 6", {3, 6, 0, 2}, kL2Budget);
  add(Op::kPairScale, "", "XPOS's per-pair factors on 3 rows x 2 heads x D 6", {3, 6, 0, 2},
      kPairScaleBudget);
  add(Op::kHeadScale, "", "SSMax's s_h ln(t + 1) on 4 rows x 3 heads x D 5", {4, 5, 0, 3},
      kHeadScaleBudget);
  add(Op::kCrossEntropy, "", "mean cross-entropy of 4 rows of 7 logits, one unscored", {4, 7},
      kCrossEntropyBudget);
}

// Shapes of the attention rows: T queries at q_pos0 against S keys, H heads over G kv heads,
// D head dim; the training length is 16, so every method is beyond it.
constexpr OpShape kPrefill{24, 8, 0, 4, 2, 48, 24};  // a chunk after a cached prefix
constexpr OpShape kFromZero{32, 8, 0, 4, 2, 32, 0};  // prefill from position 0
constexpr OpShape kDecode{1, 8, 0, 4, 2, 48, 47};    // one query at depth

OpCase AttentionRow(Op op, const std::string& method, Variant variant, Rotation rotation,
                    OpShape shape, std::string_view what) {
  OpCase c;
  c.op = op;
  c.method = method;
  c.variant = variant;
  c.rotation = rotation;
  c.shape = shape;
  c.budget = kAttentionBudget;
  // A spec with lists (longrope's factors) is named by its method alone.
  const std::string label = method.empty()       ? "plain"
                            : method.size() > 40 ? method.substr(0, method.find(':'))
                                                 : method;
  std::string name = std::string(OpName(op)) + "_" + label;
  if (variant != Variant::kNone) name += "_" + std::string(VariantName(variant));
  if (rotation == Rotation::kPrerotated) name += "_prerotated";
  name += "_T" + std::to_string(shape.T) + "_S" + std::to_string(shape.S) + "_D" +
          std::to_string(shape.C) + "_H" + std::to_string(shape.H) + "G" + std::to_string(shape.G);
  c.name = TestName(name);
  c.description = std::string(what) + ": " + (method.empty() ? "no plan" : method) +
                  (variant != Variant::kNone ? " + " + std::string(VariantName(variant)) : "") +
                  ", T=" + std::to_string(shape.T) + " S=" + std::to_string(shape.S) +
                  " q_pos0=" + std::to_string(shape.q_pos0) + " D=" + std::to_string(shape.C) +
                  " H=" + std::to_string(shape.H) + " G=" + std::to_string(shape.G);
  // The reference's central differences cost a forward per coordinate: a drawn subset.
  c.grad_coords = 24;
  return c;
}

bool IsDynamic(const std::string& spec, int D, int64_t S) {
  return MakeAttentionPlan(ParseMethod(spec), RopeGeometry{16, D, 10000.0}, S).dynamic;
}

void AddAttentionCases(std::vector<OpCase>& out) {
  const int D = kPrefill.C;
  auto add = [&](OpCase c) {
    c.seed = 1000 + out.size();
    out.push_back(std::move(c));
  };
  const std::vector<std::string_view> names = MethodSpecNames();
  // The forward: every method of the registry, raw q and k rotated in the kernel.
  for (std::string_view name : names) {
    const std::string spec = SmallSpec(name, D);
    add(AttentionRow(Op::kAttention, spec, Variant::kNone, Rotation::kKernel, kPrefill, "method"));
  }
  for (const std::string& spec :
       std::vector<std::string>{"direct+logn", "yarn+logn", SmallSpec("rerope", D) + "+logn"}) {
    add(AttentionRow(Op::kAttention, spec, Variant::kNone, Rotation::kKernel, kPrefill, "log-n"));
  }
  // Keys rotated once, before the call (the model's cache); decode; prefill from 0.
  for (const char* spec : {"direct", "yarn"}) {
    add(AttentionRow(Op::kAttention, spec, Variant::kNone, Rotation::kPrerotated, kPrefill,
                     "prerotated"));
  }
  for (std::string_view name : {"direct", "rerope", "dynamic-yarn", "lambda"}) {
    add(AttentionRow(Op::kAttention, SmallSpec(name, D), Variant::kNone, Rotation::kKernel, kDecode,
                     "decode"));
    add(AttentionRow(Op::kAttention, SmallSpec(name, D), Variant::kNone, Rotation::kKernel,
                     kFromZero, "prefill from 0"));
  }
  // The plain path and the grouped-query layouts: MHA (G = H), GQA, MQA (G = 1); another D.
  for (int G : {1, 2, 4}) {
    add(AttentionRow(Op::kAttention, "", Variant::kNone, Rotation::kNone, {24, 8, 0, 4, G, 48, 24},
                     "layout"));
  }
  add(AttentionRow(Op::kAttention, "direct", Variant::kNone, Rotation::kKernel,
                   {24, 24, 0, 4, 4, 48, 24}, "generic D"));
  // Every variant of a trained model, on plain RoPE, a relative map and a window.
  for (const std::string& spec :
       std::vector<std::string>{"direct", SmallSpec("rerope", D), SmallSpec("window", D)}) {
    for (int v = static_cast<int>(Variant::kAlibi); v <= static_cast<int>(Variant::kSsmax); ++v) {
      add(AttentionRow(Op::kAttention, spec, static_cast<Variant>(v), Rotation::kKernel, kPrefill,
                       "variant"));
    }
  }
  // The backward: every static method (dynamic frequencies have no backward), the biases, the
  // layouts of the plain path.
  for (std::string_view name : names) {
    const std::string spec = SmallSpec(name, D);
    if (IsDynamic(spec, D, kPrefill.S)) continue;
    add(AttentionRow(Op::kAttentionBackward, spec, Variant::kNone, Rotation::kKernel, kPrefill,
                     "method"));
  }
  add(AttentionRow(Op::kAttentionBackward, "direct+logn", Variant::kNone, Rotation::kKernel,
                   kPrefill, "log-n"));
  for (const std::string& spec : std::vector<std::string>{"direct", SmallSpec("rerope", D)}) {
    for (Variant v :
         {Variant::kAlibi, Variant::kKerpleLog, Variant::kKerplePower, Variant::kSandwich}) {
      add(AttentionRow(Op::kAttentionBackward, spec, v, Rotation::kKernel, kPrefill, "bias"));
    }
  }
  for (int G : {1, 4}) {
    add(AttentionRow(Op::kAttentionBackward, "", Variant::kNone, Rotation::kNone,
                     {24, 8, 0, 4, G, 48, 24}, "layout"));
  }
}

}  // namespace

std::string SmallSpec(std::string_view name, int D) {
  // Windows, shifts and chunks of a few positions, so that 48 keys meet every segment.
  if (name == "ntk-fixed") return "ntk-fixed:factor=4";
  if (name == "llama3") return "llama3:factor=8";
  if (name == "rerope") return "rerope:window=12";
  if (name == "leaky-rerope") return "leaky-rerope:window=12,k=3";
  if (name == "self-extend") return "self-extend:group=3,window=8";
  if (name == "string") return "string:shift=12,window=4";
  if (name == "dca") return "dca:chunk=12,window=2";
  if (name == "window") return "window:window=12";
  if (name == "lambda") return "lambda:sinks=3,window=12";
  if (name == "streaming") return "streaming:sinks=3,window=12";
  if (name == "blockwise") return "blockwise:window=12";
  if (name == "chunked") return "chunked:window=12";
  if (name == "longrope" || name == "dynamic-longrope") {
    std::string shorts, longs;
    for (int t = 0; t < D / 2; ++t) {
      shorts += (t ? "/" : "") + std::to_string(1.0 + 0.1 * t);
      longs += (t ? "/" : "") + std::to_string(1.0 + 0.5 * t);
    }
    return std::string(name) + ":short=" + shorts + ",long=" + longs;
  }
  return std::string(name);  // the method's defaults for the call
}

std::vector<OpCase> AllCases() {
  std::vector<OpCase> out;
  AddOpCases(out);
  AddAttentionCases(out);
  return out;
}

OpCase BenchAttentionCase(int64_t L, int D, const std::string& method) {
  OpCase c;
  c.op = Op::kAttention;
  c.name = TestName("bench_attention_" + (method.empty() ? std::string("plain") : method));
  c.description = "stretch bench's attention: " + (method.empty() ? "no plan" : method);
  c.shape = {L, D, 0, 8, D == 8 ? 4 : 8, L, 0};
  c.method = method;
  c.train_len = 4096;
  c.seed = 1;
  if (!method.empty()) {
    const AttentionPlan plan =
        MakeAttentionPlan(ParseMethod(method), RopeGeometry{c.train_len, D, 10000.0}, L);
    c.rotation = plan.KeysRotatedOnce() ? Rotation::kPrerotated : Rotation::kKernel;
  }
  c.kv_head_major = true;  // as the model's KV cache holds keys and values
  c.budget = kAttentionBudget;
  return c;
}

}  // namespace stretch::op_cases
