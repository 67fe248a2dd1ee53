// Naive NBCE in double (Su Jianlin, "NBCE: 使用朴素贝叶斯扩展LLM的Context处理长度",
// kexue.fm/archives/9617, 2023), written from the method's definition and independent of the
// engine's src/eval/nbce: the yardstick its float32 NBCE is tested against.
//
//   chunks S_1 .. S_K: context[0 .. c-1], context[c .. 2c-1], ..., the last one possibly shorter
//   row k = [BOS] + S_k + Q, row 0 = [BOS] + Q, each through the naive forward (reference/llama.h)
//   lp_k[r] = log_softmax(logits of row k at the position of Q[r])               (V, double)
//   H_k[r]  = -sum_v exp(lp_k[r][v]) lp_k[r][v]
//   P[r]    = lp_k*[r], k* = argmin_k H_k[r] (lowest k on ties)    pool `entropy`
//           = (1/K) sum_k lp_k[r]                                  pool `mean`
//   out[r]  = log_softmax((beta + 1) P[r] - beta lp_0[r])
// Row r is the distribution of the token after Q[0..r].
//
// The expensive part (the rows' forwards) is NbceRowsRef; NbceCombineRef pools and combines them,
// so that a test can try several betas and poolings on one set of rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "reference/llama.h"
#include "src/model/config.h"

namespace stretch::ref {

enum class NbcePoolRef { kEntropy, kMean };

struct NbceRowsRef {
  int64_t K = 0;  // chunks
  int64_t Q = 0;  // query tokens
  int V = 0;
  // lp[k] (Q, V): row k's log-softmax at the positions of Q; lp[0] the unconditioned row.
  std::vector<std::vector<double>> lp;
  // entropy[k][r] = H_k[r] for k = 1 .. K (entropy[0]: the unconditioned row's, unused).
  std::vector<std::vector<double>> entropy;
};

struct NbceOutRef {
  std::vector<double> log_probs;  // (Q, V)
  std::vector<int> chosen;        // (Q): k* - 1 (0-based chunk) for pool `entropy`; -1 for `mean`
};

// log_softmax of one row of V values, in double.
inline std::vector<double> LogSoftmaxRef(const double* x, int V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; ++v) mx = std::max(mx, x[v]);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(x[v] - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) out[static_cast<size_t>(v)] = x[v] - lse;
  return out;
}

// Runs the K + 1 rows of NBCE with chunks of `chunk` tokens (>= 1) through the naive forward
// under `pos` (plain RoPE when empty).
inline NbceRowsRef NbceRowsOf(const Model& model, const std::vector<int>& context,
                              const std::vector<int>& query, int bos, int64_t chunk,
                              const PositionRef& pos = {}) {
  const int V = model.config.vocab_size;
  const size_t Q = query.size();
  std::vector<std::vector<int>> rows;
  rows.push_back({bos});  // row 0, [BOS] + Q
  for (size_t at = 0; at < context.size(); at += static_cast<size_t>(chunk)) {
    std::vector<int> row = {bos};
    for (size_t i = at; i < context.size() && i < at + static_cast<size_t>(chunk); ++i) {
      row.push_back(context[i]);
    }
    rows.push_back(row);
  }
  NbceRowsRef out;
  out.K = static_cast<int64_t>(rows.size()) - 1;
  out.Q = static_cast<int64_t>(Q);
  out.V = V;
  for (std::vector<int>& row : rows) {
    row.insert(row.end(), query.begin(), query.end());
    const std::vector<double> logits = LlamaForwardRef<double>(model, row, pos);
    std::vector<double> lp(Q * static_cast<size_t>(V));
    std::vector<double> h(Q);
    for (size_t r = 0; r < Q; ++r) {
      const size_t p = row.size() - Q + r;  // the position of Q[r] in the row
      const std::vector<double> l = LogSoftmaxRef(logits.data() + p * static_cast<size_t>(V), V);
      double e = 0;
      for (int v = 0; v < V; ++v) {
        lp[r * static_cast<size_t>(V) + static_cast<size_t>(v)] = l[static_cast<size_t>(v)];
        e -= std::exp(l[static_cast<size_t>(v)]) * l[static_cast<size_t>(v)];
      }
      h[r] = e;
    }
    out.lp.push_back(std::move(lp));
    out.entropy.push_back(std::move(h));
  }
  return out;
}

// Pools the context rows and combines them with the unconditioned one.
inline NbceOutRef NbceCombineRef(const NbceRowsRef& rows, double beta, NbcePoolRef pool) {
  const size_t V = static_cast<size_t>(rows.V);
  const size_t Q = static_cast<size_t>(rows.Q);
  NbceOutRef out;
  out.log_probs.resize(Q * V);
  out.chosen.assign(Q, -1);
  std::vector<double> z(V);
  for (size_t r = 0; r < Q; ++r) {
    std::vector<double> P(V, 0.0);
    if (pool == NbcePoolRef::kEntropy) {
      size_t best = 1;
      for (size_t k = 2; k <= static_cast<size_t>(rows.K); ++k) {
        if (rows.entropy[k][r] < rows.entropy[best][r]) best = k;
      }
      for (size_t v = 0; v < V; ++v) P[v] = rows.lp[best][r * V + v];
      out.chosen[r] = static_cast<int>(best) - 1;
    } else {
      for (size_t k = 1; k <= static_cast<size_t>(rows.K); ++k) {
        for (size_t v = 0; v < V; ++v) P[v] += rows.lp[k][r * V + v] / static_cast<double>(rows.K);
      }
    }
    for (size_t v = 0; v < V; ++v) z[v] = (beta + 1) * P[v] - beta * rows.lp[0][r * V + v];
    const std::vector<double> l = LogSoftmaxRef(z.data(), rows.V);
    for (size_t v = 0; v < V; ++v) out.log_probs[r * V + v] = l[v];
  }
  return out;
}

// The whole of NBCE in one call.
inline NbceOutRef NbceRef(const Model& model, const std::vector<int>& context,
                          const std::vector<int>& query, int bos, double beta, NbcePoolRef pool,
                          int64_t chunk, const PositionRef& pos = {}) {
  return NbceCombineRef(NbceRowsOf(model, context, query, bos, chunk, pos), beta, pool);
}

}  // namespace stretch::ref
