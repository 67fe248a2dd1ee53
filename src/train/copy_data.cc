#include "src/train/copy_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/train/data.h"

namespace stretch {
namespace {

// A uniform integer in [lo, hi].
int64_t UniformIn(Rng& rng, int64_t lo, int64_t hi) {
  STRETCH_CHECK(lo <= hi, "empty range [{}, {}]", lo, hi);
  return lo + static_cast<int64_t>(UniformIndex(rng, static_cast<uint64_t>(hi - lo + 1)));
}

// Exactly n tokens of random characters of `alphabet`, the last character's tokens cut at n.
std::vector<int> RandomTokens(const std::vector<std::vector<int>>& alphabet, int64_t n, Rng& rng) {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) {
    const std::vector<int>& c = alphabet[UniformIndex(rng, alphabet.size())];
    out.insert(out.end(), c.begin(), c.end());
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

// Exactly n tokens of characters of `alphabet` drawn without replacement while any is left (a
// partial Fisher-Yates shuffle), then with replacement.
std::vector<int> DistinctTokens(const std::vector<std::vector<int>>& alphabet, int64_t n,
                                Rng& rng) {
  std::vector<size_t> order(alphabet.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<int> out;
  out.reserve(static_cast<size_t>(n));
  for (size_t i = 0; static_cast<int64_t>(out.size()) < n; ++i) {
    size_t pick = 0;
    if (i < order.size()) {
      std::swap(order[i], order[i + UniformIndex(rng, order.size() - i)]);
      pick = order[i];
    } else {
      pick = UniformIndex(rng, alphabet.size());
    }
    out.insert(out.end(), alphabet[pick].begin(), alphabet[pick].end());
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

// The string alphabet of one row: the whole of it, or (draw_min >= 2) a random subset of a
// characters, a uniform in [draw_min, size] (CopyAlphabets::draw_min).
std::vector<std::vector<int>> RowStringAlphabet(const CopyAlphabets& alphabets, Rng& rng) {
  const int64_t size = static_cast<int64_t>(alphabets.string.size());
  if (alphabets.draw_min < 2 || alphabets.draw_min >= size) return alphabets.string;
  const int64_t a = UniformIn(rng, alphabets.draw_min, size);
  std::vector<size_t> order(static_cast<size_t>(size));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < static_cast<size_t>(a); ++i) {
    std::swap(order[i], order[i + UniformIndex(rng, order.size() - i)]);
    out.push_back(alphabets.string[order[i]]);
  }
  return out;
}

// Appends `piece` to `row`, cut at the row's capacity `cap`.
void AppendCut(std::vector<int>& row, const std::vector<int>& piece, int64_t cap) {
  const int64_t room = cap - static_cast<int64_t>(row.size());
  const int64_t n = std::min<int64_t>(room, static_cast<int64_t>(piece.size()));
  if (n > 0) row.insert(row.end(), piece.begin(), piece.begin() + n);
}

// Whether `fresh` shares a span of k tokens with `before` (any alignment).
bool SharesSpan(std::span<const int> before, std::span<const int> fresh, int64_t k) {
  if (static_cast<int64_t>(fresh.size()) < k || static_cast<int64_t>(before.size()) < k)
    return false;
  std::set<std::vector<int>> seen;
  for (size_t i = 0; i + static_cast<size_t>(k) <= before.size(); ++i) {
    seen.emplace(before.begin() + static_cast<std::ptrdiff_t>(i),
                 before.begin() + static_cast<std::ptrdiff_t>(i + static_cast<size_t>(k)));
  }
  for (size_t i = 0; i + static_cast<size_t>(k) <= fresh.size(); ++i) {
    const std::vector<int> piece(
        fresh.begin() + static_cast<std::ptrdiff_t>(i),
        fresh.begin() + static_cast<std::ptrdiff_t>(i + static_cast<size_t>(k)));
    if (seen.contains(piece)) return true;
  }
  return false;
}

// A string of n tokens of `letters` that shares no span of kControlSpan tokens with `before`.
std::vector<int> FreshString(const std::vector<std::vector<int>>& letters,
                             std::span<const int> before, int64_t n, Rng& rng) {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::vector<int> fresh = RandomTokens(letters, n, rng);
    if (!SharesSpan(before, fresh, kControlSpan)) return fresh;
  }
  Fail(
      "copy data: no fresh string of {} tokens found in 10000 draws that shares no span of {} "
      "tokens with the row before it: the string alphabet's characters share tokens",
      n, kControlSpan);
}

// The scored positions of a copy of s tokens starting at index c: targets c + 1 .. c + s - 1,
// read at positions c .. c + s - 2.
std::vector<int64_t> ScoredAfterFirst(int64_t c, int64_t s) {
  std::vector<int64_t> p;
  for (int64_t k = 1; k < s; ++k) p.push_back(c + k - 1);
  return p;
}

std::vector<std::vector<int>> EncodeAlphabet(const TextEncoder& encode, std::string_view chars,
                                             const char* which) {
  if (chars.size() < 2) {
    Fail("copy data: the {} alphabet \"{}\" has {} characters, expected at least 2", which, chars,
         chars.size());
  }
  std::vector<std::vector<int>> out;
  for (const char c : chars) {
    out.push_back(encode(std::string_view(&c, 1)));
    if (out.back().empty()) {
      Fail("copy data: the {} alphabet's character '{}' encodes to no token, expected at least one",
           which, c);
    }
  }
  return out;
}

}  // namespace

CopyAlphabets EncodeCopyAlphabets(const TextEncoder& encode, std::string_view string_chars,
                                  std::string_view gap_chars) {
  CopyAlphabets a;
  a.string = EncodeAlphabet(encode, string_chars, "string");
  a.gap = EncodeAlphabet(encode, gap_chars, "gap");
  // Disjoint at the token level: a gap token that is also a string token would put part of the
  // answer (or something the model could mistake for it) into the gap.
  for (size_t i = 0; i < a.string.size(); ++i) {
    for (size_t j = 0; j < a.gap.size(); ++j) {
      for (const int t : a.gap[j]) {
        if (std::find(a.string[i].begin(), a.string[i].end(), t) != a.string[i].end()) {
          Fail(
              "copy data: the string character '{}' and the gap character '{}' share token {}; "
              "expected alphabets whose tokens are disjoint",
              string_chars[i], gap_chars[j], t);
        }
      }
    }
  }
  return a;
}

CopySpans DefaultCopySpans(int64_t T) {
  const int64_t lo = std::max<int64_t>(2, T / 16);
  return {lo, std::max(lo, 5 * T / 16)};
}

void CheckCopySpans(const CopySpans& spans, int64_t T, const std::string& what) {
  if (spans.min < 2 || spans.max < spans.min || 2 * spans.max > T - 1) {
    Fail(
        "{}: string lengths {}..{} at sequence length {}: expected 2 <= min <= max and 2 max <= "
        "{} (a gapped row holds BOS and two copies)",
        what, spans.min, spans.max, T, T - 1);
  }
}

std::string_view RowKindName(RowKind kind) {
  switch (kind) {
    case RowKind::kText: return "text";
    case RowKind::kPasskey: return "passkey";
    case RowKind::kPeriodic: return "periodic";
    case RowKind::kGapped: return "gapped";
    case RowKind::kTextCopy: return "textcopy";
    case RowKind::kRandCopy: return "randcopy";
    case RowKind::kTextPeriodic: return "textperiodic";
    case RowKind::kTextDecoy: return "textdecoy";
    case RowKind::kTextFar: return "textfar";
    case RowKind::kTextEdge: return "textedge";
  }
  return "?";
}

double CopyMix::text() const {
  double others = 0.0;
  for (const CopyMixKind& k : kCopyMixKinds) others += this->*k.share;
  return 1.0 - others;
}

bool CopyMix::HasCopy() const {
  return std::any_of(kCopyMixKinds.begin(), kCopyMixKinds.end(), [&](const CopyMixKind& k) {
    return k.kind != RowKind::kPasskey && this->*k.share > 0.0;
  });
}

CopyMix ParseCopyMix(std::string_view text, const std::string& what) {
  CopyMix mix;
  std::optional<double> text_share;
  std::set<std::string> seen;
  const auto bad = [&](std::string_view entry, const std::string& why) {
    Fail("{} {}: entry \"{}\": {}", what, text, entry, why);
  };
  std::vector<std::string_view> names = {"text"};
  for (const CopyMixKind& k : kCopyMixKinds) names.push_back(RowKindName(k.kind));
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view entry = text.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) {
      if (text.empty()) break;
      bad(entry, "expected NAME=SHARE");
    }
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) bad(entry, "expected NAME=SHARE");
    const std::string name(entry.substr(0, eq));
    const std::string_view value = entry.substr(eq + 1);
    double v = 0;
    const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size() || !(v >= 0.0 && v <= 1.0)) {
      bad(entry, fmt::format("the share \"{}\": expected a number in [0, 1]", value));
    }
    if (!seen.insert(name).second) bad(entry, fmt::format("{} given twice", name));
    if (name == "text") {
      text_share = v;
      continue;
    }
    const auto k = std::find_if(kCopyMixKinds.begin(), kCopyMixKinds.end(),
                                [&](const CopyMixKind& c) { return RowKindName(c.kind) == name; });
    if (k == kCopyMixKinds.end()) {
      bad(entry, fmt::format("unknown kind \"{}\": expected {} or {}", name,
                             fmt::join(names.begin(), names.end() - 1, ", "), names.back()));
    }
    mix.*(k->share) = v;
  }
  const double others = 1.0 - mix.text();
  if (others > 1.0 + 1e-9) {
    Fail("{} {}: the shares add up to {}, expected at most 1 (text takes what they leave)", what,
         text, others);
  }
  if (text_share && std::abs(*text_share + others - 1.0) > 1e-9) {
    Fail("{} {}: the shares add up to {}, expected 1 (or leave text out: it takes the rest)", what,
         text, *text_share + others);
  }
  return mix;
}

