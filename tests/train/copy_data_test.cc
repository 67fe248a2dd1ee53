// The copy documents and the copy readout of src/train/copy_data.h: each generator's layout (the
// copy equals its source; a control shares no span of kControlSpan tokens with what precedes it),
// disjoint alphabets, determinism from a seed, the mix's proportions in SampleTrainingBatch, and
// the readout against oracles whose scores are known.
#include "src/train/copy_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "src/train/run.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

constexpr int64_t kT = 128;

TextEncoder BytesEncoder() {
  return [](std::string_view text) { return TrainingTokenizer::Bytes().Encode(text); };
}

int Bos() { return TrainingTokenizer::Bytes().bos_id(); }

std::set<int> TokensOf(const std::vector<std::vector<int>>& alphabet) {
  std::set<int> out;
  for (const std::vector<int>& c : alphabet) out.insert(c.begin(), c.end());
  return out;
}

// Whether some span of k tokens of `fresh` occurs anywhere in `before` (a plain search: the
// generator's own check must not be what the test trusts).
bool SharesSpanOf(const std::vector<int>& before, const std::vector<int>& fresh, size_t k) {
  for (size_t i = 0; i + k <= fresh.size(); ++i) {
    if (std::search(before.begin(), before.end(), fresh.begin() + static_cast<std::ptrdiff_t>(i),
                    fresh.begin() + static_cast<std::ptrdiff_t>(i + k)) != before.end()) {
      return true;
    }
  }
  return false;
}

std::vector<int64_t> AfterFirst(int64_t copy, int64_t span) {
  std::vector<int64_t> p;
  for (int64_t k = 0; k + 1 < span; ++k) p.push_back(copy + k);
  return p;
}

TEST(CopyAlphabets, BytesAlphabetsAreDisjointOneTokenPerCharacter) {
  const CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  ASSERT_EQ(a.string.size(), kCopyStringChars.size());
  ASSERT_EQ(a.gap.size(), kCopyGapChars.size());
  for (const std::vector<int>& c : a.string) EXPECT_EQ(c.size(), 1u);
  const std::set<int> s = TokensOf(a.string), g = TokensOf(a.gap);
  EXPECT_EQ(s.size(), a.string.size());
  for (const int t : g) EXPECT_FALSE(s.contains(t)) << t;
}

TEST(CopyAlphabets, RefusesEmptyCharactersAndSharedTokens) {
  const TextEncoder drops_q = [](std::string_view text) {
    return text == "q" ? std::vector<int>{} : TrainingTokenizer::Bytes().Encode(text);
  };
  EXPECT_NE(testing::ErrorOf([&] {
              EncodeCopyAlphabets(drops_q);
            }).find("the string alphabet's character 'q' encodes to no token"),
            std::string::npos);
  EXPECT_NE(testing::ErrorOf([&] {
              EncodeCopyAlphabets(BytesEncoder(), "abc", "XcY");
            }).find("the string character 'c' and the gap character 'c' share token"),
            std::string::npos);
  EXPECT_NE(testing::ErrorOf([&] {
              EncodeCopyAlphabets(BytesEncoder(), "a", "XY");
            }).find("has 1 characters, expected at least 2"),
            std::string::npos);
}

TEST(CopySpansTest, DefaultsScaleWithTheLengthAndBadSpansAreRefused) {
  EXPECT_EQ(DefaultCopySpans(128).min, 8);
  EXPECT_EQ(DefaultCopySpans(128).max, 40);
  EXPECT_EQ(DefaultCopySpans(512).max, 160);
  EXPECT_EQ(DefaultCopySpans(16).min, 2);
  CheckCopySpans({8, 63}, 128, "x");
  EXPECT_NE(testing::ErrorOf([] {
              CheckCopySpans({8, 64}, 128, "--copy-span-max 64");
            }).find("--copy-span-max 64: string lengths 8..64 at sequence length 128"),
            std::string::npos);
  EXPECT_FALSE(testing::ErrorOf([] { CheckCopySpans({1, 4}, 128, "x"); }).empty());
  EXPECT_FALSE(testing::ErrorOf([] { CheckCopySpans({9, 8}, 128, "x"); }).empty());
}

TEST(CopyRows, PeriodicRowRepeatsOneStringToTheEnd) {
  const CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  const std::set<int> letters = TokensOf(a.string);
  Rng rng(1);
  std::set<int64_t> spans;
  for (int i = 0; i < 200; ++i) {
    const CopyRow r = MakePeriodicRow(a, DefaultCopySpans(kT), Bos(), kT, rng);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    EXPECT_EQ(r.tokens[0], Bos());
    ASSERT_GE(r.span, 8);
    ASSERT_LE(r.span, 40);
    spans.insert(r.span);
    for (int64_t t = 1; t <= kT; ++t) {
      EXPECT_TRUE(letters.contains(r.tokens[static_cast<size_t>(t)]));
      if (t > r.span) {
        EXPECT_EQ(r.tokens[static_cast<size_t>(t)], r.tokens[static_cast<size_t>(t - r.span)]);
      }
    }
    EXPECT_EQ(r.copy, 1 + r.span);
    EXPECT_EQ(r.scored, AfterFirst(r.copy, r.span));
    // Distinct characters while the 26 letters last.
    const size_t distinct = static_cast<size_t>(std::min<int64_t>(r.span, 26));
    EXPECT_EQ(std::set<int>(r.tokens.begin() + 1,
                            r.tokens.begin() + 1 + static_cast<std::ptrdiff_t>(distinct))
                  .size(),
              distinct);
  }
  EXPECT_EQ(spans.size(), 33u);  // every length 8..40 in 200 draws (each misses with p < 1e-3)
}

