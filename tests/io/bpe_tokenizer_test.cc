// Tests of the byte-level BPE tokenizer (src/io/tokenizer/bpe_tokenizer.h). The pre-tokenizer split and the
// merge order are checked on hand-made vocabularies whose answers are worked out by hand from the
// pattern and the rules; the GGUF reader against llama.cpp's test vectors for GPT-2's vocabulary
// (../shared/models/ggml_vocab, produced by Hugging Face's tokenizer for "gpt2"), and the
// tokenizer.json reader against the GGUF reader on the same vocabulary.
#include "src/io/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/tokenizer/gguf_vocabulary.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/unicode_class.h"
#include "src/io/tokenizer/unicode_nfc.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"
#include "tests/testing/vocab_cases.h"

namespace stretch {
namespace {

using testing::ErrorOf;
using Merges = std::vector<std::pair<std::string, std::string>>;
using nlohmann::json;

// A piece's byte-level spelling: each byte as GPT-2's alphabet spells it (" a" -> "Ġa").
std::string Spell(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t c = Gpt2ByteToCodePoint(b);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// The 256 byte symbols (ids 0..255 in byte order), then the given merges' results in order.
struct TinyVocab {
  std::vector<std::string> pieces;
  Merges merges;
  explicit TinyVocab(std::initializer_list<std::pair<std::string, std::string>> rules) {
    for (int b = 0; b < 256; ++b) pieces.push_back(Spell(std::string(1, static_cast<char>(b))));
    for (const auto& [a, b] : rules) {
      merges.emplace_back(Spell(a), Spell(b));
      if (std::find(pieces.begin(), pieces.end(), Spell(a + b)) == pieces.end()) {
        pieces.push_back(Spell(a + b));
      }
    }
  }
  int Id(std::string_view bytes) const {
    const auto it = std::find(pieces.begin(), pieces.end(), Spell(bytes));
    return it == pieces.end() ? -1 : static_cast<int>(it - pieces.begin());
  }
  BpeTokenizer Make(BpeOptions options = {}) const {
    return BpeTokenizer::FromVocabulary("tiny", pieces, merges, std::move(options));
  }
};

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : SplitBpePieces(BpeSplit::kGpt2, text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

// ---- the pre-tokenizer ------------------------------------------------------------------------

TEST(BpeSplit, WordsTakeTheSpaceBeforeThem) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split(" Hello"), (Pieces{" Hello"}));
  EXPECT_EQ(Split(""), Pieces{});
}

TEST(BpeSplit, ARunOfSpacesLeavesItsLastSpaceToTheWord) {
  // \s+(?!\S) backtracks one code point before a non-space; \s+ takes a single one.
  EXPECT_EQ(Split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(Split("  Hello"), (Pieces{" ", " Hello"}));
  EXPECT_EQ(Split("    Hello"), (Pieces{"   ", " Hello"}));
  EXPECT_EQ(Split("x\t\ty"), (Pieces{"x", "\t", "\t", "y"}));
  EXPECT_EQ(Split("\n\nHello"), (Pieces{"\n", "\n", "Hello"}));
  EXPECT_EQ(Split("\n ="), (Pieces{"\n", " ="}));
}

TEST(BpeSplit, WhitespaceAtTheEndStaysWhole) {
  EXPECT_EQ(Split("a b  "), (Pieces{"a", " b", "  "}));
  EXPECT_EQ(Split("\n\n\n"), (Pieces{"\n\n\n"}));
  EXPECT_EQ(Split(" "), (Pieces{" "}));
  EXPECT_EQ(Split("\t\n"), (Pieces{"\t\n"}));
  EXPECT_EQ(Split("end.\n"), (Pieces{"end", ".", "\n"}));
}

TEST(BpeSplit, ContractionsAreTheirOwnPiecesCaseSensitively) {
  EXPECT_EQ(Split("I'm can't we're they've you'll he'd it's"),
            (Pieces{"I", "'m", " can", "'t", " we", "'re", " they", "'ve", " you", "'ll", " he",
                    "'d", " it", "'s"}));
  // Not a contraction: upper case, "'a", a space before the apostrophe, inside a punctuation run.
  EXPECT_EQ(Split("IT'S"), (Pieces{"IT", "'", "S"}));
  EXPECT_EQ(Split("y'all"), (Pieces{"y", "'", "all"}));
  EXPECT_EQ(Split("a 's"), (Pieces{"a", " '", "s"}));
  EXPECT_EQ(Split("?'s"), (Pieces{"?'", "s"}));
  EXPECT_EQ(Split("'"), (Pieces{"'"}));
}

TEST(BpeSplit, LettersNumbersAndTheRestAreSeparateRuns) {
  EXPECT_EQ(Split("abc123 4567x"), (Pieces{"abc", "123", " 4567", "x"}));
  EXPECT_EQ(Split("hi!!! ?(x)"), (Pieces{"hi", "!!!", " ?(", "x", ")"}));
  EXPECT_EQ(Split("w048 7tuijk"), (Pieces{"w", "048", " 7", "tuijk"}));
  // Cyrillic letters, CJK letters, fullwidth tilde (Sm: other), the vulgar fraction ½ (No: number).
  EXPECT_EQ(Split("нещо на"), (Pieces{"нещо", " на"}));
  EXPECT_EQ(Split("工作1314151天～"), (Pieces{"工作", "1314151", "天", "～"}));
  EXPECT_EQ(Split("4 ½ months"), (Pieces{"4", " ½", " months"}));
  // Combining marks (Mn) are not letters: "ữ" written as u + U+031B + U+0303 breaks the word.
  EXPECT_EQ(Split("Cu\xCC\x9B\xCC\x83"
                  "a"),
            (Pieces{"Cu", "\xCC\x9B\xCC\x83", "a"}));
  // U+3000 IDEOGRAPHIC SPACE and U+00A0 NO-BREAK SPACE are \s, but only ' ' joins the next word.
  EXPECT_EQ(Split("a\xE3\x80\x80"
                  "b"),
            (Pieces{"a", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(Split("a\xC2\xA0\xC2\xA0"
                  "b"),
            (Pieces{"a", "\xC2\xA0", "\xC2\xA0", "b"}));
}

TEST(BpeSplit, InvalidUtf8BytesAreOtherCodePoints) {
  EXPECT_EQ(Split("a\xFF\xFE"
                  "b"),
            (Pieces{"a", "\xFF\xFE", "b"}));
  EXPECT_EQ(Split("x \xC3"), (Pieces{"x", " \xC3"}));  // a lead byte without its continuation
  EXPECT_EQ(Split("\xED\xA0\x80"), (Pieces{"\xED\xA0\x80"}));  // a surrogate: three bytes of other
}

TEST(BpeSplit, PiecesCoverAnyBytesExactly) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a",    "Z",    "7",    " ", "  ", "\n", "\t",
                                  "'",    "'s",   "!",    "é", "½",  "天", "\xE3\x80\x80",
                                  "\xFF", "\xC3", "\x80", "\0"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) text += alphabet[rng() % std::size(alphabet)];
    std::string joined;
    for (std::string_view p : SplitBpePieces(BpeSplit::kGpt2, text)) {
      ASSERT_FALSE(p.empty()) << text;
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(BpeSplit, UnicodeClassesComeFromTheStatedVersion) {
  EXPECT_EQ(UnicodeClassVersion(), "15.0.0");
  EXPECT_EQ(ClassOfCodePoint(U'a'), UnicodeClass::kLetter);
  EXPECT_EQ(ClassOfCodePoint(U'ǅ'), UnicodeClass::kLetter);    // Lt
  EXPECT_EQ(ClassOfCodePoint(0x2167), UnicodeClass::kNumber);  // ROMAN NUMERAL EIGHT, Nl
  EXPECT_EQ(ClassOfCodePoint(0x0085), UnicodeClass::kWhitespace);
  EXPECT_EQ(ClassOfCodePoint(0x180E), UnicodeClass::kOther);    // Cf since Unicode 6.3
  EXPECT_EQ(ClassOfCodePoint(0x0378), UnicodeClass::kOther);    // unassigned
  EXPECT_EQ(ClassOfCodePoint(0x31350), UnicodeClass::kLetter);  // CJK Extension H, new in 15.0
  EXPECT_EQ(ClassOfCodePoint(0x110000), UnicodeClass::kOther);
}

// ---- merges -----------------------------------------------------------------------------------

TEST(BpeMerges, TheLowestRankMergesFirst) {
  const TinyVocab bc_first({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(bc_first.Make().Encode("abc"), (std::vector<int>{'a', bc_first.Id("bc")}));
  const TinyVocab ab_first({{"a", "b"}, {"b", "c"}});
  EXPECT_EQ(ab_first.Make().Encode("abc"), (std::vector<int>{ab_first.Id("ab"), 'c'}));
}

TEST(BpeMerges, EqualPairsMergeLeftmostFirst) {
  const TinyVocab v({{"a", "a"}});
  EXPECT_EQ(v.Make().Encode("aaa"), (std::vector<int>{v.Id("aa"), 'a'}));
  EXPECT_EQ(v.Make().Encode("aaaa"), (std::vector<int>{v.Id("aa"), v.Id("aa")}));
  const TinyVocab w({{"a", "a"}, {"aa", "aa"}, {"aa", "a"}});
  EXPECT_EQ(w.Make().Encode("aaaa"), (std::vector<int>{w.Id("aaaa")}));
  // aa·aa·a: the two "aa aa" candidates are gone after the first; "aaaa a" has no rule, so the
  // rank-2 rule "aa a" does not apply to what is left.
  EXPECT_EQ(w.Make().Encode("aaaaa"), (std::vector<int>{w.Id("aaaa"), 'a'}));
  EXPECT_EQ(w.Make().Encode("aaa"), (std::vector<int>{w.Id("aaa")}));
}

TEST(BpeMerges, MergedSymbolsMergeFurtherAndPiecesNeverCross) {
  const TinyVocab v({{" ", "t"}, {"h", "e"}, {" t", "he"}, {"e", " "}});
  const BpeTokenizer t = v.Make();
  EXPECT_EQ(t.Encode(" the"), (std::vector<int>{v.Id(" the")}));
  // "the the": pieces "the", " the"; the rule "e " never applies across the two pieces.
  EXPECT_EQ(t.Encode("the the"), (std::vector<int>{'t', v.Id("he"), v.Id(" the")}));
  EXPECT_EQ(t.Piece(v.Id(" the")), "Ġthe");
  EXPECT_EQ(t.TokenBytes(v.Id(" the")), " the");
  // Bytes outside ASCII: each is one symbol.
  EXPECT_EQ(t.Encode("é"), (std::vector<int>{0xC3, 0xA9}));
  EXPECT_EQ(t.Piece(0xC3), "Ã");
  EXPECT_EQ(t.Piece(0x0A), "Ċ");
}

TEST(BpeMerges, DecodeReversesEncodeOnAnyBytes) {
  const TinyVocab v({{" ", "a"}, {"a", "b"}, {" a", "b"}, {"\xC3", "\xA9"}});
  const BpeTokenizer t = v.Make();
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 30);
    for (int k = 0; k < len; ++k) {
      text += rng() % 3 == 0 ? static_cast<char>(rng() % 256) : "ab é\n"[rng() % 6];
    }
    EXPECT_EQ(t.Decode(t.Encode(text)), text);
  }
}

TEST(BpeMerges, PrefixSpaceIsAddedOnlyWhenMissing) {
  const TinyVocab v({{" ", "a"}});
  BpeOptions o;
  o.add_prefix_space = true;
  const BpeTokenizer t = v.Make(o);
  EXPECT_EQ(t.Encode("a"), (std::vector<int>{v.Id(" a")}));
  EXPECT_EQ(t.Encode(" a"), (std::vector<int>{v.Id(" a")}));
  EXPECT_EQ(t.Encode(""), std::vector<int>{});
}

TEST(BpeMerges, RefusesVocabulariesItCannotRunByName) {
  const TinyVocab v({{"a", "b"}});
  {
    std::vector<std::string> pieces = v.pieces;
    pieces.erase(pieces.begin() + ' ');
    const std::string e =
        ErrorOf([&] { BpeTokenizer::FromVocabulary("tiny", pieces, v.merges, {}); });
    EXPECT_NE(e.find("no normal token \"Ġ\" for byte 0x20"), std::string::npos) << e;
  }
  {
    Merges m = {{"a", "zz"}};
    const std::string e = ErrorOf([&] { BpeTokenizer::FromVocabulary("tiny", v.pieces, m, {}); });
    EXPECT_NE(e.find("merges[0] is \"a zz\": \"zz\" is not a piece"), std::string::npos) << e;
  }
  {
    Merges m = {{"a", "b"}, {"b", "a"}};
    const std::string e = ErrorOf([&] { BpeTokenizer::FromVocabulary("tiny", v.pieces, m, {}); });
    EXPECT_NE(e.find("merges[1] is \"b a\": their concatenation \"ba\""), std::string::npos) << e;
  }
  {
    Merges m = {{"a", "b"}, {"a", "b"}};
    const std::string e = ErrorOf([&] { BpeTokenizer::FromVocabulary("tiny", v.pieces, m, {}); });
    EXPECT_NE(e.find("merges[1] repeats merges[0]"), std::string::npos) << e;
  }
  {
    std::vector<std::string> pieces = v.pieces;
    pieces.push_back("ab");
    const std::string e =
        ErrorOf([&] { BpeTokenizer::FromVocabulary("tiny", pieces, v.merges, {}); });
    EXPECT_NE(e.find("pieces[256] and pieces[257] are both \"ab\""), std::string::npos) << e;
  }
  {
    BpeOptions o;
    o.eos = 257;
    const std::string e = ErrorOf([&] { v.Make(o); });
    EXPECT_NE(e.find("the EOS token id is 257"), std::string::npos) << e;
  }
  {
    BpeOptions o;
    o.kinds.assign(v.pieces.size(), BpeTokenKind::kNormal);
    o.kinds[256] = BpeTokenKind::kControl;
    const std::string e = ErrorOf([&] { v.Make(o); });
    EXPECT_NE(e.find("merges[0] is \"a b\": their concatenation \"ab\" is not a normal piece"),
              std::string::npos)
        << e;
  }
}

// ---- the text interface -----------------------------------------------------------------------

TEST(BpeTextTokenizer, PromptsFollowAddBosAndDecodingHoldsBackSplitCharacters) {
  TinyVocab v({{"a", "b"}});
  v.pieces.push_back("<|endoftext|>");
  BpeOptions o;
  o.bos = o.eos = 257;
  o.kinds.assign(v.pieces.size(), BpeTokenKind::kNormal);
  o.kinds[257] = BpeTokenKind::kControl;
  const std::unique_ptr<TextTokenizer> t = MakeBpeTextTokenizer(v.Make(o));
  EXPECT_EQ(t->vocab_size(), 258);
  EXPECT_EQ(t->bos(), 257);
  EXPECT_EQ(t->eos(), 257);
  EXPECT_EQ(t->EncodePrompt("ab"), (std::vector<int>{256}));  // GPT-2 adds no BOS
  EXPECT_EQ(t->EncodePrompt(""), (std::vector<int>{257}));    // but starts from it on nothing

  o.add_bos = true;
  const std::unique_ptr<TextTokenizer> with_bos = MakeBpeTextTokenizer(v.Make(o));
  EXPECT_EQ(with_bos->EncodePrompt("ab"), (std::vector<int>{257, 256}));

  // "é天" is C3 A9 E5 A4 A9: one byte token each; the decoder gives whole characters only.
  const std::vector<int> ids = {'x', 0xC3, 0xA9, 0xE5, 0xA4, 0xA9, 257, 0xFF, 0xC3};
  const std::unique_ptr<TokenTextDecoder> d = t->Decoder(std::vector<int>{257});
  std::vector<std::string> got;
  for (int id : ids) got.push_back(d->Next(id));
  got.push_back(d->Finish());
  EXPECT_EQ(got, (std::vector<std::string>{"x", "", "é", "", "", "天", "", "\xFF", "", "\xC3"}));
}

class BpeTextFiles : public testing::TempDirTest {
 protected:
  BpeTextFiles() : TempDirTest("stretch_bpe_") {}
};

TEST_F(BpeTextFiles, EncodeTextEncodesEachFileWhole) {
  const TinyVocab v({{" ", "a"}, {"a", "b"}});
  const BpeTokenizer bpe = v.Make();
  const std::vector<int> want = bpe.Encode("ab a\n\n b ");
  const std::unique_ptr<TextTokenizer> t = MakeBpeTextTokenizer(v.Make());
  const TextStream s = t->EncodeText(File("one.txt", "ab a\n\n b "));
  EXPECT_EQ(s.tokens, want);
  EXPECT_EQ(s.bytes, 9);
  EXPECT_NE(t->ProtocolText().find("no space added"), std::string::npos);
}

// ---- GGUF -------------------------------------------------------------------------------------

using Cases = testing::VocabCases;
Cases ReadCases(const std::string& vocab) { return testing::ReadVocabCases(vocab); }

std::string Joined(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += " " + std::to_string(id);
  return s;
}

const char* const kGpt2Vocab = "models/ggml_vocab/ggml-vocab-gpt-2.gguf";

// Encodes every case without BOS (llama.cpp's test-tokenizer-0 calls common_tokenize with
// add_special=false, parse_special=false), compares with the .out line; returns the count passed.
int PassedCases(const BpeTokenizer& t, const Cases& c) {
  int passed = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const std::vector<int> ids = t.Encode(c.inputs[k]);
    const std::string got = Joined(ids);
    EXPECT_EQ(got, c.outputs[k]) << "case " << k << ": \"" << c.inputs[k] << "\"";
    EXPECT_EQ(t.Decode(ids), c.inputs[k]) << "case " << k;
    passed += got == c.outputs[k];
  }
  return passed;
}

TEST(BpeGguf, Gpt2VocabularyPassesLlamaCppsTestVectors) {
  const std::string path = testing::SharedPath(kGpt2Vocab);
  STRETCH_SKIP_IF_MISSING(path);
  const BpeTokenizer t = BpeTokenizer::FromGguf(path);
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.merge_count(), 50000);
  EXPECT_EQ(t.bos(), 50256);
  EXPECT_EQ(t.eos(), 50256);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.Kind(50256), BpeTokenKind::kControl);
  EXPECT_EQ(t.TokenBytes(50256), "");
  EXPECT_EQ(t.TokenBytes(220), " ");
  const Cases c = ReadCases(path);
  ASSERT_EQ(c.inputs.size(), c.outputs.size());
  ASSERT_GT(c.inputs.size(), 40u);
  const int passed = PassedCases(t, c);
  EXPECT_EQ(passed, static_cast<int>(c.inputs.size()));
  ::testing::Test::RecordProperty("vectors_passed", passed);
  // Special tokens in the text are text (parse_special=false): "<|", "end", "of", "text", "|>".
  EXPECT_EQ(Joined(t.Encode("<|endoftext|>")), " 27 91 437 1659 5239 91 29");
}

TEST(BpeGguf, EncodesABookAndDecodesItBack) {
  STRETCH_SKIP_UNDER_SANITIZER("a whole corpus");
  const std::string path = testing::SharedPath(kGpt2Vocab);
  const std::string book = testing::SharedPath("data/tinyshakespeare/input.txt");
  STRETCH_SKIP_IF_MISSING(path);
  STRETCH_SKIP_IF_MISSING(book);
  const BpeTokenizer t = BpeTokenizer::FromGguf(path);
  const std::string text = testing::ReadBytes(book);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> ids = t.Encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.Decode(ids), text);
  // 1,115,394 bytes; GPT-2's tokenizer makes 338,025 tokens of it (nanoGPT's
  // data/shakespeare/prepare.py, which encodes it with tiktoken's "gpt2": 301,966 train + 36,059
  // val tokens, split at 90% of the characters, so the sum may differ by a token at the cut).
  EXPECT_NEAR(static_cast<double>(ids.size()), 338025.0, 2.0);
  ::testing::Test::RecordProperty("encode_seconds", std::to_string(seconds));
  std::printf("tinyshakespeare: %zu bytes -> %zu tokens in %.3f s\n", text.size(), ids.size(),
              seconds);
}

// ---- the pre-tokenizers of LLaMA 3 and Qwen 2 ------------------------------------------------

std::vector<std::string> PiecesOf(BpeSplit split, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : SplitBpePieces(split, text)) out.emplace_back(p);
  return out;
}

// Each case below is what the pattern gives, worked by hand from the regex's alternatives (first
// match wins, greedy): llama.cpp's and transformers.js' splits agree on them (the real vocabulary
// tests below check the whole encoding).
TEST(BpeSplitLlama3, CutsAsThePatternSays) {
  using V = std::vector<std::string>;
  const BpeSplit l3 = BpeSplit::kLlama3;
  // Contractions in any case; a letter run takes one code point before it that is not a line
  // break, letter or number.
  EXPECT_EQ(PiecesOf(l3, "I'M here,you'Re"), (V{"I", "'M", " here", ",you", "'Re"}));
  EXPECT_EQ(PiecesOf(l3, "a\tb\nc"), (V{"a", "\tb", "\n", "c"}));
  // Digits in threes, and a number never takes the space before it.
  EXPECT_EQ(PiecesOf(l3, "x 1234567"), (V{"x", " ", "123", "456", "7"}));
  // Punctuation keeps the line breaks after it, and one space before it.
  EXPECT_EQ(PiecesOf(l3, "end!!\n\nNext ..."), (V{"end", "!!\n\n", "Next", " ..."}));
  // White space up to its last line break; a run before a word leaves its last space to it.
  EXPECT_EQ(PiecesOf(l3, "a  \n  b"), (V{"a", "  \n", " ", " b"}));
  EXPECT_EQ(PiecesOf(l3, "a   "), (V{"a", "   "}));
  // Non-ASCII letters and marks: "é" is a letter, the em dash is other.
  EXPECT_EQ(PiecesOf(l3, "caf\xC3\xA9\xE2\x80\x94ok"), (V{"caf\xC3\xA9", "\xE2\x80\x94ok"}));
  // Qwen 2: the same, one digit a piece.
  EXPECT_EQ(PiecesOf(BpeSplit::kQwen2, "x 1234"), (V{"x", " ", "1", "2", "3", "4"}));
  // GPT-2's, for contrast: digits in one run with the space, contractions lower case only.
  EXPECT_EQ(PiecesOf(BpeSplit::kGpt2, "x 1234 I'M"), (V{"x", " 1234", " I", "'", "M"}));
}

TEST(BpeSplitLlama3, PiecesCoverAnyBytesExactly) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a",        "Z",    " ",   "\n", "\r",       "\t",
                                  "'",        "s",    "1",   "!",  "\xC3\xA9", "\xE2\x80\x94",
                                  "\xC2\xA0", "\xFF", "\x80"};
  for (const BpeSplit split : {BpeSplit::kGpt2, BpeSplit::kLlama3, BpeSplit::kQwen2}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) text += alphabet[rng() % std::size(alphabet)];
      std::string joined;
      for (std::string_view p : SplitBpePieces(split, text)) {
        ASSERT_FALSE(p.empty()) << BpeSplitName(split);
        joined += p;
      }
      EXPECT_EQ(joined, text) << BpeSplitName(split);
    }
  }
}

