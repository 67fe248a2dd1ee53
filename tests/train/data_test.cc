// Tests of the training data pipeline (src/train/data.h): corpus reading, the bytes and
// SentencePiece tokenizers (src/io/tokenizer/training_tokenizer.h), the token cache's reuse rule, the
// held-out split, the window sampler, validation windows and unigram entropy; and the bytes
// tokenizer on two real Gutenberg books.
#include "src/train/data.h"
#include "tests/testing/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/token_cache.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::WriteBytes;

// ---------------------------------------------------------------------------------------------
// Helpers

class DataTest : public testing::TempDirTest {
 protected:
  DataTest() : TempDirTest("stretch_data_") {}
};

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected \"" << (needle) << "\" in: " << (haystack)

// Deterministic English-like text: sentences of words from a small list, lines of about 60
// bytes, paragraphs separated by blank lines. Enough repetition for SentencePiece to learn merges.
std::string SyntheticText(uint64_t seed, int sentences) {
  static const char* kWords[] = {
      "the",   "little", "girl",  "saw",    "a",     "big",   "red",    "ball",   "and",
      "dog",   "ran",    "to",    "park",   "she",   "was",   "happy",  "they",   "played",
      "with",  "friend", "under", "tree",   "sun",   "warm",  "bright", "mother", "said",
      "home",  "time",   "day",   "one",    "there", "lived", "cat",    "jumped", "over",
      "house", "garden", "water", "flower", "sky",   "blue",  "green",  "small"};
  const uint64_t n_words = sizeof(kWords) / sizeof(kWords[0]);
  Rng rng(seed);
  std::string text;
  size_t line = 0;
  for (int s = 0; s < sentences; ++s) {
    const int len = 4 + static_cast<int>(UniformIndex(rng, 8));
    for (int w = 0; w < len; ++w) {
      std::string word = kWords[UniformIndex(rng, n_words)];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      if (line > 60) {
        text += '\n';
        line = 0;
      } else if (!text.empty() && text.back() != '\n') {
        text += ' ';
        ++line;
      }
      text += word;
      line += word.size();
    }
    text += UniformIndex(rng, 5) == 0 ? "!" : ".";
    if (UniformIndex(rng, 6) == 0) {
      text += "\n\n";
      line = 0;
    }
  }
  return text + "\n";
}

// Documents with given lengths; token k of document d is (d * 1000 + k) % vocab, so every token
// tells which document and position it came from (vocab large enough in the tests that use it).
TokenDocuments NumberedDocuments(const std::vector<int64_t>& lengths, int32_t bos) {
  TokenDocuments docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> body;
    for (int64_t k = 1; k < lengths[d]; ++k) body.push_back(static_cast<int32_t>(d * 1000 + k));
    docs.Add(bos, body);
  }
  return docs;
}

// ---------------------------------------------------------------------------------------------
// Corpus

