#include "src/io/passkey.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace {

// A uniform integer in [0, n) without modulo bias: draws below 2^64 mod n are rejected, so the
// accepted range holds a whole number of copies of [0, n) (as UniformIndex, src/train/data.h,
// which src/io cannot use).
uint64_t UniformBelow(Rng& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = rng.NextU64();
    if (r >= threshold) return r % n;
  }
}

void Append(std::vector<int>& out, const std::vector<int>& piece) {
  out.insert(out.end(), piece.begin(), piece.end());
}

}  // namespace

PasskeyPieces EncodePasskeyPieces(const TextEncoder& encode, const PasskeyFormat& format) {
  // 18 digits: the largest key below 2^63, should a caller read it as a number.
  if (format.digits < 1 || format.digits > 18) {
    Fail("passkey: digits {}: expected 1..18", format.digits);
  }
  PasskeyPieces p;
  p.digits = format.digits;
  p.needle_before = encode(format.needle_before);
  p.needle_after = encode(format.needle_after);
  p.question = encode(format.question);
  size_t longest = 0;
  for (int d = 0; d < 10; ++d) {
    const char c = static_cast<char>('0' + d);
    p.digit[static_cast<size_t>(d)] = encode(std::string_view(&c, 1));
    if (p.digit[static_cast<size_t>(d)].empty()) {
      Fail("passkey: the digit '{}' encodes to no token, expected at least one", c);
    }
    longest = std::max(longest, p.digit[static_cast<size_t>(d)].size());
  }
  p.fixed =
      static_cast<int64_t>(p.needle_before.size() + p.needle_after.size() + p.question.size());
  p.longest_key = static_cast<int64_t>(longest) * p.digits;
  return p;
}

int64_t PasskeyMinCtx(const PasskeyPieces& pieces) {
  return pieces.fixed + 2 * pieces.longest_key + kPasskeyMinFiller;
}

int64_t PasskeyMaxFiller(const PasskeyPieces& pieces, int64_t ctx) {
  size_t shortest = pieces.digit[0].size();
  for (const std::vector<int>& d : pieces.digit) shortest = std::min(shortest, d.size());
  return ctx - pieces.fixed - 2 * static_cast<int64_t>(shortest) * pieces.digits;
}

void CheckPasskeyArgs(const PasskeyPieces& pieces, int64_t ctx, double depth) {
  STRETCH_CHECK(pieces.digits >= 1, "passkey pieces not encoded (EncodePasskeyPieces)");
  if (!(depth >= 0.0 && depth <= 1.0)) Fail("passkey: depth {}: expected in [0, 1]", depth);
  if (ctx < PasskeyMinCtx(pieces)) {
    Fail(
        "passkey: ctx {} is too short: the needle, the question and the {}-digit key twice take "
        "up to {} tokens, and at least {} filler tokens are needed: expected ctx >= {}",
        ctx, pieces.digits, pieces.fixed + 2 * pieces.longest_key, kPasskeyMinFiller,
        PasskeyMinCtx(pieces));
  }
}

PasskeyTrial MakePasskeyTrial(const PasskeyPieces& pieces, std::span<const int> filler, int bos,
                              int64_t ctx, double depth, Rng& rng) {
  CheckPasskeyArgs(pieces, ctx, depth);
  PasskeyTrial t;
  t.depth = depth;
  std::vector<int> key_tokens;
  for (int i = 0; i < pieces.digits; ++i) {
    const uint64_t d = i == 0 ? 1 + UniformBelow(rng, 9) : UniformBelow(rng, 10);
    t.key.push_back(static_cast<char>('0' + d));
    Append(key_tokens, pieces.digit[d]);
  }
  const int64_t key_len = static_cast<int64_t>(key_tokens.size());
  const int64_t n_filler = ctx - pieces.fixed - 2 * key_len;  // >= kPasskeyMinFiller (above)
  if (static_cast<int64_t>(filler.size()) < n_filler) {
    Fail("passkey: {} filler tokens given, expected at least {} (ctx {})", filler.size(), n_filler,
         ctx);
  }
  // k = round(depth F), halves rounded up (llround).
  const int64_t split = std::llround(depth * static_cast<double>(n_filler));
  std::vector<int>& s = t.tokens;
  s.reserve(static_cast<size_t>(ctx + 1));
  s.push_back(bos);
  s.insert(s.end(), filler.begin(), filler.begin() + split);
  t.needle_start = static_cast<int64_t>(s.size());
  Append(s, pieces.needle_before);
  Append(s, key_tokens);
  Append(s, pieces.needle_after);
  s.insert(s.end(), filler.begin() + split, filler.begin() + n_filler);
  t.question_start = static_cast<int64_t>(s.size());
  Append(s, pieces.question);
  // The answer: its tokens are targets of positions size-1 .. size+key_len-2.
  for (int64_t k = 0; k < key_len; ++k) {
    t.key_positions.push_back(static_cast<int64_t>(s.size()) - 1 + k);
  }
  Append(s, key_tokens);
  STRETCH_CHECK(static_cast<int64_t>(s.size()) == ctx + 1, "passkey trial of {} tokens, not {}",
                s.size(), ctx + 1);
  return t;
}

}  // namespace stretch