TEST(BpeSplitLlama3, NamesAndPatternsReadBack) {
  for (const BpeSplit split : {BpeSplit::kGpt2, BpeSplit::kLlama3, BpeSplit::kQwen2}) {
    EXPECT_EQ(BpeSplitOfGgufPre(BpeSplitName(split)), split);
    EXPECT_EQ(BpeSplitOfPattern(BpeSplitPattern(split)), split);
  }
  EXPECT_EQ(BpeSplitOfGgufPre("llama3"), BpeSplit::kLlama3);
  EXPECT_EQ(BpeSplitOfGgufPre("falcon"), std::nullopt);
  EXPECT_EQ(BpeSplitOfPattern("\\s+"), std::nullopt);
}

// ignore_merges: a piece that is itself a token is that token even where the merges reach
// another split of it (Hugging Face's BPE, llama.cpp's "llama-bpe").
TEST(BpeIgnoreMerges, AWholePieceThatIsATokenWinsOverTheMerges) {
  const TinyVocab v({{"a", "b"}});  // "ab" by a merge; "abc" a token no merge reaches
  std::vector<std::string> pieces = v.pieces;
  pieces.push_back("abc");
  BpeOptions o;
  const BpeTokenizer plain = BpeTokenizer::FromVocabulary("tiny", pieces, v.merges, o);
  o.ignore_merges = true;
  const BpeTokenizer whole = BpeTokenizer::FromVocabulary("tiny", pieces, v.merges, o);
  const int abc = static_cast<int>(pieces.size()) - 1;
  EXPECT_EQ(whole.Encode("abc"), (std::vector<int>{abc}));
  EXPECT_EQ(plain.Encode("abc").size(), 2u);  // "ab" "c"
  EXPECT_EQ(whole.Encode("abd"), plain.Encode("abd"));
  EXPECT_EQ(whole.Decode(whole.Encode("abc abd")), "abc abd");
}