TEST_F(DataTest, CorpusDirectoryReadsTxtFilesInNameOrderAndSkipsEmptyOnes) {
  WriteBytes(Path("b.txt"), "second\n");
  WriteBytes(Path("a.txt"), "first \xff\xfe bytes\n");  // not UTF-8: fine, it is bytes
  WriteBytes(Path("c.txt"), "");
  WriteBytes(Path("notes.md"), "not a corpus file");
  fs::create_directory(Path("sub.txt"));  // a directory named *.txt is not a file
  const Corpus corpus = ReadCorpus({dir_.string(), std::nullopt});
  ASSERT_EQ(corpus.files.size(), 3u);
  EXPECT_EQ(fs::path(corpus.files[0].path).filename(), "a.txt");
  EXPECT_EQ(fs::path(corpus.files[1].path).filename(), "b.txt");
  EXPECT_EQ(fs::path(corpus.files[2].path).filename(), "c.txt");
  EXPECT_TRUE(fs::path(corpus.files[0].path).is_absolute());
  EXPECT_EQ(corpus.files[0].size, 15);
  EXPECT_EQ(corpus.files[2].size, 0);
  ASSERT_EQ(corpus.documents.size(), 2u);
  EXPECT_EQ(corpus.documents[0], "first \xff\xfe bytes\n");
  EXPECT_EQ(corpus.documents[1], "second\n");
  EXPECT_EQ(corpus.document_file, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(corpus.empty_files, 1);
  EXPECT_EQ(corpus.bytes, 15 + 7);
}

TEST_F(DataTest, CorpusSingleFileIsOneDocument) {
  WriteBytes(Path("book"), "a\n\nb\n");
  const Corpus corpus = ReadCorpus({Path("book"), std::nullopt});
  ASSERT_EQ(corpus.documents.size(), 1u);
  EXPECT_EQ(corpus.documents[0], "a\n\nb\n");
}

TEST_F(DataTest, CorpusSeparatorLineSplitsDocuments) {
  WriteBytes(Path("f.txt"), "x1\nx2\n---\ny\r\n---\r\n---\nz");
  const Corpus corpus = ReadCorpus({Path("f.txt"), std::string("---")});
  EXPECT_EQ(corpus.documents, (std::vector<std::string>{"x1\nx2\n", "y\r\n", "z"}));
  EXPECT_EQ(corpus.empty_pieces, 1);  // between the two adjacent separator lines
  EXPECT_EQ(corpus.document_file, (std::vector<int64_t>{0, 0, 0}));
  // "" splits on blank lines (paragraphs), as in TinyStories.
  WriteBytes(Path("g.txt"), "one\ntwo\n\nthree\n\n\nfour\n");
  const Corpus paragraphs = ReadCorpus({Path("g.txt"), std::string()});
  EXPECT_EQ(paragraphs.documents, (std::vector<std::string>{"one\ntwo\n", "three\n", "four\n"}));
}

TEST_F(DataTest, CorpusErrorsNameThePath) {
  EXPECT_CONTAINS(ErrorOf([&] {
                    ReadCorpus({Path("missing"), std::nullopt});
                  }),
                  Path("missing") + ": no such file or directory");
  EXPECT_CONTAINS(ErrorOf([&] {
                    ReadCorpus({dir_.string(), std::nullopt});
                  }),
                  dir_.string() + ": directory has no *.txt files");
  WriteBytes(Path("e.txt"), "");
  EXPECT_CONTAINS(ErrorOf([&] {
                    ReadCorpus({dir_.string(), std::nullopt});
                  }),
                  "no documents: 1 file(s), 1 of them empty");
  WriteBytes(Path("s.txt"), "--\n--\n");
  EXPECT_CONTAINS(ErrorOf([&] {
                    ReadCorpus({dir_.string(), std::string("--")});
                  }),
                  "the others only separator lines");
}

TEST_F(DataTest, FingerprintChangesWithSizeAndSeparator) {
  WriteBytes(Path("a.txt"), "abc");
  const std::string before = CorpusFingerprint({dir_.string(), std::nullopt});
  EXPECT_EQ(before, CorpusFingerprint({dir_.string(), std::nullopt}));
  EXPECT_NE(before, CorpusFingerprint({dir_.string(), std::string()}));
  EXPECT_CONTAINS(before, Path("a.txt") + "\t3\t");
  WriteBytes(Path("a.txt"), "abcd");
  EXPECT_NE(before, CorpusFingerprint({dir_.string(), std::nullopt}));
}

// ---------------------------------------------------------------------------------------------
// Tokenizers

TEST(BytesTokenizer, RoundTripsEveryByte) {
  const TrainingTokenizer t = TrainingTokenizer::Bytes();
  EXPECT_EQ(t.kind(), "bytes");
  EXPECT_EQ(t.model(), "");
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.bos_id(), 256);
  EXPECT_EQ(t.eos_id(), 257);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::vector<int32_t> ids = t.Encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(t.Decode(ids), all);
  const std::vector<int32_t> with_specials = {256, 'h', 'i', 257};
  EXPECT_EQ(t.Decode(with_specials), "hi");
  EXPECT_EQ(t.Piece('e'), "e");
  EXPECT_EQ(t.Piece('\n'), "<0x0A>");
  EXPECT_EQ(t.Piece(256), "<s>");
  const std::vector<int32_t> bad = {'a', 258};
  EXPECT_CONTAINS(ErrorOf([&] { t.Decode(bad); }),
                  "token #1 = 258: outside the bytes tokenizer's vocabulary, expected 0..257");
}

TEST(BytesTokenizer, LoadChecksKindAndModel) {
  EXPECT_EQ(TrainingTokenizer::Load("bytes", "").vocab_size(), 258);
  EXPECT_CONTAINS(ErrorOf([] { TrainingTokenizer::Load("bytes", "xyz"); }),
                  "found a model of 3 bytes, expected none");
  EXPECT_CONTAINS(ErrorOf([] { TrainingTokenizer::Load("tiktoken", ""); }),
                  "tokenizer kind \"tiktoken\": expected \"bytes\" or \"sentencepiece\"");
  EXPECT_CONTAINS(ErrorOf([] { TrainingTokenizer::Load("sentencepiece", "not a proto"); }),
                  "SentencePiece cannot load it");
  EXPECT_EQ(ParseTokenizerKind("unigram"), TokenizerKind::kUnigram);
  EXPECT_EQ(ParseTokenizerKind("bpe"), TokenizerKind::kBpe);
  EXPECT_CONTAINS(ErrorOf([] { ParseTokenizerKind("wordpiece"); }),
                  "tokenizer \"wordpiece\": expected bytes, bpe or unigram");
}

// Text the tokenizers have not seen: leading, repeated and trailing spaces, tabs, blank lines,
// characters outside the training text (byte fallback) and a 4-byte emoji.
const std::string kUnseenText =
    "  Leading spaces,\ttabs\tand  doubled  spaces.\n\n\nCaf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
    "\xf0\x9f\x98\x80 Zebra QUIZ 12345 ~`^|{}\n   ";

class SentencePieceTest : public ::testing::TestWithParam<TokenizerKind> {};

