#include "src/lab/score_cell.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/core/timer.h"
#include "src/eval/nbce.h"
#include "src/eval/passkey.h"
#include "src/eval/retrieval.h"
#include "src/eval/score.h"
#include "src/io/passkey.h"
#include "src/lab/gate.h"

namespace stretch {
namespace {

LabPositionBucket BucketOf(const PositionBucket& b) {
  return {b.begin, b.end, b.count, b.MeanLoss(), b.Accuracy(), {}, {}};
}

// The record's intervals and those of each of its buckets: a bootstrap over the sequences of the
// tally (their tokens are correlated), every sequence drawn from, those with no target in a
// bucket too. The lab's cells have few sequences (8 to 48), where a bootstrap is cheap.
void FillBootstrapIntervals(LabRecord& r, const WindowTally& t, const BootstrapOptions& boot) {
  const WindowTally::Sums& all = t.All();
  r.accuracy_ci = LabIntervalOf(BootstrapRatio(all.right, all.count, boot));
  r.loss_ci = LabIntervalOf(BootstrapRatio(all.loss, all.count, boot));
  for (LabPositionBucket& b : r.by_position) {
    const auto k = static_cast<size_t>(b.begin / t.bucket_width());
    if (b.begin % t.bucket_width() != 0 || k >= t.Buckets()) continue;
    const WindowTally::Sums sums = t.Bucket(k);
    b.accuracy_ci = LabIntervalOf(BootstrapRatio(sums.right, sums.count, boot));
    b.loss_ci = LabIntervalOf(BootstrapRatio(sums.loss, sums.count, boot));
  }
}

void FillFromSummary(LabRecord& r, const ScoreSummary& s) {
  r.sequences = s.windows;
  r.tokens = s.scored;
  r.loss = s.MeanLoss();
  r.accuracy = s.Accuracy();
  r.token_accuracy = s.Accuracy();
  for (const PositionBucket& b : s.buckets) {
    if (b.count > 0) r.by_position.push_back(BucketOf(b));
  }
}

// ScoreTargetsFrom, and the 95% intervals of its accuracy and loss: a bootstrap over the
// sequences (their tokens are correlated), as retrieval.h's ScoreArm.
void FillScored(LabRecord& r, const SequenceScorer& scorer,
                const std::vector<std::vector<int>>& sequences, int64_t first_position,
                int64_t bucket, const BootstrapOptions& boot) {
  const size_t n = sequences.size();
  WindowTally tally(bucket);
  tally.CoverWindows(n);  // every sequence counted, those with no target scored too (as zeros)
  const SequenceScorer tap = [&](const std::vector<std::vector<int>>& seqs, int64_t first,
                                 const TokenSink& sink) {
    scorer(seqs, first, [&](const TokenRecord& t) {
      if (t.position >= first_position && t.window >= 0 && static_cast<size_t>(t.window) < n) {
        tally.Add(t);
      }
      sink(t);
    });
  };
  FillFromSummary(r, ScoreTargetsFrom(tap, sequences, first_position, bucket));
  FillBootstrapIntervals(r, tally, boot);
}

// A retrieval protocol's test and control into the record.
void FillProbe(LabRecord& r, const ProbeResult& p) {
  r.sequences = p.test.sequences;
  r.tokens = p.test.tokens;
  r.accuracy = p.test.accuracy.estimate;
  r.token_accuracy = r.accuracy;
  r.accuracy_ci = LabIntervalOf(p.test.accuracy);
  r.loss = p.test.loss.estimate;
  r.loss_ci = LabIntervalOf(p.test.loss);
  r.has_control = true;
  r.control_accuracy = p.control.accuracy.estimate;
  r.control_accuracy_ci = LabIntervalOf(p.control.accuracy);
  r.control_loss = p.control.loss.estimate;
}

}  // namespace

int64_t CopySpan(const LabOptions& o) {
  return o.copy_span > 0 ? o.copy_span : std::min<int64_t>(32, o.train_len / 4);
}

std::optional<std::string> ScoreLabCell(const LabOptions& o, const CellPlan& c,
                                        const SweepMethod& method, Transformer& model,
                                        const Model& weights, const CellText& text,
                                        const BootstrapOptions& boot, LabRecord& r) {
  const TokenSpans& docs = text.docs;
  const TextEncoder& encode = text.encode;
  const TextEncoder& mid_text = text.mid_text;
  const int bos = text.bos;
  const int64_t L = o.train_len;
  // The passkey protocol's trials in stretch's layout and their controls (no needle), made
  // before the scorer.
  std::vector<PasskeyTrial> trials, controls;
  std::vector<PasskeyProbeTrial> llama_trials;  // llama.cpp's layout, with their controls
  if (c.protocol == "passkey") {
    // The key is a function of (seed, length, depth): every method meets the same trials.
    const uint64_t seed = o.seed * 1000003u + static_cast<uint64_t>(c.ctx) * 101u +
                          static_cast<uint64_t>(std::llround(c.depth * 1000));
    const PasskeyFormat format = c.layout.empty() ? PasskeyFormat{} : LlamaCppPasskeyFormat();
    const TextEncoder& text_encoder = c.layout.empty() ? encode : mid_text;
    try {  // a length too short for the layout's fixed text and key: the cell refused
      CheckPasskeyArgs(EncodePasskeyPieces(text_encoder, format), c.ctx, c.depth);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    // Anything else (too little held-out text for the trials) stops the lab, named.
    if (c.layout.empty()) {
      PasskeyTrialsWithControls made =
          MakePasskeyTrialsWithControls(docs, encode, bos, c.ctx, c.depth, c.sequences, seed);
      trials = std::move(made.trials);
      controls = std::move(made.controls);  // question_start as their trials' (checked)
    } else {
      llama_trials =
          MakePasskeyProbe(docs, mid_text, bos, c.ctx, c.depth, c.sequences, seed, format);
    }
  }
  // NBCE's question: the fixed tail's scored positions, or the passkey's question and answer.
  const SequenceScorer scorer =
      method.nbce ? NbceSequenceScorer(weights, *method.nbce, method.method,
                                       [&](size_t k, const std::vector<int>&) {
                                         return c.protocol == "passkey" ? trials[k].question_start
                                                                        : c.ctx - c.tail;
                                       })
                  : ModelSequenceScorer(model, "", false);
  const int64_t bucket = std::max<int64_t>(1, c.ctx / 16);
  Timer timer;
  if (c.protocol == "nonrepeat") {
    FillScored(r, scorer, NonRepeatSequences(docs, c.ctx, c.sequences, bos), 0, bucket, boot);
  } else if (c.protocol == "repeat" && c.period == 0) {
    FillScored(r, scorer, RepeatSequences(docs, L, c.ctx, c.sequences, bos), 0, bucket, boot);
  } else if (c.protocol == "repeat") {
    r.period = c.period;
    FillProbe(r, RunRepeat(scorer, docs, bos, c.ctx, c.period, c.sequences, boot));
  } else if (c.protocol == "far-copy") {
    r.distance = c.distance;
    r.material = c.material;
    FarCopyOptions fo;
    fo.source = c.material == "random" ? CopySource::kRandom : CopySource::kText;
    fo.span = CopySpan(o);
    fo.seed = o.seed;  // every method and distance meets the same spans
    const std::vector<int64_t> distance = {c.distance};
    const FarCopyResult fr =
        RunFarCopy(scorer, docs, mid_text, bos, c.ctx, L, distance, c.sequences, fo, boot);
    FillProbe(r, fr.points.at(0).result);
  } else if (c.protocol == "tail") {
    FillScored(r, scorer, TailSequences(docs, text.longest_ctx, c.ctx, c.sequences, bos),
               c.ctx - c.tail, std::max<int64_t>(1, c.tail / 4), boot);
  } else if (c.protocol == "sliding") {
    // Sliding-window perplexity (ScoreStream with a stride) over the longest test document.
    ScoreOptions so;
    so.ctx = c.ctx;
    so.stride = c.stride;
    so.max_windows = c.sequences;
    so.bos = bos;
    so.bucket = bucket;
    so.progress = false;
    // The intervals: a bootstrap over the windows (their tokens are correlated), as FillScored.
    WindowTally tally(bucket);
    const TokenSink per_window = [&](const TokenRecord& t) { tally.Add(t); };
    FillFromSummary(r, ScoreStream(model, text.longest_doc, so, per_window));
    FillBootstrapIntervals(r, tally, boot);
  } else if (c.protocol == "passkey" && !c.layout.empty()) {
    r.layout = c.layout;
    const PasskeyProbeResult p = ScorePasskeyProbe(scorer, llama_trials, boot);
    r.sequences = p.test.trials;
    r.tokens = p.test.digits;
    r.accuracy = p.test.exact.estimate;
    r.accuracy_ci = LabIntervalOf(p.test.exact);
    r.token_accuracy = p.test.digit_accuracy.estimate;
    r.loss = p.test.digit_loss.estimate;
    r.loss_ci = LabIntervalOf(p.test.digit_loss);
    r.has_control = true;
    r.control_accuracy = p.control.exact.estimate;
    r.control_accuracy_ci = LabIntervalOf(p.control.exact);
    r.control_loss = p.control.digit_loss.estimate;
    r.right_by_place = p.test.right_by_place;
    r.control_right_by_place = p.control.right_by_place;
  } else if (c.protocol == "passkey") {
    const PasskeyResult p = ScorePasskey(scorer, trials);
    r.sequences = p.trials;
    r.tokens = p.key_tokens;
    r.loss = p.key_loss;
    r.accuracy = p.accuracy;
    r.accuracy_ci = LabIntervalOf(WilsonInterval(p.retrieved, p.trials));
    r.token_accuracy = p.token_accuracy;
    r.right_by_place = p.right_by_place;
    // The control: the same questions and answers with no needle (NBCE's scorer finds the
    // same question_start in both).
    const PasskeyResult q = ScorePasskey(scorer, controls);
    r.has_control = true;
    r.control_accuracy = q.accuracy;
    r.control_accuracy_ci = LabIntervalOf(WilsonInterval(q.retrieved, q.trials));
    r.control_loss = q.key_loss;
    r.control_right_by_place = q.right_by_place;
  } else {
    Fail("lab: protocol {} is planned but not scored by this build", c.protocol);
  }
  r.seconds = timer.Seconds();
  return std::nullopt;
}

}  // namespace stretch
