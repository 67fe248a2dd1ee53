#include "src/io/tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/output_file.h"
#include "src/io/text.h"
#include "src/io/tokenizer/bpe_pretokenizer.h"
#include "src/io/tokenizer/gguf_vocabulary.h"
#include "src/io/tokenizer/unicode_class.h"
#include "src/io/tokenizer/unicode_nfc.h"

namespace stretch {
namespace {

// ---- UTF-8 and the byte alphabet ----------------------------------------------------------------

// bytes_to_unicode (OpenAI gpt-2 src/encoder.py; the same table in Hugging Face tokenizers'
// byte_level.rs bytes_char and llama.cpp's unicode_byte_to_utf8_map): the 188 printable bytes
// '!'..'~', 0xA1..0xAC, 0xAE..0xFF spell themselves; the other 68, in byte order, are U+0100,
// U+0101, ...
std::array<char32_t, 256> MakeByteAlphabet() {
  std::array<char32_t, 256> t{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return t;
}
const std::array<char32_t, 256> kByteAlphabet = MakeByteAlphabet();

// The inverse: code point (all < U+0144) -> byte, or -1.
std::array<int16_t, 0x144> MakeAlphabetBytes() {
  std::array<int16_t, 0x144> t{};
  t.fill(-1);
  for (int b = 0; b < 256; ++b) t[kByteAlphabet[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
  return t;
}
const std::array<int16_t, 0x144> kAlphabetBytes = MakeAlphabetBytes();

// What a token's spelling decodes to: each code point's byte, or (when a code point is not one of
// the 256 symbols or the spelling is not valid UTF-8) the spelling itself, as Hugging Face's
// ByteLevel decoder falls back to the token's text.
std::string SpellingToBytes(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const Utf8CodePoint c = DecodeUtf8At(piece, i);
    const bool valid = c.len > 1 || static_cast<unsigned char>(piece[i]) < 0x80;
    if (!valid || c.cp >= kAlphabetBytes.size() || kAlphabetBytes[c.cp] < 0) return piece;
    out += static_cast<char>(kAlphabetBytes[c.cp]);
    i += static_cast<size_t>(c.len);
  }
  return out;
}

// What a SentencePiece-style piece decodes to: "▁" as a space, <0xXX> as its byte.
std::string SentencePieceBytes(const std::string& piece) {
  if (piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' &&
      std::isxdigit(static_cast<unsigned char>(piece[3])) &&
      std::isxdigit(static_cast<unsigned char>(piece[4]))) {
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// ---- loading helpers --------------------------------------------------------------------------

// "a b" -> {"a", "b"}; the two pieces must be non-empty and the string must hold one space
// (Hugging Face's merges.txt reader refuses any other count as BadMerges).
bool SplitMerge(const std::string& s, std::pair<std::string, std::string>* out) {
  const size_t space = s.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == s.size()) return false;
  if (s.find(' ', space + 1) != std::string::npos) return false;
  *out = {s.substr(0, space), s.substr(space + 1)};
  return true;
}

}  // namespace

// ---- the tokenizer ----------------------------------------------------------------------------

char32_t Gpt2ByteToCodePoint(uint8_t b) { return kByteAlphabet[b]; }

struct BpeTokenizer::Scratch {
  // Per symbol of the piece being encoded: its id (-1 once merged into its left neighbour) and
  // its neighbours in the list of live symbols (-1 at the ends).
  std::vector<int32_t> id, prev, next;
  struct Candidate {
    int32_t rank;
    int32_t pos;    // the left symbol
    int32_t left;   // the ids the rule was found for: a candidate whose symbols have changed
    int32_t right;  // since is stale and skipped
    int32_t merged;
  };
  // A min-heap on (rank, pos): lowest rank first, the leftmost of equal ranks first.
  std::vector<Candidate> heap;
  static bool Later(const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

void BpeTokenizer::EncodePiece(std::string_view piece, Scratch& s, std::vector<int>& out) const {
  if (piece.size() > static_cast<size_t>(INT32_MAX)) {
    Fail("{}: the text has a run of {} bytes without a break, expected at most {}", source_,
         piece.size(), INT32_MAX);
  }
  if (options_.chars) {  // one symbol per character, or its bytes
    s.id.clear();
    for (size_t i = 0; i < piece.size();) {
      const Utf8CodePoint c = DecodeUtf8At(piece, i);
      const auto len = static_cast<size_t>(c.len);
      if (const auto it = char_id_.find(std::string(piece.substr(i, len))); it != char_id_.end()) {
        s.id.push_back(it->second);
      } else {
        for (size_t k = 0; k < len; ++k) {
          s.id.push_back(fallback_id_[static_cast<unsigned char>(piece[i + k])]);
        }
      }
      i += len;
    }
    MergeSymbols(s, out);
    return;
  }
  const auto n = static_cast<int32_t>(piece.size());
  if (options_.ignore_merges && n > 1) {  // a piece that is a token is that token, merges or not
    std::string spelling;
    for (const char b : piece) AppendUtf8(kByteAlphabet[static_cast<unsigned char>(b)], spelling);
    if (const auto it = word_id_.find(spelling); it != word_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (n == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  s.id.resize(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    s.id[static_cast<size_t>(k)] =
        byte_id_[static_cast<unsigned char>(piece[static_cast<size_t>(k)])];
  }
  MergeSymbols(s, out);
}

void BpeTokenizer::MergeSymbols(Scratch& s, std::vector<int>& out) const {
  if (s.id.size() > static_cast<size_t>(INT32_MAX)) {
    Fail("{}: the text has a run of {} symbols without a break, expected at most {}", source_,
         s.id.size(), INT32_MAX);
  }
  const auto n = static_cast<int32_t>(s.id.size());
  if (n == 0) return;
  s.prev.resize(static_cast<size_t>(n));
  s.next.resize(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    s.prev[static_cast<size_t>(k)] = k - 1;
    s.next[static_cast<size_t>(k)] = k + 1 < n ? k + 1 : -1;
  }
  s.heap.clear();
  auto consider = [&](int32_t pos) {  // the pair (pos, its right neighbour), when a rule names it
    if (pos < 0) return;
    const int32_t right = s.next[static_cast<size_t>(pos)];
    if (right < 0) return;
    const int32_t l = s.id[static_cast<size_t>(pos)], r = s.id[static_cast<size_t>(right)];
    const auto it = merges_.find(static_cast<uint64_t>(l) << 32 | static_cast<uint32_t>(r));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, pos, l, r, it->second.id});
    std::push_heap(s.heap.begin(), s.heap.end(), Scratch::Later);
  };
  for (int32_t k = 0; k + 1 < n; ++k) consider(k);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), Scratch::Later);
    const Scratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    const auto pos = static_cast<size_t>(c.pos);
    const int32_t right = s.next[pos];
    // Stale: the left symbol was merged away or changed, or its right neighbour changed. (A merged
    // symbol gets a longer piece's id, so equal ids mean the same pair of symbols.)
    if (s.id[pos] != c.left || right < 0 || s.id[static_cast<size_t>(right)] != c.right) continue;
    s.id[pos] = c.merged;
    s.id[static_cast<size_t>(right)] = -1;
    const int32_t after = s.next[static_cast<size_t>(right)];
    s.next[pos] = after;
    if (after >= 0) s.prev[static_cast<size_t>(after)] = c.pos;
    if (s.prev[pos] >= 0) consider(s.prev[pos]);
    consider(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = s.next[static_cast<size_t>(k)]) {
    out.push_back(s.id[static_cast<size_t>(k)]);
  }
}

std::vector<int> BpeTokenizer::Encode(std::string_view text) const {
  if (options_.matched.empty()) return EncodeUnmatched(text);
  // The added tokens matched in the text first (the longest at the leftmost place), then each
  // stretch of text between them on its own.
  std::vector<int> out;
  size_t from = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const std::vector<uint32_t>& bucket = matched_bucket_[static_cast<unsigned char>(text[i])];
    const std::pair<std::string, int>* best = nullptr;
    for (const uint32_t k : bucket) {  // longest first
      if (text.substr(i).starts_with(options_.matched[k].first)) {
        best = &options_.matched[k];
        break;
      }
    }
    if (best == nullptr) continue;
    const std::vector<int> before = EncodeUnmatched(text.substr(from, i - from));
    out.insert(out.end(), before.begin(), before.end());
    out.push_back(best->second);
    i += best->first.size() - 1;
    if (std::binary_search(options_.rstrip.begin(), options_.rstrip.end(), best->second)) {
      // The whitespace after it goes with it: C's isspace, as llama.cpp's partition strips
      // (Hugging Face strips any Unicode white space; the two differ on e.g. U+00A0).
      while (i + 1 < text.size() &&
             std::string_view(" \t\n\v\f\r").find(text[i + 1]) != std::string_view::npos) {
        ++i;
      }
    }
    from = i + 1;
  }
  const std::vector<int> rest = EncodeUnmatched(text.substr(from));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::vector<int> BpeTokenizer::EncodeUnmatched(std::string_view text) const {
  std::vector<int> out;
  if (text.empty()) return out;
  std::string normalized;
  if (options_.nfc) {
    normalized = NfcNormalize(text);
    text = normalized;
  }
  if (options_.chars) {  // spaces as "▁", then the whole text one piece
    std::string replaced;
    replaced.reserve(text.size() + text.size() / 4 + 3);
    if (options_.prepend_space) replaced += "\xE2\x96\x81";
    for (const char c : text) {
      if (c == ' ') {
        replaced += "\xE2\x96\x81";
      } else {
        replaced += c;
      }
    }
    Scratch scratch;
    EncodePiece(replaced, scratch, out);
    return out;
  }
  std::string prefixed;
  if (options_.add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  out.reserve(text.size() / 3 + 16);
  Scratch scratch;
  // Words repeat (tinyshakespeare, 1.1 MB: 297,833 pieces, 15,057 distinct), and a piece's ids
  // depend on the piece alone, so each distinct piece runs BPE once per call. The cache holds at
  // most kCacheIds ids, so its memory stays bounded on any text.
  constexpr size_t kCacheIds = size_t{1} << 22;
  struct Span {
    uint32_t begin, count;  // in `cached`
  };
  std::unordered_map<std::string_view, Span> cache;
  std::vector<int> cached;
  ForEachBpePiece(options_.split, text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (const auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), cached.begin() + it->second.begin,
                 cached.begin() + it->second.begin + it->second.count);
      return;
    }
    const size_t before = out.size();
    EncodePiece(piece, scratch, out);
    if (cached.size() + (out.size() - before) <= kCacheIds) {
      cache.emplace(piece, Span{static_cast<uint32_t>(cached.size()),
                                static_cast<uint32_t>(out.size() - before)});
      cached.insert(cached.end(), out.begin() + static_cast<ptrdiff_t>(before), out.end());
    }
  });
  return out;
}

std::string BpeTokenizer::Decode(std::span<const int> ids) const {
  std::string out;
  for (int id : ids) out += TokenBytes(id);
  if (options_.prepend_space && out.starts_with(' ')) out.erase(0, 1);  // the decoder's Strip
  return out;
}

const std::string& BpeTokenizer::TokenBytes(int id) const {
  STRETCH_CHECK(id >= 0 && id < vocab_size(), "token {} outside the vocabulary of {}", id,
                vocab_size());
  return bytes_[static_cast<size_t>(id)];
}

const std::string& BpeTokenizer::Piece(int id) const {
  STRETCH_CHECK(id >= 0 && id < vocab_size(), "token {} outside the vocabulary of {}", id,
                vocab_size());
  return pieces_[static_cast<size_t>(id)];
}

std::vector<BpeMerge> BpeTokenizer::Merges() const {
  std::vector<BpeMerge> out(merges_.size());
  for (const auto& [key, rule] : merges_) {
    out[static_cast<size_t>(rule.rank)] = {static_cast<int>(key >> 32),
                                           static_cast<int>(key & 0xFFFFFFFFu), rule.id};
  }
  return out;
}

std::vector<std::pair<std::string, int>> BpeTokenizer::SpecialTokens() const {
  std::vector<std::pair<std::string, int>> all = options_.special;
  all.insert(all.end(), options_.matched.begin(), options_.matched.end());
  SortSpecialTokens(all);
  return all;
}

BpeTokenKind BpeTokenizer::Kind(int id) const {
  STRETCH_CHECK(id >= 0 && id < vocab_size(), "token {} outside the vocabulary of {}", id,
                vocab_size());
  return options_.kinds.empty() ? BpeTokenKind::kNormal : options_.kinds[static_cast<size_t>(id)];
}

BpeTokenizer BpeTokenizer::Build(std::string source, std::string_view pieces_field,
                                 std::string_view merges_field, std::vector<std::string> pieces,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 BpeOptions options) {
  const size_t n = pieces.size();
  if (n > static_cast<size_t>(INT32_MAX) || merges.size() > static_cast<size_t>(INT32_MAX)) {
    Fail("{}: {} pieces and {} merges, expected at most {} of each", source, n, merges.size(),
         INT32_MAX);
  }
  if (!options.kinds.empty() && options.kinds.size() != n) {
    Fail("{}: {} token kinds for the {} pieces of {}, expected one per piece", source,
         options.kinds.size(), n, pieces_field);
  }
  for (const auto& [which, id] : {std::pair{"BOS", options.bos}, std::pair{"EOS", options.eos},
                                  std::pair{"unknown", options.unk}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      Fail("{}: the {} token id is {}, expected one of the {} ids of {}", source, which, id, n,
           pieces_field);
    }
  }
  if (options.add_bos && options.bos < 0) {
    Fail("{}: prompts are to begin with a BOS token, but no BOS token is named", source);
  }

  BpeTokenizer t;
  t.source_ = std::move(source);
  t.options_ = std::move(options);
  t.options_.kinds.resize(n, BpeTokenKind::kNormal);
  t.pieces_ = std::move(pieces);
  const std::string& src = t.source_;
  auto kind = [&t](size_t id) {
    return t.options_.kinds.empty() ? BpeTokenKind::kNormal : t.options_.kinds[id];
  };

  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& p = t.pieces_[id];
    if (p.empty()) Fail("{}: {}[{}] is empty, expected a piece", src, pieces_field, id);
    const auto [it, fresh] = id_of.emplace(p, static_cast<int32_t>(id));
    if (!fresh) {
      Fail("{}: {}[{}] and {}[{}] are both {}, expected distinct pieces", src, pieces_field,
           it->second, pieces_field, id, Quote(p));
    }
  }

  if (t.options_.chars) {
    for (int b = 0; b < 256; ++b) {
      const std::string name = fmt::format("<0x{:02X}>", b);
      const auto it = id_of.find(name);
      if (it == id_of.end()) {
        Fail("{}: {} has no byte token {}, expected <0x00> .. <0xFF> for the byte fallback", src,
             pieces_field, name);
      }
      t.fallback_id_[b] = it->second;
    }
    for (size_t id = 0; id < n; ++id) {
      const std::string& p = t.pieces_[id];
      if (kind(id) == BpeTokenKind::kNormal &&
          DecodeUtf8At(p, 0).len == static_cast<int>(p.size())) {
        t.char_id_.emplace(p, static_cast<int>(id));
      }
    }
  }
  // The 256 one-symbol pieces every text starts from.
  for (int b = 0; b < 256 && !t.options_.chars; ++b) {
    std::string spelling;
    AppendUtf8(kByteAlphabet[static_cast<size_t>(b)], spelling);
    const auto it = id_of.find(spelling);
    if (it == id_of.end() || kind(static_cast<size_t>(it->second)) != BpeTokenKind::kNormal) {
      Fail(
          "{}: {} has no normal token {} for byte 0x{:02X}, expected all 256 symbols of GPT-2's "
          "byte-level alphabet",
          src, pieces_field, Quote(spelling), b);
    }
    t.byte_id_[b] = it->second;
  }

  // The rules, rank = position in the list.
  t.merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::string shown = Quote(a + " " + b);
    int32_t side[2] = {};
    for (int k = 0; k < 2; ++k) {
      const std::string& p = k == 0 ? a : b;
      const auto it = id_of.find(p);
      if (it == id_of.end()) {
        Fail("{}: {}[{}] is {}: {} is not a piece of {}", src, merges_field, rank, shown, Quote(p),
             pieces_field);
      }
      if (kind(static_cast<size_t>(it->second)) != BpeTokenKind::kNormal) {
        Fail("{}: {}[{}] is {}: {} is a control token, expected normal pieces", src, merges_field,
             rank, shown, Quote(p));
      }
      side[k] = it->second;
    }
    joined = a + b;
    const auto it = id_of.find(joined);
    if (it == id_of.end() || kind(static_cast<size_t>(it->second)) != BpeTokenKind::kNormal) {
      Fail("{}: {}[{}] is {}: their concatenation {} is not a normal piece of {}", src,
           merges_field, rank, shown, Quote(joined), pieces_field);
    }
    const uint64_t key = static_cast<uint64_t>(side[0]) << 32 | static_cast<uint32_t>(side[1]);
    const auto [old, fresh] =
        t.merges_.emplace(key, MergeRule{static_cast<int32_t>(rank), it->second});
    if (!fresh) {
      Fail(
          "{}: {}[{}] repeats {}[{}] ({}): llama.cpp keeps the first, Hugging Face the last; "
          "expected each pair once",
          src, merges_field, rank, merges_field, old->second.rank, shown);
    }
  }

