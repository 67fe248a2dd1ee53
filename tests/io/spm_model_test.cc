// Tests of SentencePiece model files (src/io/tokenizer/spm_model.h).
//
// The acceptance check: Meta's tokenizer.model through libsentencepiece and llama2.c's
// tokenizer.bin (exported from it) through the project's llama2.c encoder give the same ids on
// every Gutenberg book, each book encoded whole through the one EncodeText protocol
// (src/io/text.h). Then models we write from llama2.c vocabularies (tok512, LLaMA's 32000) must
// load in libsentencepiece and encode as the llama2.c encoder does, and read back bit-exact; the
// streaming decoder must give libsentencepiece's Decode; damaged files must be stretch::Error.
#include "src/io/tokenizer/spm_model.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/core/error.h"
#include "src/io/text.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::SharedPath;

const std::string kMetaModel = "models/llama2_tokenizer/tokenizer.model";
const std::string kMetaBin = "models/llama2_tokenizer/tokenizer.bin";
const std::string kTok512 = "models/stories260K/tok512.bin";
const std::string kGutenberg = "data/gutenberg";
const std::string kStories = "data/tinystories/TinyStories-validation-HF-first.txt";

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

class SentencePieceTest : public testing::TempDirTest {
 protected:
  SentencePieceTest() : TempDirTest("stretch_io_spm_") {}
};

// The Gutenberg books, in name order.
std::vector<std::string> Books() {
  std::vector<std::string> books;
  for (const auto& e : fs::directory_iterator(SharedPath(kGutenberg))) {
    if (e.path().extension() == ".txt") books.push_back(e.path().string());
  }
  std::sort(books.begin(), books.end());
  return books;
}

std::string Respell(std::string_view piece) {
  std::string out;
  for (const char c : piece) out += c == ' ' ? std::string(kSpace) : std::string(1, c);
  return out;
}

// Where two id streams of one text first differ, with the tokens around it and their text.
std::string FirstDifference(const std::vector<int>& spm, const std::vector<int>& l2c,
                            const Tokenizer& vocab) {
  size_t i = 0;
  while (i < spm.size() && i < l2c.size() && spm[i] == l2c[i]) ++i;
  if (i == spm.size() && i == l2c.size()) return "identical";
  auto around = [&](const std::vector<int>& ids) {
    std::string s;
    for (size_t k = i >= 8 ? i - 8 : 0; k < std::min(ids.size(), i + 8); ++k) {
      const int id = ids[k];
      const bool ok = id >= 0 && id < vocab.vocab_size();
      s += (k == i ? ">>" : " ") + std::to_string(id) + "\"" +
           (ok ? Respell(vocab.Piece(id)) : std::string("?")) + "\"";
    }
    return s;
  };
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(spm.size()) +
         " (SentencePiece) / " + std::to_string(l2c.size()) +
         " (llama2.c):\n  SentencePiece:" + around(spm) + "\n  llama2.c:     " + around(l2c);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// ---------------------------------------------------------------------------------------------
// a. The acceptance check: Meta's tokenizer.model (libsentencepiece) against tokenizer.bin
// (llama2.c's encoder) on every Gutenberg book.

// All 26 books (17 MB, about 4.5 million tokens each way) run in the Release suite: about 30 s of
// libsentencepiece on one core, the books spread over the machine's cores. Under the sanitizers
// the llama2.c encoder runs several times slower, so only the books whose names start with
// "nltk_" (8 of them, 4.4 MB) run there, unless STRETCH_SPM_ALL_BOOKS=1 is set.
TEST(SentencePieceAcceptance, MetaModelMatchesLlama2cOnEveryGutenbergBook) {
  STRETCH_REQUIRE_SHARED(kMetaModel);
  STRETCH_REQUIRE_SHARED(kMetaBin);
  STRETCH_REQUIRE_SHARED(kGutenberg);
  const auto start = std::chrono::steady_clock::now();
  const std::unique_ptr<TextTokenizer> spm = LoadSentencePieceModel(SharedPath(kMetaModel));
  const Tokenizer vocab = Tokenizer::LoadLlama2c(SharedPath(kMetaBin));
  const std::unique_ptr<TextTokenizer> l2c = MakeLlama2cTextTokenizer(vocab);
  std::vector<std::string> books = Books();
  ASSERT_EQ(books.size(), 26u);
  const char* all = std::getenv("STRETCH_SPM_ALL_BOOKS");
  if (STRETCH_ASAN && !(all != nullptr && std::string(all) == "1")) {
    std::erase_if(books, [](const std::string& b) {
      return !fs::path(b).filename().string().starts_with("nltk_");
    });
    ASSERT_EQ(books.size(), 8u);
  }
  struct Result {
    TextStream spm, l2c;
  };
  std::vector<Result> results(books.size());
  std::atomic<size_t> next = 0;
  auto work = [&] {
    for (size_t b = next++; b < books.size(); b = next++) {
      results[b].spm = spm->EncodeText(books[b]);
      results[b].l2c = l2c->EncodeText(books[b]);
    }
  };
  const size_t threads =
      std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::min<size_t>(books.size(), 8));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  int64_t tokens = 0, bytes = 0;
  for (size_t b = 0; b < books.size(); ++b) {
    const Result& r = results[b];
    ASSERT_EQ(r.spm.files, r.l2c.files);
    EXPECT_GT(r.spm.tokens.size(), static_cast<size_t>(r.spm.bytes / 8)) << books[b];
    EXPECT_TRUE(r.spm.tokens == r.l2c.tokens)
        << books[b] << ": " << FirstDifference(r.spm.tokens, r.l2c.tokens, vocab);
    tokens += static_cast<int64_t>(r.spm.tokens.size());
    bytes += r.spm.bytes;
  }
  std::cout << "[ compared ] " << books.size() << " books, " << bytes << " bytes, " << tokens
            << " tokens each way, identical; " << threads << " threads, " << Seconds(start)
            << " s\n";
}

