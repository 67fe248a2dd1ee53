#include "src/position/plan.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"

namespace stretch {
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
    case MaskKind::kChunk: return j >= ChunkKeyBegin(i, window);
  }
  return true;
}

int64_t AttentionPlan::FirstVisibleKey(int64_t i) const {
  switch (mask) {
    case MaskKind::kWindow: return std::max<int64_t>(0, i - window + 1);
    case MaskKind::kBlock: return BlockKeyBegin(i, window / 2);
    case MaskKind::kChunk: return ChunkKeyBegin(i, window);
    case MaskKind::kCausal:
    case MaskKind::kLambda: return 0;
  }
  return 0;
}

int64_t AttentionPlan::VisibleKeys(int64_t i) const {
  if (mask == MaskKind::kLambda) {
    // The window's keys, and the sinks that lie before it.
    return std::min<int64_t>(i + 1, window) +
           std::min<int64_t>(sinks, std::max<int64_t>(0, i + 1 - window));
  }
  return i - FirstVisibleKey(i) + 1;
}

RopeFrequencies AttentionPlan::FrequenciesAt(int64_t i) const {
  if (!dynamic) return freq;
  const double L = static_cast<double>(geo.train_len);
  const double s = std::max(L, static_cast<double>(i + 1)) / L;
  RopeFrequencies f = ComputeFrequencies(method.rope, geo, s, i + 1);
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
  if (position_log_scale) scale *= std::log(0.5 * static_cast<double>(VisibleKeys(i)));
  if (log_length_scale) {
    scale *= std::log(static_cast<double>(VisibleKeys(i))) /
             std::log(static_cast<double>(geo.train_len));
  }
  if (temperature_floor > 0.0) {
    scale *= std::log(std::floor(static_cast<double>(i + 1) / temperature_floor) + 1.0) *
                 temperature_scale +
             1.0;
  }
  return scale;
}

AttentionPlan MakeAttentionPlan(const Method& m, const RopeGeometry& geo, int64_t fed_len) {
  AttentionPlan plan;
  plan.method = ResolveMethod(m, geo, fed_len);
  plan.requested = m;
  plan.geo = geo;
  plan.geo.base = plan.method.rope.base;
  plan.fed_len = fed_len;
  plan.dynamic = plan.method.rope.mode == ScaleMode::kDynamic;
  plan.freq = plan.dynamic ? ComputeFrequencies(plan.method.rope, plan.geo, 1.0, 1)
                           : ComputeFrequencies(plan.method.rope, plan.geo, plan.method.rope.factor,
                                                fed_len);
  plan.logn = plan.method.logn;
  plan.mask = plan.method.mask.kind;
  plan.window = plan.method.mask.window;
  plan.sinks = plan.method.mask.sinks;
  const RelMapMethod& r = plan.method.rel;
  plan.map.map = r.map;
  r.map->build(r, plan.map);
  if (plan.mask == MaskKind::kLambda) {
    // Lambda sees its sinks through the clamping map (LM-Infinite), or at the streaming cache's
    // positions (a mask-only map); either takes the mask's window and sinks.
    STRETCH_CHECK(r.IsIdentity() || r.map->mask_only);
    RelMapMethod lambda;
    lambda.map = r.IsIdentity() ? &ClampMap() : r.map;
    lambda.window = plan.window;
    lambda.ints[0] = plan.sinks;
    plan.map = PositionMap{};
    plan.map.map = lambda.map;
    lambda.map->build(lambda, plan.map);
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
