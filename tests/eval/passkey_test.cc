// The passkey protocol (src/io/passkey.h builds the documents, src/eval/passkey.h scores them):
// documents of exactly BOS + ctx tokens with the needle at its depth and the key at the end; key
// positions that point at the answer; scorers constructed to be right exactly where the answer
// is (or not) score what they must; the same seed gives the same trials; bad arguments are
// refused by name. Every case uses the bytes tokenizer, one token per character.
#include "src/eval/passkey.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

const TrainingTokenizer& Bytes() {
  static const TrainingTokenizer t = TrainingTokenizer::Bytes();
  return t;
}
const TextEncoder kEncode = [](std::string_view text) { return Bytes().Encode(text); };
constexpr int kBos = TrainingTokenizer::kByteBos;

// Filler text of lowercase letters and spaces only, so the needle (capitals, digits, '.') and the
// question ('?') can be told apart from it.
std::vector<int> Letters(int64_t n, int seed) {
  std::vector<int> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(i % 7 == 6 ? ' ' : 'a' + static_cast<int>((i * 5 + seed) % 26));
  }
  return out;
}

std::vector<int> Tokens(std::string_view text) { return kEncode(text); }

bool HasAt(const std::vector<int>& s, int64_t at, const std::vector<int>& piece) {
  if (at < 0 || at + static_cast<int64_t>(piece.size()) > static_cast<int64_t>(s.size())) {
    return false;
  }
  return std::equal(piece.begin(), piece.end(), s.begin() + at);
}

class Passkey : public ::testing::Test {
 protected:
  Passkey() : doc_a_(Letters(3000, 0)), doc_b_(Letters(2000, 3)), docs_{doc_a_, doc_b_} {}
  std::vector<int> doc_a_, doc_b_;
  TokenSpans docs_;
};

// With the default format: needle " The key is KEY. " and question " What is the key? The key
// is " take 12 + 2 + 29 = 43 tokens, the key 5 twice: F = ctx - 53 filler tokens.
TEST_F(Passkey, TrialsAreBosNeedleAtDepthQuestionAndKey) {
  const std::vector<int> before = Tokens(" The key is "), after = Tokens(". ");
  const std::vector<int> question = Tokens(" What is the key? The key is ");
  for (const int64_t ctx : {61, 100, 128}) {
    for (const double depth : {0.0, 0.25, 0.5, 0.9, 1.0}) {
      const std::vector<PasskeyTrial> trials =
          MakePasskeyTrials(docs_, kEncode, kBos, ctx, depth, 6, /*seed=*/7);
      ASSERT_EQ(trials.size(), 6u);
      const int64_t F = ctx - 53;
      for (const PasskeyTrial& t : trials) {
        SCOPED_TRACE(::testing::Message()
                     << "ctx " << ctx << " depth " << depth << " key " << t.key);
        const std::vector<int>& s = t.tokens;
        ASSERT_EQ(static_cast<int64_t>(s.size()), ctx + 1);
        EXPECT_EQ(s[0], kBos);
        EXPECT_EQ(std::count(s.begin(), s.end(), kBos), 1);
        EXPECT_EQ(t.depth, depth);
        ASSERT_EQ(t.key.size(), 5u);
        EXPECT_NE(t.key[0], '0');
        for (const char c : t.key) EXPECT_TRUE(c >= '0' && c <= '9');
        const std::vector<int> key = Tokens(t.key);
        // The needle starts after round(depth F) filler tokens: within one token of depth F.
        EXPECT_LE(std::abs(static_cast<double>(t.needle_start - 1) - depth * F), 1.0);
        EXPECT_TRUE(HasAt(s, t.needle_start, before));
        EXPECT_TRUE(HasAt(s, t.needle_start + 12, key));
        EXPECT_TRUE(HasAt(s, t.needle_start + 17, after));
        // The end: question, then the key, then nothing.
        EXPECT_TRUE(HasAt(s, ctx + 1 - 5 - 29, question));
        EXPECT_EQ(t.question_start, ctx + 1 - 5 - 29);
        EXPECT_TRUE(HasAt(s, ctx + 1 - 5, key));
        // Key positions: the answer's predecessors, so tokens[p + 1] are the digits in order.
        ASSERT_EQ(t.key_positions.size(), 5u);
        for (size_t i = 0; i < 5; ++i) {
          EXPECT_EQ(t.key_positions[i], ctx - 5 + static_cast<int64_t>(i));
          EXPECT_EQ(s[static_cast<size_t>(t.key_positions[i] + 1)], t.key[i]);
        }
        // The rest is F tokens of one document, contiguous and in order.
        std::vector<int> filler(s.begin() + 1, s.begin() + t.needle_start);
        filler.insert(filler.end(), s.begin() + t.needle_start + 19, s.end() - 34);
        ASSERT_EQ(static_cast<int64_t>(filler.size()), F);
        const bool in_a =
            std::search(doc_a_.begin(), doc_a_.end(), filler.begin(), filler.end()) != doc_a_.end();
        const bool in_b =
            std::search(doc_b_.begin(), doc_b_.end(), filler.begin(), filler.end()) != doc_b_.end();
        EXPECT_TRUE(in_a || in_b);
      }
    }
  }
}