TEST_P(SentencePieceTest, TrainedTokenizerRoundTripsAndIsDeterministic) {
  std::vector<std::string> docs = {SyntheticText(1, 800), SyntheticText(2, 800)};
  TokenizerOptions opt;
  opt.kind = GetParam();
  opt.vocab_size = 360;
  const TrainingTokenizer t = TrainingTokenizer::Train(docs, opt);
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 360);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.Piece(1), "<s>");
  EXPECT_EQ(t.Piece(3 + '\n'), "<0x0A>");  // byte-fallback pieces follow <unk>, <s>, </s>
  for (const std::string& doc : docs) {
    const std::vector<int32_t> ids = t.Encode(doc);
    EXPECT_EQ(t.Decode(ids), doc);
    // It learned merges: well under one token per byte (the bytes tokenizer's rate). With only
    // about 60 pieces beyond the bytes and characters, BPE takes ~0.55 tokens a byte here.
    EXPECT_LT(static_cast<double>(ids.size()), 0.65 * static_cast<double>(doc.size()))
        << ids.size() << " tokens for " << doc.size() << " bytes";
  }
  const std::vector<int32_t> unseen = t.Encode(kUnseenText);
  EXPECT_EQ(t.Decode(unseen), kUnseenText);
  for (int32_t id : unseen) EXPECT_NE(id, 0) << "nothing is <unk> with byte fallback";

  // Same text, same options: the same model, byte for byte; loaded back, the same encodings.
  const TrainingTokenizer again = TrainingTokenizer::Train(docs, opt);
  EXPECT_EQ(again.model(), t.model());
  const TrainingTokenizer loaded = TrainingTokenizer::Load(t.kind(), t.model());
  EXPECT_EQ(loaded.vocab_size(), 360);
  EXPECT_EQ(loaded.Encode(docs[0]), t.Encode(docs[0]));
  EXPECT_EQ(loaded.Encode(kUnseenText), unseen);
  const std::vector<int32_t> bad = {5, 360};
  EXPECT_CONTAINS(ErrorOf([&] { t.Decode(bad); }), "token #1 = 360: outside");
}

TEST_P(SentencePieceTest, TrainingCapUsesASubsetOfLines) {
  const std::vector<std::string> docs = {SyntheticText(3, 800)};
  TokenizerOptions opt;
  opt.kind = GetParam();
  opt.vocab_size = 340;
  const std::string full = TrainingTokenizer::Train(docs, opt).model();
  opt.max_training_bytes = static_cast<int64_t>(docs[0].size());  // >= the lines' bytes: all
  EXPECT_EQ(TrainingTokenizer::Train(docs, opt).model(), full);
  opt.max_training_bytes = static_cast<int64_t>(docs[0].size()) / 3;
  const TrainingTokenizer capped = TrainingTokenizer::Train(docs, opt);
  EXPECT_NE(capped.model(), full);
  EXPECT_EQ(capped.Decode(capped.Encode(docs[0])), docs[0]);
  EXPECT_NE(opt.Recipe(), (TokenizerOptions{.kind = opt.kind, .vocab_size = 340}.Recipe()));
}

TEST_P(SentencePieceTest, LinesLongerThanSentencePieceTakesAreCut) {
  // One 40 kB line without a newline: SentencePiece would drop it whole (max_sentence_length),
  // leaving nothing to train on; cut into pieces it trains.
  std::string line = SyntheticText(4, 1200);
  std::replace(line.begin(), line.end(), '\n', ' ');
  ASSERT_GT(line.size(), 40000u);
  const std::vector<std::string> docs = {line};
  TokenizerOptions opt;
  opt.kind = GetParam();
  opt.vocab_size = 340;
  const TrainingTokenizer t = TrainingTokenizer::Train(docs, opt);
  EXPECT_EQ(t.Decode(t.Encode(line)), line);
}

TEST_P(SentencePieceTest, BadOptionsAndTooSmallTextAreReported) {
  const std::vector<std::string> docs = {"a tiny corpus\n"};
  TokenizerOptions opt;
  opt.kind = GetParam();
  opt.vocab_size = 100;
  EXPECT_CONTAINS(ErrorOf([&] { TrainingTokenizer::Train(docs, opt); }),
                  "vocab_size=100: expected 260..");
  opt.vocab_size = 5000;  // far more pieces than 14 bytes of text can give
  EXPECT_CONTAINS(ErrorOf([&] { TrainingTokenizer::Train(docs, opt); }),
                  "SentencePiece training with vocab_size=5000 on 1 lines (13 bytes) failed");
  opt.vocab_size = 340;
  opt.threads = 0;
  EXPECT_CONTAINS(ErrorOf([&] { TrainingTokenizer::Train(docs, opt); }), "threads=0");
  const std::vector<std::string> blank = {"\n\n\n"};
  opt.threads = 1;
  EXPECT_CONTAINS(ErrorOf([&] { TrainingTokenizer::Train(blank, opt); }), "no non-empty lines");
}

