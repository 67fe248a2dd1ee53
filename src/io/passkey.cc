#include "src/io/passkey.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace {

void Append(std::vector<int>& out, const std::vector<int>& piece) {
  out.insert(out.end(), piece.begin(), piece.end());
}

// The first n tokens of the filler: `filler` itself, or the junk repeated and cut to n.
std::vector<int> FillerTokens(const PasskeyPieces& pieces, std::span<const int> filler, int64_t n,
                              int64_t ctx) {
  if (pieces.junk.empty()) {
    if (static_cast<int64_t>(filler.size()) < n) {
      Fail("passkey: {} filler tokens given, expected at least {} (ctx {})", filler.size(), n, ctx);
    }
    return std::vector<int>(filler.begin(), filler.begin() + n);
  }
  std::vector<int> out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) {
    const size_t take = std::min(pieces.junk.size(), static_cast<size_t>(n) - out.size());
    out.insert(out.end(), pieces.junk.begin(), pieces.junk.begin() + static_cast<int64_t>(take));
  }
  return out;
}

// A key of pieces.digits digits: the first uniform in 1..9, the others in 0..9.
std::vector<int> DrawKey(const PasskeyPieces& pieces, Rng& rng, std::string& key) {
  std::vector<int> tokens;
  key.clear();
  for (int i = 0; i < pieces.digits; ++i) {
    const uint64_t d = i == 0 ? 1 + UniformBelow(rng, 9) : UniformBelow(rng, 10);
    key.push_back(static_cast<char>('0' + d));
    Append(tokens, pieces.digit[d]);
  }
  return tokens;
}

}  // namespace

PasskeyFormat LlamaCppPasskeyFormat() {
  PasskeyFormat f;
  f.prefix =
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
      "them. I will quiz you about the important information there.";
  f.junk =
      " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
  f.needle_before = " The pass key is ";
  f.needle_middle = ". Remember it. ";
  f.needle_after = " is the pass key.";
  f.question = " What is the pass key? The pass key is ";
  return f;
}

std::vector<PasskeyFormat> VariedPasskeyFormats() {
  const auto format = [](std::string before, std::string middle, std::string after,
                         std::string question) {
    PasskeyFormat f;
    f.needle_before = std::move(before);
    f.needle_middle = std::move(middle);
    f.needle_after = std::move(after);
    f.question = std::move(question);
    return f;
  };
  return {
      PasskeyFormat{},
      format(" The secret number is ", "", ". ",
             " What is the secret number? The secret number is "),
      format(" The code is ", ". I repeat, ", " is the code.", " What is the code? The code is "),
      format(" Note that the password is ", "", ". ", " What is the password? The password is "),
      format(" The magic number is ", ". Write down ", ". ",
             " What is the magic number? The magic number is "),
      format(" The number to remember is ", "", ". ",
             " What is the number to remember? The number to remember is ")};
}

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
  p.prefix = encode(format.prefix);
  p.needle_middle = encode(format.needle_middle);
  p.junk = encode(format.junk);
  if (!format.junk.empty() && p.junk.empty()) {
    Fail("passkey: the junk text encodes to no token, expected at least one");
  }
  p.key_copies = format.needle_middle.empty() ? 2 : 3;
  size_t longest = 0;
  for (int d = 0; d < 10; ++d) {
    const char c = static_cast<char>('0' + d);
    p.digit[static_cast<size_t>(d)] = encode(std::string_view(&c, 1));
    if (p.digit[static_cast<size_t>(d)].empty()) {
      Fail("passkey: the digit '{}' encodes to no token, expected at least one", c);
    }
    longest = std::max(longest, p.digit[static_cast<size_t>(d)].size());
  }
  p.fixed = static_cast<int64_t>(p.prefix.size() + p.needle_before.size() + p.needle_middle.size() +
                                 p.needle_after.size() + p.question.size());
  p.longest_key = static_cast<int64_t>(longest) * p.digits;
  return p;
}

