// NBCE (Su Jianlin, kexue.fm/archives/9617, 2023): see nbce.h for the method and its notation.
#include "src/eval/nbce.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/progress.h"
#include "src/core/threads.h"
#include "src/core/timer.h"
#include "src/eval/score.h"

namespace stretch {
namespace {

using nbce_internal::RowWorker;

constexpr std::string_view kWhere = "nbce";
constexpr std::string_view kKeys = "beta, pool, chunk";
constexpr std::string_view kBetaAllowed = "a finite number >= 0";
constexpr std::string_view kPoolAllowed = "entropy, mean";
constexpr std::string_view kChunkAllowed =
    "a positive integer, the tokens per chunk; leave it out for L - 1 - |Q|";

[[noreturn]] void BadValue(std::string_view key, std::string_view text, std::string_view problem,
                           std::string_view allowed) {
  Fail("{}: {}={} {} (allowed: {})", kWhere, key, text, problem, allowed);
}

void CheckIds(std::span<const int> ids, int vocab_size, std::string_view what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      Fail("NBCE {}: token id {} at index {} is outside the model's vocabulary 0..{}", what, ids[i],
           i, vocab_size - 1);
    }
  }
}

// lp = log_softmax(x) (V), the sum of exponentials in double; returns the entropy
// H = -sum_v exp(lp[v]) lp[v], in double from the double values before lp is rounded.
double LogSoftmaxRow(const float* x, int V, float* lp) {
  float mx = x[0];
  for (int v = 1; v < V; ++v) mx = std::max(mx, x[v]);
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v]) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  double h = 0.0;
  for (int v = 0; v < V; ++v) {
    const double l = static_cast<double>(x[v]) - lse;
    h -= std::exp(l) * l;
    lp[v] = static_cast<float>(l);
  }
  return h;
}

// out = log_softmax((beta + 1) P - beta lp0) (V), in double; P = p_scale * p.
template <typename Real>
void CombineRow(const Real* p, double p_scale, const float* lp0, double beta, int V,
                std::vector<double>& z, float* out) {
  z.resize(static_cast<size_t>(V));
  double mx = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; ++v) {
    const double zv =
        (beta + 1.0) * (p_scale * static_cast<double>(p[v])) - beta * static_cast<double>(lp0[v]);
    z[static_cast<size_t>(v)] = zv;
    mx = std::max(mx, zv);
  }
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += std::exp(z[static_cast<size_t>(v)] - mx);
  const double lse = mx + std::log(sum);
  for (int v = 0; v < V; ++v) out[v] = static_cast<float>(z[static_cast<size_t>(v)] - lse);
}

// P of every query position, folded in from the context rows as they finish (in any order).
// Entropy pooling keeps the row of least entropy, the lowest k on ties, so the result does not
// depend on the order. Mean pooling sums in double: the order changes the sum by ~1e-16
// relative, which survives the rounding of the output to float only at a rounding boundary.
class Pooled {
 public:
  Pooled(NbcePool pool, int64_t rows, int V) : pool_(pool), V_(V) {
    const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(V);
    if (pool == NbcePool::kEntropy) {
      best_.assign(n, 0.0f);
      best_h_.assign(static_cast<size_t>(rows), std::numeric_limits<double>::infinity());
      best_k_.assign(static_cast<size_t>(rows), -1);
    } else {
      sum_.assign(n, 0.0);
    }
  }
  // Context row k (0-based chunk) at query position r: its log-probs (V) and their entropy.
  void Fold(int k, int64_t r, const float* lp, double h) {
    const size_t at = static_cast<size_t>(r) * static_cast<size_t>(V_);
    if (pool_ == NbcePool::kMean) {
      for (int v = 0; v < V_; ++v) sum_[at + static_cast<size_t>(v)] += lp[v];
      return;
    }
    const size_t ri = static_cast<size_t>(r);
    if (h < best_h_[ri] || (h == best_h_[ri] && k < best_k_[ri])) {
      std::copy(lp, lp + V_, best_.begin() + static_cast<std::ptrdiff_t>(at));
      best_h_[ri] = h;
      best_k_[ri] = k;
    }
  }
  // out = log_softmax((beta + 1) P - beta lp0) at position r, with K context rows folded in.
  void Combine(int64_t r, int64_t K, const float* lp0, double beta, std::vector<double>& z,
               float* out) const {
    const size_t at = static_cast<size_t>(r) * static_cast<size_t>(V_);
    if (pool_ == NbcePool::kMean) {
      CombineRow(sum_.data() + at, 1.0 / static_cast<double>(K), lp0, beta, V_, z, out);
    } else {
      STRETCH_CHECK(best_k_[static_cast<size_t>(r)] >= 0, "no context row at position {}", r);
      CombineRow(best_.data() + at, 1.0, lp0, beta, V_, z, out);
    }
  }
  int Chosen(int64_t r) const {
    return pool_ == NbcePool::kMean ? -1 : best_k_[static_cast<size_t>(r)];
  }