  t.bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    if (kind(id) != BpeTokenKind::kNormal) continue;
    t.bytes_[id] =
        t.options_.chars ? SentencePieceBytes(t.pieces_[id]) : SpellingToBytes(t.pieces_[id]);
  }
  for (const auto& [content, id] : t.options_.matched) {
    if (content.empty()) Fail("{}: a token matched in text is empty, expected its text", src);
    if (id < 0 || static_cast<size_t>(id) >= n ||
        kind(static_cast<size_t>(id)) != BpeTokenKind::kNormal) {
      Fail("{}: the token matched in text {} has id {}, expected a normal token's id", src,
           Quote(content), id);
    }
    if (t.options_.add_prefix_space) {
      Fail("{}: tokens matched in text ({}) together with add_prefix_space are not implemented",
           src, Quote(content));
    }
    // Decoded as the decoder decodes any token (Gemma's "▁▁" is two spaces).
    t.bytes_[static_cast<size_t>(id)] = t.options_.chars ? SentencePieceBytes(content) : content;
  }
  for (uint32_t k = 0; k < t.options_.matched.size(); ++k) {
    t.matched_bucket_[static_cast<unsigned char>(t.options_.matched[k].first[0])].push_back(k);
  }
  for (std::vector<uint32_t>& bucket : t.matched_bucket_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t a, uint32_t b) {
      return t.options_.matched[a].first.size() > t.options_.matched[b].first.size();
    });
  }
  if (t.options_.ignore_merges) {
    t.word_id_.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      if (kind(id) == BpeTokenKind::kNormal) t.word_id_.emplace(t.pieces_[id], id);
    }
  }
  return t;
}

