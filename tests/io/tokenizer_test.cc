// Tests of the llama2.c tokenizer (src/io/tokenizer/tokenizer.h): loading and its errors, encoding against a
// naive reference, decoding, and the LLaMA vocabulary against llama.cpp's SentencePiece vectors.
#include "src/io/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/core/error.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

const std::string kTok512 = "models/stories260K/tok512.bin";
const std::string kLlamaTok = "models/llama2_tokenizer/tokenizer.bin";
const std::string kStories = "data/tinystories/TinyStories-validation-HF-first.txt";
const std::string kSpmVectors = "models/ggml_vocab/ggml-vocab-llama-spm.gguf";

std::string TempFile(const std::string& name) {
  // The process id keeps concurrent runs (two build trees, ctest -j) off each other's files.
  return (testing::ProgramTempDir("stretch_io_tokenizer_") / name).string();
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// Splits on `sep`, keeping empty pieces.
std::vector<std::string> Split(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t next = text.find(sep, at);
    if (next == std::string::npos) {
      out.push_back(text.substr(at));
      return out;
    }
    out.push_back(text.substr(at, next - at));
    at = next + sep.size();
  }
}

// The paragraphs of the stories file (separated by blank lines), non-empty ones only.
std::vector<std::string> Paragraphs(const std::string& text) {
  std::vector<std::string> out;
  for (std::string& p : Split(text, "\n\n")) {
    if (!p.empty()) out.push_back(std::move(p));
  }
  return out;
}