// draw_min: each row's strings use a random subset of draw_min..26 letters; every size of that
// range is drawn, the copy still equals its source, and the gap alphabet is untouched.
TEST(CopyRows, RowsDrawTheirLettersFromASubsetOfAtLeastDrawMin) {
  CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  a.draw_min = 3;
  const std::set<int> gaps = TokensOf(a.gap);
  Rng rng(5);
  int64_t fewest = 26, most = 0;
  for (int i = 0; i < 400; ++i) {
    const CopyRow r = MakeGappedRow(a, DefaultCopySpans(kT), Bos(), kT, rng);
    std::set<int> used;
    for (size_t t = 1; t < r.tokens.size(); ++t) {
      if (!gaps.contains(r.tokens[t])) used.insert(r.tokens[t]);
    }
    for (int64_t k = 0; k < r.span && r.copy + k <= kT; ++k) {
      ASSERT_EQ(r.tokens[static_cast<size_t>(r.copy + k)],
                r.tokens[static_cast<size_t>(r.source + k)]);
    }
    fewest = std::min<int64_t>(fewest, static_cast<int64_t>(used.size()));
    most = std::max<int64_t>(most, static_cast<int64_t>(used.size()));
  }
  // A row of 3 letters uses at most 3 (a string of >= 8 draws uses all 3 with p ~ 0.88, so some of
  // the ~16 rows of size 3 show exactly 3); the whole alphabet shows up to 26 in long strings.
  EXPECT_EQ(fewest, 3);
  EXPECT_GE(most, 20);
  // 26 (the whole alphabet, like 0): the rows of the plain generator, draw for draw.
  CopyAlphabets whole = EncodeCopyAlphabets(BytesEncoder());
  Rng r1(9), r2(9);
  whole.draw_min = 26;
  const CopyAlphabets plain = EncodeCopyAlphabets(BytesEncoder());
  EXPECT_EQ(MakeGappedRow(whole, DefaultCopySpans(kT), Bos(), kT, r1).tokens,
            MakeGappedRow(plain, DefaultCopySpans(kT), Bos(), kT, r2).tokens);
}

// Randcopy: the window is untouched but for R written twice; the copy equals its source, lies
// inside the row and after it; the control writes a string there that shares no 4 tokens with
// anything before it (a generator that leaked the answer into the control would fail here).
TEST(CopyRows, RandCopyWritesOneStringTwiceIntoTextAndItsControlLeaksNothing) {
  CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  a.draw_min = 3;
  const std::set<int> letters = TokensOf(a.string);
  std::vector<int> window(static_cast<size_t>(kT + 1));
  for (size_t i = 0; i < window.size(); ++i)
    window[i] = 200 + static_cast<int>(i % 50);  // no letter
  Rng rng(11);
  for (int i = 0; i < 300; ++i) {
    Rng again = rng;
    const CopyRow r = MakeRandCopyRow(window, a, DefaultCopySpans(kT), kT, rng);
    const CopyRow c =
        MakeRandCopyRow(window, a, DefaultCopySpans(kT), kT, again, CopyRole::kControl);
    ASSERT_EQ(r.tokens.size(), window.size());
    ASSERT_GE(r.source, 1);
    ASSERT_GE(r.copy, r.source + r.span);
    ASSERT_LE(r.copy + r.span, kT + 1);
    for (int64_t t = 0; t <= kT; ++t) {
      const bool in_source = t >= r.source && t < r.source + r.span;
      const bool in_copy = t >= r.copy && t < r.copy + r.span;
      const int x = r.tokens[static_cast<size_t>(t)];
      if (in_source || in_copy) {
        EXPECT_TRUE(letters.contains(x));
      } else {
        EXPECT_EQ(x, window[static_cast<size_t>(t)]);
      }
      if (in_copy) {
        EXPECT_EQ(x, r.tokens[static_cast<size_t>(t - (r.copy - r.source))]);
      }
    }
    EXPECT_EQ(r.scored, AfterFirst(r.copy, r.span));
    // The control: same layout and source, a fresh string at the copy.
    ASSERT_EQ(c.source, r.source);
    ASSERT_EQ(c.copy, r.copy);
    ASSERT_EQ(c.span, r.span);
    EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.begin() + c.copy, r.tokens.begin()));
    const std::span<const int> all(c.tokens);
    for (int64_t k = 0; k + kControlSpan <= c.span; ++k) {
      const auto piece = all.subspan(static_cast<size_t>(c.copy + k), kControlSpan);
      for (int64_t b = 0; b + kControlSpan <= c.copy; ++b) {
        ASSERT_FALSE(std::equal(piece.begin(), piece.end(), all.begin() + b))
            << "the control's span repeats 4 tokens at " << b;
      }
    }
  }
  const CopyMix m = ParseCopyMix("randcopy=0.25,text=0.75", "--mix");
  EXPECT_EQ(m.randcopy, 0.25);
  EXPECT_TRUE(m.HasCopy());
  EXPECT_TRUE(m.NeedsAlphabets());
  EXPECT_EQ(RowKindOf(m, 0.1), RowKind::kRandCopy);
  EXPECT_EQ(RowKindOf(m, 0.3), RowKind::kText);
  EXPECT_EQ(CopyMixText(m), "randcopy=0.25");
}

// Textperiodic: BOS, then one piece of the window repeated to the row's end.
TEST(CopyRows, TextPeriodicRepeatsOnePieceOfTheWindow) {
  std::vector<int> window(static_cast<size_t>(kT + 1));
  for (size_t i = 0; i < window.size(); ++i) window[i] = static_cast<int>(i);  // all distinct
  Rng rng(12);
  for (int i = 0; i < 200; ++i) {
    const CopyRow r = MakeTextPeriodicRow(window, DefaultCopySpans(kT), Bos(), kT, rng);
    ASSERT_EQ(r.tokens.size(), window.size());
    EXPECT_EQ(r.tokens[0], Bos());
    const int start = r.tokens[1];
    ASSERT_GE(start, 1);
    ASSERT_LE(start + r.span, kT + 1);
    for (int64_t t = 1; t <= kT; ++t) {
      EXPECT_EQ(r.tokens[static_cast<size_t>(t)], start + (t - 1) % r.span);
    }
    EXPECT_EQ(r.copy, 1 + r.span);
    EXPECT_EQ(r.scored, AfterFirst(r.copy, r.span));
  }
  EXPECT_EQ(RowKindOf(ParseCopyMix("textperiodic=0.5", "--mix"), 0.2), RowKind::kTextPeriodic);
}