int64_t PasskeyMinCtx(const PasskeyPieces& pieces) {
  return pieces.fixed + pieces.key_copies * pieces.longest_key + kPasskeyMinFiller;
}

int64_t PasskeyMaxFiller(const PasskeyPieces& pieces, int64_t ctx) {
  size_t shortest = pieces.digit[0].size();
  for (const std::vector<int>& d : pieces.digit) shortest = std::min(shortest, d.size());
  return ctx - pieces.fixed - pieces.key_copies * static_cast<int64_t>(shortest) * pieces.digits;
}

void CheckPasskeyArgs(const PasskeyPieces& pieces, int64_t ctx, double depth) {
  STRETCH_CHECK(pieces.digits >= 1, "passkey pieces not encoded (EncodePasskeyPieces)");
  if (!(depth >= 0.0 && depth <= 1.0)) Fail("passkey: depth {}: expected in [0, 1]", depth);
  if (ctx < PasskeyMinCtx(pieces)) {
    Fail(
        "passkey: ctx {} is too short: the needle, the question and the {}-digit key {} times take "
        "up to {} tokens, and at least {} filler tokens are needed: expected ctx >= {}",
        ctx, pieces.digits, pieces.key_copies,
        pieces.fixed + pieces.key_copies * pieces.longest_key, kPasskeyMinFiller,
        PasskeyMinCtx(pieces));
  }
}