// A llama2.c tokenizer file, written by the test: int32 max_token_length, then per token float32
// score, int32 length, bytes.
struct TokenRecord {
  std::string piece;
  float score;
};
std::string TokenizerBytes(int32_t max_len, const std::vector<TokenRecord>& records) {
  std::string b;
  auto put = [&b](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  put(&max_len, 4);
  for (const TokenRecord& r : records) {
    const int32_t len = static_cast<int32_t>(r.piece.size());
    put(&r.score, 4);
    put(&len, 4);
    put(r.piece.data(), r.piece.size());
  }
  return b;
}

// <unk>, <s>, </s> and the 256 byte tokens at ids 3..258, as in tok512 and LLaMA.
std::vector<TokenRecord> BaseRecords() {
  std::vector<TokenRecord> r = {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    r.push_back({piece, 0});
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The reference: llama2.c's encode() as run.c writes it, rescanning every adjacent pair after each
// merge (O(n^2)), over the tokenizer's public pieces and scores only. The library's heap-based
// encoder must give identical ids.
class NaiveEncoder {
 public:
  explicit NaiveEncoder(const Tokenizer& t) : t_(t) {
    for (int id = 0; id < t.vocab_size(); ++id) ids_.emplace(t.Piece(id), id);
  }

  std::vector<int> Encode(const std::string& text, bool bos, bool eos) const {
    std::vector<int> tokens;
    if (bos) tokens.push_back(Tokenizer::kBos);
    const size_t first = tokens.size();
    if (!text.empty()) {
      const int space = Find(" ");
      EXPECT_GE(space, 0) << "the reference needs \" \" in the vocabulary";
      tokens.push_back(space);
    }
    // run.c: collect a byte and its following continuation bytes (at most 4 bytes in all).
    std::string buffer;
    for (size_t i = 0; i < text.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if ((c & 0xC0) != 0x80) buffer.clear();
      buffer.push_back(static_cast<char>(c));
      const bool next_is_continuation =
          i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
      if (next_is_continuation && buffer.size() < 4) continue;
      const int id = Find(buffer);
      if (id >= 0) {
        tokens.push_back(id);
      } else {
        // byte fallback: the first 3 ids are <unk>, <s>, </s>, so byte b is id b + 3.
        for (unsigned char b : buffer) tokens.push_back(b + 3);
      }
      buffer.clear();
    }
    for (;;) {
      float best_score = -1e10f;
      int best_id = -1;
      size_t best_index = 0;
      for (size_t i = first; i + 1 < tokens.size(); ++i) {
        const int id = Find(t_.Piece(tokens[i]) + t_.Piece(tokens[i + 1]));
        if (id != -1 && t_.Score(id) > best_score) {
          best_score = t_.Score(id);
          best_id = id;
          best_index = i;
        }
      }
      if (best_id == -1) break;
      tokens[best_index] = best_id;
      tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
    }
    if (eos) tokens.push_back(Tokenizer::kEos);
    return tokens;
  }

 private:
  int Find(const std::string& s) const {
    const auto it = ids_.find(s);
    return it == ids_.end() ? -1 : it->second;
  }
  const Tokenizer& t_;
  std::unordered_map<std::string, int> ids_;
};

// Random byte strings that stress the encoder: words, single and multiple spaces, newlines, tabs,
// valid multi-byte UTF-8, stray continuation bytes, truncated sequences, invalid lead bytes, NUL.
std::string RandomText(std::mt19937& gen, size_t max_parts) {
  static const std::vector<std::string> parts = {"a",
                                                 "e",
                                                 "the",
                                                 " ",
                                                 "  ",
                                                 "   ",
                                                 "\n",
                                                 "\n\n",
                                                 "\t",
                                                 "Once",
                                                 " upon",
                                                 "Lily",
                                                 ",",
                                                 ".",
                                                 "!",
                                                 "\"",
                                                 "'",
                                                 "é",
                                                 "ü",
                                                 "中",
                                                 "文",
                                                 "😀",
                                                 "€",
                                                 "\x80",
                                                 "\xbf",
                                                 "\xff",
                                                 "\xc3",
                                                 "\xe4\xb8",
                                                 "\xf0\x9f\x98",
                                                 "\xf8\x88\x80\x80\x80",
                                                 std::string(1, '\0'),
                                                 "<0x0A>",
                                                 "<s>",
                                                 "0",
                                                 "123"};
  std::uniform_int_distribution<size_t> count(0, max_parts), pick(0, parts.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s;
  const size_t n = count(gen);
  for (size_t i = 0; i < n; ++i) {
    if (gen() % 8 == 0) {
      s.push_back(static_cast<char>(byte(gen)));
    } else {
      s += parts[pick(gen)];
    }
  }
  return s;
}

std::string Show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += " " + std::to_string(id);
  return s;
}

// ---------------------------------------------------------------------------------------------
// tok512 (stories260K's vocabulary)

TEST(Tokenizer, Tok512Facts) {
  const std::string path = testing::SharedPath(kTok512);
  STRETCH_SKIP_IF_MISSING(path);
  const Tokenizer t = Tokenizer::LoadLlama2c(path);
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.path(), path);
  EXPECT_EQ(t.Piece(0), "<unk>");
  EXPECT_EQ(t.Piece(Tokenizer::kBos), "\n<s>\n");  // llama2.c's export of <s>
  EXPECT_EQ(t.Piece(Tokenizer::kEos), "\n</s>\n");
  EXPECT_EQ(t.Piece(3), "<0x00>");
  EXPECT_EQ(t.Piece(258), "<0xFF>");
  // <s> and </s> decode to nothing, whatever precedes them.
  EXPECT_EQ(t.DecodeToken(Tokenizer::kBos, Tokenizer::kEos), "");
  EXPECT_EQ(t.DecodeToken(7, Tokenizer::kBos), "");

  EXPECT_TRUE(t.Encode("", false, false).empty());
  EXPECT_EQ(t.Encode("", true, true), (std::vector<int>{Tokenizer::kBos, Tokenizer::kEos}));
  // tok512 has no "\n" piece: a newline is the byte-fallback token <0x0A> (id 3 + 10).
  const std::vector<int> ids = t.Encode("a\nb", false, false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 13), ids.end()) << Show(ids);
  EXPECT_EQ(t.Piece(13), "<0x0A>");
  EXPECT_EQ(t.DecodeToken(5, 13), "\n");
  EXPECT_EQ(t.DecodeToken(Tokenizer::kBos, 13), "\n");

  // The dummy prefix: " Once" is one token, whose space is dropped after BOS only.
  const std::vector<int> once = t.Encode("Once", true, false);
  ASSERT_EQ(once.size(), 2u) << Show(once);
  EXPECT_EQ(once[0], Tokenizer::kBos);
  EXPECT_EQ(t.Piece(once[1]), " Once");
  EXPECT_EQ(t.DecodeToken(Tokenizer::kBos, once[1]), "Once");
  EXPECT_EQ(t.DecodeToken(100, once[1]), " Once");
  EXPECT_EQ(t.Decode(once), "Once");
  EXPECT_EQ(t.Encode("Once", false, true), (std::vector<int>{once[1], Tokenizer::kEos}));

  // The greedy merges end in the vocabulary's whole words for common text.
  const std::vector<int> story = t.Encode("Once upon a time", false, false);
  std::vector<std::string> pieces;
  for (int id : story) pieces.push_back(t.Piece(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{" Once", " upon", " a", " time"}));
}

// Text that looks like a control or byte piece is plain text: neither vocabulary has the
// intermediate pieces ("<s", "<0x", ...) through which greedy merging could reach "<s>" or
// "<0x0A>", so such text never becomes <s>, </s>, <unk> or a byte token, and it round-trips.
// (SentencePiece guarantees this by excluding control and byte pieces from merging; llama2.c's
// algorithm gets it from these vocabularies, which is why it is asserted here.)
TEST(Tokenizer, SpecialLookingTextIsPlainText) {
  const std::string text = "<s> a </s>\n<unk><0x0A><0x41>\n<s>\n";
  for (const std::string& rel : {kTok512, kLlamaTok}) {
    const std::string path = testing::SharedPath(rel);
    STRETCH_SKIP_IF_MISSING(path);
    const Tokenizer t = Tokenizer::LoadLlama2c(path);
    const std::vector<int> ids = t.Encode(text, true, false);
    for (size_t i = 1; i < ids.size(); ++i) {
      EXPECT_GT(ids[i], 2) << rel << ": " << Show(ids);
      EXPECT_NE(t.Piece(ids[i]), "<0x41>") << rel << ": " << Show(ids);
    }
    EXPECT_EQ(t.Decode(ids), text) << rel;
    // Without BOS the dummy-prefix space stays in the decoded text.
    EXPECT_EQ(t.Decode(t.Encode(text, false, false)), " " + text) << rel;
  }
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  const std::string path = testing::SharedPath(kTok512);
  STRETCH_SKIP_IF_MISSING(path);
  const Tokenizer t = Tokenizer::LoadLlama2c(path);
  for (int bad : {-1, 512, 1 << 30}) {
    try {
      t.DecodeToken(0, bad);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " out of range"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("expected 0..511"), std::string::npos) << msg;
    }
  }
}

