// Tests of Hugging Face tokenizer.json files of the SentencePiece kind
// (src/io/tokenizer/hf_tokenizer_json.h).
//
// The acceptance check: LLaMA's tokenizer.bin (and stories260K's tok512.bin) written as a
// tokenizer.json and read back encode three Gutenberg books (and TinyStories) to the ids
// tokenizer.bin gives, and so does a reference of Hugging Face's own pipeline run on the file's
// merge ranks (HfReference below, written from tokenizers' sources), for the list order
// transformers 4.x writes and the one transformers 5 writes. Then hand-written files of both
// generations (normalizer Prepend + Replace; Metaspace) whose ids are worked out by hand, and
// damaged files, each refused naming its field.
#include "src/io/tokenizer/hf_tokenizer_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/io/text.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::SharedPath;

const std::string kMetaBin = "models/llama2_tokenizer/tokenizer.bin";
const std::string kTok512 = "models/stories260K/tok512.bin";
const std::string kStories = "data/tinystories/TinyStories-validation-HF-first.txt";
// Three books: prose with dialogue and indented verse (runs of up to 14 spaces), prose with
// accents, dashes and curly quotes and runs of up to 43 spaces, and verse indented by up to 46
// (runs of spaces are the pieces LLaMA ties in score).
const std::vector<std::string> kBooks = {"data/gutenberg/pg11_alice_in_wonderland.txt",
                                         "data/gutenberg/pg64317_great_gatsby.txt",
                                         "data/gutenberg/pg236_the_jungle_book.txt"};
// Under the sanitizers the encoders run several times slower: each book's first 96 KiB only.
constexpr size_t kSanitizerBookBytes = 96 * 1024;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

