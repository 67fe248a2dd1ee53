// Position methods as their papers define them, pair by pair, for the naive
// references: which keys query i sees, the relative position (i, j) is rotated by, the frequencies
// query i uses, and the factor on its logits. Written from the definitions, independently of the
// segment decomposition in src/position/plan.cc that the kernel uses; the frequencies themselves
// come from ComputeFrequencies, which tests/position checks against hand-computed values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "src/position/method.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

namespace stretch::ref {

// Relative position of (query i, key j), i >= j >= 0 (integer division floors).
inline double MethodRelPos(const Method& m, int64_t i, int64_t j) {
  const int64_t d = i - j;
  const RelMapMethod& r = m.rel;
  if (m.mask.kind == MaskKind::kLambda) {
    static const RelMapDescriptor* const kStreaming = FindRelMap("streaming");
    if (m.rel.map == kStreaming) {
      // StreamingLLM (arXiv 2309.17453, section 3.2): when query i runs, the cache holds the S
      // sinks and the tokens from max(S, i - W + 1) to i, numbered 0, 1, ... in cache order.
      const int64_t S = m.mask.sinks, W = m.mask.window;
      const int64_t first = std::max(S, i - W + 1);
      auto cache_pos = [&](int64_t t) { return t < S ? t : S + (t - first); };
      return static_cast<double>(cache_pos(i) - cache_pos(j));
    }
    return static_cast<double>(std::min(d, m.mask.window));  // a sink is seen at distance w
  }
  // The maps by spec name (src/position/maps/ holds their segment decompositions), looked up once:
  // this runs for every (query, key) pair of the reference forward.
  static const RelMapDescriptor* const kReRope = FindRelMap("rerope");
  static const RelMapDescriptor* const kLeaky = FindRelMap("leaky-rerope");
  static const RelMapDescriptor* const kSelfExtend = FindRelMap("self-extend");
  static const RelMapDescriptor* const kString = FindRelMap("string");
  static const RelMapDescriptor* const kDca = FindRelMap("dca");
  const RelMapDescriptor* const map = r.map;
  if (r.IsIdentity()) return static_cast<double>(d);
  if (map == kReRope) return static_cast<double>(std::min(d, r.window));  // min(i-j, w)
  if (map == kLeaky) {  // i - j below w, else w + (i - j - w) / k
    return d < r.window
               ? static_cast<double>(d)
               : static_cast<double>(r.window) + static_cast<double>(d - r.window) / r.Param("k");
  }
  if (map == kSelfExtend) {  // i - j below W, else floor(i/G) - floor(j/G) + W - floor(W/G)
    const auto g = static_cast<int64_t>(r.Param("group"));
    return d < r.window ? static_cast<double>(d)
                        : static_cast<double>(i / g - j / g + r.window - r.window / g);
  }
  if (map == kString) {  // STRING: i - j below S, else i - j - S + W
    const auto shift = static_cast<int64_t>(r.Param("shift"));
    return d < shift ? static_cast<double>(d) : static_cast<double>(d - shift + r.window);
  }
  if (map == kDca) {
    // ChunkLlama (github.com/HKUNLP/ChunkLlama): chunks of c = chunk_size - local_window; keys
    // at j mod c; the query at i mod c (same chunk), min(i mod c + c, chunk_size) (previous
    // chunk), or min(2c - 1, chunk_size) (older chunks).
    const auto chunk = static_cast<int64_t>(r.Param("chunk"));
    const int64_t c = chunk - r.window;
    const int64_t back = i / c - j / c;
    const int64_t qa = back == 0   ? i % c
                       : back == 1 ? std::min(i % c + c, chunk)
                                   : std::min(2 * c - 1, chunk);
    return static_cast<double>(qa - j % c);
  }
  return static_cast<double>(d);
}

inline bool MethodVisible(const Method& m, int64_t i, int64_t j) {
  if (j > i) return false;
  switch (m.mask.kind) {
    case MaskKind::kCausal: return true;
    case MaskKind::kWindow: return i - j < m.mask.window;
    case MaskKind::kLambda: return i - j < m.mask.window || j < m.mask.sinks;
    case MaskKind::kBlock: {  // LEX: the query's own half-block and the previous one
      const int64_t h = m.mask.window / 2;
      return i / h - j / h <= 1;
    }
    case MaskKind::kChunk:  // Llama 4's chunked attention: the same chunk of c positions
      return i / m.mask.window == j / m.mask.window;
  }
  return true;
}

// s_i = max(L, i + 1) / L: the scale query i uses under dynamic scaling.
inline double DynamicScale(int64_t train_len, int64_t i) {
  return std::max<double>(static_cast<double>(train_len), static_cast<double>(i + 1)) /
         static_cast<double>(train_len);
}

inline std::vector<double> MethodThetas(const AttentionPlan& p, int64_t i) {
  if (!p.dynamic) return p.freq.thetas;
  if (p.method.rope.scaling == RopeScaling::kLongRope) {
    // LongRoPE per position, from HF's definition (_compute_longrope_parameters: inv_freq =
    // 1 / (ext_t base^(2t/d)), ext the long list when the sequence is longer than orig): query i
    // reads a sequence of i + 1 tokens.
    const RopeMethod& r = p.method.rope;
    const int64_t orig = r.original_length != 0 ? r.original_length : p.geo.train_len;
    const std::vector<double>& ext = i + 1 > orig ? r.long_factor : r.short_factor;
    std::vector<double> thetas(ext.size());
    for (size_t t = 0; t < ext.size(); ++t) {
      thetas[t] = std::pow(p.geo.base, -2.0 * static_cast<double>(t) / p.geo.rotary_dim) / ext[t] /
                  p.geo.interpolation;
    }
    return thetas;
  }
  return ComputeFrequencies(p.method.rope, p.geo, DynamicScale(p.geo.train_len, i), i + 1).thetas;
}

// The keys query i sees, counted one by one from the mask's predicate (MethodVisible).
inline int64_t KeysSeen(const Method& m, int64_t i) {
  int64_t n = 0;
  for (int64_t j = 0; j <= i; ++j) n += MethodVisible(m, i, j) ? 1 : 0;
  return n;
}

// attention_factor^2 (of query i when dynamic) times max(1, ln(i + 1) / ln L) with +logn.
inline double MethodLogitFactor(const AttentionPlan& p, int64_t i) {
  const double af =
      p.dynamic ? ComputeFrequencies(p.method.rope, p.geo, DynamicScale(p.geo.train_len, i), i + 1)
                      .attention_factor
                : p.freq.attention_factor;
  double f = af * af;
  if (p.method.logn) {
    f *= std::max(
        1.0, std::log(static_cast<double>(i + 1)) / std::log(static_cast<double>(p.geo.train_len)));
  }
  // Cosine attention with a per-position lambda: times ln(n / 2), n the keys query i sees.
  if (p.position_log_scale) f *= std::log(static_cast<double>(KeysSeen(p.method, i)) / 2.0);
  // Trained log-n: ln(n) / ln L at every position, n the keys query i sees.
  if (p.log_length_scale) {
    f *= std::log(static_cast<double>(KeysSeen(p.method, i))) /
         std::log(static_cast<double>(p.geo.train_len));
  }
  // Llama 4's temperature tuning (meta-llama/llama-models, llama4/model.py: attn_scales =
  // log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1 on the queries of NoPE layers).
  if (p.temperature_floor > 0.0) {
    const double n = static_cast<double>(i) + 1.0;
    f *= 1.0 + p.temperature_scale * std::log(1.0 + std::floor(n / p.temperature_floor));
  }
  return f;
}

// SSMax (arXiv 2501.19399): head h's logits at query i times s_h ln(n), n the keys query i sees
// (the size of the softmax's input); 1 when off.
inline double SsmaxFactor(const AttentionPlan& p, int h, int64_t i) {
  if (p.ssmax.empty()) return 1.0;
  return p.ssmax[static_cast<size_t>(h)] * std::log(static_cast<double>(KeysSeen(p.method, i)));
}

// The additive bias of models trained with one, per head h and distance d = i - j, from the
// papers' definitions (ALiBi: -m_h d; KERPLE log: -r1 log(1 + r2 d); KERPLE power: -r1 d^r2).
inline double BiasValue(const AttentionBias& b, int h, int64_t d) {
  const double x = static_cast<double>(d);
  switch (b.kind) {
    case BiasKind::kNone: return 0.0;
    case BiasKind::kAlibi: return -b.a[static_cast<size_t>(h)] * x;
    case BiasKind::kKerpleLog:
      return -b.a[static_cast<size_t>(h)] * std::log(1.0 + b.b[static_cast<size_t>(h)] * x);
    case BiasKind::kKerplePower:
      return -b.a[static_cast<size_t>(h)] * std::pow(x, b.b[static_cast<size_t>(h)]);
    case BiasKind::kSandwich: {
      // Sandwich: lambda_h times the inner product of the sinusoidal embeddings (Vaswani et al.
      // 2017: p_n[2t] = sin(n w_t), p_n[2t+1] = cos(n w_t), w_t = 10000^(-2t/dim)) of positions
      // i and j, written out as the product of the two vectors, not as a sum of cos(d w_t).
      const int64_t j = 3, i = j + d;  // any j: the product depends on d only
      double dot = 0.0;
      for (int t = 0; t < b.dim / 2; ++t) {
        const double w = std::pow(10000.0, -2.0 * t / b.dim);
        dot += std::sin(static_cast<double>(i) * w) * std::sin(static_cast<double>(j) * w) +
               std::cos(static_cast<double>(i) * w) * std::cos(static_cast<double>(j) * w);
      }
      return b.a[static_cast<size_t>(h)] * dot;
    }
  }
  return 0.0;
}

// XPOS (Sun et al. 2022, arXiv 2212.10554, eq. for zeta; torchscale's `scale` buffer
// (arange(0, d, 2) + 0.4 d) / (1.4 d)): ln(zeta_t) / gamma for each of the d/2 rotary pairs.
inline std::vector<double> XposLogDecay(int pairs, double scale_base) {
  std::vector<double> out;
  const double d = 2.0 * pairs;
  for (int t = 0; t < pairs; ++t)
    out.push_back(std::log((2.0 * t + 0.4 * d) / (1.4 * d)) / scale_base);
  return out;
}

}  // namespace stretch::ref