BpeTokenizer BpeTokenizer::FromVocabulary(
    std::string source, std::vector<std::string> pieces,
    const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options) {
  return Build(std::move(source), "pieces", "merges", std::move(pieces), merges,
               std::move(options));
}

// ---- GGUF -------------------------------------------------------------------------------------

namespace {

// Key names (llama.cpp's LLM_KV_TOKENIZER_*).
constexpr std::string_view kGgufModel = "tokenizer.ggml.model";
constexpr std::string_view kGgufPre = "tokenizer.ggml.pre";
constexpr std::string_view kGgufTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kGgufTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kGgufMerges = "tokenizer.ggml.merges";

const GgufValue& GgufStringArray(const GgufFile& g, std::string_view key) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr) Fail("{}: metadata {} is missing, expected an array of strings", g.path(), key);
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString) {
    Fail("{}: metadata {} is {}, expected an array of strings", g.path(), key, v->Describe());
  }
  return *v;
}

// llama.cpp's llama_token_type, as GGUF files store it.
std::string_view GgufTokenTypeName(int64_t t) {
  switch (t) {
    case 0: return "undefined";
    case 1: return "normal";
    case 2: return "unknown";
    case 3: return "control";
    case 4: return "user-defined";
    case 5: return "unused";
    case 6: return "byte";
    default: return "not a llama_token_type";
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::FromGguf(const std::string& path) {
  return FromGguf(GgufFile::Open(path));
}

BpeTokenizer BpeTokenizer::FromGguf(const GgufFile& g) {
  const std::string& path = g.path();
  const GgufValue* model = g.Find(kGgufModel);
  if (model == nullptr) {
    Fail("{}: metadata {} is missing, expected \"gpt2\" (a byte-level BPE vocabulary)", path,
         kGgufModel);
  }
  if (model->type != GgufValueType::kString || model->s != "gpt2") {
    Fail("{}: metadata {} is {}, expected string \"gpt2\" (a byte-level BPE vocabulary)", path,
         kGgufModel, model->Describe());
  }
  // llama.cpp picks the pre-tokenizer's pattern by this name (llama-vocab.cpp, llama_vocab::impl::
  // load); stretch runs "gpt-2", "llama-bpe" (and its aliases) and "qwen2".
  const GgufValue* pre = g.Find(kGgufPre);
  if (pre == nullptr) {
    Fail(
        "{}: metadata {} is missing: llama.cpp then runs its \"default\" pre-tokenizer, which "
        "stretch does not implement; expected \"gpt-2\", \"llama-bpe\" or \"qwen2\"",
        path, kGgufPre);
  }
  if (pre->type != GgufValueType::kString) {
    Fail("{}: metadata {} is {}, expected a string (\"gpt-2\", \"llama-bpe\" or \"qwen2\")", path,
         kGgufPre, pre->Describe());
  }
  const std::optional<BpeSplit> split = BpeSplitOfGgufPre(pre->s);
  if (!split) {
    Fail(
        "{}: metadata {} is \"{}\": not implemented (llama.cpp splits the text with another "
        "pattern for it); expected \"gpt-2\", \"llama-bpe\" or \"qwen2\"",
        path, kGgufPre, pre->s);
  }
  if (const GgufValue* p = g.Find("tokenizer.ggml.add_space_prefix");
      p != nullptr && !(p->type == GgufValueType::kBool && p->u == 0)) {
    Fail(
        "{}: metadata tokenizer.ggml.add_space_prefix is {}, expected false or absent for a gpt2 "
        "vocabulary",
        path, p->Describe());
  }

  const GgufValue& tokens = GgufStringArray(g, kGgufTokens);
  const size_t n = tokens.array.size();
  std::vector<std::string> pieces;
  pieces.reserve(n);
  for (const GgufValue& v : tokens.array) pieces.push_back(v.s);

  BpeOptions options;
  options.split = *split;
  // llama.cpp, for the "llama-bpe" pre-tokenizer: ignore_merges, and BOS first unless
  // tokenizer.ggml.add_bos_token says otherwise.
  options.ignore_merges = *split == BpeSplit::kLlama3;
  options.add_bos = *split == BpeSplit::kLlama3;
  if (const GgufValue* types = g.Find(kGgufTypes)) {
    if (types->type != GgufValueType::kArray || types->array.size() != n ||
        !(n == 0 || types->array[0].IsInteger())) {
      Fail("{}: metadata {} is {}, expected an array of {} integers (one per token)", path,
           kGgufTypes, types->Describe(), n);
    }
    options.kinds.resize(n, BpeTokenKind::kNormal);
    for (size_t id = 0; id < n; ++id) {
      const int64_t type = GgufElementInt(types->array[id]);
      if (type == 1) continue;
      if (type == 2 || type == 3 || type == 5) {  // unknown, control, unused: never encoded
        options.kinds[id] = BpeTokenKind::kControl;
        if (type != 5) options.special.emplace_back(pieces[id], static_cast<int>(id));
        continue;
      }
      if (type == 4 && ControlToLlamaCpp(pieces[id])) {  // llama.cpp makes it control
        options.kinds[id] = BpeTokenKind::kControl;
        options.special.emplace_back(pieces[id], static_cast<int>(id));
        continue;
      }
      if (type == 4) {  // user-defined: matched in the text as spelt (llama.cpp's partition)
        if (pieces[id].empty()) {
          Fail("{}: metadata {}[{}] is an empty user-defined token, expected its text", path,
               kGgufTokens, id);
        }
        options.matched.emplace_back(pieces[id], static_cast<int>(id));
        continue;
      }
      Fail(
          "{}: metadata {}[{}] ({}) is {} ({}): a gpt2 vocabulary's BPE does not produce it; "
          "expected 1 normal, 2 unknown, 3 control, 4 user-defined or 5 unused",
          path, kGgufTypes, id, Quote(pieces[id]), type, GgufTokenTypeName(type));
    }
  }

  const GgufValue& merge_strings = GgufStringArray(g, kGgufMerges);
  std::vector<std::pair<std::string, std::string>> merges(merge_strings.array.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    if (!SplitMerge(merge_strings.array[k].s, &merges[k])) {
      Fail("{}: metadata {}[{}] is {}, expected two pieces separated by one space", path,
           kGgufMerges, k, Quote(merge_strings.array[k].s));
    }
  }

  for (const auto& [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &options.bos},
                                std::pair{"tokenizer.ggml.eos_token_id", &options.eos}}) {
    if (g.Find(key) == nullptr) continue;
    const int64_t v = g.Int(key);
    if (v < 0 || v >= static_cast<int64_t>(n)) {
      Fail("{}: metadata {} is {}, expected a token id below {}", path, key, v, n);
    }
    *id = static_cast<int>(v);
  }
  // llama.cpp: add_bos is false for the "gpt-2" and "qwen2" pre-tokenizers, true for "llama-bpe",
  // unless this key says otherwise.
  if (options.add_bos && options.bos < 0 && g.Find("tokenizer.ggml.add_bos_token") == nullptr) {
    Fail(
        "{}: a \"{}\" vocabulary begins prompts with BOS, but tokenizer.ggml.bos_token_id is "
        "missing",
        path, pre->s);
  }
  if (const GgufValue* add = g.Find("tokenizer.ggml.add_bos_token")) {
    if (add->type != GgufValueType::kBool) {
      Fail("{}: metadata tokenizer.ggml.add_bos_token is {}, expected a bool", path,
           add->Describe());
    }
    options.add_bos = add->u != 0;
    if (options.add_bos && options.bos < 0) {
      Fail(
          "{}: metadata tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is "
          "missing",
          path);
    }
  }
  return Build(path, fmt::format("metadata {}", kGgufTokens),
               fmt::format("metadata {}", kGgufMerges), std::move(pieces), merges,
               std::move(options));
}

// ---- tokenizer.json ---------------------------------------------------------------------------

namespace {

using nlohmann::json;

// A JSON value's kind, for messages: "a string \"WordPiece\"", "the number -2", "an array", ...
std::string JsonKind(const json& v) {
  if (v.is_string()) return fmt::format("the string {}", Quote(v.get_ref<const std::string&>()));
  if (v.is_number()) return fmt::format("the number {}", v.dump());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_array()) return fmt::format("an array of {}", v.size());
  if (v.is_object()) return "an object";
  return "null";
}

// One file's JSON with the paths of its fields, for messages: "tokenizer.json: model.merges[3]
// is the number 7, expected a string "a b" or a pair of strings".
class JsonReader {
 public:
  explicit JsonReader(const std::string& path) : path_(path) {}
  [[noreturn]] void Bad(std::string_view field, const json& v, std::string_view expected) const {
    Fail("{}: {} is {}, expected {}", path_, field, JsonKind(v), expected);
  }
  // obj[key], or nullptr when absent; obj must be an object.
  static const json* Member(const json& obj, std::string_view key) {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& Object(const json& obj, std::string_view key, std::string_view field) const {
    const json* v = Member(obj, key);
    if (v == nullptr) Fail("{}: {} is missing, expected an object", path_, field);
    if (!v->is_object()) Bad(field, *v, "an object");
    return *v;
  }
  const std::string& String(const json& v, std::string_view field) const {
    if (!v.is_string()) Bad(field, v, "a string");
    return v.get_ref<const std::string&>();
  }
  std::string StringField(const json& obj, std::string_view key, std::string_view field) const {
    const json* v = Member(obj, key);
    if (v == nullptr) Fail("{}: {} is missing, expected a string", path_, field);
    return String(*v, field);
  }
  // An optional bool: `fallback` when absent.
  bool BoolOr(const json& obj, std::string_view key, std::string_view field, bool fallback) const {
    const json* v = Member(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) Bad(field, *v, "true or false");
    return v->get<bool>();
  }
  int Id(const json& v, std::string_view field) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= static_cast<uint64_t>(INT32_MAX)) {
      Bad(field, v, fmt::format("a token id (an integer from 0 to {})", INT32_MAX - 1));
    }
    return static_cast<int>(v.get<uint64_t>());
  }
  const std::string& path() const { return path_; }

 private:
  const std::string& path_;
};