std::string BytePiece(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

size_t CodePoints(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Hugging Face's pipeline for these files, written from huggingface/tokenizers' sources and run
// on the file's own merge ranks: the normalizer (normalizers/prepend.rs: "▁" before a non-empty
// text; replace.rs: every " " to "▁") or Metaspace (pre_tokenizers/metaspace.rs: spaces to "▁",
// "▁" before a text that does not begin with one, no split), one symbol per character or one
// "<0xXX>" per byte of a character not in the vocabulary (models/bpe/model.rs merge_word), then
// word.rs merge_all: a min-heap of (rank, position), an entry skipped when its symbol is gone or
// its pair no longer makes the same piece, the new pairs on both sides pushed after each merge.
// The post-processor's <s> is added when its template begins with it. Added tokens are not
// matched in the text (stretch does not, and the texts below hold none).
class HfReference {
 public:
  explicit HfReference(const std::string& path) {
    const json root = json::parse(ReadBytes(path));
    for (const auto& [piece, id] : root["model"]["vocab"].items()) {
      vocab_.emplace(piece, id.get<int>());
    }
    int rank = 0;
    for (const json& m : root["model"]["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        a = s.substr(0, s.find(' '));
        b = s.substr(s.find(' ') + 1);
      } else {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      merges_[Key(vocab_.at(a), vocab_.at(b))] = {rank++, vocab_.at(a + b)};
    }
    metaspace_ = root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null();
    const json& pp = root["post_processor"];
    bos_ = pp.is_object() && pp["single"][0].contains("SpecialToken");
  }

  std::vector<int> Encode(std::string_view text) const {
    std::string s = ReplaceAll(text, " ", kSpace);
    if (!s.empty() && !(metaspace_ && s.starts_with(kSpace))) s = std::string(kSpace) + s;
    struct Symbol {
      int id, prev, next;
      bool live;
    };
    std::vector<Symbol> sym;
    for (size_t i = 0; i < s.size();) {
      size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      const auto it = vocab_.find(s.substr(i, j - i));
      if (it != vocab_.end()) {
        sym.push_back({it->second, 0, 0, true});
      } else {
        for (size_t k = i; k < j; ++k) {
          sym.push_back({vocab_.at(BytePiece(static_cast<unsigned char>(s[k]))), 0, 0, true});
        }
      }
      i = j;
    }
    const int n = static_cast<int>(sym.size());
    for (int k = 0; k < n; ++k) {
      sym[static_cast<size_t>(k)].prev = k - 1;
      sym[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;
    }
    struct Entry {
      int rank, pos, new_id;
      bool operator>(const Entry& o) const {
        return std::pair(rank, pos) > std::pair(o.rank, o.pos);
      }
    };
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    auto push = [&](int pos) {
      if (pos < 0) return;
      const Symbol& l = sym[static_cast<size_t>(pos)];
      if (l.next < 0) return;
      const auto it = merges_.find(Key(l.id, sym[static_cast<size_t>(l.next)].id));
      if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
    };
    for (int k = 0; k + 1 < n; ++k) push(k);
    while (!queue.empty()) {
      const Entry top = queue.top();
      queue.pop();
      Symbol& l = sym[static_cast<size_t>(top.pos)];
      if (!l.live || l.next < 0) continue;
      Symbol& r = sym[static_cast<size_t>(l.next)];
      const auto it = merges_.find(Key(l.id, r.id));
      if (it == merges_.end() || it->second.second != top.new_id) continue;
      l.id = top.new_id;
      r.live = false;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = top.pos;
      push(l.prev);
      push(top.pos);
    }
    std::vector<int> ids;
    if (bos_) ids.push_back(Tokenizer::kBos);
    for (int k = n > 0 ? 0 : -1; k >= 0; k = sym[static_cast<size_t>(k)].next) {
      ids.push_back(sym[static_cast<size_t>(k)].id);
    }
    return ids;
  }

 private:
  static uint64_t Key(int a, int b) {
    return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b);
  }
  std::unordered_map<std::string, int> vocab_;
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;  // pair -> (rank, new id)
  bool metaspace_ = false;
  bool bos_ = false;
};

// Where two id streams first differ, with the pieces around it.
std::string FirstDifference(const std::vector<int>& a, const std::vector<int>& b,
                            const Tokenizer& vocab) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "identical";
  auto around = [&](const std::vector<int>& ids) {
    std::string s;
    for (size_t k = i >= 6 ? i - 6 : 0; k < std::min(ids.size(), i + 6); ++k) {
      const int id = ids[k];
      const bool ok = id >= 0 && id < vocab.vocab_size();
      s += (k == i ? " >>" : " ") + std::to_string(id) + "\"" +
           (ok ? ReplaceAll(vocab.Piece(id), " ", kSpace) : std::string("?")) + "\"";
    }
    return s;
  };
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(a.size()) +
         " / " + std::to_string(b.size()) + ":\n  " + around(a) + "\n  " + around(b);
}

// Text where the prefix, whitespace, newlines and byte fallback meet (valid UTF-8, no special
// tokens written in it: the texts Hugging Face's ids are defined for here).
const std::vector<std::string> kEdgeTexts = {
    "",
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n\nHello",
    "Hello world",
    " Hello  world ",
    "   leading and trailing   ",
    "double  space and  more   spaces",
    "line one\nline two\n\n  indented\n\ttabbed\r\nwindows",
    "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9",
    "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",  // CJK
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 and \xF0\x9F\xA6\x99",                // byte fallback
    "\xEF\xBF\xBD replacement character",
    "e\xCC\x81 combining",
    "1234567890 3.14159 2024-01-01",
    "\x01\x02\x1F control bytes \x7F",
    "a",
    "\xF0\x9F\x98\x80",
    "    \n    \n",
    "\xE2\x96\x81",                   // U+2581 alone
    "\xE2\x96\x81word \xE2\x96\x81",  // U+2581 as Hugging Face's space
    " \xE2\x96\x81 leading",
};

// Where llama2.c's encoder and Hugging Face's part by design (see the header): U+2581 in the
// text, and for the Metaspace form a leading space.
bool HoldsSpaceSymbol(std::string_view s) { return s.find(kSpace) != std::string_view::npos; }

// Checks one tokenizer.json against the llama2.c tokenizer it was written from and against the
// reference pipeline: whole texts and every run of 1..200 spaces (alone and between words).
// Returns the number of tokens compared.
int64_t CompareOnTexts(const Tokenizer& bin, const HfSentencePieceJson& read, const HfReference& hf,
                       const std::vector<std::string>& texts, const std::string& what,
                       bool compare_with_bin) {
  int64_t tokens = 0;
  for (const std::string& t : texts) {
    const std::vector<int> ours = read.tokenizer.Encode(t, false, false);
    if (compare_with_bin) {
      const std::vector<int> want = bin.Encode(t, false, false);
      EXPECT_TRUE(ours == want) << what << " vs tokenizer.bin on " << t.size()
                                << " bytes: " << FirstDifference(want, ours, bin);
    }
    const std::vector<int> theirs = hf.Encode(t);
    const std::vector<int> as_hf = EncodeAsHuggingFace(read, t);
    EXPECT_TRUE(as_hf == theirs) << what << " vs Hugging Face's pipeline on " << t.size()
                                 << " bytes: " << FirstDifference(theirs, as_hf, bin);
    if (read.prefix == HfSpacePrefix::kAlways && !HoldsSpaceSymbol(t)) {
      std::vector<int> with_bos = ours;
      with_bos.insert(with_bos.begin(), Tokenizer::kBos);
      EXPECT_TRUE(as_hf == with_bos) << what << ": EncodeAsHuggingFace is BOS + Encode";
    }
    tokens += static_cast<int64_t>(ours.size());
  }
  return tokens;
}

std::vector<std::string> SpaceRuns() {
  std::vector<std::string> texts;
  for (int n = 1; n <= 200; ++n) {
    texts.push_back(std::string(static_cast<size_t>(n), ' '));
    texts.push_back("a" + std::string(static_cast<size_t>(n), ' ') + "b\n" +
                    std::string(static_cast<size_t>(n), ' ') + "the");
  }
  return texts;
}

std::string BookText(const std::string& relative) {
  std::string text = ReadWholeFile(SharedPath(relative), "a text file");
  if (STRETCH_ASAN && text.size() > kSanitizerBookBytes) {
    size_t cut = kSanitizerBookBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
  }
  return text;
}

class HfTokenizerJsonTest : public testing::TempDirTest {
 protected:
  HfTokenizerJsonTest() : TempDirTest("stretch_io_hfjson_") {}
};

// ---------------------------------------------------------------------------------------------
// a. The acceptance check: LLaMA's tokenizer.bin through a tokenizer.json.

// Release: 3 books (697 KB, about 200,000 tokens), each encoded 5 times (tokenizer.bin; the file
// read back; the reference pipeline; both again for the transformers 5 list order), about 3 s on
// one core of the 2-core CI machine. Under the sanitizers each book's first 96 KiB. (All 26 books,
// 17.6 MB and 4,960,371 tokens, were compared once the same way: identical, in 57 s.)
TEST_F(HfTokenizerJsonTest, Llama2RoundTripEncodesBooksAsTokenizerBin) {
  STRETCH_REQUIRE_SHARED(kMetaBin);
  for (const std::string& b : kBooks) STRETCH_REQUIRE_SHARED(b);
  const auto start = std::chrono::steady_clock::now();
  const Tokenizer bin = Tokenizer::LoadLlama2c(SharedPath(kMetaBin));
  const std::string path = Path("tokenizer.json");
  SaveSentencePieceTokenizerJson(bin, path);
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(path));
  const HfSentencePieceJson read = ReadHfSentencePieceJson(path);
  ASSERT_EQ(read.tokenizer.vocab_size(), 32000);
  for (int id = 0; id < 32000; ++id) ASSERT_EQ(read.tokenizer.Piece(id), bin.Piece(id)) << id;
  // 61249: the count of merges in Meta's Llama-2 tokenizer.json, which the same extractor wrote.
  EXPECT_EQ(read.merge_count, 61249);
  EXPECT_EQ(read.prefix, HfSpacePrefix::kAlways);
  EXPECT_TRUE(read.add_bos);
  EXPECT_FALSE(read.add_eos);
  EXPECT_EQ(read.tokenizer.Piece(read.space_id), " ");
  EXPECT_EQ(read.interleaved_pieces, 0);
  // Written again from what was read, the file is the same bytes: the ranks order the pieces as
  // the scores did.
  EXPECT_TRUE(SerializeSentencePieceTokenizerJson(read.tokenizer) == ReadBytes(path));
  const HfReference hf(path);

  // The transformers 5 form of the same vocabulary: Metaspace "first", merges as pairs, sorted by
  // (score, len(left), len(right)) descending (generate_merges), which interleaves the merges
  // of LLaMA's 15 runs of spaces tied at -1e9.
  json j = json::parse(ReadBytes(path));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kSpace},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  struct Pair {
    float score;
    size_t left_len, right_len;
    std::string left, right;
  };
  std::vector<Pair> pairs;
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const std::string a = s.substr(0, s.find(' ')), b = s.substr(s.find(' ') + 1);
    const int id = j["model"]["vocab"][a + b].get<int>();
    pairs.push_back({bin.Score(id), CodePoints(a), CodePoints(b), a, b});
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) {
    return std::tuple(x.score, x.left_len, x.right_len) >
           std::tuple(y.score, y.left_len, y.right_len);
  });
  json merges = json::array();
  for (const Pair& p : pairs) merges.push_back({p.left, p.right});
  j["model"]["merges"] = merges;
  const std::string path5 = File("tokenizer5.json", j.dump());
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(path5));
  const HfSentencePieceJson read5 = ReadHfSentencePieceJson(path5);
  EXPECT_EQ(read5.prefix, HfSpacePrefix::kUnlessSpace);
  EXPECT_EQ(read5.merge_count, 61249);
  EXPECT_EQ(read5.interleaved_pieces, 14);
  const HfReference hf5(path5);

  int64_t tokens = 0, bytes = 0;
  for (const std::string& b : kBooks) {
    const std::string text = BookText(b);
    bytes += static_cast<int64_t>(text.size());
    tokens += CompareOnTexts(bin, read, hf, {text}, b, /*compare_with_bin=*/true);
    // The Metaspace form adds no prefix before a leading space: no book begins with one.
    ASSERT_FALSE(text.starts_with(' '));
    CompareOnTexts(bin, read5, hf5, {text}, b + " (transformers 5 form)", true);
  }
  for (const HfSentencePieceJson* r : {&read, &read5}) {
    const HfReference& h = r == &read ? hf : hf5;
    const std::string what = r == &read ? "edge texts" : "edge texts (transformers 5 form)";
    CompareOnTexts(bin, *r, h, kEdgeTexts, what, true);
    CompareOnTexts(bin, *r, h, SpaceRuns(), what + ", runs of spaces", true);
  }
  // Special tokens written in the text are spelled out, as tokenizer.bin's encoder does.
  const std::string special = "<s> </s> <unk> <0x0A> look like special pieces";
  EXPECT_EQ(read.tokenizer.Encode(special, true, true), bin.Encode(special, true, true));
  std::cout << "[ compared ] " << kBooks.size() << " books, " << bytes << " bytes, " << tokens
            << " tokens: identical to tokenizer.bin and to Hugging Face's pipeline, both list "
               "orders; "
            << Seconds(start) << " s\n";
}

