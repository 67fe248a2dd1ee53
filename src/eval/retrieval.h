// Retrieval protocols: does a model still *use* distant tokens, or does it only avoid blowing up?
// Each protocol comes with a control that has nothing to retrieve, scored at the very same
// positions with the very same targets, so that "copy minus control" is what the distant tokens
// bought (STYLE.md: a retrieval test always has a control). Every accuracy and loss carries a 95%
// interval (src/eval/interval.h). Sequences are built at the token level (BOS, then ctx tokens;
// position p predicts token p + 1, as src/eval/protocols.h) and scored through a SequenceScorer,
// so a test can put an oracle (a perfect copier) in the model's place.
//
//   Far copy    BOS  text  S  filler  S  with S a span of `span` tokens and the second S ending the
//               sequence; distance d = (index of the copy's first token) - (index of the source's
//               first token), from span up to ctx - span. Scored: the copy's tokens but its first
//               (nothing announces the copy). The text and filler are one window of held-out text
//               (the same at every distance), the spans either the held-out text that follows the
//               window (so the copy continues its context naturally) or random strings (characters
//               drawn uniformly, each encoded alone). Control: the same sequence with the source
//               replaced by a different span, so the final span occurs nowhere earlier.
//               No leak: a target whose n-gram (the n - 1 tokens before it and itself, n =
//               FarCopyOptions::ngram, 4 by default) occurs earlier in the control sequence could
//               be copied from there, so it is scored in neither arm. Natural text repeats short
//               n-grams; this is what keeps the control at "nothing to copy" (about a sixth of
//               the copy's targets of TinyStories with tok512 are dropped so at ctx 512).
//   Repeat      a sample of `period` tokens repeated to fill ctx (RepeatSequences); scored from
//               position period + 1 on (every target a copy from `period` tokens back, but the
//               second copy's first, which follows a token nothing followed before). Control:
//               genuine text windows (NonRepeatSequences) at the same positions. A period no longer
//               than a method's window is within reach of a local method: the lab's period L is a
//               within-window control, 2L and 4L test distant use.
//   Passkey     src/io/passkey.h (the default or llama.cpp's layout), scored at the answer's key
//               tokens: trials read back exactly (Wilson interval), per-digit accuracy and loss
//               (a digit is right when all its tokens are; its loss is the sum of its tokens'
//               losses). Control: the same question and answer with no needle (MakePasskeyControl).
//   Sees back   SeesBackDistance: the farthest distance at which far-copy accuracy stays within
//               10 points of its value at the training length L.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/core/sees_back.h"
#include "src/eval/interval.h"
#include "src/eval/protocols.h"
#include "src/io/passkey.h"