// The same tokenizer both ways: libsentencepiece reads Meta's settings (BPE, byte fallback,
// identity normalization, dummy prefix, whitespace kept), and its vocabulary in llama2.c's
// spelling is tokenizer.bin, piece for piece and score for score.
TEST(SentencePieceAcceptance, MetaVocabularyIsTokenizerBin) {
  STRETCH_REQUIRE_SHARED(kMetaModel);
  STRETCH_REQUIRE_SHARED(kMetaBin);
  const std::string model = SharedPath(kMetaModel);
  EXPECT_TRUE(LooksLikeSentencePieceModel(model));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath(kMetaBin)));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath(kTok512)));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath("models/stories260K/stories260K.bin")));
  EXPECT_FALSE(
      LooksLikeSentencePieceModel(SharedPath("models/ggml_vocab/ggml-vocab-llama-spm.gguf")));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath(kStories)));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath("models")));
  EXPECT_FALSE(LooksLikeSentencePieceModel(SharedPath("no such file")));

  const SentencePieceVocabulary v = ReadSentencePieceVocabulary(model);
  ASSERT_EQ(v.pieces.size(), 32000u);
  const SentencePieceSettings& s = v.settings;
  EXPECT_EQ(s.model_type, 2);
  EXPECT_EQ(s.vocab_size, 32000);
  EXPECT_TRUE(s.byte_fallback);
  EXPECT_EQ(s.normalizer_name, "identity");
  EXPECT_FALSE(s.precompiled_charsmap);
  EXPECT_TRUE(s.add_dummy_prefix);
  EXPECT_FALSE(s.remove_extra_whitespaces);
  EXPECT_TRUE(s.escape_whitespaces);
  EXPECT_FALSE(s.denormalizer);
  EXPECT_EQ(s.unk_id, 0);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_EQ(s.pad_id, -1);
  EXPECT_EQ(v.types[0], SentencePieceType::kUnknown);
  EXPECT_EQ(v.types[1], SentencePieceType::kControl);
  EXPECT_EQ(v.types[2], SentencePieceType::kControl);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(v.types[3 + b], SentencePieceType::kByte);
  EXPECT_EQ(std::count(v.types.begin(), v.types.end(), SentencePieceType::kNormal), 32000 - 259);

  const Tokenizer bin = Tokenizer::LoadLlama2c(SharedPath(kMetaBin));
  const Tokenizer converted = Llama2cTokenizerFromSentencePiece(v);
  ASSERT_EQ(converted.vocab_size(), bin.vocab_size());
  for (int id = 0; id < bin.vocab_size(); ++id) {
    ASSERT_EQ(converted.Piece(id), bin.Piece(id)) << id;
    ASSERT_EQ(std::bit_cast<uint32_t>(converted.Score(id)), std::bit_cast<uint32_t>(bin.Score(id)))
        << id;
  }

  // libsentencepiece's own view of the vocabulary is ours.
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model).ok());
  ASSERT_EQ(sp.GetPieceSize(), 32000);
  for (int id = 0; id < 32000; ++id) {
    ASSERT_EQ(sp.IdToPiece(id), v.pieces[static_cast<size_t>(id)]) << id;
    ASSERT_EQ(std::bit_cast<uint32_t>(sp.GetScore(id)),
              std::bit_cast<uint32_t>(v.scores[static_cast<size_t>(id)]))
        << id;
    ASSERT_EQ(sp.IsByte(id), v.types[static_cast<size_t>(id)] == SentencePieceType::kByte) << id;
    ASSERT_EQ(sp.IsControl(id), v.types[static_cast<size_t>(id)] == SentencePieceType::kControl);
  }
}