// stories260K's 512-token vocabulary on the TinyStories file.
TEST_F(HfTokenizerJsonTest, Tok512RoundTripEncodesTinyStoriesAsTokenizerBin) {
  STRETCH_REQUIRE_SHARED(kTok512);
  STRETCH_REQUIRE_SHARED(kStories);
  const Tokenizer bin = Tokenizer::LoadLlama2c(SharedPath(kTok512));
  const std::string path = Path("tokenizer.json");
  SaveSentencePieceTokenizerJson(bin, path);
  const HfSentencePieceJson read = ReadHfSentencePieceJson(path);
  ASSERT_EQ(read.tokenizer.vocab_size(), 512);
  for (int id = 0; id < 512; ++id) ASSERT_EQ(read.tokenizer.Piece(id), bin.Piece(id)) << id;
  EXPECT_EQ(read.merge_count, 165);
  // The first merge is the piece scored -0.0, " t" (an extractor testing `if piece_score:`
  // would have dropped it).
  const json j = json::parse(ReadBytes(path));
  EXPECT_EQ(j["model"]["merges"][0], "\xE2\x96\x81 t");
  const HfReference hf(path);
  std::string text = BookText(kStories);
  const int64_t tokens = CompareOnTexts(bin, read, hf, {text}, kStories, true);
  EXPECT_GT(tokens, static_cast<int64_t>(text.size() / 8));
  CompareOnTexts(bin, read, hf, kEdgeTexts, "tok512 edge texts", true);
  std::cout << "[ compared ] " << text.size() << " bytes, " << tokens << " tokens: identical\n";
}

