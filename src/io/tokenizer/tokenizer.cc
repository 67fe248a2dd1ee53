// The llama2.c tokenizer. File format and algorithms as in llama2.c (Karpathy, MIT):
// tokenizer.py export() writes the file; run.c build_tokenizer() reads it, encode() and decode()
// define the semantics reproduced here. This file is written from those descriptions.
#include "src/io/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/binary_reader.h"
#include "src/io/tokenizer/text_tokenizer.h"

namespace stretch {
namespace {

// Bounds on the file's counts, checked before they are used: max_token_length is 27 for LLaMA's
// 32000-token vocabulary and a few hundred bytes at most for any real one; 2^24 tokens is 64x the
// largest published vocabulary (256k), and keeps ids within int.
constexpr int32_t kMaxTokenLength = 1 << 16;
constexpr int64_t kMaxTokens = 1 << 24;

// llama2.c's encode() starts each search with best_score = -1e10 and merges only when a pair's
// score is strictly greater, so a pair scored <= -1e10 (or NaN) is never merged. Kept for
// identical output.
constexpr float kMinMergeScore = -1e10f;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a byte-fallback piece "<0xAB>" (either hex case, as llama2.c's sscanf accepts), or
// -1.
int PieceByte(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]), lo = HexDigit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

bool LooksLikeLlama2cTokenizer(std::string_view head) {
  const auto i32 = [&head](size_t at) {
    int32_t v = 0;
    std::memcpy(&v, head.data() + at, 4);
    return v;
  };
  if (head.size() < 4) return false;
  const int32_t max_len = i32(0);
  if (max_len < 1 || max_len > kMaxTokenLength) return false;
  // The records within the head: each a 4-byte score (any value: a bad score gets its own
  // message), a length in 0..max_token_length and that many bytes.
  size_t at = 4;
  int records = 0;
  while (at + 8 <= head.size() && records < 64) {
    const int32_t len = i32(at + 4);
    if (len < 0 || len > max_len) return false;
    at += 8 + static_cast<size_t>(len);
    ++records;
  }
  return records > 0 || head.size() == 4;
}

Tokenizer Tokenizer::LoadLlama2c(const std::string& path) {
  BinaryReader r(path, "a llama2.c tokenizer file");
  if (r.size() == 0) {
    Fail(
        "{}: empty file: expected a llama2.c tokenizer (int32 max_token_length, then one record "
        "per token)",
        path);
  }
  const int32_t max_len = r.ReadI32("max_token_length");
  if (max_len < 1 || max_len > kMaxTokenLength) {
    Fail("{}: max_token_length={} in the header: expected 1..{}", path, max_len, kMaxTokenLength);
  }
  Tokenizer t;
  t.path_ = path;
  while (r.remaining() > 0) {
    const int64_t k = static_cast<int64_t>(t.pieces_.size());
    if (k >= kMaxTokens) {
      Fail("{}: more than {} tokens (at offset {}): expected at most {}", path, kMaxTokens,
           r.offset(), kMaxTokens);
    }
    auto cut = [&](const char* field, int64_t expected) {
      if (r.remaining() < expected) {
        Fail("{}: truncated at token #{} (field {}) at offset {}: found {} bytes, expected {}",
             path, k, field, r.offset(), r.remaining(), expected);
      }
    };
    cut("score", 4);
    const float score = r.ReadF32("score");
    // A NaN score is never merged into and an infinite one always wins: the file encodes text
    // into other tokens than the vocabulary's author meant (all NaN: one token per byte).
    if (!std::isfinite(score)) {
      Fail("{}: token #{} has score={} (at offset {}): expected a finite number", path, k, score,
           r.offset() - 4);
    }
    cut("len", 4);
    const int32_t len = r.ReadI32("len");
    if (len < 0 || len > max_len) {
      Fail("{}: token #{} has len={} (at offset {}): expected 0..{} (max_token_length)", path, k,
           len, r.offset() - 4, max_len);
    }
    cut("bytes", len);
    std::string piece(static_cast<size_t>(len), '\0');
    r.ReadBytes(piece.data(), len, "bytes");
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
  }
  return FromVocabulary(path, std::move(t.pieces_), std::move(t.scores_));
}

void SortSpecialTokens(std::vector<std::pair<std::string, int>>& specials) {
  std::erase_if(specials, [](const auto& s) { return s.first.empty(); });
  std::sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.second < b.second;
  });
}