// ---- real vocabularies: Llama 3 --------------------------------------------------------------

std::string VocabDir(const std::string& name) { return testing::NpmVocabDir(name); }

// The ids that transformers.js (@lenml/tokenizers, scripts/vocab_reference.js) gives for each
// file, one line each; nullopt (and a message in `why`) when node or the library is missing.
std::optional<std::vector<std::string>> ReferenceIds(const std::string& dir,
                                                     const std::vector<std::string>& files,
                                                     std::string* why) {
  const std::string lib =
      std::string(STRETCH_SOURCE_DIR) + "/data/vocab/tokenizers-js/dist/main.js";
  if (!std::filesystem::exists(lib)) {
    *why = lib + " missing (bash scripts/setup.sh sanitize installs it)";
    return std::nullopt;
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) {
    *why = "node is not installed";
    return std::nullopt;
  }
  std::string cmd =
      "node '" + std::string(STRETCH_SOURCE_DIR) + "/scripts/vocab_reference.js' '" + dir + "'";
  for (const std::string& f : files) cmd += " '" + f + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *why = "could not run " + cmd;
    return std::nullopt;
  }
  std::string out;
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  if (pclose(pipe) != 0) {
    *why = cmd + " failed";
    return std::nullopt;
  }
  std::vector<std::string> lines;
  for (size_t at = 0; at < out.size();) {
    const size_t end = out.find('\n', at);
    lines.push_back(out.substr(at, end - at));
    at = end == std::string::npos ? out.size() : end + 1;
  }
  return lines;
}