std::string CopyMixText(const CopyMix& mix) {
  std::string out;
  for (const CopyMixKind& k : kCopyMixKinds) {
    const double v = mix.*k.share;
    if (k.kind == RowKind::kPasskey || v <= 0.0) continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : ",", RowKindName(k.kind), v);
  }
  return out;
}

RowKind RowKindOf(const CopyMix& mix, double u) {
  double edge = 0.0;
  for (const CopyMixKind& k : kCopyMixKinds) {
    edge += mix.*k.share;
    if (u < edge) return k.kind;
  }
  return RowKind::kText;
}

CopyRow MakePeriodicRow(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                        Rng& rng) {
  CheckCopySpans(spans, T, "periodic row");
  CopyRow r;
  r.span = UniformIn(rng, spans.min, spans.max);
  const std::vector<int> s = DistinctTokens(RowStringAlphabet(alphabets, rng), r.span, rng);
  r.tokens.push_back(bos);
  while (static_cast<int64_t>(r.tokens.size()) < T + 1) AppendCut(r.tokens, s, T + 1);
  r.source = 1;
  r.copy = 1 + r.span;
  r.scored = ScoredAfterFirst(r.copy, r.span);
  return r;
}

CopyRow MakeGappedRow(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                      Rng& rng, CopyRole role) {
  CheckCopySpans(spans, T, "gapped row");
  CopyRow r;
  r.span = UniformIn(rng, spans.min, spans.max);
  const std::vector<std::vector<int>> letters = RowStringAlphabet(alphabets, rng);
  const std::vector<int> s = RandomTokens(letters, r.span, rng);
  const auto gap = [&] {
    return RandomTokens(alphabets.gap, UniformIn(rng, 0, T - 2 * r.span), rng);
  };
  r.tokens.push_back(bos);
  AppendCut(r.tokens, s, T + 1);
  AppendCut(r.tokens, gap(), T + 1);
  r.source = 1;
  r.copy = static_cast<int64_t>(r.tokens.size());
  AppendCut(r.tokens,
            role == CopyRole::kCopy ? s : FreshString(alphabets.string, r.tokens, r.span, rng),
            T + 1);
  while (static_cast<int64_t>(r.tokens.size()) < T + 1) {
    AppendCut(r.tokens, gap(), T + 1);
    AppendCut(r.tokens, s, T + 1);
  }
  r.scored = ScoredAfterFirst(r.copy, r.span);
  return r;
}