void Tokenizer::SetSpecialTokens(std::vector<std::pair<std::string, int>> special) {
  for (const auto& [spelling, id] : special) {
    STRETCH_CHECK(id >= 0 && id < vocab_size(), "special token {} of {}", id, vocab_size());
  }
  SortSpecialTokens(special);
  special_ = std::move(special);
}

Tokenizer Tokenizer::FromVocabulary(std::string source, std::vector<std::string> pieces,
                                    std::vector<float> scores, SpmLayout layout) {
  Tokenizer t;
  t.path_ = std::move(source);
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  const std::string& path = t.path_;
  STRETCH_CHECK(t.pieces_.size() == t.scores_.size(), "{} pieces, {} scores", t.pieces_.size(),
                t.scores_.size());
  const int64_t n = static_cast<int64_t>(t.pieces_.size());
  if (n > kMaxTokens) Fail("{}: {} tokens: expected at most {}", path, n, kMaxTokens);
  t.llama2c_layout_ = layout.unk == kUnk && layout.bos == kBos && layout.eos == kEos &&
                      layout.add_space_prefix && layout.add_bos && layout.rstrip.empty();
  if (t.llama2c_layout_ && n < 3) {
    Fail("{}: {} tokens: expected at least 3 (<unk>, <s>, </s> at ids 0, 1, 2)", path, n);
  }
  for (const auto& [name, id, none_ok] :
       {std::tuple{"unknown", layout.unk, true}, std::tuple{"BOS", layout.bos, !layout.add_bos},
        std::tuple{"EOS", layout.eos, true}}) {
    if (id < (none_ok ? -1 : 0) || id >= n) {
      Fail("{}: the {} token's id is {}: expected {}0..{}", path, name, id,
           none_ok ? "-1 (none) or " : "", n - 1);
    }
  }
  const bool from_file = !layout.types.empty();
  if (!from_file) {  // llama2.c's (the types llama.cpp's convert-llama2c writes)
    layout.types.resize(static_cast<size_t>(n), SpmTokenType::kNormal);
    for (int64_t id = 0; id < n; ++id) {
      const std::string& p = t.pieces_[static_cast<size_t>(id)];
      SpmTokenType& type = layout.types[static_cast<size_t>(id)];
      if (id == layout.unk) {
        type = SpmTokenType::kUnknown;
      } else if (id == layout.bos || id == layout.eos || p.empty()) {
        type = SpmTokenType::kControl;
      } else if (PieceByte(p) >= 0) {
        type = SpmTokenType::kByte;
      }
    }
  }
  STRETCH_CHECK(static_cast<int64_t>(layout.types.size()) == n, "{} types for {} pieces",
                layout.types.size(), n);
  // A file's types must be those llama2.c's layout implies (a control token elsewhere, as
  // Mistral's [INST], is not llama2.c's).
  for (int64_t id = 0; id < n && t.llama2c_layout_ && from_file; ++id) {
    const std::string& p = t.pieces_[static_cast<size_t>(id)];
    const SpmTokenType want = id == kUnk                              ? SpmTokenType::kUnknown
                              : id == kBos || id == kEos || p.empty() ? SpmTokenType::kControl
                              : PieceByte(p) >= 0                     ? SpmTokenType::kByte
                                                                      : SpmTokenType::kNormal;
    if (layout.types[static_cast<size_t>(id)] != want) t.llama2c_layout_ = false;
  }
  for (const int id : layout.rstrip) {
    STRETCH_CHECK(id >= 0 && id < n, "rstrip token {} of {}", id, n);
  }
  std::sort(layout.rstrip.begin(), layout.rstrip.end());
  t.layout_ = std::move(layout);
  if (!from_file) {
    // llama2.c spells BOS and EOS "\n<s>\n", "\n</s>\n"; a prompt spells them as llama.cpp does.
    t.SetSpecialTokens({{"<unk>", kUnk}, {"<s>", kBos}, {"</s>", kEos}});
  } else {
    // llama.cpp's special tokens (its cache_special_tokens): unknown, control and user-defined.
    std::vector<std::pair<std::string, int>> special;
    for (int64_t id = 0; id < n; ++id) {
      const SpmTokenType type = t.layout_.types[static_cast<size_t>(id)];
      if (((type == SpmTokenType::kUnknown || type == SpmTokenType::kControl) &&
           t.layout_.special_spelling.empty()) ||
          (type == SpmTokenType::kUserDefined && t.layout_.matched.empty())) {
        special.emplace_back(t.pieces_[static_cast<size_t>(id)], static_cast<int>(id));
      }
      if (type == SpmTokenType::kUserDefined && t.layout_.matched.empty()) {
        t.user_defined_.emplace_back(t.pieces_[static_cast<size_t>(id)], static_cast<int>(id));
      }
    }
    for (const auto& [text, id] : t.layout_.special_spelling) {
      STRETCH_CHECK(id >= 0 && id < n &&
                        (t.layout_.types[static_cast<size_t>(id)] == SpmTokenType::kControl ||
                         t.layout_.types[static_cast<size_t>(id)] == SpmTokenType::kUnknown),
                    "special spelling {} is not a control or unknown token", id);
      special.emplace_back(text, id);
    }
    for (const auto& [text, id] : t.layout_.matched) {
      STRETCH_CHECK(id >= 0 && id < n &&
                        t.layout_.types[static_cast<size_t>(id)] == SpmTokenType::kUserDefined,
                    "matched token {} is not user-defined", id);
      t.user_defined_.emplace_back(text, id);
      special.emplace_back(text, id);
    }
    t.SetSpecialTokens(std::move(special));
    SortSpecialTokens(t.user_defined_);
  }
  // A piece that occurs twice maps to its first id (llama2.c's bsearch over a qsorted copy leaves
  // the choice unspecified; LLaMA's and tok512's vocabularies have no duplicates).
  t.piece_to_id_.reserve(t.pieces_.size());
  std::fill(std::begin(t.byte_token_), std::end(t.byte_token_), -1);
  t.piece_byte_.assign(t.pieces_.size(), -1);
  for (size_t id = 0; id < t.pieces_.size(); ++id) {
    t.piece_to_id_.emplace(t.pieces_[id], static_cast<int>(id));
    const int b = PieceByte(t.pieces_[id]);
    if (b >= 0) {
      t.piece_byte_[id] = static_cast<int16_t>(b);
      if (t.byte_token_[b] < 0) t.byte_token_[b] = static_cast<int>(id);
    }
  }
  std::string scratch;
  for (int b = 0; b < 256; ++b) {
    const auto it = t.piece_to_id_.find(std::string(1, static_cast<char>(b)));
    t.one_byte_piece_[b] = it == t.piece_to_id_.end() ? -1 : it->second;
  }
  // Every allowed merge: each piece split into two pieces, in every way (an empty side too, in
  // the odd vocabulary that has an empty piece: llama2.c's concatenation would find it). Only
  // first ids: the encoder's symbols are always the first id of their piece.
  t.mergeable_.assign(t.pieces_.size(), 0);
  for (size_t id = 0; id < t.pieces_.size(); ++id) {
    const std::string& p = t.pieces_[id];
    if (t.piece_to_id_.at(p) != static_cast<int>(id)) continue;  // a duplicate
    if (!(t.scores_[id] > kMinMergeScore)) continue;  // never merged by llama2.c (also NaN)
    for (size_t k = 0; k <= p.size(); ++k) {
      const int left = t.Lookup(std::string_view(p).substr(0, k), scratch);
      if (left < 0) continue;
      const int right = t.Lookup(std::string_view(p).substr(k), scratch);
      if (right < 0) continue;
      t.merges_.emplace(static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right),
                        static_cast<int>(id));
      t.mergeable_[static_cast<size_t>(left)] = 1;
      t.mergeable_[static_cast<size_t>(right)] = 1;
    }
  }
  return t;
}

