#include "src/io/tokenizer/bpe_pretokenizer.h"

#include <array>
#include <cstdint>
#include <string>

namespace stretch {
namespace {

std::array<UnicodeClass, 128> MakeAsciiClasses() {
  std::array<UnicodeClass, 128> t{};
  for (char32_t c = 0; c < 128; ++c) t[c] = ClassOfCodePoint(c);
  return t;
}
const std::array<UnicodeClass, 128> kAsciiClass = MakeAsciiClasses();

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8CodePoint DecodeUtf8At(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, kAsciiClass[b0]};
  const Utf8CodePoint invalid{b0, 1, UnicodeClass::kOther};
  int len = 0;
  char32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return invalid;
  }
  if (i + static_cast<size_t>(len) > s.size()) return invalid;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if (k == 1 ? (b < lo || b > hi) : !IsContinuation(b)) return invalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len, ClassOfCodePoint(cp)};
}

namespace {

using CodePoint = Utf8CodePoint;
CodePoint DecodeAt(std::string_view s, size_t i) { return DecodeUtf8At(s, i); }

// GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ as a
// scanner: at each position the first alternative that matches wins (the contractions, then a run
// of one class with an optional leading space, then whitespace), each run as long as it goes.
// `emit` gets each piece in order.
template <typename Emit>
void ForEachGpt2Piece(std::string_view s, Emit&& emit) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive in GPT-2's pattern).
    if (s[i] == '\'' && i + 1 < n) {
      const char a = s[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        emit(s.substr(i, 2));
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const char b = s[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          emit(s.substr(i, 3));
          i += 3;
          continue;
        }
      }
    }
    //  ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ : the optional space is taken when a code point of
    // one of the three classes follows it.
    CodePoint first = DecodeAt(s, i);
    size_t body = i;
    if (s[i] == ' ' && i + 1 < n) {
      const CodePoint next = DecodeAt(s, i + 1);
      if (next.cls != UnicodeClass::kWhitespace) first = next, body = i + 1;
    }
    if (first.cls != UnicodeClass::kWhitespace) {
      size_t j = body + static_cast<size_t>(first.len);
      while (j < n) {
        const CodePoint c = DecodeAt(s, j);
        if (c.cls != first.cls) break;
        j += static_cast<size_t>(c.len);
      }
      emit(s.substr(i, j - i));
      i = j;
      continue;
    }
    // \s+(?!\S) | \s+ : a run of whitespace. At the end of the text, or of one code point, the
    // run is the piece. Before a non-space, \s+(?!\S) backtracks by one code point, leaving the
    // last one to begin the next piece (" word" when it is a space).
    size_t j = i, last = i;
    int count = 0;
    while (j < n) {
      const CodePoint c = DecodeAt(s, j);
      if (c.cls != UnicodeClass::kWhitespace) break;
      last = j;
      j += static_cast<size_t>(c.len);
      ++count;
    }
    if (j < n && count >= 2) j = last;
    emit(s.substr(i, j - i));
    i = j;
  }
}

bool IsLineBreak(const CodePoint& c) { return c.cp == U'\r' || c.cp == U'\n'; }