// The first index where two id lists part, for messages.
std::string FirstDifference(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const size_t from = k < 40 ? 0 : k - 40;
  return "at character " + std::to_string(k) + ": stretch ..." + got.substr(from, 80) +
         "... reference ..." + want.substr(from, 80) + "...";
}

// Phi-3's GGUF vocabulary (a space before the text, added tokens of its own) written as the
// legacy LLaMA tokenizer.json form (`stretch convert --to hf`): transformers.js, reading that file,
// gives the ids stretch gives on llama.cpp's cases, and on a prompt with added tokens in it cuts
// the text at them, puts a space before each part and strips the whitespace after an rstrip token
// as stretch's prompt parsing does.
TEST(BpeReference, Phi3LegacyFormAgreesWithTransformersJs) {
  const std::string gguf = testing::SharedPath("models/ggml_vocab/ggml-vocab-phi-3.gguf");
  STRETCH_SKIP_IF_MISSING(gguf);
  const std::filesystem::path dir = testing::ProgramTempDir("stretch_phi3_ref_") / "hf";
  std::filesystem::create_directories(dir);
  SaveBpeTokenizerFiles(SentencePieceStyleBpeFromSpm(ReadGgufTokenizer(gguf)), dir.string());
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson((dir / "tokenizer.json").string());
  const std::string prompt_file = (dir / "prompt.txt").string();
  const std::string prompt = "<|user|>\n Hi there<|end|>\n<|assistant|>  ok \xC3\xA9";
  std::ofstream(prompt_file, std::ios::binary) << prompt;
  std::string why;
  const auto ref = ReferenceIds(dir.string(), {"--cases", gguf + ".inp"}, &why);
  if (!ref) GTEST_SKIP() << why;
  const auto ref_prompt = ReferenceIds(dir.string(), {prompt_file}, &why);
  ASSERT_TRUE(ref_prompt) << why;
  const Cases c = ReadCases(gguf);
  ASSERT_GE(ref->size(), c.inputs.size());
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const std::string got = Joined(t.Encode(c.inputs[k]));
    EXPECT_EQ(got.empty() ? got : got.substr(1), (*ref)[k]) << "case " << k;
  }
  ASSERT_EQ(ref_prompt->size(), 1u);
  std::vector<int> parsed = MakeBpeTextTokenizer(t)->EncodePromptParsingSpecial(prompt);
  ASSERT_FALSE(parsed.empty());
  parsed.erase(parsed.begin());  // BOS: the reference encodes without special tokens added
  EXPECT_EQ(Joined(parsed).substr(1), (*ref_prompt)[0]);

  // Phi-3's own tokenizer.json has </s> as a token matched in plain text (special false) that
  // takes the white space after it along (rstrip true); llama.cpp makes it a control token.
  nlohmann::json j = nlohmann::json::parse(testing::ReadBytes((dir / "tokenizer.json").string()));
  bool edited = false;
  for (nlohmann::json& added : j["added_tokens"]) {
    if (added["content"] == "</s>") {
      added["special"] = false;
      added["rstrip"] = true;
      edited = true;
    }
  }
  ASSERT_TRUE(edited);
  const std::filesystem::path own = dir.parent_path() / "own";
  std::filesystem::create_directories(own);
  std::ofstream(own / "tokenizer.json", std::ios::binary) << j.dump();
  const BpeTokenizer matched = BpeTokenizer::FromTokenizerJson((own / "tokenizer.json").string());
  EXPECT_EQ(matched.eos(), 32000);  // <|endoftext|>, without a tokenizer_config.json
  std::filesystem::copy_file(dir / "tokenizer_config.json", own / "tokenizer_config.json");
  const std::string text = "a</s>  x\n</s>\t\n\nb </s>";
  const std::string text_file = (own / "text.txt").string();
  std::ofstream(text_file, std::ios::binary) << text;
  const auto ref_text = ReferenceIds(own.string(), {text_file}, &why);
  ASSERT_TRUE(ref_text) << why;
  ASSERT_EQ(ref_text->size(), 1u);
  const std::vector<int> ids = matched.Encode(text);
  EXPECT_EQ(Joined(ids).substr(1), (*ref_text)[0]);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 3);  // </s> matched though not special
  // Written back, the token stays matched and stripping.
  std::filesystem::create_directories(own / "again");
  SaveBpeTokenizerFiles(matched, (own / "again").string());
  EXPECT_EQ(
      BpeTokenizer::FromTokenizerJson((own / "again" / "tokenizer.json").string()).Encode(text),
      ids);
}