int Tokenizer::Lookup(std::string_view piece, std::string& scratch) const {
  if (piece.size() == 1) return one_byte_piece_[static_cast<unsigned char>(piece[0])];
  scratch.assign(piece);
  const auto it = piece_to_id_.find(scratch);
  return it == piece_to_id_.end() ? -1 : it->second;
}

// llama2.c's encode() merges by rescanning all pairs after every merge: O(n^2) for n symbols,
// minutes for a book. This runs the same greedy algorithm in O(n log n), with identical output:
//   - symbols live in a doubly linked list over an array; a merged symbol keeps the left one's
//     slot, so slot order is text order;
//   - every adjacent pair that forms a vocabulary entry sits in a max-heap keyed by
//     (score desc, left slot asc): the top is exactly the pair llama2.c's scan picks (highest
//     score, leftmost among equal scores, its comparison being a strict '>');
//   - a merge changes only the pairs next to it: those are pushed anew, and entries that no longer
//     describe the list (a side merged away or changed id) are skipped when popped;
//   - a symbol that is no side of any allowed merge (in tok512 and LLaMA: the byte-fallback
//     newline, among others) can never merge, so no pair ever straddles it: the merges on its two
//     sides are independent, and their order relative to each other does not change either
//     side's result. The text is therefore merged run by run between such symbols, which keeps
//     the heap (and memory) as small as a paragraph even for a whole book.
// Differences from run.c, all where run.c's behaviour is undefined or a C-string artefact:
//   - text is a string_view: a NUL byte is encoded like any byte (run.c stops at it);
//   - the dummy prefix " " goes through the same lookup as the text, so a vocabulary without " "
//     gets its byte-fallback token (run.c would emit id -1);
//   - byte fallback uses the "<0xXX>" table (run.c adds 3 to the byte, the same ids in LLaMA's
//     and tok512's layout), and <unk> when a vocabulary has no such piece.
struct Tokenizer::MergeState {
  struct Symbol {
    int id;    // token id; -1 once merged into its left neighbour
    int prev;  // slot of the previous live symbol, or -1
    int next;  // slot of the next live symbol, or -1
  };
  struct Candidate {
    float score;  // score of the merged piece
    int left;     // slot of the left symbol
    int right;    // slot of the right symbol when pushed
    int right_id;
    int merged_id;
  };
  // Heap order: a is below b when it has a lower score, or an equal score further right.
  static bool Below(const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

void Tokenizer::MergeRun(std::span<const int> run, MergeState& state, std::vector<int>& out) const {
  using Symbol = MergeState::Symbol;
  std::vector<Symbol>& sym = state.symbols;
  std::vector<MergeState::Candidate>& heap = state.heap;
  const int n = static_cast<int>(run.size());
  sym.resize(run.size());
  for (int s = 0; s < n; ++s)
    sym[static_cast<size_t>(s)] = {run[static_cast<size_t>(s)], s - 1, s + 1 < n ? s + 1 : -1};
  auto candidate = [&](int left, MergeState::Candidate& c) {
    const Symbol& l = sym[static_cast<size_t>(left)];
    if (l.next < 0) return false;
    const Symbol& r = sym[static_cast<size_t>(l.next)];
    const auto it = merges_.find(static_cast<uint64_t>(l.id) << 32 | static_cast<uint32_t>(r.id));
    if (it == merges_.end()) return false;
    c = {scores_[static_cast<size_t>(it->second)], left, l.next, r.id, it->second};
    return true;
  };
  heap.clear();
  for (int s = 0; s + 1 < n; ++s) {
    MergeState::Candidate c;
    if (candidate(s, c)) heap.push_back(c);
  }
  std::make_heap(heap.begin(), heap.end(), MergeState::Below);
  auto push = [&](int left) {
    MergeState::Candidate c;
    if (left >= 0 && candidate(left, c)) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), MergeState::Below);
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeState::Below);
    const MergeState::Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = sym[static_cast<size_t>(c.left)];
    // Stale entries: the left symbol was merged into its own left neighbour (id -1), or absorbed
    // another right neighbour (next moved on: slots are never reused), or the right symbol
    // absorbed its own right neighbour (id changed). Otherwise the pair is exactly as pushed.
    if (l.id < 0 || l.next != c.right) continue;
    Symbol& r = sym[static_cast<size_t>(c.right)];
    if (r.id != c.right_id) continue;
    l.id = c.merged_id;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
    r.id = -1;
    push(l.prev);
    push(c.left);
  }
  for (int s = n > 0 ? 0 : -1; s >= 0; s = sym[static_cast<size_t>(s)].next) {
    out.push_back(sym[static_cast<size_t>(s)].id);
  }
}

