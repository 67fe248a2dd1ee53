// --position and --attention specs: what each layout gives per layer, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
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
  EXPECT_TRUE(a.model.attention.key_norm);
  EXPECT_FALSE(a.model.attention.query_norm);
  ApplyAttentionSpec("cosine,scale=10", a);
  EXPECT_TRUE(a.model.attention.key_norm && a.model.attention.query_norm);
  EXPECT_EQ(a.model.attention.logit_scale, 10.0);
  EXPECT_EQ(LayoutText(a), "full / full / full / full");
}

// The layouts of current models and the per-layer list (layers are counted from 0; Gemma 3's and
// Llama 4's global layers are the K-th, 2K-th, ...).
TEST(ArchSpec, ModernLayoutsPerLayer) {
  TrainArch a = Layers(6);
  ApplyAttentionSpec("gemma3=64/3", a);
  EXPECT_EQ(LayoutText(a),
            "window 64 base 10000 pi 1 / window 64 base 10000 pi 1 / full / "
            "window 64 base 10000 pi 1 / window 64 base 10000 pi 1 / full");
  ApplyAttentionSpec("gemma3=32/2,local-base=500", a);
  EXPECT_EQ(a.model.attention.layers[0].rope_base, 500.0);
  EXPECT_EQ(a.model.attention.layers[1], LayerLayout{});
  ApplyAttentionSpec("llama4=128/4", a);
  EXPECT_EQ(LayoutText(a),
            "chunks of 128 / chunks of 128 / chunks of 128 / full (no position) (temperature) / "
            "chunks of 128 / chunks of 128");
  EXPECT_EQ(a.model.attention.temperature_floor, 128.0);  // Llama 4: floor scale = chunk size
  EXPECT_EQ(a.model.attention.temperature_scale, 0.1);
  ApplyAttentionSpec("llama4=128/2,temperature=64/0.25", a);
  EXPECT_EQ(a.model.attention.temperature_floor, 64.0);
  EXPECT_EQ(a.model.attention.temperature_scale, 0.25);
  ApplyAttentionSpec("chunk=16", a);
  EXPECT_EQ(a.model.attention.layers[5], (LayerLayout{.chunk = 16}));
  EXPECT_EQ(a.model.attention.temperature_floor, 0.0);  // no tuned layer left
  // The list repeats over the layers; N* repeats an entry.
  ApplyAttentionSpec("layers=2*window:8+base:100/nope+temp/full+pi:4,temperature=10/0.5", a);
  EXPECT_EQ(LayoutText(a),
            "window 8 base 100 / window 8 base 100 / full (no position) (temperature) / "
            "full pi 4 / window 8 base 100 / window 8 base 100");
  EXPECT_EQ(a.model.attention.temperature_floor, 10.0);
  ApplyAttentionSpec("keynorm,layers=chunk:4/rope+full", a);
  EXPECT_TRUE(a.model.attention.key_norm);
  EXPECT_EQ(LayoutText(a), "chunks of 4 / full / chunks of 4 / full / chunks of 4 / full");
}

TEST(ArchSpec, Positions) {
  TrainArch a = Layers(1);
  ApplyPositionSpec("rope:base=500000", a);
  EXPECT_EQ(a.model.attention.position, LayerPosition::kRope);
  EXPECT_EQ(a.model.rope_base, 500000.0f);
  ApplyPositionSpec("kerple-power", a);
  EXPECT_EQ(a.model.attention.position, LayerPosition::kKerplePower);
  EXPECT_EQ(PositionSpecOf(a), "kerple-power");
}