// Text where whitespace, newlines, byte fallback and the dummy prefix meet: the same prompt ids
// (BOS, then the text) both ways.
TEST(SentencePieceAcceptance, MetaModelMatchesLlama2cOnEdgeCases) {
  STRETCH_REQUIRE_SHARED(kMetaModel);
  STRETCH_REQUIRE_SHARED(kMetaBin);
  const std::unique_ptr<TextTokenizer> spm = LoadSentencePieceModel(SharedPath(kMetaModel));
  const Tokenizer vocab = Tokenizer::LoadLlama2c(SharedPath(kMetaBin));
  const std::unique_ptr<TextTokenizer> l2c = MakeLlama2cTextTokenizer(vocab);
  EXPECT_EQ(spm->Name(), SharedPath(kMetaModel));
  EXPECT_EQ(spm->vocab_size(), 32000);
  EXPECT_EQ(spm->bos(), 1);
  EXPECT_EQ(spm->eos(), 2);
  EXPECT_EQ(spm->ProtocolText(), l2c->ProtocolText());
  const std::vector<std::string> texts = {
      "",
      " ",
      "  ",
      "\n",
      "\n\n\nHello",
      "Hello world",
      " Hello  world ",
      "   leading and trailing   ",
      "line one\nline two\n\n  indented\n\ttabbed\r\nwindows",
      "The quick brown fox jumps over the lazy dog.",
      "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9",
      "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",  // CJK
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 and \xF0\x9F\xA6\x99",                // byte fallback
      "\xEF\xBF\xBD replacement character",
      "e\xCC\x81 combining",
      "<s> </s> <unk> <0x0A> look like special pieces",
      "1234567890 3.14159 2024-01-01",
      "\x01\x02\x1F control bytes",
      "a",
      "\xF0\x9F\x98\x80",
      "    \n    \n",
  };
  for (const std::string& t : texts) {
    const std::vector<int> a = spm->EncodePrompt(t);
    const std::vector<int> b = l2c->EncodePrompt(t);
    EXPECT_TRUE(a == b) << "\"" << t << "\": " << FirstDifference(a, b, vocab);
  }
}

// Outside valid UTF-8 text without U+2581 the two encoders part, by design: libsentencepiece's
// normalizer replaces each byte of malformed UTF-8 with U+FFFD and reads U+2581 as a space, while
// llama2.c's encoder keeps the bytes. These are the documented limits of "the same ids".
TEST(SentencePieceAcceptance, KnownDifferencesOutsideValidText) {
  STRETCH_REQUIRE_SHARED(kMetaModel);
  STRETCH_REQUIRE_SHARED(kMetaBin);
  const std::unique_ptr<TextTokenizer> spm = LoadSentencePieceModel(SharedPath(kMetaModel));
  const Tokenizer vocab = Tokenizer::LoadLlama2c(SharedPath(kMetaBin));
  // A lone continuation byte: llama2.c gives its byte piece <0x80> (id 3 + 0x80).
  EXPECT_EQ(vocab.Encode("\x80", false, false), (std::vector<int>{29871, 3 + 0x80}));
  const std::vector<int> spm_ids = spm->EncodePrompt("\x80");
  EXPECT_NE(std::vector<int>(spm_ids.begin() + 1, spm_ids.end()),
            vocab.Encode("\x80", false, false));
  // U+2581 in text: a space to libsentencepiece, its three bytes to llama2.c.
  EXPECT_EQ(spm->EncodePrompt(std::string(kSpace) + "the"), spm->EncodePrompt(" the"));
  EXPECT_NE(vocab.Encode(std::string(kSpace) + "the", true, false),
            vocab.Encode(" the", true, false));
}

