#include "src/eval/passkey.h"

#include <algorithm>
#include <span>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {

namespace {

PasskeyTrialsWithControls MakeTrials(const TokenSpans& documents, const TextEncoder& encode,
                                     int bos, int64_t ctx, double depth, int64_t count,
                                     uint64_t seed, const PasskeyFormat& format, bool controls) {
  const PasskeyPieces pieces = EncodePasskeyPieces(encode, format);
  CheckPasskeyArgs(pieces, ctx, depth);
  const int64_t filler = PasskeyMaxFiller(pieces, ctx);
  Rng rng(seed);
  std::vector<std::span<const int>> windows;
  for (const WindowRef& w : SpreadWindows(documents, filler, count, "passkey filler")) {
    windows.push_back(
        documents[w.document].subspan(static_cast<size_t>(w.offset), static_cast<size_t>(filler)));
  }
  PasskeyTrialsWithControls out;
  for (const std::span<const int> window : windows) {
    out.trials.push_back(MakePasskeyTrial(pieces, window, bos, ctx, depth, rng));
  }
  if (!controls) return out;
  STRETCH_CHECK(filler > 0 && !windows.empty());
  // Every filler token a control can need: ctx less the prefix, the question and the key.
  const int64_t need = ctx - static_cast<int64_t>(pieces.prefix.size()) -
                       static_cast<int64_t>(pieces.question.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    std::vector<int> fill;
    for (size_t j = i; static_cast<int64_t>(fill.size()) < need; j = (j + 1) % windows.size()) {
      fill.insert(fill.end(), windows[j].begin(), windows[j].end());
    }
    out.controls.push_back(MakePasskeyControl(pieces, fill, bos, ctx, out.trials[i]));
  }
  return out;
}

}  // namespace

std::vector<PasskeyTrial> MakePasskeyTrials(const TokenSpans& documents, const TextEncoder& encode,
                                            int bos, int64_t ctx, double depth, int64_t count,
                                            uint64_t seed, const PasskeyFormat& format) {
  return MakeTrials(documents, encode, bos, ctx, depth, count, seed, format, false).trials;
}

PasskeyTrialsWithControls MakePasskeyTrialsWithControls(const TokenSpans& documents,
                                                        const TextEncoder& encode, int bos,
                                                        int64_t ctx, double depth, int64_t count,
                                                        uint64_t seed,
                                                        const PasskeyFormat& format) {
  return MakeTrials(documents, encode, bos, ctx, depth, count, seed, format, true);
}

PasskeyResult ScorePasskey(const SequenceScorer& scorer, const std::vector<PasskeyTrial>& trials) {
  std::vector<std::vector<int>> sequences;
  sequences.reserve(trials.size());
  for (const PasskeyTrial& t : trials) sequences.push_back(t.tokens);
  // Per trial: key tokens seen and right. key_positions ascend, and the scorer reports positions
  // ascending, so a binary search finds each record's key position.
  std::vector<int64_t> seen(trials.size(), 0), right(trials.size(), 0);
  PasskeyResult r;
  // Token index in the key = digit place when every digit is one token.
  bool by_place = !trials.empty();
  size_t places = 0;
  for (const PasskeyTrial& t : trials) {
    by_place = by_place && t.key_positions.size() == t.key.size();
    places = std::max(places, t.key.size());
  }
  if (by_place) r.right_by_place.assign(places, 0);
  double loss = 0.0;
  int64_t first = -1;  // the earliest key position of any trial
  for (const PasskeyTrial& t : trials) {
    if (!t.key_positions.empty()) {
      first = first < 0 ? t.key_positions.front() : std::min(first, t.key_positions.front());
    }
  }
  scorer(sequences, std::max<int64_t>(first, 0), [&](const TokenRecord& rec) {
    STRETCH_CHECK(rec.window >= 0 && rec.window < static_cast<int64_t>(trials.size()));
    const size_t w = static_cast<size_t>(rec.window);
    const std::vector<int64_t>& keys = trials[w].key_positions;
    const auto at = std::lower_bound(keys.begin(), keys.end(), rec.position);
    if (at == keys.end() || *at != rec.position) return;
    if (by_place && rec.correct) r.right_by_place[static_cast<size_t>(at - keys.begin())]++;
    seen[w]++;
    right[w] += rec.correct ? 1 : 0;
    loss += rec.loss;
  });
  r.trials = static_cast<int64_t>(trials.size());
  int64_t correct = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    const int64_t k = static_cast<int64_t>(trials[i].key_positions.size());
    // The scorer reports every target (SequenceScorer's contract), each once.
    STRETCH_CHECK(seen[i] == k, "trial {}: {} of its {} key tokens scored", i, seen[i], k);
    r.key_tokens += k;
    correct += right[i];
    if (right[i] == k) r.retrieved++;
  }
  if (r.trials > 0) r.accuracy = static_cast<double>(r.retrieved) / static_cast<double>(r.trials);
  if (r.key_tokens > 0) {
    r.token_accuracy = static_cast<double>(correct) / static_cast<double>(r.key_tokens);
    r.key_loss = loss / static_cast<double>(r.key_tokens);
  }
  return r;
}

}  // namespace stretch