json ParseJsonFile(const std::string& path) {
  const std::string text = ReadWholeFile(path, "a tokenizer.json");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    Fail("{}: not valid JSON: {}", path, e.what());
  }
}

// The pre_tokenizer: a ByteLevel (use_regex true: GPT-2's pattern), or a Sequence of a Split by
// one of the patterns of src/io/tokenizer/bpe_pretokenizer.h and a ByteLevel.
struct PreTokenizerRead {
  bool add_prefix_space = false;  // ByteLevel's
  BpeSplit split = BpeSplit::kGpt2;
};
PreTokenizerRead ReadPreTokenizer(const JsonReader& r, const json& root) {
  const json* pt = JsonReader::Member(root, "pre_tokenizer");
  if (pt == nullptr || pt->is_null()) {
    Fail("{}: pre_tokenizer is {}, expected ByteLevel (without it the text is one piece)", r.path(),
         pt == nullptr ? "missing" : "null");
  }
  if (!pt->is_object()) r.Bad("pre_tokenizer", *pt, "an object");
  const std::string type = r.StringField(*pt, "type", "pre_tokenizer.type");
  std::vector<std::pair<std::string, const json*>> steps;  // field path, value
  if (type == "Sequence") {
    const json* list = JsonReader::Member(*pt, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      r.Bad("pre_tokenizer.pretokenizers", list ? *list : json(), "an array");
    }
    for (size_t k = 0; k < list->size(); ++k) {
      steps.emplace_back(fmt::format("pre_tokenizer.pretokenizers[{}]", k), &(*list)[k]);
    }
  } else {
    steps.emplace_back("pre_tokenizer", pt);
  }
  bool split = false, byte_level = false;
  PreTokenizerRead read;
  for (const auto& [field, step] : steps) {
    if (!step->is_object()) r.Bad(field, *step, "an object");
    const std::string step_type = r.StringField(*step, "type", field + ".type");
    if (step_type == "Split" && !split && !byte_level) {
      const json& pattern = r.Object(*step, "pattern", field + ".pattern");
      const json* regex = JsonReader::Member(pattern, "Regex");
      const std::optional<BpeSplit> known =
          regex == nullptr ? std::nullopt
                           : BpeSplitOfPattern(r.String(*regex, field + ".pattern.Regex"));
      if (!known) {
        Fail(
            "{}: {}.pattern is {}, expected {{\"Regex\": P}} with P the pattern of GPT-2, LLaMA "
            "3 or Qwen 2 (src/io/tokenizer/bpe_pretokenizer.h): other patterns are not implemented",
            r.path(), field, Quote(pattern.dump()));
      }
      read.split = *known;
      const std::string behavior = r.StringField(*step, "behavior", field + ".behavior");
      if (behavior != "Isolated") {
        Fail("{}: {}.behavior is {}, expected \"Isolated\"", r.path(), field, Quote(behavior));
      }
      if (r.BoolOr(*step, "invert", field + ".invert", false)) {
        Fail("{}: {}.invert is true, expected false", r.path(), field);
      }
      split = true;
    } else if (step_type == "ByteLevel" && !byte_level) {
      read.add_prefix_space =
          r.BoolOr(*step, "add_prefix_space", field + ".add_prefix_space", true);
      const bool use_regex = r.BoolOr(*step, "use_regex", field + ".use_regex", true);
      if (!use_regex && !split) {
        Fail(
            "{}: {}.use_regex is false and no Split comes before it: the text would be one "
            "piece; expected a Split before it",
            r.path(), field);
      }
      byte_level = true;
    } else {
      Fail("{}: {}.type is {}{}, expected ByteLevel, possibly after a Split by a known pattern",
           r.path(), field, Quote(step_type),
           step_type == "Split" || step_type == "ByteLevel" ? " (again, or out of order)" : "");
    }
  }
  if (!byte_level) {
    Fail("{}: pre_tokenizer has no ByteLevel step, expected one (after an optional Split)",
         r.path());
  }
  return read;
}