std::vector<int> Tokenizer::Encode(std::string_view text, bool bos, bool eos) const {
  STRETCH_CHECK(!pieces_.empty(), "Encode on a tokenizer that was never loaded");
  std::vector<int> out;
  // About 2 bytes per token in English text with tok512, 4 with LLaMA's vocabulary.
  out.reserve(text.size() / 2 + 3);
  if (bos) {
    if (layout_.bos < 0) Fail("{}: the vocabulary has no BOS token to begin with", path_);
    out.push_back(layout_.bos);
  }
  if (user_defined_.empty()) {
    EncodePart(text, out);
  } else {
    for (const PromptPart& part : SplitAtSpecialTokens(text, user_defined_, layout_.rstrip)) {
      if (part.id >= 0) {
        out.push_back(part.id);
      } else {
        EncodePart(part.text, out);
      }
    }
  }
  if (eos) {
    if (layout_.eos < 0) Fail("{}: the vocabulary has no EOS token to end with", path_);
    out.push_back(layout_.eos);
  }
  return out;
}

void Tokenizer::EncodePart(std::string_view text, std::vector<int>& out) const {
  MergeState state;
  std::vector<int> run;  // the current run of mergeable symbols
  std::string scratch;
  auto push_symbol = [&](int id) {
    if (mergeable_[static_cast<size_t>(id)]) {
      run.push_back(id);
      return;
    }
    MergeRun(run, state, out);
    run.clear();
    out.push_back(id);
  };
  // One code point (or up to 4 bytes of a malformed sequence, as run.c groups them): its piece,
  // else one byte-fallback token per byte (the unknown token for a byte without one).
  auto push_code_point = [&](std::string_view cp) {
    const int id = Lookup(cp, scratch);
    if (id >= 0) {
      push_symbol(id);
      return;
    }
    for (const char c : cp) {
      const int b = byte_token_[static_cast<unsigned char>(c)];
      if (b >= 0) {
        push_symbol(b);
      } else if (layout_.unk >= 0) {
        push_symbol(layout_.unk);
      } else {
        Fail("{}: byte 0x{:02X} has no token and the vocabulary no unknown token", path_,
             static_cast<unsigned char>(c));
      }
    }
  };
  // SentencePiece's add_dummy_prefix, as llama2.c applies it: only to non-empty text.
  if (!text.empty() && layout_.add_space_prefix) push_code_point(" ");
  for (size_t i = 0; i < text.size();) {
    // A lead byte (or a stray continuation byte) takes the continuation bytes that follow, up to
    // 4 bytes in all, exactly as run.c's str_buffer loop.
    size_t j = i + 1;
    while (j < text.size() && j - i < 4 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) {
      ++j;
    }
    push_code_point(text.substr(i, j - i));
    i = j;
  }
  MergeRun(run, state, out);
}

