#include "src/kernels/op_cases.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "src/core/check.h"
#include "src/core/rng.h"
#include "src/core/timer.h"
#include "src/kernels/ops.h"
#include "src/position/method.h"
#include "src/position/rope.h"

namespace stretch::op_cases {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kLinear: return "linear";
    case Op::kEmbedding: return "embedding";
    case Op::kRmsNorm: return "rmsnorm";
    case Op::kSwiGlu: return "swiglu";
    case Op::kRope: return "rope";
    case Op::kL2Normalize: return "l2normalize";
    case Op::kPairScale: return "pairscale";
    case Op::kHeadScale: return "headscale";
    case Op::kCrossEntropy: return "crossentropy";
    case Op::kAttention: return "attention";
    case Op::kAttentionBackward: return "attention_backward";
  }
  return "?";
}

std::string_view VariantName(Variant v) {
  switch (v) {
    case Variant::kNone: return "";
    case Variant::kAlibi: return "alibi";
    case Variant::kKerpleLog: return "kerple_log";
    case Variant::kKerplePower: return "kerple_power";
    case Variant::kSandwich: return "sandwich";
    case Variant::kXpos: return "xpos";
    case Variant::kQueryNorm: return "querynorm";
    case Variant::kKeyNorm: return "keynorm";
    case Variant::kCosine: return "cosine";
    case Variant::kCosineLogScale: return "cosine_logscale";
    case Variant::kSsmax: return "ssmax";
  }
  return "?";
}

