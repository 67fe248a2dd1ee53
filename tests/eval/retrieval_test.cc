// The retrieval protocols on constructed cases whose answers are known: the sequences are built as
// documented, a perfect copier reads every copy and nothing from the controls, the controls leak
// no n-gram of what they score, and "sees back" is the documented pure function.
#include "src/eval/retrieval.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {
namespace {

constexpr int kBos = 999;

// Documents of distinct tokens: document d holds (d + 1) * 100000 + 0, 1, 2, ... (no token
// repeats, so a copier can only be right where the protocol copies).
std::vector<std::vector<int>> DistinctDocuments(std::vector<int> lengths) {
  std::vector<std::vector<int>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int>& doc = docs.emplace_back(static_cast<size_t>(lengths[d]));
    std::iota(doc.begin(), doc.end(), static_cast<int>(d + 1) * 100000);
  }
  return docs;
}

TokenSpans Spans(const std::vector<std::vector<int>>& docs) {
  return TokenSpans(docs.begin(), docs.end());
}

// Bytes: each character its own token (its byte value).
const TextEncoder kBytes = [](std::string_view text) {
  std::vector<int> out;
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
};

// A perfect copier (an ideal induction head): for position p it finds the earlier position j whose
// preceding tokens match the longest suffix ending at p (ties: the latest) and predicts the token
// after j; with no match at all it predicts nothing (-1). Loss 0 when right, 1 when wrong.
SequenceScorer CopierScorer() {
  return [](const std::vector<std::vector<int>>& seqs, int64_t, const TokenSink& sink) {
    for (size_t w = 0; w < seqs.size(); ++w) {
      const std::vector<int>& s = seqs[w];
      for (int64_t p = 0; p + 1 < static_cast<int64_t>(s.size()); ++p) {
        int64_t best_len = 0, best_j = -1;
        for (int64_t j = 0; j < p; ++j) {
          int64_t len = 0;
          while (len <= j && len < 64 &&
                 s[static_cast<size_t>(j - len)] == s[static_cast<size_t>(p - len)]) {
            ++len;
          }
          if (len > 0 && len >= best_len) {
            best_len = len;
            best_j = j;
          }
        }
        const int guess = best_j < 0 ? -1 : s[static_cast<size_t>(best_j + 1)];
        const int target = s[static_cast<size_t>(p + 1)];
        sink({static_cast<int64_t>(w), p, target, guess == target ? 0.0 : 1.0, guess == target});
      }
    }
  };
}

// True when the n-gram ending at index t of `s` also ends at some index e < t (brute force, the
// definition of a leak, independent of the generator's own rule).
bool OccursEarlier(const std::vector<int>& s, int64_t t, int n) {
  for (int64_t e = n - 1; e < t; ++e) {
    bool same = true;
    for (int k = 0; k < n && same; ++k) {
      same = s[static_cast<size_t>(e - k)] == s[static_cast<size_t>(t - k)];
    }
    if (same) return true;
  }
  return false;
}