std::string Tokenizer::DecodeToken(int prev, int token) const {
  if (token < 0 || token >= vocab_size()) {
    Fail("{}: token id {} out of range: expected 0..{}", path_, token, vocab_size() - 1);
  }
  // <s> and </s> are control tokens with no text (their pieces are "\n<s>\n" and "\n</s>\n" in
  // llama2.c's exports, which run.c never prints), as are all control tokens in llama.cpp's
  // token_to_piece.
  if (layout_.types[static_cast<size_t>(token)] == SpmTokenType::kControl) return {};
  const int byte = piece_byte_[static_cast<size_t>(token)];
  if (byte >= 0) return std::string(1, static_cast<char>(byte));
  std::string_view piece = pieces_[static_cast<size_t>(token)];
  // After BOS, SentencePiece drops the dummy prefix's space (run.c decode, llama2.c PR #89).
  if (prev == layout_.bos && layout_.add_space_prefix && !piece.empty() && piece.front() == ' ') {
    piece.remove_prefix(1);
  }
  return std::string(piece);
}

std::string Tokenizer::Decode(std::span<const int> ids) const {
  std::string out;
  int prev = -1;
  for (const int id : ids) {
    out += DecodeToken(prev, id);
    prev = id;
  }
  return out;
}

void CheckVocabMatches(const std::string& model_path, int model_vocab, const Tokenizer& tokenizer) {
  if (model_vocab != tokenizer.vocab_size()) {
    Fail(
        "{}: vocab_size={} but tokenizer {} has {} tokens: expected the model and the tokenizer "
        "to have the same vocabulary size",
        model_path, model_vocab, tokenizer.path(), tokenizer.vocab_size());
  }
}

}  // namespace stretch
