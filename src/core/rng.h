// A small, fast, reproducible random number generator (xoshiro256**, Blackman & Vigna 2018,
// seeded through splitmix64). Same seed, same stream, on every machine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace stretch {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0x5eed) { Seed(seed); }

  void Seed(uint64_t seed) {
    for (auto& s : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }

  uint64_t NextU64() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 24 random bits so every value is exactly representable as a float.
  float Uniform() { return static_cast<float>(NextU64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform double in [0, 1) with 53 random bits.
  double UniformDouble() {
    return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0);
  }
  // Standard normal (Box-Muller).
  double Normal();

  // The whole state, for checkpoints: SetState(State()) continues the same stream.
  std::array<uint64_t, 4> State() const { return {state_[0], state_[1], state_[2], state_[3]}; }
  void SetState(const std::array<uint64_t, 4>& s) {
    for (int i = 0; i < 4; ++i) state_[i] = s[static_cast<std::size_t>(i)];
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

// A uniform integer in [0, n), n >= 1, without modulo bias: draws below 2^64 mod n would make the
// low remainders more likely, so they are rejected; the accepted range [threshold, 2^64) holds a
// whole number of copies of [0, n).
inline uint64_t UniformBelow(Rng& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = rng.NextU64();
    if (r >= threshold) return r % n;
  }
}

}  // namespace stretch
