#include "src/eval/score.h"

#include <algorithm>
#include <cmath>

#include "src/core/error.h"
#include "src/core/mean_interval.h"
#include "src/core/progress.h"
#include "src/core/threads.h"
#include "src/eval/interval.h"
#include "src/kernels/ops.h"
#include "src/position/plan.h"

namespace stretch {
namespace {

constexpr int64_t kLogitRows = kScoreLogitRows;

// One window to score: `inputs` fed at positions 0.. (ForwardSequence: from position 0, no KV
// cache), `targets[p]` scored for p in [first, targets.size()).
struct Window {
  std::span<const int> inputs, targets;
  int64_t first = 0;
  int64_t id = 0;  // TokenRecord::window
};
// Fills `inputs` (a buffer it may use) and returns window w.
using WindowMaker = std::function<Window(int64_t w, std::vector<int>& inputs)>;

// A thread's model and buffers.
struct WindowRunner {
  Transformer* model = nullptr;
  std::vector<float> hidden, logits;
  std::vector<int> inputs;
  std::vector<TokenLoss> losses;
};

// Scores one window into `records`, in position order.
void ScoreWindow(WindowRunner& run, const Window& win, std::vector<TokenRecord>& records) {
  Transformer& model = *run.model;
  const int V = model.config().vocab_size;
  const int C = model.config().dim;
  const int64_t n = static_cast<int64_t>(win.targets.size());
  records.clear();
  if (win.first >= n) return;  // nothing to score in this window
  model.ForwardSequence(win.inputs, run.hidden, win.first);
  run.logits.resize(static_cast<size_t>(kLogitRows * V));
  run.losses.resize(static_cast<size_t>(kLogitRows));
  for (int64_t r0 = win.first; r0 < n; r0 += kLogitRows) {
    const int64_t rows = std::min(kLogitRows, n - r0);
    model.Logits(run.hidden.data() + r0 * C, rows, run.logits.data());
    ParallelFor(rows, WorkGrain(rows, rows * V, 1 << 16), [&](int64_t r_begin, int64_t r_end) {
      for (int64_t r = r_begin; r < r_end; ++r) {
        run.losses[static_cast<size_t>(r)] =
            CrossEntropyRow(run.logits.data() + r * V, V, win.targets[static_cast<size_t>(r0 + r)]);
      }
    });
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = r0 + r;
      const int target = win.targets[static_cast<size_t>(p)];
      const TokenLoss& tl = run.losses[static_cast<size_t>(r)];
      records.push_back({win.id, p, target, tl.loss, tl.argmax == target});
    }
  }
}

void AddWindow(ScoreSummary& summary, int64_t bucket, const std::vector<TokenRecord>& records,
               const TokenSink& sink) {
  for (const TokenRecord& r : records) {
    AddToSummary(summary, bucket, r.position, r.loss, r.correct);
    if (sink) sink(r);
  }
  summary.windows++;
}

// Scores windows 0 .. count-1 and adds them to `summary` (and `sink`) in window order.
//
// With several threads and at least as many windows, each thread scores whole windows on a model
// of its own (Transformer::Fork) with single-threaded kernels: no thread ever waits for another
// inside a window, which is what keeps scoring fast on a machine shared with other work (a
// preempted thread holds back only its own window). Windows run in batches of a few per thread,
// their records kept and added in window order, so the summary, the sink's order and every figure
// are bit for bit those of one thread running the windows in turn, whatever the thread count.
// With fewer windows than threads, the threads share each window (the kernels' own splits; equal
// to one thread's figures within float32 rounding, see src/kernels/ops.cc). Measured with
// stories260K on 2 threads against the OpenMP code this replaced: 200 windows of 512 in 0.69x the
// time; 2 windows of 8192 in 1.02x (a window per thread; sharing each window took 0.97x, but its
// figures depend on the thread count in the last bits).
void ScoreWindows(Transformer& model, int64_t count, const WindowMaker& make,
                  const ScoreOptions& opt, ScoreSummary& summary, const TokenSink& sink,
                  Progress& progress) {
  const int threads = NumThreads();
  const int workers = threads > 1 && count >= threads && !InParallelRegion() ? threads : 1;
  std::vector<Transformer> forks;
  for (int t = 1; t < workers; ++t) forks.push_back(model.Fork());
  std::vector<WindowRunner> runners(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    runners[static_cast<size_t>(t)].model = t == 0 ? &model : &forks[static_cast<size_t>(t - 1)];
  }
  const int64_t batch = workers == 1 ? 1 : 4 * int64_t{workers};
  std::vector<std::vector<TokenRecord>> records(static_cast<size_t>(batch));
  for (int64_t w0 = 0; w0 < count; w0 += batch) {
    const int64_t n = std::min(batch, count - w0);
    auto one = [&](int64_t i, int worker) {
      WindowRunner& run = runners[static_cast<size_t>(worker)];
      const Window win = make(w0 + i, run.inputs);
      ScoreWindow(run, win, records[static_cast<size_t>(i)]);
    };
    if (workers == 1) {
      one(0, 0);
    } else {
      ParallelForEach(n, one);
    }
    for (int64_t i = 0; i < n; ++i) {
      AddWindow(summary, opt.bucket, records[static_cast<size_t>(i)], sink);
      progress.Update(w0 + i + 1);
    }
  }
}

void CheckTokenIds(std::span<const int> ids, int vocab_size, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      Fail("{}: token id {} at index {} is outside the model's vocabulary 0..{}", what, ids[i], i,
           vocab_size - 1);
    }
  }
}

