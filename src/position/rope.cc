#include "src/position/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "src/core/check.h"
#include "src/core/threads.h"
#include "src/position/method.h"
#include "src/position/method_internal.h"

namespace stretch {

std::vector<double> RopeThetas(double base, int rotary_dim) {
  STRETCH_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim={}", rotary_dim);
  STRETCH_CHECK(base > 1.0, "base={}", base);
  std::vector<double> thetas(static_cast<size_t>(rotary_dim / 2));
  for (int t = 0; t < rotary_dim / 2; ++t) {
    thetas[static_cast<size_t>(t)] = std::pow(base, -2.0 * t / rotary_dim);
  }
  return thetas;
}

std::vector<double> TrainedRopeThetas(double base, int D, int rotated_pairs, double interpolation) {
  std::vector<double> thetas = RopeThetas(base, D);
  for (size_t t = 0; t < thetas.size(); ++t) {
    thetas[t] = static_cast<int>(t) < rotated_pairs ? thetas[t] / interpolation : 0.0;
  }
  return thetas;
}

std::vector<double> XposZetas(int D) {
  STRETCH_CHECK(D > 0 && D % 2 == 0, "D={}", D);
  std::vector<double> zetas(static_cast<size_t>(D / 2));
  for (int t = 0; t < D / 2; ++t) {
    zetas[static_cast<size_t>(t)] = (2.0 * t + 0.4 * D) / (1.4 * D);
  }
  return zetas;
}

RopeTable MakeRopeTableAt(const std::vector<double>& thetas, int64_t pos0,
                          const std::vector<double>& positions) {
  RopeTable table;
  const int64_t n = static_cast<int64_t>(positions.size());
  const size_t P = thetas.size();
  table.pos0 = pos0;
  table.n = n;
  table.pairs = static_cast<int>(P);
  table.cos.resize(static_cast<size_t>(n) * P);
  table.sin.resize(static_cast<size_t>(n) * P);
  // Integer positions (all but a map's fractional ones): p * theta from two small tables by the
  // angle-addition formula, in double: p = 64 a + b, cos(p theta) = cos(64 a theta) cos(b theta)
  // - sin(64 a theta) sin(b theta) (and sin alike), both tables filled with std::cos/std::sin, so
  // each entry is within a few double ulps of the direct value, 1e-9 of a float ulp. This turns
  // n * P cos/sin calls into (n / 64 + 64) * P of them plus 6 flops per entry.
  constexpr int64_t kFine = 64;
  bool integral = n > 0;
  double max_abs = 0.0;
  for (double p : positions) {
    integral = integral && p == std::floor(p) && std::abs(p) < 1e12;
    max_abs = std::max(max_abs, std::abs(p));
  }
  if (!integral) {
    ParallelFor(n, WorkGrain(n, n * static_cast<int64_t>(P), 8192),
                [&](int64_t r_begin, int64_t r_end) {
                  for (int64_t r = r_begin; r < r_end; ++r) {
                    for (size_t t = 0; t < P; ++t) {
                      const double a = positions[static_cast<size_t>(r)] * thetas[t];
                      table.cos[static_cast<size_t>(r) * P + t] = static_cast<float>(std::cos(a));
                      table.sin[static_cast<size_t>(r) * P + t] = static_cast<float>(std::sin(a));
                    }
                  }
                });
    return table;
  }
  const int64_t n_coarse = static_cast<int64_t>(max_abs) / kFine + 1;
  std::vector<double> fc(P * kFine), fs(P * kFine), cc(P * static_cast<size_t>(n_coarse)),
      cs(cc.size());
  for (size_t t = 0; t < P; ++t) {
    for (int64_t b = 0; b < kFine; ++b) {
      fc[t * kFine + b] = std::cos(static_cast<double>(b) * thetas[t]);
      fs[t * kFine + b] = std::sin(static_cast<double>(b) * thetas[t]);
    }
    for (int64_t a = 0; a < n_coarse; ++a) {
      cc[t * n_coarse + a] = std::cos(static_cast<double>(a * kFine) * thetas[t]);
      cs[t * n_coarse + a] = std::sin(static_cast<double>(a * kFine) * thetas[t]);
    }
  }
  ParallelFor(
      n, WorkGrain(n, n * static_cast<int64_t>(P), 8192), [&](int64_t r_begin, int64_t r_end) {
        for (int64_t r = r_begin; r < r_end; ++r) {
          const double p = positions[static_cast<size_t>(r)];
          const int64_t m = static_cast<int64_t>(std::abs(p));
          const double sign = p < 0 ? -1.0 : 1.0;  // cos is even, sin is odd
          const int64_t a = m / kFine, b = m % kFine;
          for (size_t t = 0; t < P; ++t) {
            const double ca = cc[t * n_coarse + a], sa = cs[t * n_coarse + a];
            const double cb = fc[t * kFine + b], sb = fs[t * kFine + b];
            table.cos[static_cast<size_t>(r) * P + t] = static_cast<float>(ca * cb - sa * sb);
            table.sin[static_cast<size_t>(r) * P + t] =
                static_cast<float>(sign * (sa * cb + ca * sb));
          }
        }
      });
  return table;
}

RopeTable MakeRopeTable(const std::vector<double>& thetas, int64_t pos0, int64_t n) {
  std::vector<double> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<double>(pos0 + i);
  return MakeRopeTableAt(thetas, pos0, positions);
}

// ---------------------------------------------------------------------------------------------
// The frequencies of every RoPE scaling of a position method (method.h: CallScale,
// ComputeFrequencies). Formulas from HF transformers src/transformers/modeling_rope_utils.py
// (read for the formulas only; nothing is copied): _compute_linear_scaling_rope_parameters,
// _compute_ntk_parameters / _compute_dynamic_ntk_parameters, _compute_yarn_parameters
// (find_correction_dim, find_correction_range with `truncate`, linear_ramp_factor, get_mscale,
// the attention_factor rule), _compute_llama3_parameters, _compute_longrope_parameters.

namespace method_internal {

double GetMscale(double scale, double mscale) {
  // HF _compute_yarn_parameters.get_mscale
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace method_internal

using method_internal::GetMscale;

double CallScale(const RopeMethod& rope, const RopeGeometry& geo, int64_t fed_len) {
  if (rope.factor != 0.0) return rope.factor;
  STRETCH_CHECK(geo.train_len > 0, "train_len={}", geo.train_len);
  return std::max(1.0, static_cast<double>(fed_len) / static_cast<double>(geo.train_len));
}

bool LongRopeUsesLong(const RopeMethod& rope, const RopeGeometry& geo, int64_t length) {
  const int64_t orig = rope.original_length != 0 ? rope.original_length : geo.train_len;
  return length > orig;
}

RopeFrequencies ComputeFrequencies(const RopeMethod& rope, const RopeGeometry& geo, double s,
                                   int64_t length) {
  STRETCH_CHECK(geo.rotary_dim > 0 && geo.rotary_dim % 2 == 0, "rotary_dim={}", geo.rotary_dim);
  STRETCH_CHECK(geo.train_len > 0, "train_len={}", geo.train_len);
  STRETCH_CHECK(std::isfinite(s) && s >= 1.0, "s={}", s);
  STRETCH_CHECK(std::isfinite(geo.interpolation) && geo.interpolation >= 1.0, "interpolation={}",
                geo.interpolation);
  const int d = geo.rotary_dim;
  const size_t pairs = static_cast<size_t>(d / 2);
  const double base = rope.base != 0.0 ? rope.base : geo.base;
  const double orig =
      static_cast<double>(rope.original_length != 0 ? rope.original_length : geo.train_len);
  RopeFrequencies f;
  switch (rope.scaling) {
    case RopeScaling::kNone: f.thetas = RopeThetas(base, d); break;
    case RopeScaling::kLinear:
      // HF _compute_linear_scaling_rope_parameters: inv_freq /= factor.
      f.thetas = RopeThetas(base, d);
      for (double& t : f.thetas) t /= s;
      break;
    case RopeScaling::kNtk: {
      // HF _compute_ntk_parameters: base * factor^(dim / (dim - 2)); the dynamic variant is the
      // same at s_i (HF's _compute_dynamic_ntk_parameters with factor 1).
      STRETCH_CHECK(d > 2, "ntk needs rotary_dim > 2, got {}", d);
      f.thetas = RopeThetas(base * std::pow(s, static_cast<double>(d) / (d - 2)), d);
      break;
    }
    case RopeScaling::kNtkFixed:
      // RoPE as a beta-base encoding (Su's blog, which calls it "NTK-fixed"): base * s.
      f.thetas = RopeThetas(base * s, d);
      break;
    case RopeScaling::kYarn: {
      // HF _compute_yarn_parameters with factor = s and original_max_position_embeddings = orig.
      // find_correction_dim(r) = d ln(orig / (2 pi r)) / (2 ln base): the pair index whose
      // wavelength fits r times into orig. Pairs below `low` (fast) keep their frequency, pairs
      // above `high` (slow) are interpolated (theta / s), with a linear ramp in between.
      auto correction_dim = [&](double rotations) {
        return d * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
      };
      double low = correction_dim(rope.beta_fast);
      double high = correction_dim(rope.beta_slow);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(d - 1));
      if (low == high) high += 0.001;  // HF linear_ramp_factor: prevent singularity
      f.thetas = RopeThetas(base, d);
      for (size_t t = 0; t < pairs; ++t) {
        const double ramp = std::clamp((static_cast<double>(t) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // inv_freq_extrapolation_factor
        const double theta = f.thetas[t];
        f.thetas[t] = theta / s * (1.0 - extrapolation) + theta * extrapolation;
      }
      if (rope.attention_factor != 0.0) {
        f.attention_factor = rope.attention_factor;
      } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
        f.attention_factor = GetMscale(s, rope.mscale) / GetMscale(s, rope.mscale_all_dim);
      } else {
        f.attention_factor = GetMscale(s, 1.0);
      }
      break;
    }
    case RopeScaling::kLlama3: {
      // HF _compute_llama3_parameters with factor = s, old_context_len = orig: wavelengths
      // shorter than orig/high keep theta, longer than orig/low get theta/s, and in between
      // smooth = (orig / wavelen - low) / (high - low) mixes (1 - smooth) theta/s + smooth theta.
      const double low = rope.low_freq_factor;
      const double high = rope.high_freq_factor;
      const double low_freq_wavelen = orig / low;
      const double high_freq_wavelen = orig / high;
      f.thetas = RopeThetas(base, d);
      for (double& theta : f.thetas) {
        const double wavelen = 2.0 * std::numbers::pi / theta;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
          theta /= s;
        } else {
          const double smooth = (orig / wavelen - low) / (high - low);
          theta = (1.0 - smooth) * theta / s + smooth * theta;
        }
      }
      break;
    }
    case RopeScaling::kLongRope: {
      // HF _compute_longrope_parameters: inv_freq = 1 / (ext_factors * base^(2t/d)), the long
      // list when the sequence is longer than orig, else the short one; attention factor
      // sqrt(1 + ln(factor) / ln(orig)) for factor > 1, factor being s (the call's scale, or
      // s_i). The sequence is `length` long (s L when not given).
      const bool use_long = length > 0 ? LongRopeUsesLong(rope, geo, length)
                                       : s * static_cast<double>(geo.train_len) > orig;
      const std::vector<double>& ext = use_long ? rope.long_factor : rope.short_factor;
      STRETCH_CHECK(ext.size() == pairs, "longrope {} list has {} factors for {} pairs",
                    use_long ? "long" : "short", ext.size(), pairs);
      f.thetas = RopeThetas(base, d);
      for (size_t t = 0; t < pairs; ++t) f.thetas[t] /= ext[t];
      if (rope.attention_factor != 0.0) {
        f.attention_factor = rope.attention_factor;
      } else {
        f.attention_factor = s <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(s) / std::log(orig));
      }
      break;
    }
  }
  // The model's own position interpolation (PI, Chen et al. 2023, arXiv 2306.15595: position m
  // rotated as m / F; HF _compute_linear_scaling_rope_parameters: inv_freq / factor), trained
  // into it (`stretch train --position rope:pi=F`): it divides every theta, and the method above
  // (pi, ntk, ntk-fixed; ValidateMethod refuses the wavelength rules of yarn, llama3 and longrope
  // on such a model) applies on top of it.
  if (geo.interpolation != 1.0) {
    for (double& t : f.thetas) t /= geo.interpolation;
  }
  return f;
}

}  // namespace stretch