INSTANTIATE_TEST_SUITE_P(Kinds, SentencePieceTest,
                         ::testing::Values(TokenizerKind::kBpe, TokenizerKind::kUnigram),
                         [](const auto& info) {
                           return std::string(TokenizerKindName(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// LoadCorpusData and the cache

TEST_F(DataTest, LoadWithoutCacheKeepsDocumentsApartWithBos) {
  WriteBytes(Path("a.txt"), "hello");
  WriteBytes(Path("b.txt"), "world!");
  WriteBytes(Path("c.txt"), "");
  const CorpusData data = LoadCorpusData({{dir_.string(), std::nullopt}, {}, std::nullopt});
  EXPECT_EQ(data.cache, CacheUse::kNone);
  EXPECT_EQ(data.empty_files, 1);
  EXPECT_EQ(data.files.size(), 3u);
  ASSERT_EQ(data.documents.size(), 2);
  EXPECT_EQ(data.documents.n_tokens(), 1 + 5 + 1 + 6);
  for (int64_t d = 0; d < 2; ++d) EXPECT_EQ(data.documents.Document(d)[0], 256);
  EXPECT_EQ(data.tokenizer.Decode(data.documents.Document(0)), "hello");
  EXPECT_EQ(data.tokenizer.Decode(data.documents.Document(1)), "world!");
}

TEST_F(DataTest, CacheIsBuiltReusedAndRebuiltWhenTheCorpusOrRecipeChanges) {
  fs::create_directory(Path("corpus"));
  WriteBytes(Path("corpus/a.txt"), SyntheticText(5, 300));
  WriteBytes(Path("corpus/b.txt"), SyntheticText(6, 300));
  DataOptions opt;
  opt.corpus.path = Path("corpus");
  opt.tokenizer.kind = TokenizerKind::kBpe;
  opt.tokenizer.vocab_size = 340;
  opt.cache_path = Path("cache.bin");

  const CorpusData built = LoadCorpusData(opt);
  EXPECT_EQ(built.cache, CacheUse::kBuilt);
  EXPECT_CONTAINS(built.cache_note, "no cache there yet");
  ASSERT_EQ(built.documents.size(), 2);
  EXPECT_EQ(built.tokenizer.Decode(built.documents.Document(1)), SyntheticText(6, 300));
  const TokenCacheMeta meta = ReadTokenCacheMeta(Path("cache.bin"));
  EXPECT_EQ(meta.recipe, opt.tokenizer.Recipe());
  EXPECT_EQ(meta.tokenizer_model, built.tokenizer.model());
  EXPECT_EQ(meta.doc_tokens[0] + 1, static_cast<int64_t>(built.documents.Document(0).size()));

  const CorpusData reused = LoadCorpusData(opt);
  EXPECT_EQ(reused.cache, CacheUse::kReused) << reused.cache_note;
  EXPECT_CONTAINS(reused.cache_note, "reused");
  EXPECT_EQ(reused.tokenizer.model(), built.tokenizer.model());
  EXPECT_EQ(
      std::vector<int32_t>(reused.documents.tokens().begin(), reused.documents.tokens().end()),
      std::vector<int32_t>(built.documents.tokens().begin(), built.documents.tokens().end()));
  EXPECT_EQ(reused.documents.Document(1).size(), built.documents.Document(1).size());

  // A different recipe: rebuilt, with the reason.
  opt.tokenizer.vocab_size = 350;
  const CorpusData other_recipe = LoadCorpusData(opt);
  EXPECT_EQ(other_recipe.cache, CacheUse::kBuilt);
  EXPECT_CONTAINS(other_recipe.cache_note, "the tokenizer recipe changed");
  EXPECT_EQ(other_recipe.tokenizer.vocab_size(), 350);
  EXPECT_EQ(LoadCorpusData(opt).cache, CacheUse::kReused);

  // An edited file (a different size, so the test does not depend on the mtime's resolution).
  WriteBytes(Path("corpus/b.txt"), SyntheticText(7, 200));
  const CorpusData edited = LoadCorpusData(opt);
  EXPECT_EQ(edited.cache, CacheUse::kBuilt);
  EXPECT_CONTAINS(edited.cache_note, "the corpus changed");
  EXPECT_CONTAINS(edited.cache_note, "b.txt");
  EXPECT_EQ(edited.tokenizer.Decode(edited.documents.Document(1)), SyntheticText(7, 200));

  // A new file.
  WriteBytes(Path("corpus/c.txt"), "more");
  const CorpusData added = LoadCorpusData(opt);
  EXPECT_EQ(added.cache, CacheUse::kBuilt);
  EXPECT_EQ(added.documents.size(), 3);
}

TEST_F(DataTest, GivenTokenizerReusesOnlyAMatchingCache) {
  WriteBytes(Path("a.txt"), SyntheticText(8, 300));
  WriteBytes(Path("b.txt"), SyntheticText(9, 300));
  DataOptions opt;
  opt.corpus.path = dir_.string();
  opt.tokenizer.kind = TokenizerKind::kUnigram;
  opt.tokenizer.vocab_size = 340;
  opt.cache_path = Path("cache.bin");
  const CorpusData trained = LoadCorpusData(opt);
  ASSERT_EQ(trained.cache, CacheUse::kBuilt);

  // The same tokenizer, given (as from a checkpoint): the cache is reused.
  const TrainingTokenizer same =
      TrainingTokenizer::Load("sentencepiece", trained.tokenizer.model());
  const CorpusData reused = LoadCorpusData(opt, same);
  EXPECT_EQ(reused.cache, CacheUse::kReused) << reused.cache_note;

  // Another tokenizer: the cache is refused and rebuilt with it.
  const CorpusData bytes = LoadCorpusData(opt, TrainingTokenizer::Bytes());
  EXPECT_EQ(bytes.cache, CacheUse::kBuilt);
  EXPECT_CONTAINS(bytes.cache_note, "the cache was made with tokenizer \"sentencepiece\"");
  EXPECT_CONTAINS(bytes.cache_note, "expected tokenizer \"bytes\"");
  EXPECT_EQ(bytes.tokenizer.kind(), "bytes");
  EXPECT_EQ(bytes.documents.Document(0)[0], TrainingTokenizer::kByteBos);
  EXPECT_EQ(ReadTokenCacheMeta(Path("cache.bin")).tokenizer_kind, "bytes");
  // A given tokenizer's cache has the recipe "given": training from options rebuilds it.
  EXPECT_EQ(LoadCorpusData(opt).cache, CacheUse::kBuilt);
}

TEST_F(DataTest, CacheFilesThatAreNotCurrentCaches) {
  WriteBytes(Path("a.txt"), "some text\n");
  WriteBytes(Path("b.txt"), "other text\n");
  DataOptions opt;
  opt.corpus.path = dir_.string();
  opt.cache_path = Path("cache.bin");

  // Not a cache: never overwritten.
  WriteBytes(Path("cache.bin"), "my precious notes, not a cache");
  EXPECT_CONTAINS(ErrorOf([&] { LoadCorpusData(opt); }),
                  Path("cache.bin") + ": exists and is not a stretch token cache");
  EXPECT_EQ(ReadBytes(Path("cache.bin")), "my precious notes, not a cache");

  // A cache of another version: rebuilt.
  fs::remove(Path("cache.bin"));
  ASSERT_EQ(LoadCorpusData(opt).cache, CacheUse::kBuilt);
  std::string bytes = ReadBytes(Path("cache.bin"));
  bytes[4] = 9;
  WriteBytes(Path("cache.bin"), bytes);
  const CorpusData rebuilt = LoadCorpusData(opt);
  EXPECT_EQ(rebuilt.cache, CacheUse::kBuilt);
  EXPECT_CONTAINS(rebuilt.cache_note, "a token cache of version 9");
  EXPECT_EQ(LoadCorpusData(opt).cache, CacheUse::kReused);

  // A damaged cache of this version: an error naming the problem, not a silent rebuild.
  bytes = ReadBytes(Path("cache.bin"));
  WriteBytes(Path("cache.bin"), bytes.substr(0, bytes.size() - 3));
  EXPECT_CONTAINS(ErrorOf([&] { LoadCorpusData(opt); }), Path("cache.bin") + ": ");
  bytes[bytes.size() - 12] ^= 1;  // a token's low byte: still in the vocabulary
  WriteBytes(Path("cache.bin"), bytes);
  EXPECT_CONTAINS(ErrorOf([&] { LoadCorpusData(opt); }), "checksum");
}

// ---------------------------------------------------------------------------------------------
// Held-out split

TEST(SplitDocuments, DeterministicDisjointAndCompleteByDocument) {
  const TokenDocuments docs = NumberedDocuments({5, 9, 2, 7, 30, 11, 4, 8, 6, 13}, 999999);
  const SplitOptions opt{.valid_fraction = 0.3, .valid_documents = std::nullopt, .seed = 42};
  const DataSplit a = SplitDocuments(docs, opt);
  ASSERT_EQ(a.valid_ids.size(), 3u);
  ASSERT_EQ(a.train_ids.size(), 7u);
  std::vector<int64_t> all = a.train_ids;
  all.insert(all.end(), a.valid_ids.begin(), a.valid_ids.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // disjoint and complete
  EXPECT_TRUE(std::is_sorted(a.valid_ids.begin(), a.valid_ids.end()));
  EXPECT_TRUE(std::is_sorted(a.train_ids.begin(), a.train_ids.end()));
  // Whole documents, unchanged, BOS first.
  for (size_t k = 0; k < a.valid_ids.size(); ++k) {
    const auto got = a.valid.Document(static_cast<int64_t>(k));
    const auto want = docs.Document(a.valid_ids[k]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
  }
  for (size_t k = 0; k < a.train_ids.size(); ++k) {
    const auto got = a.train.Document(static_cast<int64_t>(k));
    const auto want = docs.Document(a.train_ids[k]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
  }
  EXPECT_EQ(a.train.n_tokens() + a.valid.n_tokens(), docs.n_tokens());

  const DataSplit b = SplitDocuments(docs, opt);
  EXPECT_EQ(a.valid_ids, b.valid_ids);
  // The seed matters: of a few other seeds, some give another held-out set (a fixed outcome).
  std::set<std::vector<int64_t>> seen;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    seen.insert(SplitDocuments(docs, {.valid_fraction = 0.3, .seed = seed}).valid_ids);
  }
  EXPECT_GT(seen.size(), 4u);
}

TEST(SplitDocuments, EveryDocumentIsHeldOutEquallyOften) {
  // Over 6000 seeds, each of 6 documents is held out (1 of 6) about 1000 times: a count off by
  // more than 5 sigma (sigma = sqrt(6000 * 1/6 * 5/6) = 28.9) would mean a biased shuffle.
  const TokenDocuments docs = NumberedDocuments({3, 3, 3, 3, 3, 3}, 999999);
  std::vector<int> held(6, 0);
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    const DataSplit s = SplitDocuments(docs, {.valid_documents = 1, .seed = seed});
    ++held[static_cast<size_t>(s.valid_ids.at(0))];
  }
  for (int count : held) EXPECT_NEAR(count, 1000, 5 * 28.9);
}

// Issue 41 item 8: one text file (a book) is a corpus. Its one document is split by position:
// the last tenth of its tokens is held out, the rest trains, and together they are the document.
TEST(SplitDocuments, ASingleDocumentIsSplitByPosition) {
  const TokenDocuments one = NumberedDocuments({50}, 999999);
  const DataSplit s = SplitDocuments(one, {.valid_fraction = 0.1});
  ASSERT_EQ(s.train.size(), 1);
  ASSERT_EQ(s.valid.size(), 1);
  const std::span<const int32_t> doc = one.Document(0), train = s.train.Document(0),
                                 valid = s.valid.Document(0);
  EXPECT_EQ(valid.size(), 1u + 5u) << "BOS + round(0.1 x 50) tokens";
  EXPECT_EQ(train.size() + valid.size(), doc.size() + 1) << "the BOS is in front of both parts";
  EXPECT_EQ(train[0], doc[0]);
  EXPECT_EQ(valid[0], doc[0]);
  std::vector<int32_t> joined(train.begin(), train.end());
  joined.insert(joined.end(), valid.begin() + 1, valid.end());
  EXPECT_TRUE(std::equal(joined.begin(), joined.end(), doc.begin(), doc.end()));
}

TEST(SplitDocuments, CountsFractionsAndErrors) {
  const TokenDocuments two = NumberedDocuments({4, 4}, 999999);
  EXPECT_EQ(SplitDocuments(two, {.valid_fraction = 0.01}).valid_ids.size(), 1u);  // at least 1
  EXPECT_EQ(SplitDocuments(two, {.valid_fraction = 0.99}).train_ids.size(), 1u);  // keeps 1
  const TokenDocuments ten = NumberedDocuments(std::vector<int64_t>(10, 4), 999999);
  EXPECT_EQ(SplitDocuments(ten, {.valid_documents = 4}).valid_ids.size(), 4u);
  EXPECT_EQ(SplitDocuments(ten, {.valid_fraction = 0.25}).valid_ids.size(), 3u);  // round(2.5)

  const TokenDocuments one = NumberedDocuments({50}, 999999);
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(one, {.valid_documents = 1}); }),
                  "1 document(s): a held-out split by document needs at least 2");
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(NumberedDocuments({2}, 999999), {}); }),
                  "too short to hold any of it out");
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(ten, {.valid_fraction = 0.0}); }),
                  "valid_fraction=0: expected a fraction in (0, 1)");
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(ten, {.valid_fraction = 1.0}); }),
                  "valid_fraction=1");
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(ten, {.valid_documents = 10}); }),
                  "valid_documents=10: expected 1..9");
  EXPECT_CONTAINS(ErrorOf([&] { SplitDocuments(ten, {.valid_documents = 0}); }),
                  "valid_documents=0");
}

