// NBCE (src/eval/nbce.h): the float32 engine against the naive double NBCE of reference/nbce.h on
// random models and on stories260K, a perturbed reference that must fail, the identities (one
// chunk with beta = 0 is the plain model; the generator gives the scorer's rows) and the spec.
#include "src/eval/nbce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "reference/method_llama.h"
#include "reference/nbce.h"
#include "src/core/error.h"
#include "src/core/threads.h"
#include "src/io/llama2c.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/transformer.h"
#include "src/position/plan.h"
#include "tests/testing/random_model.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/stories.h"

namespace stretch {
namespace {

constexpr int kBos = 1;

// The budget for max |engine - reference| over every log-prob of NBCE's output.
//
// The engine runs each row in float32 and the reference in double, so the rows' own log-softmax
// values already differ by e, the plain forward's float32 error (RowError below, the max over all
// V log-probs, down to log p = -15: measured 6.7e-6 .. 3.5e-5 on these random models, 3.5e-5 on
// stories260K). NBCE then combines exactly: P is one row (entropy) or a mean of rows (error
// <= e), z = (beta+1) P - beta lp_0 has error <= (1 + 2 beta) e, and the log-softmax of z adds
// at most max|dz| again (log-sum-exp is 1-Lipschitz in the max norm), so
// |d out| <= 2 (1 + 2 beta) e + the output's rounding to float (kRounding). With beta <= 1 and
// the largest e measured that is 6 * 3.5e-5 + 4e-6 = 2.1e-4. The largest difference measured is
// 4.9e-5 (beta = 1; 3.9e-5 on stories260K at beta = 0.25); the budget is 2.5e-4, five times
// that and above the bound. Each case also checks the bound itself against its own e.
constexpr double kBudget = 2.5e-4;
// Rounding of NBCE's output to float: half an ulp of |log p| <= 16 (2^4 * 2^-24 = 9.5e-7; the
// random models' and stories260K's log-probs stay above -16), taken four times: the output's own
// rounding, that of the float log-probs NBCE combines (their log-sum-exp is 0 only to that
// rounding), and the last bits of the row log-probs, which may differ between the scorer's run
// and RowError's (another split of the kernels over threads).
constexpr double kRounding = 4e-6;

// Entropy pooling picks the row of least entropy. Where two rows' entropies are closer than this
// (the engine's entropies are within ~1e-5 of the reference's), float32 may pick the other row
// than double, legitimately: such positions are left out of the comparison (and counted).
constexpr double kEntropyTie = 1e-4;

// Restores the thread count a test changes, however the test ends.
struct ThreadCountGuard {
  int threads = NumThreads();
  ~ThreadCountGuard() { SetNumThreads(threads); }
};

ModelConfig Config(int dim, int heads, int kv_heads, int hidden, int layers, int vocab) {
  ModelConfig c;
  c.dim = dim;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.vocab_size = vocab;
  c.seq_len = 64;
  c.shared_classifier = false;
  return c;
}
ModelConfig HeadDim64() { return Config(128, 2, 1, 192, 3, 96); }
ModelConfig HeadDim128() { return Config(256, 2, 2, 320, 2, 80); }

// Whether position r of the reference rows has two context rows of near-equal entropy.
bool EntropyTie(const ref::NbceRowsRef& rows, int64_t r) {
  std::vector<double> h;
  for (int64_t k = 1; k <= rows.K; ++k) {
    h.push_back(rows.entropy[static_cast<size_t>(k)][static_cast<size_t>(r)]);
  }
  std::sort(h.begin(), h.end());
  return h.size() >= 2 && h[1] - h[0] < kEntropyTie;
}

// max |engine - reference| over the positions compared (all but entropy ties under entropy
// pooling); `ties` counts those left out.
double MaxDiff(const NbceResult& engine, const ref::NbceOutRef& reference,
               const ref::NbceRowsRef& rows, NbcePool pool, int* ties = nullptr) {
  double diff = 0;
  for (int64_t r = 0; r < engine.rows; ++r) {
    if (pool == NbcePool::kEntropy && EntropyTie(rows, r)) {
      if (ties) ++*ties;
      continue;
    }
    for (int v = 0; v < engine.vocab; ++v) {
      const size_t i = static_cast<size_t>(r * engine.vocab + v);
      diff = std::max(diff,
                      std::abs(static_cast<double>(engine.log_probs[i]) - reference.log_probs[i]));
    }
  }
  return diff;
}

// e: max |float32 engine - double reference| over the rows' own log-softmax at the positions of Q
// (the plain forward's error, which NBCE's error is bounded by; see kBudget).
double RowError(const Model& m, const std::vector<int>& context, const std::vector<int>& query,
                int64_t chunk, const ref::NbceRowsRef& rows) {
  const int V = m.config.vocab_size;
  const std::vector<std::vector<int>> chunks = NbceChunks(context, chunk);
  EXPECT_EQ(static_cast<int64_t>(chunks.size()), rows.K);
  double e = 0;
  for (size_t k = 0; k <= chunks.size(); ++k) {
    std::vector<int> row = {kBos};
    if (k > 0) row.insert(row.end(), chunks[k - 1].begin(), chunks[k - 1].end());
    row.insert(row.end(), query.begin(), query.end());
    Transformer t(m);
    std::vector<float> hidden;
    t.ForwardSequence(row, hidden);
    const int64_t T = static_cast<int64_t>(row.size());
    std::vector<float> logits(static_cast<size_t>(T) * V);
    t.Logits(hidden.data(), T, logits.data());
    for (size_t r = 0; r < query.size(); ++r) {
      const size_t p = row.size() - query.size() + r;
      std::vector<double> x(logits.begin() + static_cast<std::ptrdiff_t>(p * V),
                            logits.begin() + static_cast<std::ptrdiff_t>((p + 1) * V));
      const std::vector<double> lp = ref::LogSoftmaxRef(x.data(), V);
      for (int v = 0; v < V; ++v) {
        e = std::max(e, std::abs(lp[static_cast<size_t>(v)] -
                                 rows.lp[k][r * static_cast<size_t>(V) + static_cast<size_t>(v)]));
      }
    }
  }
  return e;
}

ref::NbcePoolRef RefPool(NbcePool pool) {
  return pool == NbcePool::kEntropy ? ref::NbcePoolRef::kEntropy : ref::NbcePoolRef::kMean;
}

struct Case {
  const char* name;
  ModelConfig config;
  int context_len;
  int query_len;
  int64_t chunk;  // 0: the default L - 1 - |Q|
};

// Every case of `cases` under both poolings and two betas: the engine within kBudget of the
// reference and within the bound 2 (1 + 2 beta) e of the rows' own error e.
void ExpectMatchesReference(const std::vector<Case>& cases) {
  uint64_t seed = 11;
  for (const Case& c : cases) {
    seed += 10;
    const Model m = testing::RandomModel(c.config, seed);
    const std::vector<int> context =
        testing::RandomStream(c.context_len, c.config.vocab_size, seed + 1);
    const std::vector<int> query =
        testing::RandomStream(c.query_len, c.config.vocab_size, seed + 2);
    NbceOptions opt;
    opt.chunk = c.chunk;
    const int64_t chunk = NbceChunkLength(c.config, opt, c.query_len);
    const ref::NbceRowsRef rows = ref::NbceRowsOf(m, context, query, kBos, chunk);
    const double e = RowError(m, context, query, chunk, rows);
    for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
      for (const double beta : {0.25, 1.0}) {
        opt.pool = pool;
        opt.beta = beta;
        const NbceResult got = NbceScore(m, context, query, kBos, opt);
        ASSERT_EQ(got.chunks, rows.K) << c.name;
        ASSERT_EQ(got.chunk_len, chunk) << c.name;
        ASSERT_EQ(got.rows, c.query_len);
        const ref::NbceOutRef want = ref::NbceCombineRef(rows, beta, RefPool(pool));
        int ties = 0;
        const double diff = MaxDiff(got, want, rows, pool, &ties);
        for (int64_t r = 0; r < got.rows; ++r) {
          if (pool == NbcePool::kEntropy && EntropyTie(rows, r)) continue;
          EXPECT_EQ(got.chosen[static_cast<size_t>(r)], want.chosen[static_cast<size_t>(r)])
              << c.name << " position " << r;
        }
        const std::string what = std::string(c.name) + " " + NbceSpecText(opt);
        EXPECT_LE(diff, kBudget) << what;
        EXPECT_LE(diff, 2 * (1 + 2 * beta) * e + kRounding) << what << ": row error e = " << e;
        EXPECT_LE(ties, 1) << what;  // a tie is rare; many would make the comparison empty
        std::printf("  %-28s %-34s K=%lld  row error %.2e  nbce diff %.2e  ties %d\n", c.name,
                    NbceSpecText(opt).c_str(), static_cast<long long>(got.chunks), e, diff, ties);
      }
    }
  }
}

TEST(Nbce, EngineMatchesDoubleReferenceOnRandomModels) {
  std::vector<Case> cases = {
      // K = 3 equal chunks, head dim 64 (grouped-query: 2 query heads on 1 kv head).
      {"D64 3 chunks of 20", HeadDim64(), 60, 10, 20},
      // K = 4, the last chunk 2 tokens.
      {"D64 chunks 16,16,16,2", HeadDim64(), 50, 10, 16},
      // K = 1 at the default chunk (64 - 1 - 10 = 53).
      {"D128 1 chunk", HeadDim128(), 30, 10, 0},
      // K = 2 at the default chunk: 53 + 47.
      {"D128 chunks 53,47", HeadDim128(), 100, 10, 0},
  };
#if STRETCH_ASAN
  cases.resize(2);  // the naive double forward is ~10x slower under ASan
#endif
  ExpectMatchesReference(cases);
}

// A reference off by beta + 0.05 or by the other pooling is far outside the budget: the
// comparison can tell NBCE's variants apart.
TEST(Nbce, PerturbedReferenceFailsTheBudget) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 7);
  const std::vector<int> context = testing::RandomStream(60, c.vocab_size, 8);
  const std::vector<int> query = testing::RandomStream(10, c.vocab_size, 9);
  const ref::NbceRowsRef rows = ref::NbceRowsOf(m, context, query, kBos, 20);
  for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
    NbceOptions opt;
    opt.chunk = 20;
    opt.pool = pool;
    const NbceResult got = NbceScore(m, context, query, kBos, opt);
    const NbcePool other = pool == NbcePool::kEntropy ? NbcePool::kMean : NbcePool::kEntropy;
    const double exact =
        MaxDiff(got, ref::NbceCombineRef(rows, opt.beta, RefPool(pool)), rows, pool);
    const double beta_off =
        MaxDiff(got, ref::NbceCombineRef(rows, opt.beta + 0.05, RefPool(pool)), rows, pool);
    const double pool_off =
        MaxDiff(got, ref::NbceCombineRef(rows, opt.beta, RefPool(other)), rows, pool);
    EXPECT_LE(exact, kBudget);
    EXPECT_GT(beta_off, 100 * kBudget) << NbcePoolName(pool);
    EXPECT_GT(pool_off, 100 * kBudget) << NbcePoolName(pool);
    std::printf("  %-8s exact %.2e  beta+0.05 %.2e  other pooling %.2e\n",
                std::string(NbcePoolName(pool)).c_str(), exact, beta_off, pool_off);
  }
}