TEST(FarCopy, LayoutPutsTheSpanAtTheDistanceAndTheCopyAtTheEnd) {
  const auto docs = DistinctDocuments({2000});
  FarCopyOptions opt;
  opt.span = 16;
  const int64_t ctx = 128, d = 48;
  const auto trials = MakeFarCopyTrials(Spans(docs), {}, kBos, ctx, d, 3, opt);
  ASSERT_EQ(trials.size(), 3u);
  for (const FarCopyTrial& t : trials) {
    ASSERT_EQ(t.copy.tokens.size(), static_cast<size_t>(ctx + 1));
    ASSERT_EQ(t.control.tokens.size(), static_cast<size_t>(ctx + 1));
    EXPECT_EQ(t.copy.tokens[0], kBos);
    EXPECT_EQ(t.copy_start, ctx - 16 + 1);
    EXPECT_EQ(t.copy_start - t.source_start, d);
    for (int64_t i = 0; i < 16; ++i) {
      const size_t src = static_cast<size_t>(t.source_start + i);
      const size_t cp = static_cast<size_t>(t.copy_start + i);
      EXPECT_EQ(t.copy.tokens[src], t.copy.tokens[cp]);
      EXPECT_EQ(t.control.tokens[cp], t.copy.tokens[cp]) << "the same targets";
      EXPECT_NE(t.control.tokens[src], t.copy.tokens[cp]) << "the control's source differs";
    }
    // Everywhere else the two arms are the same tokens.
    for (size_t k = 0; k < t.copy.tokens.size(); ++k) {
      if (static_cast<int64_t>(k) >= t.source_start &&
          static_cast<int64_t>(k) < t.source_start + 16)
        continue;
      EXPECT_EQ(t.copy.tokens[k], t.control.tokens[k]) << k;
    }
    // Distinct tokens leak nothing: every copy token but the first is scored.
    std::vector<int64_t> want;
    for (int64_t i = 1; i < 16; ++i) want.push_back(t.copy_start + i - 1);
    EXPECT_EQ(t.copy.scored, want);
    EXPECT_EQ(t.control.scored, want);
  }
  // The text is the same at every distance: only the source moves.
  const auto far = MakeFarCopyTrials(Spans(docs), {}, kBos, ctx, ctx - 16, 3, opt);
  EXPECT_EQ(far[0].source_start, 1) << "the whole context: right after BOS";
  EXPECT_EQ(far[1].copy.tokens.back(), trials[1].copy.tokens.back());
}

TEST(FarCopy, APerfectCopierReadsTheCopyAndNothingFromTheControl) {
  const auto docs = DistinctDocuments({3000, 2500});
  for (const CopySource source : {CopySource::kText, CopySource::kRandom}) {
    FarCopyOptions opt;
    opt.source = source;
    opt.span = 24;
    const int64_t ctx = 256;
    const std::vector<int64_t> distances = DefaultCopyDistances(64, ctx, opt.span);
    const FarCopyResult r =
        RunFarCopy(CopierScorer(), Spans(docs), kBytes, kBos, ctx, 64, distances, 6, opt);
    ASSERT_EQ(r.points.size(), distances.size());
    for (const FarCopyPoint& p : r.points) {
      EXPECT_GT(p.result.test.tokens, 0);
      // Right after the copy's first token a random string can be ambiguous to any copier (its
      // first letter may recur within the source); distinct text never is.
      EXPECT_GE(p.result.test.accuracy.estimate, source == CopySource::kText ? 1.0 : 0.95)
          << CopySourceName(source) << " at " << p.distance;
      // The copier finds no earlier occurrence of any scored n-gram in the control; at most a
      // shorter match (a lone character of a random string) can guess right by chance.
      EXPECT_LT(p.result.control.accuracy.estimate, source == CopySource::kText ? 1e-12 : 0.5)
          << CopySourceName(source) << " at " << p.distance;
      EXPECT_GT(p.result.accuracy_difference.low, 0.4);
    }
    ASSERT_TRUE(r.sees_back.has_value());
    EXPECT_EQ(*r.sees_back, ctx - opt.span) << "a perfect copier sees the whole context";
    EXPECT_EQ(r.reference_distance, 64);
    EXPECT_GT(r.reference_gain, 0.9);
  }
}