namespace {

// The layout of a copy pasted inside a window of text (textcopy, randcopy): checks the window,
// draws s, a and d (the rule at the top of copy_data.h), and starts the row as the window.
// kFar: the textfar rule, the distance first (from the far half), then the source. kEdge: the
// textedge rule, the distance from the far half up to T - 2, the copy cut at the row's end.
enum class Reach { kNear, kFar, kEdge };

CopyRow PastedLayout(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                     const char* what, Reach reach = Reach::kNear) {
  CheckCopySpans(spans, T, what);
  STRETCH_CHECK(static_cast<int64_t>(window.size()) == T + 1, "window of {} tokens, not {}",
                window.size(), T + 1);
  CopyRow r;
  r.span = UniformIn(rng, spans.min, spans.max);
  const bool far = reach == Reach::kFar;
  if (reach == Reach::kEdge) {
    // The copy keeps at least 2 tokens in the row (its first is not scored): c <= T - 1 with the
    // source at index 1 or later, so d <= T - 2; the source (s <= T / 2 <= d tokens) ends before
    // the copy starts.
    const int64_t d = UniformIn(rng, (T + 1) / 2, T - 2);
    r.source = UniformIn(rng, 1, T - 1 - d);
    r.copy = r.source + d;
    r.span = std::min<int64_t>(r.span, T + 1 - r.copy);
  } else if (far) {
    const int64_t d_max = T - r.span;  // the source at index 1, the copy ending the row
    const int64_t d = UniformIn(rng, (T + 1) / 2, d_max);  // ceil(T / 2): the far half
    r.source = UniformIn(rng, 1, T + 1 - r.span - d);
    r.copy = r.source + d;
  } else {
    r.source = UniformIn(rng, 1, T + 1 - 2 * r.span);
    r.copy = r.source + UniformIn(rng, r.span, T + 1 - r.span - r.source);
  }
  r.tokens.assign(window.begin(), window.end());
  return r;
}

CopyRow PastedTextRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                      CopyRole role, std::span<const int> other, Reach reach) {
  CopyRow r = PastedLayout(window, spans, T, rng,
                           reach == Reach::kFar    ? "textfar row"
                           : reach == Reach::kEdge ? "textedge row"
                                                   : "textcopy row",
                           reach);
  const auto to = r.tokens.begin() + r.copy;
  if (role == CopyRole::kCopy) {
    std::copy(window.begin() + r.source, window.begin() + r.source + r.span, to);
  } else {
    STRETCH_CHECK(static_cast<int64_t>(other.size()) >= r.span, "control text of {} tokens, not {}",
                  other.size(), r.span);
    std::copy(other.begin(), other.begin() + r.span, to);
  }
  r.scored = ScoredAfterFirst(r.copy, r.span);
  return r;
}

}  // namespace

