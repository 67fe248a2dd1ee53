#include "src/train/positions.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {

std::string PositionPerturbation::Spec() const {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kRandomized: return fmt::format("randomized:max={}", max);
    case Kind::kPose: return fmt::format("pose:max={},chunks={}", max, chunks);
  }
  return "none";
}

namespace {

int64_t PositiveInt(std::string_view flag, std::string_view spec, std::string_view key,
                    std::string_view value) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < 1) {
    Fail("{} \"{}\": {}={} is not a positive integer", flag, spec, key, value);
  }
  return v;
}

}  // namespace

PositionPerturbation ParsePerturbation(std::string_view spec, std::string_view flag) {
  constexpr const char* kAllowed =
      "expected none, randomized:max=M (sorted random positions below M) or "
      "pose:max=M[,chunks=N] (PoSE: N pieces with random skips, positions below M)";
  PositionPerturbation p;
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name == "none" && colon == std::string_view::npos) return p;
  if (name == "randomized") {
    p.kind = PositionPerturbation::Kind::kRandomized;
  } else if (name == "pose") {
    p.kind = PositionPerturbation::Kind::kPose;
  } else {
    Fail("{} \"{}\": unknown perturbation '{}'; {}", flag, spec, name, kAllowed);
  }
  std::string_view rest =
      colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view piece = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = piece.find('=');
    if (eq == std::string_view::npos)
      Fail("{} \"{}\": '{}' is not key=value; {}", flag, spec, piece, kAllowed);
    const std::string_view key = piece.substr(0, eq), value = piece.substr(eq + 1);
    if (key == "max") {
      p.max = PositiveInt(flag, spec, key, value);
    } else if (key == "chunks" && p.kind == PositionPerturbation::Kind::kPose) {
      p.chunks = static_cast<int>(std::min<int64_t>(PositiveInt(flag, spec, key, value), 1 << 20));
    } else {
      Fail("{} \"{}\": unknown key '{}' for {}; {}", flag, spec, key, name, kAllowed);
    }
  }
  if (p.max == 0)
    Fail("{} \"{}\": {} needs max=M, the largest position plus one", flag, spec, name);
  return p;
}

void CheckPerturbation(const PositionPerturbation& p, int64_t T) {
  if (!p.Active()) return;
  if (p.max < T) {
    Fail(
        "position perturbation {}: max={} is below the training length {}; positions must "
        "reach at least 0 .. {}",
        p.Spec(), p.max, T, T - 1);
  }
  if (p.kind == PositionPerturbation::Kind::kPose && (p.chunks < 1 || p.chunks > T)) {
    Fail("position perturbation {}: chunks={} must lie in 1 .. {} (the training length)", p.Spec(),
         p.chunks, T);
  }
}

std::vector<int64_t> PerturbedPositions(const PositionPerturbation& p, uint64_t seed, int64_t step,
                                        int64_t B, int64_t T) {
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    int64_t* row = pos.data() + b * T;
    for (int64_t t = 0; t < T; ++t) row[t] = t;
    if (!p.Active()) continue;
    // One stream per (seed, step, sequence), mixed through Rng's splitmix64 seeding.
    Rng rng(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1)) ^
            (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(b + 1)));
    auto below = [&rng](int64_t n) {  // uniform in 0 .. n-1 (n <= 2^40: bias < 2^-24)
      return static_cast<int64_t>(rng.NextU64() % static_cast<uint64_t>(n));
    };
    if (p.kind == PositionPerturbation::Kind::kRandomized) {
      // Sorted sample of T distinct values from 0 .. max-1 (Floyd's algorithm: T draws, each
      // subset equally likely).
      std::vector<int64_t> chosen;
      chosen.reserve(static_cast<size_t>(T));
      for (int64_t j = p.max - T; j < p.max; ++j) {
        const int64_t r = below(j + 1);
        chosen.push_back(std::find(chosen.begin(), chosen.end(), r) == chosen.end() ? r : j);
      }
      std::sort(chosen.begin(), chosen.end());
      std::copy(chosen.begin(), chosen.end(), row);
    } else {
      // PoSE: chunks - 1 distinct cut points in 1 .. T-1 (fewer pieces when T is short), skips
      // sorted uniform in 0 .. max - T.
      const int n = static_cast<int>(std::min<int64_t>(p.chunks, T));
      std::vector<int64_t> cuts;
      while (static_cast<int>(cuts.size()) < n - 1) {
        const int64_t c = 1 + below(T - 1);
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      std::vector<int64_t> skips(static_cast<size_t>(n), 0);
      for (int c = 1; c < n; ++c) skips[static_cast<size_t>(c)] = below(p.max - T + 1);
      std::sort(skips.begin(), skips.end());  // skips[0] stays 0: the first piece starts at 0
      int piece = 0;
      for (int64_t t = 0; t < T; ++t) {
        while (piece < n - 1 && t >= cuts[static_cast<size_t>(piece)]) ++piece;
        row[t] = t + skips[static_cast<size_t>(piece)];
      }
    }
  }
  return pos;
}

}  // namespace stretch