// The no-leak rule on text that repeats itself a lot (6 distinct tokens): for every scored target
// of the control, the n-gram ending at it occurs nowhere earlier. Without the rule the same
// layout would leak (checked on the unfiltered candidates), so a generator that drops the rule,
// or builds its control from the copy's own span, fails here.
TEST(FarCopy, TheControlLeaksNoNgramOfWhatItScores) {
  Rng rng(5);
  std::vector<std::vector<int>> docs(1);
  for (int i = 0; i < 5000; ++i) docs[0].push_back(static_cast<int>(rng.NextU64() % 6));
  for (const int n : {4, 6}) {
    FarCopyOptions opt;
    opt.span = 32;
    opt.ngram = n;
    int64_t candidates_leaking = 0, scored = 0;
    for (const int64_t d : {32, 100, 224}) {
      for (const FarCopyTrial& t : MakeFarCopyTrials(Spans(docs), {}, kBos, 256, d, 8, opt)) {
        for (const int64_t p : t.control.scored) {
          EXPECT_FALSE(OccursEarlier(t.control.tokens, p + 1, n)) << "n " << n << " d " << d;
          // A longer n-gram ending there cannot occur earlier either.
          EXPECT_FALSE(OccursEarlier(t.control.tokens, p + 1, n + 3)) << "n " << n;
        }
        scored += static_cast<int64_t>(t.control.scored.size());
        for (int64_t i = 1; i < 32; ++i) {
          candidates_leaking += OccursEarlier(t.control.tokens, t.copy_start + i, n) ? 1 : 0;
        }
      }
    }
    EXPECT_GT(candidates_leaking, 0) << "the test text must exercise the rule";
    EXPECT_GT(scored, 0);
  }
}

TEST(FarCopy, RandomStringsAreSeededCharactersEncodedAlone) {
  const auto docs = DistinctDocuments({2000});
  FarCopyOptions opt;
  opt.source = CopySource::kRandom;
  opt.alphabet = "xyz";
  opt.span = 10;
  const auto a = MakeFarCopyTrials(Spans(docs), kBytes, kBos, 64, 20, 2, opt);
  const auto b = MakeFarCopyTrials(Spans(docs), kBytes, kBos, 64, 30, 2, opt);
  for (size_t i = 0; i < a.size(); ++i) {
    for (int64_t k = 0; k < 10; ++k) {
      const int tok = a[i].copy.tokens[static_cast<size_t>(a[i].copy_start + k)];
      EXPECT_TRUE(tok == 'x' || tok == 'y' || tok == 'z') << tok;
    }
    // The same strings at every distance.
    EXPECT_EQ(a[i].copy.tokens.back(), b[i].copy.tokens.back());
  }
  EXPECT_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 64, 20, 2, opt), Error) << "no encoder";
}

TEST(FarCopy, RefusesDistancesOutsideTheContext) {
  const auto docs = DistinctDocuments({2000});
  FarCopyOptions opt;
  opt.span = 16;
  EXPECT_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 128, 15, 1, opt), Error) << "overlap";
  EXPECT_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 128, 113, 1, opt), Error) << "before BOS";
  EXPECT_NO_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 128, 112, 1, opt));
  opt.span = 4;
  EXPECT_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 128, 16, 1, opt), Error) << "span <= n";
  opt.span = 16;
  EXPECT_THROW(MakeFarCopyTrials(Spans(docs), {}, kBos, 128, 32, 20, opt), Error) << "text";
}

TEST(FarCopy, DefaultDistancesRunFromAQuarterOfLToTheWholeContext) {
  EXPECT_EQ(DefaultCopyDistances(512, 4096, 32),
            (std::vector<int64_t>{128, 256, 512, 1024, 2048, 4064}));
  EXPECT_EQ(DefaultCopyDistances(512, 512, 32), (std::vector<int64_t>{128, 256, 480}));
  // Distances below the span are dropped (the source would overlap the copy).
  EXPECT_EQ(DefaultCopyDistances(64, 256, 32), (std::vector<int64_t>{32, 64, 128, 224}));
  EXPECT_EQ(DefaultCopyDistances(100, 400, 20), (std::vector<int64_t>{25, 50, 100, 200, 380}));
}