// Depth 0: the needle right after BOS; depth 1: right before the question.
TEST_F(Passkey, DepthZeroAndOneAreTheEnds) {
  const PasskeyTrial first = MakePasskeyTrials(docs_, kEncode, kBos, 100, 0.0, 1, 1)[0];
  EXPECT_EQ(first.needle_start, 1);
  const PasskeyTrial last = MakePasskeyTrials(docs_, kEncode, kBos, 100, 1.0, 1, 1)[0];
  EXPECT_EQ(last.needle_start + 19, 101 - 34);  // the needle's end meets the question
}

TEST_F(Passkey, TheSameSeedGivesTheSameTrials) {
  const auto a = MakePasskeyTrials(docs_, kEncode, kBos, 128, 0.5, 20, 3);
  const auto b = MakePasskeyTrials(docs_, kEncode, kBos, 128, 0.5, 20, 3);
  const auto c = MakePasskeyTrials(docs_, kEncode, kBos, 128, 0.5, 20, 4);
  ASSERT_EQ(a.size(), b.size());
  std::set<std::string> keys;
  int same_as_c = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].key_positions, b[i].key_positions);
    keys.insert(a[i].key);
    same_as_c += a[i].key == c[i].key ? 1 : 0;
  }
  // 20 keys of 9 x 10^4 values: a repeat has probability < 20^2 / 2 / 9e4 = 0.2%, the same keys
  // under another seed far less (the seeds are fixed, so this is checked once for all).
  EXPECT_EQ(keys.size(), 20u);
  EXPECT_EQ(same_as_c, 0);
}

// The controls beside the trials: the trials themselves unchanged (the records of labs that
// scored them without controls stay comparable); each control the same question and answer at
// the same positions, with the needle gone and its key nowhere before the answer (a control that
// leaked the key would let a copier read it); its filler held-out text. At 64 tokens a window
// holds 11 filler tokens and a control needs 30: it runs on into the next trials' windows, with
// one trial into its own again.
TEST_F(Passkey, ControlsKeepTheTrialsAndHoldNoKey) {
  for (const auto& [ctx, count] : {std::pair<int64_t, int64_t>{128, 6}, {64, 3}, {64, 1}}) {
    SCOPED_TRACE(ctx);
    SCOPED_TRACE(count);
    const auto plain = MakePasskeyTrials(docs_, kEncode, kBos, ctx, 0.5, count, 7);
    const PasskeyTrialsWithControls made =
        MakePasskeyTrialsWithControls(docs_, kEncode, kBos, ctx, 0.5, count, 7);
    ASSERT_EQ(made.trials.size(), plain.size());
    ASSERT_EQ(made.controls.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      const PasskeyTrial& t = made.trials[i];
      const PasskeyTrial& c = made.controls[i];
      EXPECT_EQ(t.tokens, plain[i].tokens);
      EXPECT_EQ(c.tokens.size(), t.tokens.size());
      EXPECT_EQ(c.key, t.key);
      EXPECT_EQ(c.key_positions, t.key_positions);
      EXPECT_EQ(c.question_start, t.question_start);
      EXPECT_EQ(c.needle_start, -1);
      // The question and the answer: the trial's, token for token.
      EXPECT_TRUE(std::equal(c.tokens.begin() + c.question_start, c.tokens.end(),
                             t.tokens.begin() + t.question_start));
      // Before the question: BOS, then filler letters only; no digit, so no key and no needle.
      const std::vector<int> key = Tokens(t.key);
      EXPECT_EQ(std::search(t.tokens.begin(), t.tokens.begin() + t.question_start, key.begin(),
                            key.end()) == t.tokens.begin() + t.question_start,
                false)
          << "the trial holds its key in the needle";
      for (int64_t p = 1; p < c.question_start; ++p) {
        const int x = c.tokens[static_cast<size_t>(p)];
        ASSERT_TRUE(x == ' ' || (x >= 'a' && x <= 'z')) << "position " << p << ": " << x;
      }
    }
  }
}