TEST(Tokenizer, Tok512RoundTripsEveryStoryParagraph) {
  const std::string tok = testing::SharedPath(kTok512), stories = testing::SharedPath(kStories);
  STRETCH_SKIP_IF_MISSING(tok);
  STRETCH_SKIP_IF_MISSING(stories);
  const Tokenizer t = Tokenizer::LoadLlama2c(tok);
  const std::vector<std::string> paragraphs = Paragraphs(ReadText(stories));
  ASSERT_GT(paragraphs.size(), 2000u);
  size_t failures = 0;
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    const std::vector<int> ids = t.Encode(paragraphs[i], true, false);
    const std::string back = t.Decode(ids);
    if (back != paragraphs[i] && ++failures <= 5) {
      ADD_FAILURE() << "paragraph " << i << ": \"" << paragraphs[i] << "\" -> \"" << back << "\"";
    }
  }
  EXPECT_EQ(failures, 0u);
}

// The whole file in one call, as the score command encodes it: it round-trips, and its token count
// matches ../shared/README.md ("~390k tok512 tokens"). The time is printed, not asserted.
TEST(Tokenizer, Tok512EncodesTheWholeStoriesFile) {
  const std::string tok = testing::SharedPath(kTok512), stories = testing::SharedPath(kStories);
  STRETCH_SKIP_IF_MISSING(tok);
  STRETCH_SKIP_IF_MISSING(stories);
  const Tokenizer t = Tokenizer::LoadLlama2c(tok);
  const std::string text = ReadText(stories);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> ids = t.Encode(text, true, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ timing   ] encoded %zu bytes into %zu tokens in %.3f s (%.1f MB/s)\n", text.size(),
              ids.size(), seconds, static_cast<double>(text.size()) / seconds / 1e6);
  EXPECT_GT(ids.size(), 350000u);
  EXPECT_LT(ids.size(), 430000u);
  EXPECT_TRUE(t.Decode(ids) == text);
}