// Whether the file is SentencePiece-style BPE, in Gemma's form or the legacy LLaMA form:
//   - Gemma's: normalizer {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
//     pre_tokenizer a Split on the String " " with behavior MergedWithPrevious (a no-op once the
//     spaces are gone: the text between added tokens is one piece) or null, decoder a Sequence of
//     Replace "▁" -> " ", ByteFallback and Fuse;
//   - legacy LLaMA (transformers' LlamaConverter, legacy=True; Phi-3's, Mistral's): normalizer a
//     Sequence of Prepend "▁" and that Replace (either order: both give "▁" + the text with its
//     spaces as "▁"), pre_tokenizer null, the decoder above with Strip " " (start 1, stop 0)
//     after Fuse (BpeOptions::prepend_space).
// chars false when the normalizer is neither a Replace nor a Sequence holding a Prepend; anything
// else half of the kind is refused by name.
struct SentencePieceForm {
  bool chars = false;
  bool prepend = false;
};

SentencePieceForm SentencePieceStyle(const JsonReader& r, const json& root) {
  const json* norm = JsonReader::Member(root, "normalizer");
  if (norm == nullptr || !norm->is_object()) return {};
  const json* type = JsonReader::Member(*norm, "type");
  if (type == nullptr || !type->is_string()) return {};
  const std::string space = "\xE2\x96\x81";  // ▁
  auto type_of = [](const json& v) {
    const json* t = v.is_object() ? JsonReader::Member(v, "type") : nullptr;
    return t != nullptr && t->is_string() ? t->get<std::string>() : std::string();
  };
  auto is_replace = [&](const json& v, const std::string& from, const std::string& to) {
    const json* pattern = v.is_object() ? JsonReader::Member(v, "pattern") : nullptr;
    const json* str =
        pattern && pattern->is_object() ? JsonReader::Member(*pattern, "String") : nullptr;
    const json* content = v.is_object() ? JsonReader::Member(v, "content") : nullptr;
    return str && str->is_string() && str->get<std::string>() == from && content &&
           content->is_string() && content->get<std::string>() == to;
  };
  SentencePieceForm form;
  if (type->get<std::string>() == "Sequence") {
    const json* list = JsonReader::Member(*norm, "normalizers");
    bool prepend = false;
    for (size_t k = 0; list != nullptr && list->is_array() && k < list->size(); ++k) {
      prepend = prepend || type_of((*list)[k]) == "Prepend";
    }
    // A Sequence that spells spaces as "▁" without the Prepend is half of the legacy form.
    if (!prepend && norm->dump().find(space) == std::string::npos) return {};
    bool ok = prepend && list->size() == 2;
    for (size_t k = 0; ok && k < 2; ++k) {
      const json& step = (*list)[k];
      const json* with = step.is_object() ? JsonReader::Member(step, "prepend") : nullptr;
      ok = type_of(step) == "Prepend"
               ? with != nullptr && with->is_string() && with->get<std::string>() == space
               : is_replace(step, " ", space);
    }
    if (!ok || type_of((*list)[0]) == type_of((*list)[1])) {
      Fail(
          "{}: normalizer is {}, expected a Sequence of Prepend \"{}\" and the Replace of \" \" "
          "by \"{}\" (the legacy LLaMA form; other normalizers are not implemented)",
          r.path(), Quote(norm->dump()), space, space);
    }
    form.prepend = true;
  } else if (type->get<std::string>() != "Replace") {
    return {};
  } else if (!is_replace(*norm, " ", space)) {
    Fail(
        "{}: normalizer is {}, expected the Replace of \" \" by \"{}\" (other replacements are "
        "not implemented)",
        r.path(), Quote(norm->dump()), space);
  }
  form.chars = true;
  if (const json* pt = JsonReader::Member(root, "pre_tokenizer"); pt != nullptr && !pt->is_null()) {
    const json* pattern = pt->is_object() ? JsonReader::Member(*pt, "pattern") : nullptr;
    const json* str =
        pattern && pattern->is_object() ? JsonReader::Member(*pattern, "String") : nullptr;
    const json* behavior = pt->is_object() ? JsonReader::Member(*pt, "behavior") : nullptr;
    if (form.prepend || r.StringField(*pt, "type", "pre_tokenizer.type") != "Split" || !str ||
        !str->is_string() || str->get<std::string>() != " " || !behavior ||
        !behavior->is_string() || behavior->get<std::string>() != "MergedWithPrevious" ||
        r.BoolOr(*pt, "invert", "pre_tokenizer.invert", false)) {
      Fail(
          "{}: pre_tokenizer is {}, expected null{} after the normalizer (others are not "
          "implemented)",
          r.path(), Quote(pt->dump()),
          form.prepend ? "" : " or a Split on \" \" (MergedWithPrevious)");
    }
  }
  const json* dec = JsonReader::Member(root, "decoder");
  const json* steps = dec && dec->is_object() ? JsonReader::Member(*dec, "decoders") : nullptr;
  const size_t n_steps = form.prepend ? 4 : 3;
  bool ok =
      steps && steps->is_array() && steps->size() == n_steps && is_replace((*steps)[0], space, " ");
  for (size_t k = 1; ok && k < 3; ++k)
    ok = type_of((*steps)[k]) == (k == 1 ? "ByteFallback" : "Fuse");
  if (ok && form.prepend) {
    const json& strip = (*steps)[3];
    const json* content = strip.is_object() ? JsonReader::Member(strip, "content") : nullptr;
    const json* start = strip.is_object() ? JsonReader::Member(strip, "start") : nullptr;
    const json* stop = strip.is_object() ? JsonReader::Member(strip, "stop") : nullptr;
    ok = type_of(strip) == "Strip" && content && *content == " " && start &&
         start->is_number_unsigned() && start->get<uint64_t>() == 1 && stop &&
         stop->is_number_unsigned() && stop->get<uint64_t>() == 0;
  }
  if (!ok) {
    Fail("{}: decoder is {}, expected a Sequence of Replace \"{}\" -> \" \", ByteFallback{}",
         r.path(), dec ? Quote(dec->dump()) : "missing", space,
         form.prepend ? ", Fuse and Strip \" \" (start 1, stop 0): the legacy LLaMA form's"
                      : " and Fuse");
  }
  return form;
}