// ---------------------------------------------------------------------------------------------
// b. Writing llama2.c vocabularies as tokenizer.model

// The pieces section of a ModelProto: the leading field-1 records (tag 0x0A, varint length).
std::string PiecesSection(const std::string& model, size_t count) {
  size_t at = 0;
  for (size_t k = 0; k < count; ++k) {
    if (at >= model.size() || model[at] != '\x0A') return {};
    ++at;
    uint64_t len = 0;
    for (int shift = 0; at < model.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(model[at++]);
      len |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) break;
    }
    at += len;
  }
  return model.substr(0, std::min(at, model.size()));
}

// Writes `bin` as tokenizer.model and checks the file: libsentencepiece loads it and sees our
// pieces, scores and types; our reader gives them back bit-exact; in llama2.c's spelling it is
// the tokenizer we wrote; and libsentencepiece encodes `texts` (whole files) as llama2.c does.
void CheckWritten(const std::string& bin, const std::string& model,
                  const std::vector<std::string>& texts) {
  const Tokenizer t = Tokenizer::LoadLlama2c(bin);
  SaveSentencePieceModel(t, model);
  EXPECT_TRUE(LooksLikeSentencePieceModel(model));
  const int n = t.vocab_size();

  const SentencePieceVocabulary v = ReadSentencePieceVocabulary(model);
  ASSERT_EQ(v.pieces.size(), static_cast<size_t>(n));
  EXPECT_EQ(v.settings.model_type, 2);
  EXPECT_EQ(v.settings.vocab_size, n);
  EXPECT_TRUE(v.settings.byte_fallback);
  EXPECT_EQ(v.settings.normalizer_name, "identity");
  EXPECT_FALSE(v.settings.precompiled_charsmap);
  EXPECT_TRUE(v.settings.add_dummy_prefix);
  EXPECT_FALSE(v.settings.remove_extra_whitespaces);
  EXPECT_TRUE(v.settings.escape_whitespaces);
  EXPECT_EQ(v.settings.pad_id, -1);
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(model);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(sp.GetPieceSize(), n);
  EXPECT_EQ(sp.unk_id(), 0);
  EXPECT_EQ(sp.bos_id(), 1);
  EXPECT_EQ(sp.eos_id(), 2);
  EXPECT_EQ(sp.pad_id(), -1);
  for (int id = 0; id < n; ++id) {
    const size_t i = static_cast<size_t>(id);
    const std::string want = id == 0   ? "<unk>"
                             : id == 1 ? "<s>"
                             : id == 2 ? "</s>"
                                       : Respell(t.Piece(id));
    ASSERT_EQ(v.pieces[i], want) << id;
    ASSERT_EQ(sp.IdToPiece(id), want) << id;
    ASSERT_EQ(std::bit_cast<uint32_t>(v.scores[i]), std::bit_cast<uint32_t>(t.Score(id))) << id;
    ASSERT_EQ(std::bit_cast<uint32_t>(sp.GetScore(id)), std::bit_cast<uint32_t>(t.Score(id))) << id;
    const bool byte = id >= 3 && id < 259;
    ASSERT_EQ(v.types[i], id == 0  ? SentencePieceType::kUnknown
                          : id < 3 ? SentencePieceType::kControl
                          : byte   ? SentencePieceType::kByte
                                   : SentencePieceType::kNormal)
        << id;
    ASSERT_EQ(sp.IsByte(id), byte) << id;
    ASSERT_EQ(sp.IsControl(id), id == 1 || id == 2) << id;
    ASSERT_EQ(sp.IsUnknown(id), id == 0) << id;
  }
  // Back in llama2.c's spelling it is the file we started from, BOS and EOS spelled as llama2.c's
  // export spells them.
  const Tokenizer back = Llama2cTokenizerFromSentencePiece(v);
  ASSERT_EQ(back.vocab_size(), n);
  for (int id = 0; id < n; ++id) {
    ASSERT_EQ(back.Piece(id), t.Piece(id)) << id;
    ASSERT_EQ(std::bit_cast<uint32_t>(back.Score(id)), std::bit_cast<uint32_t>(t.Score(id))) << id;
  }

  const std::unique_ptr<TextTokenizer> spm = LoadSentencePieceModel(model);
  const std::unique_ptr<TextTokenizer> l2c = MakeLlama2cTextTokenizer(t);
  EXPECT_EQ(spm->ProtocolText(), l2c->ProtocolText());
  int64_t tokens = 0, bytes = 0;
  for (const std::string& text : texts) {
    const TextStream a = spm->EncodeText(text);
    const TextStream b = l2c->EncodeText(text);
    EXPECT_TRUE(a.tokens == b.tokens) << text << ": " << FirstDifference(a.tokens, b.tokens, t);
    tokens += static_cast<int64_t>(a.tokens.size());
    bytes += a.bytes;
  }
  std::cout << "[ written  ] " << bin << ": " << bytes << " bytes of text, " << tokens
            << " tokens each way\n";
}