// The rows run under the method given: NBCE with NTK scaling against the reference told the same
// method pair by pair, and far from NBCE under `direct`.
TEST(Nbce, MethodAppliesToEveryRow) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 31);
  const std::vector<int> context = testing::RandomStream(90, c.vocab_size, 32);
  const std::vector<int> query = testing::RandomStream(8, c.vocab_size, 33);
  const Method method = ParseMethod("ntk:factor=4");
  NbceOptions opt;
  opt.chunk = 30;
  const int64_t longest = 1 + 30 + 8;
  const AttentionPlan plan =
      MakeAttentionPlan(method, {c.seq_len, c.head_dim(), c.rope_base}, longest);
  const ref::NbceRowsRef rows =
      ref::NbceRowsOf(m, context, query, kBos, 30, ref::MethodPositionRef(plan));
  const NbceResult got = NbceScore(m, context, query, kBos, opt, method);
  const NbceResult direct = NbceScore(m, context, query, kBos, opt);
  const ref::NbceOutRef want = ref::NbceCombineRef(rows, opt.beta, ref::NbcePoolRef::kEntropy);
  const double diff = MaxDiff(got, want, rows, NbcePool::kEntropy);
  const double direct_diff = MaxDiff(direct, want, rows, NbcePool::kEntropy);
  EXPECT_LE(diff, kBudget);
  EXPECT_GT(direct_diff, 100 * kBudget);
  std::printf("  ntk:factor=4  diff %.2e  (direct instead: %.2e)\n", diff, direct_diff);
}

