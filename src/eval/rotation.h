// The rotation view of a position method at one context length (`stretch inspect --method`): per
// RoPE frequency pair, how far the method turns it at context N compared with how far the model
// turned it in training. Notation of src/position/method.h: L the training length, N the context
// (the call's fed length L'), d the rotary dim, theta_t = base^(-2t/d) the model's angle per
// position for pair t, theta'_t the method's.
//
// A pair that completed a turn within the training length has met (nearly) every angle of the
// circle in training; a pair that did not (the slow, low-frequency pairs: L theta_t < 2 pi) has
// met only the arc [0, (L-1) theta_t]. At context N the method turns pair t through angles up to
// R theta'_t, R the largest relative position the method's map gives at N (N - 1 for plain RoPE;
// min(N - 1, w) for a map clamped at w; ...). The pair goes "beyond the trained arc" when it
// never completed a turn in training and now turns at least one trained position further than it
// ever did: R theta'_t >= L theta_t. (An angle below L theta_t is within one step theta_t of the
// trained ones, as position interpolation's fractional positions are: PI at s = N/L is not
// "beyond".)
// Those are the angles the model never saw, the usual explanation of why plain RoPE fails past L
// and of what interpolation (PI, NTK, YaRN, ...) fixes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/position/plan.h"

namespace stretch {

struct RotationPair {
  int t = 0;
  double theta = 0.0;           // theta_t, the model's (its own base and interpolation)
  double theta_method = 0.0;    // theta'_t, the method's at the call (dynamic: the last query's)
  double ratio = 0.0;           // theta'_t / theta_t
  double period = 0.0;          // 2 pi / theta'_t, in tokens
  double turns_trained = 0.0;   // L theta_t / 2 pi
  double turns_method = 0.0;    // R theta'_t / 2 pi
  bool beyond_trained = false;  // turns_trained < 1 and R theta'_t >= L theta_t
};

struct RotationView {
  int64_t train_len = 0;            // L
  int64_t ctx = 0;                  // N
  double max_rel_method = 0.0;      // R: the largest relative position the method gives at N
  double attention_factor = 1.0;    // multiplies q and k (the last query's when dynamic)
  double logit_scale_last = 1.0;    // AttentionPlan::LogitScale(N - 1)
  std::vector<RotationPair> pairs;  // d/2 rows
  int BeyondCount() const;
};

// The view of `plan` (resolved for fed_len = N) for a model whose own geometry is `model_geo`
// (the base before any method override; plan.geo carries the method's base).
RotationView MakeRotationView(const RopeGeometry& model_geo, const AttentionPlan& plan);

// The largest relative position (AttentionPlan::map.RelPos over the pairs the mask lets through)
// that a query at positions < N sees.
double MaxRelativePosition(const AttentionPlan& plan, int64_t N);

// One line each, for reports: the relative map and the mask with their parameters, in words.
std::string RelMapText(const AttentionPlan& plan);
std::string MaskText(const AttentionPlan& plan);

// Which LongRoPE factor list is in force and how it was chosen ("" for other methods): once per
// call from N (`longrope`), or per query position with every key re-rotated (`dynamic-longrope`).
std::string LongRopeSetText(const AttentionPlan& plan);

// Where YaRN (static or dynamic) is outside the regime it was made for: its ramp is meant to leave
// alone the pairs that turn at least beta_fast times within the original length, and a model
// trained short with narrow heads has none (L = 128, rotary dim 32, base 10,000: the fastest
// pair turns 20.4 times; trained at 4,096 with rotary dim 128, pairs 0-20 turn 32 times or more).
// Then every pair but the fastest (kept because the ramp's start is clamped at 0) is slowed, and
// a sentence says so, naming the fastest pair's turns and how many pairs run below their
// frequency; "" otherwise (at the training length, where YaRN changes nothing, too), and for
// every other method.
std::string YarnOutsideItsRegimeNote(const RopeGeometry& model_geo, const AttentionPlan& plan);

// The view as a table with a header explaining every column.
std::string RotationViewText(const RotationView& view);

}  // namespace stretch