// The heap-based encoder against the O(n^2) reference on every paragraph of the stories file and
// on random byte strings.
TEST(Tokenizer, Tok512MatchesTheNaiveReference) {
  const std::string tok = testing::SharedPath(kTok512), stories = testing::SharedPath(kStories);
  STRETCH_SKIP_IF_MISSING(tok);
  STRETCH_SKIP_IF_MISSING(stories);
  const Tokenizer t = Tokenizer::LoadLlama2c(tok);
  const NaiveEncoder naive(t);
  const std::vector<std::string> paragraphs = Paragraphs(ReadText(stories));
  size_t checked = 0;
  for (size_t i = 0; i < paragraphs.size(); ++i) {
    ASSERT_EQ(t.Encode(paragraphs[i], true, false), naive.Encode(paragraphs[i], true, false))
        << "paragraph " << i << ": " << paragraphs[i];
    ++checked;
  }
  EXPECT_GT(checked, 2000u);
  // Several paragraphs in one string, blank lines included.
  std::string joined;
  for (size_t i = 0; i < 12; ++i) joined += paragraphs[i] + "\n\n";
  EXPECT_EQ(t.Encode(joined, false, true), naive.Encode(joined, false, true));

  std::mt19937 gen(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string s = RandomText(gen, 40);
    const std::vector<int> fast = t.Encode(s, true, false);
    ASSERT_EQ(fast, naive.Encode(s, true, false)) << "random string #" << trial;
    // Every byte string round-trips: what no piece covers goes through byte fallback.
    ASSERT_EQ(t.Decode(fast), s) << "random string #" << trial;
  }
}

// Ties everywhere: a vocabulary over {a, b, c, space} with every piece of 2..4 characters and only
// three distinct scores, so most steps choose among equal scores and the leftmost rule decides.
TEST(Tokenizer, TiedScoresMatchTheNaiveReference) {
  std::vector<TokenRecord> records = BaseRecords();
  const std::string alphabet = "abc ";
  std::mt19937 gen(99);
  for (char c : alphabet) records.push_back({std::string(1, c), -100.0f});
  std::vector<std::string> level = {""};
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> next;
    for (const std::string& p : level) {
      for (char c : alphabet) next.push_back(p + c);
    }
    if (len >= 2) {
      for (const std::string& p : next) {
        if (gen() % 3 != 0)
          records.push_back({p, static_cast<float>(-static_cast<int>(gen() % 3))});
      }
    }
    level = next;
  }
  const std::string path = TempFile("ties.bin");
  WriteText(path, TokenizerBytes(8, records));
  const Tokenizer t = Tokenizer::LoadLlama2c(path);
  EXPECT_EQ(t.vocab_size(), static_cast<int>(records.size()));
  const NaiveEncoder naive(t);
  std::uniform_int_distribution<size_t> len(0, 60), pick(0, alphabet.size());
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const size_t n = len(gen);
    for (size_t i = 0; i < n; ++i) {
      const size_t k = pick(gen);
      s.push_back(k < alphabet.size() ? alphabet[k] : 'z');  // 'z': byte fallback in the middle
    }
    const std::vector<int> fast = t.Encode(s, false, false);
    ASSERT_EQ(fast, naive.Encode(s, false, false)) << "\"" << s << "\"";
    ASSERT_EQ(t.Decode(fast), s.empty() ? s : " " + s);  // no BOS: the dummy space stays
  }
}

// ---------------------------------------------------------------------------------------------
// LLaMA's 32000-token vocabulary

TEST(Tokenizer, LlamaVocabularyMatchesTheNaiveReference) {
  const std::string tok = testing::SharedPath(kLlamaTok), stories = testing::SharedPath(kStories);
  STRETCH_SKIP_IF_MISSING(tok);
  STRETCH_SKIP_IF_MISSING(stories);
  const Tokenizer t = Tokenizer::LoadLlama2c(tok);
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.Piece(13), "<0x0A>");
  EXPECT_EQ(t.Piece(29871), " ");
  const NaiveEncoder naive(t);
  const std::vector<std::string> paragraphs = Paragraphs(ReadText(stories));
  // A sample spread over the file: the reference is quadratic, and slow under the sanitizers.
  for (size_t i = 0; i < paragraphs.size(); i += 20) {
    ASSERT_EQ(t.Encode(paragraphs[i], true, false), naive.Encode(paragraphs[i], true, false))
        << "paragraph " << i;
    ASSERT_EQ(t.Decode(t.Encode(paragraphs[i], true, false)), paragraphs[i]);
  }
  std::mt19937 gen(77);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string s = RandomText(gen, 30);
    ASSERT_EQ(t.Encode(s, false, false), naive.Encode(s, false, false)) << "random #" << trial;
  }
}

