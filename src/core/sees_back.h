// How far back a model still copies: the one rule that `stretch score --protocol far-copy`,
// `stretch tune` and the lab's report (src/report/report_tables.cc SeesBackOf) read "sees back N
// tokens" by, from far-copy accuracies at several distances (src/eval/retrieval.h measures them).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace stretch {

struct CopyAtDistance {
  int64_t distance = 0;
  double accuracy = 0.0;
  bool above_control = true;  // copy - control has its 95% interval above 0
};

// "Sees back N tokens": the reference is the measured distance closest to train_len from below
// (train_len itself when measured); walking up from it through the measured distances, the last
// one before the first that is not above its control or whose accuracy falls more than
// `tolerance` below the reference's (higher is fine). 0 ("none") when the reference itself is not
// above its control; nullopt when no distance <= train_len is measured. Points may come in any
// order.
std::optional<int64_t> SeesBackDistance(std::span<const CopyAtDistance> points, int64_t train_len,
                                        double tolerance = 0.10);

// The reference distance of SeesBackDistance: the measured distance closest to train_len from
// below; 0 when none is measured.
int64_t SeesBackReference(std::span<const CopyAtDistance> points, int64_t train_len);

// "Sees back" is told only where the copy is strong enough somewhere to follow: copy - control
// of at least this much at one measured distance or more (the lab's copy gate asks as much at L).
// A model or method that never copies stays "within 10 points" of its chance level everywhere.
inline constexpr double kSeesBackMinGain = 0.2;

}  // namespace stretch