// A scorer that reports every target of every sequence, right where `right(w, p)` says, with
// loss 0.25 where right and 3 where wrong.
SequenceScorer Constructed(std::function<bool(int64_t, int64_t)> right) {
  return [right](const std::vector<std::vector<int>>& seqs, int64_t, const TokenSink& sink) {
    for (size_t w = 0; w < seqs.size(); ++w) {
      for (size_t p = 0; p + 1 < seqs[w].size(); ++p) {
        TokenRecord r;
        r.window = static_cast<int64_t>(w);
        r.position = static_cast<int64_t>(p);
        r.target = seqs[w][p + 1];
        r.correct = right(r.window, r.position);
        r.loss = r.correct ? 0.25 : 3.0;
        sink(r);
      }
    }
  };
}

bool IsKey(const std::vector<PasskeyTrial>& trials, int64_t w, int64_t p) {
  const std::vector<int64_t>& k = trials[static_cast<size_t>(w)].key_positions;
  return std::find(k.begin(), k.end(), p) != k.end();
}

// Right exactly at the key's positions (and wrong everywhere else): every trial retrieved, the
// other positions not counted.
TEST_F(Passkey, AnOracleAtTheKeyScoresOneWhateverItDoesElsewhere) {
  const auto trials = MakePasskeyTrials(docs_, kEncode, kBos, 96, 0.5, 8, 1);
  const PasskeyResult r =
      ScorePasskey(Constructed([&](int64_t w, int64_t p) { return IsKey(trials, w, p); }), trials);
  EXPECT_EQ(r.trials, 8);
  EXPECT_EQ(r.retrieved, 8);
  EXPECT_EQ(r.accuracy, 1.0);
  EXPECT_EQ(r.key_tokens, 40);
  EXPECT_EQ(r.token_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(r.key_loss, 0.25);

  // The reverse: right everywhere but at the key.
  const PasskeyResult none =
      ScorePasskey(Constructed([&](int64_t w, int64_t p) { return !IsKey(trials, w, p); }), trials);
  EXPECT_EQ(none.retrieved, 0);
  EXPECT_EQ(none.accuracy, 0.0);
  EXPECT_EQ(none.token_accuracy, 0.0);
  EXPECT_DOUBLE_EQ(none.key_loss, 3.0);
}

// One wrong digit fails its trial, and costs one key token of k.
TEST_F(Passkey, OneWrongDigitFailsItsTrial) {
  const auto trials = MakePasskeyTrials(docs_, kEncode, kBos, 96, 0.3, 4, 2);
  const int64_t wrong = trials[2].key_positions[3];
  const PasskeyResult r = ScorePasskey(Constructed([&](int64_t w, int64_t p) {
                                         return IsKey(trials, w, p) && !(w == 2 && p == wrong);
                                       }),
                                       trials);
  EXPECT_EQ(r.retrieved, 3);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.75);
  EXPECT_EQ(r.key_tokens, 20);
  EXPECT_DOUBLE_EQ(r.token_accuracy, 19.0 / 20.0);
  EXPECT_DOUBLE_EQ(r.key_loss, (19 * 0.25 + 3.0) / 20.0);

  // One trial alone: token accuracy (k - 1) / k.
  const std::vector<PasskeyTrial> one = {trials[2]};
  const int64_t at = one[0].key_positions[0];
  const PasskeyResult s = ScorePasskey(
      Constructed([&](int64_t w, int64_t p) { return IsKey(one, w, p) && p != at; }), one);
  EXPECT_EQ(s.retrieved, 0);
  EXPECT_DOUBLE_EQ(s.token_accuracy, 4.0 / 5.0);
  // By place: the first digit is the one missed.
  EXPECT_EQ(s.right_by_place, (std::vector<int64_t>{0, 1, 1, 1, 1}));
  EXPECT_EQ(r.right_by_place, (std::vector<int64_t>{4, 4, 4, 3, 4}));
}