// The post_processor's BOS: -1 when it adds none (null, ByteLevel, a TemplateProcessing whose
// single is [$A]); the id of X for single = [X, $A]. Anything else is refused.
int ReadPostProcessorBos(const JsonReader& r, const json& root) {
  const json* pp = JsonReader::Member(root, "post_processor");
  if (pp == nullptr || pp->is_null()) return -1;
  if (!pp->is_object()) r.Bad("post_processor", *pp, "an object");
  const std::string type = r.StringField(*pp, "type", "post_processor.type");
  std::vector<std::pair<std::string, const json*>> steps;
  if (type == "Sequence") {
    const json* list = JsonReader::Member(*pp, "processors");
    if (list == nullptr || !list->is_array()) {
      r.Bad("post_processor.processors", list ? *list : json(), "an array");
    }
    for (size_t k = 0; k < list->size(); ++k) {
      steps.emplace_back(fmt::format("post_processor.processors[{}]", k), &(*list)[k]);
    }
  } else {
    steps.emplace_back("post_processor", pp);
  }
  int bos = -1;
  for (const auto& [field, step] : steps) {
    if (!step->is_object()) r.Bad(field, *step, "an object");
    const std::string step_type = r.StringField(*step, "type", field + ".type");
    if (step_type == "ByteLevel") continue;  // offsets only
    if (step_type != "TemplateProcessing") {
      Fail(
          "{}: {}.type is {}, expected ByteLevel or TemplateProcessing ({} adds tokens in a way "
          "stretch does not implement)",
          r.path(), field, Quote(step_type), step_type);
    }
    const json* single = JsonReader::Member(*step, "single");
    const std::string single_field = field + ".single";
    if (single == nullptr || !single->is_array()) {
      r.Bad(single_field, single ? *single : json(), "an array");
    }
    auto is_sequence_a = [](const json& item) {
      const json* s = item.is_object() ? JsonReader::Member(item, "Sequence") : nullptr;
      const json* id = s && s->is_object() ? JsonReader::Member(*s, "id") : nullptr;
      return id != nullptr && id->is_string() && id->get<std::string>() == "A";
    };
    const json* special = single->size() == 2 && (*single)[0].is_object()
                              ? JsonReader::Member((*single)[0], "SpecialToken")
                              : nullptr;
    if (single->size() == 1 && is_sequence_a((*single)[0])) continue;
    if (single->size() != 2 || !is_sequence_a((*single)[1]) || special == nullptr ||
        !special->is_object()) {
      Fail(
          "{}: {} is {}, expected [$A] or [<special token>, $A] (other templates are not "
          "implemented)",
          r.path(), single_field, Quote(single->dump()));
    }
    const std::string name = r.StringField(*special, "id", single_field + "[0].SpecialToken.id");
    const json& table = r.Object(*step, "special_tokens", field + ".special_tokens");
    const std::string entry_field = fmt::format("{}.special_tokens[{}]", field, Quote(name));
    const json* entry = JsonReader::Member(table, name);
    if (entry == nullptr)
      Fail("{}: {} is missing, expected the template's token", r.path(), entry_field);
    if (!entry->is_object()) r.Bad(entry_field, *entry, "an object");
    const json* ids = JsonReader::Member(*entry, "ids");
    if (ids == nullptr || !ids->is_array() || ids->size() != 1) {
      r.Bad(entry_field + ".ids", ids ? *ids : json(), "an array of one token id");
    }
    bos = r.Id((*ids)[0], entry_field + ".ids[0]");
  }
  return bos;
}

// A token named in tokenizer_config.json: a string, {"content": string, ...} or null.
int ConfigToken(const JsonReader& r, const json& config, std::string_view key,
                const std::vector<std::string>& pieces, int fallback) {
  const json* v = JsonReader::Member(config, key);
  if (v == nullptr) return fallback;
  if (v->is_null()) return -1;
  const std::string field(key);
  const std::string content =
      v->is_object() ? r.StringField(*v, "content", field + ".content") : r.String(*v, field);
  const auto it = std::find(pieces.begin(), pieces.end(), content);
  if (it == pieces.end()) {
    Fail("{}: {} is {}, which is no token of the tokenizer.json beside it", r.path(), field,
         Quote(content));
  }
  return static_cast<int>(it - pieces.begin());
}

}  // namespace

