// RoPE frequencies (Su et al. 2021, "RoFormer", arXiv 2104.09864, eq. 15):
//   theta_t = base^(-2t/d),  t = 0 .. d/2 - 1,  d the rotary dimension (the head dim here).
// A vector's pair t at position m is turned by the angle m * theta_t. The scaled schemes (PI, NTK,
// YaRN, ...) change these angles per method (method.h: ComputeFrequencies, defined in rope.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace stretch {

// theta_t for t = 0 .. rotary_dim/2 - 1, computed in double.
std::vector<double> RopeThetas(double base, int rotary_dim);
// The angles of a model trained with RoPE on D-wide heads: theta_t / interpolation for the first
// `rotated_pairs` pairs (position interpolation, Chen et al. 2023, divides every position by its
// factor F), 0 for the pairs after them (p-RoPE leaves those unrotated).
std::vector<double> TrainedRopeThetas(double base, int D, int rotated_pairs, double interpolation);

// XPOS's per-pair decay base on D-wide heads (Sun et al. 2022, arXiv 2212.10554; torchscale
// xpos_relative_position.py): zeta_t = (2t + 0.4 D) / (1.4 D); a score of pair t fades as
// zeta_t^((i - j) / gamma).
std::vector<double> XposZetas(int D);

// cos and sin of pos * theta_t for positions pos0 .. pos0 + n - 1: two (n, d/2) tables, rounded
// to float from double angles (llama2.c computes the angle in float; double keeps the error at
// float rounding even at position 10^6, where a float angle would already be off by ~0.03 rad).
struct RopeTable {
  int64_t pos0 = 0;
  int64_t n = 0;
  int pairs = 0;
  std::vector<float> cos;  // (n, pairs)
  std::vector<float> sin;  // (n, pairs)
};
RopeTable MakeRopeTable(const std::vector<double>& thetas, int64_t pos0, int64_t n);
// The same table for arbitrary positions: row r holds cos/sin of positions[r] * theta_t.
// pos0 is recorded as the table's first position label only.
RopeTable MakeRopeTableAt(const std::vector<double>& thetas, int64_t pos0,
                          const std::vector<double>& positions);

}  // namespace stretch