// ---------------------------------------------------------------------------------------------
// Windows

TEST(WindowSampler, CountsWindowsAndSkipsShortDocuments) {
  // seq_len 8: a window reads 9 tokens, so a document of n tokens has max(n - 8, 0) windows.
  const TokenDocuments docs = NumberedDocuments({3, 9, 10, 25, 5, 40}, 999999);
  const WindowSampler s(docs, 8);
  EXPECT_EQ(s.n_windows(), 0 + 1 + 2 + 17 + 0 + 32);
  EXPECT_EQ(s.skipped_documents(), 2);
  EXPECT_CONTAINS(ErrorOf([&] { WindowSampler(docs, 40); }),
                  "seq_len=40: no document has the 41 tokens a training window needs");
  EXPECT_CONTAINS(ErrorOf([&] { WindowSampler(docs, 40); }), "the longest of 6 has 40");
  EXPECT_CONTAINS(ErrorOf([&] { WindowSampler(docs, 0); }), "seq_len=0: expected at least 1");
  EXPECT_EQ(WindowSampler(docs, 39).n_windows(), 1);
}

TEST(WindowSampler, UniformOverEveryWindowInsideOneDocument) {
  const std::vector<int64_t> lengths = {3, 9, 10, 25, 5, 40};
  const TokenDocuments docs = NumberedDocuments(lengths, 999999);
  const int64_t T = 8;
  const WindowSampler s(docs, T);
  const int64_t cells = s.n_windows();  // 52 (document, offset) pairs
  const int64_t per_cell = 2000;
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;
  Rng rng(123);
  for (int64_t i = 0; i < cells * per_cell; ++i) {
    const Window w = s.Sample(rng);
    ASSERT_GE(w.offset, 0);
    ASSERT_EQ(w.length, T);
    ASSERT_LE(w.offset + T + 1, lengths[static_cast<size_t>(w.document)]);  // inside its document
    ++counts[{w.document, w.offset}];
  }
  ASSERT_EQ(static_cast<int64_t>(counts.size()), cells);  // every window drawn
  // Pearson's chi-square against uniform, 51 degrees of freedom: a uniform sampler exceeds 115
  // with probability about 1e-6 (Wilson-Hilferty: 51 (1 - 2/459 + 4.75 sqrt(2/459))^3 = 115).
  // Choosing the document uniformly instead of by its number of windows gives ~ 10^5.
  double chi2 = 0.0;
  for (const auto& [cell, n] : counts) {
    const double d = static_cast<double>(n - per_cell);
    chi2 += d * d / static_cast<double>(per_cell);
  }
  EXPECT_LT(chi2, 115.0);
}