// One chunk with beta = 0 is the plain model on [BOS] + context + Q, under either pooling. Both
// sides are the engine on one thread (so the logits are the same bits): NBCE's output differs
// from the double log-softmax of those logits by the rounding of its float log-probs, their
// log-sum-exp (0 to that rounding) and its own rounding, three half-ulps of |log p| <= 16: within
// kRounding.
TEST(Nbce, OneChunkWithBetaZeroIsThePlainModel) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 41);
  const std::vector<int> context = testing::RandomStream(40, c.vocab_size, 42);
  const std::vector<int> query = testing::RandomStream(12, c.vocab_size, 43);
  const ThreadCountGuard restore;
  SetNumThreads(1);
  std::vector<int> row = {kBos};
  row.insert(row.end(), context.begin(), context.end());
  row.insert(row.end(), query.begin(), query.end());
  Transformer t(m);
  std::vector<float> hidden;
  t.ForwardSequence(row, hidden);
  const int V = c.vocab_size, T = static_cast<int>(row.size()), Q = static_cast<int>(query.size());
  std::vector<float> logits(static_cast<size_t>(T) * V);
  t.Logits(hidden.data(), T, logits.data());
  for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
    NbceOptions opt;
    opt.beta = 0;
    opt.pool = pool;
    const NbceResult got = NbceScore(m, context, query, kBos, opt);
    ASSERT_EQ(got.chunks, 1);
    double diff = 0;
    for (int r = 0; r < Q; ++r) {
      const std::vector<double> x(logits.begin() + (T - Q + r) * V,
                                  logits.begin() + (T - Q + r + 1) * V);
      const std::vector<double> lp = ref::LogSoftmaxRef(x.data(), V);
      for (int v = 0; v < V; ++v) {
        diff = std::max(diff, std::abs(lp[static_cast<size_t>(v)] - got.Row(r)[v]));
      }
    }
    EXPECT_LE(diff, kRounding) << NbcePoolName(pool);
    std::printf("  %-8s max |nbce - plain| %.2e\n", std::string(NbcePoolName(pool)).c_str(), diff);
  }
}