 private:
  NbcePool pool_;
  int V_;
  std::vector<double> sum_;     // mean: (rows, V) sum over k of lp_k
  std::vector<float> best_;     // entropy: (rows, V) lp_k* so far
  std::vector<double> best_h_;  // (rows) its entropy
  std::vector<int> best_k_;     // (rows) its k
};

// Rows: [0] = [BOS] + Q (unconditioned), [k] = [BOS] + S_k + Q for k = 1 .. K.
std::vector<std::vector<int>> MakeRows(const std::vector<std::vector<int>>& chunks,
                                       std::span<const int> query, int bos) {
  std::vector<std::vector<int>> rows(chunks.size() + 1);
  for (size_t k = 0; k <= chunks.size(); ++k) {
    std::vector<int>& row = rows[k];
    row.push_back(bos);
    if (k > 0) row.insert(row.end(), chunks[k - 1].begin(), chunks[k - 1].end());
    row.insert(row.end(), query.begin(), query.end());
  }
  return rows;
}

// Whether the rows run one per thread (each Transformer single-threaded inside the region) or in
// turn with the kernels splitting each row. As in ScoreWindows (src/eval/score.cc): one row per
// thread once there are rows for every thread, since a thread then never waits for another inside
// a row; a decode step (one token per row) is too short to split, so it always goes one per thread.
bool RowsInParallel(int64_t rows, bool decode) {
  const int threads = NumThreads();
  if (threads <= 1 || rows < 2 || InParallelRegion()) return false;
  return decode || rows >= threads;
}

// Calls body(item, worker) for items 0 .. n-1 on the workers (workers[0] and forks of it, added as
// needed: one per thread).
template <class Body>
void RunRows(std::vector<RowWorker>& workers, int64_t n, bool parallel, Body&& body) {
  STRETCH_CHECK(!workers.empty());
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) body(i, workers[0]);
    return;
  }
  const size_t threads = static_cast<size_t>(NumThreads());
  while (workers.size() < threads) workers.emplace_back(workers[0].model.Fork());
  ParallelForEach(n, [&](int64_t i, int worker) { body(i, workers[static_cast<size_t>(worker)]); });
}

}  // namespace

std::string_view NbcePoolName(NbcePool pool) {
  switch (pool) {
    case NbcePool::kEntropy: return "entropy";
    case NbcePool::kMean: return "mean";
  }
  return "?";
}

bool operator==(const NbceOptions& a, const NbceOptions& b) {
  return a.beta == b.beta && a.pool == b.pool && a.chunk == b.chunk;
}