TEST_F(SentencePieceTest, WrittenTok512EncodesAsLlama2c) {
  STRETCH_REQUIRE_SHARED(kTok512);
  STRETCH_REQUIRE_SHARED(kStories);
  STRETCH_REQUIRE_SHARED(kGutenberg);
  CheckWritten(SharedPath(kTok512), Path("tok512.model"),
               {SharedPath(kStories), SharedPath(kGutenberg + "/pg11_alice_in_wonderland.txt"),
                SharedPath(kGutenberg + "/pg1400_great_expectations.txt")});
}

TEST_F(SentencePieceTest, WrittenLlamaVocabularyEncodesAsLlama2cAndIsMetasPieces) {
  STRETCH_REQUIRE_SHARED(kMetaBin);
  STRETCH_REQUIRE_SHARED(kMetaModel);
  STRETCH_REQUIRE_SHARED(kStories);
  STRETCH_REQUIRE_SHARED(kGutenberg);
  const std::string model = Path("tokenizer.model");
  CheckWritten(SharedPath(kMetaBin), model,
               {SharedPath(kStories), SharedPath(kGutenberg + "/pg11_alice_in_wonderland.txt"),
                SharedPath(kGutenberg + "/pg1400_great_expectations.txt")});
  // Our pieces are Meta's, byte for byte (piece, fixed32 score, type only where not NORMAL).
  const std::string ours = PiecesSection(ReadBytes(model), 32000);
  const std::string metas = PiecesSection(ReadBytes(SharedPath(kMetaModel)), 32000);
  ASSERT_FALSE(ours.empty());
  EXPECT_EQ(ours.size(), metas.size());
  EXPECT_TRUE(ours == metas);
}

// A directory of texts: the same stream both ways (files in name order, each encoded whole).
TEST_F(SentencePieceTest, DirectoryStreamMatches) {
  STRETCH_REQUIRE_SHARED(kTok512);
  const Tokenizer t = Tokenizer::LoadLlama2c(SharedPath(kTok512));
  SaveSentencePieceModel(t, Path("tok512.model"));
  fs::create_directories(Path("texts"));
  File("texts/b.txt", "Then the dog ran home.\n");
  File("texts/a.txt", "Once upon a time\n\nthere was a cat.");
  File("texts/c.md", "not read");
  const TextStream a = LoadSentencePieceModel(Path("tok512.model"))->EncodeText(Path("texts"));
  const TextStream b = MakeLlama2cTextTokenizer(t)->EncodeText(Path("texts"));
  EXPECT_EQ(a.files, b.files);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.bytes, b.bytes);
  ASSERT_EQ(a.files.size(), 2u);
}

// A small llama2.c vocabulary: <unk>, <s>, </s>, the 256 byte pieces, then characters and merges.
Tokenizer SmallVocabulary(std::vector<std::string> extra = {},
                          std::vector<float> extra_scores = {}) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.emplace_back(buf);
    scores.push_back(0);
  }
  const std::vector<std::string> base = {" ", "a", "b", "c", "d", " a", "ab", "abc", " ab", "cd"};
  for (size_t k = 0; k < base.size(); ++k) {
    pieces.push_back(base[k]);
    scores.push_back(-static_cast<float>(k));
  }
  for (size_t k = 0; k < extra.size(); ++k) {
    pieces.push_back(extra[k]);
    scores.push_back(k < extra_scores.size() ? extra_scores[k] : -100.0f);
  }
  return Tokenizer::FromVocabulary("small vocabulary", std::move(pieces), std::move(scores));
}

