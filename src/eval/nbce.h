// NBCE, naive-Bayes context extension (Su Jianlin, "NBCE: 使用朴素贝叶斯扩展LLM的Context处理长度",
// kexue.fm/archives/9617, 2023; the post's code is github.com/bojone/NBCE): a model reads a context
// longer than its trained length L as K independent chunks and combines their next-token
// distributions, no position method needed.
//
// Rows. The context is cut into K contiguous chunks S_1 .. S_K of at most `chunk` tokens from its
// start (the last one possibly shorter); default chunk = L - 1 - |Q|, so that BOS + chunk + Q fits
// L. Row k = [BOS] + S_k + Q runs as its own sequence, and one more row, the unconditioned one, is
// [BOS] + Q (Q: the question / continuation tokens that follow the context).
//
// Combination, per position of Q (letters: K chunks, V vocabulary, lp a log-softmax row):
//   lp_k = log_softmax(logits of row k),  lp_0 = that of the unconditioned row      (V each)
//   pool `entropy` (the post's final choice, default): P = lp_k*, k* = argmin_k H_k,
//                                         H_k = -sum_v exp(lp_k[v]) lp_k[v]  (lowest k on ties)
//   pool `mean`:                          P = (1/K) sum_k lp_k
//   out = log_softmax((beta + 1) P - beta lp_0)                       beta: 0.25 by default
// With beta = 0 and one chunk, out is the plain model's log-softmax on [BOS] + S_1 + Q.
//
// The post's code adds heuristics on top that are not part of the method stated here and are not
// implemented: a bonus eta for keeping the previous step's chunk, log-probs clipped at -100 in the
// entropy, and P alone where lp_0 < -100.
//
// Every row runs under one position method (`direct` by default; another one, e.g. a RoPE scaling,
// may be given), resolved once for the longest row fed (NbceScore) or the longest row plus the
// tokens to generate (NbceGenerator).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/eval/protocols.h"
#include "src/eval/score.h"
#include "src/model/config.h"
#include "src/model/transformer.h"
#include "src/position/method.h"

namespace stretch {

enum class NbcePool {
  kEntropy,  // the row of minimum entropy
  kMean,     // the mean of the rows' log-probs
};
std::string_view NbcePoolName(NbcePool pool);  // "entropy", "mean"

struct NbceOptions {
  double beta = 0.25;                  // weight of the unconditioned row: (beta+1) P - beta lp_0
  NbcePool pool = NbcePool::kEntropy;  // how the K context rows are pooled into P
  int64_t chunk = 0;                   // tokens per chunk; 0: L - 1 - |Q|
};
bool operator==(const NbceOptions& a, const NbceOptions& b);

// Parses `nbce[:beta=B,pool=entropy|mean,chunk=N]` (keys in any order, each at most once). Throws
// stretch::Error naming the key, the value found and what is allowed: beta a finite number >= 0,
// pool entropy or mean, chunk a positive integer.
NbceOptions ParseNbceSpec(std::string_view spec);
// The canonical spec: "nbce", then the fields that differ from the defaults in the order beta,
// pool, chunk. ParseNbceSpec(NbceSpecText(o)) == o, and the text of a parsed canonical spec is
// that spec again.
std::string NbceSpecText(const NbceOptions& opt);

// Throws stretch::Error when beta is not a finite number >= 0 or chunk is negative.
void ValidateNbceOptions(const NbceOptions& opt);

// The chunk length used for a question of `query_len` tokens: opt.chunk when given (it may exceed
// what fits L: the rows then run past the trained length), else L - 1 - query_len. Throws
// stretch::Error naming L and |Q| when the default leaves less than 1 token.
int64_t NbceChunkLength(const ModelConfig& config, const NbceOptions& opt, int64_t query_len);

// Contiguous chunks of at most `chunk` tokens from the start of `context`, the last one possibly
// shorter; none for an empty context. `chunk` must be at least 1 (a programming error otherwise).
std::vector<std::vector<int>> NbceChunks(std::span<const int> context, int64_t chunk);

struct NbceResult {
  int64_t chunks = 0;     // K
  int64_t chunk_len = 0;  // the chunk length used (NbceChunkLength)
  int64_t rows = 0;       // |Q|
  int vocab = 0;          // V
  // (|Q|, V): row r is NBCE's log-distribution of the token after Q[0..r], so the loss of
  // Q[r+1] is -log_probs[r][Q[r+1]], and row |Q|-1 is the distribution of the token after the
  // whole query (what generation samples from).
  std::vector<float> log_probs;
  // (|Q|): entropy pooling's k* per row, 0-based chunk index; -1 throughout for mean pooling.
  std::vector<int> chosen;