// The copy equals its source, the gap holds only gap tokens, the copy lies wholly inside the row,
// and the distances reach both ends of their range. The control has the same layout up to the
// copy, and its span shares no 4 tokens with anything before it.
TEST(CopyRows, GappedRowCopiesOverAGapAndItsControlLeaksNothing) {
  const CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  const std::set<int> letters = TokensOf(a.string), gaps = TokensOf(a.gap);
  Rng rng(2);
  int64_t shortest = kT, longest = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng again = rng;
    const CopyRow r = MakeGappedRow(a, DefaultCopySpans(kT), Bos(), kT, rng);
    const CopyRow c = MakeGappedRow(a, DefaultCopySpans(kT), Bos(), kT, again, CopyRole::kControl);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    ASSERT_EQ(c.tokens.size(), static_cast<size_t>(kT + 1));
    EXPECT_EQ(r.tokens[0], Bos());
    EXPECT_EQ(r.source, 1);
    ASSERT_LE(r.copy + r.span, kT + 1);
    const auto src = r.tokens.begin() + 1;
    EXPECT_TRUE(std::equal(src, src + r.span, r.tokens.begin() + r.copy));
    for (int64_t t = 1; t < 1 + r.span; ++t)
      EXPECT_TRUE(letters.contains(r.tokens[static_cast<size_t>(t)]));
    for (int64_t t = 1 + r.span; t < r.copy; ++t)
      EXPECT_TRUE(gaps.contains(r.tokens[static_cast<size_t>(t)]));
    EXPECT_EQ(r.scored, AfterFirst(r.copy, r.span));
    shortest = std::min(shortest, r.copy - r.source);
    longest = std::max(longest, r.copy - r.source);

    EXPECT_EQ(c.span, r.span);
    EXPECT_EQ(c.copy, r.copy);
    EXPECT_EQ(c.scored, r.scored);
    EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.begin() + r.copy, c.tokens.begin()));
    const std::vector<int> before(c.tokens.begin(), c.tokens.begin() + c.copy);
    const std::vector<int> fresh(c.tokens.begin() + c.copy, c.tokens.begin() + c.copy + c.span);
    for (const int t : fresh) EXPECT_TRUE(letters.contains(t));
    EXPECT_FALSE(SharesSpanOf(before, fresh, kControlSpan)) << "row " << i;
  }
  // Distances span [8, 120] (s + g with g in [0, T - 2s]).
  EXPECT_LE(shortest, 12);
  EXPECT_GE(longest, 110);
}

// A pasted text row r (textcopy, textfar) and its control c from the same Rng state: r is the
// window with its source span written again at r.copy, c the window with `other`'s first span
// tokens there instead; both score the same tokens, those after the copy's first.
void ExpectPastedCopyAndControl(const CopyRow& r, const CopyRow& c, const std::vector<int>& window,
                                const std::vector<int>& other) {
  for (int64_t t = 0; t <= kT; ++t) {
    const bool pasted = t >= r.copy && t < r.copy + r.span;
    EXPECT_EQ(r.tokens[static_cast<size_t>(t)],
              window[static_cast<size_t>(pasted ? r.source + t - r.copy : t)]);
    EXPECT_EQ(c.tokens[static_cast<size_t>(t)],
              pasted ? other[static_cast<size_t>(t - r.copy)] : window[static_cast<size_t>(t)]);
  }
  EXPECT_EQ(c.scored, r.scored);
  EXPECT_EQ(r.scored, AfterFirst(r.copy, r.span));
}

TEST(CopyRows, TextCopyPastesASpanOfTheWindowLaterInIt) {
  Rng text_rng(3);
  std::vector<int> window(kT + 1), other(kT + 1);
  for (int& t : window) t = 'a' + static_cast<int>(text_rng.NextU64() % 26);
  for (int& t : other) t = 'A' + static_cast<int>(text_rng.NextU64() % 26);
  Rng rng(4);
  int64_t shortest = kT, longest = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng again = rng;
    const CopyRow r = MakeTextCopyRow(window, DefaultCopySpans(kT), kT, rng);
    const CopyRow c =
        MakeTextCopyRow(window, DefaultCopySpans(kT), kT, again, CopyRole::kControl, other);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    ASSERT_GE(r.source, 1);
    ASSERT_GE(r.copy, r.source + r.span);  // no overlap with its source
    ASSERT_LE(r.copy + r.span, kT + 1);    // wholly inside the row
    ExpectPastedCopyAndControl(r, c, window, other);
    shortest = std::min(shortest, r.copy - r.source);
    longest = std::max(longest, r.copy - r.source);
  }
  EXPECT_LE(shortest, 12);
  EXPECT_GE(longest, 110);
}

// A textfar row is a textcopy row whose distance lies in the far half of those the row can hold:
// d in [ceil(T / 2), T - s], both ends of that range drawn, the source and copy inside the row.
TEST(CopyRows, TextFarPastesTheSpanFromTheFarHalfOfTheDistances) {
  Rng text_rng(13);
  std::vector<int> window(kT + 1), other(kT + 1);
  for (int& t : window) t = 'a' + static_cast<int>(text_rng.NextU64() % 26);
  for (int& t : other) t = 'A' + static_cast<int>(text_rng.NextU64() % 26);
  Rng rng(14);
  int64_t shortest = kT, longest = 0, from_start = 0, later = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng again = rng;
    const CopyRow r = MakeTextFarRow(window, DefaultCopySpans(kT), kT, rng);
    const CopyRow c =
        MakeTextFarRow(window, DefaultCopySpans(kT), kT, again, CopyRole::kControl, other);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    ASSERT_GE(r.source, 1);
    const int64_t d = r.copy - r.source;
    ASSERT_GE(2 * d, kT);                // the far half: d >= ceil(T / 2)
    ASSERT_LE(d, kT - r.span);           // the farthest a row holds
    ASSERT_LE(r.copy + r.span, kT + 1);  // wholly inside the row
    ExpectPastedCopyAndControl(r, c, window, other);
    shortest = std::min(shortest, d);
    longest = std::max(longest, d);
    (r.source == 1 ? from_start : later) += 1;
  }
  EXPECT_LE(shortest, kT / 2 + 2);
  EXPECT_EQ(longest, kT - DefaultCopySpans(kT).min);
  // The distance is drawn first: the farthest ones (source at 1) are not the only ones, and the
  // source is not always at the row's start.
  EXPECT_GT(later, 1000);
  EXPECT_GT(from_start, 20);
}

