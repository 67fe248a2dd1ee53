// Position perturbation for training ("position robustness" in Su Jianlin's posts): the positions a
// training window's tokens are rotated at, instead of 0 .. T-1, so that a model trained on T
// tokens meets the relative distances of a longer context.
//
//   randomized  Randomized positional encodings (Ruoss et al. 2023, arXiv 2305.16843): the T
//               positions are a sorted sample without replacement from 0 .. max-1, so relative
//               distances up to max - 1 occur while their order is kept. (A constant offset
//               added to every position is invisible to RoPE, which sees only differences; this
//               is the random-position scheme that changes what RoPE sees.)
//   pose        PoSE (Zhu et al. 2023, arXiv 2309.10400, "positional skip-wise training"): the
//               window is cut into `chunks` pieces of random lengths at random cut points, and
//               piece c is shifted by a skip u_c, 0 = u_0 <= u_1 <= ... <= u_{chunks-1} <=
//               max - T (sorted uniform draws), so positions run 0 .. max-1 with jumps between
//               pieces and the original distances inside each.
//
// Positions are a pure function of (seed, step, sequence): a run resumed from a checkpoint draws
// the same ones, with no extra RNG state to save.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

struct PositionPerturbation {
  enum class Kind { kNone, kRandomized, kPose };
  Kind kind = Kind::kNone;
  int64_t max = 0;  // positions lie in 0 .. max-1 (>= the window length T)
  int chunks = 2;   // PoSE's pieces

  bool Active() const { return kind != Kind::kNone; }
  // The canonical spec ("none", "randomized:max=2048", "pose:max=2048,chunks=2").
  std::string Spec() const;
};

// Parses `none`, `randomized:max=M` or `pose:max=M[,chunks=N]`; throws stretch::Error naming
// `flag`, the piece and what is allowed.
PositionPerturbation ParsePerturbation(std::string_view spec, std::string_view flag);

// Positions (B x T, row-major) for training step `step` of a run seeded `seed`; for kNone,
// 0 .. T-1 in every row. Requires max >= T for the other kinds (checked by the caller's
// validation: CheckPerturbation).
std::vector<int64_t> PerturbedPositions(const PositionPerturbation& p, uint64_t seed, int64_t step,
                                        int64_t B, int64_t T);

// Throws stretch::Error when p does not fit windows of T tokens (max < T, chunks < 1 or > T).
void CheckPerturbation(const PositionPerturbation& p, int64_t T);

}  // namespace stretch