TEST(SeesBack, TheFarthestDistanceWithinTenPointsOfTheValueAtL) {
  using P = CopyAtDistance;
  // Stays, then drops at 2048: sees back 1024.
  const std::vector<P> a = {{128, 0.9},   {256, 0.9},  {512, 0.8},
                            {1024, 0.71}, {2048, 0.5}, {4064, 0.75}};
  EXPECT_EQ(SeesBackDistance(a, 512), 1024);
  // Exactly 10 points lower still counts; a recovery after a drop does not.
  const std::vector<P> b = {{512, 0.8}, {1024, 0.7}, {2048, 0.69}, {4096, 0.8}};
  EXPECT_EQ(SeesBackDistance(b, 512), 1024);
  // Higher than at L is fine; any order.
  const std::vector<P> c = {{4096, 0.99}, {512, 0.5}, {1024, 0.6}};
  EXPECT_EQ(SeesBackDistance(c, 512), 4096);
  // The first step beyond L drops: L itself.
  const std::vector<P> d = {{256, 0.9}, {512, 0.9}, {1024, 0.1}};
  EXPECT_EQ(SeesBackDistance(d, 512), 512);
  // L not measured: the closest distance below it is the reference.
  const std::vector<P> e = {{128, 0.9}, {384, 0.85}, {1024, 0.8}, {2048, 0.2}};
  EXPECT_EQ(SeesBackDistance(e, 512), 1024);
  // Nothing at or below L: unknown.
  const std::vector<P> f = {{1024, 0.9}};
  EXPECT_FALSE(SeesBackDistance(f, 512).has_value());
  EXPECT_EQ(SeesBackDistance(a, 512, 0.3), 4064);
  // At its control (the difference's interval holds 0) the walk stops there; at the reference:
  // none (0), however high the accuracies beyond it.
  const std::vector<P> g = {{512, 0.8}, {1024, 0.8, false}, {2048, 0.8}};
  EXPECT_EQ(SeesBackDistance(g, 512), 512);
  const std::vector<P> h = {{512, 0.8, false}, {1024, 0.9}, {2048, 0.9}};
  EXPECT_EQ(SeesBackDistance(h, 512), 0);
}

TEST(RepeatPeriod, ScoresFromTheSecondCopyOnAgainstTextAtTheSamePositions) {
  const auto docs = DistinctDocuments({4000});
  const RepeatProbe p = MakeRepeatProbe(Spans(docs), kBos, 100, 30, 4);
  ASSERT_EQ(p.repeat.size(), 4u);
  ASSERT_EQ(p.control.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(p.repeat[i].tokens.size(), 101u);
    EXPECT_EQ(p.repeat[i].tokens[1], p.repeat[i].tokens[31]) << "period 30";
    EXPECT_EQ(p.repeat[i].scored.front(), 31);
    EXPECT_EQ(p.repeat[i].scored.back(), 99);
    EXPECT_EQ(p.repeat[i].scored, p.control[i].scored);
  }
  const ProbeResult r = RunRepeat(CopierScorer(), Spans(docs), kBos, 100, 30, 4);
  EXPECT_DOUBLE_EQ(r.test.accuracy.estimate, 1.0);
  EXPECT_DOUBLE_EQ(r.control.accuracy.estimate, 0.0);
  EXPECT_EQ(r.test.tokens, 4 * 69);
  EXPECT_THROW(MakeRepeatProbe(Spans(docs), kBos, 100, 100, 4), Error);
  EXPECT_THROW(MakeRepeatProbe(Spans(docs), kBos, 100, 0, 4), Error);
}

std::string Text(const std::vector<int>& tokens, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to; ++i) s += static_cast<char>(tokens[i]);
  return s;
}