TEST(WindowSampler, ReproducibleFromTheRngStateAlone) {
  const TokenDocuments docs = NumberedDocuments({30, 50, 12, 70}, 999999);
  const WindowSampler s(docs, 10);
  Rng rng(7);
  for (int i = 0; i < 13; ++i) s.Sample(rng);  // some training steps
  Rng saved = rng;                             // the trainer saves its Rng state
  std::vector<Window> first;
  for (int i = 0; i < 50; ++i) first.push_back(s.Sample(rng));
  const WindowSampler fresh(docs, 10);  // e.g. after a restart: rebuilt, no state of its own
  for (int i = 0; i < 50; ++i) {
    const Window w = fresh.Sample(saved);
    EXPECT_EQ(w.document, first[i].document);
    EXPECT_EQ(w.offset, first[i].offset);
  }
  EXPECT_EQ(saved.NextU64(), rng.NextU64());  // and both Rngs are in the same state
}

TEST(WindowSampler, BatchRowsAreShiftedWindowsOfOneDocument) {
  const TokenDocuments docs = NumberedDocuments({30, 50, 12, 70}, 999999);
  const WindowSampler s(docs, 10);
  Rng rng(3);
  const Batch batch = SampleBatch(docs, s, rng, 16);
  ASSERT_EQ(batch.inputs.size(), 16u * 10);
  ASSERT_EQ(batch.windows.size(), 16u);
  for (int64_t b = 0; b < 16; ++b) {
    const Window& w = batch.windows[static_cast<size_t>(b)];
    const auto doc = docs.Document(w.document);
    for (int64_t t = 0; t < 10; ++t) {
      EXPECT_EQ(batch.inputs[b * 10 + t], doc[w.offset + t]);
      EXPECT_EQ(batch.targets[b * 10 + t], doc[w.offset + t + 1]);
      if (w.offset + t > 0) {  // not BOS: the token names its document
        EXPECT_EQ(batch.inputs[b * 10 + t] / 1000, w.document);
      }
      EXPECT_EQ(batch.targets[b * 10 + t] / 1000, w.document);
    }
  }
  Rng again(3);
  EXPECT_EQ(SampleBatch(docs, s, again, 16).inputs, batch.inputs);
  EXPECT_CONTAINS(ErrorOf([&] { SampleBatch(docs, s, rng, 0); }), "batch_size=0");
}