namespace stretch {

// One sequence (BOS, then ctx tokens) and the positions p scored in it (target tokens[p + 1]),
// ascending.
struct ProbeSequence {
  std::vector<int> tokens;
  std::vector<int64_t> scored;
};

// One arm (a protocol or its control) scored: per-token means pooled over the sequences, each
// with a bootstrap interval over sequences (tokens within a sequence are correlated).
struct ArmScore {
  int64_t sequences = 0;
  int64_t tokens = 0;  // targets scored, over all sequences
  Interval accuracy;   // share of the targets predicted right (argmax)
  Interval loss;       // mean loss, nats
  // Per sequence, for the differences: targets right, summed loss, targets scored.
  std::vector<double> right, loss_sum, count;
};

// A protocol and its control, and their difference (test - control).
struct ProbeResult {
  ArmScore test, control;
  Interval accuracy_difference;
  Interval loss_difference;
};

// Scores the sequences' positions `scored` (the scorer's other records are ignored). Throws when
// the scorer misses a scored position (a programming error).
ArmScore ScoreArm(const SequenceScorer& scorer, const std::vector<ProbeSequence>& sequences,
                  const BootstrapOptions& bootstrap = {});
// The difference; `paired`: test[i] and control[i] share everything but what is retrieved.
ProbeResult CompareArms(ArmScore test, ArmScore control, bool paired,
                        const BootstrapOptions& bootstrap = {});

// ---- Far copy ----

enum class CopySource { kText, kRandom };
const char* CopySourceName(CopySource source);  // "text" or "random"

struct FarCopyOptions {
  CopySource source = CopySource::kText;
  int64_t span = 32;                                    // S, tokens (at least ngram + 1)
  int ngram = 4;                                        // the leak rule's n (at the top), >= 1
  uint64_t seed = 1;                                    // random strings
  std::string alphabet = "abcdefghijklmnopqrstuvwxyz";  // random strings' characters
};

struct FarCopyTrial {
  ProbeSequence copy, control;  // the same tokens but the source span; the same scored positions
  int64_t source_start = 0;     // index in tokens of the source's first token
  int64_t copy_start = 0;       // index in tokens of the copy's first token (ctx - span + 1)
};

// `count` trials at one distance. The windows (count of the documents' non-overlapping windows of
// ctx + span tokens, spread evenly: SpreadWindows) and the random strings (from Rng(seed), drawn
// in trial order) do not depend on the distance, so every distance meets the same text and spans.
// `encode` is used for random strings only (may be empty for kText). Throws stretch::Error for a
// distance outside [span, ctx - span], a span below ngram + 1, ngram < 1, too little text, an
// empty alphabet or a character that encodes to no token.
std::vector<FarCopyTrial> MakeFarCopyTrials(const TokenSpans& documents, const TextEncoder& encode,
                                            int bos, int64_t ctx, int64_t distance, int64_t count,
                                            const FarCopyOptions& opt = {});

// The distances a far-copy run measures by default: L/4, L/2, L, 2L, 4L, ... kept within
// [span, ctx - span], then ctx - span ("the whole context"), ascending, without repeats.
std::vector<int64_t> DefaultCopyDistances(int64_t train_len, int64_t ctx, int64_t span);

struct FarCopyPoint {
  int64_t distance = 0;
  ProbeResult result;  // paired: copy and control share their filler
};
struct FarCopyResult {
  std::vector<FarCopyPoint> points;  // distances ascending
  std::optional<int64_t> sees_back;  // SeesBackDistance of the copy accuracies
  int64_t reference_distance = 0;    // the distance SeesBackDistance compared with (0: none)
  double reference_gain = 0.0;       // copy - control at the reference distance
  // The largest copy - control over the distances, and where: "sees back" is informative when it
  // is >= kSeesBackMinGain (SeesBackInformative).
  double max_gain = 0.0;
  int64_t max_gain_distance = 0;
};
bool SeesBackInformative(const FarCopyResult& r);

// Every distance (ascending; repeats removed), `count` trials each, scored and compared.
FarCopyResult RunFarCopy(const SequenceScorer& scorer, const TokenSpans& documents,
                         const TextEncoder& encode, int bos, int64_t ctx, int64_t train_len,
                         std::span<const int64_t> distances, int64_t count,
                         const FarCopyOptions& opt = {}, const BootstrapOptions& bootstrap = {});

// ---- Repeat with a period ----

struct RepeatProbe {
  std::vector<ProbeSequence> repeat, control;
};
// `count` samples of `period` tokens repeated to ctx, scored at positions period + 1 .. ctx - 1,
// and
// `count` text windows of ctx scored at the same positions. Throws stretch::Error for
// period < 1, period >= ctx (nothing would be a copy) or too little text.
RepeatProbe MakeRepeatProbe(const TokenSpans& documents, int bos, int64_t ctx, int64_t period,
                            int64_t count);
// Unpaired: the repeat's samples and the control's windows are different text.
ProbeResult RunRepeat(const SequenceScorer& scorer, const TokenSpans& documents, int bos,
                      int64_t ctx, int64_t period, int64_t count,
                      const BootstrapOptions& bootstrap = {});

// ---- Non-repeat (no control: the baseline itself) ----

// `count` text windows of ctx, every target scored.
ArmScore RunNonRepeat(const SequenceScorer& scorer, const TokenSpans& documents, int bos,
                      int64_t ctx, int64_t count, const BootstrapOptions& bootstrap = {});

// ---- Passkey ----

struct PasskeyProbeTrial {
  PasskeyTrial trial, control;
  std::vector<int64_t> digit_tokens;  // tokens of each key digit, in order (sum: key length)
};

// `count` trials at one depth and their controls. Filler windows: `count` of the documents'
// windows of ctx tokens, spread evenly (unused with a junk format); keys from Rng(seed). Throws
// as MakePasskeyTrials.
std::vector<PasskeyProbeTrial> MakePasskeyProbe(const TokenSpans& documents,
                                                const TextEncoder& encode, int bos, int64_t ctx,
                                                double depth, int64_t count, uint64_t seed,
                                                const PasskeyFormat& format = {});

struct PasskeyArm {
  int64_t trials = 0;
  int64_t retrieved = 0;    // trials with every key token right
  Interval exact;           // retrieved / trials, Wilson
  int64_t digits = 0;       // digits scored, over all trials
  Interval digit_accuracy;  // share of digits with all their tokens right (bootstrap by trial)
  Interval digit_loss;      // mean over digits of the summed loss of their tokens, nats
  std::vector<double> digits_right, digit_loss_sum, digit_count;  // per trial
  // Trials whose digit at place p (0 = the first the answer asks for) was right: a model that
  // reads a key but its first digit shows here, as a low count at place 0.
  std::vector<int64_t> right_by_place;
};
struct PasskeyProbeResult {
  PasskeyArm test, control;
  // Newcombe's interval for independent samples; the arms share their keys, so it is
  // conservative (wider) when they are positively correlated.
  Interval exact_difference;
  Interval digit_accuracy_difference;  // paired bootstrap (same answers, same filler source)
};

PasskeyProbeResult ScorePasskeyProbe(const SequenceScorer& scorer,
                                     const std::vector<PasskeyProbeTrial>& trials,
                                     const BootstrapOptions& bootstrap = {});

}  // namespace stretch