// llama.cpp's test vectors for `vocab` (its .out lines were written with Hugging Face's
// tokenizer of the same vocabulary) through the tokenizer.json in `dir`.
void ExpectLlamaCppVectors(const std::string& dir, const std::string& vocab) {
  const std::string cases = testing::SharedPath("models/ggml_vocab/ggml-vocab-" + vocab + ".gguf");
  STRETCH_SKIP_IF_MISSING(cases + ".inp");
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  const Cases c = ReadCases(cases);
  ASSERT_EQ(c.inputs.size(), c.outputs.size());
  ASSERT_GT(c.inputs.size(), 40u);
  EXPECT_EQ(PassedCases(t, c), static_cast<int>(c.inputs.size()));
}

// Every Gutenberg book of ../shared through the tokenizer.json in `dir`, against transformers.js.
// `nfc`: the tokenizer normalizes, so Decode gives the NFC text back.
void ExpectTransformersJsOnEveryBook(const std::string& dir, const std::string& label, bool nfc) {
  const std::string books = testing::SharedPath("data/gutenberg");
  STRETCH_SKIP_IF_MISSING(books);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(books)) {
    if (e.path().extension() == ".txt") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 20u);
  std::string why;
  const auto want = ReferenceIds(dir, files, &why);
  if (!want) GTEST_SKIP() << why;
  ASSERT_EQ(want->size(), files.size());
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  size_t tokens = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string text = testing::ReadBytes(files[k]);
    const std::vector<int> ids = t.Encode(text);
    tokens += ids.size();
    const std::string got = Joined(ids).substr(ids.empty() ? 0 : 1);
    EXPECT_TRUE(got == (*want)[k]) << files[k] << ": " << FirstDifference(got, (*want)[k]);
    EXPECT_EQ(t.Decode(ids), nfc ? NfcNormalize(text) : text) << files[k];
  }
  std::printf("%s: %zu books, %zu tokens, every id as transformers.js gives it\n", label.c_str(),
              files.size(), tokens);
}

// Every string of llama.cpp's test vectors (all its .inp files in ../shared, whichever vocabulary
// they were written for) through the tokenizer.json in `dir`, against transformers.js: the
// strings that trip tokenizers (runs of spaces and newlines, digits, scripts, emoji, code).
void ExpectTransformersJsOnLlamaCppsStrings(const std::string& dir, const std::string& label) {
  const std::string folder = testing::SharedPath("models/ggml_vocab");
  STRETCH_SKIP_IF_MISSING(folder);
  const std::vector<std::string> files = testing::VocabCaseFiles(folder);
  ASSERT_GE(files.size(), 3u);
  std::vector<std::string> args = {"--cases"};
  args.insert(args.end(), files.begin(), files.end());
  std::string why;
  const auto want = ReferenceIds(dir, args, &why);
  if (!want) GTEST_SKIP() << why;
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  size_t k = 0;
  for (const std::string& file : files) {
    for (const std::string& input : testing::VocabCaseInputs(file)) {
      ASSERT_LT(k, want->size()) << "transformers.js gave fewer lines than there are cases";
      const std::vector<int> ids = t.Encode(input);
      const std::string got = Joined(ids).substr(ids.empty() ? 0 : 1);
      EXPECT_EQ(got, (*want)[k]) << file << ", case \"" << input << "\"";
      ++k;
    }
  }
  EXPECT_GT(k, 150u);
  std::printf("%s: %zu strings of %zu llama.cpp test files, every id as transformers.js gives it\n",
              label.c_str(), k, files.size());
}