TEST(UniformIndex, UnbiasedAndInRange) {
  Rng rng(11);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(UniformIndex(rng, 1), 0u);
  // n = 3 2^62: a plain NextU64() % n would put [0, 2^62) at probability 1/2 instead of 1/3.
  // Of 3000 draws, 1000 +- 5 sigma (sigma = sqrt(3000 * 1/3 * 2/3) = 25.8) fall there.
  const uint64_t big = uint64_t{3} << 62;
  int low = 0;
  for (int i = 0; i < 3000; ++i) {
    const uint64_t v = UniformIndex(rng, big);
    ASSERT_LT(v, big);
    low += v < (uint64_t{1} << 62) ? 1 : 0;
  }
  EXPECT_NEAR(low, 1000, 5 * 25.8);
  // 7 cells x 10000: chi-square with 6 degrees of freedom exceeds 35.9 with probability 1e-6.
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[UniformIndex(rng, 7)];
  double chi2 = 0.0;
  for (int c : counts) chi2 += (c - 10000.0) * (c - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 35.9);
}

TEST(ValidationWindows, FixedNonOverlappingAndEveryTargetOnce) {
  // Lengths 1 (BOS only: nothing to predict), 9, 17, 20 with T = 8: 0, 8, 16, 19 targets.
  const std::vector<int64_t> lengths = {1, 9, 17, 20};
  const TokenDocuments docs = NumberedDocuments(lengths, 999999);
  const std::vector<Window> keep = ValidationWindows(docs, 8, TailWindow::kKeep);
  std::vector<std::vector<int>> scored(lengths.size());
  for (size_t d = 0; d < lengths.size(); ++d) scored[d].assign(lengths[d], 0);
  for (const Window& w : keep) {
    ASSERT_LE(w.offset + w.length + 1, lengths[static_cast<size_t>(w.document)]);
    for (int64_t t = 0; t < w.length; ++t) ++scored[w.document][w.offset + t + 1];
  }
  for (size_t d = 0; d < lengths.size(); ++d) {
    EXPECT_EQ(scored[d][0], 0);  // BOS is never a target
    for (int64_t k = 1; k < lengths[d]; ++k) EXPECT_EQ(scored[d][k], 1) << d << " " << k;
  }
  std::vector<std::tuple<int64_t, int64_t, int64_t>> got;
  for (const Window& w : keep) got.emplace_back(w.document, w.offset, w.length);
  EXPECT_EQ(got, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                     {1, 0, 8}, {2, 0, 8}, {2, 8, 8}, {3, 0, 8}, {3, 8, 8}, {3, 16, 3}}));

  const std::vector<Window> drop = ValidationWindows(docs, 8, TailWindow::kDrop);
  EXPECT_EQ(drop.size(), 5u);
  for (const Window& w : drop) EXPECT_EQ(w.length, 8);
  EXPECT_CONTAINS(ErrorOf([&] { ValidationWindows(docs, 0, TailWindow::kKeep); }), "seq_len=0");
}

// ---------------------------------------------------------------------------------------------
// Unigram entropy