// What the writer puts around the vocabulary: LlamaConverter's legacy form, read as tokenizers
// reads it.
TEST_F(HfTokenizerJsonTest, WrittenFileHasLlamaConvertersForm) {
  STRETCH_REQUIRE_SHARED(kTok512);
  const Tokenizer bin = Tokenizer::LoadLlama2c(SharedPath(kTok512));
  const std::string path = Path("tokenizer.json");
  SaveSentencePieceTokenizerJson(bin, path);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename(), "tokenizer.json") << "a partial file was left behind";
  }
  const json j = json::parse(ReadBytes(path));
  const json normalizer = json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})");
  EXPECT_EQ(j["normalizer"], normalizer);
  EXPECT_TRUE(j["pre_tokenizer"].is_null());
  const json decoder = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  EXPECT_EQ(j["decoder"], decoder);
  EXPECT_EQ(j["post_processor"]["type"], "TemplateProcessing");
  EXPECT_EQ(j["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(j["post_processor"]["special_tokens"]["<s>"]["ids"], json::array({1}));
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  for (int id = 0; id < 3; ++id) {
    const json& t = j["added_tokens"][static_cast<size_t>(id)];
    EXPECT_EQ(t["id"], id);
    EXPECT_EQ(t["content"],
              std::vector<std::string>({"<unk>", "<s>", "</s>"})[static_cast<size_t>(id)]);
    EXPECT_EQ(t["special"], true);
  }
  const json& model = j["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["byte_fallback"], true);
  EXPECT_EQ(model["fuse_unk"], true);
  EXPECT_EQ(model["unk_token"], "<unk>");
  EXPECT_EQ(model["vocab"].size(), 512u);
  EXPECT_EQ(model["vocab"]["<0x0A>"], 3 + 10);
  EXPECT_EQ(model["vocab"]["\xE2\x96\x81t"], 259);
  // Merges in score order: the merged piece's score never rises along the list.
  float last = 0.0f;
  for (const json& m : model["merges"]) {
    const std::string s = m.get<std::string>();
    const std::string merged =
        ReplaceAll(s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1), kSpace, " ");
    int id = -1;
    for (int k = 0; k < bin.vocab_size(); ++k) {
      if (bin.Piece(k) == merged) id = k;
    }
    ASSERT_GE(id, 0) << s;
    EXPECT_LE(bin.Score(id), last) << s;
    last = bin.Score(id);
  }
}

// ---------------------------------------------------------------------------------------------
// b. Hand-written files of both generations.

// <unk> <s> </s>, the 256 byte pieces (3..258), then:
//   259 ▁  260 a  261 b  262 c  263 ab  264 ▁a  265 bc  266 ▁ab  267 abc  268 ▁▁
// with merges (rank: pair):
//   0: a b   1: ▁ a   2: ▁a b   3: ▁ ab   4: b c   5: ab c   6: a bc   7: ▁ ▁
json TinyVocab() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[BytePiece(b)] = 3 + b;
  const std::vector<std::string> rest = {"▁", "a", "b", "c", "ab", "▁a", "bc", "▁ab", "abc", "▁▁"};
  for (size_t k = 0; k < rest.size(); ++k) vocab[rest[k]] = 259 + static_cast<int>(k);
  return vocab;
}

json AddedTokens() {
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back(
        {{"id", id},
         {"content", std::vector<std::string>({"<unk>", "<s>", "</s>"})[static_cast<size_t>(id)]},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}});
  }
  return added;
}

// The Llama-2 era form: normalizer Prepend + Replace, merges as "a b" strings.
json TinyLegacy() {
  return json::parse(R"({
    "version": "1.0",
    "truncation": null,
    "padding": null,
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
      "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
      "byte_fallback": true,
      "merges": ["a b", "▁ a", "▁a b", "▁ ab", "b c", "ab c", "a bc", "▁ ▁"]}
  })");
}

// The non-legacy form (tokenizers >= 0.20 as transformers writes it): no normalizer, Metaspace
// "first" without split, merges as pairs, ignore_merges false; <s> and </s> added.
json TinyMetaspace() {
  return json::parse(R"({
    "version": "1.0",
    "truncation": null,
    "padding": null,
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                      "split": false},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
      "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
      "byte_fallback": true, "ignore_merges": false,
      "merges": [["a", "b"], ["▁", "a"], ["▁a", "b"], ["▁", "ab"], ["b", "c"], ["ab", "c"],
                 ["a", "bc"], ["▁", "▁"]]}
  })");
}

json WithVocab(json j) {
  j["model"]["vocab"] = TinyVocab();
  j["added_tokens"] = AddedTokens();
  return j;
}

constexpr int kByte0 = 3;  // id of <0x00>
enum : int { kSp = 259, kA, kB, kC, kAB, kSpA, kBC, kSpAB, kABC, kSpSp };