// Bucket labels end at the last position actually scored (a short --tokens sequence scores
// positions 0..n-2 only, not the whole bucket width).
void CapBuckets(ScoreSummary& s, int64_t max_position) {
  for (PositionBucket& b : s.buckets) b.end = std::min(b.end, max_position + 1);
}

}  // namespace

void ValidateScoreOptions(const ScoreOptions& opt) {
  if (opt.ctx < 2) Fail("ScoreOptions::ctx: found {}, expected at least 2 positions", opt.ctx);
  if (opt.stride < 0 || opt.stride > opt.ctx) {
    Fail(
        "ScoreOptions::stride: found {}, expected 1..{} (the context length) or 0 for "
        "non-overlapping windows",
        opt.stride, opt.ctx);
  }
  if (opt.bucket < 1) Fail("ScoreOptions::bucket: found {}, expected a positive width", opt.bucket);
  if (opt.max_windows < 0)
    Fail("ScoreOptions::max_windows: found {}, expected >= 0", opt.max_windows);
  if (opt.tail < 0)
    Fail("ScoreOptions::tail: found {}, expected >= 1 (or 0 for no fixed tail)", opt.tail);
  if (opt.tail > 0) {
    if (opt.tail > opt.ctx) {
      Fail(
          "ScoreOptions::tail: found {}, expected 1..{} (ScoreOptions::ctx {}): every context must "
          "hold the scored tail",
          opt.tail, opt.ctx, opt.ctx);
    }
    if (opt.stride != 0) {
      Fail(
          "ScoreOptions::stride {} and ScoreOptions::tail {}: the fixed-tail protocol cuts the "
          "stream into samples of "
          "the longest context; give one or the other",
          opt.stride, opt.tail);
    }
    if (opt.sample_len != 0 && opt.sample_len < opt.ctx) {
      Fail(
          "fixed tail: sample length {} is shorter than ScoreOptions::ctx {}; expected the longest "
          "context",
          opt.sample_len, opt.ctx);
    }
  }
}

WindowTally::WindowTally(int64_t bucket_width) : width_(std::max<int64_t>(1, bucket_width)) {}

namespace {
void GrowTo(WindowTally::Sums& s, size_t n) {
  if (s.count.size() >= n) return;
  s.right.resize(n, 0.0), s.loss.resize(n, 0.0), s.count.resize(n, 0.0);
}
}  // namespace

void WindowTally::CoverWindows(size_t n) { GrowTo(all_, n); }

void WindowTally::Add(const TokenRecord& t) {
  const size_t w = static_cast<size_t>(std::max<int64_t>(0, t.window));
  const size_t k = static_cast<size_t>(std::max<int64_t>(0, t.position) / width_);
  if (k >= buckets_.size()) buckets_.resize(k + 1);
  for (Sums* s : {&all_, &buckets_[k]}) {
    GrowTo(*s, w + 1);
    s->right[w] += t.correct ? 1.0 : 0.0;
    s->loss[w] += t.loss;
    s->count[w] += 1.0;
  }
}

WindowTally::Sums WindowTally::Bucket(size_t k) const {
  Sums s = k < buckets_.size() ? buckets_[k] : Sums{};
  GrowTo(s, all_.count.size());
  return s;
}

void FillIntervals(ScoreSummary& s, const WindowTally& t) {
  auto fill = [](MeanIntervals& ci, const WindowTally::Sums& sums) {
    const auto loss = RatioMeanInterval(sums.loss, sums.count);
    const auto right = RatioMeanInterval(sums.right, sums.count);
    if (!loss || !right) return;
    // An accuracy's interval: the windows' t-interval widened to hold Wilson's over the tokens,
    // which it never undercuts (windows that all read 0 of their tokens right have no spread, and
    // their t-interval would be [0, 0]), and kept within [0, 1].
    double right_sum = 0, count_sum = 0;
    for (size_t w = 0; w < sums.count.size(); ++w) {
      right_sum += sums.right[w];
      count_sum += sums.count[w];
    }
    const Interval wilson = WilsonInterval(std::llround(right_sum), std::llround(count_sum));
    ci = {true, loss->first, loss->second, std::max(0.0, std::min(right->first, wilson.low)),
          std::min(1.0, std::max(right->second, wilson.high))};
  };
  fill(s.ci, t.All());
  for (PositionBucket& b : s.buckets) {
    if (b.count == 0 || b.begin % t.bucket_width() != 0) continue;
    fill(b.ci, t.Bucket(static_cast<size_t>(b.begin / t.bucket_width())));
  }
}