BpeTokenizer BpeTokenizer::FromTokenizerJson(const std::string& path) {
  const JsonReader r(path);
  const json root = ParseJsonFile(path);
  if (!root.is_object()) r.Bad("the top level", root, "an object");

  const json& model = r.Object(root, "model", "model");
  const std::string type = r.StringField(model, "type", "model.type");
  if (type != "BPE") {
    Fail("{}: model.type is {}, expected \"BPE\" (only byte-level BPE is implemented)", path,
         Quote(type));
  }
  // Options of Hugging Face's BPE that change the encoding: refused unless off.
  // SentencePiece-style (Gemma): spaces replaced by "▁" in the normalizer, characters with byte
  // fallback (BpeOptions::chars).
  const SentencePieceForm form = SentencePieceStyle(r, root);
  const bool chars = form.chars;
  if (const json* v = JsonReader::Member(model, "dropout"); v != nullptr && !v->is_null()) {
    Fail("{}: model.dropout is {}, expected null (BPE dropout is not implemented)", path,
         JsonKind(*v));
  }
  // With the byte fallback every character has tokens, so the unknown token is never given.
  if (const json* v = JsonReader::Member(model, "unk_token");
      v != nullptr && !v->is_null() && !chars) {
    Fail("{}: model.unk_token is {}, expected null (an unknown-token fallback is not implemented)",
         path, JsonKind(*v));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = JsonReader::Member(model, key);
    if (v != nullptr && !v->is_null() &&
        !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      Fail("{}: model.{} is {}, expected null or \"\" (not implemented)", path, key, JsonKind(*v));
    }
  }
  if (r.BoolOr(model, "byte_fallback", "model.byte_fallback", false) != chars) {
    Fail("{}: model.byte_fallback is {}, expected {} ({})", path, !chars, chars,
         chars ? "a SentencePiece-style vocabulary falls back to bytes"
               : "the byte fallback of a byte-level vocabulary is not implemented");
  }
  const bool ignore_merges = r.BoolOr(model, "ignore_merges", "model.ignore_merges", false);
  r.BoolOr(model, "fuse_unk", "model.fuse_unk", false);  // only acts with an unk_token

  BpeOptions options;
  options.chars = chars;
  options.prepend_space = form.prepend;
  if (const json* norm = JsonReader::Member(root, "normalizer");
      norm != nullptr && !norm->is_null() && !chars) {
    const json* t = norm->is_object() ? JsonReader::Member(*norm, "type") : nullptr;
    if (t != nullptr && t->is_string() && t->get<std::string>() == "NFC") {
      options.nfc = true;
    } else {
      Fail(
          "{}: normalizer is {}, expected null or {{\"type\": \"NFC\"}} (other normalizers are "
          "not implemented)",
          path, t != nullptr && t->is_string() ? Quote(t->get<std::string>()) : JsonKind(*norm));
    }
  }
  options.ignore_merges = ignore_merges;
  if (!chars) {
    const PreTokenizerRead pre = ReadPreTokenizer(r, root);
    options.add_prefix_space = pre.add_prefix_space;
    options.split = pre.split;
    const json* dec = JsonReader::Member(root, "decoder");
    const json* t = dec != nullptr && dec->is_object() ? JsonReader::Member(*dec, "type") : nullptr;
    if (t == nullptr || !t->is_string() || t->get<std::string>() != "ByteLevel") {
      Fail("{}: decoder{} is {}, expected {{\"type\": \"ByteLevel\"}}", path,
           t != nullptr ? ".type" : "",
           t != nullptr ? JsonKind(*t)
           : dec        ? JsonKind(*dec)
                        : "missing");
    }
  }

  // Ids: model.vocab and added_tokens together must cover 0..n-1.
  const json& vocab = r.Object(model, "vocab", "model.vocab");
  std::vector<std::string> pieces;
  std::vector<BpeTokenKind> kinds;
  std::vector<uint8_t> from_vocab;
  auto place = [&](int id, const std::string& piece) {
    if (static_cast<size_t>(id) >= pieces.size()) {
      pieces.resize(static_cast<size_t>(id) + 1);
      kinds.resize(static_cast<size_t>(id) + 1, BpeTokenKind::kNormal);
      from_vocab.resize(static_cast<size_t>(id) + 1, 0);
    }
    std::string& slot = pieces[static_cast<size_t>(id)];
    const bool taken = !slot.empty() || from_vocab[static_cast<size_t>(id)];
    if (taken && slot != piece) return false;
    slot = piece;
    return true;
  };
  if (vocab.size() > static_cast<size_t>(INT32_MAX)) {
    Fail("{}: model.vocab has {} entries, expected at most {}", path, vocab.size(), INT32_MAX);
  }
  for (const auto& [piece, v] : vocab.items()) {
    const std::string field = fmt::format("model.vocab[{}]", Quote(piece));
    const int id = r.Id(v, field);
    if (id >= static_cast<int>(vocab.size()) + (1 << 20)) {  // bounds the allocation below
      Fail("{}: {} is {}, expected ids near the vocabulary's size {}", path, field, id,
           vocab.size());
    }
    if (!place(id, piece)) {
      Fail("{}: {} is {}, which model.vocab also gives to {}", path, field, id,
           Quote(pieces[static_cast<size_t>(id)]));
    }
    from_vocab[static_cast<size_t>(id)] = 1;
  }
  std::string endoftext_special;  // GPT-2's <|endoftext|> when it is a special token
  int endoftext = -1;
  if (const json* added = JsonReader::Member(root, "added_tokens");
      added != nullptr && !added->is_null()) {
    if (!added->is_array()) r.Bad("added_tokens", *added, "an array");
    for (size_t k = 0; k < added->size(); ++k) {
      const std::string field = fmt::format("added_tokens[{}]", k);
      const json& t = (*added)[k];
      if (!t.is_object()) r.Bad(field, t, "an object");
      const json* idv = JsonReader::Member(t, "id");
      if (idv == nullptr) Fail("{}: {}.id is missing, expected a token id", path, field);
      const int id = r.Id(*idv, field + ".id");
      if (id >= static_cast<int>(vocab.size()) + (1 << 20)) {
        Fail("{}: {}.id is {}, expected ids near the vocabulary's size {}", path, field, id,
             vocab.size());
      }
      const std::string content = r.StringField(t, "content", field + ".content");
      if (content.empty()) Fail("{}: {}.content is empty, expected the token's text", path, field);
      const json* special = JsonReader::Member(t, "special");
      if (special == nullptr || !special->is_boolean()) {
        r.Bad(field + ".special", special ? *special : json(), "true or false");
      }
      if (!place(id, content)) {
        Fail("{}: {}.id is {}, which model.vocab gives to {}", path, field, id,
             Quote(pieces[static_cast<size_t>(id)]));
      }
      if (!special->get<bool>()) {
        // Matched in the raw text before anything else (Hugging Face's non-special added tokens,
        // llama.cpp's user-defined ones), as they are written; rstrip takes the white space after
        // one with it (Phi-3's </s>); lstrip and single_word, which change where they match, are
        // refused.
        for (const char* key : {"lstrip", "single_word"}) {
          if (r.BoolOr(t, key, fmt::format("{}.{}", field, key), false)) {
            Fail("{}: {}.{} is true, expected false (not implemented for a token matched in text)",
                 path, field, key);
          }
        }
        const bool ascii = std::all_of(content.begin(), content.end(),
                                       [](char c) { return static_cast<unsigned char>(c) < 0x80; });
        if (r.BoolOr(t, "normalized", field + ".normalized", false) && !ascii && options.nfc) {
          Fail(
              "{}: {} ({}) is matched in normalized text, expected normalized false (not "
              "implemented)",
              path, field, Quote(content));
        }
        options.matched.emplace_back(content, id);
        if (r.BoolOr(t, "rstrip", field + ".rstrip", false)) options.rstrip.push_back(id);
        continue;
      }
      kinds[static_cast<size_t>(id)] = BpeTokenKind::kControl;
      options.special.emplace_back(content, id);
      if (r.BoolOr(t, "rstrip", field + ".rstrip", false)) options.rstrip.push_back(id);
      if (content == "<|endoftext|>") endoftext = id;
    }
  }
  std::sort(options.rstrip.begin(), options.rstrip.end());
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].empty() && !from_vocab[id]) {
      Fail(
          "{}: id {} is in neither model.vocab nor added_tokens, expected the ids 0..{} without "
          "gaps",
          path, id, pieces.size() - 1);
    }
  }

  const json* merge_list = JsonReader::Member(model, "merges");
  if (merge_list == nullptr || !merge_list->is_array()) {
    r.Bad("model.merges", merge_list ? *merge_list : json(),
          "an array of \"a b\" strings or [\"a\", \"b\"] pairs");
  }
  std::vector<std::pair<std::string, std::string>> merges(merge_list->size());
  for (size_t k = 0; k < merges.size(); ++k) {
    const json& m = (*merge_list)[k];
    const std::string field = fmt::format("model.merges[{}]", k);
    if (m.is_string()) {
      if (!SplitMerge(m.get_ref<const std::string&>(), &merges[k])) {
        r.Bad(field, m, "two pieces separated by one space");
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string() &&
               !m[0].get_ref<const std::string&>().empty() &&
               !m[1].get_ref<const std::string&>().empty()) {
      merges[k] = {m[0].get<std::string>(), m[1].get<std::string>()};
    } else {
      r.Bad(field, m, "a string \"a b\" or a pair of non-empty strings [\"a\", \"b\"]");
    }
  }

  // BOS and EOS.
  const int template_bos = ReadPostProcessorBos(r, root);
  options.add_bos = template_bos >= 0;
  options.bos = template_bos >= 0 ? template_bos : endoftext;
  options.eos = endoftext;
  if (form.prepend && options.eos < 0) {  // the legacy LLaMA form: LlamaTokenizer's default EOS
    const auto it = std::find(pieces.begin(), pieces.end(), "</s>");
    if (it != pieces.end()) options.eos = static_cast<int>(it - pieces.begin());
  }
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const std::string config_name = config_path.string();
    const JsonReader c(config_name);
    const json config = ParseJsonFile(config_name);
    if (!config.is_object()) c.Bad("the top level", config, "an object");
    options.bos = ConfigToken(c, config, "bos_token", pieces, options.bos);
    options.eos = ConfigToken(c, config, "eos_token", pieces, options.eos);
    if (options.add_bos && options.bos != template_bos) {
      Fail("{}: bos_token is id {}, but {}'s post_processor begins prompts with id {}", config_name,
           options.bos, path, template_bos);
    }
  }
  if (const json* u = JsonReader::Member(model, "unk_token");
      chars && u != nullptr && !u->is_null()) {
    const std::string& name = r.String(*u, "model.unk_token");
    const auto it = std::find(pieces.begin(), pieces.end(), name);
    if (it == pieces.end()) {
      Fail("{}: model.unk_token is {}, which is no token of model.vocab", path, Quote(name));
    }
    options.unk = static_cast<int>(it - pieces.begin());
  }
  options.kinds = std::move(kinds);
  return Build(path, "model.vocab", "model.merges", std::move(pieces), merges, std::move(options));
}

// ---- tokenizer.json writer --------------------------------------------------------------------

