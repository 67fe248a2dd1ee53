#include "src/position/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/core/check.h"

namespace stretch {
namespace {

// floor(a / b) for b > 0 and any sign of a.
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

int PositionMap::Segments() const {
  switch (kind) {
    case RelMapKind::kIdentity: return 1;
    case RelMapKind::kDca: return 3;
    default: return 2;
  }
}

int PositionMap::SegmentOf(int64_t i, int64_t j) const {
  switch (kind) {
    case RelMapKind::kIdentity: return 0;
    case RelMapKind::kReRope:
    case RelMapKind::kLeakyReRope:
    case RelMapKind::kSelfExtend: return i - j >= window ? 1 : 0;
    case RelMapKind::kString: return i - j >= shift ? 1 : 0;
    case RelMapKind::kDca: {
      const int64_t back = FloorDiv(i, chunk_len) - FloorDiv(j, chunk_len);
      return back <= 0 ? 0 : (back == 1 ? 1 : 2);
    }
  }
  return 0;
}

int64_t PositionMap::SegmentRunEnd(int64_t i, int64_t j) const {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  switch (kind) {
    case RelMapKind::kIdentity: return kNever;
    case RelMapKind::kDca: return (FloorDiv(j, chunk_len) + 1) * chunk_len;
    default: {
      // Far while i - j >= edge, i.e. j <= i - edge; near after.
      const int64_t edge = kind == RelMapKind::kString ? shift : window;
      return j <= i - edge ? i - edge + 1 : kNever;
    }
  }
}

uint32_t PositionMap::SegmentsIn(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
  if (kind == RelMapKind::kIdentity) return 1u;
  if (kind == RelMapKind::kDca) {
    const int64_t lo = FloorDiv(q_lo, chunk_len) - FloorDiv(k_hi, chunk_len);
    const int64_t hi = FloorDiv(q_hi, chunk_len) - FloorDiv(k_lo, chunk_len);
    uint32_t bits = 0;
    if (lo <= 0) bits |= 1u;
    if (lo <= 1 && hi >= 1) bits |= 2u;
    if (hi >= 2) bits |= 4u;
    return bits;
  }
  const int64_t edge = kind == RelMapKind::kString ? shift : window;
  const int64_t d_lo = q_lo - k_hi, d_hi = q_hi - k_lo;
  uint32_t bits = 0;
  if (d_lo < edge) bits |= 1u;
  if (d_hi >= edge) bits |= 2u;
  return bits;
}

double PositionMap::QueryPos(int seg, int64_t i) const {
  if (seg == 0 && kind != RelMapKind::kDca) return static_cast<double>(i);
  switch (kind) {
    case RelMapKind::kIdentity: return static_cast<double>(i);
    case RelMapKind::kReRope: return static_cast<double>(window);
    case RelMapKind::kLeakyReRope:
      return static_cast<double>(window) + static_cast<double>(i - window) / k;
    case RelMapKind::kSelfExtend:
      return static_cast<double>(FloorDiv(i, group) + window - FloorDiv(window, group));
    case RelMapKind::kString: return static_cast<double>(i - shift + window);
    case RelMapKind::kDca: {
      const int64_t r = i % chunk_len;
      if (seg == 0) return static_cast<double>(r);
      if (seg == 1) return static_cast<double>(std::min(r + chunk_len, chunk_size));
      return static_cast<double>(std::min(2 * chunk_len - 1, chunk_size));
    }
  }
  return static_cast<double>(i);
}

double PositionMap::KeyPos(int seg, int64_t j) const {
  if (kind == RelMapKind::kDca) return static_cast<double>(j % chunk_len);
  if (seg == 0) return static_cast<double>(j);
  switch (kind) {
    case RelMapKind::kReRope: return 0.0;
    case RelMapKind::kLeakyReRope: return static_cast<double>(j) / k;
    case RelMapKind::kSelfExtend: return static_cast<double>(FloorDiv(j, group));
    default: return static_cast<double>(j);
  }
}

int PositionMap::KeySlots() const {
  switch (kind) {
    case RelMapKind::kReRope:
    case RelMapKind::kLeakyReRope:
    case RelMapKind::kSelfExtend: return 2;
    default: return 1;  // identity, string (j for both segments), dca (j mod c for all three)
  }
}

int PositionMap::KeySlot(int seg) const { return KeySlots() == 2 ? seg : 0; }

bool PositionMap::SlotIsUnrotated(int slot) const {
  return kind == RelMapKind::kReRope && slot == 1;
}

double PositionMap::RelPos(int64_t i, int64_t j) const {
  const int seg = SegmentOf(i, j);
  return QueryPos(seg, i) - KeyPos(seg, j);
}

double AttentionBias::Value(int head, int64_t distance) const {
  const double d = static_cast<double>(distance);
  const size_t h = static_cast<size_t>(head);
  switch (kind) {
    case BiasKind::kNone: return 0.0;
    case BiasKind::kAlibi: return -a[h] * d;
    case BiasKind::kKerpleLog: return -a[h] * std::log1p(b[h] * d);
    case BiasKind::kKerplePower: return -a[h] * std::pow(d, b[h]);
    case BiasKind::kSandwich:
      return a[h] * (distance < static_cast<int64_t>(table.size())
                         ? table[static_cast<size_t>(distance)]
                         : SandwichSum(dim, distance));
  }
  return 0.0;
}

namespace {
std::vector<double> SandwichOmegas(int dim) {  // w_t = 10000^(-2t/dim)
  std::vector<double> w(static_cast<size_t>(dim / 2));
  for (int t = 0; t < dim / 2; ++t) w[static_cast<size_t>(t)] = std::pow(10000.0, -2.0 * t / dim);
  return w;
}
double SumCos(const std::vector<double>& omegas, int64_t distance) {
  double sum = 0.0;
  for (double w : omegas) sum += std::cos(static_cast<double>(distance) * w);
  return sum;
}
}  // namespace

double SandwichSum(int dim, int64_t distance) { return SumCos(SandwichOmegas(dim), distance); }

AttentionBias SandwichBias(std::vector<double> lambdas, int dim, int64_t max_distance) {
  STRETCH_CHECK(dim >= 2 && dim % 2 == 0, "sandwich dim={}", dim);
  AttentionBias b;
  b.kind = BiasKind::kSandwich;
  b.a = std::move(lambdas);
  b.dim = dim;
  const std::vector<double> omegas = SandwichOmegas(dim);
  b.table.resize(static_cast<size_t>(std::max<int64_t>(0, max_distance)));
  for (int64_t d = 0; d < max_distance; ++d) b.table[static_cast<size_t>(d)] = SumCos(omegas, d);
  return b;
}

std::vector<double> AttentionPlan::XposLog2Decay() const {
  std::vector<double> out;
  if (xpos_scale_base <= 0.0) return out;
  for (const double zeta : XposZetas(2 * static_cast<int>(freq.thetas.size()))) {
    out.push_back(std::log2(zeta) / xpos_scale_base);
  }
  return out;
}

std::vector<double> AlibiSlopes(int n_heads) {
  STRETCH_CHECK(n_heads >= 1, "n_heads={}", n_heads);
  auto power_of_two = [](int n) {
    std::vector<double> s(static_cast<size_t>(n));
    for (int h = 1; h <= n; ++h) s[static_cast<size_t>(h - 1)] = std::exp2(-8.0 * h / n);
    return s;
  };
  int m = 1;
  while (2 * m <= n_heads) m *= 2;
  std::vector<double> slopes = power_of_two(m);
  if (m < n_heads) {
    const std::vector<double> extra = power_of_two(2 * m);
    for (int x = 0; static_cast<int>(slopes.size()) < n_heads; x += 2) {
      slopes.push_back(extra[static_cast<size_t>(x)]);
    }
  }
  return slopes;
}

bool AttentionPlan::Visible(int64_t i, int64_t j) const {
  if (j > i) return false;
  switch (mask) {
    case MaskKind::kCausal: return true;
    case MaskKind::kWindow: return i - j < window;
    case MaskKind::kLambda: return i - j < window || j < sinks;
    case MaskKind::kBlock: return j >= BlockKeyBegin(i, window / 2);
  }
  return true;
}

int64_t AttentionPlan::FirstVisibleKey(int64_t i) const {
  switch (mask) {
    case MaskKind::kWindow: return std::max<int64_t>(0, i - window + 1);
    case MaskKind::kBlock: return BlockKeyBegin(i, window / 2);
    case MaskKind::kCausal:
    case MaskKind::kLambda: return 0;
  }
  return 0;
}

RopeFrequencies AttentionPlan::FrequenciesAt(int64_t i) const {
  if (!dynamic) return freq;
  const double L = static_cast<double>(geo.train_len);
  const double s = std::max(L, static_cast<double>(i + 1)) / L;
  RopeFrequencies f = ComputeFrequencies(method.rope, geo, s);
  if (rotated_pairs >= 0) {
    for (size_t u = static_cast<size_t>(rotated_pairs); u < f.thetas.size(); ++u) f.thetas[u] = 0.0;
  }
  return f;
}

void AttentionPlan::LeavePairsUnrotated(int rotated) {
  STRETCH_CHECK(rotated >= 0 && static_cast<size_t>(rotated) <= freq.thetas.size(),
                "rotated pairs {} of {}", rotated, freq.thetas.size());
  rotated_pairs = rotated;
  for (size_t u = static_cast<size_t>(rotated); u < freq.thetas.size(); ++u) freq.thetas[u] = 0.0;
}

double AttentionPlan::LogitScale(int64_t i) const {
  const double af = dynamic ? FrequenciesAt(i).attention_factor : freq.attention_factor;
  double scale = af * af;
  if (logn) {
    // max(1, ln(i + 1) / ln L): Chiang & Cholak 2022 / Su 2021's log-n attention scaling.
    scale *= std::max(
        1.0, std::log(static_cast<double>(i + 1)) / std::log(static_cast<double>(geo.train_len)));
  }
  if (position_log_scale) scale *= std::log(0.5 * static_cast<double>(i + 1));
  return scale;
}

AttentionPlan MakeAttentionPlan(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  AttentionPlan plan;
  plan.method = ResolveMethod(m, geo, fed_len);
  plan.geo = geo;
  plan.geo.base = plan.method.rope.base;
  plan.fed_len = fed_len;
  plan.dynamic = plan.method.rope.mode == ScaleMode::kDynamic;
  plan.freq =
      ComputeFrequencies(plan.method.rope, plan.geo, plan.dynamic ? 1.0 : plan.method.rope.factor);
  plan.logn = plan.method.logn;
  plan.mask = plan.method.mask.kind;
  plan.window = plan.method.mask.window;
  plan.sinks = plan.method.mask.sinks;
  const RelMapMethod& r = plan.method.rel;
  PositionMap& map = plan.map;
  map.kind = r.kind;
  switch (r.kind) {
    case RelMapKind::kIdentity: break;
    case RelMapKind::kReRope: map.window = r.window; break;
    case RelMapKind::kLeakyReRope:
      map.window = r.window;
      map.k = r.leaky_k;
      break;
    case RelMapKind::kSelfExtend:
      map.window = r.window;
      map.group = r.group;
      break;
    case RelMapKind::kString:
      map.window = r.window;
      map.shift = r.shift;
      break;
    case RelMapKind::kDca:
      map.window = r.window;
      map.chunk_size = r.chunk;
      map.chunk_len = r.chunk - r.window;
      STRETCH_CHECK(map.chunk_len >= 1, "dca chunk={} window={}", r.chunk, r.window);
      break;
  }
  if (plan.mask == MaskKind::kLambda) {
    STRETCH_CHECK(r.kind == RelMapKind::kIdentity);
    map.kind = RelMapKind::kReRope;
    map.window = plan.window;
  }
  return plan;
}

namespace {

// cos/sin of pos(r) * theta_t for r = pos0 .. pos0 + n - 1.
template <class PosFn>
RopeTable TableAt(const std::vector<double>& thetas, int64_t pos0, int64_t n, PosFn pos) {
  std::vector<double> positions(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) positions[static_cast<size_t>(r)] = pos(pos0 + r);
  return MakeRopeTableAt(thetas, pos0, positions);
}

}  // namespace

void RotationTables::Prepare(const AttentionPlan& plan, int64_t pos0, int64_t T) {
  STRETCH_CHECK(!plan.dynamic, "dynamic plans rotate per query in the kernel");
  const std::vector<double>& th = plan.freq.thetas;
  const PositionMap& map = plan.map;
  pairs_ = static_cast<int>(th.size());
  pos0_ = pos0;
  q_.clear();
  k_.clear();
  for (int s = 0; s < map.Segments(); ++s) {
    q_.push_back(TableAt(th, pos0, T, [&](int64_t i) { return map.QueryPos(s, i); }));
  }
  for (int slot = 0; slot < map.KeySlots(); ++slot) {
    // The first segment using this slot defines its key position.
    int seg = 0;
    while (map.KeySlot(seg) != slot) ++seg;
    k_.push_back(TableAt(th, pos0, T, [&](int64_t j) { return map.KeyPos(seg, j); }));
  }
}

}  // namespace stretch