// llama.cpp's test vectors for the LLaMA SentencePiece vocabulary (ggml-vocab-llama-spm.gguf.inp:
// test strings, each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per string,
// produced by the reference SentencePiece/HF tokenizer without BOS). llama2.c's tokenizer.bin
// holds the same 32000 pieces and scores, and its greedy BPE reproduces SentencePiece's on every
// vector except those listed in kDiverging, each with its reason.
TEST(Tokenizer, LlamaMatchesSentencePieceVectors) {
  const std::string tok = testing::SharedPath(kLlamaTok),
                    inp = testing::SharedPath(kSpmVectors + ".inp"),
                    out = testing::SharedPath(kSpmVectors + ".out");
  STRETCH_SKIP_IF_MISSING(tok);
  STRETCH_SKIP_IF_MISSING(inp);
  STRETCH_SKIP_IF_MISSING(out);
  const Tokenizer t = Tokenizer::LoadLlama2c(tok);
  std::vector<std::string> texts = Split(ReadText(inp), "\n__ggml_vocab_test__\n");
  ASSERT_EQ(texts.back(), "");  // the file ends with a separator
  texts.pop_back();
  std::vector<std::string> lines = Split(ReadText(out), "\n");
  ASSERT_EQ(lines.back(), "");
  lines.pop_back();
  ASSERT_EQ(texts.size(), lines.size());

  // Index -> why llama2.c's algorithm legitimately gives other ids than SentencePiece.
  const std::unordered_map<size_t, std::string> kDiverging = {};

  size_t matched = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int> expected;
    std::istringstream ss(lines[i]);
    for (int id; ss >> id;) expected.push_back(id);
    const std::vector<int> got = t.Encode(texts[i], false, false);
    const auto div = kDiverging.find(i);
    if (div == kDiverging.end()) {
      EXPECT_EQ(got, expected) << "vector #" << i << " \"" << texts[i] << "\"";
      matched += got == expected;
    } else {
      EXPECT_NE(got, expected) << "vector #" << i << " now matches; remove it from kDiverging ("
                               << div->second << ")";
    }
  }
  std::printf("[ vectors  ] %zu of %zu SentencePiece vectors match\n", matched, texts.size());
}

// ---------------------------------------------------------------------------------------------
// Errors: each names the file, the field, what was found and what was expected.

void ExpectLoadRejected(const std::string& path, std::initializer_list<std::string> fragments) {
  try {
    Tokenizer::LoadLlama2c(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message lacks the path: " << msg;
    for (const std::string& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    }
  }
}

std::string WriteTokenizer(const std::string& name, const std::string& bytes) {
  const std::string path = TempFile(name);
  WriteText(path, bytes);
  return path;
}

TEST(TokenizerErrors, MissingAndEmptyFile) {
  ExpectLoadRejected(TempFile("missing.bin"), {"cannot open", "No such file"});
  ExpectLoadRejected(WriteTokenizer("empty.bin", ""),
                     {"empty file", "expected a llama2.c tokenizer"});
  ExpectLoadRejected(
      WriteTokenizer("two_bytes.bin", "ab"),
      {"truncated at offset 0 reading max_token_length", "found 2 bytes", "expected 4"});
}

// Issue 40, item 5: a NaN score was never merged into and an infinite one always won, so such a
// file was accepted and encoded text into other tokens (all NaN: 24 tokens instead of 6). Now
// refused by the token's id and the score's offset.
TEST(TokenizerErrors, NonFiniteScoresAreRefusedByTokenId) {
  std::vector<TokenRecord> all_nan = BaseRecords();
  for (TokenRecord& r : all_nan) r.score = std::numeric_limits<float>::quiet_NaN();
  ExpectLoadRejected(WriteTokenizer("nan.bin", TokenizerBytes(8, all_nan)),
                     {"token #0 has score=nan (at offset 4): expected a finite number"});
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    std::vector<TokenRecord> records = BaseRecords();
    records[7].score = bad;
    ExpectLoadRejected(WriteTokenizer("inf.bin", TokenizerBytes(8, records)),
                       {bad > 0 ? "token #7 has score=inf" : "token #7 has score=-inf",
                        "expected a finite number"});
  }
}

