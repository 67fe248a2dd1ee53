#include "src/eval/rotation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "src/core/check.h"
#include "src/position/rope.h"

namespace stretch {

int RotationView::BeyondCount() const {
  return static_cast<int>(std::count_if(pairs.begin(), pairs.end(),
                                        [](const RotationPair& p) { return p.beyond_trained; }));
}

double MaxRelativePosition(const AttentionPlan& plan, int64_t N) {
  STRETCH_CHECK(N >= 1, "N={}", N);
  // Most maps give relative positions that never decrease with the query position for a fixed
  // key, so the last query sees the largest, unless the mask hides keys from later queries that
  // earlier ones saw; a map whose positions do not says from which query on to look
  // (first_widest_query). The blockwise mask's reach depends on i mod B/2 (B the window): the last
  // B queries hold the end of a whole half-block whenever N >= B, which reaches back furthest.
  int64_t first_query = N - 1;
  if (plan.map.map->first_widest_query != nullptr) {
    first_query = plan.map.map->first_widest_query(plan.map, N);
  }
  if (plan.mask == MaskKind::kBlock || plan.mask == MaskKind::kChunk)
    first_query = std::min(first_query, std::max<int64_t>(0, N - plan.window));
  double best = 0.0;
  for (int64_t i = first_query; i < N; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      if (plan.Visible(i, j)) best = std::max(best, plan.map.RelPos(i, j));
    }
  }
  return best;
}

RotationView MakeRotationView(const RopeGeometry& model_geo, const AttentionPlan& plan) {
  RotationView v;
  v.train_len = model_geo.train_len;
  v.ctx = plan.fed_len;
  const int64_t last = std::max<int64_t>(0, plan.fed_len - 1);
  const RopeFrequencies method_freq = plan.FrequenciesAt(last);
  // The model's trained angles: its base, and its own position interpolation (PI) if any.
  std::vector<double> thetas = RopeThetas(model_geo.base, model_geo.rotary_dim);
  for (double& t : thetas) t /= model_geo.interpolation;
  STRETCH_CHECK(thetas.size() == method_freq.thetas.size(), "{} vs {} pairs", thetas.size(),
                method_freq.thetas.size());
  v.max_rel_method = MaxRelativePosition(plan, std::max<int64_t>(1, plan.fed_len));
  v.attention_factor = method_freq.attention_factor;
  v.logit_scale_last = plan.LogitScale(last);
  const double two_pi = 2.0 * std::numbers::pi;
  const double L = static_cast<double>(model_geo.train_len);
  for (size_t t = 0; t < thetas.size(); ++t) {
    RotationPair p;
    p.t = static_cast<int>(t);
    p.theta = thetas[t];
    p.theta_method = method_freq.thetas[t];
    p.ratio = p.theta_method / p.theta;
    p.period = p.theta_method > 0 ? two_pi / p.theta_method : INFINITY;
    p.turns_trained = L * p.theta / two_pi;
    p.turns_method = v.max_rel_method * p.theta_method / two_pi;
    // Training saw relative angles 0 .. (L-1) theta in steps of theta. A method angle below
    // L theta lies within one step of them (PI's fractional positions do); R theta' >= L theta
    // is at least one whole position past them. Angles are exact in double (equality included:
    // plain RoPE at N = L + 1 has R theta' = L theta), so the margin only absorbs rounding.
    p.beyond_trained =
        p.turns_trained < 1.0 && v.max_rel_method * p.theta_method >= L * p.theta * (1.0 - 1e-12);
    v.pairs.push_back(p);
  }
  return v;
}

std::string YarnOutsideItsRegimeNote(const RopeGeometry& model_geo, const AttentionPlan& plan) {
  const RopeMethod& rope = plan.method.rope;
  if (rope.scaling != RopeScaling::kYarn) return "";
  const RotationView v = MakeRotationView(model_geo, plan);
  if (v.pairs.empty()) return "";
  const int64_t original = rope.original_length > 0 ? rope.original_length : model_geo.train_len;
  // The fastest pair's turns within the original length as YaRN's ramp counts them
  // (find_correction_dim in src/position/rope.cc): pair 0 turns by 1 radian a position whatever
  // the base, and the model's own interpolation (RopeGeometry::interpolation) does not enter the
  // ramp.
  const double fastest = static_cast<double>(original) / (2.0 * std::numbers::pi);
  if (fastest >= rope.beta_fast) return "";
  int64_t slowed = 0;
  for (const RotationPair& p : v.pairs) slowed += p.ratio < 1.0 - 1e-9 ? 1 : 0;
  if (slowed == 0) return "";  // at the training length (factor 1) nothing changes
  return fmt::format(
      "no RoPE pair turns beta_fast = {:g} times within the original length ({} tokens; the "
      "fastest turns {:.1f} times), the pairs YaRN's ramp is meant to leave alone, so it slows {} "
      "of the {} pairs, those that place the last few dozen tokens too: these rows measure YaRN "
      "outside the regime it was made for (models trained on thousands of tokens with wider heads "
      "keep their fastest pairs)",
      rope.beta_fast, original, fastest, slowed, v.pairs.size());
}

