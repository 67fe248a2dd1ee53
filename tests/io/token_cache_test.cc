// Tests of the token cache file (src/io/token_cache.h): round trips in both token widths, atomic
// writes, and every kind of damage rejected with a message that names the file and the problem.
#include "src/io/token_cache.h"
#include "tests/testing/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/error.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::WriteBytes;

// A fresh directory per test (the process id keeps concurrent runs apart), removed afterwards.
class TokenCacheTest : public testing::TempDirTest {
 protected:
  TokenCacheTest() : TempDirTest("stretch_token_cache_") {}
};

void PutU32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}
void PutU64(std::string& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}

// A small cache with every field non-trivial: 3 documents (one empty), a non-empty model.
TokenCache SampleCache(int32_t vocab_size) {
  TokenCache c;
  c.meta.vocab_size = vocab_size;
  c.meta.corpus = "stretch corpus v1\n/tmp/a.txt\t12\t34\n";
  c.meta.recipe = "bpe vocab_size=300";
  c.meta.tokenizer_kind = "sentencepiece";
  c.meta.tokenizer_model = std::string("\x00\x01model\xff", 8);
  c.meta.doc_tokens = {4, 0, 3};
  c.tokens = {0, 1, vocab_size - 1, 7, vocab_size / 2, 2, 1};
  return c;
}

// Byte offsets of the fields after the strings, for damaging them on purpose.
size_t CountsOffset(const TokenCacheMeta& m) {
  return 16 + 4 + m.corpus.size() + 4 + m.recipe.size() + 4 + m.tokenizer_kind.size() + 4 +
         m.tokenizer_model.size();
}
size_t TokensOffset(const TokenCacheMeta& m) {
  return CountsOffset(m) + 8 + 8 * m.doc_tokens.size();
}

void ExpectSame(const TokenCache& a, const TokenCache& b) {
  EXPECT_EQ(a.meta.vocab_size, b.meta.vocab_size);
  EXPECT_EQ(a.meta.corpus, b.meta.corpus);
  EXPECT_EQ(a.meta.recipe, b.meta.recipe);
  EXPECT_EQ(a.meta.tokenizer_kind, b.meta.tokenizer_kind);
  EXPECT_EQ(a.meta.tokenizer_model, b.meta.tokenizer_model);
  EXPECT_EQ(a.meta.doc_tokens, b.meta.doc_tokens);
  EXPECT_EQ(a.tokens, b.tokens);
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST_F(TokenCacheTest, RoundTripUint16Tokens) {
  const TokenCache c = SampleCache(300);
  const std::string path = Path("c.bin");
  WriteTokenCache(path, c);
  // 16 header + 4 strings + n_documents + 3 counts + 7 uint16 tokens + checksum.
  EXPECT_EQ(fs::file_size(path), TokensOffset(c.meta) + 7 * 2 + 8);
  ExpectSame(ReadTokenCache(path), c);
  const TokenCacheMeta meta = ReadTokenCacheMeta(path);
  EXPECT_EQ(meta.doc_tokens, c.meta.doc_tokens);
  EXPECT_EQ(meta.n_tokens(), 7);
  EXPECT_EQ(PeekTokenCacheVersion(path), kTokenCacheVersion);
}

TEST_F(TokenCacheTest, RoundTripUint32TokensAboveVocab65536) {
  EXPECT_EQ(TokenCacheTokenBytes(65536), 2);
  EXPECT_EQ(TokenCacheTokenBytes(65537), 4);
  const TokenCache c = SampleCache(70000);  // holds tokens 69999 and 35000, which need 17 bits
  const std::string path = Path("c.bin");
  WriteTokenCache(path, c);
  EXPECT_EQ(fs::file_size(path), TokensOffset(c.meta) + 7 * 4 + 8);
  ExpectSame(ReadTokenCache(path), c);
}

TEST_F(TokenCacheTest, RoundTripEmptyStringsAndNoDocuments) {
  TokenCache c;
  c.meta.vocab_size = 1;
  const std::string path = Path("c.bin");
  WriteTokenCache(path, c);
  ExpectSame(ReadTokenCache(path), c);
}

TEST_F(TokenCacheTest, WriteReplacesAtomicallyAndLeavesNoTemporaryFile) {
  const std::string path = Path("c.bin");
  WriteBytes(path, "old contents");
  const TokenCache c = SampleCache(300);
  WriteTokenCache(path, c);
  ExpectSame(ReadTokenCache(path), c);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "c.bin");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(TokenCacheTest, WriteIntoMissingDirectoryFailsWithItsName) {
  const std::string path = Path("no/such/dir/c.bin");
  const std::string msg = ErrorOf([&] { WriteTokenCache(path, SampleCache(300)); });
  EXPECT_NE(msg.find("no/such/dir/c.bin:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot create the temporary file"), std::string::npos) << msg;
}

TEST(Fnv1a64, MatchesPublishedVectors) {
  // Test vectors of the FNV reference (Fowler, Noll, Vo): FNV-1a 64-bit.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));  // continues a hash
}

// ---------------------------------------------------------------------------------------------
// Damaged files

class DamagedCacheTest : public TokenCacheTest {
 protected:
  void SetUp() override {
    TokenCacheTest::SetUp();
    cache_ = SampleCache(300);
    good_path_ = Path("good.bin");
    WriteTokenCache(good_path_, cache_);
    good_ = ReadBytes(good_path_);
    bad_path_ = Path("bad.bin");
  }
  // Writes `bytes` to bad.bin and returns ReadTokenCache's error; the message must name the file.
  std::string ReadError(const std::string& bytes) {
    WriteBytes(bad_path_, bytes);
    const std::string msg = ErrorOf([&] { ReadTokenCache(bad_path_); });
    EXPECT_EQ(msg.rfind(bad_path_ + ": ", 0), 0u) << msg;
    return msg;
  }

  TokenCache cache_;
  std::string good_path_, bad_path_, good_;
};

TEST_F(DamagedCacheTest, BadMagic) {
  std::string b = good_;
  b.replace(0, 4, "GGUF");
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("magic 47 47 55 46 (\"GGUF\")"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected \"STKC\""), std::string::npos) << msg;
  EXPECT_EQ(PeekTokenCacheVersion(bad_path_), std::nullopt);
}