// Another key length and format: the key's tokens are still exactly its digits.
TEST_F(Passkey, OtherDigitsAndTexts) {
  PasskeyFormat f;
  f.digits = 12;
  f.needle_before = "<";
  f.needle_after = ">";
  f.question = "?";
  const auto trials = MakePasskeyTrials(docs_, kEncode, kBos, 40, 0.5, 3, 5, f);
  for (const PasskeyTrial& t : trials) {
    EXPECT_EQ(t.tokens.size(), 41u);
    EXPECT_EQ(t.key.size(), 12u);
    EXPECT_TRUE(HasAt(t.tokens, t.needle_start, Tokens("<" + t.key + ">")));
    EXPECT_TRUE(HasAt(t.tokens, 41 - 13, Tokens("?" + t.key)));
    EXPECT_EQ(t.key_positions.front(), 40 - 12);
    EXPECT_EQ(t.key_positions.back(), 39);
  }
  // digits 1: 43 tokens of text, the key twice, 8 filler tokens.
  f = {};
  f.digits = 1;
  EXPECT_EQ(MakePasskeyTrials(docs_, kEncode, kBos, 53, 0.5, 1, 5, f)[0].tokens.size(), 54u);
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The training phrasings: stretch's own first, six in all, each question different, none with
// llama.cpp's words (its layout must stay unseen in training), each fitting a training row of
// 128 byte tokens, and each question ending with "is ", as the needle's words before the key do.
TEST_F(Passkey, VariedPhrasingsHoldOutLlamaCppsWordsAndFitTheQuickLab) {
  const std::vector<PasskeyFormat> formats = VariedPasskeyFormats();
  ASSERT_EQ(formats.size(), 6u);
  EXPECT_EQ(formats[0].question, PasskeyFormat{}.question);
  EXPECT_EQ(formats[0].needle_before, PasskeyFormat{}.needle_before);
  std::set<std::string> questions;
  const PasskeyFormat llama = LlamaCppPasskeyFormat();
  for (const PasskeyFormat& f : formats) {
    questions.insert(f.question);
    for (const std::string* piece :
         {&f.needle_before, &f.needle_middle, &f.needle_after, &f.question, &f.prefix}) {
      EXPECT_FALSE(Has(*piece, "pass key")) << *piece;
      EXPECT_FALSE(Has(*piece, "grass")) << *piece;
    }
    EXPECT_TRUE(f.junk.empty() && f.prefix.empty());
    EXPECT_NE(f.question, llama.question);
    EXPECT_TRUE(f.question.ends_with(" is ")) << f.question;
    const PasskeyPieces p = EncodePasskeyPieces(kEncode, f);
    EXPECT_LE(PasskeyMinCtx(p), 128) << f.question;
    const auto trials = MakePasskeyTrials(docs_, kEncode, kBos, 128, 0.5, 2, 5, f);
    for (const PasskeyTrial& t : trials) {
      EXPECT_EQ(t.tokens.size(), 129u);
      EXPECT_TRUE(HasAt(t.tokens, 129 - static_cast<int64_t>(f.question.size() + 5),
                        Tokens(f.question + t.key)));
    }
  }
  EXPECT_EQ(questions.size(), formats.size());
}

// Decoys (AddPasskeyDecoys): written on the filler alone, never over the needle, the question,
// the answer or each other; each " The NOUN is DIGITS. " with a number other than the key; every
// token they change lies inside one of them; the same rng gives the same trial; with room they
// land on both sides of a needle in the middle. The filler is lowercase letters and spaces, so a
// decoy cannot be found there by chance. Each of the six phrasings, at the quick lab's T = 128.
TEST_F(Passkey, DecoysLieOnTheFillerAloneAndNeverEqualTheKey) {
  const PasskeyDecoys decoys = EncodePasskeyDecoys(kEncode);
  ASSERT_EQ(decoys.before.size(), PasskeyDecoyNouns().size());
  const std::vector<int> fill = Letters(200, 2);
  // A one-digit key too: a decoy's number equals it one time in nine unless drawn again.
  std::vector<PasskeyFormat> formats = VariedPasskeyFormats();
  formats.push_back(PasskeyFormat{});
  formats.back().digits = 1;
  for (const PasskeyFormat& f : formats) {
    const PasskeyPieces pieces = EncodePasskeyPieces(kEncode, f);
    const auto key_len = static_cast<int64_t>(f.digits);
    int64_t before_needle = 0, after_needle = 0, written_total = 0;
    for (const double depth : {0.0, 0.5, 1.0}) {
      for (int seed = 1; seed <= 40; ++seed) {
        for (const int n : {1, 2}) {
          SCOPED_TRACE(::testing::Message()
                       << f.question << " depth " << depth << " seed " << seed << " n " << n);
          Rng rng(static_cast<uint64_t>(seed));
          const PasskeyTrial plain = MakePasskeyTrial(pieces, fill, kBos, 128, depth, rng);
          PasskeyTrial t = plain;
          Rng again = rng;
          const int written = AddPasskeyDecoys(t, pieces, decoys, n, rng);
          PasskeyTrial twin = plain;
          EXPECT_EQ(AddPasskeyDecoys(twin, pieces, decoys, n, again), written);
          EXPECT_EQ(twin.tokens, t.tokens);
          EXPECT_LE(written, n);
          // One decoy is written wherever one side of the needle has room for the longest
          // (" The price is " 13, the number, ". " 2); the long phrasings leave less at depth 0.5.
          const int64_t needle_end =
              t.needle_start +
              static_cast<int64_t>(pieces.needle_before.size() + pieces.needle_after.size()) +
              (pieces.key_copies - 1) * key_len +
              (pieces.key_copies == 3 ? static_cast<int64_t>(pieces.needle_middle.size()) : 0);
          if (std::max(t.needle_start - 1, t.question_start - needle_end) >= 15 + key_len) {
            EXPECT_GE(written, 1);
          }
          written_total += written;
          EXPECT_EQ(t.key, plain.key);
          EXPECT_EQ(t.key_positions, plain.key_positions);
          EXPECT_EQ(t.needle_start, plain.needle_start);
          EXPECT_EQ(t.question_start, plain.question_start);
          ASSERT_EQ(t.tokens.size(), plain.tokens.size());
          // Every decoy, found by its words; each followed by digits that are not the key, then
          // ". ".
          std::vector<char> in_decoy(t.tokens.size(), 0);
          int found = 0;
          for (const std::vector<int>& words : decoys.before) {
            for (int64_t at = 0; at < static_cast<int64_t>(t.tokens.size()); ++at) {
              if (!HasAt(t.tokens, at, words)) continue;
              ++found;
              const int64_t digits_at = at + static_cast<int64_t>(words.size());
              std::string number;
              for (int64_t k = 0; k < static_cast<int64_t>(t.key.size()); ++k) {
                number.push_back(static_cast<char>(t.tokens[static_cast<size_t>(digits_at + k)]));
              }
              EXPECT_NE(number, t.key);
              for (const char c : number) EXPECT_TRUE(c >= '0' && c <= '9') << number;
              const int64_t end = digits_at + static_cast<int64_t>(t.key.size());
              EXPECT_TRUE(HasAt(t.tokens, end, decoys.after));
              for (int64_t k = at; k < end + 2; ++k) in_decoy[static_cast<size_t>(k)] = 1;
              (at < t.needle_start ? before_needle : after_needle) += 1;
            }
          }
          EXPECT_EQ(found, written);
          for (size_t k = 0; k < t.tokens.size(); ++k) {
            if (t.tokens[k] != plain.tokens[k]) {
              EXPECT_TRUE(in_decoy[k]) << "token " << k;
            }
            // Nothing outside the filler: BOS, the needle, the question and the answer hold.
            const int64_t p = static_cast<int64_t>(k);
            const bool filler =
                (p >= 1 && p < t.needle_start) || (p >= needle_end && p < t.question_start);
            if (!filler) {
              EXPECT_EQ(t.tokens[k], plain.tokens[k]) << "token " << k;
            }
          }
        }
      }
    }
    EXPECT_GT(written_total, 120) << "at least one decoy in most trials";
    EXPECT_GT(before_needle, 20);
    EXPECT_GT(after_needle, 20);
  }
  // llama.cpp's layout is a test, never a training row: no decoys there.
  const PasskeyPieces llama = EncodePasskeyPieces(kEncode, LlamaCppPasskeyFormat());
  Rng rng(3);
  PasskeyTrial t = MakePasskeyTrial(llama, {}, kBos, 512, 0.5, rng);
  const std::string e = testing::ErrorOf([&] { AddPasskeyDecoys(t, llama, decoys, 1, rng); });
  EXPECT_TRUE(Has(e, "a layout with junk filler takes none")) << e;
}

TEST_F(Passkey, BadArgumentsAreRefusedByName) {
  auto error = [&](int64_t ctx, double depth, int digits, int64_t count, const TokenSpans& docs) {
    PasskeyFormat f;
    f.digits = digits;
    return testing::ErrorOf(
        [&] { MakePasskeyTrials(docs, kEncode, kBos, ctx, depth, count, 1, f); });
  };
  std::string e = error(60, 0.5, 5, 1, docs_);
  EXPECT_TRUE(Has(e, "passkey: ctx 60 is too short")) << e;
  EXPECT_TRUE(Has(e, "expected ctx >= 61")) << e;
  EXPECT_TRUE(Has(error(52, 0.5, 1, 1, docs_), "expected ctx >= 53"));
  for (const double depth : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    e = error(100, depth, 5, 1, docs_);
    EXPECT_TRUE(Has(e, "passkey: depth")) << e;
    EXPECT_TRUE(Has(e, "expected in [0, 1]")) << e;
  }
  for (const int digits : {0, 19, -3}) {
    e = error(100, 0.5, digits, 1, docs_);
    EXPECT_TRUE(Has(e, "passkey: digits " + std::to_string(digits) + ": expected 1..18")) << e;
  }
  // Not enough filler: 2 documents of 50 tokens hold no window of 128 - 53 = 75 filler tokens.
  const std::vector<int> tiny = Letters(50, 1);
  e = error(128, 0.5, 5, 1, {tiny, tiny});
  EXPECT_TRUE(Has(e, "passkey filler: the held-out text holds 0 whole windows of 75 tokens")) << e;
  e = error(128, 0.5, 5, 0, docs_);
  EXPECT_TRUE(Has(e, "0 windows asked for")) << e;

  // A filler shorter than the trial needs, given directly.
  const PasskeyPieces pieces = EncodePasskeyPieces(kEncode);
  Rng rng(1);
  e = testing::ErrorOf([&] { MakePasskeyTrial(pieces, tiny, kBos, 128, 0.5, rng); });
  EXPECT_TRUE(Has(e, "passkey: 50 filler tokens given, expected at least 75")) << e;
}

}  // namespace
}  // namespace stretch
