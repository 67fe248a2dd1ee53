// One training run's state and its step: the float model (tiled attention kernel), its parameters
// and gradients, AdamW, and the random stream the batches are drawn from. The loop around it
// (data, progress, validation, checkpoints) is the caller's: `stretch train`, or a test.
//
// A step, with A micro-batches of B sequences each (src/train/optim.h):
//   grads = 0;  for each micro-batch: grads += d (loss / A) / d params
//   clip by global norm;  AdamW at the schedule's learning rate;
//   KERPLE's parameters projected back into their allowed range (a, b >= 0.01; power b <= 2,
//   as the KERPLE authors clamp them in their forward).
// Deterministic: the same options, seed and batches give the same bits on any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/train/optim.h"
#include "src/train/positions.h"
#include "src/train/transformer_train.h"

namespace stretch {

struct TrainerOptions {
  int64_t batch = 8;    // B: sequences per micro-batch
  int accumulate = 1;   // A: micro-batches per optimizer step
  LrSchedule schedule;  // learning rate per step
  AdamWConfig adamw;
  double clip = 1.0;  // max global gradient norm; 0: no clipping
  uint64_t seed = 1;  // parameters' initialization and the batch stream
  // Training windows' RoPE positions (src/train/positions.h): randomized or PoSE; a pure function
  // of (seed, micro-batch), so a resumed run draws the same. Evaluation uses the true positions.
  PositionPerturbation perturb;
  // Batches whose loss or gradient is not finite that one step may pass over, drawing the next
  // batch instead (nothing of them is applied), before it stops the run with the tensors named.
  // 0: the first one stops it.
  int skip_nonfinite = 0;
};

// Fills tokens with B sequences of T + 1 ids (inputs and next-token targets), drawing only from
// rng (so that restoring rng's state replays the same batches).
using BatchSource = std::function<void(Rng& rng, int64_t B, std::vector<int>& tokens)>;

struct StepStats {
  int64_t step = 0;      // optimizer steps done, this one included
  double loss = 0.0;     // mean over the step's micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0.0;
  int64_t tokens = 0;  // target tokens in the step
  // Batches passed over before this step for a non-finite loss or gradient
  // (TrainerOptions::skip_nonfinite), and what the last of them held.
  int skipped = 0;
  std::string skipped_why;
};

struct EvalStats {
  double loss = 0.0;      // mean over scored targets
  double accuracy = 0.0;  // argmax == target
  int64_t scored = 0;
  // EvaluateHeldOut only: the loss's 95% interval over the windows (HeldOutLossInterval), when
  // there were 2 windows or more.
  bool loss_ci_known = false;
  double loss_lo = 0.0, loss_hi = 0.0;
};

// GPT-2's initialization: N(0, 0.02) for every matrix, with the two projections back into the
// residual stream (wo, w2) scaled by 1/sqrt(2 n_layers); norms' gains 1; KERPLE's a ~ U(0, 2),
// b ~ U(0, 1) (U(0, 2) for the power kernel), as the KERPLE authors' code initializes them.
// GAU layers: GAU-alpha's N(0, n_layers^(-2/3) / fan_in) for their matrices, gamma ~ N(0, 0.02^2)
// and beta 0 as in the paper's code (trainer.cc says why not GAU-alpha's gamma = 1); the
// embedding and classifier as above.
void InitParams(const TrainArch& arch, ModelWeights& p, Rng& rng);

// Throws stretch::Error naming the first option out of its range: batch and accumulate >= 1,
// clip >= 0, skip_nonfinite >= 0, the schedule (ValidateLrSchedule) and AdamW's betas, eps and
// weight decay (ValidateAdamWConfig). The Trainer checks its options with it before it allocates
// anything; a reader of stored options (a checkpoint's stretch.train) checks them with it too.
void ValidateTrainerOptions(const TrainerOptions& options);

class Trainer {
 public:
  Trainer(TrainArch arch, TrainerOptions options);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepStats Step(const BatchSource& next);
  // Loss and accuracy on B sequences of T + 1 tokens, counting only targets at positions
  // >= from_position (0: all).
  EvalStats Evaluate(const std::vector<int>& tokens, int64_t B, int64_t from_position = 0);
  // The argmax next token at every position of B sequences of T + 1 tokens: (B, T) ids, entry
  // (b, t) the prediction for tokens[b (T + 1) + t + 1] (a TokenPredictor, src/train/copy_data.h).
  std::vector<int> Predict(const std::vector<int>& tokens, int64_t B);

  const TrainArch& arch() const { return model_.arch(); }
  const TrainerOptions& options() const { return options_; }
  ModelWeights& params() { return params_; }
  const ParamRegistry& registry() const { return registry_; }
  AdamW& optimizer() { return adam_; }
  Rng& data_rng() { return data_rng_; }
  int64_t step() const { return adam_.step(); }

 private:
  TrainTransformer<float, KernelAttention> model_;
  TrainerOptions options_;
  ModelWeights params_, grads_;
  ParamRegistry registry_;
  AdamW adam_;
  Rng data_rng_;
  TrainActs<float> acts_;
  std::vector<int> tokens_;
};

}  // namespace stretch
