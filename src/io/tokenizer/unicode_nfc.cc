#include "src/io/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/io/tokenizer/bpe_pretokenizer.h"

namespace stretch {
namespace {

using namespace nfc_table;

// Hangul syllables (The Unicode Standard, section 3.12, "Conjoining Jamo Behavior").
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

unsigned CombiningClassOf(char32_t cp) {
  if (cp < 0x300) return 0;  // the first code point with a non-zero class is U+0300
  const CombiningClass* end = kCombining + kCombiningCount;
  const CombiningClass* it = std::lower_bound(
      kCombining, end, cp, [](const CombiningClass& c, char32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

// Appends the full canonical decomposition of cp.
void Decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {  // the first code point with a canonical decomposition is U+00C0
    const Decomposition* end = kDecompositions + kDecompositionCount;
    const Decomposition* it = std::lower_bound(
        kDecompositions, end, cp, [](const Decomposition& d, char32_t v) { return d.cp < v; });
    if (it != end && it->cp == cp) {
      Decompose(it->first, out);
      if (it->second != 0) Decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto v) {
        return c.first != v.first ? c.first < v.first : c.second < v.second;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// NFC of the decomposed code points d (UAX #15: canonical ordering, then composition), appended
// to out as UTF-8.
void OrderComposeAppend(std::vector<char32_t>& d, std::vector<unsigned>& cls, std::string& out) {
  if (d.empty()) return;
  cls.resize(d.size());
  for (size_t k = 0; k < d.size(); ++k) cls[k] = CombiningClassOf(d[k]);
  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t k = 0; k < d.size();) {
    if (cls[k] == 0) {
      ++k;
      continue;
    }
    size_t end = k;
    while (end < d.size() && cls[end] != 0) ++end;
    if (end - k > 1) {
      std::vector<std::pair<unsigned, char32_t>> run;
      for (size_t j = k; j < end; ++j) run.emplace_back(cls[j], d[j]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      for (size_t j = k; j < end; ++j) cls[j] = run[j - k].first, d[j] = run[j - k].second;
    }
    k = end;
  }
  // Canonical composition: each code point joins the last starter when nothing between them
  // blocks it (a code point of class 0 or of a class >= its own).
  size_t n = 0;  // the composed code points are d[0, n)
  size_t starter = 0;
  bool have_starter = cls[0] == 0;
  unsigned last = cls[0] == 0 ? 0 : 256;  // a leading non-starter blocks everything after it
  d[n++] = d[0];
  for (size_t k = 1; k < d.size(); ++k) {
    const char32_t c = d[k];
    const unsigned cc = cls[k];
    if (have_starter && (last < cc || (last == 0 && n == starter + 1))) {
      if (const char32_t composite = Compose(d[starter], c); composite != 0) {
        d[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = n;
      have_starter = true;
    }
    last = cc;
    d[n++] = c;
  }
  for (size_t k = 0; k < n; ++k) AppendUtf8(d[k], out);
  d.clear();
}

}  // namespace

std::string NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char b) { return static_cast<unsigned char>(b) < 0x80; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> d;
  std::vector<unsigned> cls;
  for (size_t i = 0; i < text.size();) {
    const Utf8CodePoint c = DecodeUtf8At(text, i);
    const bool valid = c.len > 1 || static_cast<unsigned char>(text[i]) < 0x80;
    if (!valid) {  // kept as it is; it ends the run
      OrderComposeAppend(d, cls, out);
      out += text[i];
      ++i;
      continue;
    }
    // An ASCII code point is a starter that is no composite's second part, so nothing before it
    // reorders or composes across it: the text so far can be finished there. Doing so now and
    // then bounds the buffer on long texts.
    if (c.cp < 0x80 && d.size() > 4096) OrderComposeAppend(d, cls, out);
    Decompose(c.cp, d);
    i += static_cast<size_t>(c.len);
  }
  OrderComposeAppend(d, cls, out);
  return out;
}

std::string_view NfcVersion() { return kVersion; }

}  // namespace stretch