NbceOptions ParseNbceSpec(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name != "nbce") {
    Fail("NBCE spec \"{}\": unknown name \"{}\" (expected nbce[:beta=B,pool=entropy|mean,chunk=N])",
         spec, name);
  }
  NbceOptions opt;
  if (colon == std::string_view::npos) return opt;
  std::string_view rest = spec.substr(colon + 1);
  if (rest.empty()) Fail("{}: nothing after ':' (allowed keys: {})", kWhere, kKeys);
  bool seen_beta = false, seen_pool = false, seen_chunk = false;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      Fail("{}: \"{}\" is not key=value (allowed keys: {})", kWhere, item, kKeys);
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    bool* seen = key == "beta"    ? &seen_beta
                 : key == "pool"  ? &seen_pool
                 : key == "chunk" ? &seen_chunk
                                  : nullptr;
    if (seen == nullptr) Fail("{}: unknown key \"{}\" (allowed: {})", kWhere, key, kKeys);
    if (*seen) Fail("{}: key \"{}\" given twice", kWhere, key);
    *seen = true;
    const char* begin = value.data();
    const char* end = begin + value.size();
    if (key == "beta") {
      double v = 0.0;
      const auto [ptr, ec] = std::from_chars(begin, end, v, std::chars_format::general);
      if (value.empty() || ptr != end ||
          (ec != std::errc() && ec != std::errc::result_out_of_range)) {
        BadValue(key, value, "is not a number", kBetaAllowed);
      }
      if (ec == std::errc::result_out_of_range || !std::isfinite(v)) {
        BadValue(key, value, "is not a finite number", kBetaAllowed);
      }
      if (v < 0.0) BadValue(key, value, "is negative", kBetaAllowed);
      opt.beta = v == 0.0 ? 0.0 : v;  // -0 reads as 0
    } else if (key == "pool") {
      if (value == "entropy") {
        opt.pool = NbcePool::kEntropy;
      } else if (value == "mean") {
        opt.pool = NbcePool::kMean;
      } else {
        BadValue(key, value, "is not a pooling", kPoolAllowed);
      }
    } else {
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(begin, end, v);
      if (value.empty() || ec != std::errc() || ptr != end || v <= 0) {
        BadValue(key, value, "is not a positive integer", kChunkAllowed);
      }
      opt.chunk = v;
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return opt;
}

std::string NbceSpecText(const NbceOptions& opt) {
  const NbceOptions defaults;
  std::string out = "nbce";
  char sep = ':';
  auto add = [&](std::string_view key, const std::string& value) {
    out += fmt::format("{}{}={}", sep, key, value);
    sep = ',';
  };
  if (opt.beta != defaults.beta) add("beta", fmt::format("{}", opt.beta));
  if (opt.pool != defaults.pool) add("pool", std::string(NbcePoolName(opt.pool)));
  if (opt.chunk != defaults.chunk) add("chunk", fmt::format("{}", opt.chunk));
  return out;
}

void ValidateNbceOptions(const NbceOptions& opt) {
  if (!std::isfinite(opt.beta) || opt.beta < 0.0) {
    Fail("NbceOptions::beta: found {}, expected {}", opt.beta, kBetaAllowed);
  }
  if (opt.pool != NbcePool::kEntropy && opt.pool != NbcePool::kMean) {
    Fail("NbceOptions::pool: found {}, expected {}", static_cast<int>(opt.pool), kPoolAllowed);
  }
  if (opt.chunk < 0) {
    Fail("NbceOptions::chunk: found {}, expected tokens per chunk (>= 1), or 0 for L - 1 - |Q|",
         opt.chunk);
  }
}

int64_t NbceChunkLength(const ModelConfig& config, const NbceOptions& opt, int64_t query_len) {
  if (opt.chunk > 0) return opt.chunk;
  const int64_t L = config.seq_len;
  const int64_t chunk = L - 1 - query_len;
  if (chunk < 1) {
    Fail(
        "NBCE: a question of |Q|={} tokens leaves L - 1 - |Q| = {} tokens per context chunk "
        "(L={}, the model's trained length; BOS takes one position), expected at least 1: shorten "
        "the question or give chunk=N",
        query_len, chunk, L);
  }
  return chunk;
}

std::vector<std::vector<int>> NbceChunks(std::span<const int> context, int64_t chunk) {
  STRETCH_CHECK(chunk >= 1, "chunk {}", chunk);
  std::vector<std::vector<int>> chunks;
  const size_t n = static_cast<size_t>(chunk);
  for (size_t at = 0; at < context.size(); at += n) {
    const size_t len = std::min(n, context.size() - at);
    chunks.emplace_back(context.begin() + static_cast<std::ptrdiff_t>(at),
                        context.begin() + static_cast<std::ptrdiff_t>(at + len));
  }
  return chunks;
}