CopyRow MakeTextCopyRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                        CopyRole role, std::span<const int> other) {
  return PastedTextRow(window, spans, T, rng, role, other, Reach::kNear);
}

CopyRow MakeTextFarRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                       CopyRole role, std::span<const int> other) {
  return PastedTextRow(window, spans, T, rng, role, other, Reach::kFar);
}

CopyRow MakeTextEdgeRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                        CopyRole role, std::span<const int> other) {
  return PastedTextRow(window, spans, T, rng, role, other, Reach::kEdge);
}

CopyRow MakeTextDecoyRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng) {
  CopyRow r = MakeTextCopyRow(window, spans, T, rng);
  // Taken: the source, the copy and each decoy with the token after it (so that no decoy's
  // diverging token is overwritten by another decoy).
  std::vector<char> taken(static_cast<size_t>(T + 1), 0);
  const auto mark = [&](int64_t from, int64_t n) { std::fill_n(taken.begin() + from, n, char{1}); };
  const auto free = [&](int64_t from, int64_t n) {
    return std::none_of(taken.begin() + from, taken.begin() + from + n, [](char c) { return c; });
  };
  mark(r.source, r.span);
  mark(r.copy, r.span);
  const int64_t max_length = std::min<int64_t>(kMaxDecoyLength, r.span - 1);
  const int64_t m = UniformIn(rng, kMinDecoys, kMaxDecoys);
  for (int64_t i = 0; i < m && max_length >= kMinDecoyLength; ++i) {
    CopyDecoy d;
    d.length = UniformIn(rng, kMinDecoyLength, max_length);
    d.offset = UniformIn(rng, 0, r.span - d.length - 1);
    const int next = r.tokens[static_cast<size_t>(r.source + d.offset + d.length)];
    for (int tries = 0; tries < kDecoyTries; ++tries) {
      const int64_t at = UniformIn(rng, 1, T - d.length);  // the token after it lies in the row
      if (!free(at, d.length + 1) || r.tokens[static_cast<size_t>(at + d.length)] == next) continue;
      std::copy_n(r.tokens.begin() + r.source + d.offset, d.length, r.tokens.begin() + at);
      mark(at, d.length + 1);
      d.at = at;
      r.decoys.push_back(d);
      break;
    }
  }
  std::sort(r.decoys.begin(), r.decoys.end(),
            [](const CopyDecoy& x, const CopyDecoy& y) { return x.at < y.at; });
  return r;
}

