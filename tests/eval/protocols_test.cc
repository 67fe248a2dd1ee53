// The lab's sequence protocols on constructed cases whose answers are known: the sequences are
// built as documented, a perfect copier scores 100% on repeated text after the first copy, the
// fixed tail scores the very same targets at every context.
#include "src/eval/protocols.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "src/core/error.h"

namespace stretch {
namespace {

constexpr int kBos = 999;

// Documents of distinct tokens: document d holds d * 1000 + 0, 1, 2, ... (no token repeats, so a
// copier can only be right where the text repeats).
std::vector<std::vector<int>> Documents(std::vector<int> lengths) {
  std::vector<std::vector<int>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int>& doc = docs.emplace_back(static_cast<size_t>(lengths[d]));
    std::iota(doc.begin(), doc.end(), static_cast<int>(d + 1) * 1000);
  }
  return docs;
}

TokenSpans Spans(const std::vector<std::vector<int>>& docs) {
  return TokenSpans(docs.begin(), docs.end());
}

// A constructed scorer: `predict(sequence, p)` is its guess for sequence[p + 1]; loss 0 when
// right, 1 when wrong.
SequenceScorer OracleScorer(std::function<int(const std::vector<int>&, int64_t)> predict) {
  return [predict](const std::vector<std::vector<int>>& seqs, int64_t, const TokenSink& sink) {
    for (size_t w = 0; w < seqs.size(); ++w) {
      for (int64_t p = 0; p + 1 < static_cast<int64_t>(seqs[w].size()); ++p) {
        const int target = seqs[w][static_cast<size_t>(p + 1)];
        const bool right = predict(seqs[w], p) == target;
        sink({static_cast<int64_t>(w), p, target, right ? 0.0 : 1.0, right});
      }
    }
  };
}

TEST(Protocols, NonRepeatWindowsAreDocumentSlicesSpreadOverTheText) {
  const auto docs = Documents({10, 25, 7});  // windows of 5: 2 + 5 + 1 = 8
  const auto seqs = NonRepeatSequences(Spans(docs), 5, 4, kBos);
  ASSERT_EQ(seqs.size(), 4u);
  // Indices floor(i * 8 / 4) = 0, 2, 4, 6: doc 0 offset 0, doc 1 offsets 0, 10, 20.
  const std::vector<int> first = {1000, 2000, 2010, 2020};
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(seqs[i].size(), 6u) << "BOS + ctx tokens";
    EXPECT_EQ(seqs[i][0], kBos);
    for (int t = 0; t < 5; ++t) EXPECT_EQ(seqs[i][static_cast<size_t>(1 + t)], first[i] + t);
  }
  // Never crosses from one document into the next: 8 windows exist, 9 do not.
  EXPECT_NO_THROW(NonRepeatSequences(Spans(docs), 5, 8, kBos));
  EXPECT_THROW(NonRepeatSequences(Spans(docs), 5, 9, kBos), Error);
}

TEST(Protocols, RepeatRepeatsOneTrainingLengthSample) {
  const auto docs = Documents({40});
  const auto seqs = RepeatSequences(Spans(docs), 8, 30, 2, kBos);
  ASSERT_EQ(seqs.size(), 2u);
  for (const auto& s : seqs) {
    ASSERT_EQ(s.size(), 31u);
    EXPECT_EQ(s[0], kBos);
    for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i], s[1 + (i - 1) % 8]) << i;
  }
  EXPECT_EQ(seqs[0][1], 1000);
  EXPECT_EQ(seqs[1][1], 1016);  // 5 windows of 8; indices 0 and floor(5/2) = 2
  EXPECT_THROW(RepeatSequences(Spans(docs), 8, 4, 1, kBos), Error);
}

TEST(Protocols, PerfectCopierScoresEveryRepeatedTarget) {
  const int64_t L = 16, ctx = 128;
  const auto docs = Documents({200, 300});
  const auto seqs = RepeatSequences(Spans(docs), L, ctx, 6, kBos);
  // Copies the token seen L positions back; before a whole copy has been seen it has nothing to
  // copy and guesses -1 (never a token).
  const auto copier = OracleScorer([&](const std::vector<int>& s, int64_t p) {
    return p + 1 - L >= 1 ? s[static_cast<size_t>(p + 1 - L)] : -1;
  });
  const ScoreSummary all = ScoreAllTargets(copier, seqs, L);
  EXPECT_EQ(all.windows, 6);
  EXPECT_EQ(all.scored, 6 * ctx);
  EXPECT_DOUBLE_EQ(all.Accuracy(), static_cast<double>(ctx - L) / ctx);
  ASSERT_EQ(all.buckets.size(), static_cast<size_t>(ctx / L));
  EXPECT_EQ(all.buckets[0].correct, 0);  // the first copy cannot be copied
  for (size_t b = 1; b < all.buckets.size(); ++b) EXPECT_DOUBLE_EQ(all.buckets[b].Accuracy(), 1.0);
  // On genuine text, where nothing repeats, the same copier is never right.
  const ScoreSummary text =
      ScoreAllTargets(copier, NonRepeatSequences(Spans(docs), ctx, 3, kBos), L);
  EXPECT_EQ(text.correct, 0);
  // From position L on (after the first copy), the copier is right everywhere: 100%.
  EXPECT_DOUBLE_EQ(ScoreTargetsFrom(copier, seqs, L, L).Accuracy(), 1.0);
}

TEST(Protocols, FixedTailScoresTheSameTargetsAtEveryContext) {
  const int64_t longest = 64, tail = 8;
  const auto docs = Documents({150, 90, 200});
  std::map<int64_t, std::vector<std::pair<int64_t, int>>> targets;  // ctx -> (sample, target)
  for (const int64_t ctx : {8, 16, 32, 64}) {
    const auto seqs = TailSequences(Spans(docs), longest, ctx, 5, kBos);
    ASSERT_EQ(seqs.size(), 5u);
    const SequenceScorer recorder = [&](const std::vector<std::vector<int>>& s, int64_t first,
                                        const TokenSink& sink) {
      OracleScorer([](const std::vector<int>&, int64_t) { return -1; })(s, first, sink);
    };
    const SequenceScorer keep = [&](const std::vector<std::vector<int>>& s, int64_t first,
                                    const TokenSink& sink) {
      recorder(s, first, [&](const TokenRecord& r) {
        sink(r);
        if (r.position >= ctx - tail) targets[ctx].push_back({r.window, r.target});
      });
    };
    const ScoreSummary sum = ScoreTargetsFrom(keep, seqs, ctx - tail, 4);
    EXPECT_EQ(sum.scored, 5 * tail);
    EXPECT_EQ(sum.windows, 5);
    for (const auto& s : seqs) EXPECT_EQ(s.size(), static_cast<size_t>(ctx + 1));
  }
  for (const auto& [ctx, t] : targets) EXPECT_EQ(t, targets[64]) << "ctx " << ctx;
  EXPECT_THROW(TailSequences(Spans(docs), longest, 65, 1, kBos), Error);
}

}  // namespace
}  // namespace stretch