// As a SequenceScorer (the lab's protocols): sequence k = BOS + context + query, its positions
// from the query's start on scored by NbceScore's rows for them (the same numbers), no other.
TEST(Nbce, SequenceScorerRecordsAreTheScorersRows) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 61);
  NbceOptions opt;
  opt.chunk = 20;
  std::vector<std::vector<int>> seqs;
  const std::vector<int64_t> starts = {41, 30};
  for (int k = 0; k < 2; ++k) {
    std::vector<int> s = {kBos};
    const std::vector<int> body = testing::RandomStream(50, c.vocab_size, 62 + k);
    s.insert(s.end(), body.begin(), body.end());
    seqs.push_back(s);
  }
  const SequenceScorer scorer = NbceSequenceScorer(
      m, opt, Method{}, [&](size_t k, const std::vector<int>&) { return starts[k]; });
  std::vector<TokenRecord> records;
  scorer(seqs, 0, [&](const TokenRecord& r) { records.push_back(r); });
  ASSERT_EQ(records.size(), static_cast<size_t>((50 - 41) + (50 - 30)));
  size_t at = 0;
  for (size_t k = 0; k < 2; ++k) {
    const std::span<const int> all(seqs[k]);
    const int64_t qs = starts[k];
    const NbceResult want =
        NbceScore(m, all.subspan(1, static_cast<size_t>(qs - 1)),
                  all.subspan(static_cast<size_t>(qs), static_cast<size_t>(50 - qs)), kBos, opt);
    for (int64_t p = qs; p < 50; ++p, ++at) {
      const TokenRecord& r = records[at];
      EXPECT_EQ(r.window, static_cast<int64_t>(k));
      EXPECT_EQ(r.position, p);
      EXPECT_EQ(r.target, seqs[k][static_cast<size_t>(p + 1)]);
      EXPECT_EQ(r.loss, -static_cast<double>(want.Row(p - qs)[r.target]));
    }
  }
  // A query with no context before it is refused by name.
  const SequenceScorer bad =
      NbceSequenceScorer(m, opt, Method{}, [](size_t, const std::vector<int>&) { return 1; });
  EXPECT_THROW(bad(seqs, 0, {}), Error);
}