CopyRow MakeTextPeriodicRow(std::span<const int> window, const CopySpans& spans, int bos, int64_t T,
                            Rng& rng) {
  CheckCopySpans(spans, T, "textperiodic row");
  STRETCH_CHECK(static_cast<int64_t>(window.size()) == T + 1, "window of {} tokens, not {}",
                window.size(), T + 1);
  CopyRow r;
  r.span = UniformIn(rng, spans.min, spans.max);
  const int64_t start = UniformIn(rng, 1, T + 1 - r.span);
  const std::vector<int> p(window.begin() + start, window.begin() + start + r.span);
  r.tokens.push_back(bos);
  while (static_cast<int64_t>(r.tokens.size()) < T + 1) AppendCut(r.tokens, p, T + 1);
  r.source = 1;
  r.copy = 1 + r.span;
  r.scored = ScoredAfterFirst(r.copy, r.span);
  return r;
}

CopyRow MakeRandCopyRow(std::span<const int> window, const CopyAlphabets& alphabets,
                        const CopySpans& spans, int64_t T, Rng& rng, CopyRole role) {
  CopyRow r = PastedLayout(window, spans, T, rng, "randcopy row");
  const std::vector<std::vector<int>> letters = RowStringAlphabet(alphabets, rng);
  const std::vector<int> s = RandomTokens(letters, r.span, rng);
  std::copy(s.begin(), s.end(), r.tokens.begin() + r.source);
  const std::vector<int> at_copy =
      role == CopyRole::kCopy
          ? s
          : FreshString(alphabets.string,
                        std::span<const int>(r.tokens).first(static_cast<size_t>(r.copy)), r.span,
                        rng);
  std::copy(at_copy.begin(), at_copy.end(), r.tokens.begin() + r.copy);
  r.scored = ScoredAfterFirst(r.copy, r.span);
  return r;
}

CopyProbe MakeCopyProbe(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                        int64_t n, const std::vector<std::vector<int>>& windows,
                        const PasskeyPieces* passkey, uint64_t seed) {
  CopyProbe p;
  p.T = T;
  Rng rng(seed);
  const auto add = [](CopyProbeRows& rows, const CopyRow& r) {
    rows.tokens.insert(rows.tokens.end(), r.tokens.begin(), r.tokens.end());
    rows.scored.push_back(r.scored);
  };
  for (int64_t i = 0; i < n; ++i) {
    Rng again = rng;  // the control: the same draws, then its fresh string
    add(p.gapped, MakeGappedRow(alphabets, spans, bos, T, rng));
    add(p.gapped_control, MakeGappedRow(alphabets, spans, bos, T, again, CopyRole::kControl));
    rng = again;
  }
  if (!windows.empty()) {
    const auto window = [&](int64_t k) -> const std::vector<int>& {
      return windows[static_cast<size_t>(k) % windows.size()];
    };
    for (int64_t i = 0; i < n; ++i) {
      Rng again = rng;
      // The control's pasted tokens come from the next window (another piece of text).
      add(p.textcopy, MakeTextCopyRow(window(i), spans, T, rng));
      add(p.textcopy_control,
          MakeTextCopyRow(window(i), spans, T, again, CopyRole::kControl, window(i + 1)));
    }
    if (passkey != nullptr && T >= PasskeyMinCtx(*passkey)) {
      const int64_t filler = PasskeyMaxFiller(*passkey, T);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<int>& w = window(i);
        const double depth = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
        const PasskeyTrial t = MakePasskeyTrial(
            *passkey, std::span<const int>(w).subspan(w.size() - static_cast<size_t>(filler)), bos,
            T, depth, rng);
        p.passkey.tokens.insert(p.passkey.tokens.end(), t.tokens.begin(), t.tokens.end());
        p.passkey.scored.push_back(t.key_positions);
      }
    }
    // Randcopy rows last, so that the rows above are those of runs from before they existed.
    for (int64_t i = 0; i < n; ++i) {
      Rng again = rng;
      add(p.randcopy, MakeRandCopyRow(window(i), alphabets, spans, T, rng));
      add(p.randcopy_control,
          MakeRandCopyRow(window(i), alphabets, spans, T, again, CopyRole::kControl));
      rng = again;
    }
  }
  return p;
}