void AddToSummary(ScoreSummary& s, int64_t bucket, int64_t position, double loss, bool correct) {
  const size_t b = static_cast<size_t>(position / bucket);
  if (s.buckets.size() <= b) {
    const size_t old = s.buckets.size();
    s.buckets.resize(b + 1);
    for (size_t i = old; i <= b; ++i) {
      s.buckets[i].begin = static_cast<int64_t>(i) * bucket;
      s.buckets[i].end = static_cast<int64_t>(i + 1) * bucket;
    }
  }
  PositionBucket& pb = s.buckets[b];
  pb.count++;
  pb.correct += correct;
  pb.loss_sum += loss;
  s.scored++;
  s.correct += correct;
  s.loss_sum += loss;
}

double ScoreSummary::Perplexity() const { return std::exp(MeanLoss()); }

ScoreSummary ScoreStream(Transformer& model, std::span<const int> stream, const ScoreOptions& opt,
                         const TokenSink& sink) {
  ValidateScoreOptions(opt);
  CheckTokenIds(stream, model.config().vocab_size, "token stream");
  CheckTokenIds(std::span<const int>(&opt.bos, 1), model.config().vocab_size, "BOS");
  const int64_t N = opt.ctx;
  const int64_t S = opt.stride == 0 ? N : opt.stride;
  const int64_t total = static_cast<int64_t>(stream.size());
  if (total < N) {
    Fail("the token stream has {} tokens, fewer than one window of ScoreOptions::ctx {}", total, N);
  }
  int64_t windows = (total - N) / S + 1;
  if (opt.max_windows > 0) windows = std::min(windows, opt.max_windows);

  ScoreSummary summary;
  Timer timer;
  Progress progress(opt.progress_label, windows, "windows", opt.progress);
  auto make = [&](int64_t w, std::vector<int>& inputs) {
    const int64_t a = w * S;
    inputs.resize(static_cast<size_t>(N));
    inputs[0] = opt.bos;
    std::copy(stream.begin() + a, stream.begin() + a + N - 1, inputs.begin() + 1);
    return Window{inputs, stream.subspan(static_cast<size_t>(a), static_cast<size_t>(N)),
                  w == 0 ? 0 : N - S, w};
  };
  ScoreWindows(model, windows, make, opt, summary, sink, progress);
  progress.Finish();
  summary.unscored_tail = total - ((windows - 1) * S + N);
  CapBuckets(summary, N - 1);
  summary.seconds = timer.Seconds();
  return summary;
}

ScoreSummary ScoreSequences(Transformer& model, const std::vector<std::vector<int>>& sequences,
                            const ScoreOptions& opt, const TokenSink& sink,
                            int64_t first_position) {
  ValidateScoreOptions(opt);
  if (opt.stride != 0) Fail("ScoreOptions::stride applies to text streams, not to token sequences");
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const int64_t n = static_cast<int64_t>(sequences[i].size());
    if (n > opt.ctx) {
      Fail(
          "sequence {} has {} tokens, more than ScoreOptions::ctx {}: raise it or split the "
          "sequence",
          i + 1, n, opt.ctx);
    }
    longest = std::max(longest, n);
    CheckTokenIds(sequences[i], model.config().vocab_size, "token sequence");
  }
  ScoreSummary summary;
  Timer timer;
  if (longest < 2) Fail("no sequence has 2 or more tokens: nothing to score");
  if (first_position < 0) Fail("ScoreSequences: first position {}, expected >= 0", first_position);
  int64_t count = static_cast<int64_t>(sequences.size());
  if (opt.max_windows > 0) count = std::min(count, opt.max_windows);
  // Sequences of fewer than 2 tokens have nothing to score and are skipped (not counted).
  std::vector<int64_t> scored;
  for (int64_t i = 0; i < count; ++i) {
    if (sequences[static_cast<size_t>(i)].size() >= 2) scored.push_back(i);
  }
  Progress progress(opt.progress_label, static_cast<int64_t>(scored.size()), "sequences",
                    opt.progress);
  auto make = [&](int64_t k, std::vector<int>&) {
    const int64_t i = scored[static_cast<size_t>(k)];
    const std::span<const int> all(sequences[static_cast<size_t>(i)]);
    return Window{all.first(all.size() - 1), all.subspan(1), first_position, i};
  };
  ScoreWindows(model, static_cast<int64_t>(scored.size()), make, opt, summary, sink, progress);
  progress.Finish();
  CapBuckets(summary, longest - 2);
  summary.seconds = timer.Seconds();
  return summary;
}