// The generator, fed the tokens it picks, gives NbceScore's rows for the question followed by
// those tokens. Prefill and decode run different kernels (a tile of queries against one query),
// so the two agree to float32 rounding of the forward: the bound of kBudget.
TEST(Nbce, GeneratorGivesTheScorersRows) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 51);
  const std::vector<int> context = testing::RandomStream(70, c.vocab_size, 52);
  const std::vector<int> question = testing::RandomStream(6, c.vocab_size, 53);
  const int steps = 5;
  for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
    NbceOptions opt;
    opt.chunk = 25;  // chunks 25, 25, 20; the default would depend on the question's length
    opt.pool = pool;
    NbceGenerator gen(m, kBos, opt, steps);
    gen.Start(context, question);
    EXPECT_EQ(gen.chunks(), 3);
    std::vector<int> q = question;
    std::vector<std::vector<float>> dists;
    std::vector<int> chosen;
    for (int s = 0; s <= steps; ++s) {
      dists.push_back(gen.NextLogProbs());
      chosen.push_back(gen.chosen());
      if (s == steps) break;
      const std::vector<float>& d = dists.back();
      const int next = static_cast<int>(std::max_element(d.begin(), d.end()) - d.begin());
      gen.Append(next);
      q.push_back(next);
    }
    EXPECT_EQ(gen.appended(), steps);
    EXPECT_THROW(gen.Append(3), Error);  // past max_new_tokens
    const NbceResult want = NbceScore(m, context, q, kBos, opt);
    double diff = 0;
    for (int s = 0; s <= steps; ++s) {
      const int64_t r = static_cast<int64_t>(question.size()) - 1 + s;
      EXPECT_EQ(chosen[static_cast<size_t>(s)], want.chosen[static_cast<size_t>(r)]) << s;
      for (int v = 0; v < c.vocab_size; ++v) {
        diff = std::max(
            diff,
            std::abs(static_cast<double>(dists[static_cast<size_t>(s)][static_cast<size_t>(v)]) -
                     want.Row(r)[v]));
      }
    }
    EXPECT_LE(diff, kBudget) << NbcePoolName(pool);
    std::printf("  %-8s max |generator - scorer| %.2e\n", std::string(NbcePoolName(pool)).c_str(),
                diff);
  }
}

// One row per thread (rows >= threads) and rows in turn (one thread, the kernels splitting each
// row) give the same NBCE to float32 rounding.
TEST(Nbce, RowsInParallelOrInTurnAgree) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 61);
  const std::vector<int> context = testing::RandomStream(100, c.vocab_size, 62);
  const std::vector<int> query = testing::RandomStream(9, c.vocab_size, 63);
  NbceOptions opt;
  opt.chunk = 12;  // 9 chunks: 10 rows
  opt.pool = NbcePool::kMean;
  const ThreadCountGuard restore;
  SetNumThreads(1);
  const NbceResult one = NbceScore(m, context, query, kBos, opt);
  SetNumThreads(4);
  const NbceResult four = NbceScore(m, context, query, kBos, opt);
  ASSERT_EQ(one.log_probs.size(), four.log_probs.size());
  double diff = 0;
  for (size_t i = 0; i < one.log_probs.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(one.log_probs[i]) - four.log_probs[i]));
  }
  EXPECT_LE(diff, kBudget);
  std::printf("  max |1 thread - 4 threads| %.2e\n", diff);
}

