#include "src/model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace stretch {
namespace {

TEST(Sampler, TemperatureZeroIsArgmaxWithLowestIdOnTies) {
  Sampler s({0.0f, 1.0f, 1});
  std::vector<float> logits = {0.1f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits.data(), 4), 1);
}

// Sampling frequencies follow softmax(logits / T). With n = 200000 draws, each frequency has a
// standard deviation <= sqrt(0.25 / n) = 0.0011; 5 sigma = 0.0056.
TEST(Sampler, FrequenciesFollowTheTemperedSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 2.0f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    Sampler s({temperature, 1.0f, 7});
    std::vector<int> counts(4, 0);
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      std::vector<float> l = logits;
      counts[static_cast<size_t>(s.Sample(l.data(), 4))]++;
    }
    double z = 0;
    for (float x : logits) z += std::exp(x / temperature);
    for (int v = 0; v < 4; ++v) {
      EXPECT_NEAR(static_cast<double>(counts[v]) / n, std::exp(logits[v] / temperature) / z, 0.0056)
          << "T=" << temperature << " token " << v;
    }
  }
}

// Top-p keeps the smallest set of most likely tokens whose mass reaches p, renormalized.
// Probabilities here (T = 1): 0.6439, 0.2369, 0.0871, 0.0321. p = 0.8 keeps {3, 0}: 0.731 / 0.269.
TEST(Sampler, TopPSamplesOnlyFromTheNucleus) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 2.0f};
  Sampler s({1.0f, 0.8f, 9});
  std::vector<int> counts(4, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    counts[static_cast<size_t>(s.Sample(l.data(), 4))]++;
  }
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
  const double p3 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(static_cast<double>(counts[3]) / n, p3, 0.008);  // 5 sigma of sqrt(0.25/n)
}

// Banned tokens (generate --ignore-eos bans every end-of-generation token, as llama.cpp does) are
// never chosen: greedy takes the best of the rest, sampling never draws one, even where they
// hold almost all the mass.
TEST(Sampler, BannedTokensAreNeverChosen) {
  const std::vector<float> logits = {0.0f, 9.0f, 8.0f, 0.5f};
  SamplerOptions greedy;
  greedy.banned = {1, 2};
  std::vector<float> l = logits;
  EXPECT_EQ(Sampler(greedy).Sample(l.data(), 4), 3);
  l = logits;
  EXPECT_EQ(Sampler(SamplerOptions{}).Sample(l.data(), 4), 1) << "not banned: the argmax";
  greedy.banned = {1};
  l = logits;
  EXPECT_EQ(Sampler(greedy).Sample(l.data(), 4), 2) << "only the one banned";
  greedy.banned = {0, 0, 1, 2};  // 3 distinct of 4: banned, duplicates counted once
  l = logits;
  EXPECT_EQ(Sampler(greedy).Sample(l.data(), 4), 3);
  greedy.banned = {3, 0, 2, 1, 1, -1, 7};
  l = logits;
  EXPECT_EQ(Sampler(greedy).Sample(l.data(), 4), 1) << "all banned: none is";
  SamplerOptions sampled{1.0f, 1.0f, 5};
  sampled.banned = {1, 2};
  Sampler s(sampled);
  for (int i = 0; i < 2000; ++i) {
    l = logits;
    const int t = s.Sample(l.data(), 4);
    EXPECT_TRUE(t == 0 || t == 3) << t;
  }
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f};
  Sampler a({1.0f, 0.9f, 123}), b({1.0f, 0.9f, 123});
  for (int i = 0; i < 100; ++i) {
    std::vector<float> la = logits, lb = logits;
    EXPECT_EQ(a.Sample(la.data(), 5), b.Sample(lb.data(), 5));
  }
}

}  // namespace
}  // namespace stretch