TEST(UnigramEntropy, HandComputedExamples) {
  // p = (1/2, 1/4, 1/4): H = 1/2 log2 2 + 2 (1/4 log2 4) = 1.5 bits = 1.5 ln 2 nats.
  const std::vector<int32_t> tokens = {0, 0, 1, 2};
  const Entropy e = UnigramEntropy(tokens, 4);
  EXPECT_NEAR(e.bits, 1.5, 1e-12);
  EXPECT_NEAR(e.nats, 1.5 * std::log(2.0), 1e-12);
  EXPECT_EQ(e.tokens, 4);
  EXPECT_EQ(e.distinct, 3);
  // The same tokens as documents: each document's BOS (3) is not counted.
  TokenDocuments docs;
  docs.Add(3, std::vector<int32_t>{0, 0});
  docs.Add(3, std::vector<int32_t>{1, 2});
  const Entropy d = UnigramEntropy(docs, 4);
  EXPECT_NEAR(d.bits, 1.5, 1e-12);
  EXPECT_EQ(d.tokens, 4);
  // All 256 ids equally often: 8 bits. One id only: 0.
  std::vector<int32_t> uniform;
  for (int r = 0; r < 3; ++r) {
    for (int32_t v = 0; v < 256; ++v) uniform.push_back(v);
  }
  EXPECT_NEAR(UnigramEntropy(uniform, 258).bits, 8.0, 1e-12);
  EXPECT_EQ(UnigramEntropy(std::vector<int32_t>(10, 5), 6).nats, 0.0);
  EXPECT_EQ(UnigramEntropy(std::vector<int32_t>{}, 6).tokens, 0);
}

// ---------------------------------------------------------------------------------------------
// Real books

TEST_F(DataTest, TwoGutenbergBooksWithBytes) {
  const std::vector<std::string> books = {"data/gutenberg/pg5200_metamorphosis.txt",
                                          "data/gutenberg/pg844_importance_of_being_earnest.txt"};
  for (const std::string& b : books) STRETCH_REQUIRE_SHARED(b);
  fs::create_directory(Path("books"));
  std::vector<std::string> texts;
  for (const std::string& b : books) {
    const std::string path = testing::SharedPath(b);
    fs::create_symlink(fs::absolute(path), Path("books/" + fs::path(path).filename().string()));
    texts.push_back(ReadBytes(path));
  }
  DataOptions opt;
  opt.corpus.path = Path("books");
  opt.cache_path = Path("books.cache");
  const CorpusData data = LoadCorpusData(opt);
  ASSERT_EQ(data.documents.size(), 2);
  for (int64_t d = 0; d < 2; ++d) {
    const auto doc = data.documents.Document(d);
    // One token per byte plus BOS; the books are ordered by file name (pg5200 < pg844).
    EXPECT_EQ(doc.size(), texts[static_cast<size_t>(d)].size() + 1);
    EXPECT_EQ(doc[0], TrainingTokenizer::kByteBos);
    EXPECT_EQ(data.tokenizer.Decode(doc), texts[static_cast<size_t>(d)]);
  }
  EXPECT_EQ(data.documents.n_tokens(), 119163 + 117987 + 2);  // the sizes in ../shared/data
  // The cache holds the same tokens, and is reused.
  const TokenCache cache = ReadTokenCache(Path("books.cache"));
  EXPECT_EQ(cache.meta.doc_tokens, (std::vector<int64_t>{119163, 117987}));
  EXPECT_EQ(LoadCorpusData(opt).cache, CacheUse::kReused);
  // English prose has a unigram byte entropy of about 4.1-4.6 bits.
  const Entropy e = UnigramEntropy(data.documents, data.tokenizer.vocab_size());
  EXPECT_GT(e.bits, 4.0);
  EXPECT_LT(e.bits, 4.8);
  EXPECT_EQ(e.tokens, 119163 + 117987);
  // One book each side; 512-token windows from either.
  const DataSplit split = SplitDocuments(data.documents, {.valid_fraction = 0.5, .seed = 1});
  EXPECT_EQ(split.train.size(), 1);
  EXPECT_EQ(split.valid.size(), 1);
  const WindowSampler sampler(split.train, 512);
  EXPECT_EQ(sampler.n_windows(), split.train.n_tokens() - 512);
  EXPECT_EQ(ValidationWindows(split.valid, 512, TailWindow::kDrop).size(),
            static_cast<size_t>((split.valid.n_tokens() - 1) / 512));
}

TEST(GutenbergBook, BpeRoundTripsAndCompresses) {
  const std::string book = "data/gutenberg/pg5200_metamorphosis.txt";
  STRETCH_REQUIRE_SHARED(book);
  const std::vector<std::string> docs = {ReadBytes(testing::SharedPath(book))};
  const TrainingTokenizer t =
      TrainingTokenizer::Train(docs, {.kind = TokenizerKind::kBpe, .vocab_size = 1000});
  const std::vector<int32_t> ids = t.Encode(docs[0]);
  EXPECT_EQ(t.Decode(ids), docs[0]);
  // A 1000-piece BPE on English: over 2.5 bytes per token (2.92 measured on this book).
  EXPECT_GT(static_cast<double>(docs[0].size()) / static_cast<double>(ids.size()), 2.5);
}

}  // namespace
}  // namespace stretch