TEST(ArchSpec, Blocks) {
  TrainArch a = Layers(2);
  a.model.dim = 64;
  ApplyBlockSpec("gau", a);
  EXPECT_EQ(a.model.block, ModelBlock::kGau);
  EXPECT_EQ(a.model.key_dim, 64);  // min(128, dim)
  EXPECT_EQ(BlockSpecOf(a), "gau:key=64");
  a.model.dim = 512;
  ApplyBlockSpec("gau", a);
  EXPECT_EQ(a.model.key_dim, 128);  // the paper's s
  ApplyBlockSpec("gau:key=32", a);
  EXPECT_EQ(a.model.key_dim, 32);
  ApplyBlockSpec("llama", a);
  EXPECT_EQ(a.model.block, ModelBlock::kLlama);
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
  // A base <= 1 once reached the first training step and aborted there (RopeThetas' check; the
  // fuzz target arch_train found it: fuzz/regressions/arch_train/rope-base-below-one).
  ExpectError([&] { ApplyPositionSpec("rope:base=0.526", a); }, "base=0.526 (allowed: 1 < B <=");
  ExpectError([&] { ApplyPositionSpec("xpos:base=1", a); }, "base=1 (allowed: 1 < B <=");
  ExpectError([&] { ApplyPositionSpec("rope:base=1e39", a); }, "base=1e39 (allowed: 1 < B <=");
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
  EXPECT_EQ(a.model.attention.position, LayerPosition::kRope);  // XPOS: RoPE with a decay
  EXPECT_EQ(a.model.attention.xpos_scale_base, 256.0);
  EXPECT_EQ(a.model.attention.rope_fraction, 0.5);
  EXPECT_EQ(PositionSpecOf(a), "xpos:base=10000,gamma=256,fraction=0.5");
  ApplyPositionSpec("sandwich:dim=64,lambda=0.5", a);
  EXPECT_EQ(a.model.attention.position, LayerPosition::kSandwich);
  EXPECT_EQ(a.model.attention.sandwich_dim, 64);
  EXPECT_EQ(PositionSpecOf(a), "sandwich:dim=64,lambda=0.5");
  ApplyAttentionSpec("cosine,logn,ssmax", a);
  EXPECT_TRUE(a.model.attention.query_norm && a.model.attention.key_norm &&
              a.model.attention.log_length_scale && a.model.attention.ssmax);
  EXPECT_NEAR(a.model.attention.logit_scale, 4.0 * std::log(64.0), 1e-12);  // 4 ln(L / 2)
  ApplyAttentionSpec("cosine=per-position", a);
  EXPECT_TRUE(a.model.attention.position_log_scale);
  EXPECT_EQ(a.model.attention.logit_scale, 4.0);
  ApplyAttentionSpec("scale=10,cosine", a);
  EXPECT_EQ(a.model.attention.logit_scale, 10.0);  // a given scale wins, in any order
  ExpectError([&] { ApplyPositionSpec("rope:fraction=1.5", a); }, "0 < P <= 1");
  ExpectError([&] { ApplyPositionSpec("rope:gamma=3", a); }, "unknown key in \"gamma=3\"");
  ExpectError([&] { ApplyPositionSpec("sandwich:dim=7", a); }, "even");
}