TEST_F(HfTokenizerJsonTest, TinyLegacyFormReadsAndEncodesByRank) {
  const std::string path = File("tokenizer.json", WithVocab(TinyLegacy()).dump(2));
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(path));
  const HfSentencePieceJson t = ReadHfSentencePieceJson(path);
  EXPECT_EQ(t.prefix, HfSpacePrefix::kAlways);
  EXPECT_TRUE(t.add_bos);
  EXPECT_FALSE(t.add_eos);
  EXPECT_EQ(t.merge_count, 8);
  EXPECT_EQ(t.space_id, kSp);
  const Tokenizer& k = t.tokenizer;
  ASSERT_EQ(k.vocab_size(), 269);
  EXPECT_EQ(k.Piece(0), "<unk>");
  EXPECT_EQ(k.Piece(1), "\n<s>\n");
  EXPECT_EQ(k.Piece(kSpAB), " ab");
  // Scores: minus the rank of the first merge making the piece; below -1e10 for the rest.
  EXPECT_EQ(k.Score(kAB), -0.0f);
  EXPECT_EQ(k.Score(kSpA), -1.0f);
  EXPECT_EQ(k.Score(kSpAB), -2.0f);
  EXPECT_EQ(k.Score(kABC), -5.0f);
  EXPECT_EQ(k.Score(kSpSp), -7.0f);
  for (int id : std::vector<int>{0, 1, 2, kByte0, kSp, kA, kC})
    EXPECT_LT(k.Score(id), -1e10f) << id;

  using Ids = std::vector<int>;
  // "▁ a b": a b (rank 0) first, then ▁ ab (rank 3).
  EXPECT_EQ(k.Encode("ab", false, false), (Ids{kSpAB}));
  // "▁ a b c": a b, then ▁ ab (rank 3) before ab c (rank 5).
  EXPECT_EQ(k.Encode("abc", false, false), (Ids{kSpAB, kC}));
  EXPECT_EQ(k.Encode("bc", false, false), (Ids{kSp, kBC}));
  // "▁ a ▁ ▁ b": ▁ a (1), then ▁ ▁ (7).
  EXPECT_EQ(k.Encode("a  b", false, false), (Ids{kSpA, kSpSp, kB}));
  // " ab": "▁ ▁ a b" -> a b, then ▁ ab (3) before ▁ ▁ (7).
  EXPECT_EQ(k.Encode(" ab", false, false), (Ids{kSp, kSpAB}));
  EXPECT_EQ(k.Encode("\xC3\xA9", false, false), (Ids{kSp, kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(k.Encode("", false, false), Ids{});
  // Hugging Face: <s> first; a U+2581 in the text is a space.
  EXPECT_EQ(EncodeAsHuggingFace(t, "ab"), (Ids{1, kSpAB}));
  EXPECT_EQ(EncodeAsHuggingFace(t, ""), (Ids{1}));
  EXPECT_EQ(EncodeAsHuggingFace(t,
                                "\xE2\x96\x81"
                                "a"),
            (Ids{1, kSp, kSpA}));
  EXPECT_EQ(k.Encode("\xE2\x96\x81"
                     "a",
                     false, false),
            (Ids{kSp, kByte0 + 0xE2, kByte0 + 0x96, kByte0 + 0x81, kA}));
  const HfReference hf(path);
  for (const std::string& s : kEdgeTexts) EXPECT_EQ(EncodeAsHuggingFace(t, s), hf.Encode(s)) << s;
  for (const char* s : {"ab", "abc", "bc", "a  b", " ab", "cabbc abcab  bca"}) {
    EXPECT_EQ(EncodeAsHuggingFace(t, s), hf.Encode(s)) << s;
  }
}

TEST_F(HfTokenizerJsonTest, TinyMetaspaceFormReadsAndKeepsALeadingSpace) {
  const std::string path = File("tokenizer.json", WithVocab(TinyMetaspace()).dump());
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(path));
  const HfSentencePieceJson t = ReadHfSentencePieceJson(path);
  EXPECT_EQ(t.prefix, HfSpacePrefix::kUnlessSpace);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_eos);
  EXPECT_EQ(t.merge_count, 8);
  using Ids = std::vector<int>;
  const Tokenizer& k = t.tokenizer;
  EXPECT_EQ(k.Encode("abc", false, false), (Ids{kSpAB, kC}));
  // " ab": Metaspace sees "▁ab", which begins with "▁": no prefix, so ▁ab alone, where the
  // legacy form (and llama2.c's encoder) see "▁▁ab".
  EXPECT_EQ(EncodeAsHuggingFace(t, " ab"), (Ids{1, kSpAB, 2}));
  EXPECT_EQ(k.Encode(" ab", false, false), (Ids{kSp, kSpAB}));
  EXPECT_EQ(EncodeAsHuggingFace(t, " "), (Ids{1, kSp, 2}));
  EXPECT_EQ(EncodeAsHuggingFace(t, "  "), (Ids{1, kSpSp, 2}));
  EXPECT_EQ(EncodeAsHuggingFace(t, "ab"), (Ids{1, kSpAB, 2}));
  EXPECT_EQ(EncodeAsHuggingFace(t, ""), (Ids{1, 2}));
  const HfReference hf(path);
  for (const std::string& s : kEdgeTexts) {
    Ids want = hf.Encode(s);
    want.push_back(2);  // the reference adds only the template's first token
    EXPECT_EQ(EncodeAsHuggingFace(t, s), want) << s;
  }
}

// The same vocabulary written back: the legacy form, the same merges, each piece's splits ordered
// by (id of left, id of right) as SentencePieceExtractor orders them.
TEST_F(HfTokenizerJsonTest, TinyMetaspaceFileWrittenBackIsTheLegacyForm) {
  const HfSentencePieceJson t =
      ReadHfSentencePieceJson(File("in.json", WithVocab(TinyMetaspace()).dump()));
  const json out = json::parse(SerializeSentencePieceTokenizerJson(t.tokenizer));
  EXPECT_EQ(out["model"]["merges"],
            json::parse(R"(["a b", "▁ a", "▁ ab", "▁a b", "b c", "a bc", "ab c", "▁ ▁"])"));
  EXPECT_EQ(out["model"]["vocab"], TinyVocab());
  EXPECT_TRUE(out["pre_tokenizer"].is_null());
}