// A textedge row is a textfar row whose distance reaches T - 2, its copy cut at the row's end: d
// in [ceil(T / 2), T - 2], both ends drawn; the copy keeps at least 2 tokens (1 scored), its span
// the tokens that fit, and distances past T - s (which textfar never draws) come often.
TEST(CopyRows, TextEdgePastesTheSpanUpToTheRowsEndCutThere) {
  Rng text_rng(23);
  std::vector<int> window(kT + 1), other(kT + 1);
  for (int& t : window) t = 'a' + static_cast<int>(text_rng.NextU64() % 26);
  for (int& t : other) t = 'A' + static_cast<int>(text_rng.NextU64() % 26);
  Rng rng(24);
  int64_t shortest = kT, longest = 0, cut = 0, beyond_textfar = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng again = rng;
    const CopyRow r = MakeTextEdgeRow(window, DefaultCopySpans(kT), kT, rng);
    const CopyRow c =
        MakeTextEdgeRow(window, DefaultCopySpans(kT), kT, again, CopyRole::kControl, other);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    ASSERT_GE(r.source, 1);
    const int64_t d = r.copy - r.source;
    ASSERT_GE(2 * d, kT);
    ASSERT_LE(d, kT - 2);
    ASSERT_GE(r.span, 2);
    ASSERT_LE(r.span, DefaultCopySpans(kT).max);
    ASSERT_LE(r.copy + r.span, kT + 1);  // cut at the row's end
    ASSERT_LE(r.source + r.span, r.copy);
    ExpectPastedCopyAndControl(r, c, window, other);
    shortest = std::min(shortest, d);
    longest = std::max(longest, d);
    cut += r.copy + r.span == kT + 1 && r.span < DefaultCopySpans(kT).min;
    beyond_textfar += d > kT - DefaultCopySpans(kT).min;
  }
  EXPECT_LE(shortest, kT / 2 + 2);
  EXPECT_EQ(longest, kT - 2);
  EXPECT_GT(cut, 100);
  EXPECT_GT(beyond_textfar, 100);
}

// A textdecoy row is the textcopy row of the same Rng state with decoys written outside its
// source and copy: each a piece of the source (2..4 tokens) whose next token differs from the
// source's, so that no decoy leaks the token a copy needs after the piece it matches.
TEST(CopyRows, TextDecoyWritesPiecesOfTheSourceThatGoOnOtherwise) {
  Rng text_rng(5);
  std::vector<int> window(kT + 1);
  for (int& t : window) t = 'a' + static_cast<int>(text_rng.NextU64() % 6);  // many repeats
  Rng rng(6);
  int64_t decoys = 0, rows_with_none = 0;
  std::set<int64_t> lengths;
  for (int i = 0; i < 2000; ++i) {
    Rng again = rng;
    const CopyRow r = MakeTextDecoyRow(window, DefaultCopySpans(kT), kT, rng);
    const CopyRow plain = MakeTextCopyRow(window, DefaultCopySpans(kT), kT, again);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kT + 1));
    EXPECT_EQ(r.source, plain.source);
    EXPECT_EQ(r.copy, plain.copy);
    EXPECT_EQ(r.span, plain.span);
    EXPECT_EQ(r.scored, plain.scored);
    // The copy is intact, and every token outside the decoys is the textcopy row's.
    for (int64_t t = 0; t < r.span; ++t) {
      ASSERT_EQ(r.tokens[static_cast<size_t>(r.copy + t)],
                r.tokens[static_cast<size_t>(r.source + t)]);
    }
    std::vector<char> in_decoy(static_cast<size_t>(kT + 1), 0);
    int64_t last_end = 0;
    for (const CopyDecoy& d : r.decoys) {
      ASSERT_GE(d.length, kMinDecoyLength);
      ASSERT_LE(d.length, kMaxDecoyLength);
      ASSERT_GE(d.at, std::max<int64_t>(1, last_end));  // sorted, apart, after BOS
      ASSERT_LE(d.at + d.length, kT);                   // its next token lies in the row
      ASSERT_GE(d.offset, 0);
      ASSERT_LT(d.offset + d.length, r.span);
      for (int64_t t = 0; t <= d.length; ++t) {  // the decoy and its next token
        const int64_t p = d.at + t;
        EXPECT_FALSE(p >= r.source && p < r.source + r.span) << "row " << i;
        EXPECT_FALSE(p >= r.copy && p < r.copy + r.span) << "row " << i;
      }
      for (int64_t t = 0; t < d.length; ++t) {
        EXPECT_EQ(r.tokens[static_cast<size_t>(d.at + t)],
                  r.tokens[static_cast<size_t>(r.source + d.offset + t)]);
        in_decoy[static_cast<size_t>(d.at + t)] = 1;
      }
      EXPECT_NE(r.tokens[static_cast<size_t>(d.at + d.length)],
                r.tokens[static_cast<size_t>(r.source + d.offset + d.length)])
          << "row " << i << ": the decoy goes on as the source does";
      last_end = d.at + d.length + 1;
      lengths.insert(d.length);
    }
    for (int64_t t = 0; t <= kT; ++t) {
      if (!in_decoy[static_cast<size_t>(t)]) {
        EXPECT_EQ(r.tokens[static_cast<size_t>(t)], plain.tokens[static_cast<size_t>(t)]);
      }
    }
    EXPECT_LE(static_cast<int64_t>(r.decoys.size()), kMaxDecoys);
    decoys += static_cast<int64_t>(r.decoys.size());
    rows_with_none += r.decoys.empty() ? 1 : 0;
  }
  // 2..6 decoys drawn a row (mean 4); a few find no place in a crowded row.
  EXPECT_GT(decoys, 2000 * 3);
  EXPECT_LT(rows_with_none, 20);
  EXPECT_EQ(lengths, (std::set<int64_t>{2, 3, 4}));
}

TEST(CopyRows, TheSameSeedGivesTheSameRowsAndAnotherSeedOthers) {
  const CopyAlphabets a = EncodeCopyAlphabets(BytesEncoder());
  const auto rows = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int> all;
    for (int i = 0; i < 20; ++i) {
      const CopyRow p = MakePeriodicRow(a, DefaultCopySpans(kT), Bos(), kT, rng);
      const CopyRow g = MakeGappedRow(a, DefaultCopySpans(kT), Bos(), kT, rng, CopyRole::kControl);
      all.insert(all.end(), p.tokens.begin(), p.tokens.end());
      all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    }
    return all;
  };
  EXPECT_EQ(rows(7), rows(7));
  EXPECT_NE(rows(7), rows(8));
}