  const float* Row(int64_t r) const { return log_probs.data() + r * vocab; }
};

// Scores `query` after `context` by NBCE: the K + 1 rows run with ForwardSequence, spread over the
// threads (each on its own Transformer::Fork), logits computed only for their last |Q| positions.
// Throws stretch::Error when the context or the query is empty, a token id (context, query, bos)
// is outside the vocabulary, the options are invalid, or the method does not fit the model.
NbceResult NbceScore(const Model& model, std::span<const int> context, std::span<const int> query,
                     int bos, const NbceOptions& opt, const Method& method = Method{});

// The fixed-tail protocol (src/eval/score.h, ScoreFixedTail) scored by NBCE: in each window of
// C = opt.ctx positions (BOS, then the C - 1 tokens before the sample's last one), the tokens after
// BOS and before the scored tail are the context, cut into chunks, and the last opt.tail positions
// are the query Q; row r of NbceScore scores position C - tail + r, so every position the plain
// protocol scores is scored, from the same tokens. The rows run under `method`. Throws
// stretch::Error as ScoreFixedTail, and when no context token is left before the tail
// (C - tail < 2) or the default chunk leaves none (NbceChunkLength).
ScoreSummary ScoreFixedTailNbce(const Model& model, std::span<const int> stream,
                                const ScoreOptions& opt, const NbceOptions& nbce,
                                const Method& method = Method{}, const TokenSink& sink = {});

// NBCE as a SequenceScorer (src/eval/protocols.h), for the lab's protocols: sequence k is
// [BOS] + context + query, the query starting at query_start(k, sequence) (>= 2: BOS and one
// context token before it); its positions query_start .. n - 2 are scored, each by NbceScore's
// row for it, and no other position is. The rows run under `method`.
using QueryStart = std::function<int64_t(size_t index, const std::vector<int>& sequence)>;
SequenceScorer NbceSequenceScorer(const Model& model, const NbceOptions& nbce, const Method& method,
                                  QueryStart query_start);

namespace nbce_internal {
// A thread's Transformer and buffers for running rows.
struct RowWorker {
  explicit RowWorker(Transformer m) : model(std::move(m)) {}
  Transformer model;
  std::vector<float> hidden, logits, log_probs;
  std::vector<double> entropy;
};
}  // namespace nbce_internal

// Generation by NBCE: K + 1 KV caches, one per row; every chosen token is fed to every row.
//   NbceGenerator gen(model, bos, opt, max_new_tokens);
//   gen.Start(context, question);
//   for (...) { std::vector<float> lp = gen.NextLogProbs(); int t = pick(lp); gen.Append(t); }
// Fed the same tokens, NextLogProbs gives NbceScore's rows (within float rounding: prefill and
// decode round differently), with the chunk length fixed at Start from the question alone.
class NbceGenerator {
 public:
  // Keeps a reference to `model`, which must outlive the generator. Throws stretch::Error for
  // invalid options, a negative max_new_tokens or a bos outside the vocabulary.
  NbceGenerator(const Model& model, int bos, const NbceOptions& opt, int64_t max_new_tokens,
                const Method& method = Method{});

  // Cuts the context into chunks, sizes each row's cache for its row plus max_new_tokens,
  // resolves the method for the longest row plus max_new_tokens and prefills every row. The
  // question may be empty (each row then ends at its last context token, the unconditioned row
  // at BOS). May be called again to start over. Throws stretch::Error when the context is empty,
  // a token id is outside the vocabulary or the method does not fit the model.
  void Start(std::span<const int> context, std::span<const int> question);
  // (V) NBCE's log-distribution of the next token.
  std::vector<float> NextLogProbs() const;
  // Feeds `token` to every row (one decode step each). Throws stretch::Error when max_new_tokens
  // tokens have been appended already or the token is outside the vocabulary.
  void Append(int token);

  int64_t chunks() const {  // K; 0 before Start
    return rows_.empty() ? 0 : static_cast<int64_t>(rows_.size()) - 1;
  }
  int64_t chunk_len() const { return chunk_len_; }
  int64_t appended() const { return appended_; }
  // Entropy pooling's k* behind the last NextLogProbs (0-based chunk); -1 for mean pooling.
  int chosen() const { return chosen_; }

 private:
  struct Row {
    KvCache cache;
    std::vector<float> log_probs;  // (V): the row's log-softmax at its last position
    double entropy = 0.0;          // of log_probs
  };
  // Feeds tokens[k] to row k (appended to its cache) for every row, in parallel when `decode`
  // or when there are at least as many rows as threads, then recomputes next_ and chosen_.
  void FeedRows(const std::vector<std::vector<int>>& tokens, bool decode);

  const Model& model_;
  int bos_ = 0;
  NbceOptions opt_;
  int64_t max_new_ = 0;
  Method method_;
  std::vector<nbce_internal::RowWorker> workers_;  // [0] and its forks, one per thread used
  std::vector<Row> rows_;  // rows_[0]: the unconditioned row; rows_[k]: chunk k (1-based)
  int64_t chunk_len_ = 0;
  int64_t appended_ = 0;
  std::vector<float> next_;  // (V) NBCE's log-distribution of the next token
  int chosen_ = -1;
};

}  // namespace stretch