TEST(PasskeyProbe, LlamaCppLayoutAndItsControl) {
  const auto docs = DistinctDocuments({10});  // unused: the junk is the filler
  const PasskeyFormat f = LlamaCppPasskeyFormat();
  const int64_t ctx = 600;
  for (const double depth : {0.0, 0.5, 1.0}) {
    const auto trials = MakePasskeyProbe(Spans(docs), kBytes, kBos, ctx, depth, 3, 9, f);
    ASSERT_EQ(trials.size(), 3u);
    for (const PasskeyProbeTrial& t : trials) {
      const std::vector<int>& s = t.trial.tokens;
      ASSERT_EQ(s.size(), static_cast<size_t>(ctx + 1));
      const std::string text = Text(s, 1, s.size());
      EXPECT_EQ(text.rfind(f.prefix + " The grass is green.", 0) == 0 || depth == 0.0, true)
          << text;
      EXPECT_EQ(text.rfind(f.prefix, 0), 0u);
      const std::string needle =
          " The pass key is " + t.trial.key + ". Remember it. " + t.trial.key + " is the pass key.";
      EXPECT_NE(text.find(needle), std::string::npos) << text;
      // The needle sits between two repetitions of the junk (a sentence boundary).
      const size_t at = text.find(needle);
      if (depth > 0.0) {
        EXPECT_EQ(text.substr(at - 6, 6), "again.") << text;
      }
      EXPECT_EQ(text.substr(text.size() - f.question.size() - 5),
                " What is the pass key? The pass key is " + t.trial.key);
      // The control: no needle, the key nowhere before the answer, the same answer positions.
      const std::vector<int>& c = t.control.tokens;
      ASSERT_EQ(c.size(), s.size());
      const std::string ctext = Text(c, 1, c.size() - 5);
      EXPECT_EQ(ctext.find("pass key is " + t.trial.key), std::string::npos);
      EXPECT_EQ(ctext.find(t.trial.key), std::string::npos);
      EXPECT_EQ(t.control.key_positions, t.trial.key_positions);
      for (size_t k = c.size() - 5 - f.question.size(); k < c.size(); ++k) EXPECT_EQ(c[k], s[k]);
      EXPECT_EQ(t.digit_tokens, (std::vector<int64_t>{1, 1, 1, 1, 1}));
    }
  }
}

TEST(PasskeyProbe, APerfectCopierReadsEveryKeyAndNoControl) {
  std::vector<std::vector<int>> docs(1);
  Rng rng(2);
  // Filler of letters only (no digit anywhere), as tokens 'a'..'z'.
  for (int i = 0; i < 20000; ++i) docs[0].push_back('a' + static_cast<int>(rng.NextU64() % 26));
  for (const bool llama : {false, true}) {
    const PasskeyFormat f = llama ? LlamaCppPasskeyFormat() : PasskeyFormat{};
    const auto trials = MakePasskeyProbe(Spans(docs), kBytes, kBos, 400, 0.3, 12, 4, f);
    const PasskeyProbeResult r = ScorePasskeyProbe(CopierScorer(), trials);
    EXPECT_EQ(r.test.trials, 12);
    EXPECT_EQ(r.test.retrieved, 12) << llama;
    EXPECT_DOUBLE_EQ(r.test.digit_accuracy.estimate, 1.0);
    EXPECT_DOUBLE_EQ(r.test.digit_loss.estimate, 0.0);
    EXPECT_EQ(r.control.retrieved, 0) << llama;
    EXPECT_LT(r.control.digit_accuracy.estimate, 0.3) << llama;
    EXPECT_EQ(r.test.digits, 60);
    EXPECT_GT(r.exact_difference.low, 0.5);
    EXPECT_NEAR(r.test.exact.high, 1.0, 1e-12);
    EXPECT_LT(r.test.exact.low, 1.0);  // 12 trials: the interval says so
  }
}