NbceResult NbceScore(const Model& model, std::span<const int> context, std::span<const int> query,
                     int bos, const NbceOptions& opt, const Method& method) {
  ValidateNbceOptions(opt);
  const int V = model.config.vocab_size;
  const int C = model.config.dim;
  if (context.empty()) Fail("NBCE: the context is empty, expected at least 1 token to cut");
  if (query.empty()) {
    Fail(
        "NBCE: the query is empty, expected at least 1 token (row r scores the token after "
        "Q[0..r])");
  }
  CheckIds(context, V, "context");
  CheckIds(query, V, "query");
  CheckIds(std::span<const int>(&bos, 1), V, "BOS");
  const int64_t Q = static_cast<int64_t>(query.size());

  NbceResult result;
  result.chunk_len = NbceChunkLength(model.config, opt, Q);
  const std::vector<std::vector<int>> rows =
      MakeRows(NbceChunks(context, result.chunk_len), query, bos);
  const int64_t K = static_cast<int64_t>(rows.size()) - 1;
  result.chunks = K;
  result.rows = Q;
  result.vocab = V;
  int64_t longest = 0;
  for (const std::vector<int>& row : rows) {
    longest = std::max(longest, static_cast<int64_t>(row.size()));
  }
  std::vector<RowWorker> workers;
  workers.emplace_back(Transformer(model));
  workers[0].model.SetMethod(method, longest);

  const size_t QV = static_cast<size_t>(Q) * static_cast<size_t>(V);
  Pooled pooled(opt.pool, Q, V);
  std::vector<float> lp0(QV);  // the unconditioned row's log-probs (Q, V)
  std::mutex fold;
  // Item i runs chunk row i + 1 (the longest first), the unconditioned row last.
  auto run = [&](int64_t item, RowWorker& w) {
    const int64_t row_index = item < K ? item + 1 : 0;
    const std::vector<int>& row = rows[static_cast<size_t>(row_index)];
    w.model.ForwardSequence(row, w.hidden);
    const int64_t first = static_cast<int64_t>(row.size()) - Q;  // position of Q[0]
    const int64_t block = std::min(Q, kScoreLogitRows);
    w.logits.resize(static_cast<size_t>(block) * V);
    w.log_probs.resize(static_cast<size_t>(block) * V);
    w.entropy.resize(static_cast<size_t>(block));
    for (int64_t r0 = 0; r0 < Q; r0 += block) {
      const int64_t n = std::min(block, Q - r0);
      w.model.Logits(w.hidden.data() + (first + r0) * C, n, w.logits.data());
      float* lp = row_index == 0 ? lp0.data() + static_cast<size_t>(r0) * V : w.log_probs.data();
      ParallelFor(n, WorkGrain(n, n * V, 1 << 16), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          w.entropy[static_cast<size_t>(r)] = LogSoftmaxRow(w.logits.data() + r * V, V, lp + r * V);
        }
      });
      if (row_index == 0) continue;
      std::lock_guard lock(fold);
      for (int64_t r = 0; r < n; ++r) {
        pooled.Fold(static_cast<int>(row_index - 1), r0 + r, lp + r * V,
                    w.entropy[static_cast<size_t>(r)]);
      }
    }
  };
  RunRows(workers, K + 1, RowsInParallel(K + 1, /*decode=*/false), run);

  result.log_probs.resize(QV);
  result.chosen.resize(static_cast<size_t>(Q));
  ParallelFor(Q, WorkGrain(Q, Q * V, 1 << 16), [&](int64_t begin, int64_t end) {
    std::vector<double> z;
    for (int64_t r = begin; r < end; ++r) {
      pooled.Combine(r, K, lp0.data() + static_cast<size_t>(r) * V, opt.beta, z,
                     result.log_probs.data() + static_cast<size_t>(r) * V);
      result.chosen[static_cast<size_t>(r)] = pooled.Chosen(r);
    }
  });
  return result;
}

// ---------------------------------------------------------------------------------------------
// NbceGenerator