std::string RelMapText(const AttentionPlan& plan) { return plan.map.map->describe(plan.map); }

std::string MaskText(const AttentionPlan& plan) {
  switch (plan.mask) {
    case MaskKind::kCausal: return "causal: query i sees every key j <= i";
    case MaskKind::kWindow:
      return fmt::format("sliding window of {}: query i sees keys j with 0 <= i - j < {}",
                         plan.window, plan.window);
    case MaskKind::kLambda:
      return fmt::format("Lambda: a window of {} plus the first {} tokens (attention sinks)",
                         plan.window, plan.sinks);
    case MaskKind::kBlock:
      return fmt::format(
          "blockwise causal: query i sees its own half-block of {} positions and "
          "the one before it ({} .. {} keys)",
          plan.window / 2, plan.window / 2 + 1, plan.window);
    case MaskKind::kChunk:
      return fmt::format(
          "chunked: the text is cut into chunks of {} positions and query i sees the keys of its "
          "own chunk up to i",
          plan.window);
  }
  return "?";
}

std::string LongRopeSetText(const AttentionPlan& plan) {
  const RopeMethod& r = plan.method.rope;
  if (r.scaling != RopeScaling::kLongRope) return "";
  const int64_t orig = r.original_length != 0 ? r.original_length : plan.geo.train_len;
  if (plan.dynamic) {
    return fmt::format(
        "per position: queries at positions 0 .. {} (a sequence up to orig = {}) use the short "
        "factors, later ones the long factors, and every key is rotated again with the query's "
        "set; at N = {}: the {} factors",
        orig - 1, orig, plan.fed_len,
        LongRopeUsesLong(r, plan.geo, plan.fed_len) ? "long" : "short");
  }
  const bool use_long = LongRopeUsesLong(r, plan.geo, plan.fed_len);
  return fmt::format(
      "the {} factors for the whole call (N = {} {} orig = {}), chosen once from N (for "
      "generate: prompt + new tokens), so no cached key changes rotation",
      use_long ? "long" : "short", plan.fed_len, use_long ? ">" : "<=", orig);
}

std::string RotationViewText(const RotationView& v) {
  std::string out = fmt::format(
      "rotation per frequency pair t at context N = {} (L = {} trained; R = {:g}, the largest "
      "relative position the method gives at N):\n"
      "  theta     the model's angle per position, base^(-2t/d)\n"
      "  theta'    the method's angle per position at this context (dynamic methods: the last "
      "query's, s = N/L)\n"
      "  ratio     theta' / theta: what the method does to the pair (1 = untouched, 1/s = "
      "interpolated by s)\n"
      "  period    2 pi / theta', in tokens\n"
      "  turns@L   turns the pair makes over the L trained positions, L theta / 2 pi\n"
      "  turns@N   turns the method makes it take at context N, R theta' / 2 pi\n"
      "  beyond    yes when turns@L < 1 (the pair never completed a turn in training, so the model "
      "saw only the arc from 0 to (L-1) theta) and R theta' >= L theta (at N it turns at least "
      "one trained position further: angles never seen in training)\n",
      v.ctx, v.train_len, v.max_rel_method);
  out += fmt::format("  {:>3} {:>11} {:>11} {:>9} {:>11} {:>10} {:>10}  {}\n", "t", "theta",
                     "theta'", "ratio", "period", "turns@L", "turns@N", "beyond");
  for (const RotationPair& p : v.pairs) {
    out += fmt::format("  {:>3} {:>11.4e} {:>11.4e} {:>9.4f} {:>11.5g} {:>10.4g} {:>10.4g}  {}\n",
                       p.t, p.theta, p.theta_method, p.ratio, p.period, p.turns_trained,
                       p.turns_method, p.beyond_trained ? "yes" : "no");
  }
  out += fmt::format("{} of {} pairs go beyond the trained arc at N = {}.\n", v.BeyondCount(),
                     v.pairs.size(), v.ctx);
  return out;
}

}  // namespace stretch