// A digit of several tokens is right only when all of them are, and its loss is their sum.
TEST(PasskeyProbe, DigitsOfSeveralTokens) {
  const TextEncoder two = [](std::string_view text) {
    std::vector<int> out;
    for (const char c : text) {
      if (c >= '0' && c <= '9') out.push_back(7);  // a word-start piece before each digit
      out.push_back(static_cast<unsigned char>(c));
    }
    return out;
  };
  std::vector<std::vector<int>> docs(1, std::vector<int>(5000, 'a'));
  for (size_t i = 0; i < docs[0].size(); ++i) docs[0][i] = 'a' + static_cast<int>(i % 26);
  const auto trials = MakePasskeyProbe(Spans(docs), two, kBos, 300, 0.5, 4, 1);
  ASSERT_EQ(trials[0].digit_tokens, (std::vector<int64_t>{2, 2, 2, 2, 2}));
  // A scorer right on every token but the digits themselves: the pieces "7" alone are no digit.
  const SequenceScorer pieces_only = [&](const std::vector<std::vector<int>>& seqs, int64_t,
                                         const TokenSink& sink) {
    for (size_t w = 0; w < seqs.size(); ++w) {
      for (int64_t p = 0; p + 1 < static_cast<int64_t>(seqs[w].size()); ++p) {
        const int target = seqs[w][static_cast<size_t>(p + 1)];
        const bool right = target == 7;
        sink({static_cast<int64_t>(w), p, target, right ? 0.0 : 0.5, right});
      }
    }
  };
  const PasskeyProbeResult r = ScorePasskeyProbe(pieces_only, trials);
  EXPECT_EQ(r.test.retrieved, 0);
  EXPECT_DOUBLE_EQ(r.test.digit_accuracy.estimate, 0.0);
  EXPECT_DOUBLE_EQ(r.test.digit_loss.estimate, 0.5);
}

// A scorer that reads every key but its first digit (the one after the question's "is "): no key
// is read back, 4 of 5 digits are, and the count by place says which one fails.
TEST(PasskeyProbe, CountsTheDigitsRightByPlace) {
  std::vector<std::vector<int>> docs(1, std::vector<int>(5000, 'a'));
  for (size_t i = 0; i < docs[0].size(); ++i) docs[0][i] = 'a' + static_cast<int>(i % 26);
  const auto trials = MakePasskeyProbe(Spans(docs), kBytes, kBos, 300, 0.5, 6, 3);
  const SequenceScorer all_but_first = [](const std::vector<std::vector<int>>& seqs, int64_t,
                                          const TokenSink& sink) {
    for (size_t w = 0; w < seqs.size(); ++w) {
      for (int64_t p = 0; p + 1 < static_cast<int64_t>(seqs[w].size()); ++p) {
        const int target = seqs[w][static_cast<size_t>(p + 1)];
        const bool first = target >= '0' && target <= '9' && seqs[w][static_cast<size_t>(p)] == ' ';
        sink({static_cast<int64_t>(w), p, target, first ? 2.0 : 0.0, !first});
      }
    }
  };
  const PasskeyProbeResult r = ScorePasskeyProbe(all_but_first, trials);
  EXPECT_EQ(r.test.retrieved, 0);
  EXPECT_DOUBLE_EQ(r.test.digit_accuracy.estimate, 0.8);
  EXPECT_EQ(r.test.right_by_place, (std::vector<int64_t>{0, 6, 6, 6, 6}));
  EXPECT_EQ(r.control.right_by_place.size(), 5u);
}

// A dummy-prefix tokenizer (a space token 1000 before every text, as SentencePiece's): pieces come
// out as they read mid-text. One that merges the newline into what follows falls back.
TEST(MidTextEncoder, DropsTheDummyPrefixOfPiecesEncodedAlone) {
  const TextEncoder prefixed = [](std::string_view text) {
    std::vector<int> out = {1000};
    for (const char c : text) out.push_back(static_cast<unsigned char>(c));
    return out;
  };
  const TextEncoder mid = MidTextEncoder(prefixed);
  EXPECT_EQ(mid("5"), (std::vector<int>{'5'}));
  EXPECT_EQ(mid(" is "), (std::vector<int>{' ', 'i', 's', ' '}));
  EXPECT_TRUE(mid("").empty());
  const TextEncoder merging = [](std::string_view text) {
    std::vector<int> out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n' && i + 1 < text.size()) {
        out.push_back(2000 + text[++i]);  // "\n" and the next character, one token
      } else {
        out.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return out;
  };
  EXPECT_EQ(MidTextEncoder(merging)("ab"), (std::vector<int>{'a', 'b'}));
}

}  // namespace
}  // namespace stretch