double Median(std::vector<double> v) {
  STRETCH_CHECK(!v.empty());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- The plan of an attention case -----------------------------------------------------------

namespace {

// Per-head parameters of both signs and sizes, cycled over H heads.
std::vector<double> Cycle(std::initializer_list<double> values, int H) {
  std::vector<double> out;
  for (int h = 0; h < H; ++h) out.push_back(values.begin()[h % values.size()]);
  return out;
}

void ApplyVariant(Variant variant, int H, int64_t S, AttentionPlan& p) {
  switch (variant) {
    case Variant::kNone: break;
    case Variant::kAlibi: p.bias = {BiasKind::kAlibi, AlibiSlopes(H), {}, 0, {}}; break;
    case Variant::kKerpleLog:
      p.bias = {BiasKind::kKerpleLog,
                Cycle({0.5, 1.0, 2.0, 0.3}, H),
                Cycle({0.2, 1.0, 0.05, 3.0}, H),
                0,
                {}};
      break;
    case Variant::kKerplePower:
      p.bias = {BiasKind::kKerplePower,
                Cycle({0.3, 0.05, 1.0, 0.2}, H),
                Cycle({0.5, 1.0, 1.5, 2.0}, H),
                0,
                {}};
      break;
    case Variant::kSandwich:
      // Tabulated to half the keys: the distances beyond sum the cosines directly.
      p.bias = SandwichBias(Cycle({0.5, 0.1, 0.02, -0.05}, H), 16, S / 2);
      break;
    case Variant::kXpos: p.xpos_scale_base = 16; break;
    case Variant::kQueryNorm: p.query_norm = true; break;
    case Variant::kKeyNorm: p.key_norm = true; break;
    case Variant::kCosine: p.query_norm = p.key_norm = true; break;
    case Variant::kCosineLogScale: p.query_norm = p.key_norm = p.position_log_scale = true; break;
    case Variant::kSsmax: p.ssmax = Cycle({0.5, 1.0, 0.1, -0.3}, H); break;
  }
}

}  // namespace

AttentionPlan CasePlan(const OpCase& c) {
  if (c.rotation == Rotation::kNone) return {};
  AttentionPlan p = MakeAttentionPlan(ParseMethod(c.method),
                                      RopeGeometry{c.train_len, c.shape.C, 10000.0}, c.shape.S);
  ApplyVariant(c.variant, c.shape.H, c.shape.S, p);
  return p;
}

// ---- Inputs and kernel calls -----------------------------------------------------------------

namespace {

AlignedVector<float> Normal(Rng& rng, int64_t n, double scale = 1.0, double mean = 0.0) {
  AlignedVector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(mean + scale * rng.Normal());
  return v;
}

int64_t OutputSize(const OpCase& c) {
  const OpShape& s = c.shape;
  switch (c.op) {
    case Op::kLinear: return s.T * s.N;
    case Op::kEmbedding:
    case Op::kRmsNorm:
    case Op::kSwiGlu: return s.T * s.C;
    case Op::kCrossEntropy: return 1;  // dout: the upstream gradient of the mean
    default: return s.T * s.H * s.C;   // (T, H, D)
  }
}

}  // namespace

OpRun::OpRun(const OpCase& c) : c_(c) {
  const OpShape& s = c.shape;
  Rng rng(c.seed);
  switch (c.op) {
    case Op::kLinear:
      x = Normal(rng, s.T * s.C);
      w = Normal(rng, int64_t{s.N} * s.C);
      break;
    case Op::kEmbedding:
      x = Normal(rng, int64_t{s.N} * s.C);
      for (int64_t t = 0; t < s.T; ++t) ids.push_back(static_cast<int>(rng.NextU64() % s.N));
      ids.back() = ids.front();  // a repeated token: its rows' gradients add up
      break;
    case Op::kRmsNorm:
      x = Normal(rng, s.T * s.C, 2.0, 0.3);
      w = Normal(rng, s.C, 0.2, 1.0);
      break;
    case Op::kSwiGlu:
      x = Normal(rng, s.T * s.C, 4.0);  // gates from saturated to linear
      w = Normal(rng, s.T * s.C);
      x[0] = -30.0f;  // saturated: silu ~ 0
      x[1] = 25.0f;   // saturated: silu ~ g
      break;
    case Op::kRope:
    case Op::kL2Normalize: x = Normal(rng, s.T * s.H * s.C); break;
    case Op::kPairScale:
      x = Normal(rng, s.T * s.H * s.C);
      w = Normal(rng, s.T * (s.C / 2));  // of both signs, like any table
      break;
    case Op::kHeadScale:
      x = Normal(rng, s.T * s.H * s.C);
      w = Normal(rng, s.H);
      for (int64_t t = 0; t < s.T; ++t) v.push_back(static_cast<float>(std::log(t + 1.0)));
      break;
    case Op::kCrossEntropy:
      x = Normal(rng, s.T * s.C, 2.0);
      for (int64_t t = 0; t < s.T; ++t) ids.push_back(static_cast<int>(rng.NextU64() % s.C));
      ids[std::min<size_t>(1, ids.size() - 1)] = kNotScored;
      break;
    case Op::kAttention:
    case Op::kAttentionBackward:
      x = Normal(rng, s.T * s.H * s.C);
      w = Normal(rng, s.S * s.G * s.C);
      v = Normal(rng, s.S * s.G * s.C);
      if (c.op == Op::kAttentionBackward) lse.assign(static_cast<size_t>(s.T * s.H), 0.0f);
      plan_ = CasePlan(c);
      scale_ = 1.0f / std::sqrt(static_cast<float>(s.C));
      break;
  }
  out.assign(static_cast<size_t>(OutputSize(c)), 0.0f);
  if (c.op != Op::kAttention) dout = Normal(rng, OutputSize(c));
  if (c.op == Op::kRope) rope_ = MakeRopeTable(RopeThetas(10000.0, s.C), s.q_pos0, s.T);
}

void OpRun::Forward() {
  if (c_.op == Op::kAttention || c_.op == Op::kAttentionBackward) return ForwardAttention();
  ForwardOp();
}

void OpRun::Backward() {
  if (c_.op == Op::kAttention || c_.op == Op::kAttentionBackward) return BackwardAttention();
  BackwardOp();
}

void OpRun::ForwardOp() {
  const OpShape& s = c_.shape;
  const int64_t rows = s.T * s.H;
  switch (c_.op) {
    case Op::kLinear: MatMulRows(x.data(), w.data(), out.data(), s.T, s.C, s.N); break;
    case Op::kEmbedding:
      EmbeddingForward<float>(ids.data(), x.data(), out.data(), s.T, s.C, s.N);
      break;
    case Op::kRmsNorm: RmsNorm(x.data(), w.data(), out.data(), s.T, s.C, 1e-5f); break;
    case Op::kSwiGlu:
      out = x;
      SwiGlu(out.data(), w.data(), s.T * s.C);
      break;
    case Op::kRope:
      out = x;
      RopeInterleaved(out.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, rope_);
      break;
    case Op::kL2Normalize: L2NormalizeForward<float>(x.data(), out.data(), rows, s.C); break;
    case Op::kPairScale:
      out = x;
      PairScaleForward<float>(out.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, s.C / 2, w.data());
      break;
    case Op::kHeadScale:
      out = x;
      HeadScaleForward<float>(out.data(), s.T, s.H, s.C, v.data(), w.data());
      break;
    case Op::kCrossEntropy:
      loss = CrossEntropyForward<float>(x.data(), ids.data(), s.T, s.C).mean;
      break;
    default: STRETCH_CHECK(false);
  }
}

void OpRun::BackwardOp() {
  const OpShape& s = c_.shape;
  dx.assign(x.size(), 0.0f);
  dw.assign(w.size(), 0.0f);
  switch (c_.op) {
    case Op::kLinear:
      LinearBackward<float>(dout.data(), x.data(), w.data(), dx.data(), dw.data(), s.T, s.C, s.N,
                            GradWrite::kOverwrite);
      break;
    case Op::kEmbedding:
      EmbeddingBackward<float>(ids.data(), dout.data(), dx.data(), s.T, s.C, s.N);
      break;
    case Op::kRmsNorm:
      RmsNormBackward<float>(dout.data(), x.data(), w.data(), dx.data(), dw.data(), s.T, s.C, 1e-5f,
                             GradWrite::kOverwrite);
      break;
    case Op::kSwiGlu:
      SwiGluBackward<float>(dout.data(), x.data(), w.data(), dx.data(), dw.data(), s.T * s.C);
      break;
    case Op::kRope:
      dx = dout;
      RopeInterleavedBackward<float>(dx.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, AnglesOf(rope_));
      break;
    case Op::kL2Normalize:
      L2NormalizeBackward<float>(dout.data(), x.data(), dx.data(), s.T * s.H, s.C);
      break;
    case Op::kPairScale:
      dx = dout;
      PairScaleBackward<float>(dx.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, s.C / 2, w.data());
      break;
    case Op::kHeadScale:
      dx = dout;
      HeadScaleBackward<float>(dx.data(), x.data(), s.T, s.H, s.C, v.data(), w.data(), dw.data());
      break;
    case Op::kCrossEntropy:
      CrossEntropyBackward<float>(x.data(), ids.data(), dx.data(), s.T, s.C, dout[0]);
      break;
    default: STRETCH_CHECK(false);
  }
}

namespace {

// What the attention kernel reads besides v: q and k as the case's rotation gives them, and the
// params (with a KernelRotation of the call when the kernel rotates).
struct AttentionCall {
  AttentionDims dims;
  AttentionParams params;
  HeadRows q, k, v;
  std::optional<KernelRotation> rotation;
};

// Sets up `call` (attention.h: the plain path, q and k rotated before the call, or a
// KernelRotation of the raw keys); the rotary work is part of what a timing run measures.
void PrepareAttention(const OpCase& c, const AttentionPlan& plan, float scale,
                      const AlignedVector<float>& q, const AlignedVector<float>& k,
                      const AlignedVector<float>& v, AlignedVector<float>& q_rot,
                      AlignedVector<float>& k_rot, float* lse, AttentionCall& call) {
  const OpShape& s = c.shape;
  const int H = s.H, G = s.G, D = s.C;
  call.dims = AttentionDims{s.T, s.S, s.q_pos0, H, G, D};
  call.params.scale = scale;
  call.params.lse = lse;
  // Element (row, head, d) of k and v at row * row_stride + head * head_stride + d.
  const int64_t kv_rs = c.kv_head_major ? D : int64_t{G} * D;
  const int64_t kv_hs = c.kv_head_major ? s.S * D : D;
  call.q = {q.data(), int64_t{H} * D, D};
  call.k = {k.data(), kv_rs, kv_hs};
  call.v = {v.data(), kv_rs, kv_hs};
  if (c.rotation == Rotation::kNone) return;
  call.params.plan = &plan;
  if (c.rotation == Rotation::kPrerotated) {
    STRETCH_CHECK(plan.KeysRotatedOnce());
    const RopeTable q_table = MakeRopeTable(plan.freq.thetas, s.q_pos0, s.T);
    q_rot.assign(q.begin(), q.end());
    k_rot.assign(k.begin(), k.end());
    RopeInterleaved(q_rot.data(), s.T, H, int64_t{H} * D, D, q_table);
    if (s.q_pos0 == 0 && s.T == s.S) {
      RopeInterleaved(k_rot.data(), s.S, G, kv_rs, kv_hs, q_table);
    } else {
      RopeInterleaved(k_rot.data(), s.S, G, kv_rs, kv_hs, MakeRopeTable(plan.freq.thetas, 0, s.S));
    }
    call.q.data = q_rot.data();
    call.k.data = k_rot.data();
    return;
  }
  call.rotation.emplace(plan, call.k, call.dims).Into(call.params);
}

}  // namespace

void OpRun::ForwardAttention() {
  // The rotated copies are fresh per call, as a KernelRotation's per-slot key copies are: the two
  // paths pay the same allocation.
  AlignedVector<float> q_rot, k_rot;
  AttentionCall call;
  PrepareAttention(c_, plan_, scale_, x, w, v, q_rot, k_rot, lse.empty() ? nullptr : lse.data(),
                   call);
  const int64_t o_rs = int64_t{c_.shape.H} * c_.shape.C;
  AttentionForward(call.q, call.k, call.v, HeadRowsMut{out.data(), o_rs, c_.shape.C}, call.dims,
                   call.params);
}

void OpRun::BackwardAttention() {
  STRETCH_CHECK(c_.rotation != Rotation::kPrerotated);  // gradients are of the raw q and k
  STRETCH_CHECK(!c_.kv_head_major);  // the gradients below are laid out (S, G, D)
  AlignedVector<float> q_rot, k_rot;
  AttentionCall call;
  PrepareAttention(c_, plan_, scale_, x, w, v, q_rot, k_rot, lse.empty() ? nullptr : lse.data(),
                   call);
  const int H = c_.shape.H, G = c_.shape.G, D = c_.shape.C;
  dx.assign(x.size(), 0.0f);
  dw.assign(w.size(), 0.0f);
  dv.assign(v.size(), 0.0f);
  dbias_a.assign(static_cast<size_t>(H), 0.0);
  dbias_b.assign(static_cast<size_t>(H), 0.0);
  const AttentionGrads grads{{dx.data(), int64_t{H} * D, D},
                             {dw.data(), int64_t{G} * D, D},
                             {dv.data(), int64_t{G} * D, D},
                             dbias_a.data(),
                             dbias_b.data()};
  AttentionBackward(call.q, call.k, call.v, HeadRows{out.data(), int64_t{H} * D, D},
                    HeadRows{dout.data(), int64_t{H} * D, D}, lse.data(), call.dims, call.params,
                    grads);
}

double OpRun::AttentionFlops() const {
  if (c_.op != Op::kAttention && c_.op != Op::kAttentionBackward) return 0;
  // Visible (query, key) pairs of queries q_pos0 .. q_pos0 + T - 1 under the causal mask, or a
  // window of w (Lambda's sinks and the blockwise mask's second half-block not counted).
  const int64_t w = plan() != nullptr && plan_.mask != MaskKind::kCausal ? plan_.window : 0;
  double pairs = 0;
  const int64_t lo = c_.shape.q_pos0, hi = lo + c_.shape.T;  // sees keys 0 .. i
  auto causal = [](int64_t n) { return 0.5 * static_cast<double>(n) * static_cast<double>(n + 1); };
  if (w <= 0 || w >= hi) {
    pairs = causal(hi) - causal(lo);
  } else {
    const int64_t ramp = std::clamp<int64_t>(w, lo, hi);  // queries below w see i + 1 keys
    pairs = causal(ramp) - causal(lo) + static_cast<double>(hi - ramp) * static_cast<double>(w);
  }
  return 4.0 * c_.shape.C * pairs * c_.shape.H;
}

// ---- Timing mode -----------------------------------------------------------------------------

double TimeOnce(OpRun& run, bool backward) {
  if (backward) run.Forward();
  Timer t;
  if (backward) {
    run.Backward();
  } else {
    run.Forward();
  }
  return t.Seconds();
}

Timing TimeOp(OpRun& run, int repeats, bool backward) {
  STRETCH_CHECK(repeats >= 1);
  TimeOnce(run, backward);  // warm-up: caches, threads, allocations
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) times.push_back(TimeOnce(run, backward));
  return {Median(times), repeats};
}

}  // namespace stretch::op_cases