TEST(BpeLlama3, TokenizerJsonPassesLlamaCppsTestVectors) {
  const std::string dir = VocabDir("llama3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.bos(), 128000);  // <|begin_of_text|>
  ExpectLlamaCppVectors(dir, "llama-bpe");
}

TEST(BpeLlama3, TokenizerJsonMatchesTransformersJsOnEveryBook) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("llama3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  ExpectTransformersJsOnEveryBook(dir, "Llama 3", false);
}

// Qwen 3's tokenizer.json: Qwen 2's split, NFC first; the vocabulary of Qwen 2 (llama.cpp's
// qwen2 vectors).
TEST(BpeQwen3, TokenizerJsonPassesLlamaCppsQwen2TestVectors) {
  const std::string dir = VocabDir("qwen3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  EXPECT_GE(t.vocab_size(), 151643);
  ExpectLlamaCppVectors(dir, "qwen2");
  // NFC before the split: "e" + combining acute is encoded as "é" is.
  EXPECT_EQ(t.Encode("caf\x65\xCC\x81"), t.Encode("caf\xC3\xA9"));
}

TEST(BpeQwen3, TokenizerJsonMatchesTransformersJsOnEveryBook) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("qwen3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  ExpectTransformersJsOnEveryBook(dir, "Qwen 3", true);
}

// Gemma 3's tokenizer.json: SentencePiece-style BPE (spaces as "▁", characters with byte
// fallback, the text between its 6,406 non-special added tokens one piece).
TEST(BpeGemma3, TokenizerJsonMatchesTransformersJs) {
  const std::string dir = VocabDir("gemma3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  // Models and --tokenizer send it here, not to the legacy SentencePiece reader.
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(dir + "/tokenizer.json"));
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  EXPECT_GE(t.vocab_size(), 262144);
  EXPECT_EQ(t.bos(), 2);  // <bos>
  // Text with a character no piece holds (byte fallback) and an added token.
  const std::string sample =
      (testing::ProgramTempDir("stretch_bpe_") / "gemma3_sample.txt").string();
  {
    std::ofstream f(sample, std::ios::binary);
    f << "Hello world,  it's 2026!\n\tTabs <unused0> and \xF0\x9F\xAB\xA0 emoji \xE2\x80\x94 done ";
  }
  std::string why;
  const auto want = ReferenceIds(dir, {sample}, &why);
  if (!want) GTEST_SKIP() << why;
  const std::string text = testing::ReadBytes(sample);
  const std::vector<int> ids = t.Encode(text);
  const std::string got = Joined(ids).substr(1);
  EXPECT_EQ(got, (*want)[0]);
  EXPECT_EQ(t.Decode(ids), text);
}

TEST(BpeReference, Llama3Qwen3Gemma3MatchTransformersJsOnLlamaCppsStrings) {
  std::string missing;
  for (const auto& [name, label] : {std::pair{"llama3", "Llama 3"}, std::pair{"qwen3", "Qwen 3"},
                                    std::pair{"gemma3", "Gemma 3"}}) {
    const std::string dir = VocabDir(name);
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      missing += std::string(missing.empty() ? "" : ", ") + dir;
      continue;
    }
    SCOPED_TRACE(label);
    ExpectTransformersJsOnLlamaCppsStrings(dir, label);
  }
  if (!missing.empty()) GTEST_SKIP() << missing << " missing (bash scripts/setup.sh sanitize)";
}

TEST(BpeGemma3, TokenizerJsonMatchesTransformersJsOnEveryBook) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("gemma3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  ExpectTransformersJsOnEveryBook(dir, "Gemma 3", false);
}

// A GGUF file holding only a tokenizer: GPT-2's keys with `edit` applied.
class BpeGgufFiles : public testing::TempDirTest {
 protected:
  BpeGgufFiles() : TempDirTest("stretch_bpe_gguf_") {}
  using Kv = std::vector<std::pair<std::string, GgufValue>>;
  Kv TinyKv() const {
    const TinyVocab v({{" ", "t"}, {"h", "e"}});
    std::vector<std::string> pieces = v.pieces;
    pieces.push_back("<|endoftext|>");
    std::vector<int32_t> types(pieces.size(), 1);
    types.back() = 3;
    std::vector<std::string> merges;
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    return {{"general.architecture", GgufString("gpt2")},
            {"tokenizer.ggml.model", GgufString("gpt2")},
            {"tokenizer.ggml.pre", GgufString("gpt-2")},
            {"tokenizer.ggml.tokens", GgufStringArray(pieces)},
            {"tokenizer.ggml.token_type", GgufI32Array(types)},
            {"tokenizer.ggml.merges", GgufStringArray(merges)},
            {"tokenizer.ggml.bos_token_id", GgufU32(258)},
            {"tokenizer.ggml.eos_token_id", GgufU32(258)}};
  }
  static void Set(Kv& kv, const std::string& key, GgufValue v) {
    for (auto& [k, value] : kv) {
      if (k == key) {
        value = std::move(v);
        return;
      }
    }
    kv.emplace_back(key, std::move(v));
  }
  static void Erase(Kv& kv, const std::string& key) {
    std::erase_if(kv, [&](const auto& e) { return e.first == key; });
  }
  std::string Write(const Kv& kv) const {
    const std::string path = Path("vocab.gguf");
    WriteGguf(path, kv, {});
    return path;
  }
  // The message of reading a file with `kv`.
  std::string Refusal(const Kv& kv) const {
    const std::string path = Write(kv);
    return ErrorOf([&] { BpeTokenizer::FromGguf(path); });
  }
};

TEST_F(BpeGgufFiles, ReadsATinyVocabulary) {
  Kv kv = TinyKv();
  GgufValue yes;
  yes.type = GgufValueType::kBool;
  yes.u = 1;
  Set(kv, "tokenizer.ggml.add_bos_token", yes);
  const BpeTokenizer t = BpeTokenizer::FromGguf(Write(kv));
  EXPECT_EQ(t.vocab_size(), 259);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.bos(), 258);
  EXPECT_EQ(t.Encode(" the"), (std::vector<int>{256, 257}));
  EXPECT_EQ(MakeBpeTextTokenizer(BpeTokenizer::FromGguf(Write(kv)))->EncodePrompt("he"),
            (std::vector<int>{258, 257}));
}

// tokenizer.ggml.pre "llama-bpe": LLaMA 3's split, whole pieces before merges, and BOS first
// unless tokenizer.ggml.add_bos_token says otherwise (llama.cpp); "qwen2": Qwen's split, no BOS.
TEST_F(BpeGgufFiles, LlamaBpeAndQwen2FollowLlamaCpp) {
  Kv kv = TinyKv();
  std::vector<std::string> pieces;
  for (const auto& [k, v] : kv) {
    if (k == "tokenizer.ggml.tokens") {
      for (const GgufValue& e : v.array) pieces.push_back(e.s);
    }
  }
  pieces.push_back("abc");  // a token that no merge reaches
  std::vector<int32_t> types(pieces.size(), 1);
  types[258] = 3;
  Set(kv, "tokenizer.ggml.tokens", GgufStringArray(pieces));
  Set(kv, "tokenizer.ggml.token_type", GgufI32Array(types));
  Set(kv, "tokenizer.ggml.pre", GgufString("llama-bpe"));
  BpeTokenizer t = BpeTokenizer::FromGguf(Write(kv));
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.Encode("abc"), (std::vector<int>{259}));
  EXPECT_EQ(t.Encode("x 1234").size(), 6u);
  GgufValue no;
  no.type = GgufValueType::kBool;
  no.u = 0;
  Set(kv, "tokenizer.ggml.add_bos_token", no);
  EXPECT_FALSE(BpeTokenizer::FromGguf(Write(kv)).add_bos());
  Set(kv, "tokenizer.ggml.pre", GgufString("qwen2"));
  Erase(kv, "tokenizer.ggml.add_bos_token");
  t = BpeTokenizer::FromGguf(Write(kv));
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.Encode("abc").size(), 3u);  // no whole-piece lookup: byte by byte
}