// stories260K on real text: 3 chunks of the default 512 - 1 - 24 = 487 tokens (the last shorter).
TEST(Nbce, StoriesMatchesDoubleReference) {
  STRETCH_REQUIRE_SHARED(testing::kStoriesModel);
  STRETCH_REQUIRE_SHARED(testing::kStoriesTok);
  STRETCH_REQUIRE_SHARED(testing::kStoriesText);
  const testing::Stories stories = testing::LoadStories();
  const Model& m = stories.model;
  const TextStream& text = stories.text;
#if STRETCH_ASAN
  const int context_len = 300, query_len = 16;
  const int64_t chunk = 128;  // 128, 128, 44
#else
  const int context_len = 1200, query_len = 24;
  const int64_t chunk = 0;  // 487, 487, 226
#endif
  ASSERT_GE(text.tokens.size(), static_cast<size_t>(context_len + query_len));
  const std::vector<int> context(text.tokens.begin(), text.tokens.begin() + context_len);
  const std::vector<int> query(text.tokens.begin() + context_len,
                               text.tokens.begin() + context_len + query_len);
  NbceOptions opt;
  opt.chunk = chunk;
  const int64_t chunk_len = NbceChunkLength(m.config, opt, query_len);
  const ref::NbceRowsRef rows = ref::NbceRowsOf(m, context, query, kBos, chunk_len);
  const double e = RowError(m, context, query, chunk_len, rows);
  for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
    opt.pool = pool;
    const NbceResult got = NbceScore(m, context, query, kBos, opt);
    EXPECT_EQ(got.chunks, 3);
    const ref::NbceOutRef want = ref::NbceCombineRef(rows, opt.beta, RefPool(pool));
    int ties = 0;
    const double diff = MaxDiff(got, want, rows, pool, &ties);
    EXPECT_LE(diff, kBudget) << NbcePoolName(pool);
    EXPECT_LE(diff, 2 * (1 + 2 * opt.beta) * e + kRounding) << "row error e = " << e;
    EXPECT_LE(ties, 1);
    // The loss of the query's tokens by NBCE and by the reference agree too.
    double loss = 0, ref_loss = 0;
    for (int r = 0; r + 1 < query_len; ++r) {
      const int target = query[static_cast<size_t>(r + 1)];
      loss -= got.Row(r)[target];
      ref_loss -= want.log_probs[static_cast<size_t>(r) * m.config.vocab_size + target];
    }
    std::printf("  stories260K %-34s K=%lld  row error %.2e  nbce diff %.2e  loss %.5f / %.5f\n",
                NbceSpecText(opt).c_str(), static_cast<long long>(got.chunks), e, diff,
                loss / (query_len - 1), ref_loss / (query_len - 1));
  }
}

