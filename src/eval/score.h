// Scoring protocol: next-token loss (nats), perplexity and accuracy of a model over a token
// stream, overall and by position in the window.
//
// Text streams (ScoreStream): the stream is cut into windows of N = ctx positions. Window w starts
// at stream offset a = w * S (S = stride, default N), feeds BOS followed by stream[a .. a+N-2]
// (BOS is prepended, never replacing a token), and position p predicts stream[a + p]. So
// position 0 predicts the first token from BOS alone, and position N-1 predicts stream[a+N-1],
// the token after the last one fed. With S = N every token is a target exactly once. With
// S < N (sliding windows) window 0 scores all N positions and every later window only its last
// S positions (p >= N - S), so each token is still scored once, now with at least N - S tokens
// of context. Only whole windows are scored; the leftover tail is counted and reported.
//
// Fixed tail with growing context (ScoreFixedTail, the protocol of Su Jianlin's posts for comparing lengths): the
// stream is cut into samples of M tokens (M = the longest context compared; sample w is
// stream[a .. a+M-1], a = w * M). At context C <= M the window feeds BOS followed by the C-1
// tokens stream[a+M-C .. a+M-2], position p predicts stream[a+M-C+p], and only the last `tail`
// positions (p >= C - tail) are scored. So every context scores the same targets, the last `tail`
// tokens of each sample, and only the amount of context before them changes; at C = M the window
// is exactly ScoreStream's window w (stride M) restricted to its last `tail` positions.
//
// Token sequences (ScoreSequences, for `--tokens`): each sequence is fed exactly as given (no BOS
// added), and position p predicts token p + 1, for p = 0 .. n - 2.
//
// Every function scores under the model's current position method (Transformer::SetMethod; the
// caller resolves it for fed_len = ctx) and runs each window with Transformer::ForwardSequence:
// no KV cache, memory O(ctx).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "src/model/transformer.h"

namespace stretch {
// The token fed first in every window of a text stream by default (llama2.c's BOS id); a model
// with another tokenizer sets ScoreOptions::bos to its own (a stretch checkpoint's bytes
// tokenizer: 256).
inline constexpr int kScoreBos = 1;
// Rows of logits computed at once while scoring: bounds the logits buffer to kScoreLogitRows * V
// floats whatever the context length (32 MB for a 32000-token vocabulary).
inline constexpr int64_t kScoreLogitRows = 256;
}  // namespace stretch

namespace stretch {

struct ScoreOptions {
  int64_t ctx = 512;        // N: positions per window
  int64_t stride = 0;       // S: stream offset between windows; 0 means N (streams only)
  int64_t bucket = 512;     // width of the position buckets of the report
  int64_t max_windows = 0;  // score at most this many windows; 0 means all
  // Fixed-tail protocol only (ScoreFixedTail): M, the sample length (>= ctx), and the number of
  // targets scored per sample (1 .. ctx). Both 0 for the other protocols.
  int64_t sample_len = 0;
  int64_t tail = 0;
  int bos = kScoreBos;                   // the BOS fed first in every window of a text stream
  bool progress = true;                  // progress line on stderr
  std::string progress_label = "score";  // how the progress line begins
};

// 95% intervals of a mean loss and an accuracy over windows (FillIntervals).
struct MeanIntervals {
  bool known = false;
  double loss_lo = 0.0, loss_hi = 0.0, accuracy_lo = 0.0, accuracy_hi = 0.0;
};

struct PositionBucket {
  int64_t begin = 0, end = 0;  // positions [begin, end)
  int64_t count = 0;
  int64_t correct = 0;
  double loss_sum = 0.0;
  MeanIntervals ci;  // over the windows, where FillIntervals set it
  double MeanLoss() const { return count ? loss_sum / count : 0.0; }
  double Accuracy() const { return count ? static_cast<double>(correct) / count : 0.0; }
};

struct ScoreSummary {
  int64_t windows = 0;
  int64_t scored = 0;         // targets scored
  int64_t correct = 0;        // targets equal to the argmax of the logits
  double loss_sum = 0.0;      // sum of -log p(target), nats
  int64_t unscored_tail = 0;  // stream tokens after the last whole window
  std::vector<PositionBucket> buckets;
  MeanIntervals ci;  // over the windows, where FillIntervals set it
  double seconds = 0.0;