NbceGenerator::NbceGenerator(const Model& model, int bos, const NbceOptions& opt,
                             int64_t max_new_tokens, const Method& method)
    : model_(model), bos_(bos), opt_(opt), max_new_(max_new_tokens), method_(method) {
  ValidateNbceOptions(opt);
  if (max_new_tokens < 0) {
    Fail("NBCE generator: max_new_tokens={}, expected >= 0", max_new_tokens);
  }
  CheckIds(std::span<const int>(&bos_, 1), model.config.vocab_size, "BOS");
}

void NbceGenerator::Start(std::span<const int> context, std::span<const int> question) {
  const int V = model_.config.vocab_size;
  if (context.empty()) Fail("NBCE: the context is empty, expected at least 1 token to cut");
  CheckIds(context, V, "context");
  CheckIds(question, V, "question");
  const int64_t chunk_len =
      NbceChunkLength(model_.config, opt_, static_cast<int64_t>(question.size()));
  const std::vector<std::vector<int>> tokens =
      MakeRows(NbceChunks(context, chunk_len), question, bos_);
  int64_t longest = 0;
  for (const std::vector<int>& row : tokens) {
    longest = std::max(longest, static_cast<int64_t>(row.size()));
  }
  // Everything that can throw on bad input is done before the state changes.
  Transformer model(model_);
  model.SetMethod(method_, longest + max_new_);
  workers_.clear();
  workers_.emplace_back(std::move(model));
  rows_.clear();
  for (const std::vector<int>& row : tokens) {
    rows_.push_back(
        Row{KvCache(model_.config, static_cast<int64_t>(row.size()) + max_new_), {}, 0.0});
  }
  chunk_len_ = chunk_len;
  appended_ = 0;
  FeedRows(tokens, /*decode=*/false);
}

std::vector<float> NbceGenerator::NextLogProbs() const {
  STRETCH_CHECK(!rows_.empty(), "NbceGenerator::NextLogProbs before Start");
  return next_;
}

void NbceGenerator::Append(int token) {
  STRETCH_CHECK(!rows_.empty(), "NbceGenerator::Append before Start");
  if (appended_ >= max_new_) {
    Fail("NBCE generator: {} tokens appended already, the max_new_tokens it was made for",
         appended_);
  }
  CheckIds(std::span<const int>(&token, 1), model_.config.vocab_size, "appended token");
  const std::vector<std::vector<int>> tokens(rows_.size(), std::vector<int>{token});
  FeedRows(tokens, /*decode=*/true);
  appended_++;
}

void NbceGenerator::FeedRows(const std::vector<std::vector<int>>& tokens, bool decode) {
  const int V = model_.config.vocab_size;
  const int64_t n_rows = static_cast<int64_t>(rows_.size());
  const int64_t K = n_rows - 1;
  // Item i runs chunk row i + 1 (the longest first), the unconditioned row last.
  auto run = [&](int64_t item, RowWorker& w) {
    const size_t k = static_cast<size_t>(item < K ? item + 1 : 0);
    Row& row = rows_[k];
    w.model.Forward(tokens[k], row.cache, w.hidden, Transformer::Rows::kLast);
    w.logits.resize(static_cast<size_t>(V));
    w.model.Logits(w.hidden.data(), 1, w.logits.data());
    row.log_probs.resize(static_cast<size_t>(V));
    row.entropy = LogSoftmaxRow(w.logits.data(), V, row.log_probs.data());
  };
  RunRows(workers_, n_rows, RowsInParallel(n_rows, decode), run);

  // Pooled in chunk order, on one thread: V values per row.
  Pooled pooled(opt_.pool, 1, V);
  for (int64_t k = 1; k <= K; ++k) {
    const Row& row = rows_[static_cast<size_t>(k)];
    pooled.Fold(static_cast<int>(k - 1), 0, row.log_probs.data(), row.entropy);
  }
  next_.resize(static_cast<size_t>(V));
  std::vector<double> z;
  pooled.Combine(0, K, rows_[0].log_probs.data(), opt_.beta, z, next_.data());
  chosen_ = pooled.Chosen(0);
}

