#include "src/eval/retrieval.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {
namespace {

// Per sequence, the (loss, correct) of each scored position, in the order of `scored`.
struct Scored {
  double loss = 0.0;
  bool correct = false;
};
std::vector<std::vector<Scored>> CollectScored(
    const SequenceScorer& scorer, const std::vector<std::vector<int>>& sequences,
    const std::vector<const std::vector<int64_t>*>& positions) {
  std::vector<std::vector<Scored>> out(sequences.size());
  std::vector<std::vector<bool>> seen(sequences.size());
  int64_t first = -1;  // the earliest position wanted in any sequence
  for (size_t i = 0; i < sequences.size(); ++i) {
    out[i].resize(positions[i]->size());
    seen[i].resize(positions[i]->size());
    if (!positions[i]->empty()) {
      first = first < 0 ? positions[i]->front() : std::min(first, positions[i]->front());
    }
  }
  scorer(sequences, std::max<int64_t>(first, 0), [&](const TokenRecord& r) {
    STRETCH_CHECK(r.window >= 0 && r.window < static_cast<int64_t>(sequences.size()));
    const size_t w = static_cast<size_t>(r.window);
    const std::vector<int64_t>& want = *positions[w];
    const auto it = std::lower_bound(want.begin(), want.end(), r.position);
    if (it == want.end() || *it != r.position) return;
    const size_t k = static_cast<size_t>(it - want.begin());
    out[w][k] = {r.loss, r.correct};
    seen[w][k] = true;
  });
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (size_t k = 0; k < seen[i].size(); ++k) {
      // The scorer reports every target (SequenceScorer's contract).
      STRETCH_CHECK(seen[i][k], "sequence {}: position {} not scored", i, (*positions[i])[k]);
    }
  }
  return out;
}

// The n-gram ending at index e (tokens e-n+1 .. e) as a hashable key.
std::string NgramKey(const std::vector<int>& tokens, int64_t e, int n) {
  return std::string(reinterpret_cast<const char*>(tokens.data() + (e - n + 1)),
                     static_cast<size_t>(n) * sizeof(int));
}

// The copy's targets t = copy_start + 1 .. end whose n-gram ending at t occurs nowhere earlier in
// `control` (ending at an index < t), as positions t - 1.
std::vector<int64_t> UnleakedPositions(const std::vector<int>& control, int64_t copy_start, int n) {
  std::unordered_set<std::string> earlier;
  const int64_t end = static_cast<int64_t>(control.size());
  int64_t next = n - 1;  // the next n-gram end to add to `earlier`
  std::vector<int64_t> out;
  for (int64_t t = copy_start + 1; t < end; ++t) {
    for (; next < t; ++next) earlier.insert(NgramKey(control, next, n));
    if (!earlier.count(NgramKey(control, t, n))) out.push_back(t - 1);
  }
  return out;
}

