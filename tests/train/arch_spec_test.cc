// --position and --attention specs: what each layout gives per layer, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "src/core/error.h"
#include "src/train/arch_spec.h"

namespace stretch {
namespace {

TrainArch Layers(int n) {
  TrainArch a;
  a.model.n_layers = n;
  return a;
}

TEST(ArchSpec, LayoutsPerLayer) {
  TrainArch a = Layers(4);
  ApplyAttentionSpec("hwfa=64", a);
  EXPECT_EQ(LayoutText(a), "window 64 / window 64 / window 64 / full (no position)");
  ApplyAttentionSpec("hwfa2=32/2", a);
  EXPECT_EQ(LayoutText(a), "window 32 / full / window 32 / full");
  ApplyAttentionSpec("swan=16/2", a);
  EXPECT_EQ(LayoutText(a), "window 16 / full (no position) / window 16 / full (no position)");
  ApplyAttentionSpec("keynorm,window=8", a);
  EXPECT_EQ(LayoutText(a), "window 8 / window 8 / window 8 / window 8");
  EXPECT_TRUE(a.logits.key_norm);
  EXPECT_FALSE(a.logits.query_norm);
  ApplyAttentionSpec("cosine,scale=10", a);
  EXPECT_TRUE(a.logits.key_norm && a.logits.query_norm);
  EXPECT_EQ(a.logits.logit_scale, 10.0);
  EXPECT_EQ(LayoutText(a), "full / full / full / full");
}

TEST(ArchSpec, Positions) {
  TrainArch a = Layers(1);
  ApplyPositionSpec("rope:base=500000", a);
  EXPECT_EQ(a.position, TrainPosition::kRope);
  EXPECT_EQ(a.model.rope_base, 500000.0f);
  ApplyPositionSpec("kerple-power", a);
  EXPECT_EQ(a.position, TrainPosition::kKerplePower);
  EXPECT_EQ(PositionSpecOf(a), "kerple-power");
}

TEST(ArchSpec, Blocks) {
  TrainArch a = Layers(2);
  a.model.dim = 64;
  ApplyBlockSpec("gau", a);
  EXPECT_EQ(a.block, TrainBlock::kGau);
  EXPECT_EQ(a.gau_key_dim, 64);  // min(128, dim)
  EXPECT_EQ(BlockSpecOf(a), "gau:key=64");
  a.model.dim = 512;
  ApplyBlockSpec("gau", a);
  EXPECT_EQ(a.gau_key_dim, 128);  // the paper's s
  ApplyBlockSpec("gau:key=32", a);
  EXPECT_EQ(a.gau_key_dim, 32);
  ApplyBlockSpec("llama", a);
  EXPECT_EQ(a.block, TrainBlock::kLlama);
  EXPECT_EQ(BlockSpecOf(a), "llama");
}

void ExpectError(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ArchSpec, Errors) {
  TrainArch a = Layers(2);
  ExpectError([&] { ApplyPositionSpec("alibi:slope=2", a); }, "takes no parameters");
  ExpectError([&] { ApplyPositionSpec("rope:base=-1", a); }, "not a positive number");
  ExpectError([&] { ApplyAttentionSpec("hwfa2=32", a); }, "wants W/K");
  ExpectError([&] { ApplyAttentionSpec("keynorm,,full", a); }, "an empty piece");
  ExpectError([&] { ApplyAttentionSpec("flash", a); }, "unknown piece \"flash\"");
  ExpectError([&] { ApplyBlockSpec("mamba", a); }, "unknown block \"mamba\"");
  ExpectError([&] { ApplyBlockSpec("gau:s=64", a); }, "unknown key in \"s=64\"");
  ExpectError([&] { ApplyBlockSpec("gau:key=0", a); }, "not a positive integer");
  ExpectError([&] { ApplyBlockSpec("llama:key=64", a); }, "llama takes no parameters");
}

TEST(ArchSpec, LaterVariants) {
  TrainArch a = Layers(2);
  a.model.seq_len = 128;
  ApplyPositionSpec("xpos:gamma=256,fraction=0.5", a);
  EXPECT_EQ(a.position, TrainPosition::kXpos);
  EXPECT_EQ(a.xpos_gamma, 256.0);
  EXPECT_EQ(a.rope_fraction, 0.5);
  EXPECT_EQ(PositionSpecOf(a), "xpos:base=10000,gamma=256,fraction=0.5");
  ApplyPositionSpec("sandwich:dim=64,lambda=0.5", a);
  EXPECT_EQ(a.position, TrainPosition::kSandwich);
  EXPECT_EQ(a.sandwich_dim, 64);
  EXPECT_EQ(PositionSpecOf(a), "sandwich:dim=64,lambda=0.5");
  ApplyAttentionSpec("cosine,logn,ssmax", a);
  EXPECT_TRUE(a.logits.query_norm && a.logits.key_norm && a.logits.logn && a.logits.ssmax);
  EXPECT_NEAR(a.logits.logit_scale, 4.0 * std::log(64.0), 1e-12);  // 4 ln(L / 2)
  ApplyAttentionSpec("cosine=per-position", a);
  EXPECT_TRUE(a.logits.position_lambda);
  EXPECT_EQ(a.logits.logit_scale, 4.0);
  ApplyAttentionSpec("scale=10,cosine", a);
  EXPECT_EQ(a.logits.logit_scale, 10.0);  // a given scale wins, in any order
  ExpectError([&] { ApplyPositionSpec("rope:fraction=1.5", a); }, "0 < P <= 1");
  ExpectError([&] { ApplyPositionSpec("rope:gamma=3", a); }, "unknown key in \"gamma=3\"");
  ExpectError([&] { ApplyPositionSpec("sandwich:dim=7", a); }, "even");
}

}  // namespace
}  // namespace stretch