// rope:pi=F and rope:ntk=F (the fine-tuning initialisations of Su Jianlin's posts): PI is the model's own
// interpolation, NTK exactly a new base, resolved at the head dim; both print back to a spec that
// parses to the same architecture.
TEST(ArchSpec, PositionInterpolationAndNtk) {
  TrainArch a = Layers(2);
  a.model.dim = 64;
  a.model.n_heads = 4;  // D = 16
  ApplyPositionSpec("rope:pi=4", a);
  EXPECT_EQ(a.model.attention.position, LayerPosition::kRope);
  EXPECT_EQ(a.model.rope_interpolation, 4.0f);
  EXPECT_EQ(a.model.rope_base, 10000.0f);
  EXPECT_EQ(PositionSpecOf(a), "rope:base=10000,pi=4");

  ApplyPositionSpec("rope:ntk=4,base=500", a);  // key order does not matter
  EXPECT_EQ(a.model.rope_interpolation, 1.0f);  // the spec replaces the scheme
  EXPECT_EQ(a.rope_ntk, 4.0);
  EXPECT_EQ(a.rope_ntk_base, 500.0f);
  // HF _compute_ntk_parameters: base * factor^(dim / (dim - 2)), dim 16: 500 * 4^(16/14).
  EXPECT_EQ(a.model.rope_base, static_cast<float>(500.0 * std::pow(4.0, 16.0 / 14.0)));
  EXPECT_NEAR(a.model.rope_base, 2438.03, 0.01);
  EXPECT_EQ(PositionSpecOf(a), "rope:base=500,ntk=4");
  FinalizeArch(a);  // idempotent
  EXPECT_EQ(a.model.rope_base, static_cast<float>(500.0 * std::pow(4.0, 16.0 / 14.0)));
  TrainArch b = Layers(2);
  b.model.dim = 64;
  b.model.n_heads = 4;
  ApplyPositionSpec(PositionSpecOf(a), b);
  EXPECT_EQ(b.model.rope_base, a.model.rope_base);
  EXPECT_EQ(PositionSpecOf(b), PositionSpecOf(a));

  // A spec without base= keeps the base there is (for --init: the checkpoint's, NTK included).
  ApplyPositionSpec("rope:pi=2", a);
  EXPECT_EQ(a.rope_ntk, 1.0);
  EXPECT_EQ(a.model.rope_base, static_cast<float>(500.0 * std::pow(4.0, 16.0 / 14.0)));
  EXPECT_EQ(a.model.rope_interpolation, 2.0f);

  // With p-RoPE and on XPOS; D is the GAU's key width on a GAU block.
  ApplyPositionSpec("xpos:gamma=64,fraction=0.5,ntk=2,base=10000", a);
  EXPECT_EQ(a.model.attention.position, LayerPosition::kRope);
  EXPECT_EQ(a.model.attention.xpos_scale_base, 64.0);
  EXPECT_EQ(a.model.attention.rope_fraction, 0.5);
  EXPECT_EQ(PositionSpecOf(a), "xpos:base=10000,gamma=64,fraction=0.5,ntk=2");
  TrainArch g = Layers(2);
  g.model.dim = 64;
  ApplyBlockSpec("gau:key=8", g);
  ApplyPositionSpec("rope:ntk=2", g);
  EXPECT_EQ(g.model.rope_base, static_cast<float>(10000.0 * std::pow(2.0, 8.0 / 6.0)));

  // Errors.
  ExpectError([&] { ApplyPositionSpec("rope:pi=0.5", a); }, "pi=0.5 (allowed: a factor F >= 1");
  ExpectError([&] { ApplyPositionSpec("rope:ntk=0.9", a); }, "ntk=0.9 (allowed: a factor F >= 1");
  ExpectError([&] { ApplyPositionSpec("rope:pi=inf", a); }, "not a positive number");
  ExpectError([&] { ApplyPositionSpec("rope:pi=nan", a); }, "not a positive number");
  ExpectError([&] { ApplyPositionSpec("rope:pi=2,ntk=2", a); }, "pi and ntk together");
  ExpectError([&] { ApplyPositionSpec("alibi:pi=2", a); }, "takes no parameters");
  ExpectError([&] { ApplyPositionSpec("sandwich:ntk=2", a); }, "unknown key in \"ntk=2\"");
  ExpectError([&] { ApplyPositionSpec("rerope:window=8,pi=2", a); }, "position spec rerope");
  TrainArch tiny = Layers(1);
  tiny.model.dim = 4;
  tiny.model.n_heads = 2;  // D = 2: NTK's exponent D / (D - 2) has no value
  ExpectError([&] { ApplyPositionSpec("rope:ntk=2", tiny); }, "rotary dim is 2");
}

// ValidateArch: an interpolation or NTK factor out of range, on a scheme without RoPE, or an NTK
// base that does not follow from its factor (a file's config).
// Two full layers of a 64-wide, 4-head model: sizes ValidateArch accepts.
TrainArch SmallArch() {
  TrainArch a = Layers(2);
  a.model.dim = 64;
  a.model.n_heads = a.model.n_kv_heads = 4;
  a.model.hidden_dim = 96;
  a.model.vocab_size = 10;
  a.model.seq_len = 16;
  return a;
}