std::string SerializeBpeTokenizerJson(const BpeTokenizer& t) {
  const BpeOptions& o = t.options();
  if (o.add_prefix_space) {
    Fail("{}: a vocabulary that adds a space before the text is not written as a tokenizer.json",
         t.source());
  }
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ojson added = ojson::array();
  auto add = [&](const std::string& content, int id, bool special) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", std::binary_search(o.rstrip.begin(), o.rstrip.end(), id)},
                     {"normalized", false},
                     {"special", special}});
  };
  std::vector<std::pair<int, std::pair<std::string, bool>>> extra;
  for (int id = 0; id < t.vocab_size(); ++id) {
    if (t.Kind(id) == BpeTokenKind::kControl) extra.push_back({id, {t.Piece(id), true}});
  }
  for (const auto& [text, id] : o.matched) extra.push_back({id, {text, false}});
  std::sort(extra.begin(), extra.end());
  for (const auto& [id, token] : extra) add(token.first, id, token.second);
  j["added_tokens"] = added;
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  const ojson replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  if (o.chars && o.prepend_space) {  // the legacy LLaMA form (SentencePieceStyle above)
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", ojson::array({{{"type", "Prepend"}, {"prepend", space}}, replace})}};
    j["pre_tokenizer"] = nullptr;
  } else if (o.chars) {  // Gemma's form
    j["normalizer"] = replace;
    j["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", " "}}},
                          {"behavior", "MergedWithPrevious"},
                          {"invert", false}};
  } else {
    j["normalizer"] = o.nfc ? ojson{{"type", "NFC"}} : ojson(nullptr);
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         ojson::array({{{"type", "Split"},
                        {"pattern", {{"Regex", std::string(BpeSplitPattern(o.split))}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", false}}})}};
  }
  if (o.add_bos) {
    const std::string& bos = t.Piece(o.bos);
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", ojson::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", ojson::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                               {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                               {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{bos, {{"id", bos}, {"ids", ojson::array({o.bos})}, {"tokens", ojson::array({bos})}}}}}};
  } else if (o.chars) {
    j["post_processor"] = nullptr;
  } else {
    j["post_processor"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  }
  if (o.chars) {
    ojson steps =
        ojson::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}});
    if (o.prepend_space) {
      steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    j["decoder"] = {{"type", "Sequence"}, {"decoders", steps}};
  } else {
    j["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", true},
                    {"trim_offsets", true},
                    {"use_regex", true}};
  }
  ojson vocab = ojson::object();
  if (o.chars) {
    // Every token, control ones too, as Gemma's file lists them; a matched token whose text is
    // spelled otherwise than its piece is an added token only (its id would be taken twice).
    std::vector<uint8_t> apart(static_cast<size_t>(t.vocab_size()), 0);
    for (const auto& [text, id] : o.matched) apart[static_cast<size_t>(id)] = text != t.Piece(id);
    for (int id = 0; id < t.vocab_size(); ++id) {
      if (!apart[static_cast<size_t>(id)]) vocab[t.Piece(id)] = id;
    }
  } else {
    for (int id = 0; id < t.vocab_size(); ++id) {
      if (t.Kind(id) == BpeTokenKind::kNormal) vocab[t.Piece(id)] = id;
    }
    for (const auto& [text, id] : o.matched) vocab.erase(text);  // an added token, as in Qwen's
  }
  ojson merges = ojson::array();
  for (const BpeMerge& m : t.Merges()) merges.push_back({t.Piece(m.left), t.Piece(m.right)});
  const ojson no_affix = o.chars ? ojson(nullptr) : ojson("");
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", o.chars && o.unk >= 0 ? ojson(t.Piece(o.unk)) : ojson(nullptr)},
                {"continuing_subword_prefix", no_affix},
                {"end_of_word_suffix", no_affix},
                {"fuse_unk", o.chars},
                {"byte_fallback", o.chars},
                {"ignore_merges", o.ignore_merges},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

std::string SerializeBpeTokenizerConfig(const BpeTokenizer& t) {
  const BpeOptions& o = t.options();
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["add_bos_token"] = o.add_bos;
  j["add_eos_token"] = false;
  j["bos_token"] = o.bos >= 0 ? nlohmann::ordered_json(t.Piece(o.bos)) : nullptr;
  j["eos_token"] = o.eos >= 0 ? nlohmann::ordered_json(t.Piece(o.eos)) : nullptr;
  if (o.chars && o.unk >= 0) j["unk_token"] = t.Piece(o.unk);
  j["clean_up_tokenization_spaces"] = false;
  j["model_max_length"] = 131072;
  return j.dump(2) + "\n";
}

void SaveBpeTokenizerFiles(const BpeTokenizer& t, const std::string& dir) {
  const std::string json = SerializeBpeTokenizerJson(t), config = SerializeBpeTokenizerConfig(t);
  for (const auto& [name, text] :
       {std::pair{"tokenizer.json", &json}, std::pair{"tokenizer_config.json", &config}}) {
    AtomicFile out((std::filesystem::path(dir) / name).string());
    out.Write(text->data(), text->size(), fmt::format("the {}", name));
    out.Commit();
  }
}

// ---- TextTokenizer ----------------------------------------------------------------------------

namespace {

// The length of the longest prefix of `s` that does not end inside a UTF-8 sequence that the
// next bytes could still complete: a trailing lead byte with fewer continuation bytes than it
// announces is held back. Anything else (complete sequences, invalid bytes) is passed on.
size_t CompletePrefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = b >= 0xC2 && b <= 0xDF   ? 2
                        : b >= 0xE0 && b <= 0xEF ? 3
                        : b >= 0xF0 && b <= 0xF4 ? 4
                                                 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

class BpeDecoder : public TokenTextDecoder {
 public:
  // strip_first: drop a space that starts the decoded text (BpeOptions::prepend_space, when
  // nothing but BOS comes before it).
  BpeDecoder(const BpeTokenizer& tokenizer, bool strip_first)
      : tok_(tokenizer), strip_(strip_first) {}
  std::string Next(int token) override {
    const std::string& bytes = tok_.TokenBytes(token);
    if (strip_ && !bytes.empty()) {
      strip_ = false;
      held_.append(bytes, bytes.front() == ' ' ? 1 : 0);
    } else {
      held_ += bytes;
    }
    const size_t cut = CompletePrefix(held_);
    std::string out = held_.substr(0, cut);
    held_.erase(0, cut);
    return out;
  }
  std::string Finish() override { return std::exchange(held_, {}); }

 private:
  const BpeTokenizer& tok_;
  bool strip_ = false;
  std::string held_;  // the start of a character whose other bytes have not come yet
};

class BpeTextTokenizer : public TextTokenizer {
 public:
  explicit BpeTextTokenizer(BpeTokenizer tokenizer)
      : tok_(std::move(tokenizer)), special_(tok_.SpecialTokens()) {}
  std::string Name() const override { return tok_.source(); }
  int vocab_size() const override { return tok_.vocab_size(); }
  int bos() const override { return tok_.bos(); }
  int eos() const override { return tok_.eos(); }
  std::vector<int> EncodePrompt(std::string_view text) const override {
    std::vector<int> ids;
    if (tok_.add_bos()) ids.push_back(tok_.bos());
    const std::vector<int> body = tok_.Encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (ids.empty() && tok_.bos() >= 0) ids.push_back(tok_.bos());
    return ids;
  }
  std::vector<int> EncodePromptParsingSpecial(std::string_view text) const override {
    std::vector<int> ids = EncodeAtSpecialTokens(
        text, special_, tok_.add_bos() ? std::vector<int>{tok_.bos()} : std::vector<int>{},
        [this](std::string_view piece) { return tok_.Encode(piece); }, tok_.options().rstrip);
    if (ids.empty() && tok_.bos() >= 0) ids.push_back(tok_.bos());
    return ids;
  }
  std::vector<std::pair<std::string, int>> SpecialTokens() const override { return special_; }
  std::vector<int> TokensSpelled(
      const std::function<bool(std::string_view)>& match) const override {
    return IdsSpelled(
        tok_.vocab_size(), [this](int id) { return tok_.Piece(id); }, match);
  }
  TextStream EncodeText(const std::string& path) const override {
    return EncodeTextPath(path, [this](const std::string& text) { return tok_.Encode(text); });
  }
  std::string ProtocolText() const override {
    if (tok_.options().chars) {
      return fmt::format(
          "Text files are encoded whole with the SentencePiece-style BPE tokenizer (spaces as "
          "\"\xE2\x96\x81\", characters not in the vocabulary as their UTF-8 bytes, {}), newlines "
          "and "
          "blank lines kept as in the file, no BOS or EOS inside the stream. A directory means its "
          "*.txt files in name order, each encoded on its own, concatenated.",
          tok_.options().prepend_space
              ? "a \"\xE2\x96\x81\" before each file's text and after each added token in it"
              : "no space added");
    }
    return BpeTextProtocolText(tok_.add_prefix_space());
  }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const override {
    // A token's bytes do not depend on its neighbours, but for the space a prepend_space
    // vocabulary puts before the text: dropped when the text starts here (the prompt decodes to
    // nothing: empty, BOS, control tokens), as the decoder's Strip drops it from the whole text.
    const bool start = std::all_of(prompt.begin(), prompt.end(),
                                   [this](int id) { return tok_.TokenBytes(id).empty(); });
    return std::make_unique<BpeDecoder>(tok_, tok_.options().prepend_space && start);
  }

 private:
  BpeTokenizer tok_;
  std::vector<std::pair<std::string, int>> special_;
};

}  // namespace

std::unique_ptr<TextTokenizer> MakeBpeTextTokenizer(BpeTokenizer tokenizer) {
  return std::make_unique<BpeTextTokenizer>(std::move(tokenizer));
}

std::string BpeTextProtocolText(bool add_prefix_space) {
  return fmt::format(
      "Text files are encoded whole with the byte-level BPE tokenizer (GPT-2's pre-tokenizer "
      "split, {}), newlines and blank lines kept as in the file, no BOS or EOS inside the stream. "
      "A directory means its *.txt files in name order, each encoded on its own, concatenated.",
      add_prefix_space ? "one space added before a file that does not begin with one"
                       : "no space added");
}

}  // namespace stretch