// Where the reader's scores cannot follow the ranks (the limit hf_tokenizer_json.cc states): a
// list in which another piece's merge stands between two of one piece's. Pieces after the bytes:
//   259 ▁  260 a  261 b  262 c  263 ab (no merge makes it)  264 bc  265 ca  266 abc
// merges 0: b c  1: ab c  2: c a  3: a bc. On "cabc" ("▁ c a b c"): b c first, then Hugging Face
// takes c a (rank 2) before a bc (rank 3), while the reader scores abc by its first merge (-1)
// above ca (-2) and merges a bc.
TEST_F(HfTokenizerJsonTest, InterleavedMergeListIsCountedAndCanDiffer) {
  json j = TinyLegacy();
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[BytePiece(b)] = 3 + b;
  const std::vector<std::string> rest = {"▁", "a", "b", "c", "ab", "bc", "ca", "abc"};
  for (size_t k = 0; k < rest.size(); ++k) vocab[rest[k]] = 259 + static_cast<int>(k);
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = json::array({"b c", "ab c", "c a", "a bc"});
  j["added_tokens"] = AddedTokens();
  const std::string path = File("tokenizer.json", j.dump());
  const HfSentencePieceJson t = ReadHfSentencePieceJson(path);
  EXPECT_EQ(t.interleaved_pieces, 1);
  EXPECT_LT(t.tokenizer.Score(263), -1e10f);  // ab: no merge makes it
  using Ids = std::vector<int>;
  EXPECT_EQ(HfReference(path).Encode("cabc"), (Ids{1, 259, 265, 264}));
  EXPECT_EQ(EncodeAsHuggingFace(t, "cabc"), (Ids{1, 259, 262, 266}));
}

// ---------------------------------------------------------------------------------------------
// c. Detection and damaged files.

TEST_F(HfTokenizerJsonTest, LooksLikeOnlyTheSentencePieceKind) {
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(File("a.json", WithVocab(TinyLegacy()).dump())));
  // GPT-2's kind: byte-level, no byte fallback.
  json gpt2 = WithVocab(TinyLegacy());
  gpt2["model"]["byte_fallback"] = false;
  gpt2["normalizer"] = nullptr;
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("gpt2.json", gpt2.dump())));
  json unigram = WithVocab(TinyMetaspace());
  unigram["model"]["type"] = "Unigram";
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("unigram.json", unigram.dump())));
  json plain = WithVocab(TinyLegacy());
  plain["normalizer"] = nullptr;
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("plain.json", plain.dump())));
  // A Metaspace this reader refuses (split true) still looks like the kind: its error says why.
  json split = WithVocab(TinyMetaspace());
  split["pre_tokenizer"]["split"] = true;
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(File("split.json", split.dump())));
  // The legacy form with a layout of its own goes to BpeTokenizer instead; a LLaMA 2 fine-tune's
  // special <pad> added after model.vocab stays here.
  auto with_added = [](json j, const json& token) {
    j["added_tokens"].push_back(token);
    return j;
  };
  const json pad = {{"id", 269},       {"content", "<pad>"}, {"single_word", false},
                    {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                    {"special", true}};
  const json padded = with_added(WithVocab(TinyLegacy()), pad);
  EXPECT_TRUE(LooksLikeSentencePieceTokenizerJson(File("pad.json", padded.dump())));
  const HfSentencePieceJson read = ReadHfSentencePieceJson(Path("pad.json"));
  EXPECT_EQ(read.tokenizer.vocab_size(), 270);
  EXPECT_EQ(read.tokenizer.eos(), 2);
  json stripping = pad;
  stripping["rstrip"] = true;  // Phi-3's
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(
      File("rstrip.json", with_added(WithVocab(TinyLegacy()), stripping).dump())));
  json plain_text = pad;
  plain_text["special"] = false;  // matched in text
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(
      File("matched.json", with_added(WithVocab(TinyLegacy()), plain_text).dump())));
  const BpeTokenizer bpe = BpeTokenizer::FromTokenizerJson(Path("matched.json"));
  EXPECT_EQ(bpe.eos(), 2);  // </s>, LlamaTokenizer's default, without a tokenizer_config.json
  EXPECT_EQ(bpe.bos(), 1);
  EXPECT_EQ(bpe.Encode("a<pad>b"), (std::vector<int>{kSpA, 269, kSp, kB}));
  // The space put before the text is dropped where the text starts: after a prompt that decodes
  // to nothing (BOS, EOS), not after one that decodes to text.
  const std::unique_ptr<TextTokenizer> text = MakeBpeTextTokenizer(bpe);
  for (const std::vector<int>& prompt : {std::vector<int>{}, {1}, {1, 2}, {1, kSpA}}) {
    const std::unique_ptr<TokenTextDecoder> d = text->Decoder(prompt);
    std::string got = d->Next(kSpA);
    got += d->Finish();
    EXPECT_EQ(got, prompt.size() == 2 && prompt[1] == kSpA ? " a" : "a") << prompt.size();
  }
  json inside = pad;
  inside["id"] = kSp + 1;  // "a" made special: Mistral v0.3's [INST] inside model.vocab
  inside["content"] = "a";
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(
      File("inside.json", with_added(WithVocab(TinyLegacy()), inside).dump())));
  json moved = WithVocab(TinyLegacy());  // <unk> not at id 0
  moved["model"]["vocab"]["<unk>"] = 269;
  moved["model"]["vocab"]["<pad>"] = 0;
  moved["added_tokens"][0]["id"] = 269;
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("moved.json", moved.dump())));
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("broken.json", "{\"model\": {")));
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("array.json", "[1, 2]")));
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(File("empty.json", "")));
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(Path("missing.json")));
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(dir_.string()));
  if (testing::SharedExists(kMetaBin)) {
    EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(SharedPath(kMetaBin)));
  }
}