TEST(CopyMixTest, ParsesSharesAndRefusesBadOnesNamingTheFlag) {
  const CopyMix m = ParseCopyMix("text=0.5,textcopy=0.3,gapped=0.1,passkey=0.1", "--mix");
  EXPECT_DOUBLE_EQ(m.textcopy, 0.3);
  EXPECT_DOUBLE_EQ(m.gapped, 0.1);
  EXPECT_DOUBLE_EQ(m.passkey, 0.1);
  EXPECT_DOUBLE_EQ(m.periodic, 0.0);
  EXPECT_NEAR(m.text(), 0.5, 1e-12);
  EXPECT_EQ(CopyMixText(m), "gapped=0.1,textcopy=0.3");
  EXPECT_EQ(ParseCopyMix(CopyMixText(m), "x").gapped, m.gapped);
  EXPECT_EQ(ParseCopyMix("periodic=1", "--mix").periodic, 1.0);
  EXPECT_FALSE(ParseCopyMix("", "--mix").HasCopy());
  const auto error = [](const char* text) {
    return testing::ErrorOf([&] { ParseCopyMix(text, "--mix"); });
  };
  EXPECT_EQ(error("gapped=1.5"),
            "--mix gapped=1.5: entry \"gapped=1.5\": the share \"1.5\": expected a number in "
            "[0, 1]");
  EXPECT_NE(error("copy=0.1")
                .find("unknown kind \"copy\": expected text, passkey, periodic, "
                      "gapped, textcopy, randcopy, textperiodic, textdecoy, textfar or textedge"),
            std::string::npos);
  EXPECT_NE(error("gapped=0.6,textcopy=0.6").find("the shares add up to 1.2, expected at most 1"),
            std::string::npos);
  EXPECT_NE(error("text=0.5,gapped=0.1").find("the shares add up to 0.6, expected 1"),
            std::string::npos);
  EXPECT_NE(error("gapped=0.1,gapped=0.2").find("gapped given twice"), std::string::npos);
  EXPECT_NE(error("gapped").find("expected NAME=SHARE"), std::string::npos);
  EXPECT_NE(error("gapped=0.1,").find("expected NAME=SHARE"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The mix in the training batches

class CopyBatches : public ::testing::Test {
 protected:
  static constexpr int64_t kRowT = 64;  // passkey documents fit (61 with bytes)
  void SetUp() override {
    const TrainingTokenizer bytes = TrainingTokenizer::Bytes();
    // Ten documents of random lowercase letters and spaces: a window of them is found in its
    // document, a row that was changed (textcopy) almost surely nowhere.
    Rng rng(9);
    for (int d = 0; d < 10; ++d) {
      std::string text;
      for (int c = 0; c < 400; ++c) {
        const uint64_t r = rng.NextU64() % 27;
        text += r == 26 ? ' ' : static_cast<char>('a' + r);
      }
      docs_.Add(bytes.bos_id(), bytes.Encode(text));
    }
    SplitOptions s;
    s.valid_documents = 2;
    split_ = SplitDocuments(docs_, s);
    sampler_ = std::make_unique<WindowSampler>(split_.train, kRowT);
    data_ = TrainingData{&split_, sampler_.get(), {}};
    data_.passkey = EncodePasskeyPieces(BytesEncoder());
    data_.bos = bytes.bos_id();
    data_.alphabets = EncodeCopyAlphabets(BytesEncoder());
    data_.spans = DefaultCopySpans(kRowT);
    question_ = bytes.Encode(" What is the key? The key is ");
  }
  RowKind KindOf(const std::vector<int>& row) const {
    if (std::equal(question_.begin(), question_.end(), row.end() - 5 - 29))
      return RowKind::kPasskey;
    const std::set<int> gaps = TokensOf(data_.alphabets.gap);
    if (std::any_of(row.begin(), row.end(), [&](int t) { return gaps.contains(t); })) {
      return RowKind::kGapped;
    }
    const std::span<const int32_t> all = split_.train.tokens();
    if (std::search(all.begin(), all.end(), row.begin(), row.end()) != all.end()) {
      return RowKind::kText;
    }
    if (row[0] == data_.bos) return RowKind::kPeriodic;
    return RowKind::kTextCopy;
  }
  TokenDocuments docs_;
  DataSplit split_;
  std::unique_ptr<WindowSampler> sampler_;
  TrainingData data_;
  std::vector<int> question_;
};

// 4000 rows with shares 0.1 / 0.2 / 0.2 / 0.2 / 0.3: each count is binomial, standard deviation
// sqrt(4000 p (1 - p)) <= 29; a bound of 5 deviations (+-145) fails with probability below 1e-6
// for a seed drawn at random (the seed is fixed, so the test is deterministic). A periodic row is
// one that starts with BOS and is found in no document; a gapped row whose every gap is empty
// would count as periodic (probability below 1 / 25^2 per row at T = 64: negligible here).
TEST_F(CopyBatches, TheMixsProportionsHoldWithinABinomialTolerance) {
  data_.passkey_share = 0.1;
  data_.copy_mix = CopyMix{0.0, 0.2, 0.2, 0.2};
  Rng rng(11);
  std::vector<int> tokens;
  std::map<RowKind, int64_t> count;
  for (int batch = 0; batch < 500; ++batch) {
    SampleTrainingBatch(data_, rng, 8, tokens);
    ASSERT_EQ(tokens.size(), static_cast<size_t>(8 * (kRowT + 1)));
    for (int64_t s = 0; s < 8; ++s) {
      const std::vector<int> row(tokens.begin() + s * (kRowT + 1),
                                 tokens.begin() + (s + 1) * (kRowT + 1));
      ++count[KindOf(row)];
    }
  }
  EXPECT_NEAR(count[RowKind::kPasskey], 400, 145);
  EXPECT_NEAR(count[RowKind::kPeriodic], 800, 145);
  EXPECT_NEAR(count[RowKind::kGapped], 800, 145);
  EXPECT_NEAR(count[RowKind::kTextCopy], 800, 145);
  EXPECT_NEAR(count[RowKind::kText], 1200, 145);

  // The same Rng state, the same batches.
  Rng x(5), y(5);
  std::vector<int> tx, ty;
  for (int batch = 0; batch < 10; ++batch) {
    SampleTrainingBatch(data_, x, 8, tx);
    SampleTrainingBatch(data_, y, 8, ty);
    EXPECT_EQ(tx, ty);
  }
}

// Passkey rows in varied phrasings (TrainRunOptions::passkey_phrasings): every row ends with one
// of the six questions and its key, and each phrasing is drawn: 600 rows, 100 expected of each,
// standard deviation 9.1; at least 50 fails with probability below 1e-7. Without variants every
// row is in stretch's own phrasing.
TEST_F(CopyBatches, PasskeyRowsInVariedPhrasingsDrawEachOfThem) {
  constexpr int64_t kT = 128;  // the longest phrasing needs 106 byte tokens
  const WindowSampler sampler(split_.train, kT);
  TrainingData data = data_;
  data.sampler = &sampler;
  data.passkey_share = 1.0;
  const std::vector<PasskeyFormat> formats = VariedPasskeyFormats();
  for (const bool varied : {false, true}) {
    data.passkey_variants.clear();
    if (varied) {
      for (const PasskeyFormat& f : formats) {
        data.passkey_variants.push_back(EncodePasskeyPieces(BytesEncoder(), f));
      }
    }
    std::vector<int64_t> count(formats.size(), 0);
    Rng rng(17);
    std::vector<int> tokens;
    for (int batch = 0; batch < 75; ++batch) {
      SampleTrainingBatch(data, rng, 8, tokens);
      for (int64_t s = 0; s < 8; ++s) {
        const auto row_end = tokens.begin() + (s + 1) * (kT + 1);
        int64_t found = -1;
        for (size_t k = 0; k < formats.size(); ++k) {
          const std::vector<int> q = TrainingTokenizer::Bytes().Encode(formats[k].question);
          if (std::equal(q.begin(), q.end(), row_end - 5 - static_cast<int64_t>(q.size()))) {
            found = static_cast<int64_t>(k);
          }
        }
        ASSERT_GE(found, 0) << "row " << s << " of batch " << batch;
        ++count[static_cast<size_t>(found)];
      }
    }
    for (size_t k = 0; k < formats.size(); ++k) {
      if (varied) {
        EXPECT_GE(count[k], 50) << formats[k].question;
      } else {
        EXPECT_EQ(count[k], k == 0 ? 600 : 0) << formats[k].question;
      }
    }
  }
}

// Passkey rows with repeated filler (TrainRunOptions::passkey_filler "mixed"): about half of them
// hold a block of 16..96 tokens (3T/8 at T = 256) repeated. A row counts as repeated when some
// shift b in [16, 96] matches 16 tokens in a row (letters drawn from 27: by chance below 1e-22);
// with a block above 85 tokens neither side of the needle may hold 16 matches, so at least about
// 0.5 x 70/81 = 43% of the rows are found (more where a shift matches across the needle): 400 rows, standard deviation 2.5 points; the bounds 30-56% are
// five deviations. Without the option no row is found.
TEST_F(CopyBatches, PasskeyRowsWithMixedFillerRepeatABlockInAboutHalf) {
  constexpr int64_t kT = 256;
  const WindowSampler sampler(split_.train, kT);
  TrainingData data = data_;
  data.sampler = &sampler;
  data.passkey_share = 1.0;
  for (const bool mixed : {false, true}) {
    data.passkey_repeated_filler = mixed;
    Rng rng(23);
    std::vector<int> tokens;
    int64_t found = 0;
    for (int batch = 0; batch < 50; ++batch) {
      SampleTrainingBatch(data, rng, 8, tokens);
      for (int64_t s = 0; s < 8; ++s) {
        const int* row = tokens.data() + s * (kT + 1);
        bool repeated = false;
        for (int64_t b = 16; b <= 96 && !repeated; ++b) {
          int64_t run = 0;
          for (int64_t i = 1; i + b < kT - 34 && !repeated; ++i) {
            run = row[i] == row[i + b] ? run + 1 : 0;
            repeated = run >= 16;
          }
        }
        found += repeated ? 1 : 0;
      }
    }
    if (mixed) {
      EXPECT_GE(found, 120);
      EXPECT_LE(found, 224);
    } else {
      EXPECT_EQ(found, 0);
    }
  }
}

// Passkey rows with decoys (TrainRunOptions::passkey_decoys): every row at T = 128 holds one
// " The NOUN is DIGITS. " besides its needle, and its answer is still the needle's key; without
// the option no row holds one.
TEST_F(CopyBatches, PasskeyRowsWithDecoysHoldOneAndAnswerTheNeedlesKey) {
  constexpr int64_t kT = 128;
  const WindowSampler sampler(split_.train, kT);
  TrainingData data = data_;
  data.sampler = &sampler;
  data.passkey_share = 1.0;
  data.decoys = EncodePasskeyDecoys(BytesEncoder());
  const std::vector<int> needle = TrainingTokenizer::Bytes().Encode(" The key is ");
  for (const int decoys : {0, 1}) {
    data.passkey_decoys = decoys;
    Rng rng(5);
    std::vector<int> tokens;
    for (int batch = 0; batch < 10; ++batch) {
      SampleTrainingBatch(data, rng, 8, tokens);
      for (int64_t s = 0; s < 8; ++s) {
        const std::vector<int> row(tokens.begin() + s * (kT + 1),
                                   tokens.begin() + (s + 1) * (kT + 1));
        int found = 0;
        for (const std::vector<int>& words : data.decoys.before) {
          for (auto at = row.begin();
               (at = std::search(at, row.end(), words.begin(), words.end())) != row.end(); ++at) {
            ++found;
          }
        }
        EXPECT_EQ(found, decoys) << "row " << s << " of batch " << batch;
        const auto n = std::search(row.begin(), row.end(), needle.begin(), needle.end());
        ASSERT_NE(n, row.end());
        EXPECT_TRUE(std::equal(row.end() - 5, row.end(), n + 12)) << "the answer is the key";
      }
    }
  }
}

// With bos_rows every row begins with BOS, and is otherwise the row drawn without it: the same
// draws, the same kinds, the same tokens after position 0. Also for a run without copy rows.
TEST_F(CopyBatches, BosRowsBeginEveryRowWithBosAndChangeNothingElse) {
  for (const bool copies : {true, false}) {
    data_.passkey_share = copies ? 0.1 : 0.0;
    data_.copy_mix = copies ? CopyMix{0.0, 0.2, 0.2, 0.2} : CopyMix{};
    TrainingData with = data_;
    with.bos_rows = true;
    Rng x(7), y(7);
    std::vector<int> plain, bos;
    int64_t text_rows = 0;
    for (int batch = 0; batch < 50; ++batch) {
      SampleTrainingBatch(data_, x, 8, plain);
      SampleTrainingBatch(with, y, 8, bos);
      ASSERT_EQ(plain.size(), bos.size());
      for (int64_t s = 0; s < 8; ++s) {
        const size_t at = static_cast<size_t>(s * (kRowT + 1));
        EXPECT_EQ(bos[at], data_.bos);
        text_rows += plain[at] != data_.bos;
        EXPECT_TRUE(std::equal(plain.begin() + static_cast<ptrdiff_t>(at) + 1,
                               plain.begin() + static_cast<ptrdiff_t>(at) + kRowT + 1,
                               bos.begin() + static_cast<ptrdiff_t>(at) + 1));
      }
    }
    EXPECT_GT(text_rows, 100) << "the rows without BOS of their own, which bos_rows changes";
  }
}

TEST(CopyMixTest, RowKindOfFollowsTheCumulativeShares) {
  const CopyMix m{0.1, 0.2, 0.3, 0.15};
  EXPECT_EQ(RowKindOf(m, 0.0), RowKind::kPasskey);
  EXPECT_EQ(RowKindOf(m, 0.099), RowKind::kPasskey);
  EXPECT_EQ(RowKindOf(m, 0.1), RowKind::kPeriodic);
  EXPECT_EQ(RowKindOf(m, 0.35), RowKind::kGapped);
  EXPECT_EQ(RowKindOf(m, 0.65), RowKind::kTextCopy);
  EXPECT_EQ(RowKindOf(m, 0.8), RowKind::kText);
  EXPECT_EQ(RowKindOf(CopyMix{}, 0.0), RowKind::kText);
  // textdecoy comes last: a mix without it draws the kinds it drew before the kind existed.
  const CopyMix d = ParseCopyMix("passkey=0.1,textperiodic=0.2,textdecoy=0.3", "--mix");
  EXPECT_EQ(RowKindOf(d, 0.05), RowKind::kPasskey);
  EXPECT_EQ(RowKindOf(d, 0.25), RowKind::kTextPeriodic);
  EXPECT_EQ(RowKindOf(d, 0.35), RowKind::kTextDecoy);
  EXPECT_EQ(RowKindOf(d, 0.65), RowKind::kText);
  EXPECT_DOUBLE_EQ(d.text(), 0.4);
  EXPECT_TRUE(ParseCopyMix("textdecoy=0.1", "--mix").HasCopy());
  EXPECT_FALSE(ParseCopyMix("passkey=0.5", "--mix").HasCopy());
  EXPECT_EQ(CopyMixText(d), "textperiodic=0.2,textdecoy=0.3");
  EXPECT_EQ(ParseCopyMix(CopyMixText(d), "--mix").textdecoy, 0.3);
  // textfar after it.
  const CopyMix f = ParseCopyMix("textdecoy=0.3,textfar=0.2", "--mix");
  EXPECT_EQ(RowKindOf(f, 0.29), RowKind::kTextDecoy);
  EXPECT_EQ(RowKindOf(f, 0.31), RowKind::kTextFar);
  EXPECT_EQ(RowKindOf(f, 0.51), RowKind::kText);
  EXPECT_EQ(CopyMixText(f), "textdecoy=0.3,textfar=0.2");
  // textedge after textfar.
  const CopyMix e = ParseCopyMix("textfar=0.2,textedge=0.1", "--mix");
  EXPECT_EQ(RowKindOf(e, 0.19), RowKind::kTextFar);
  EXPECT_EQ(RowKindOf(e, 0.21), RowKind::kTextEdge);
  EXPECT_EQ(RowKindOf(e, 0.31), RowKind::kText);
  EXPECT_EQ(CopyMixText(e), "textfar=0.2,textedge=0.1");
}

// ---------------------------------------------------------------------------------------------
// The readout

// An induction oracle: at each position, the token that followed the longest earlier occurrence
// of the text ending there (0 when none). It copies whatever can be copied and nothing else.
std::vector<int> InductionOracle(const std::vector<int>& tokens, int64_t B, int64_t T) {
  std::vector<int> out(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int* row = tokens.data() + b * (T + 1);
    for (int64_t p = 0; p < T; ++p) {
      int64_t best = 0;
      for (int64_t q = 0; q < p; ++q) {
        int64_t len = 0;
        while (len <= q && row[q - len] == row[p - len]) ++len;
        if (len > best) {
          best = len;
          out[static_cast<size_t>(b * T + p)] = row[q + 1];
        }
      }
    }
  }
  return out;
}

class CopyReadoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Held-out "text": random lowercase letters and spaces, so that nothing but a pasted span
    // repeats (a textcopy control is unpredictable to a copier) and the probe's passkey needle
    // (" The key is ") occurs nowhere in the filler.
    Rng rng(5);
    for (int w = 0; w < 8; ++w) {
      std::vector<int> t(kT + 1);
      for (int& c : t) {
        const uint64_t r = rng.NextU64() % 27;
        c = r == 26 ? ' ' : static_cast<int>('a' + r);
      }
      windows_.push_back(t);
    }
    pieces_ = EncodePasskeyPieces(BytesEncoder());
    probe_ = MakeCopyProbe(EncodeCopyAlphabets(BytesEncoder()), DefaultCopySpans(kT), Bos(), kT, 32,
                           windows_, &pieces_, 99);
  }
  std::vector<std::vector<int>> windows_;
  PasskeyPieces pieces_;
  CopyProbe probe_;
};

TEST_F(CopyReadoutTest, AnInductionOracleCopiesAndItsControlsGetNothing) {
  ASSERT_EQ(probe_.gapped.rows(), 32);
  ASSERT_EQ(probe_.textcopy.rows(), 32);
  ASSERT_EQ(probe_.passkey.rows(), 32);
  const CopyReadout r = ReadCopy(probe_, [](const std::vector<int>& tokens, int64_t B) {
    return InductionOracle(tokens, B, kT);
  });
  EXPECT_GE(r.copy.n, 32 * 7);  // at least s - 1 = 7 tokens a row
  EXPECT_GT(r.copy.value(), 0.95);
  // Nothing before a control's span holds any 4 of its tokens, so a copier can hit only where its
  // longest match is shorter than that and lands by chance.
  EXPECT_LT(r.copy_control.value(), 0.1);
  EXPECT_GT(r.textcopy.value(), 0.9);
  EXPECT_GT(r.textcopy.value(), r.textcopy_control.value() + 0.3);
  EXPECT_EQ(r.passkey_keys.n, 32);
  EXPECT_EQ(r.passkey_keys.hits, 32);
  EXPECT_EQ(r.passkey_digits.hits, 32 * 5);
}

// A predictor that knows every answer scores 1 everywhere, one that knows none 0: the readout
// reads the predictions at exactly the positions it says it scores.
TEST_F(CopyReadoutTest, TruthScoresOneAndNothingScoresZero) {
  const auto truth = [](const std::vector<int>& tokens, int64_t B) {
    std::vector<int> out;
    for (int64_t b = 0; b < B; ++b) {
      out.insert(out.end(), tokens.begin() + b * (kT + 1) + 1, tokens.begin() + (b + 1) * (kT + 1));
    }
    return out;
  };
  const CopyReadout r = ReadCopy(probe_, truth);
  for (const Proportion& p :
       {r.copy, r.copy_control, r.textcopy, r.textcopy_control, r.passkey_digits, r.passkey_keys}) {
    EXPECT_GT(p.n, 0);
    EXPECT_EQ(p.hits, p.n);
  }
  const CopyReadout z = ReadCopy(probe_, [](const std::vector<int>&, int64_t B) {
    return std::vector<int>(static_cast<size_t>(B * kT), -1);
  });
  for (const Proportion& p : {z.copy, z.copy_control, z.textcopy, z.textcopy_control}) {
    EXPECT_EQ(p.hits, 0);
  }
  // The probe's rows are its own stream's: the same seed, the same rows.
  const CopyProbe again = MakeCopyProbe(EncodeCopyAlphabets(BytesEncoder()), DefaultCopySpans(kT),
                                        Bos(), kT, 32, windows_, &pieces_, 99);
  EXPECT_EQ(again.gapped.tokens, probe_.gapped.tokens);
  EXPECT_EQ(again.textcopy_control.tokens, probe_.textcopy_control.tokens);
  EXPECT_EQ(again.passkey.tokens, probe_.passkey.tokens);
}

// Wilson's 95% interval (z = 1.96), against values computed by hand from its formula.
TEST(ProportionTest, WilsonIntervalCoversKnownProportions) {
  const Proportion half{50, 100, {}, {}};
  EXPECT_NEAR(half.low(), 0.4038, 1e-4);
  EXPECT_NEAR(half.high(), 0.5962, 1e-4);
  const Proportion none{0, 10, {}, {}};
  EXPECT_EQ(none.low(), 0.0);
  EXPECT_NEAR(none.high(), 0.2775, 1e-4);
  const Proportion all{10, 10, {}, {}};
  EXPECT_NEAR(all.low(), 0.7225, 1e-4);
  EXPECT_EQ(all.high(), 1.0);
}

// Hits counted in rows: rows that are all right or all wrong count as about one trial each; rows
// with no spread between them count every token.
TEST(ProportionTest, CorrelatedRowsCountAsFewerTrials) {
  Proportion clustered;
  for (int i = 0; i < 10; ++i) clustered.AddRow(i % 2 == 0 ? 10 : 0, 10);
  EXPECT_EQ(clustered.n, 100);
  EXPECT_EQ(clustered.hits, 50);
  // m / (m - 1) sum (h_i - p n_i)^2 / n^2 = 10/9 * 250 / 10^4, over 0.25 / 100: n / 11.1 = 9.
  EXPECT_NEAR(clustered.EffectiveN(), 9.0, 1e-9);
  EXPECT_LT(clustered.low(), 0.25) << "as wide as 9 trials, not 100 (0.40)";
  Proportion even;
  for (int i = 0; i < 10; ++i) even.AddRow(5, 10);
  EXPECT_DOUBLE_EQ(even.EffectiveN(), 100.0);
  EXPECT_NEAR(even.low(), 0.4038, 1e-4);
  Proportion perfect;
  for (int i = 0; i < 10; ++i) perfect.AddRow(10, 10);
  EXPECT_DOUBLE_EQ(perfect.EffectiveN(), 100.0) << "no spread to estimate: the binomial's";
}

// A readout whose rows each copy or fail as a whole (each row right with probability 0.6, then
// each token right with 0.9 or 0.1): the interval at EffectiveN covers the true share, 0.58,
// about 95% of the time; the one that treats tokens as independent does not.
TEST(ProportionTest, TheIntervalOfCorrelatedRowsCoversTheTrueShare) {
  Rng rng(17);
  const double truth = 0.6 * 0.9 + 0.4 * 0.1;
  int covered = 0, covered_naive = 0;
  const int runs = 2000;
  for (int run = 0; run < runs; ++run) {
    Proportion p;
    for (int row = 0; row < 32; ++row) {
      const double q = rng.UniformDouble() < 0.6 ? 0.9 : 0.1;
      int64_t h = 0;
      for (int t = 0; t < 12; ++t) h += rng.UniformDouble() < q ? 1 : 0;
      p.AddRow(h, 12);
    }
    covered += p.low() <= truth && truth <= p.high() ? 1 : 0;
    const Proportion naive{p.hits, p.n, {}, {}};
    covered_naive += naive.low() <= truth && truth <= naive.high() ? 1 : 0;
  }
  // 2,000 runs: a coverage of 0.95 reads 0.94-0.96 (2 binomial standard errors, 0.005 each).
  EXPECT_GT(covered, runs * 0.92) << covered;
  EXPECT_LT(covered_naive, runs * 0.80) << covered_naive;
}

// The readout's line: each kind that has rows against its control, passkeys whole (digits); the
// gapped copies always, kinds without rows left out.
TEST(CopyReadoutText, NamesEveryKindWithRowsAndLeavesTheOthersOut) {
  CopyReadout r;
  r.copy = Proportion{99, 100, {}, {}};
  r.copy_control = Proportion{2, 100, {}, {}};
  EXPECT_EQ(CopyReadoutText(r), "copy 0.990/0.020");
  r.randcopy = Proportion{3, 4, {}, {}};
  r.randcopy_control = Proportion{1, 4, {}, {}};
  r.passkey_keys = Proportion{1, 2, {}, {}};
  r.passkey_digits = Proportion{9, 10, {}, {}};
  EXPECT_EQ(CopyReadoutText(r), "copy 0.990/0.020 randcopy 0.750/0.250 passkey 0.500 (0.900)");
  r.textcopy = Proportion{1, 5, {}, {}};
  r.textcopy_control = Proportion{0, 5, {}, {}};
  EXPECT_NE(CopyReadoutText(r).find(" textcopy 0.200/0.000 randcopy"), std::string::npos);
}

}  // namespace
}  // namespace stretch