void Proportion::AddRow(int64_t row_hit, int64_t row_count) {
  hits += row_hit;
  n += row_count;
  row_hits.push_back(row_hit);
  row_n.push_back(row_count);
}

double Proportion::EffectiveN() const {
  const double nn = static_cast<double>(n), p = value();
  const size_t m = row_n.size();
  if (n == 0 || m < 2 || p <= 0 || p >= 1) return nn;
  double sum = 0;
  for (size_t i = 0; i < m; ++i) {
    const double r = static_cast<double>(row_hits[i]) - p * static_cast<double>(row_n[i]);
    sum += r * r;
  }
  const double between = static_cast<double>(m) / static_cast<double>(m - 1) * sum / (nn * nn);
  const double binomial = p * (1 - p) / nn;
  if (between <= 0) return nn;
  return nn / std::max(1.0, between / binomial);
}

namespace {
// Wilson score interval at z = 1.96 for share p of nn trials (nn may be fractional: an effective
// count): unlike the normal approximation it stays inside [0, 1] and keeps its coverage at 0 or
// n hits, which a readout at chance or at perfection often shows.
std::pair<double, double> Wilson95(double p, double nn) {
  const double z = 1.96;
  const double centre = (p + z * z / (2 * nn)) / (1 + z * z / nn);
  const double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / (1 + z * z / nn);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}
}  // namespace

double Proportion::low() const { return n == 0 ? 0.0 : Wilson95(value(), EffectiveN()).first; }

double Proportion::high() const { return n == 0 ? 0.0 : Wilson95(value(), EffectiveN()).second; }

CopyReadout ReadCopy(const CopyProbe& probe, const TokenPredictor& predict) {
  const int64_t T = probe.T;
  // Per row: the scored targets it gets right, and whether it gets them all.
  const auto read = [&](const CopyProbeRows& rows, Proportion& tokens, Proportion* whole) {
    if (rows.rows() == 0) return;
    const std::vector<int> pred = predict(rows.tokens, rows.rows());
    STRETCH_CHECK(static_cast<int64_t>(pred.size()) == rows.rows() * T, "{} predictions, not {}",
                  pred.size(), rows.rows() * T);
    for (int64_t b = 0; b < rows.rows(); ++b) {
      bool all = true;
      int64_t row_hit = 0, row_count = 0;
      for (const int64_t p : rows.scored[static_cast<size_t>(b)]) {
        const bool hit = pred[static_cast<size_t>(b * T + p)] ==
                         rows.tokens[static_cast<size_t>(b * (T + 1) + p + 1)];
        row_hit += hit ? 1 : 0;
        ++row_count;
        all = all && hit;
      }
      tokens.AddRow(row_hit, row_count);
      if (whole != nullptr) {
        whole->hits += all ? 1 : 0;  // one trial per row
        ++whole->n;
      }
    }
  };
  CopyReadout r;
  read(probe.gapped, r.copy, nullptr);
  read(probe.gapped_control, r.copy_control, nullptr);
  read(probe.textcopy, r.textcopy, nullptr);
  read(probe.textcopy_control, r.textcopy_control, nullptr);
  read(probe.randcopy, r.randcopy, nullptr);
  read(probe.randcopy_control, r.randcopy_control, nullptr);
  read(probe.passkey, r.passkey_digits, &r.passkey_keys);
  return r;
}

std::string CopyReadoutText(const CopyReadout& c) {
  std::string line = fmt::format("copy {:.3f}/{:.3f}", c.copy.value(), c.copy_control.value());
  if (c.textcopy.n > 0) {
    line += fmt::format(" textcopy {:.3f}/{:.3f}", c.textcopy.value(), c.textcopy_control.value());
  }
  if (c.randcopy.n > 0) {
    line += fmt::format(" randcopy {:.3f}/{:.3f}", c.randcopy.value(), c.randcopy_control.value());
  }
  if (c.passkey_keys.n > 0) {
    line +=
        fmt::format(" passkey {:.3f} ({:.3f})", c.passkey_keys.value(), c.passkey_digits.value());
  }
  return line;
}

}  // namespace stretch