TEST_F(BpeGgufFiles, RefusesDamagedFieldsByName) {
  auto expect = [&](Kv kv, const std::string& want) {
    const std::string e = Refusal(kv);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  Kv kv = TinyKv();
  Set(kv, "tokenizer.ggml.model", GgufString("llama"));
  expect(kv, "tokenizer.ggml.model is string \"llama\", expected string \"gpt2\"");

  kv = TinyKv();
  Set(kv, "tokenizer.ggml.pre", GgufString("deepseek-llm"));
  expect(kv, "tokenizer.ggml.pre is \"deepseek-llm\": not implemented");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.pre", GgufI32Array({1}));
  expect(kv, "tokenizer.ggml.pre is array of 1 int32, expected a string");
  kv = TinyKv();
  Erase(kv, "tokenizer.ggml.pre");
  expect(kv, "tokenizer.ggml.pre is missing");

  kv = TinyKv();
  Erase(kv, "tokenizer.ggml.merges");
  expect(kv, "tokenizer.ggml.merges is missing");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.merges", GgufStringArray({"Ġ t", "h  e"}));
  expect(kv, "tokenizer.ggml.merges[1] is \"h  e\", expected two pieces separated by one space");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.merges", GgufStringArray({"Ġ t", "h zz"}));
  expect(kv,
         "tokenizer.ggml.merges[1] is \"h zz\": \"zz\" is not a piece of metadata "
         "tokenizer.ggml.tokens");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.merges", GgufStringArray({"Ġ t", "h q"}));
  expect(kv,
         "tokenizer.ggml.merges[1] is \"h q\": their concatenation \"hq\" is not a normal "
         "piece");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.merges", GgufI32Array({1, 2}));
  expect(kv, "tokenizer.ggml.merges is array of 2 int32, expected an array of strings");

  kv = TinyKv();
  std::vector<int32_t> types(259, 1);
  types[100] = 6;
  Set(kv, "tokenizer.ggml.token_type", GgufI32Array(types));
  expect(kv, "tokenizer.ggml.token_type[100] (\"d\") is 6 (byte)");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.token_type", GgufI32Array({1, 1}));
  expect(kv, "tokenizer.ggml.token_type is array of 2 int32, expected an array of 259 integers");

  kv = TinyKv();
  Set(kv, "tokenizer.ggml.eos_token_id", GgufU32(259));
  expect(kv, "tokenizer.ggml.eos_token_id is 259, expected a token id below 259");
  kv = TinyKv();
  Set(kv, "tokenizer.ggml.add_bos_token", GgufU32(1));
  expect(kv, "tokenizer.ggml.add_bos_token is uint32 1, expected a bool");

  kv = TinyKv();
  std::vector<std::string> pieces;
  for (const auto& [k, v] : kv) {
    if (k == "tokenizer.ggml.tokens") {
      for (const GgufValue& e : v.array) pieces.push_back(e.s);
    }
  }
  pieces[10] = pieces[11];
  Set(kv, "tokenizer.ggml.tokens", GgufStringArray(pieces));
  expect(kv, "metadata tokenizer.ggml.tokens[10] and metadata tokenizer.ggml.tokens[11] are both");
}

// ---- tokenizer.json ---------------------------------------------------------------------------

// tokenizer.json as Hugging Face writes it for GPT-2 (transformers' GPT2TokenizerFast), from a
// vocabulary's pieces and merges.
json Gpt2TokenizerJson(const std::vector<std::string>& pieces,
                       const std::vector<std::string>& merges, bool merges_as_pairs) {
  json vocab = json::object();
  for (size_t id = 0; id < pieces.size(); ++id) vocab[pieces[id]] = id;
  json merge_list = json::array();
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    if (merges_as_pairs) {
      merge_list.push_back(json::array({m.substr(0, space), m.substr(space + 1)}));
    } else {
      merge_list.push_back(m);
    }
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({{{"id", pieces.size() - 1},
                                         {"content", "<|endoftext|>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", true},
                                         {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", false},
            {"use_regex", true}}},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

class BpeJsonFiles : public testing::TempDirTest {
 protected:
  BpeJsonFiles() : TempDirTest("stretch_bpe_json_") {}
  json Tiny() const {
    TinyVocab v({{" ", "t"}, {"h", "e"}, {" t", "he"}});
    v.pieces.push_back("<|endoftext|>");
    std::vector<std::string> merges;
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    return Gpt2TokenizerJson(v.pieces, merges, false);
  }
  std::string Write(const json& j) const { return File("tokenizer.json", j.dump()); }
  std::string Refusal(const json& j) const {
    const std::string path = Write(j);
    return ErrorOf([&] { BpeTokenizer::FromTokenizerJson(path); });
  }
};

TEST_F(BpeJsonFiles, Gpt2FromTokenizerJsonMatchesTheGgufVocabulary) {
  const std::string gguf = testing::SharedPath(kGpt2Vocab);
  STRETCH_SKIP_IF_MISSING(gguf);
  const GgufFile g = GgufFile::Open(gguf);
  std::vector<std::string> pieces, merges;
  for (const GgufValue& v : g.Find("tokenizer.ggml.tokens")->array) pieces.push_back(v.s);
  for (const GgufValue& v : g.Find("tokenizer.ggml.merges")->array) merges.push_back(v.s);
  const Cases c = ReadCases(gguf);
  for (bool pairs : {false, true}) {
    SCOPED_TRACE(pairs ? "merges as pairs" : "merges as strings");
    const BpeTokenizer t =
        BpeTokenizer::FromTokenizerJson(Write(Gpt2TokenizerJson(pieces, merges, pairs)));
    EXPECT_EQ(t.vocab_size(), 50257);
    EXPECT_EQ(t.bos(), 50256);
    EXPECT_EQ(t.eos(), 50256);
    EXPECT_FALSE(t.add_bos());
    EXPECT_EQ(PassedCases(t, c), static_cast<int>(c.inputs.size()));
  }
}

TEST_F(BpeJsonFiles, ReadsPrefixSpaceTemplatesAndTheConfigBesideIt) {
  json j = Tiny();
  EXPECT_EQ(BpeTokenizer::FromTokenizerJson(Write(j)).Encode("the"), (std::vector<int>{'t', 257}));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(BpeTokenizer::FromTokenizerJson(Write(j)).Encode("the"), (std::vector<int>{258}));

  // The newer spelling: a Split by GPT-2's pattern, then a ByteLevel without its own regex.
  j = Tiny();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", std::string(BpeSplitPattern(BpeSplit::kGpt2))}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", false}}})}};
  EXPECT_EQ(BpeTokenizer::FromTokenizerJson(Write(j)).Encode("the the"),
            (std::vector<int>{'t', 257, 258}));

  // A template that begins prompts with <|endoftext|>.
  j = Tiny();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|endoftext|>",
         {{"id", "<|endoftext|>"}, {"ids", {259}}, {"tokens", {"<|endoftext|>"}}}}}}};
  BpeTokenizer t = BpeTokenizer::FromTokenizerJson(Write(j));
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.bos(), 259);
  EXPECT_EQ(MakeBpeTextTokenizer(std::move(t))->EncodePrompt(" the"), (std::vector<int>{259, 258}));

  // tokenizer_config.json names bos and eos.
  j = Tiny();
  File("tokenizer_config.json",
       R"({"bos_token": {"content": "Ġthe", "__type": "AddedToken"}, "eos_token": "he"})");
  t = BpeTokenizer::FromTokenizerJson(Write(j));
  EXPECT_EQ(t.bos(), 258);
  EXPECT_EQ(t.eos(), 257);
  File("tokenizer_config.json", R"({"bos_token": "<s>"})");
  const std::string e = ErrorOf([&] { BpeTokenizer::FromTokenizerJson(Write(j)); });
  EXPECT_NE(e.find("tokenizer_config.json: bos_token is \"<s>\", which is no token"),
            std::string::npos)
      << e;
}