std::vector<int64_t> SortedUnique(std::span<const int64_t> v) {
  std::vector<int64_t> out(v.begin(), v.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

ArmScore ScoreArm(const SequenceScorer& scorer, const std::vector<ProbeSequence>& sequences,
                  const BootstrapOptions& bootstrap) {
  std::vector<std::vector<int>> tokens;
  std::vector<const std::vector<int64_t>*> positions;
  tokens.reserve(sequences.size());
  for (const ProbeSequence& s : sequences) {
    STRETCH_CHECK(std::is_sorted(s.scored.begin(), s.scored.end()));
    tokens.push_back(s.tokens);
    positions.push_back(&s.scored);
  }
  const std::vector<std::vector<Scored>> scored = CollectScored(scorer, tokens, positions);
  ArmScore a;
  a.sequences = static_cast<int64_t>(sequences.size());
  for (const std::vector<Scored>& seq : scored) {
    double right = 0, loss = 0;
    for (const Scored& s : seq) {
      right += s.correct ? 1 : 0;
      loss += s.loss;
    }
    a.right.push_back(right);
    a.loss_sum.push_back(loss);
    a.count.push_back(static_cast<double>(seq.size()));
    a.tokens += static_cast<int64_t>(seq.size());
  }
  a.accuracy = BootstrapRatio(a.right, a.count, bootstrap);
  a.loss = BootstrapRatio(a.loss_sum, a.count, bootstrap);
  return a;
}

ProbeResult CompareArms(ArmScore test, ArmScore control, bool paired,
                        const BootstrapOptions& bootstrap) {
  ProbeResult r;
  r.accuracy_difference = BootstrapRatioDifference(test.right, test.count, control.right,
                                                   control.count, paired, bootstrap);
  r.loss_difference = BootstrapRatioDifference(test.loss_sum, test.count, control.loss_sum,
                                               control.count, paired, bootstrap);
  r.test = std::move(test);
  r.control = std::move(control);
  return r;
}

const char* CopySourceName(CopySource source) {
  return source == CopySource::kText ? "text" : "random";
}

std::vector<FarCopyTrial> MakeFarCopyTrials(const TokenSpans& documents, const TextEncoder& encode,
                                            int bos, int64_t ctx, int64_t distance, int64_t count,
                                            const FarCopyOptions& opt) {
  const int64_t S = opt.span;
  if (opt.ngram < 1) Fail("far copy: n-gram length {}, expected at least 1", opt.ngram);
  if (S < opt.ngram + 1) {
    Fail("far copy: span of {} tokens, expected at least {} (the n-gram length + 1)", S,
         opt.ngram + 1);
  }
  if (ctx < 2 * S) Fail("far copy: ctx {} cannot hold the span of {} tokens twice", ctx, S);
  if (distance < S || distance > ctx - S) {
    Fail(
        "far copy: distance {} at ctx {} with a span of {}: expected {}..{} (the source must end "
        "before the copy begins, and begin after BOS)",
        distance, ctx, S, S, ctx - S);
  }
  std::vector<std::vector<int>> characters;
  if (opt.source == CopySource::kRandom) {
    if (opt.alphabet.empty()) Fail("far copy: an empty alphabet for random strings");
    if (!encode) Fail("far copy: random strings need an encoder");
    for (const char c : opt.alphabet) {
      characters.push_back(encode(std::string_view(&c, 1)));
      if (characters.back().empty()) Fail("far copy: '{}' encodes to no token", c);
    }
  }
  Rng rng(opt.seed);
  auto random_span = [&] {
    std::vector<int> out;
    while (static_cast<int64_t>(out.size()) < S) {
      const std::vector<int>& c = characters[UniformBelow(rng, characters.size())];
      out.insert(out.end(), c.begin(), c.end());
    }
    out.resize(static_cast<size_t>(S));
    return out;
  };
  const int64_t copy_start = ctx - S + 1;
  const int64_t source_start = copy_start - distance;
  std::vector<FarCopyTrial> out;
  for (const WindowRef& w : SpreadWindows(documents, ctx + S, count, "far copy")) {
    const std::span<const int> text =
        documents[w.document].subspan(static_cast<size_t>(w.offset), static_cast<size_t>(ctx + S));
    // The spans: the text right after the window's first ctx - S tokens (the copy's natural
    // continuation) and the S after it, or two random strings.
    std::vector<int> span, other;
    if (opt.source == CopySource::kText) {
      span.assign(text.begin() + (ctx - S), text.begin() + ctx);
      other.assign(text.begin() + ctx, text.end());
    } else {
      span = random_span();
      other = random_span();
    }
    FarCopyTrial t;
    t.source_start = source_start;
    t.copy_start = copy_start;
    std::vector<int> base;
    base.reserve(static_cast<size_t>(ctx + 1));
    base.push_back(bos);
    base.insert(base.end(), text.begin(), text.begin() + (ctx - S));
    base.insert(base.end(), span.begin(), span.end());
    t.copy.tokens = base;
    std::copy(span.begin(), span.end(), t.copy.tokens.begin() + source_start);
    t.control.tokens = std::move(base);
    std::copy(other.begin(), other.end(), t.control.tokens.begin() + source_start);
    t.copy.scored = UnleakedPositions(t.control.tokens, copy_start, opt.ngram);
    t.control.scored = t.copy.scored;
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> DefaultCopyDistances(int64_t train_len, int64_t ctx, int64_t span) {
  std::vector<int64_t> d;
  const int64_t whole = ctx - span;
  // L * 2^k / 4 for k = 0, 1, ...: L/4, L/2, L, 2L, ... (exact multiples of L from k = 2 on).
  for (int k = 0; k < 62; ++k) {
    const int64_t x = static_cast<int64_t>((static_cast<__int128>(train_len) << k) / 4);
    if (x >= whole) break;
    if (x >= span) d.push_back(x);
  }
  if (whole >= span) d.push_back(whole);
  return SortedUnique(d);
}

FarCopyResult RunFarCopy(const SequenceScorer& scorer, const TokenSpans& documents,
                         const TextEncoder& encode, int bos, int64_t ctx, int64_t train_len,
                         std::span<const int64_t> distances, int64_t count,
                         const FarCopyOptions& opt, const BootstrapOptions& bootstrap) {
  const std::vector<int64_t> ds = SortedUnique(distances);
  // Every distance's trials first: a bad distance fails before any scoring.
  std::vector<std::vector<FarCopyTrial>> trials;
  for (const int64_t d : ds) {
    trials.push_back(MakeFarCopyTrials(documents, encode, bos, ctx, d, count, opt));
  }
  FarCopyResult r;
  std::vector<CopyAtDistance> accuracy;
  for (size_t i = 0; i < ds.size(); ++i) {
    std::vector<ProbeSequence> copy, control;
    for (FarCopyTrial& t : trials[i]) {
      copy.push_back(std::move(t.copy));
      control.push_back(std::move(t.control));
    }
    ArmScore a = ScoreArm(scorer, copy, bootstrap);
    ArmScore b = ScoreArm(scorer, control, bootstrap);
    r.points.push_back({ds[i], CompareArms(std::move(a), std::move(b), true, bootstrap)});
    const ProbeResult& x = r.points.back().result;
    accuracy.push_back({ds[i], x.test.accuracy.estimate, x.accuracy_difference.low > 0.0});
    if (i == 0 || x.accuracy_difference.estimate > r.max_gain) {
      r.max_gain = x.accuracy_difference.estimate;
      r.max_gain_distance = ds[i];
    }
  }
  r.sees_back = SeesBackDistance(accuracy, train_len);
  r.reference_distance = SeesBackReference(accuracy, train_len);
  for (const FarCopyPoint& p : r.points) {
    if (p.distance == r.reference_distance)
      r.reference_gain = p.result.accuracy_difference.estimate;
  }
  return r;
}

bool SeesBackInformative(const FarCopyResult& r) {
  return r.sees_back.has_value() && r.max_gain >= kSeesBackMinGain;
}

RepeatProbe MakeRepeatProbe(const TokenSpans& documents, int bos, int64_t ctx, int64_t period,
                            int64_t count) {
  if (period < 1 || period >= ctx) {
    Fail(
        "repeat: period {} at ctx {}: expected 1..{} (a second copy must begin within the "
        "context)",
        period, ctx, ctx - 1);
  }
  std::vector<int64_t> scored;
  // From the second copy's second token on: its first follows a token that nothing followed
  // before, so no copier can know it (as the far copy's first token).
  for (int64_t p = period + 1; p < ctx; ++p) scored.push_back(p);
  RepeatProbe r;
  for (std::vector<int>& s : RepeatSequences(documents, period, ctx, count, bos)) {
    r.repeat.push_back({std::move(s), scored});
  }
  for (std::vector<int>& s : NonRepeatSequences(documents, ctx, count, bos)) {
    r.control.push_back({std::move(s), scored});
  }
  return r;
}

ProbeResult RunRepeat(const SequenceScorer& scorer, const TokenSpans& documents, int bos,
                      int64_t ctx, int64_t period, int64_t count,
                      const BootstrapOptions& bootstrap) {
  const RepeatProbe p = MakeRepeatProbe(documents, bos, ctx, period, count);
  return CompareArms(ScoreArm(scorer, p.repeat, bootstrap), ScoreArm(scorer, p.control, bootstrap),
                     /*paired=*/false, bootstrap);
}

ArmScore RunNonRepeat(const SequenceScorer& scorer, const TokenSpans& documents, int bos,
                      int64_t ctx, int64_t count, const BootstrapOptions& bootstrap) {
  std::vector<int64_t> scored(static_cast<size_t>(ctx));
  for (int64_t p = 0; p < ctx; ++p) scored[static_cast<size_t>(p)] = p;
  std::vector<ProbeSequence> seqs;
  for (std::vector<int>& s : NonRepeatSequences(documents, ctx, count, bos)) {
    seqs.push_back({std::move(s), scored});
  }
  return ScoreArm(scorer, seqs, bootstrap);
}

std::vector<PasskeyProbeTrial> MakePasskeyProbe(const TokenSpans& documents,
                                                const TextEncoder& encode, int bos, int64_t ctx,
                                                double depth, int64_t count, uint64_t seed,
                                                const PasskeyFormat& format) {
  const PasskeyPieces pieces = EncodePasskeyPieces(encode, format);
  CheckPasskeyArgs(pieces, ctx, depth);
  if (count < 1) Fail("passkey: {} trials asked for, expected at least 1", count);
  // Windows of ctx tokens: enough for the trial's filler and for its control's, which also takes
  // the needle's place.
  std::vector<std::span<const int>> fillers;
  if (pieces.junk.empty()) {
    for (const WindowRef& w : SpreadWindows(documents, ctx, count, "passkey filler")) {
      fillers.push_back(
          documents[w.document].subspan(static_cast<size_t>(w.offset), static_cast<size_t>(ctx)));
    }
  } else {
    fillers.resize(static_cast<size_t>(count));  // the junk is the filler
  }
  Rng rng(seed);
  std::vector<PasskeyProbeTrial> out;
  for (const std::span<const int> filler : fillers) {
    PasskeyProbeTrial t;
    t.trial = MakePasskeyTrial(pieces, filler, bos, ctx, depth, rng);
    t.control = MakePasskeyControl(pieces, filler, bos, ctx, t.trial);
    for (const char c : t.trial.key) {
      t.digit_tokens.push_back(
          static_cast<int64_t>(pieces.digit[static_cast<size_t>(c - '0')].size()));
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

PasskeyArm ScorePasskeyArm(const SequenceScorer& scorer,
                           const std::vector<PasskeyProbeTrial>& trials, bool control,
                           const BootstrapOptions& bootstrap) {
  std::vector<std::vector<int>> tokens;
  std::vector<const std::vector<int64_t>*> positions;
  for (const PasskeyProbeTrial& t : trials) {
    const PasskeyTrial& x = control ? t.control : t.trial;
    tokens.push_back(x.tokens);
    positions.push_back(&x.key_positions);
  }
  const std::vector<std::vector<Scored>> scored = CollectScored(scorer, tokens, positions);
  PasskeyArm a;
  a.trials = static_cast<int64_t>(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) {
    size_t k = 0;
    double right = 0, loss = 0;
    bool all = true;
    size_t place = 0;
    for (const int64_t n : trials[i].digit_tokens) {
      bool digit_right = true;
      for (int64_t j = 0; j < n; ++j, ++k) {
        STRETCH_CHECK(k < scored[i].size());
        digit_right = digit_right && scored[i][k].correct;
        loss += scored[i][k].loss;  // the digit's loss: -log P(all its tokens)
      }
      right += digit_right ? 1 : 0;
      all = all && digit_right;
      if (a.right_by_place.size() <= place) a.right_by_place.resize(place + 1, 0);
      a.right_by_place[place++] += digit_right ? 1 : 0;
    }
    STRETCH_CHECK(k == scored[i].size(), "trial {}: {} key tokens, digits cover {}", i,
                  scored[i].size(), k);
    a.retrieved += all ? 1 : 0;
    a.digits_right.push_back(right);
    a.digit_loss_sum.push_back(loss);
    a.digit_count.push_back(static_cast<double>(trials[i].digit_tokens.size()));
    a.digits += static_cast<int64_t>(trials[i].digit_tokens.size());
  }
  a.exact = WilsonInterval(a.retrieved, a.trials);
  a.digit_accuracy = BootstrapRatio(a.digits_right, a.digit_count, bootstrap);
  a.digit_loss = BootstrapRatio(a.digit_loss_sum, a.digit_count, bootstrap);
  return a;
}

}  // namespace

PasskeyProbeResult ScorePasskeyProbe(const SequenceScorer& scorer,
                                     const std::vector<PasskeyProbeTrial>& trials,
                                     const BootstrapOptions& bootstrap) {
  PasskeyProbeResult r;
  r.test = ScorePasskeyArm(scorer, trials, false, bootstrap);
  r.control = ScorePasskeyArm(scorer, trials, true, bootstrap);
  r.exact_difference =
      NewcombeDifference(r.test.retrieved, r.test.trials, r.control.retrieved, r.control.trials);
  r.digit_accuracy_difference =
      BootstrapRatioDifference(r.test.digits_right, r.test.digit_count, r.control.digits_right,
                               r.control.digit_count, /*paired=*/true, bootstrap);
  return r;
}

}  // namespace stretch
