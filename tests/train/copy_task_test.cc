// The whole training stack at work (STYLE.md, gemma.cpp's habit): a tiny model must learn a task
// that needs long-range copying within a stated number of steps. Each sequence is n distinct
// random tokens followed by the same n tokens again; only the second copy can be predicted, and
// by finding the earlier occurrence of the current token and copying its successor (an
// induction head), n positions back; n is the same in every sequence, so attending to a fixed
// offset (RoPE alone, no matching of content) does it too: the lab's copies, at varying
// distances, need the matching (docs/training.md, fifth round). Required: > 95% next-token accuracy on the second half,
// measured on fresh sequences the model never saw.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/train/trainer.h"
#include "tests/testing/sanitizer.h"

namespace stretch {
namespace {

constexpr int kVocab = 32;
constexpr int kHalf = 16;              // n
constexpr int64_t kT = 2 * kHalf - 1;  // positions fed (2n tokens = T + 1)

void CopyBatch(Rng& rng, int64_t B, std::vector<int>& tokens) {
  tokens.resize(static_cast<size_t>(B * (kT + 1)));
  std::vector<int> pool(kVocab);
  for (int64_t b = 0; b < B; ++b) {
    std::iota(pool.begin(), pool.end(), 0);
    int* seq = tokens.data() + b * (kT + 1);
    for (int i = 0; i < kHalf; ++i) {  // partial Fisher-Yates: n distinct tokens
      const int pick = i + static_cast<int>(rng.NextU64() % static_cast<uint64_t>(kVocab - i));
      std::swap(pool[i], pool[pick]);
      seq[i] = seq[i + kHalf] = pool[i];
    }
  }
}

TrainArch CopyArch(LayerPosition position, bool key_norm) {
  TrainArch a;
  a.model.dim = 64;
  a.model.hidden_dim = 128;
  a.model.n_layers = 2;
  a.model.n_heads = 4;
  a.model.n_kv_heads = 4;
  a.model.vocab_size = kVocab;
  a.model.seq_len = static_cast<int>(kT);
  a.model.shared_classifier = false;
  a.model.attention.position = position;
  a.model.attention.key_norm = key_norm;
  // KeyNorm: unit keys make q.k at most |q|; a larger scale lets attention sharpen early.
  if (key_norm) a.model.attention.logit_scale = 1.0;
  a.model.attention.layers = {LayerLayout{}, LayerLayout{}};
  return a;
}

// Trains until the held-out accuracy on the second half passes 95%, checking every 50 steps;
// returns the step it passed at (or -1 after max_steps).
int64_t StepsToLearnCopying(const TrainArch& arch, int64_t max_steps) {
  TrainerOptions opt;
  opt.batch = 16;
  opt.schedule = LrSchedule{3e-3, 3e-4, 50, max_steps};
  opt.adamw.weight_decay = 0.0;
  opt.seed = 7;
  Trainer trainer(arch, opt);
  Rng eval_rng(12345);  // a separate stream: sequences the training never draws
  std::vector<int> eval_tokens;
  CopyBatch(eval_rng, 64, eval_tokens);
  for (int64_t s = 1; s <= max_steps; ++s) {
    trainer.Step(CopyBatch);
    if (s % 50 != 0) continue;
    // Position t predicts token t + 1: the second copy's predictable tokens r_2 .. r_n are the
    // targets of positions n .. 2n - 2.
    const EvalStats ev = trainer.Evaluate(eval_tokens, 64, kHalf);
    if (ev.accuracy > 0.95) {
      std::printf("[ copy     ] passed 95%% at step %lld (accuracy %.3f, loss %.3f)\n",
                  static_cast<long long>(s), ev.accuracy, ev.loss);
      return s;
    }
  }
  return -1;
}

// A stated budget: 1,500 steps of 16 sequences (each variant passes well before it here; the
// printed step is the evidence).
constexpr int64_t kMaxSteps = 1500;

TEST(CopyTask, RopeLearnsToCopy) {
  STRETCH_SKIP_UNDER_SANITIZER("1,500 training steps");
  EXPECT_GT(StepsToLearnCopying(CopyArch(LayerPosition::kRope, false), kMaxSteps), 0);
}
TEST(CopyTask, AlibiLearnsToCopy) {
  STRETCH_SKIP_UNDER_SANITIZER("1,500 training steps");
  EXPECT_GT(StepsToLearnCopying(CopyArch(LayerPosition::kAlibi, false), kMaxSteps), 0);
}
TEST(CopyTask, KeyNormLearnsToCopy) {
  STRETCH_SKIP_UNDER_SANITIZER("1,500 training steps");
  EXPECT_GT(StepsToLearnCopying(CopyArch(LayerPosition::kRope, true), kMaxSteps), 0);
}

// The GAU block (src/train/gau_layer.h): 2 post-norm single-head layers of width 64, key width
// S = 64 (min(128, dim)), expansion E = 2 dim = 128, RoPE on Q and K, the trainer's GAU
// initialization. Passes at step 850 (accuracy 0.998 on the held-out second halves; the same
// step in the Release and the sanitizer builds), within the same 1,500-step budget. With
// GAU-alpha's gamma = 1 start instead (Q = K at step 0) it did not pass within the budget
// (~2,200 steps with a 3,000-step schedule).
TrainArch GauCopyArch() {
  TrainArch a = CopyArch(LayerPosition::kRope, false);
  a.model.hidden_dim = 2 * a.model.dim;
  a.model.SetGau(64);
  return a;
}
TEST(CopyTask, GauLearnsToCopy) {
  STRETCH_SKIP_UNDER_SANITIZER("1,500 training steps");
  EXPECT_GT(StepsToLearnCopying(GauCopyArch(), kMaxSteps), 0);
}

// Not vacuous: the second half is unpredictable without copying, so an untrained model (and any
// model that does not copy) sits near chance, 1/(V - ...) ~ 3-7%.
TEST(CopyTask, UntrainedModelIsNearChance) {
  TrainerOptions opt;
  opt.seed = 7;
  Rng eval_rng(12345);
  std::vector<int> eval_tokens;
  CopyBatch(eval_rng, 64, eval_tokens);
  for (const TrainArch& arch : {CopyArch(LayerPosition::kRope, false), GauCopyArch()}) {
    Trainer trainer(arch, opt);
    EXPECT_LT(trainer.Evaluate(eval_tokens, 64, kHalf).accuracy, 0.2);
  }
}

}  // namespace
}  // namespace stretch
