#include "src/train/run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/mean_interval.h"
#include "src/core/stop.h"
#include "src/core/timer.h"
#include "src/core/train_log_keys.h"
#include "src/io/output_file.h"
#include "src/train/run_dir.h"

namespace stretch {

std::optional<EvalStats> EvaluateHeldOut(Trainer& trainer, const TrainingData& data,
                                         int64_t windows) {
  const int64_t n = std::min<int64_t>(windows, static_cast<int64_t>(data.valid.size()));
  if (n <= 0) return std::nullopt;
  const int64_t T = data.sampler->seq_len();
  double loss = 0, acc = 0;
  int64_t scored = 0;
  std::vector<double> window_loss;
  std::vector<int64_t> window_scored;
  std::vector<int> tokens(static_cast<size_t>(T + 1));
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  for (int64_t w = 0; w < n; ++w) {
    CopyWindow(data.split->valid, data.valid[static_cast<size_t>(w)], in, tg);
    std::copy(in.begin(), in.end(), tokens.begin());
    tokens[static_cast<size_t>(T)] = tg[static_cast<size_t>(T - 1)];
    const EvalStats e = trainer.Evaluate(tokens, 1);
    loss += e.loss * e.scored;
    acc += e.accuracy * e.scored;
    scored += e.scored;
    window_loss.push_back(e.loss);
    window_scored.push_back(e.scored);
  }
  EvalStats out{loss / scored, acc / scored, scored};
  if (const auto ci = HeldOutLossInterval(window_loss, window_scored)) {
    out.loss_ci_known = true;
    out.loss_lo = ci->first;
    out.loss_hi = ci->second;
  }
  return out;
}

std::optional<std::pair<double, double>> HeldOutLossInterval(
    std::span<const double> window_loss, std::span<const int64_t> window_scored) {
  STRETCH_CHECK(window_loss.size() == window_scored.size());
  std::vector<double> sums, counts;
  for (size_t w = 0; w < window_loss.size(); ++w) {
    counts.push_back(static_cast<double>(window_scored[w]));
    sums.push_back(counts.back() * window_loss[w]);
  }
  return RatioMeanInterval(sums, counts);
}

void SampleTrainingBatch(const TrainingData& data, Rng& rng, int64_t B, std::vector<int>& tokens) {
  STRETCH_CHECK(data.split != nullptr && data.sampler != nullptr, "training data not set");
  STRETCH_CHECK(data.passkey_share >= 0.0 && data.passkey_share <= 1.0);
  const int64_t T = data.sampler->seq_len();
  tokens.resize(static_cast<size_t>(B * (T + 1)));
  if (data.passkey_share == 0.0 && !data.copy_mix.HasCopy()) {
    // Exactly the batches of runs without passkey or copy rows (SampleBatch's draws).
    const Batch b = SampleBatch(data.split->train, *data.sampler, rng, B);
    for (int64_t s = 0; s < B; ++s) {
      for (int64_t t = 0; t < T; ++t)
        tokens[static_cast<size_t>(s * (T + 1) + t)] = b.inputs[static_cast<size_t>(s * T + t)];
      tokens[static_cast<size_t>(s * (T + 1) + T)] = b.targets[static_cast<size_t>(s * T + T - 1)];
      if (data.bos_rows) tokens[static_cast<size_t>(s * (T + 1))] = data.bos;
    }
    return;
  }
  // The passkey share is the run's own option; the copy kinds' shares follow it (RowKindOf).
  CopyMix mix = data.copy_mix;
  mix.passkey = data.passkey_share;
  for (int64_t s = 0; s < B; ++s) {
    const RowKind kind = RowKindOf(mix, rng.UniformDouble());
    const Window w = data.sampler->Sample(rng);  // T + 1 tokens of one document
    const std::span<const int> window =
        data.split->train.Document(w.document)
            .subspan(static_cast<size_t>(w.offset), static_cast<size_t>(T + 1));
    const auto row = tokens.begin() + s * (T + 1);
    switch (kind) {
      case RowKind::kText: std::copy(window.begin(), window.end(), row); break;
      case RowKind::kPasskey: {
        const PasskeyPieces& pieces =
            data.passkey_variants.empty()
                ? data.passkey
                : data.passkey_variants[UniformBelow(rng, data.passkey_variants.size())];
        const int64_t filler = PasskeyMaxFiller(pieces, T);  // < T + 1: the window's tail
        std::span<const int> fill = window.subspan(static_cast<size_t>(T + 1 - filler));
        std::vector<int> repeated;
        if (data.passkey_repeated_filler && rng.UniformDouble() < 0.5) {
          const int64_t most = std::max<int64_t>(16, 3 * T / 8);
          const int64_t block = std::min<int64_t>(
              16 + static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(most - 15))),
              filler);
          for (int64_t k = 0; k < filler; ++k) {
            repeated.push_back(window[static_cast<size_t>(k % block)]);
          }
          fill = repeated;
        }
        const double depth = rng.UniformDouble();
        PasskeyTrial trial = MakePasskeyTrial(pieces, fill, data.bos, T, depth, rng);
        if (data.passkey_decoys > 0) {
          AddPasskeyDecoys(trial, pieces, data.decoys, data.passkey_decoys, rng);
        }
        std::copy(trial.tokens.begin(), trial.tokens.end(), row);
        break;
      }
      case RowKind::kPeriodic: {
        const CopyRow r = MakePeriodicRow(data.alphabets, data.spans, data.bos, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kGapped: {
        const CopyRow r = MakeGappedRow(data.alphabets, data.spans, data.bos, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kTextCopy: {
        const CopyRow r = MakeTextCopyRow(window, data.spans, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kTextFar: {
        const CopyRow r = MakeTextFarRow(window, data.spans, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kTextEdge: {
        const CopyRow r = MakeTextEdgeRow(window, data.spans, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kTextPeriodic: {
        const CopyRow r = MakeTextPeriodicRow(window, data.spans, data.bos, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kTextDecoy: {
        const CopyRow r = MakeTextDecoyRow(window, data.spans, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
      case RowKind::kRandCopy: {
        const CopyRow r = MakeRandCopyRow(window, data.alphabets, data.spans, T, rng);
        std::copy(r.tokens.begin(), r.tokens.end(), row);
        break;
      }
    }
    if (data.bos_rows) *row = data.bos;  // the synthetic rows begin with it already
  }
}

namespace {
// The readout's kinds and their keys in the training log (src/core/train_log_keys.h): written by
// RunTrainingLoop, read back by LastCopyReadout.
struct ReadoutKey {
  const char* key;
  Proportion CopyReadout::*member;
};
constexpr ReadoutKey kReadoutKeys[] = {
    {train_log::kCopy, &CopyReadout::copy},
    {train_log::kCopyControl, &CopyReadout::copy_control},
    {train_log::kTextcopy, &CopyReadout::textcopy},
    {train_log::kTextcopyControl, &CopyReadout::textcopy_control},
    {train_log::kRandcopy, &CopyReadout::randcopy},
    {train_log::kRandcopyControl, &CopyReadout::randcopy_control},
    {train_log::kPasskeyDigits, &CopyReadout::passkey_digits},
    {train_log::kPasskeyKeys, &CopyReadout::passkey_keys},
};
}  // namespace

std::optional<CopyReadout> LastCopyReadout(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::istringstream in(ReadInputFile(path, "the training log (JSON lines)"));
  std::optional<CopyReadout> last;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;  // a torn line: what it held is not read
    CopyReadout r;
    bool any = false;
    for (const ReadoutKey& k : kReadoutKeys) {
      const auto v = j.find(k.key);
      const auto n = j.find(std::string(k.key) + "_n");
      if (v == j.end() || !v->is_number() || n == j.end() || !n->is_number_integer()) continue;
      Proportion& x = r.*k.member;
      x.n = n->get<int64_t>();
      x.hits = std::llround(v->get<double>() * static_cast<double>(x.n));
      any = any || x.n > 0;
    }
    if (any) last = std::move(r);
  }
  return last;
}

void TrimTrainLog(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  std::istringstream in(ReadInputFile(path, "the training log (JSON lines)"));
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                      j["step"].get<int64_t>() <= step && in.good();  // a torn last line: no '\n'
    if (keep) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  AtomicFile out(path);
  out.Write(kept);
  out.Commit();
}

TrainLoopResult RunTrainingLoop(Trainer& trainer, const TrainingData& data,
                                const TrainLoopOptions& opt,
                                const std::function<void(const TrainProgress&)>& progress) {
  STRETCH_CHECK(data.split != nullptr && data.sampler != nullptr, "training data not set");
  if (opt.log_every < 1)
    Fail("TrainLoopOptions::log_every: found {}, expected >= 1", opt.log_every);
  const BatchSource source = [&](Rng& rng, int64_t B, std::vector<int>& tokens) {
    SampleTrainingBatch(data, rng, B, tokens);
  };

  TrainLoopResult result;
  result.log_path = (std::filesystem::path(opt.out) / kTrainLogName).string();
  const int64_t first = trainer.step();
  TrimTrainLog(result.log_path, first);
  std::ofstream log(result.log_path, std::ios::app);
  if (!log) Fail("{}: cannot open the training log for appending", result.log_path);
  Timer timer;
  const std::function<double()> now = opt.clock ? opt.clock : [&] { return timer.Seconds(); };
  const double start = now();
  int64_t tokens_done = 0;
  // The ETA's clock readings: the last steps' times (evaluations apart) and the evaluations'.
  constexpr size_t kRecentSteps = 16;
  std::vector<double> recent;  // a ring of the last kRecentSteps step times
  double eval_seconds = 0;
  int64_t evals = 0;
  const auto median_recent = [&] {
    std::vector<double> sorted = recent;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(sorted.size() / 2),
                     sorted.end());
    return sorted[sorted.size() / 2];
  };
  // Time counted as a pause, not as work (a stopped process, a suspended machine): what a step
  // takes beyond kPauseFactor times the median of the steps before it (once there are 4), and
  // what an evaluation takes beyond kPauseFactor times the mean of those before it. Left out of
  // tokens/s and of the evaluations' mean time; a real change of pace is rarely 8-fold at once.
  constexpr double kPauseFactor = 8.0;
  double paused = 0;
  const auto evals_after = [&](int64_t step) {  // evaluations at steps in (step, opt.steps]
    if (opt.eval_every <= 0 || step >= opt.steps) return int64_t{0};
    return opt.steps / opt.eval_every - step / opt.eval_every + (opt.steps % opt.eval_every != 0);
  };
  while (trainer.step() < opt.steps) {
    TrainProgress p;
    const double step_begin = now();
    p.stats = trainer.Step(source);
    p.steps = opt.steps;
    const int64_t step = p.stats.step;
    tokens_done += p.stats.tokens;
    const double secs = now();
    const double step_seconds = secs - step_begin;
    if (recent.size() >= 4) paused += std::max(0.0, step_seconds - kPauseFactor * median_recent());
    p.tokens_per_s = tokens_done / std::max(secs - start - paused, 1e-9);
    if (recent.size() < kRecentSteps) {
      recent.push_back(step_seconds);
    } else {
      recent[static_cast<size_t>(step - first - 1) % kRecentSteps] = step_seconds;
    }
    nlohmann::json rec{{"step", step},
                       {"loss", p.stats.loss},
                       {"lr", p.stats.lr},
                       {"grad_norm", p.stats.grad_norm},
                       {"tokens_per_s", p.tokens_per_s}};
    if (p.stats.skipped > 0) rec["skipped_batches"] = p.stats.skipped;
    const bool eval_now = opt.eval_every > 0 && (step % opt.eval_every == 0 || step == opt.steps);
    const double eval_begin = eval_now ? now() : 0.0;
    if (eval_now) {
      p.eval = EvaluateHeldOut(trainer, data, opt.eval_windows);
      if (p.eval) {
        rec["val_loss"] = p.eval->loss;
        if (p.eval->loss_ci_known) rec["val_loss_ci"] = {p.eval->loss_lo, p.eval->loss_hi};
        rec["val_accuracy"] = p.eval->accuracy;
      }
      if (data.probe) {
        // In chunks of the training batch: no more activation memory than a step's.
        const int64_t chunk = trainer.options().batch, T = data.probe->T;
        p.copy = ReadCopy(*data.probe, [&](const std::vector<int>& tokens, int64_t B) {
          std::vector<int> out, part;
          for (int64_t b = 0; b < B; b += chunk) {
            const int64_t n = std::min(chunk, B - b);
            part.assign(tokens.begin() + b * (T + 1), tokens.begin() + (b + n) * (T + 1));
            const std::vector<int> pred = trainer.Predict(part, n);
            out.insert(out.end(), pred.begin(), pred.end());
          }
          return out;
        });
        for (const ReadoutKey& k : kReadoutKeys) {
          const Proportion& x = (*p.copy).*k.member;
          if (x.n == 0) continue;
          rec[k.key] = x.value();
          rec[std::string(k.key) + "_n"] = x.n;
          // The trials the interval counts: fewer than n where the hits came in correlated rows.
          rec[std::string(k.key) + "_n_eff"] = x.EffectiveN();
        }
      }
    }
    if (eval_now) {
      double took = now() - eval_begin;
      if (evals > 0) {
        const double bound = kPauseFactor * eval_seconds / static_cast<double>(evals);
        if (took > bound) {
          paused += took - bound;
          took = bound;
        }
      }
      eval_seconds += took;
      ++evals;
    }
    p.paused_seconds = paused;
    p.eta_seconds = static_cast<double>(opt.steps - step) * median_recent() +
                    (evals > 0 ? static_cast<double>(evals_after(step)) * eval_seconds /
                                     static_cast<double>(evals)
                               : 0.0);
    p.report = step % opt.log_every == 0 || eval_now || step == first + 1;
    if (progress) progress(p);
    log << rec.dump() << "\n";
    log.flush();
    if (!log) {
      // A full disk or a lost file system: stop here, while the last checkpoint is whole.
      Fail(
          "{}: writing step {} to the training log failed ({}); the run stops at step {}, its "
          "last checkpoint intact",
          result.log_path, step, std::strerror(errno), step);
    }
    if ((opt.save_every > 0 && step % opt.save_every == 0) || step == opt.steps) {
      result.last_saved = (std::filesystem::path(opt.out) / StepFileName(step)).string();
      SaveCheckpoint(trainer, result.last_saved, opt.extras);
    }
    // Ctrl-C or SIGTERM (src/core/stop.h): this step is done and logged; save it unless it just
    // was, then say where the run stands.
    if (const int signal = StopSignal(); signal != 0 && step < opt.steps) {
      const std::string file = (std::filesystem::path(opt.out) / StepFileName(step)).string();
      if (result.last_saved != file) {
        result.last_saved = file;
        SaveCheckpoint(trainer, file, opt.extras);
      }
      throw Stopped(signal, fmt::format("stopped by {} after step {} of {}; the run's checkpoint "
                                        "of that step is {} (--resume continues from it)",
                                        StopSignalName(signal), step, opt.steps, file));
    }
  }
  result.steps_done = trainer.step();
  return result;
}

}  // namespace stretch