// LLaMA 3's and Qwen 2's pattern (bpe_pretokenizer.h) as a scanner; `max_digits` is 3 (\p{N}{1,3})
// or 1 (\p{N}).
template <typename Emit>
void ForEachLlama3Piece(std::string_view s, int max_digits, Emit&& emit) {
  const size_t n = s.size();
  auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  // The end of the run of code points from j on for which `in` holds.
  auto run_end = [&](size_t j, auto&& in) {
    while (j < n) {
      const CodePoint c = DecodeAt(s, j);
      if (!in(c)) break;
      j += static_cast<size_t>(c.len);
    }
    return j;
  };
  auto is = [](UnicodeClass cls) { return [cls](const CodePoint& c) { return c.cls == cls; }; };
  size_t i = 0;
  while (i < n) {
    auto take = [&](size_t end) {
      emit(s.substr(i, end - i));
      i = end;
    };
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (s[i] == '\'' && i + 1 < n) {
      const char a = lower(s[i + 1]);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        take(i + 2);
        continue;
      }
      if (i + 2 < n) {
        const char b = lower(s[i + 2]);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          take(i + 3);
          continue;
        }
      }
    }
    const CodePoint c0 = DecodeAt(s, i);
    const size_t after0 = i + static_cast<size_t>(c0.len);
    // [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, with one code point before it that is not a line
    // break, a letter or a number.
    if (c0.cls == UnicodeClass::kLetter) {
      take(run_end(after0, is(UnicodeClass::kLetter)));
      continue;
    }
    if (c0.cls != UnicodeClass::kNumber && !IsLineBreak(c0) && after0 < n &&
        DecodeAt(s, after0).cls == UnicodeClass::kLetter) {
      take(run_end(after0, is(UnicodeClass::kLetter)));
      continue;
    }
    // \p{N}{1,3} (LLaMA 3) or \p{N} (Qwen 2)
    if (c0.cls == UnicodeClass::kNumber) {
      size_t j = after0;
      for (int k = 1; k < max_digits && j < n; ++k) {
        const CodePoint c = DecodeAt(s, j);
        if (c.cls != UnicodeClass::kNumber) break;
        j += static_cast<size_t>(c.len);
      }
      take(j);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]* : a run of other code points (after one optional space), and
    // the line breaks right after it.
    size_t body = i;
    if (s[i] == ' ' && after0 < n && DecodeAt(s, after0).cls == UnicodeClass::kOther) body = after0;
    if (DecodeAt(s, body).cls == UnicodeClass::kOther) {
      const size_t j = run_end(body, is(UnicodeClass::kOther));
      take(run_end(j, [](const CodePoint& c) { return IsLineBreak(c); }));
      continue;
    }
    // c0 is white space here (every other class has matched above).
    // \s*[\r\n]+ : the run of white space up to its last line break (greedy \s* gives back
    // code points until a line break follows).
    const size_t ws_end = run_end(i, is(UnicodeClass::kWhitespace));
    size_t last_break = std::string_view::npos;
    for (size_t j = i; j < ws_end; j += static_cast<size_t>(DecodeAt(s, j).len)) {
      if (s[j] == '\r' || s[j] == '\n') last_break = j;
    }
    if (last_break != std::string_view::npos) {
      take(last_break + 1);
      continue;
    }
    // \s+(?!\S) | \s+ : as GPT-2's (a run before a non-space leaves its last code point).
    size_t last = i;
    int count = 0;
    for (size_t j = i; j < ws_end; j += static_cast<size_t>(DecodeAt(s, j).len)) {
      last = j;
      ++count;
    }
    take(ws_end < n && count >= 2 ? last : ws_end);
  }
}

}  // namespace

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string_view BpeSplitName(BpeSplit split) {
  switch (split) {
    case BpeSplit::kGpt2: return "gpt-2";
    case BpeSplit::kLlama3: return "llama-bpe";
    case BpeSplit::kQwen2: return "qwen2";
  }
  return "?";
}

std::optional<BpeSplit> BpeSplitOfGgufPre(std::string_view pre) {
  if (pre == "gpt-2") return BpeSplit::kGpt2;
  // llama.cpp's llama-vocab.cpp: "llama3", "llama-v3" and "llama-bpe" select LLAMA3.
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return BpeSplit::kLlama3;
  if (pre == "qwen2") return BpeSplit::kQwen2;
  return std::nullopt;
}

std::string_view BpeSplitPattern(BpeSplit split) {
  switch (split) {
    case BpeSplit::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case BpeSplit::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case BpeSplit::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return "";
}

std::optional<BpeSplit> BpeSplitOfPattern(std::string_view regex) {
  for (const BpeSplit s : {BpeSplit::kGpt2, BpeSplit::kLlama3, BpeSplit::kQwen2}) {
    if (regex == BpeSplitPattern(s)) return s;
  }
  return std::nullopt;
}

void ForEachBpePiece(BpeSplit split, std::string_view text,
                     const std::function<void(std::string_view)>& emit) {
  switch (split) {
    case BpeSplit::kGpt2: ForEachGpt2Piece(text, emit); return;
    case BpeSplit::kLlama3: ForEachLlama3Piece(text, 3, emit); return;
    case BpeSplit::kQwen2: ForEachLlama3Piece(text, 1, emit); return;
  }
}

std::vector<std::string_view> SplitBpePieces(BpeSplit split, std::string_view text) {
  std::vector<std::string_view> pieces;
  ForEachBpePiece(split, text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace stretch