PasskeyTrial MakePasskeyTrial(const PasskeyPieces& pieces, std::span<const int> filler, int bos,
                              int64_t ctx, double depth, Rng& rng) {
  CheckPasskeyArgs(pieces, ctx, depth);
  PasskeyTrial t;
  t.depth = depth;
  const std::vector<int> key_tokens = DrawKey(pieces, rng, t.key);
  const int64_t key_len = static_cast<int64_t>(key_tokens.size());
  // >= kPasskeyMinFiller (above)
  const int64_t n_filler = ctx - pieces.fixed - pieces.key_copies * key_len;
  const std::vector<int> fill = FillerTokens(pieces, filler, n_filler, ctx);
  // k = round(depth F), halves rounded up (llround); with junk, the nearest repetition boundary.
  int64_t split = std::llround(depth * static_cast<double>(n_filler));
  if (!pieces.junk.empty()) {  // never past the last whole repetition
    const int64_t unit = static_cast<int64_t>(pieces.junk.size());
    split = std::min<int64_t>(std::llround(static_cast<double>(split) / static_cast<double>(unit)),
                              n_filler / unit) *
            unit;
  }
  std::vector<int>& s = t.tokens;
  s.reserve(static_cast<size_t>(ctx + 1));
  s.push_back(bos);
  Append(s, pieces.prefix);
  s.insert(s.end(), fill.begin(), fill.begin() + split);
  t.needle_start = static_cast<int64_t>(s.size());
  Append(s, pieces.needle_before);
  Append(s, key_tokens);
  if (pieces.key_copies == 3) {
    Append(s, pieces.needle_middle);
    Append(s, key_tokens);
  }
  Append(s, pieces.needle_after);
  s.insert(s.end(), fill.begin() + split, fill.end());
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

PasskeyTrial MakePasskeyControl(const PasskeyPieces& pieces, std::span<const int> filler, int bos,
                                int64_t ctx, const PasskeyTrial& trial) {
  STRETCH_CHECK(static_cast<int64_t>(trial.tokens.size()) == ctx + 1 &&
                !trial.key_positions.empty());
  PasskeyTrial c;
  c.key = trial.key;
  c.depth = trial.depth;
  c.needle_start = -1;
  const int64_t key_len = static_cast<int64_t>(trial.key_positions.size());
  const int64_t n_filler = ctx - static_cast<int64_t>(pieces.prefix.size()) -
                           static_cast<int64_t>(pieces.question.size()) - key_len;
  const std::vector<int> fill = FillerTokens(pieces, filler, n_filler, ctx);
  std::vector<int>& s = c.tokens;
  s.reserve(static_cast<size_t>(ctx + 1));
  s.push_back(bos);
  Append(s, pieces.prefix);
  s.insert(s.end(), fill.begin(), fill.end());
  c.question_start = static_cast<int64_t>(s.size());
  STRETCH_CHECK(c.question_start == trial.question_start);
  // The answer: the trial's own key tokens, at the same positions.
  s.insert(s.end(), trial.tokens.end() - key_len - static_cast<int64_t>(pieces.question.size()),
           trial.tokens.end());
  c.key_positions = trial.key_positions;
  STRETCH_CHECK(static_cast<int64_t>(s.size()) == ctx + 1, "passkey control of {} tokens, not {}",
                s.size(), ctx + 1);
  return c;
}

TextEncoder MidTextEncoder(TextEncoder encode) {
  return [encode = std::move(encode)](std::string_view text) -> std::vector<int> {
    if (text.empty()) return {};
    const std::vector<int> newline = encode("\n");
    std::vector<int> both = encode("\n" + std::string(text));
    if (both.size() > newline.size() && std::equal(newline.begin(), newline.end(), both.begin())) {
      both.erase(both.begin(), both.begin() + static_cast<int64_t>(newline.size()));
      return both;
    }
    return encode(text);
  };
}

std::vector<std::string> PasskeyDecoyNouns() {
  return {"door", "day", "room", "year", "page", "price"};
}

PasskeyDecoys EncodePasskeyDecoys(const TextEncoder& encode) {
  PasskeyDecoys d;
  for (const std::string& noun : PasskeyDecoyNouns())
    d.before.push_back(encode(" The " + noun + " is "));
  d.after = encode(". ");
  return d;
}

int AddPasskeyDecoys(PasskeyTrial& trial, const PasskeyPieces& pieces, const PasskeyDecoys& decoys,
                     int n, Rng& rng) {
  if (!pieces.junk.empty()) Fail("passkey decoys: a layout with junk filler takes none");
  STRETCH_CHECK(!decoys.before.empty() && !trial.key_positions.empty() && trial.needle_start > 0);
  const int64_t size = static_cast<int64_t>(trial.tokens.size());
  const int64_t key_len = static_cast<int64_t>(trial.key_positions.size());
  const int64_t needle_len =
      static_cast<int64_t>(pieces.needle_before.size() + pieces.needle_after.size()) +
      key_len * (pieces.key_copies - 1) +
      (pieces.key_copies == 3 ? static_cast<int64_t>(pieces.needle_middle.size()) : 0);
  // free[p]: position p holds filler no decoy has taken.
  std::vector<char> free(static_cast<size_t>(size), 0);
  const int64_t first = 1 + static_cast<int64_t>(pieces.prefix.size());
  for (int64_t p = first; p < trial.needle_start; ++p) free[static_cast<size_t>(p)] = 1;
  for (int64_t p = trial.needle_start + needle_len; p < trial.question_start; ++p) {
    free[static_cast<size_t>(p)] = 1;
  }
  int written = 0;
  for (; written < n; ++written) {
    const std::vector<int>& before = decoys.before[UniformBelow(rng, decoys.before.size())];
    std::string number;
    std::vector<int> digits;
    do {
      digits = DrawKey(pieces, rng, number);
    } while (number == trial.key);
    std::vector<int> sentence = before;
    Append(sentence, digits);
    Append(sentence, decoys.after);
    const int64_t len = static_cast<int64_t>(sentence.size());
    std::vector<int64_t> starts;  // where the sentence fits on free filler
    int64_t run = 0;              // free positions ending at p
    for (int64_t p = 0; p < size; ++p) {
      run = free[static_cast<size_t>(p)] ? run + 1 : 0;
      if (run >= len) starts.push_back(p - len + 1);
    }
    if (starts.empty()) break;
    const int64_t at = starts[UniformBelow(rng, starts.size())];
    for (int64_t k = 0; k < len; ++k) {
      trial.tokens[static_cast<size_t>(at + k)] = sentence[static_cast<size_t>(k)];
      free[static_cast<size_t>(at + k)] = 0;
    }
  }
  return written;
}

}  // namespace stretch