  double MeanLoss() const { return scored ? loss_sum / scored : 0.0; }
  double Perplexity() const;
  double Accuracy() const { return scored ? static_cast<double>(correct) / scored : 0.0; }
};

// Adds one scored target at `position` to the totals and to its bucket of `bucket` positions
// (buckets [k bucket, (k+1) bucket), created as needed).
void AddToSummary(ScoreSummary& s, int64_t bucket, int64_t position, double loss, bool correct);

struct TokenRecord;

// Per window: the right predictions, the summed loss and the targets scored, in all and in each
// position bucket (as AddToSummary's), from the scored tokens: the samples of an interval over
// windows (the tokens of a window are correlated, so they are not the samples).
struct WindowTally {
  explicit WindowTally(int64_t bucket_width = 1);
  void Add(const TokenRecord& t);
  // Counts `n` windows at least, those without a scored token too (as zeros).
  void CoverWindows(size_t n);
  struct Sums {
    std::vector<double> right, loss, count;  // one entry per window
  };
  const Sums& All() const { return all_; }
  // Bucket k's, one entry per window of All() (zeros where a window has no target there).
  Sums Bucket(size_t k) const;
  size_t Buckets() const { return buckets_.size(); }
  int64_t bucket_width() const { return width_; }

 private:
  int64_t width_;
  Sums all_;
  std::vector<Sums> buckets_;
};

// Fills the intervals of `s` and of its buckets from the tally of the same scoring, the windows
// as samples (RatioMeanInterval, src/core/mean_interval.h: a t-interval over windows, O(windows),
// where a bootstrap would cost more than the scoring on a long text); an accuracy's never
// narrower than Wilson's over its tokens. Fewer than 2 windows: none.
void FillIntervals(ScoreSummary& s, const WindowTally& t);

struct TokenRecord {
  int64_t window = 0;
  int64_t position = 0;
  int target = 0;
  double loss = 0.0;
  bool correct = false;
};
using TokenSink = std::function<void(const TokenRecord&)>;

// Throws stretch::Error naming the flag when an option is out of range. ScoreStream,
// ScoreSequences and ScoreFixedTail call it too; callers call it first to fail before loading
// anything.
void ValidateScoreOptions(const ScoreOptions& opt);

// Throws stretch::Error when options are out of range, a token id is outside the model's
// vocabulary, or the stream is shorter than one window.
ScoreSummary ScoreStream(Transformer& model, std::span<const int> stream, const ScoreOptions& opt,
                         const TokenSink& sink = {});
// Sequences scored from position first_position on (0: every target; later ones are all a
// far-copy or passkey probe reads, and the model then runs its last layer and classifier on those
// rows alone: Transformer::ForwardSequence's first_row).
ScoreSummary ScoreSequences(Transformer& model, const std::vector<std::vector<int>>& sequences,
                            const ScoreOptions& opt, const TokenSink& sink = {},
                            int64_t first_position = 0);
// The fixed-tail protocol at context C = opt.ctx with samples of opt.sample_len (M) tokens,
// scoring the last opt.tail positions of each window. TokenRecord::window is the sample index w,
// ::position the position p in the window (C - tail .. C - 1). Throws stretch::Error when the
// options are out of range (tail outside 1..ctx, ctx > M), a token id is outside the vocabulary,
// or the stream is shorter than one sample.
ScoreSummary ScoreFixedTail(Transformer& model, std::span<const int> stream,
                            const ScoreOptions& opt, const TokenSink& sink = {});

// How many samples the fixed-tail protocol scores in a stream of `stream_tokens`: whole samples
// of M = opt.sample_len (opt.ctx when 0), at most opt.max_windows when set. Throws stretch::Error
// when the stream holds none.
int64_t FixedTailSamples(int64_t stream_tokens, const ScoreOptions& opt);

// The fixed-tail protocol over several contexts (M = their maximum), each under `method` resolved
// for fed_len = C (Transformer::SetMethod). One summary per context, in the order given; the
// model is left set to the last context's method. `opt.ctx` and `opt.sample_len` are ignored.
struct FixedTailResult {
  int64_t ctx = 0;
  std::string resolved_method;  // CanonicalSpec of the method resolved for this context
  ScoreSummary summary;
};
// Receives the context C with each token record.
using ContextTokenSink = std::function<void(int64_t ctx, const TokenRecord&)>;
std::vector<FixedTailResult> ScoreFixedTailContexts(Transformer& model, const Method& method,
                                                    std::span<const int> stream,
                                                    std::span<const int64_t> contexts,
                                                    const ScoreOptions& opt,
                                                    const ContextTokenSink& sink = {});

// One line each, for --help and the JSON report.
std::string StreamProtocolText();
std::string SequenceProtocolText();
std::string FixedTailProtocolText();

}  // namespace stretch