TEST(ArchSpec, InterpolationAndNtkAreValidated) {
  TrainArch a = SmallArch();
  ApplyAttentionSpec("full", a);
  ValidateArch(a);
  TrainArch b = a;
  b.model.rope_interpolation = 0.5f;
  ExpectError([&] { ValidateArch(b); }, "rope interpolation (pi)=0.5");
  b = a;
  b.model.rope_interpolation = std::numeric_limits<float>::infinity();
  ExpectError([&] { ValidateArch(b); }, "rope interpolation (pi)=inf");
  b = a;
  b.model.rope_interpolation = 2.0f;
  b.model.attention.position = LayerPosition::kAlibi;
  ExpectError([&] { ValidateArch(b); }, "pi=2 on a model without RoPE");
  b = a;
  b.rope_ntk = 2.0;
  b.rope_ntk_base = 10000.0f;  // model.rope_base not resolved
  ExpectError([&] { ValidateArch(b); }, "expected the NTK base");
  FinalizeArch(b);
  ValidateArch(b);
  b.model.rope_interpolation = 2.0f;
  ExpectError([&] { ValidateArch(b); }, "together");
}

// ValidateArch: XPOS with QueryNorm / KeyNorm is accepted (training and inference both normalize
// before the decay); a non-finite XPOS gamma or Sandwich lambda is refused.
TEST(ArchSpec, XposAndSandwichSettingsAreValidated) {
  TrainArch a = SmallArch();
  ApplyPositionSpec("xpos", a);
  ApplyAttentionSpec("full", a);
  ValidateArch(a);
  for (const char* logits : {"keynorm", "querynorm", "cosine"}) {
    TrainArch b = a;
    ApplyAttentionSpec(logits, b);
    EXPECT_NO_THROW(ValidateArch(b)) << logits;
  }
  TrainArch b = a;
  b.model.attention.xpos_scale_base = std::numeric_limits<double>::infinity();
  ExpectError([&] { ValidateArch(b); }, "xpos gamma=inf");
  ApplyPositionSpec("sandwich", b);
  ValidateArch(b);
  b.model.attention.sandwich_lambda = std::nan("");
  ExpectError([&] { ValidateArch(b); }, "sandwich lambda=nan");
}

TEST(ArchSpec, ModernLayoutErrors) {
  TrainArch a = Layers(3);
  ExpectError([&] { ApplyAttentionSpec("gemma3=64", a); }, "wants W/K");
  ExpectError([&] { ApplyAttentionSpec("window=8,local-base=500", a); },
              "local-base=B sets the base of gemma3=W/K's local layers");
  ExpectError([&] { ApplyAttentionSpec("full,temperature=8/0.1", a); }, "no layer is tuned");
  ExpectError([&] { ApplyAttentionSpec("layers=nope+temp", a); }, "need temperature=F/S");
  ExpectError([&] { ApplyAttentionSpec("llama4=8/2,temperature=8", a); }, "temperature wants F/S");
  ExpectError([&] { ApplyAttentionSpec("layers=full/full/full/full", a); },
              "more layers than the model's 3");
  ExpectError([&] { ApplyAttentionSpec("layers=window:8+flat", a); }, "unknown part \"flat\"");
  ExpectError([&] { ApplyAttentionSpec("layers=window:0", a); }, "not a positive integer");
  ExpectError([&] { ApplyAttentionSpec("layers=full+base:1", a); }, "base:1 (allowed: > 1)");
  ExpectError([&] { ApplyAttentionSpec("layers=full+pi:0.5", a); }, "a factor >= 1");
  ExpectError([&] { ApplyAttentionSpec("layers=full//full", a); }, "an empty layer");
}

}  // namespace
}  // namespace stretch