TEST(Nbce, ChunksAreContiguousWithTheLastShorter) {
  const std::vector<int> context = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(NbceChunks(context, 3), (std::vector<std::vector<int>>{{1, 2, 3}, {4, 5, 6}, {7}}));
  EXPECT_EQ(NbceChunks(context, 7), (std::vector<std::vector<int>>{{1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(NbceChunks(context, 100), (std::vector<std::vector<int>>{{1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_TRUE(NbceChunks({}, 4).empty());

  ModelConfig c = HeadDim64();  // L = 64
  NbceOptions opt;
  EXPECT_EQ(NbceChunkLength(c, opt, 10), 53);
  EXPECT_EQ(NbceChunkLength(c, opt, 62), 1);
  opt.chunk = 500;  // an explicit chunk may run past L
  EXPECT_EQ(NbceChunkLength(c, opt, 62), 500);
}

void ExpectError(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << parts.front();
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "\"" << e.what() << "\" does not name \"" << part << "\"";
    }
  }
}

TEST(Nbce, SpecParsesAndRoundTrips) {
  EXPECT_EQ(ParseNbceSpec("nbce"), NbceOptions{});
  const NbceOptions o = ParseNbceSpec("nbce:chunk=100,pool=mean,beta=0.5");
  EXPECT_EQ(o.beta, 0.5);
  EXPECT_EQ(o.pool, NbcePool::kMean);
  EXPECT_EQ(o.chunk, 100);
  EXPECT_EQ(NbceSpecText(o), "nbce:beta=0.5,pool=mean,chunk=100");
  for (const char* spec : {"nbce", "nbce:beta=0", "nbce:pool=mean", "nbce:chunk=7",
                           "nbce:beta=0.3,chunk=4096", "nbce:beta=1e+20,pool=mean,chunk=1"}) {
    EXPECT_EQ(NbceSpecText(ParseNbceSpec(spec)), spec);
  }
  for (const double beta : {0.0, 0.1, 0.25, 1.0 / 3.0, 2.5}) {
    for (const NbcePool pool : {NbcePool::kEntropy, NbcePool::kMean}) {
      for (const int64_t chunk : {0, 1, 511}) {
        const NbceOptions a{beta, pool, chunk};
        EXPECT_EQ(ParseNbceSpec(NbceSpecText(a)), a) << NbceSpecText(a);
      }
    }
  }
  EXPECT_EQ(NbceSpecText(ParseNbceSpec("nbce:beta=0.25,pool=entropy")), "nbce");
  EXPECT_EQ(ParseNbceSpec("nbce:beta=-0").beta, 0.0);
}

TEST(Nbce, SpecErrorsNameKeyValueAndWhatIsAllowed) {
  ExpectError([] { ParseNbceSpec("nbc"); }, {"\"nbc\"", "nbce[:beta=B"});
  ExpectError([] { ParseNbceSpec("nbce:"); }, {"nothing after ':'", "beta, pool, chunk"});
  ExpectError([] { ParseNbceSpec("nbce:beta"); }, {"\"beta\" is not key=value", "beta, pool"});
  ExpectError([] { ParseNbceSpec("nbce:beta=1,"); }, {"\"\" is not key=value"});
  ExpectError([] { ParseNbceSpec("nbce:gamma=1"); }, {"unknown key \"gamma\"", "beta, pool"});
  ExpectError([] { ParseNbceSpec("nbce:beta=1,beta=2"); }, {"key \"beta\" given twice"});
  ExpectError([] { ParseNbceSpec("nbce:beta=x"); }, {"beta=x", "not a number", ">= 0"});
  ExpectError([] { ParseNbceSpec("nbce:beta="); }, {"beta=", "not a number"});
  ExpectError([] { ParseNbceSpec("nbce:beta=inf"); }, {"beta=inf", "not a finite number"});
  ExpectError([] { ParseNbceSpec("nbce:beta=1e999"); }, {"beta=1e999", "not a finite number"});
  ExpectError([] { ParseNbceSpec("nbce:beta=-0.5"); }, {"beta=-0.5", "negative", ">= 0"});
  ExpectError([] { ParseNbceSpec("nbce:pool=max"); }, {"pool=max", "entropy, mean"});
  ExpectError([] { ParseNbceSpec("nbce:chunk=0"); }, {"chunk=0", "positive integer"});
  ExpectError([] { ParseNbceSpec("nbce:chunk=-3"); }, {"chunk=-3", "positive integer"});
  ExpectError([] { ParseNbceSpec("nbce:chunk=1.5"); }, {"chunk=1.5", "positive integer"});
}

TEST(Nbce, InputErrorsNameTheValues) {
  const ModelConfig c = HeadDim64();
  const Model m = testing::RandomModel(c, 71);
  const std::vector<int> context = testing::RandomStream(20, c.vocab_size, 72);
  const std::vector<int> query = testing::RandomStream(5, c.vocab_size, 73);
  const NbceOptions opt;
  ExpectError([&] { NbceScore(m, {}, query, kBos, opt); }, {"context is empty"});
  ExpectError([&] { NbceScore(m, context, {}, kBos, opt); }, {"query is empty"});
  ExpectError([&] { NbceScore(m, context, query, 96, opt); }, {"BOS", "96", "0..95"});
  ExpectError(
      [&] {
        NbceScore(m, context, std::vector<int>{5, -1}, kBos, opt);
      },
      {"query", "-1", "index 1"});
  const std::vector<int> long_query(63, 5);  // L - 1 - 63 = 0 tokens left per chunk
  ExpectError([&] { NbceScore(m, context, long_query, kBos, opt); },
              {"|Q|=63", "L - 1 - |Q| = 0", "L=64", "chunk=N"});
  NbceOptions bad;
  bad.beta = -1;
  ExpectError([&] { NbceScore(m, context, query, kBos, bad); }, {"beta", "-1"});
  bad = {};
  bad.chunk = -2;
  ExpectError([&] { NbceScore(m, context, query, kBos, bad); }, {"chunk", "-2"});
  ExpectError([&] { NbceGenerator(m, kBos, opt, -1); }, {"max_new_tokens=-1"});
  NbceGenerator gen(m, kBos, opt, 2);
  ExpectError([&] { gen.Start({}, query); }, {"context is empty"});
  ExpectError([&] { gen.Start(context, long_query); }, {"|Q|=63"});
  gen.Start(context, query);
  ExpectError([&] { gen.Append(1000); }, {"appended token", "1000"});
  gen.Append(4);
  gen.Append(4);
  ExpectError([&] { gen.Append(4); }, {"2 tokens appended", "max_new_tokens"});
  // A question may be empty for the generator: every row then ends at its context (or BOS).
  gen.Start(context, {});
  EXPECT_EQ(gen.NextLogProbs().size(), static_cast<size_t>(c.vocab_size));
}

}  // namespace
}  // namespace stretch