ScoreSummary ScoreFixedTail(Transformer& model, std::span<const int> stream,
                            const ScoreOptions& opt, const TokenSink& sink) {
  ValidateScoreOptions(opt);
  if (opt.tail < 1) Fail("fixed tail: ScoreOptions::tail must be at least 1, found {}", opt.tail);
  CheckTokenIds(stream, model.config().vocab_size, "token stream");
  CheckTokenIds(std::span<const int>(&opt.bos, 1), model.config().vocab_size, "BOS");
  const int64_t C = opt.ctx;
  const int64_t M = opt.sample_len == 0 ? C : opt.sample_len;
  const int64_t total = static_cast<int64_t>(stream.size());
  const int64_t samples = FixedTailSamples(total, opt);

  ScoreSummary summary;
  Timer timer;
  Progress progress(opt.progress_label, samples, "windows", opt.progress);
  auto make = [&](int64_t w, std::vector<int>& inputs) {
    // inputs = [BOS] + stream[a+M-C .. a+M-2]; position p predicts stream[b + p], b = a + M - C.
    const int64_t b = w * M + M - C;
    inputs.resize(static_cast<size_t>(C));
    inputs[0] = opt.bos;
    std::copy(stream.begin() + b, stream.begin() + b + C - 1, inputs.begin() + 1);
    return Window{inputs, stream.subspan(static_cast<size_t>(b), static_cast<size_t>(C)),
                  C - opt.tail, w};
  };
  ScoreWindows(model, samples, make, opt, summary, sink, progress);
  progress.Finish();
  summary.unscored_tail = total - samples * M;
  CapBuckets(summary, C - 1);
  summary.seconds = timer.Seconds();
  return summary;
}

int64_t FixedTailSamples(int64_t stream_tokens, const ScoreOptions& opt) {
  const int64_t M = opt.sample_len == 0 ? opt.ctx : opt.sample_len;
  if (stream_tokens < M) {
    Fail("the token stream has {} tokens, fewer than one sample of {} (the longest context)",
         stream_tokens, M);
  }
  const int64_t samples = stream_tokens / M;
  return opt.max_windows > 0 ? std::min(samples, opt.max_windows) : samples;
}

std::vector<FixedTailResult> ScoreFixedTailContexts(Transformer& model, const Method& method,
                                                    std::span<const int> stream,
                                                    std::span<const int64_t> contexts,
                                                    const ScoreOptions& opt,
                                                    const ContextTokenSink& sink) {
  if (contexts.empty()) Fail("fixed tail: no context length given");
  const int64_t M = *std::max_element(contexts.begin(), contexts.end());
  ScoreOptions cell = opt;
  cell.sample_len = M;
  // Every context is checked (options and method) before the first is scored; each plan is
  // resolved once.
  std::vector<AttentionPlan> plans;
  for (const int64_t C : contexts) {
    cell.ctx = C;
    ValidateScoreOptions(cell);
    plans.push_back(MakeAttentionPlan(method, model.Geometry(), C));
    CheckMethodFitsLayout(model.config(), plans.back());
  }
  std::vector<FixedTailResult> results;
  for (size_t k = 0; k < contexts.size(); ++k) {
    const int64_t C = contexts[k];
    cell.ctx = C;
    model.SetPlan(std::move(plans[k]));
    TokenSink cell_sink;
    if (sink) cell_sink = [&sink, C](const TokenRecord& r) { sink(C, r); };
    results.push_back(
        {C, CanonicalSpec(model.plan().method), ScoreFixedTail(model, stream, cell, cell_sink)});
  }
  return results;
}

std::string StreamProtocolText() {
  return "Each window of N = ctx positions feeds BOS (prepended, replacing nothing) and the next "
         "N-1 stream tokens; position p predicts stream token a+p, so position 0 predicts from BOS "
         "alone and position N-1 predicts the token after the last one fed. Windows start every "
         "stride tokens (default N: each token scored once); with stride S < N, windows after "
         "the first score only their last S positions. Partial windows at the end are not "
         "scored.";
}

std::string FixedTailProtocolText() {
  return "Fixed tail with growing context: the stream is cut into samples of M tokens (M = the "
         "longest context). At context C the window feeds BOS (prepended) and the C-1 tokens "
         "before the sample's last one; only its last `tail` positions are scored, so every "
         "context scores the same targets (the last `tail` tokens of each sample) and only the "
         "context before them grows. At C = M this is the plain window of M positions.";
}

std::string SequenceProtocolText() {
  return "Each line of the token file is one sequence, fed exactly as given (no BOS added); "
         "position p predicts token p+1, for p = 0 .. n-2.";
}

}  // namespace stretch