TEST(TokenizerErrors, BadMaxTokenLength) {
  for (int32_t bad : {0, -5, (1 << 16) + 1}) {
    ExpectLoadRejected(WriteTokenizer("max_len.bin", TokenizerBytes(bad, BaseRecords())),
                       {"max_token_length=" + std::to_string(bad), "expected 1..65536"});
  }
}

TEST(TokenizerErrors, TruncatedMidRecord) {
  const std::string full = TokenizerBytes(8, BaseRecords());
  // The last record is "<0xFF>": score at offset n-14, len at n-10, 6 bytes at n-6.
  const size_t n = full.size();
  const size_t last = 258;
  struct Cut {
    size_t keep;
    const char* field;
    size_t found;
    size_t expected;
  };
  for (const Cut& c : {Cut{n - 12, "score", 2, 4}, Cut{n - 8, "len", 2, 4},
                       Cut{n - 1, "bytes", 5, 6}, Cut{n - 6, "bytes", 0, 6}}) {
    ExpectLoadRejected(
        WriteTokenizer("cut.bin", full.substr(0, c.keep)),
        {"truncated at token #" + std::to_string(last) + " (field " + c.field + ")",
         "found " + std::to_string(c.found) + " bytes", "expected " + std::to_string(c.expected)});
  }
}

TEST(TokenizerErrors, BadLength) {
  std::vector<TokenRecord> records = BaseRecords();
  records.push_back({"abcdefghij", -1});  // 10 bytes > max_token_length 8
  ExpectLoadRejected(WriteTokenizer("too_long.bin", TokenizerBytes(8, records)),
                     {"token #259 has len=10", "expected 0..8 (max_token_length)"});
  // A negative length, patched into the last record's len field.
  std::string b = TokenizerBytes(8, BaseRecords());
  const int32_t minus = -7;
  std::memcpy(b.data() + b.size() - 10, &minus, 4);
  ExpectLoadRejected(WriteTokenizer("negative_len.bin", b),
                     {"token #258 has len=-7", "expected 0..8"});
}

TEST(TokenizerErrors, TooFewTokens) {
  ExpectLoadRejected(
      WriteTokenizer("two_tokens.bin", TokenizerBytes(5, {{"<unk>", 0}, {"<s>", 0}})),
      {"2 tokens", "expected at least 3"});
  ExpectLoadRejected(WriteTokenizer("no_tokens.bin", TokenizerBytes(5, {})),
                     {"0 tokens", "expected at least 3"});
}

TEST(TokenizerErrors, VocabMismatchNamesBothFiles) {
  const std::string path = WriteTokenizer("base.bin", TokenizerBytes(8, BaseRecords()));
  const Tokenizer t = Tokenizer::LoadLlama2c(path);
  EXPECT_NO_THROW(CheckVocabMatches("model.bin", 259, t));
  try {
    CheckVocabMatches("some/model.bin", 512, t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : {std::string("some/model.bin"), std::string("vocab_size=512"), path,
                                 std::string("has 259 tokens")}) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    }
  }
}

// A vocabulary without byte pieces: unknown characters become <unk>, and encoding never reads
// outside the tables.
TEST(Tokenizer, NoByteFallbackGivesUnk) {
  const std::string path = WriteTokenizer(
      "no_bytes.bin",
      TokenizerBytes(8, {{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}, {" ", -1}, {"a", -1}, {" a", 0}}));
  const Tokenizer t = Tokenizer::LoadLlama2c(path);
  EXPECT_EQ(t.Encode("a€a", false, false), (std::vector<int>{5, 0, 0, 0, 4}));
  EXPECT_EQ(t.Decode(std::vector<int>{5, 4}), " aa");
}

}  // namespace
}  // namespace stretch