// Each damage is refused naming the file, the field and what was expected.
TEST_F(HfTokenizerJsonTest, DamagedFilesAreRefusedNamingTheField) {
  struct Case {
    std::string name;
    std::function<void(json&)> damage;
    std::vector<std::string> message;  // parts the error must contain
  };
  const std::vector<Case> cases = {
      {"no merges",
       [](json& j) { j["model"].erase("merges"); },
       {"model.merges is missing, expected an array"}},
      {"unknown piece",
       [](json& j) { j["model"]["merges"][1] = "▁ zz"; },
       {"model.merges[1] names \"zz\", which is not in model.vocab"}},
      {"unknown result",
       [](json& j) { j["model"]["merges"][4] = "c c"; },
       {"model.merges[4] makes \"cc\", which is not in model.vocab"}},
      {"two spaces",
       [](json& j) { j["model"]["merges"][0] = "a  b"; },
       {"model.merges[0] is the string \"a  b\", expected two pieces separated by one space"}},
      {"merge is a number",
       [](json& j) { j["model"]["merges"][2] = 7; },
       {"model.merges[2] is the number 7, expected a string \"a b\" or a pair"}},
      {"repeated merge",
       [](json& j) { j["model"]["merges"].push_back("a b"); },
       {"model.merges[8] repeats model.merges[0]"}},
      {"missing split",
       [](json& j) { j["model"]["merges"].erase(6); },
       {"model.merges has no \"a\" \"bc\", though it makes \"abc\" (first at rank 5)"}},
      {"merge into <s>",
       [](json& j) {
         j["model"]["vocab"]["<"] = 269;
         j["model"]["vocab"]["s>"] = 270;
         j["model"]["merges"].push_back("< s>");
       },
       {"model.merges[8] makes \"<s>\": expected no merge into or out of <unk>, <s>, </s>"}},
      {"byte_fallback a string",
       [](json& j) { j["model"]["byte_fallback"] = "yes"; },
       {"model.byte_fallback is the string \"yes\", expected true"}},
      {"byte_fallback false",
       [](json& j) { j["model"]["byte_fallback"] = false; },
       {"model.byte_fallback is false, expected true"}},
      {"id a string",
       [](json& j) { j["model"]["vocab"]["a"] = "260"; },
       {"model.vocab[\"a\"] is the string \"260\", expected a token id"}},
      {"vocab an array",
       [](json& j) { j["model"]["vocab"] = json::array(); },
       {"model.vocab is an array of 0, expected an object"}},
      {"unk not at 0",
       [](json& j) {
         j["model"]["vocab"]["<unk>"] = 260;
         j["model"]["vocab"]["a"] = 0;
       },
       {"model.vocab gives id 0 to \"a\", expected \"<unk>\""}},
      {"unk_token elsewhere",
       [](json& j) { j["model"]["unk_token"] = "<s>"; },
       {"model.unk_token is the string \"<s>\", expected \"<unk>\""}},
      {"id twice",
       [](json& j) { j["model"]["vocab"]["a"] = 261; },
       {"which model.vocab also gives to"}},
      {"id gap",
       [](json& j) { j["model"]["vocab"]["abc"] = 400; },
       {"model.vocab[\"abc\"] is 400: expected the ids 0..268"}},
      {"missing byte piece",
       [](json& j) {
         j["model"]["vocab"]["A"] = j["model"]["vocab"]["<0x41>"];
         j["model"]["vocab"].erase("<0x41>");
       },
       {"model.vocab has no \"<0x41>\""}},
      {"lower-case byte piece",
       [](json& j) { j["model"]["vocab"]["<0xab>"] = 269; },
       {"model.vocab[\"<0xab>\"] is a byte piece in lower case: expected \"<0xAB>\""}},
      {"space in a piece",
       [](json& j) { j["model"]["vocab"]["a b"] = 269; },
       {"model.vocab[\"a b\"] holds a space"}},
      {"no ▁",
       [](json& j) {
         j["model"]["vocab"].erase("▁");
         j["model"]["vocab"]["x"] = 259;
         j["model"]["merges"] = json::array({"a b", "b c", "ab c", "a bc"});
       },
       {"model.vocab has no \"▁\""}},
      {"WordPiece",
       [](json& j) { j["model"]["type"] = "WordPiece"; },
       {"model.type is \"WordPiece\", expected \"BPE\""}},
      {"dropout",
       [](json& j) { j["model"]["dropout"] = 0.1; },
       {"model.dropout is the number 0.1, expected null"}},
      {"ignore_merges",
       [](json& j) { j["model"]["ignore_merges"] = true; },
       {"model.ignore_merges is true, expected false"}},
      {"no Prepend",
       [](json& j) { j["normalizer"]["normalizers"].erase(0); },
       {"normalizer has no Prepend \"▁\""}},
      {"NFKC",
       [](json& j) {
         j["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
       },
       {"normalizer.normalizers[0].type is \"NFKC\""}},
      {"both null",
       [](json& j) { j["normalizer"] = nullptr; },
       {"normalizer is null and pre_tokenizer is null"}},
      {"Metaspace split",
       [](json& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = {
             {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}};
       },
       {"pre_tokenizer.split is missing or null, expected false"}},
      {"Metaspace never",
       [](json& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = {{"type", "Metaspace"},
                               {"replacement", "▁"},
                               {"prepend_scheme", "never"},
                               {"split", false}};
       },
       {"pre_tokenizer.prepend_scheme is \"never\", expected \"first\" or \"always\""}},
      {"ByteLevel decoder",
       [](json& j) {
         j["decoder"] = {{"type", "ByteLevel"}};
       },
       {"decoder.type is the string \"ByteLevel\", expected \"Sequence\""}},
      {"post_processor pair only",
       [](json& j) { j["post_processor"]["single"] = json::array(); },
       {"post_processor.single is \"[]\", expected [$A]"}},
      {"post_processor ids",
       [](json& j) { j["post_processor"]["special_tokens"]["<s>"]["ids"] = {5}; },
       {"post_processor.special_tokens[\"<s>\"].ids is an array of 1, expected [1]"}},
      {"non-special added token",
       [](json& j) {
         j["added_tokens"].push_back({{"id", 269}, {"content", "<pad>"}, {"special", false}});
       },
       {"added_tokens[3] (\"<pad>\") is not special"}},
      {"added token gap",
       [](json& j) {
         j["added_tokens"].push_back({{"id", 270}, {"content", "<pad>"}, {"special", true}});
       },
       {"added_tokens give id 270 (\"<pad>\") where id 269 comes next"}},
      {"top level array",
       [](json& j) { j = json::array({1}); },
       {"the top level is an array of 1, expected an object"}},
  };
  for (const Case& c : cases) {
    json j = WithVocab(TinyLegacy());
    c.damage(j);
    const std::string path = File("damaged.json", j.dump());
    const std::string message = ErrorOf([&] { ReadHfSentencePieceJson(path); });
    EXPECT_TRUE(message.starts_with(path + ": ")) << c.name << ": " << message;
    for (const std::string& part : c.message) {
      EXPECT_NE(message.find(part), std::string::npos)
          << c.name << ": expected \"" << part << "\" in: " << message;
    }
  }
  EXPECT_NE(ErrorOf([&] {
              ReadHfSentencePieceJson(File("x.json", "{\"model\": "));
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadHfSentencePieceJson(Path("missing.json")); }).find("missing.json"),
            std::string::npos);
  // An added token after model.vocab is kept, never merged into.
  json j = WithVocab(TinyLegacy());
  j["added_tokens"].push_back({{"id", 269}, {"content", "<pad>"}, {"special", true}});
  const HfSentencePieceJson t = ReadHfSentencePieceJson(File("pad.json", j.dump()));
  ASSERT_EQ(t.tokenizer.vocab_size(), 270);
  EXPECT_EQ(t.tokenizer.Piece(269), "<pad>");
  EXPECT_LT(t.tokenizer.Score(269), -1e10f);
}

// Vocabularies a tokenizer.json cannot hold so that it encodes as llama2.c's encoder does.
TEST_F(HfTokenizerJsonTest, WriterRefusesWhatTheFileCannotHold) {
  auto vocab = [](std::vector<std::string> extra, std::vector<float> extra_scores) {
    std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
    std::vector<float> scores = {0, 0, 0};
    for (int b = 0; b < 256; ++b) {
      pieces.push_back(BytePiece(b));
      scores.push_back(0);
    }
    pieces.push_back(" ");
    scores.push_back(-1e9f);
    pieces.insert(pieces.end(), extra.begin(), extra.end());
    scores.insert(scores.end(), extra_scores.begin(), extra_scores.end());
    return Tokenizer::FromVocabulary("v", std::move(pieces), std::move(scores));
  };
  const std::string ok = SerializeSentencePieceTokenizerJson(vocab({"a", "b", "ab"}, {-5, -6, -1}));
  EXPECT_NE(ok.find("\"a b\""), std::string::npos);
  auto refused = [&](const Tokenizer& t, const std::string& part) {
    const std::string message = ErrorOf([&] { SerializeSentencePieceTokenizerJson(t); });
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  refused(vocab({"x\xE2\x96\x81"}, {-1}), "piece 260 \"x\xE2\x96\x81\" holds U+2581");
  refused(vocab({"\xFF"}, {-1}), "piece 260 \"\xFF\" is not UTF-8");
  refused(vocab({"a", "a"}, {-1, -2}), "pieces 260 and 261 are both \"a\"");
  refused(vocab({"<0xab>"}, {-1}), "byte piece in lower case");
  refused(vocab({"", "a"}, {-1, -2}), "piece 260 is empty");
  // <s> as llama2.c spells it is reachable by a merge: "\n" + "<s>\n".
  refused(vocab({"\n", "<s>\n"}, {-1, -2}), "expected no merge into or out of <unk>, <s>, </s>");
  std::vector<std::string> no_bytes = {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a"};
  refused(Tokenizer::FromVocabulary("v", no_bytes, {0, 0, 0, -1, -2}), "no piece \"<0x00>\"");
  // A piece scored at the floor gets no merges (llama2.c never merges into it either).
  const json j =
      json::parse(SerializeSentencePieceTokenizerJson(vocab({"a", "b", "ab"}, {-5, -6, -1e10f})));
  EXPECT_TRUE(j["model"]["merges"].empty());
}

}  // namespace
}  // namespace stretch
