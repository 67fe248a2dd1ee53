#include "src/eval/protocols.h"

#include <algorithm>

#include "src/core/error.h"
#include "src/core/timer.h"

namespace stretch {

std::vector<WindowRef> SpreadWindows(const TokenSpans& documents, int64_t length, int64_t count,
                                     const char* what) {
  if (length < 1) Fail("{}: window length {} is not positive", what, length);
  if (count < 1) Fail("{}: {} windows asked for, expected at least 1", what, count);
  int64_t total = 0;
  for (const std::span<const int> d : documents) total += static_cast<int64_t>(d.size()) / length;
  if (total < count) {
    Fail(
        "{}: the held-out text holds {} whole windows of {} tokens, fewer than the {} asked for: "
        "give more text or ask for fewer",
        what, total, length, count);
  }
  std::vector<WindowRef> out;
  out.reserve(static_cast<size_t>(count));
  size_t doc = 0;
  int64_t before = 0;  // windows in documents before `doc`
  for (int64_t i = 0; i < count; ++i) {
    // i * total / count without overflow for any realistic corpus (both below 2^31).
    const int64_t want = static_cast<int64_t>((static_cast<__int128>(i) * total) / count);
    while (before + static_cast<int64_t>(documents[doc].size()) / length <= want) {
      before += static_cast<int64_t>(documents[doc].size()) / length;
      ++doc;
    }
    out.push_back({doc, (want - before) * length});
  }
  return out;
}

SequenceScorer ModelSequenceScorer(Transformer& model, std::string label, bool progress) {
  return [&model, label = std::move(label), progress](
             const std::vector<std::vector<int>>& sequences, int64_t first, const TokenSink& sink) {
    ScoreOptions opt;
    int64_t longest = 2;
    for (const std::vector<int>& s : sequences) {
      longest = std::max(longest, static_cast<int64_t>(s.size()));
    }
    opt.ctx = longest;
    opt.progress = progress;
    opt.progress_label = label;
    ScoreSequences(model, sequences, opt, sink, first);
  };
}

std::vector<std::vector<int>> NonRepeatSequences(const TokenSpans& documents, int64_t ctx,
                                                 int64_t count, int bos) {
  std::vector<std::vector<int>> out;
  for (const WindowRef& w : SpreadWindows(documents, ctx, count, "non-repeat")) {
    const std::span<const int> text =
        documents[w.document].subspan(static_cast<size_t>(w.offset), static_cast<size_t>(ctx));
    std::vector<int>& s = out.emplace_back();
    s.reserve(static_cast<size_t>(ctx + 1));
    s.push_back(bos);
    s.insert(s.end(), text.begin(), text.end());
  }
  return out;
}

std::vector<std::vector<int>> RepeatSequences(const TokenSpans& documents, int64_t train_len,
                                              int64_t ctx, int64_t count, int bos) {
  if (ctx < train_len) {
    Fail("repeat: context {} is shorter than the sample of {} tokens it repeats", ctx, train_len);
  }
  std::vector<std::vector<int>> out;
  for (const WindowRef& w : SpreadWindows(documents, train_len, count, "repeat")) {
    const std::span<const int> sample = documents[w.document].subspan(
        static_cast<size_t>(w.offset), static_cast<size_t>(train_len));
    std::vector<int>& s = out.emplace_back();
    s.reserve(static_cast<size_t>(ctx + 1));
    s.push_back(bos);
    for (int64_t i = 0; i < ctx; ++i) s.push_back(sample[static_cast<size_t>(i % train_len)]);
  }
  return out;
}

std::vector<std::vector<int>> TailSequences(const TokenSpans& documents, int64_t longest,
                                            int64_t ctx, int64_t count, int bos) {
  if (ctx > longest) Fail("tail: context {} is longer than the samples of {} tokens", ctx, longest);
  std::vector<std::vector<int>> out;
  for (const WindowRef& w : SpreadWindows(documents, longest, count, "tail")) {
    const std::span<const int> sample = documents[w.document].subspan(
        static_cast<size_t>(w.offset + longest - ctx), static_cast<size_t>(ctx));
    std::vector<int>& s = out.emplace_back();
    s.reserve(static_cast<size_t>(ctx + 1));
    s.push_back(bos);
    s.insert(s.end(), sample.begin(), sample.end());
  }
  return out;
}

ScoreSummary ScoreAllTargets(const SequenceScorer& scorer,
                             const std::vector<std::vector<int>>& sequences, int64_t bucket) {
  return ScoreTargetsFrom(scorer, sequences, 0, bucket);
}

ScoreSummary ScoreTargetsFrom(const SequenceScorer& scorer,
                              const std::vector<std::vector<int>>& sequences,
                              int64_t first_position, int64_t bucket) {
  ScoreSummary summary;
  Timer timer;
  int64_t last_window = -1;
  scorer(sequences, first_position, [&](const TokenRecord& r) {
    if (r.position < first_position) return;
    AddToSummary(summary, bucket, r.position, r.loss, r.correct);
    if (r.window != last_window) {
      summary.windows++;
      last_window = r.window;
    }
  });
  summary.seconds = timer.Seconds();
  return summary;
}

}  // namespace stretch