TEST_F(SentencePieceTest, SmallVocabularyEncodesAsLlama2c) {
  const Tokenizer t = SmallVocabulary();
  SaveSentencePieceModel(t, Path("small.model"));
  const std::unique_ptr<TextTokenizer> spm = LoadSentencePieceModel(Path("small.model"));
  std::mt19937 rng(7);
  const std::string alphabet = "abcd  \n\xC3\xA9x";
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) text += alphabet[rng() % alphabet.size()];
    // Keep the text valid UTF-8: a lone byte of "é" becomes "e".
    std::string valid;
    for (size_t k = 0; k < text.size(); ++k) {
      if (text[k] == '\xC3' && k + 1 < text.size() && text[k + 1] == '\xA9') {
        valid += "\xC3\xA9";
        ++k;
      } else if (text[k] == '\xC3' || text[k] == '\xA9') {
        valid += 'e';
      } else {
        valid += text[k];
      }
    }
    EXPECT_EQ(spm->EncodePrompt(valid), t.Encode(valid, /*bos=*/true, /*eos=*/false))
        << "\"" << valid << "\"";
  }
}

// What cannot be written so that libsentencepiece encodes as llama2.c does is refused, naming why.
TEST_F(SentencePieceTest, RefusesVocabulariesThatWouldEncodeDifferently) {
  auto refused = [&](const Tokenizer& t) {
    return ErrorOf([&] { SaveSentencePieceModel(t, Path("refused.model")); });
  };
  EXPECT_NE(refused(SmallVocabulary({""})).find("is empty"), std::string::npos);
  EXPECT_NE(refused(SmallVocabulary({"x" + std::string(kSpace)})).find("holds U+2581"),
            std::string::npos);
  EXPECT_NE(refused(SmallVocabulary({"<0x0a>"})).find("lower-case hex"), std::string::npos);
  EXPECT_NE(refused(SmallVocabulary({"<s>"})).find("both \"<s>\""), std::string::npos);
  EXPECT_NE(refused(SmallVocabulary({"dd"}, {-1e10f})).find("score"), std::string::npos);
  EXPECT_NE(refused(SmallVocabulary({"az"})).find("no piece of its own"), std::string::npos);
  // "<0x" and "41>" as pieces would let llama2.c merge into the byte piece <0x41>.
  {
    const std::string e =
        refused(SmallVocabulary({"<", "0", "x", "<0", "<0x", "4", "1", ">", "41>"}));
    EXPECT_NE(e.find("merges \"<0x\" and \"41>\" into piece 68 \"<0x41>\""), std::string::npos)
        << e;
  }
  {
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
    const Tokenizer no_bytes = Tokenizer::FromVocabulary("no bytes", pieces, {0, 0, 0, 0, 0, -1});
    const std::string e = refused(no_bytes);
    EXPECT_NE(e.find("no bytes: cannot be written"), std::string::npos) << e;
    EXPECT_NE(e.find("0 of the 256 byte pieces"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(Path("refused.model")));
  // Every reason is listed, the first eight in full.
  const std::string many = refused(SmallVocabulary({"", "", "", "", "", "", "", "", "", ""}));
  EXPECT_NE(many.find("more"), std::string::npos) << many;
}

// A model whose settings llama2.c's encoder does not follow is refused as a llama2.c tokenizer,
// naming each setting.
TEST_F(SentencePieceTest, Llama2cConversionNamesEverySettingThatDiffers) {
  SaveSentencePieceModel(SmallVocabulary(), Path("small.model"));
  SentencePieceVocabulary v = ReadSentencePieceVocabulary(Path("small.model"));
  EXPECT_EQ(Llama2cTokenizerFromSentencePiece(v).vocab_size(), 269);
  v.settings.model_type = 1;
  v.settings.remove_extra_whitespaces = true;
  v.settings.precompiled_charsmap = true;
  v.types[268] = SentencePieceType::kUserDefined;  // "cd"
  const std::string e = ErrorOf([&] { Llama2cTokenizerFromSentencePiece(v); });
  EXPECT_NE(e.find("model_type=1: expected 2 (BPE)"), std::string::npos) << e;
  EXPECT_NE(e.find("remove_extra_whitespaces=true"), std::string::npos) << e;
  EXPECT_NE(e.find("precompiled_charsmap"), std::string::npos) << e;
  EXPECT_NE(e.find("has type 4: expected NORMAL or BYTE"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// The streaming decoder against libsentencepiece's Decode.

TEST_F(SentencePieceTest, DecoderMatchesSentencePieceDecode) {
  STRETCH_REQUIRE_SHARED(kMetaModel);
  const std::string model = SharedPath(kMetaModel);
  const std::unique_ptr<TextTokenizer> t = LoadSentencePieceModel(model);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model).ok());
  auto decode = [&](const std::vector<int>& ids) {
    std::string text;
    EXPECT_TRUE(sp.Decode(ids, &text).ok());
    return text;
  };
  // Ids of every kind: <unk>, <s>, </s>, bytes (UTF-8 lead and continuation bytes among them),
  // pieces with and without a leading space.
  const std::vector<int> kinds = {0,        1,        2,        3 + 0xE2, 3 + 0x82, 3 + 0xAC,
                                  3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 3 + 'a',  3 + 0xC3,
                                  3 + 0xFF, 3 + 0x0A, 29871,    278,      1576,     450,
                                  13,       29889,    259,      1678};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string text = trial % 3 == 0 ? "" : trial % 3 == 1 ? "Hello" : " \xE2\x82\xAC";
    const std::vector<int> prompt = trial % 5 == 4 ? std::vector<int>{} : t->EncodePrompt(text);
    std::vector<int> gen;
    const int len = static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      gen.push_back(rng() % 4 == 0 ? static_cast<int>(rng() % 32000) : kinds[rng() % kinds.size()]);
    }
    const std::unique_ptr<TokenTextDecoder> d = t->Decoder(prompt);
    std::string streamed;
    for (const int id : gen) streamed += d->Next(id);
    streamed += d->Finish();
    std::vector<int> all = prompt;
    all.insert(all.end(), gen.begin(), gen.end());
    EXPECT_EQ(decode(prompt) + streamed, decode(all)) << "trial " << trial;
  }
  // A character split over byte pieces appears when its last byte does.
  const std::unique_ptr<TokenTextDecoder> d = t->Decoder(std::vector<int>{1});
  EXPECT_EQ(d->Next(3 + 0xE2), "");
  EXPECT_EQ(d->Next(3 + 0x82), "");
  EXPECT_EQ(d->Next(3 + 0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(d->Next(3 + 0xE2), "");
  EXPECT_EQ(d->Finish(), "\xEF\xBF\xBD");
  EXPECT_NE(ErrorOf([&] { d->Next(32000); }).find("token id 32000 out of range"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// c. Damaged and hostile files

// Runs every reader on `bytes`, written to `path`; each must succeed or throw stretch::Error. The
// file is removed afterwards: rewriting a file in place (truncate, then write) makes ext4 flush
// it to disk each time (auto_da_alloc), milliseconds apiece, while a fresh file costs microseconds.
void ReadAll(const std::string& path, const std::string& bytes, bool* vocabulary_ok = nullptr,
             bool* model_ok = nullptr, bool* looks = nullptr) {
  testing::WriteBytes(path, bytes);
  struct Remove {
    const std::string& path;
    ~Remove() { fs::remove(path); }
  } remove{path};
  const bool l = LooksLikeSentencePieceModel(path);
  if (looks) *looks = l;
  bool v = false, m = false;
  try {
    ReadSentencePieceVocabulary(path);
    v = true;
  } catch (const Error&) {
  }
  try {
    LoadSentencePieceModel(path);
    m = true;
  } catch (const Error&) {
  }
  if (vocabulary_ok) *vocabulary_ok = v;
  if (model_ok) *model_ok = m;
}

TEST_F(SentencePieceTest, EveryTruncationIsAnError) {
  const std::string model = SerializeSentencePieceModel(SmallVocabulary());
  // The first piece's record: tag, length, then the piece message.
  const size_t first_record = 2 + static_cast<uint8_t>(model[1]);
  const std::string path = Path("cut.model");
  for (size_t n = 0; n < model.size(); ++n) {
    const std::string cut = model.substr(0, n);
    bool vocabulary_ok = true, model_ok = true;
    bool looks = false;
    ReadAll(path, cut, &vocabulary_ok, &model_ok, &looks);
    EXPECT_FALSE(vocabulary_ok) << "cut at " << n;
    EXPECT_FALSE(model_ok) << "cut at " << n;
    EXPECT_EQ(looks, n >= first_record) << "cut at " << n;
  }
  testing::WriteBytes(path, model.substr(0, model.size() / 2));
  const std::string e = ErrorOf([&] { ReadSentencePieceVocabulary(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("offset"), std::string::npos) << e;
  testing::WriteBytes(path, model);
  EXPECT_EQ(ReadSentencePieceVocabulary(path).pieces.size(), 269u);
}

TEST_F(SentencePieceTest, WrongWireTypesAndBadFieldsAreErrors) {
  const std::string model = SerializeSentencePieceModel(SmallVocabulary());
  ASSERT_EQ(model[0], '\x0A');
  ASSERT_EQ(model.substr(2, 7), std::string("\x0A\x05<unk>", 7));
  ASSERT_EQ(model[9], '\x15');  // score: field 2, fixed32
  auto error = [&](std::string bytes) {
    return ErrorOf([&] { ParseSentencePieceModel(bytes, "hostile.model"); });
  };
  auto with = [&](size_t at, char c) {
    std::string m = model;
    m[at] = c;
    return m;
  };
  EXPECT_NE(error(with(0, '\x08'))
                .find("ModelProto.pieces (field 1) at offset 0: wire type 0 "
                      "(varint), expected 2 (length-delimited)"),
            std::string::npos)
      << error(with(0, '\x08'));
  EXPECT_NE(error(with(9, '\x10')).find("pieces[0].score (field 2) at offset 9: wire type 0"),
            std::string::npos)
      << error(with(9, '\x10'));
  EXPECT_NE(error(with(0, '\x0B')).find("wire type 3 (start group)"), std::string::npos);
  EXPECT_NE(error(with(0, '\x0F')).find("an undefined wire type"), std::string::npos);
  EXPECT_NE(error(with(0, '\x00')).find("field number 0"), std::string::npos);
  EXPECT_NE(error(with(2, '\x0D')).find("pieces[0]"), std::string::npos);  // piece as fixed32
  // The type of <unk> (the byte after "\x18") out of range.
  {
    const size_t type_at = model.find('\x18', 2) + 1;
    ASSERT_EQ(model[type_at], '\x02');
    EXPECT_NE(error(with(type_at, '\x09')).find("pieces[0].type at offset"), std::string::npos);
  }
  // A varint of 11 bytes.
  EXPECT_NE(error(std::string(11, '\xFF') + "\x01").find("longer than 64 bits"), std::string::npos);
  // A length beyond the file.
  EXPECT_NE(error("\x0A\x7F\x0A\x01x").find("has length 127, but 3 bytes are left"),
            std::string::npos);
  EXPECT_NE(error("").find("empty"), std::string::npos);
  // trainer_spec as a varint: find its tag (0x12) after the pieces.
  {
    const std::string pieces = PiecesSection(model, 269);
    ASSERT_EQ(model[pieces.size()], '\x12');
    EXPECT_NE(error(with(pieces.size(), '\x10')).find("ModelProto.trainer_spec (field 2)"),
              std::string::npos);
    // Only the pieces: no trainer_spec, no normalizer_spec.
    EXPECT_NE(error(pieces).find("no trainer_spec or normalizer_spec"), std::string::npos);
  }
  // Not a model at all.
  STRETCH_REQUIRE_SHARED(kMetaBin);
  EXPECT_NE(ErrorOf([&] {
              ReadSentencePieceVocabulary(SharedPath(kMetaBin));
            }).find(SharedPath(kMetaBin)),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { LoadSentencePieceModel(Path("missing.model")); }).find("missing.model"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { LoadSentencePieceModel(dir_.string()); }).find(dir_.string()),
            std::string::npos);
}

TEST_F(SentencePieceTest, RandomByteFlipsNeverCrash) {
  const std::string model = SerializeSentencePieceModel(SmallVocabulary());
  std::mt19937 rng(2024);
  const std::string path = Path("flipped.model");
  int vocabulary_errors = 0, model_errors = 0;
  const int trials = STRETCH_ASAN ? 400 : 2000;
  for (int trial = 0; trial < trials; ++trial) {
    std::string m = model;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      m[rng() % m.size()] ^= static_cast<char>(1 << (rng() % 8));
    }
    bool vocabulary_ok = false, model_ok = false;
    ReadAll(path, m, &vocabulary_ok, &model_ok);
    vocabulary_errors += !vocabulary_ok;
    model_errors += !model_ok;
  }
  // Most flips land in piece text or scores and leave a readable model; some must not.
  EXPECT_GT(vocabulary_errors, 0);
  EXPECT_GE(model_errors, vocabulary_errors);
  std::cout << "[ flipped  ] " << trials << " models: " << vocabulary_errors
            << " refused by our reader, " << model_errors << " by LoadSentencePieceModel\n";
}

}  // namespace
}  // namespace stretch