ScoreSummary ScoreFixedTailNbce(const Model& model, std::span<const int> stream,
                                const ScoreOptions& opt, const NbceOptions& nbce,
                                const Method& method, const TokenSink& sink) {
  ValidateScoreOptions(opt);
  ValidateNbceOptions(nbce);
  const int64_t C = opt.ctx, tail = opt.tail;
  if (tail < 1) Fail("NBCE scores the fixed tail: ScoreOptions::tail must be at least 1, found 0");
  if (C - tail < 2) {
    Fail(
        "NBCE at context {} with a tail of {}: no context token is left before the tail "
        "(expected ctx >= tail + 2: BOS, one context token, the tail)",
        C, tail);
  }
  NbceChunkLength(model.config, nbce, tail);  // the default chunk must leave a token
  const int64_t M = opt.sample_len == 0 ? C : opt.sample_len;
  const int64_t total = static_cast<int64_t>(stream.size());
  const int64_t samples = FixedTailSamples(total, opt);
  ScoreSummary summary;
  Timer timer;
  Progress progress(opt.progress_label, samples, "windows", opt.progress);
  const int V = model.config.vocab_size;
  std::vector<int> inputs(static_cast<size_t>(C));
  for (int64_t w = 0; w < samples; ++w) {
    // As ScoreFixedTail: inputs = [BOS] + stream[b .. b+C-2], position p predicts stream[b + p].
    const int64_t b = w * M + M - C;
    inputs[0] = opt.bos;
    std::copy(stream.begin() + b, stream.begin() + b + C - 1, inputs.begin() + 1);
    const std::span<const int> all(inputs);
    const NbceResult r =
        NbceScore(model, all.subspan(1, static_cast<size_t>(C - tail - 1)),
                  all.subspan(static_cast<size_t>(C - tail)), opt.bos, nbce, method);
    for (int64_t q = 0; q < tail; ++q) {
      const int64_t p = C - tail + q;
      const int target = stream[static_cast<size_t>(b + p)];
      const float* row = r.Row(q);
      const int best = static_cast<int>(std::max_element(row, row + V) - row);
      const double loss = -static_cast<double>(row[target]);
      AddToSummary(summary, opt.bucket, p, loss, best == target);
      if (sink) sink(TokenRecord{w, p, target, loss, best == target});
    }
    ++summary.windows;
    progress.Update(w + 1);
  }
  progress.Finish();
  summary.unscored_tail = total - samples * M;
  for (PositionBucket& bucket : summary.buckets) bucket.end = std::min(bucket.end, C);
  summary.seconds = timer.Seconds();
  return summary;
}

SequenceScorer NbceSequenceScorer(const Model& model, const NbceOptions& nbce, const Method& method,
                                  QueryStart query_start) {
  ValidateNbceOptions(nbce);
  // It scores the queries' targets alone, whatever `first` says.
  return [&model, nbce, method, query_start](const std::vector<std::vector<int>>& sequences,
                                             int64_t /*first*/, const TokenSink& sink) {
    const int V = model.config.vocab_size;
    for (size_t k = 0; k < sequences.size(); ++k) {
      const std::vector<int>& seq = sequences[k];
      const int64_t n = static_cast<int64_t>(seq.size());
      const int64_t qs = query_start(k, seq);
      if (qs < 2 || qs > n - 2) {
        Fail(
            "NBCE: sequence {} of {} tokens has its query at {}, expected 2 .. {} (BOS and a "
            "context token before it, a target after it)",
            k + 1, n, qs, n - 2);
      }
      const std::span<const int> all(seq);
      const NbceResult r =
          NbceScore(model, all.subspan(1, static_cast<size_t>(qs - 1)),
                    all.subspan(static_cast<size_t>(qs), static_cast<size_t>(n - 1 - qs)), seq[0],
                    nbce, method);
      for (int64_t p = qs; p + 1 < n; ++p) {
        const int target = seq[static_cast<size_t>(p + 1)];
        const float* row = r.Row(p - qs);
        const int best = static_cast<int>(std::max_element(row, row + V) - row);
        if (sink) {
          sink(TokenRecord{static_cast<int64_t>(k), p, target, -static_cast<double>(row[target]),
                           best == target});
        }
      }
    }
  };
}

}  // namespace stretch