// A non-special added token is matched in the text before BPE (Hugging Face), the longest where
// two begin at the same place, and decodes to its text.
TEST_F(BpeJsonFiles, NonSpecialAddedTokensAreMatchedInTheText) {
  json j = Tiny();
  j["added_tokens"][0]["special"] = false;  // <|endoftext|>
  const int eot = j["added_tokens"][0]["id"].get<int>();
  j["added_tokens"].push_back({{"id", eot + 1}, {"content", "<|end"}, {"special", false}});
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(Write(j));
  const std::vector<int> ids = t.Encode("a<|endoftext|>b<|end");
  EXPECT_EQ(ids, (std::vector<int>{t.Encode("a")[0], eot, t.Encode("b")[0], eot + 1}));
  EXPECT_EQ(t.Decode(ids), "a<|endoftext|>b<|end");
  EXPECT_EQ(t.Kind(eot), BpeTokenKind::kNormal);
}

// A special added token is a token of the prompt where the text spells it when special tokens
// are parsed (llama-completion's reading), and characters otherwise; the non-special ones are
// matched either way.
TEST_F(BpeJsonFiles, SpecialAddedTokensArePromptTokensWhenParsed) {
  json j = Tiny();
  const int eot = j["added_tokens"][0]["id"].get<int>();  // <|endoftext|>, special
  j["added_tokens"].push_back({{"id", eot + 1}, {"content", "<|end"}, {"special", false}});
  const auto tok = MakeBpeTextTokenizer(BpeTokenizer::FromTokenizerJson(Write(j)));
  const BpeTokenizer t = BpeTokenizer::FromTokenizerJson(Write(j));
  const int a = t.Encode("a")[0], b = t.Encode("b")[0];
  EXPECT_EQ(tok->EncodePromptParsingSpecial("a<|endoftext|>b<|end"),
            (std::vector<int>{a, eot, b, eot + 1}));
  const std::vector<int> plain = tok->EncodePrompt("a<|endoftext|>b<|end");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0) << "spelled as characters";
  EXPECT_EQ(plain.back(), eot + 1);
  EXPECT_EQ(tok->SpecialTokens().front(), (std::pair<std::string, int>{"<|endoftext|>", eot}));
}

TEST_F(BpeJsonFiles, RefusesDamagedFieldsByName) {
  auto expect = [&](const json& j, const std::string& want) {
    const std::string e = Refusal(j);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  json j = Tiny();
  j["model"]["type"] = "WordPiece";
  expect(j, "model.type is \"WordPiece\", expected \"BPE\"");
  j = Tiny();
  j["model"].erase("type");
  expect(j, "model.type is missing");
  j = Tiny();
  j["model"]["merges"][1] = 7;
  expect(j, "model.merges[1] is the number 7");
  j = Tiny();
  j["model"]["merges"][2] = json::array({"Ġt"});
  expect(j, "model.merges[2] is an array of 1");
  j = Tiny();
  j["model"]["merges"][0] = "Ġ zz";
  expect(j, "model.merges[0] is \"Ġ zz\": \"zz\" is not a piece of model.vocab");
  j = Tiny();
  j["model"]["vocab"]["he"] = "257";
  expect(j, "model.vocab[\"he\"] is the string \"257\", expected a token id");
  j = Tiny();
  j["model"]["vocab"]["he"] = 256;
  expect(j, "is 256, which model.vocab also gives to");
  j = Tiny();
  j["model"]["vocab"].erase("he");
  expect(j, "id 257 is in neither model.vocab nor added_tokens");
  j = Tiny();
  j["model"]["dropout"] = 0.1;
  expect(j, "model.dropout is the number 0.1, expected null");
  j = Tiny();
  j["model"]["unk_token"] = "<unk>";
  expect(j, "model.unk_token is the string \"<unk>\", expected null");
  j = Tiny();
  j["model"]["continuing_subword_prefix"] = "##";
  expect(j, "model.continuing_subword_prefix is the string \"##\"");
  j = Tiny();
  j["model"]["ignore_merges"] = "yes";
  expect(j, "model.ignore_merges is the string \"yes\", expected true or false");
  j = Tiny();
  j["model"]["byte_fallback"] = "no";
  expect(j, "model.byte_fallback is the string \"no\", expected true or false");
  j = Tiny();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}};
  expect(j, "expected the Replace of \" \" by \"\xE2\x96\x81\"");
  j = Tiny();
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  j["pre_tokenizer"] = nullptr;
  expect(j, "expected a Sequence of Replace");
  j = Tiny();
  j["normalizer"] = {{"type", "NFKC"}};
  expect(j, "normalizer is \"NFKC\", expected null or {\"type\": \"NFC\"}");
  j = Tiny();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  expect(j, "pre_tokenizer.type is \"Metaspace\", expected ByteLevel");
  j = Tiny();
  j["pre_tokenizer"]["use_regex"] = false;
  expect(j, "pre_tokenizer.use_regex is false");
  j = Tiny();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  expect(j, "pre_tokenizer.pretokenizers[0].pattern is");
  j = Tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect(j, "decoder.type is the string \"WordPiece\", expected {\"type\": \"ByteLevel\"}");
  j = Tiny();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect(j, "post_processor.type is \"RobertaProcessing\"");
  j = Tiny();
  j["added_tokens"][0]["special"] = false;
  j["added_tokens"][0]["lstrip"] = true;
  expect(j, "added_tokens[0].lstrip is true, expected false");
  j = Tiny();
  j["added_tokens"][0]["id"] = 5;
  expect(j, "added_tokens[0].id is 5, which model.vocab gives to \"ą\"");
  j = Tiny();
  j["added_tokens"][0]["id"] = -1;
  expect(j, "added_tokens[0].id is the number -1, expected a token id");
  {
    const std::string path = File("tokenizer.json", "{\"model\": {");
    const std::string e = ErrorOf([&] { BpeTokenizer::FromTokenizerJson(path); });
    EXPECT_NE(e.find("tokenizer.json: not valid JSON"), std::string::npos) << e;
  }
  expect(json::array(), "the top level is an array of 0, expected an object");
}

// A plain BPE piece spelled as one of llama.cpp's end-of-generation names ends generation too:
// the whole vocabulary is searched, not its special tokens alone (Qwen 3's "</s>", 128247).
TEST(BpeTextTokenizer, APlainPieceSpelledAsAnEndOfGenerationNameEndsIt) {
  const TinyVocab v({{"<", "/"}, {"</", "s"}, {"</s", ">"}});
  const int end = v.Id("</s>");
  ASSERT_GE(end, 256);
  const auto tok = MakeBpeTextTokenizer(v.Make());
  EXPECT_TRUE(tok->SpecialTokens().empty());
  EXPECT_EQ(EndOfGenerationTokens(*tok), std::vector<int>{end});
}

}  // namespace
}  // namespace stretch