TEST_F(DamagedCacheTest, OtherVersion) {
  std::string b = good_;
  PutU32(b, 4, 2);
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("version 2: this build reads version 1"), std::string::npos) << msg;
  EXPECT_EQ(PeekTokenCacheVersion(bad_path_), 2u);
}

TEST_F(DamagedCacheTest, VocabSizeOutOfRange) {
  std::string b = good_;
  PutU32(b, 8, 0);
  EXPECT_NE(ReadError(b).find("vocab_size=0: expected 1..16777216"), std::string::npos);
  PutU32(b, 8, (1u << 24) + 1);
  EXPECT_NE(ReadError(b).find("vocab_size=16777217"), std::string::npos);
}

TEST_F(DamagedCacheTest, TokenWidthDisagreesWithVocab) {
  std::string b = good_;
  PutU32(b, 12, 4);
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("token_bytes=4 with vocab_size=300: expected 2"), std::string::npos) << msg;
}

TEST_F(DamagedCacheTest, StringLengthBeyondFile) {
  std::string b = good_;
  PutU32(b, 16, 1000000);  // the corpus string's length
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("corpus length 1000000 at offset 16 is larger than the"), std::string::npos)
      << msg;
}

TEST_F(DamagedCacheTest, KindLongerThanItsLimit) {
  std::string b = good_;
  const size_t kind_at = 16 + 4 + cache_.meta.corpus.size() + 4 + cache_.meta.recipe.size();
  PutU32(b, kind_at, 65);
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("tokenizer_kind length 65"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceeds the limit 64"), std::string::npos) << msg;
}

TEST_F(DamagedCacheTest, DocumentCountLargerThanFile) {
  // 2^62 documents: rejected before anything is allocated for their counts.
  std::string b = good_;
  PutU64(b, CountsOffset(cache_.meta), uint64_t{1} << 62);
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("n_documents=4611686018427387904"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected at most"), std::string::npos) << msg;
}

TEST_F(DamagedCacheTest, TokenCountsLargerThanFile) {
  std::string b = good_;
  PutU64(b, CountsOffset(cache_.meta) + 8 + 8 * 2, 5);  // the last document: 3 -> 5 tokens
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("add up to 9 tokens (18 bytes of uint16)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("only 22 bytes follow them"), std::string::npos) << msg;

  PutU64(b, CountsOffset(cache_.meta) + 8, uint64_t{1} << 60);  // the first: 2^60 tokens
  const std::string huge = ReadError(b);
  EXPECT_NE(huge.find("document #0 has 1152921504606846976 tokens"), std::string::npos) << huge;
}

TEST_F(DamagedCacheTest, TrailingBytes) {
  const std::string msg = ReadError(good_ + "xy");
  EXPECT_NE(msg.find("trailing bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("24 bytes follow the document counts, expected exactly 22"), std::string::npos)
      << msg;
}

TEST_F(DamagedCacheTest, TokenOutsideVocabulary) {
  std::string b = good_;
  b[TokensOffset(cache_.meta) + 2 * 3] = static_cast<char>(0x2c);  // token #3: 7 -> 300
  b[TokensOffset(cache_.meta) + 2 * 3 + 1] = 0x01;
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("token #3 = 300 is outside the vocabulary: expected 0..299"),
            std::string::npos)
      << msg;
}

TEST_F(DamagedCacheTest, ChecksumCatchesAChangedToken) {
  std::string b = good_;
  b[TokensOffset(cache_.meta) + 2 * 3] = 8;  // token #3: 7 -> 8, still a valid id
  const std::string msg = ReadError(b);
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the file is corrupt"), std::string::npos) << msg;
}

TEST_F(DamagedCacheTest, ChecksumCatchesAChangedString) {
  std::string b = good_;
  b[16 + 4] ^= 1;  // the first byte of the corpus string
  EXPECT_NE(ReadError(b).find("checksum"), std::string::npos);
}

TEST_F(DamagedCacheTest, EveryTruncationIsRejected) {
  for (size_t n = 0; n < good_.size(); ++n) {
    SCOPED_TRACE(n);
    const std::string msg = ReadError(good_.substr(0, n));
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("only") != std::string::npos ||
                msg.find("larger than the") != std::string::npos)
        << msg;
    WriteBytes(bad_path_, good_.substr(0, n));
    EXPECT_THROW(ReadTokenCacheMeta(bad_path_), Error);
  }
}

TEST_F(DamagedCacheTest, MissingFileAndDirectory) {
  const std::string missing = Path("missing.bin");
  EXPECT_NE(ErrorOf([&] { ReadTokenCache(missing); }).find(missing + ": cannot open"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadTokenCache(dir_.string()); }).find("not a regular file"),
            std::string::npos);
}

TEST_F(DamagedCacheTest, WrongTokenizerIsRefused) {
  const TokenCacheMeta meta = ReadTokenCacheMeta(good_path_);
  RequireTokenCacheTokenizer(good_path_, meta, "sentencepiece", cache_.meta.tokenizer_model);
  const std::string other_kind =
      ErrorOf([&] { RequireTokenCacheTokenizer(good_path_, meta, "bytes", ""); });
  EXPECT_NE(other_kind.find(good_path_ + ": the cache was made with tokenizer \"sentencepiece\" "
                                         "(model 8 bytes"),
            std::string::npos)
      << other_kind;
  EXPECT_NE(other_kind.find("expected tokenizer \"bytes\" (model 0 bytes, FNV-1a "
                            "cbf29ce484222325)"),
            std::string::npos)
      << other_kind;
  std::string other_model = cache_.meta.tokenizer_model;
  other_model[0] = 'x';  // same kind and size, different bytes
  const std::string msg =
      ErrorOf([&] { RequireTokenCacheTokenizer(good_path_, meta, "sentencepiece", other_model); });
  EXPECT_NE(msg.find(fmt::format("{:016x}", Fnv1a64(other_model))), std::string::npos) << msg;
}

}  // namespace
}  // namespace stretch
