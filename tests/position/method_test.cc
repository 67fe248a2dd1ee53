// Tests of position methods (src/position/method.h): frequencies against values worked out by
// hand from the published formulas, the spec grammar and its canonical form, the llama.cpp and HF
// translations, validation, and the defaults ResolveMethod fills in.
//
// Expected frequencies were computed in Python (double precision, the math module) from the
// formulas of HF transformers' src/transformers/modeling_rope_utils.py, written out in the
// comments next to each case; they are printed with repr (17 significant digits).
//
// Tolerance: the C++ evaluates the same closed forms in a different order (theta_t / s against
// 1 / (s * base^(2t/d)), pow(b, -x) against 1 / pow(b, x)): a handful of roundings of
// 2^-53 ~ 1.1e-16 each, so 1e-12 relative leaves four orders of magnitude of margin while any
// formula mistake (a wrong ramp end, a floor for a ceil) moves a value by > 1e-3.
#include "src/position/method.h"
#include "src/position/plan.h"
#include "src/position/rel_map.h"

#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/error.h"
#include "src/position/rope.h"

namespace stretch {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

constexpr double kRel = 1e-12;

void ExpectClose(double got, double want, std::string_view what) {
  EXPECT_NEAR(got, want, kRel * std::abs(want)) << what;
}

void ExpectThetas(const RopeFrequencies& f, const std::vector<double>& want) {
  ASSERT_EQ(f.thetas.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    ExpectClose(f.thetas[t], want[t], "pair " + std::to_string(t));
  }
}

// d = 8, base = 10000, L = 512: theta_t = 10000^(-t/4) = 1, 0.1, 0.01, 0.001.
RopeGeometry Geo8() { return RopeGeometry{512, 8, 10000.0}; }

RopeFrequencies Freq(std::string_view spec, const RopeGeometry& geo, double s) {
  return ComputeFrequencies(ParseMethod(spec).rope, geo, s);
}

// Runs f, which must throw stretch::Error with every one of `parts` in its message.
template <typename F>
void ExpectError(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "no stretch::Error thrown; expected one with \"" << *parts.begin() << "\"";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "\"" << part << "\" not in: " << what;
    }
  }
}

void ExpectSpecError(std::string_view spec, std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE(std::string(spec));
  ExpectError([&] { ParseMethod(spec); }, parts);
}

void ExpectValidateError(std::string_view spec, const RopeGeometry& geo, int64_t fed_len,
                         std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE(std::string(spec));
  const Method m = ParseMethod(spec);
  ExpectError([&] { ValidateMethod(m, geo, fed_len); }, parts);
  ExpectError([&] { ResolveMethod(m, geo, fed_len); }, parts);
}

// ---------------------------------------------------------------------------------------------
// Frequencies

TEST(MethodFrequencies, DirectIsPlainRopeAndBaseOverrides) {
  const RopeFrequencies f = Freq("direct", Geo8(), 1.0);
  EXPECT_EQ(f.thetas, RopeThetas(10000.0, 8));
  EXPECT_EQ(f.attention_factor, 1.0);
  // base=500: 500^(-t/4).
  ExpectThetas(Freq("direct:base=500", Geo8(), 3.0),
               {1.0, 0.21147425268811282, 0.044721359549995794, 0.009457416090031758});
}

TEST(MethodFrequencies, PositionInterpolation) {
  // HF _compute_linear_scaling_rope_parameters: inv_freq / factor, s = 4.
  const RopeFrequencies f = Freq("pi:factor=4", Geo8(), 4.0);
  ExpectThetas(f, {0.25, 0.025, 0.0025, 0.00025});
  EXPECT_EQ(f.attention_factor, 1.0);
}

// A model trained with position interpolation F (stretch train --position rope:pi=F): every theta
// divided by F (position m rotated as m / F, Chen et al. 2023), and a method on top of it.
TEST(MethodFrequencies, ModelInterpolationDividesEveryTheta) {
  RopeGeometry geo = Geo8();
  geo.interpolation = 4.0;
  ExpectThetas(Freq("direct", geo, 1.0), {0.25, 0.025, 0.0025, 0.00025});
  // The formula, pair by pair, at another base and F = 3: base^(-2t/d) / F.
  geo.base = 500.0;
  geo.interpolation = 3.0;
  const RopeFrequencies f = Freq("direct", geo, 1.0);
  for (size_t t = 0; t < 4; ++t) {
    ExpectClose(f.thetas[t], std::pow(500.0, -2.0 * static_cast<double>(t) / 8.0) / 3.0,
                "pair " + std::to_string(t));
  }
  // Methods apply on top: pi:factor=2 gives theta / (2 F); NTK's base' with theta / F.
  geo = Geo8();
  geo.interpolation = 4.0;
  ExpectThetas(Freq("pi:factor=2", geo, 2.0), {0.125, 0.0125, 0.00125, 0.000125});
  const RopeFrequencies ntk = Freq("ntk", geo, 2.0);
  const RopeFrequencies ntk_plain = Freq("ntk", Geo8(), 2.0);
  for (size_t t = 0; t < 4; ++t) {
    ExpectClose(ntk.thetas[t], ntk_plain.thetas[t] / 4.0, "ntk pair " + std::to_string(t));
  }
  // Through a plan (the engine's path), dynamic methods included.
  const AttentionPlan plan = MakeAttentionPlan(ParseMethod("dynamic-ntk"), geo, 2048);
  EXPECT_EQ(plan.geo.interpolation, 4.0);
  ExpectThetas(plan.FrequenciesAt(100), {0.25, 0.025, 0.0025, 0.00025});  // s = 1 below L
  // The wavelength rules (yarn, llama3, longrope) are refused on an interpolated model.
  for (const char* spec :
       {"yarn", "dynamic-yarn", "llama3", "longrope:short=1/1/1/1,long=1/2/3/4"}) {
    try {
      MakeAttentionPlan(ParseMethod(spec), geo, 2048);
      ADD_FAILURE() << spec << ": not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("trained with position interpolation"),
                std::string::npos)
          << spec << ": " << e.what();
    }
  }
}

TEST(MethodFrequencies, Ntk) {
  // HF _compute_ntk_parameters: base' = 10000 * 4^(8/6), theta_t = base'^(-t/4).
  ExpectThetas(Freq("ntk:factor=4", Geo8(), 4.0),
               {1.0, 0.06299605249474366, 0.003968502629920499, 0.00025});
}

TEST(MethodFrequencies, NtkFixed) {
  // base' = 10000 * 4 = 40000, theta_t = 40000^(-t/4).
  ExpectThetas(Freq("ntk-fixed:factor=4", Geo8(), 4.0),
               {1.0, 0.07071067811865475, 0.005, 0.00035355339059327376});
}

TEST(MethodFrequencies, YarnTruncated) {
  // HF _compute_yarn_parameters, d=8, base=10000, factor=4, orig=512, beta 32/1:
  //   find_correction_dim(32) = 8 ln(512 / (64 pi)) / (2 ln 10000) = 0.40594011429780974 -> floor 0
  //   find_correction_dim(1)  = 8 ln(512 / (2 pi))  / (2 ln 10000) = 1.9110900926177155  -> ceil 2
  //   ramp_t = clamp(t / 2, 0, 1) = 0, 0.5, 1, 1; extrapolation = 1 - ramp
  //   thetas[t] = theta_t / 4 * ramp + theta_t * (1 - ramp) = 1, 0.0625, 0.0025, 0.00025
  //   attention_factor = 0.1 ln 4 + 1
  const RopeFrequencies f = Freq("yarn:factor=4,orig=512", Geo8(), 4.0);
  ExpectThetas(f, {1.0, 0.0625, 0.0025, 0.00025});
  ExpectClose(f.attention_factor, 1.138629436111989, "attention_factor");
}

TEST(MethodFrequencies, YarnNotTruncated) {
  // As above with truncate=false: low = 0.40594011429780974, high = 1.9110900926177155,
  // ramp_1 = (1 - low) / (high - low) = 0.39478..., thetas[1] = 0.1 / 4 * ramp + 0.1 * (1 - ramp).
  const RopeFrequencies f = Freq("yarn:factor=4,truncate=false", Geo8(), 4.0);
  ExpectThetas(f, {1.0, 0.07039863663460479, 0.0025, 0.00025});
  ExpectClose(f.attention_factor, 1.138629436111989, "attention_factor");
}

TEST(MethodFrequencies, YarnWiderRampAndBaseOverride) {
  // d=16, base=500 (spec override of the model's 10000), factor=8, orig=2048, beta 16/2:
  //   find_correction_dim(16) = 16 ln(2048 / (32 pi)) / (2 ln 500) = 3.8800878829679073
  //   find_correction_dim(2)  = 16 ln(2048 / (4 pi))  / (2 ln 500) = 6.556931228514062
  //   truncated: low 3, high 7, ramp_t = clamp((t - 3) / 4, 0, 1).
  const RopeGeometry geo{1024, 16, 10000.0};
  const char* spec = "yarn:factor=8,base=500,orig=2048,beta_fast=16,beta_slow=2";
  const RopeFrequencies truncated = Freq(spec, geo, 8.0);
  ExpectThetas(truncated, {1.0, 0.45986329782677027, 0.21147425268811282, 0.0972492472466073,
                           0.034938562148434216, 0.011568212935851259, 0.003250986780948417,
                           0.0005436398190102454});
  ExpectClose(truncated.attention_factor, 1.2079441541679836, "attention_factor 0.1 ln 8 + 1");
  const RopeFrequencies exact = Freq(std::string(spec) + ",truncate=false", geo, 8.0);
  ExpectThetas(exact, {1.0, 0.45986329782677027, 0.21147425268811282, 0.0972492472466073,
                       0.042968435235064745, 0.013037136772308805, 0.002903883690152272,
                       0.0005436398190102454});
}

TEST(MethodFrequencies, YarnAttentionFactorRules) {
  // mscale=1, mscale_all_dim=0.5: get_mscale(4, 1) / get_mscale(4, 0.5)
  //   = (0.1 ln 4 + 1) / (0.05 ln 4 + 1) = 1.0648216253695715.
  const RopeFrequencies both = Freq("yarn:factor=4,mscale=1,mscale_all_dim=0.5", Geo8(), 4.0);
  ExpectThetas(both, {1.0, 0.0625, 0.0025, 0.00025});
  ExpectClose(both.attention_factor, 1.0648216253695715, "mscale ratio");
  // Only one of them given: HF ignores it and uses get_mscale(factor).
  ExpectClose(Freq("yarn:factor=4,mscale=2", Geo8(), 4.0).attention_factor, 1.138629436111989,
              "mscale alone");
  // A given attention_factor wins over both.
  ExpectClose(Freq("yarn:factor=4,attention_factor=1.5,mscale=1,mscale_all_dim=0.5", Geo8(), 4.0)
                  .attention_factor,
              1.5, "attention_factor given");
  // get_mscale(1) = 1.
  EXPECT_EQ(Freq("yarn", Geo8(), 1.0).attention_factor, 1.0);
}

TEST(MethodFrequencies, Llama3) {
  // HF _compute_llama3_parameters, d=8, base=10000, factor=8, low=1, high=4, orig=1024:
  //   wavelen_t = 2 pi / theta_t = 6.28, 62.8, 628.3, 6283; low_freq_wavelen = 1024,
  //   high_freq_wavelen = 256. t=0,1 keep theta; t=3 gets theta/8; t=2 is medium:
  //   smooth = (1024 / 628.3185 - 1) / 3 = 0.20991..., (1 - smooth) 0.01 / 8 + smooth 0.01.
  ExpectThetas(Freq("llama3:factor=8,orig=1024", Geo8(), 8.0),
               {1.0, 0.1, 0.003086760967011274, 0.000125});
  // low=2, high=8, orig=2048, factor 4: band [256, 1024] again; smooth = (2048/628.3 - 2) / 6.
  ExpectThetas(Freq("llama3:factor=4,orig=2048,low=2,high=8", Geo8(), 4.0),
               {1.0, 0.1, 0.004074366543152521, 0.00025});
  // d=16, base=500, factor 8, orig 2048 (low 1, high 4: band [512, 2048]).
  ExpectThetas(
      Freq("llama3:factor=8,base=500,orig=2048", RopeGeometry{1024, 16, 10000.0}, 8.0),
      {1.0, 0.45986329782677027, 0.21147425268811282, 0.0972492472466073, 0.044721359549995794,
       0.020565711885957794, 0.006926953837018582, 0.0010733526274082329});
  EXPECT_EQ(Freq("llama3:factor=8", Geo8(), 8.0).attention_factor, 1.0);
}

TEST(MethodFrequencies, LongRopeSwitchesLists) {
  // HF _compute_longrope_parameters: inv_freq = 1 / (ext_t * base^(2t/d)), the long list when
  // the sequence (s * L here) passes orig; attention sqrt(1 + ln s / ln orig) for s > 1.
  const char* spec = "longrope:short=1/1.5/2/4,long=2/3/4/8";
  const std::vector<double> short_thetas = {1.0, 0.06666666666666667, 0.005, 0.00025};
  const std::vector<double> long_thetas = {0.5, 0.03333333333333333, 0.0025, 0.000125};
  const RopeFrequencies at1 = Freq(spec, Geo8(), 1.0);  // L' <= L = orig: short
  ExpectThetas(at1, short_thetas);
  EXPECT_EQ(at1.attention_factor, 1.0);
  const RopeFrequencies at4 = Freq(spec, Geo8(), 4.0);  // L' = 2048 > 512: long
  ExpectThetas(at4, long_thetas);
  ExpectClose(at4.attention_factor, 1.1055415967851334, "sqrt(1 + ln 4 / ln 512)");
  // orig=256 < L: even s = 1 (512 tokens) is past orig, so long; factor 1 gives attention 1.
  const RopeFrequencies orig256 = Freq(std::string(spec) + ",orig=256", Geo8(), 1.0);
  ExpectThetas(orig256, long_thetas);
  EXPECT_EQ(orig256.attention_factor, 1.0);
  ExpectClose(Freq(std::string(spec) + ",orig=256", Geo8(), 2.0).attention_factor,
              1.0606601717798212, "sqrt(1 + ln 2 / ln 256)");
  EXPECT_EQ(Freq(std::string(spec) + ",attention_factor=1.25", Geo8(), 4.0).attention_factor, 1.25);
}

TEST(MethodFrequencies, LongRopePicksItsSetByTheSequenceNotTheFactor) {
  // A model whose configured factor is 32 (HF: max_position_embeddings / orig) still reads a
  // sequence no longer than orig with the short factors, as HF does; the attention factor stays
  // the configured one's.
  const std::string spec = "longrope:factor=32,short=1/1.5/2/4,long=2/3/4/8";
  const std::vector<double> short_thetas = {1.0, 0.06666666666666667, 0.005, 0.00025};
  const std::vector<double> long_thetas = {0.5, 0.03333333333333333, 0.0025, 0.000125};
  const RopeGeometry geo = Geo8();
  const AttentionPlan short_call = MakeAttentionPlan(ParseMethod(spec), geo, 512);
  ExpectThetas(short_call.freq, short_thetas);
  ExpectClose(short_call.freq.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(512.0)),
              "sqrt(1 + ln 32 / ln 512)");
  ExpectThetas(MakeAttentionPlan(ParseMethod(spec), geo, 513).freq, long_thetas);
  // Per position (dynamic-longrope): query i reads i + 1 tokens; the set switches after orig.
  const AttentionPlan dyn =
      MakeAttentionPlan(ParseMethod("dynamic-longrope:short=1/1.5/2/4,long=2/3/4/8"), geo, 2048);
  ExpectThetas(dyn.FrequenciesAt(0), short_thetas);
  ExpectThetas(dyn.FrequenciesAt(511), short_thetas);
  ExpectThetas(dyn.FrequenciesAt(512), long_thetas);
  ExpectThetas(dyn.FrequenciesAt(2047), long_thetas);
  EXPECT_EQ(dyn.FrequenciesAt(511).attention_factor, 1.0);
  ExpectClose(dyn.FrequenciesAt(1023).attention_factor,
              std::sqrt(1 + std::log(2.0) / std::log(512.0)), "s_i = 2: sqrt(1 + ln 2 / ln 512)");
  EXPECT_TRUE(LongRopeUsesLong(dyn.method.rope, geo, 513));
  EXPECT_FALSE(LongRopeUsesLong(dyn.method.rope, geo, 512));
  // No factor key: the scale is s_i.
  ExpectSpecError("dynamic-longrope:factor=2", {"factor=2 is not allowed for a dynamic method"});
}

TEST(MethodFrequencies, DynamicUsesTheFormulasAtEachScale) {
  // dynamic-ntk at s: base * s^(d/(d-2)), d = 8.
  ExpectThetas(Freq("dynamic-ntk", Geo8(), 1.5),
               {1.0, 0.0873580464736299, 0.00763142828368888, 0.0006666666666666666});
  ExpectThetas(Freq("dynamic-ntk", Geo8(), 3.0),
               {1.0, 0.06933612743506347, 0.004807498567691361, 0.0003333333333333334});
  EXPECT_EQ(Freq("dynamic-ntk", Geo8(), 1.0).thetas, RopeThetas(10000.0, 8));
  // dynamic-yarn at s: YaRN at factor s (orig = L = 512, low 0, high 2 as in YarnTruncated).
  const RopeFrequencies at2 = Freq("dynamic-yarn", Geo8(), 2.0);
  ExpectThetas(at2, {1.0, 0.07500000000000001, 0.005, 0.0005});
  ExpectClose(at2.attention_factor, 1.0693147180559945, "0.1 ln 2 + 1");
  const RopeFrequencies at8 = Freq("dynamic-yarn", Geo8(), 8.0);
  ExpectThetas(at8, {1.0, 0.05625, 0.00125, 0.000125});
  ExpectClose(at8.attention_factor, 1.2079441541679836, "0.1 ln 8 + 1");
}

TEST(MethodFrequencies, CallScale) {
  const RopeGeometry geo = Geo8();
  EXPECT_EQ(CallScale(ParseMethod("pi").rope, geo, 2048), 4.0);
  EXPECT_EQ(CallScale(ParseMethod("pi").rope, geo, 100), 1.0);
  EXPECT_EQ(CallScale(ParseMethod("pi:factor=2.5").rope, geo, 4096), 2.5);
  EXPECT_EQ(CallScale(ParseMethod("dynamic-yarn").rope, geo, 768), 1.5);
}

// ---------------------------------------------------------------------------------------------
// Spec grammar

const char* const kNames[] = {
    "direct",   "pi",          "ntk",          "ntk-fixed", "yarn",         "llama3",
    "longrope", "dynamic-ntk", "dynamic-yarn", "rerope",    "leaky-rerope", "self-extend",
    "string",   "dca",         "window",       "lambda",    "streaming",    "dynamic-longrope"};

TEST(MethodSpec, EveryNameParsesAndPrintsBack) {
  for (const char* name : kNames) {
    SCOPED_TRACE(name);
    const Method m = ParseMethod(name);
    EXPECT_EQ(MethodName(m), name);
    EXPECT_EQ(CanonicalSpec(m), name);
    EXPECT_FALSE(m.logn);
    const Method with_logn = ParseMethod(std::string(name) + "+logn");
    EXPECT_TRUE(with_logn.logn);
    EXPECT_EQ(CanonicalSpec(with_logn), std::string(name) + "+logn");
  }
}

TEST(MethodSpec, NamesSelectTheParts) {
  EXPECT_EQ(ParseMethod("direct").rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(ParseMethod("pi").rope.scaling, RopeScaling::kLinear);
  EXPECT_EQ(ParseMethod("ntk").rope.scaling, RopeScaling::kNtk);
  EXPECT_EQ(ParseMethod("ntk-fixed").rope.scaling, RopeScaling::kNtkFixed);
  EXPECT_EQ(ParseMethod("yarn").rope.scaling, RopeScaling::kYarn);
  EXPECT_EQ(ParseMethod("llama3").rope.scaling, RopeScaling::kLlama3);
  EXPECT_EQ(ParseMethod("longrope").rope.scaling, RopeScaling::kLongRope);
  const Method dn = ParseMethod("dynamic-ntk");
  EXPECT_EQ(dn.rope.scaling, RopeScaling::kNtk);
  EXPECT_EQ(dn.rope.mode, ScaleMode::kDynamic);
  const Method dy = ParseMethod("dynamic-yarn");
  EXPECT_EQ(dy.rope.scaling, RopeScaling::kYarn);
  EXPECT_EQ(dy.rope.mode, ScaleMode::kDynamic);
  EXPECT_EQ(ParseMethod("yarn").rope.mode, ScaleMode::kStatic);
  EXPECT_EQ(ParseMethod("rerope").rel.map, FindRelMap("rerope"));
  EXPECT_EQ(ParseMethod("leaky-rerope").rel.map, FindRelMap("leaky-rerope"));
  EXPECT_EQ(ParseMethod("self-extend").rel.map, FindRelMap("self-extend"));
  EXPECT_EQ(ParseMethod("string").rel.map, FindRelMap("string"));
  EXPECT_EQ(ParseMethod("dca").rel.map, FindRelMap("dca"));
  EXPECT_EQ(ParseMethod("window").mask.kind, MaskKind::kWindow);
  EXPECT_EQ(ParseMethod("lambda").mask.kind, MaskKind::kLambda);
  EXPECT_EQ(ParseMethod("streaming").mask.kind, MaskKind::kLambda);
  EXPECT_EQ(ParseMethod("streaming").rel.map, FindRelMap("streaming"));
  EXPECT_TRUE(ParseMethod("lambda").rel.IsIdentity());
  for (const char* name : {"rerope", "self-extend", "window", "lambda", "string", "dca"}) {
    EXPECT_EQ(ParseMethod(name).rope.scaling, RopeScaling::kNone) << name;
  }
}

TEST(MethodSpec, KeysSetFields) {
  const Method y = ParseMethod(
      "yarn:factor=8,orig=512,beta_fast=16,beta_slow=2,attention_factor=1.2,mscale=0.707,"
      "mscale_all_dim=0.5,truncate=false,base=500000+logn");
  EXPECT_EQ(y.rope.factor, 8.0);
  EXPECT_EQ(y.rope.original_length, 512);
  EXPECT_EQ(y.rope.beta_fast, 16.0);
  EXPECT_EQ(y.rope.beta_slow, 2.0);
  EXPECT_EQ(y.rope.attention_factor, 1.2);
  EXPECT_EQ(y.rope.mscale, 0.707);
  EXPECT_EQ(y.rope.mscale_all_dim, 0.5);
  EXPECT_FALSE(y.rope.truncate);
  EXPECT_EQ(y.rope.base, 500000.0);
  EXPECT_TRUE(y.logn);

  const Method l3 = ParseMethod("llama3:factor=8,low=2,high=8,orig=8192");
  EXPECT_EQ(l3.rope.low_freq_factor, 2.0);
  EXPECT_EQ(l3.rope.high_freq_factor, 8.0);
  EXPECT_EQ(l3.rope.original_length, 8192);

  const Method lr = ParseMethod("longrope:short=1/1.5,long=2/3e-1");
  EXPECT_EQ(lr.rope.short_factor, (std::vector<double>{1.0, 1.5}));
  EXPECT_EQ(lr.rope.long_factor, (std::vector<double>{2.0, 0.3}));

  EXPECT_EQ(ParseMethod("rerope:window=128").rel.window, 128);
  const Method leaky = ParseMethod("leaky-rerope:window=64,k=2.5");
  EXPECT_EQ(leaky.rel.window, 64);
  EXPECT_EQ(leaky.rel.Param("k"), 2.5);
  EXPECT_EQ(ParseMethod("leaky-rerope").rel.Param("k"), 0.0);       // the default rule
  EXPECT_EQ(ParseMethod("leaky-rerope:k=s").rel.Param("k"), -1.0);  // L'/L, resolved per call
  const Method se = ParseMethod("self-extend:group=4,window=128");
  EXPECT_EQ(se.rel.Param("group"), 4);
  EXPECT_EQ(se.rel.window, 128);
  const Method st = ParseMethod("string:shift=100,window=20");
  EXPECT_EQ(st.rel.Param("shift"), 100);
  EXPECT_EQ(st.rel.window, 20);
  const Method dca = ParseMethod("dca:chunk=384,window=32");
  EXPECT_EQ(dca.rel.Param("chunk"), 384);
  EXPECT_EQ(dca.rel.window, 32);
  // `window` and `lambda` keep their window in the mask, not in the relative map.
  const Method w = ParseMethod("window:window=100");
  EXPECT_EQ(w.mask.window, 100);
  EXPECT_EQ(w.rel.window, 0);
  const Method lam = ParseMethod("lambda:sinks=2,window=64");
  EXPECT_EQ(lam.mask.sinks, 2);
  EXPECT_EQ(lam.mask.window, 64);
  // A '+' inside a number is not a suffix.
  EXPECT_EQ(ParseMethod("pi:factor=1e+20").rope.factor, 1e20);
  EXPECT_EQ(ParseMethod("pi:factor=1e+20+logn").rope.factor, 1e20);
  EXPECT_EQ(ParseMethod("ntk:factor=.5e1").rope.factor, 5.0);
}

TEST(MethodSpec, RoundTrips) {
  const char* const specs[] = {
      "direct",
      "direct:base=500000",
      "direct+logn",
      "pi:factor=4",
      "pi:factor=0.3333333333333333e1",
      "ntk:factor=8,base=1e+06",
      "ntk-fixed:factor=1.1+logn",
      "yarn:factor=4+logn",
      ("yarn:factor=8,orig=512,beta_fast=16,beta_slow=0.5,attention_factor=1.1,mscale=0.707,"
       "mscale_all_dim=0.1,truncate=false,base=10000"),
      "yarn:truncate=true,beta_fast=32,beta_slow=1",  // defaults given: printed as `yarn`
      "llama3:factor=8,orig=8192,low=1.5,high=3",
      "longrope:factor=32,orig=4096,attention_factor=1.19,short=1/1.05/1.1/1.2,long=3/4/5.5/7",
      "dynamic-ntk:base=20000",
      "dynamic-yarn:orig=256,beta_fast=16",
      "rerope:window=256+logn",
      "leaky-rerope:window=128,k=3.5",
      "leaky-rerope:k=s",
      "self-extend:group=4,window=128",
      "string:shift=168,window=84",
      "dca:chunk=384,window=32",
      "window:window=100",
      "lambda:sinks=4,window=512",
      "streaming:sinks=4,window=252",
  };
  for (const char* spec : specs) {
    SCOPED_TRACE(spec);
    const Method m = ParseMethod(spec);
    const std::string canonical = CanonicalSpec(m);
    const Method again = ParseMethod(canonical);
    EXPECT_TRUE(again == m) << canonical;
    EXPECT_EQ(CanonicalSpec(again), canonical);
  }
  // Key order, defaults and number spellings normalize.
  EXPECT_EQ(CanonicalSpec(ParseMethod("yarn:orig=512,beta_fast=32,factor=8.0")),
            "yarn:factor=8,orig=512");
  EXPECT_EQ(CanonicalSpec(ParseMethod("yarn:truncate=true,beta_fast=32,beta_slow=1")), "yarn");
  EXPECT_EQ(CanonicalSpec(ParseMethod("self-extend:window=128,group=4")),
            "self-extend:group=4,window=128");
  EXPECT_EQ(CanonicalSpec(ParseMethod("leaky-rerope:k=s,window=64")), "leaky-rerope:window=64,k=s");
  EXPECT_EQ(CanonicalSpec(ParseMethod("pi:factor=0.25e1")), "pi:factor=2.5");
  EXPECT_EQ(CanonicalSpec(ParseMethod("ntk:base=1e6")), "ntk:base=1000000");
  EXPECT_EQ(CanonicalSpec(ParseMethod("ntk:base=1e20")), "ntk:base=1e+20");
  EXPECT_EQ(CanonicalSpec(ParseMethod("rerope:window=0128")), "rerope:window=128");
  // Shortest exact printing: 1/3 keeps every digit it needs to read back the same double.
  Method third = ParseMethod("pi");
  third.rope.factor = 1.0 + 1.0 / 3.0;
  EXPECT_EQ(CanonicalSpec(third), "pi:factor=1.3333333333333333");
  EXPECT_TRUE(ParseMethod(CanonicalSpec(third)) == third);
}

TEST(MethodSpec, EqualityComparesEveryField) {
  const Method a = ParseMethod("yarn:factor=4");
  EXPECT_TRUE(a == ParseMethod("yarn:factor=4"));
  EXPECT_FALSE(a == ParseMethod("yarn:factor=4+logn"));
  EXPECT_FALSE(a == ParseMethod("yarn:factor=4,truncate=false"));
  EXPECT_FALSE(a == ParseMethod("dynamic-yarn"));
  EXPECT_FALSE(ParseMethod("window:window=8") == ParseMethod("rerope:window=8"));
  EXPECT_FALSE(ParseMethod("longrope:short=1/2") == ParseMethod("longrope:long=1/2"));
}

TEST(MethodSpec, Errors) {
  ExpectSpecError("yam", {"unknown method \"yam\"", "known: direct, pi, ntk"});
  ExpectSpecError("", {"unknown method \"\""});
  ExpectSpecError("rerope:windw=8",
                  {"method \"rerope\"", "unknown key \"windw\"", "allowed: window, base"});
  ExpectSpecError("pi:window=8", {"method \"pi\"", "unknown key \"window\"", "factor, base"});
  ExpectSpecError("yarn:factor=0.5",
                  {"method \"yarn\"", "factor=0.5 is below 1", "allowed: a number >= 1"});
  ExpectSpecError("pi:factor=0", {"factor=0 is below 1"});
  ExpectSpecError("pi:factor=-2", {"factor=-2 is below 1"});
  ExpectSpecError("self-extend:group=2.5",
                  {"method \"self-extend\"", "group=2.5 is not a positive integer"});
  ExpectSpecError("self-extend:group=0", {"group=0 is not a positive integer"});
  ExpectSpecError("rerope:window=-3", {"window=-3 is not a positive integer"});
  ExpectSpecError("rerope:window=1e3", {"window=1e3 is not a positive integer"});
  ExpectSpecError("rerope:window=+8", {"window=+8 is not a positive integer"});
  ExpectSpecError("dca:chunk=99999999999999999999", {"chunk=99999999999999999999"});
  ExpectSpecError("yarn:orig=512.5", {"orig=512.5 is not a positive integer"});
  ExpectSpecError("string:shift=x", {"shift=x is not a positive integer"});
  ExpectSpecError("lambda:sinks=0", {"sinks=0 is not a positive integer", "window:window=W"});
  ExpectSpecError("pi:factor=4x", {"factor=4x is not a number"});
  ExpectSpecError("pi:factor=", {"factor= is not a number"});
  ExpectSpecError("pi:factor=0x10", {"factor=0x10 is not a number"});
  ExpectSpecError("pi:factor=nan", {"factor=nan is not a finite number"});
  ExpectSpecError("pi:factor=inf", {"factor=inf is not a finite number"});
  ExpectSpecError("pi:factor=1e999", {"factor=1e999 is not a finite number"});
  ExpectSpecError("pi:factor=4,factor=8", {"key \"factor\" given twice"});
  ExpectSpecError("pi:factor", {"\"factor\" is not key=value"});
  ExpectSpecError("pi:=4", {"\"=4\" is not key=value"});
  ExpectSpecError("pi:", {"method \"pi\"", "nothing after ':'"});
  ExpectSpecError("pi:factor=4,", {"\"\" is not key=value"});
  ExpectSpecError("dynamic-ntk:factor=2",
                  {"method \"dynamic-ntk\"", "factor=2 is not allowed", "dynamic"});
  ExpectSpecError("dynamic-yarn:factor=4", {"factor=4 is not allowed"});
  ExpectSpecError("yarn+lgn", {"unknown suffix \"+lgn\"", "allowed: +logn"});
  ExpectSpecError("yarn+", {"unknown suffix \"+\""});
  ExpectSpecError("yarn+logn+logn", {"+logn given twice"});
  ExpectSpecError("yarn:truncate=yes", {"truncate=yes is not true or false"});
  ExpectSpecError("leaky-rerope:k=0.5", {"k=0.5 is below 1", "or s"});
  // k = 1 is the identity map, and what k=s resolves to at s = 1: a resolved spec parses again.
  EXPECT_EQ(ParseMethod("leaky-rerope:k=1").rel.Param("k"), 1.0);
  ExpectSpecError("leaky-rerope:k=t", {"k=t is not a number"});
  ExpectSpecError("direct:base=1", {"base=1 is not above 1", "a number > 1"});
  ExpectSpecError("direct:base=0.5", {"base=0.5 is not above 1"});
  ExpectSpecError("yarn:beta_fast=0", {"beta_fast=0 is not positive"});
  ExpectSpecError("yarn:beta_fast=1,beta_slow=2",
                  {"beta_fast=1 is not above beta_slow=2", "beta_fast > beta_slow > 0"});
  ExpectSpecError("yarn:beta_slow=32", {"beta_fast=32 is not above beta_slow=32"});
  ExpectSpecError("yarn:attention_factor=0", {"attention_factor=0 is not positive"});
  ExpectSpecError("yarn:mscale=-1", {"mscale=-1 is not positive"});
  ExpectSpecError("llama3:low=4,high=2", {"high=2 is not above low=4"});
  ExpectSpecError("llama3:high=1", {"high=1 is not above low=1"});
  ExpectSpecError("longrope:short=1/x/3", {"short=1/x/3 has \"x\", which is not a number"});
  ExpectSpecError("longrope:long=1/-2", {"long=1/-2 has -2, which is not positive"});
  ExpectSpecError("longrope:long=1//2", {"long=1//2 has \"\", which is not a number"});
  ExpectSpecError("longrope:short=", {"short= has \"\""});
  ExpectSpecError("string:shift=50,window=100", {"window=100 is not below shift=50"});
  ExpectSpecError("dca:chunk=100,window=100", {"window=100 is not below chunk=100"});
  ExpectSpecError("lambda:sinks=8,window=8", {"sinks=8 is not below window=8"});
  ExpectSpecError("Yarn", {"unknown method \"Yarn\""});
  ExpectSpecError(" yarn", {"unknown method \" yarn\""});
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST(MethodValidate, LengthsAgainstTheCall) {
  const RopeGeometry geo{4096, 64, 10000.0};
  ExpectValidateError("rerope:window=9000", geo, 8192,
                      {"method \"rerope\": window=9000 is larger than the context (8192 tokens)"});
  ExpectValidateError("leaky-rerope:window=300", geo, 200,
                      {"window=300 is larger than the context"});
  ExpectValidateError("window:window=300", geo, 200, {"method \"window\"", "window=300 is larger"});
  ExpectValidateError("lambda:window=300", geo, 200, {"method \"lambda\"", "window=300 is larger"});
  ExpectValidateError("string:shift=300", geo, 200, {"shift=300 is larger than the context"});
  ExpectValidateError("self-extend:window=200", geo, 200,
                      {"window=200 is not smaller than the context (200 tokens)", "1 .. 199"});
  ExpectValidateError("dca:chunk=5000", geo, 8192,
                      {"chunk=5000 is larger than the training length (4096 tokens)"});
  // At the context length itself a ReRoPE window is fine.
  EXPECT_NO_THROW(ValidateMethod(ParseMethod("rerope:window=200"), geo, 200));
  EXPECT_NO_THROW(ValidateMethod(ParseMethod("self-extend:window=199"), geo, 200));
}

TEST(MethodValidate, ModelAndLists) {
  const RopeGeometry geo{512, 8, 10000.0};
  ExpectValidateError("longrope:short=1/2/3,long=1/2/3/4", geo, 512,
                      {"method \"longrope\"", "short has 3 factors", "rotary_dim/2 = 4"});
  ExpectValidateError("longrope:short=1/2/3/4", geo, 512, {"long has 0 factors"});
  ExpectValidateError("longrope", geo, 512, {"short has 0 factors"});
  EXPECT_NO_THROW(ValidateMethod(ParseMethod("longrope:short=1/2/3/4,long=1/2/3/4"), geo, 512));
  ExpectValidateError("direct", RopeGeometry{512, 7, 10000.0}, 512, {"rotary_dim=7"});
  ExpectValidateError("direct", RopeGeometry{512, 8, 1.0}, 512, {"model: base=1"});
  ExpectValidateError("direct", RopeGeometry{0, 8, 10000.0}, 512, {"train_len=0"});
  ExpectValidateError("direct", RopeGeometry{512, 8, 10000.0, 0.5}, 512,
                      {"model: interpolation=0.5", ">= 1"});
  ExpectValidateError("direct", RopeGeometry{512, 8, 10000.0, std::nan("")}, 512,
                      {"model: interpolation=nan"});
  ExpectValidateError("direct", geo, 0, {"length=0"});
  ExpectValidateError("ntk", RopeGeometry{512, 2, 10000.0}, 512, {"rotary_dim=2 is too small"});
  ExpectValidateError("dynamic-ntk", RopeGeometry{512, 2, 10000.0}, 512, {"rotary_dim=2"});
}

TEST(MethodValidate, DefaultsThatCannotWork) {
  const RopeGeometry geo{512, 8, 10000.0};
  // Self-Extend with W above the default bound floor(2L/3) - 1 = 340 and no group: no G keeps
  // the grouped positions below it.
  ExpectValidateError("self-extend:window=600", geo, 4096,
                      {"window=600 leaves no group", "L = 512", "window <= 340"});
  ExpectValidateError("self-extend:window=600,reach=1", geo, 4096,
                      {"window=600 leaves no group", "L = 512", "window <= 511"});
  EXPECT_NO_THROW(ValidateMethod(ParseMethod("self-extend:window=600,group=8"), geo, 4096));
  // STRING: window defaults to min(128, shift/2) (at least 1), which must stay below shift.
  ExpectValidateError("string:shift=1", geo, 512, {"window=1 is not below shift=1"});
  ExpectValidateError("string:window=200", geo, 512, {"window=200 is not below shift=168"});
  // Lambda: sinks below the (default L) window.
  ExpectValidateError("lambda:sinks=600", geo, 1000, {"sinks=600 is not below window=512"});
  // DCA: the default local window L/16 = 32 must stay below a given chunk.
  ExpectValidateError("dca:chunk=32", geo, 1000, {"window=32 is not below chunk=32"});
}

TEST(MethodValidate, HandBuiltMethods) {
  const RopeGeometry geo{512, 8, 10000.0};
  Method m = ParseMethod("pi");
  m.rope.factor = 0.5;
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"factor=0.5"});
  m = ParseMethod("dynamic-ntk");
  m.rope.factor = 2.0;
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"factor=2 is not allowed", "dynamic"});
  m = ParseMethod("pi");
  m.rope.mode = ScaleMode::kDynamic;
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"dynamic-ntk, dynamic-yarn"});
  m = ParseMethod("rerope");
  m.rel.window = -1;
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"window=-1"});
  m = ParseMethod("leaky-rerope");
  m.rel.SetParam("k", 0.5);
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"k=0.5"});
  m = ParseMethod("yarn");
  m.rope.beta_slow = 0.0;
  ExpectError([&] { ValidateMethod(m, geo, 512); }, {"beta_slow=0"});
}

// ---------------------------------------------------------------------------------------------
// Defaults

TEST(MethodResolve, RopeDefaults) {
  const RopeGeometry geo{512, 8, 10000.0};
  const Method direct = ResolveMethod(ParseMethod("direct"), geo, 4096);
  EXPECT_EQ(direct.rope.factor, 8.0);  // max(1, 4096 / 512)
  EXPECT_EQ(direct.rope.base, 10000.0);
  EXPECT_EQ(direct.rope.original_length, 512);
  EXPECT_EQ(ResolveMethod(ParseMethod("pi"), geo, 300).rope.factor, 1.0);
  const Method yarn = ResolveMethod(ParseMethod("yarn:factor=4,base=500,orig=256"), geo, 4096);
  EXPECT_EQ(yarn.rope.factor, 4.0);
  EXPECT_EQ(yarn.rope.base, 500.0);
  EXPECT_EQ(yarn.rope.original_length, 256);
  EXPECT_EQ(yarn.rope.beta_fast, 32.0);
  EXPECT_EQ(yarn.rope.beta_slow, 1.0);
  // The resolved method keeps its kind, and the frequencies at its factor are the method's.
  EXPECT_EQ(MethodName(yarn), "yarn");
  ExpectThetas(
      ComputeFrequencies(yarn.rope, geo, yarn.rope.factor),
      ComputeFrequencies(ParseMethod("yarn:factor=4,base=500,orig=256").rope, geo, 4.0).thetas);
}

TEST(MethodResolve, ReRopeDefaults) {
  const RopeGeometry geo{512, 8, 10000.0};
  EXPECT_EQ(ResolveMethod(ParseMethod("rerope"), geo, 4096).rel.window, 256);  // L/2
  const Method leaky = ResolveMethod(ParseMethod("leaky-rerope"), geo, 4096);
  EXPECT_EQ(leaky.rel.window, 256);
  // The smallest k with w + (L' - 1 - w) / k <= L - 1: (4095 - 256) / (511 - 256).
  EXPECT_DOUBLE_EQ(leaky.rel.Param("k"), 3839.0 / 255.0);
  EXPECT_DOUBLE_EQ(ResolveMethod(ParseMethod("leaky-rerope"), geo, 1536).rel.Param("k"),
                   1279.0 / 255.0);
  // The farthest distance then maps to L - 1, inside training (k = s = 8 would map it to 735.9).
  const double k = leaky.rel.Param("k");
  EXPECT_LE(256.0 + (4095.0 - 256.0) / k, 511.0 + 1e-9);
  // A call whose farthest distance is inside training already: k = 1, the identity map.
  EXPECT_EQ(ResolveMethod(ParseMethod("leaky-rerope"), geo, 300).rel.Param("k"), 1.0);
  // k=s: the call's scale L'/L.
  EXPECT_EQ(ResolveMethod(ParseMethod("leaky-rerope:k=s"), geo, 4096).rel.Param("k"), 8.0);
  EXPECT_EQ(ResolveMethod(ParseMethod("leaky-rerope:k=s"), geo, 1536).rel.Param("k"), 3.0);
  EXPECT_EQ(ResolveMethod(ParseMethod("leaky-rerope:k=2"), geo, 4096).rel.Param("k"), 2.0);
  EXPECT_EQ(ResolveMethod(ParseMethod("rerope:window=100"), geo, 4096).rel.window, 100);
}

TEST(MethodResolve, SelfExtendGroup) {
  // The authors' empirical rule: smallest G with floor((L'-1)/G) + W - floor(W/G) <=
  // floor(2L/3) - 1, W = L/4; G = 1 when L' <= L. Worked by hand:
  // L=512, L'=4096, W=128, bound 340: G=18: 227 + 128 - 7 = 348; G=19: 215 + 128 - 6 = 337.
  // L=512, L'=600: G=2: 299 + 128 - 64 = 363; G=3: 199 + 128 - 42 = 285.
  // L=256, L'=8192, W=64, bound 169: G=77: 106 + 64 - 0 = 170; G=78: 105 + 64 = 169.
  // L=512, L'=4096, W=100: G=16: 255 + 100 - 6 = 349; G=17: 240 + 100 - 5 = 335.
  // L=96, L'=768, W=24, bound 63 (2/3 of 96 is 64 exactly: the bound is strictly below): G=19:
  // 40 + 24 - 1 = 63; G=18: 42 + 24 - 1 = 65.
  struct Case {
    int64_t train, fed, window, group;
  };
  for (const Case& c : {Case{512, 4096, 0, 19}, Case{512, 512, 0, 1}, Case{512, 600, 0, 3},
                        Case{256, 8192, 0, 78}, Case{512, 4096, 100, 17}, Case{96, 768, 0, 19}}) {
    SCOPED_TRACE(::testing::Message() << c.train << " " << c.fed << " " << c.window);
    const RopeGeometry geo{c.train, 8, 10000.0};
    Method m = ParseMethod("self-extend");
    m.rel.window = c.window;
    const Method r = ResolveMethod(m, geo, c.fed);
    const int64_t w = c.window != 0 ? c.window : c.train / 4;
    EXPECT_EQ(r.rel.window, w);
    const int64_t group = static_cast<int64_t>(r.rel.Param("group"));
    EXPECT_EQ(group, c.group);
    // The defining property, checked directly: G keeps every distance below floor(2L/3), G - 1
    // does not.
    auto top = [&](int64_t g) { return (c.fed - 1) / g + w - w / g; };
    if (c.fed > c.train) {
      EXPECT_LT(top(group), 2 * c.train / 3);
      if (group > 1) {
        EXPECT_GE(top(group - 1), 2 * c.train / 3);
      }
    }
  }
  // A given group is kept.
  EXPECT_EQ(ResolveMethod(ParseMethod("self-extend:group=3"), RopeGeometry{512, 8, 1e4}, 4096)
                .rel.Param("group"),
            3);
}

TEST(MethodResolve, SelfExtendReachChoosesTheGroupForAShorterBound) {
  // reach=R: the smallest G with floor((L'-1)/G) + W - floor(W/G) <= floor(R L) - 1.
  // L = 128, W = 64, R = 0.75: bound 95. 8x (L' = 1024): G = 31 gives 33 + 64 - 2 = 95, G = 30
  // gives 34 + 64 - 2 = 96. 16x: G = 63 gives 32 + 64 - 1 = 95, G = 62 gives 33 + 64 - 1 = 96.
  const RopeGeometry geo{128, 8, 10000.0};
  const Method m = ParseMethod("self-extend:reach=0.75,window=64");
  EXPECT_EQ(CanonicalSpec(m), "self-extend:window=64,reach=0.75");
  const Method r8 = ResolveMethod(m, geo, 1024);
  EXPECT_EQ(r8.rel.Param("group"), 31);
  EXPECT_EQ(r8.rel.window, 64);
  // The resolved method names its group, so its spec parses back to the same map.
  EXPECT_EQ(CanonicalSpec(r8), "self-extend:group=31,window=64,base=10000");
  EXPECT_EQ(ResolveMethod(m, geo, 2048).rel.Param("group"), 63);
  // The default is reach 2/3 with W = L/4 = 32, bound 84: G = 19 gives 53 + 32 - 1 = 84, G = 18
  // gives 56 + 32 - 1 = 87 (8x); 16x: G = 39 gives 52 + 32 = 84, G = 38 gives 53 + 32 = 85.
  const Method d8 = ResolveMethod(ParseMethod("self-extend"), geo, 1024);
  EXPECT_EQ(CanonicalSpec(d8), "self-extend:group=19,window=32,base=10000");
  EXPECT_EQ(ResolveMethod(ParseMethod("self-extend"), geo, 2048).rel.Param("group"), 39);
  EXPECT_EQ(ResolveMethod(ParseMethod("self-extend:reach=0.6667"), geo, 1024).rel.Param("group"),
            19);
  // reach=1, the smallest group the trained length allows (bound L - 1 = 127): G = 11 gives
  // 93 + 32 - 2 = 123, G = 10 gives 102 + 32 - 3 = 131. +logn rides along.
  EXPECT_EQ(ResolveMethod(ParseMethod("self-extend:reach=1+logn"), geo, 1024).rel.Param("group"),
            11);
  EXPECT_TRUE(ResolveMethod(ParseMethod("self-extend:reach=0.75+logn"), geo, 1024).logn);
  // Below L = 3 the rule leaves no position: the bound falls back to L - 1 (L = 2: W = 1, bound
  // 1; G = 8 gives 0 + 1 - 0 = 1 at L' = 8, G = 7 gives 1 + 1 = 2).
  EXPECT_EQ(
      ResolveMethod(ParseMethod("self-extend"), RopeGeometry{2, 8, 1e4}, 8).rel.Param("group"), 8);
  // A context within the trained length needs no group, whatever the reach.
  EXPECT_EQ(ResolveMethod(ParseMethod("self-extend:reach=0.5"), geo, 128).rel.Param("group"), 1);
  // A bound the window already reaches leaves no group.
  ExpectValidateError("self-extend:reach=0.5,window=64", geo, 1024,
                      {"window=64 leaves no group", "at most 63", "reach=0.5 of L = 128"});
  ExpectValidateError("self-extend:window=90", geo, 1024,
                      {"window=90 leaves no group", "at most 84", "2/3 of L = 128"});
  EXPECT_NO_THROW(ValidateMethod(ParseMethod("self-extend:reach=0.5,window=32"), geo, 1024));
}

TEST(MethodParse, SelfExtendReachIsAFractionAndExcludesGroup) {
  ExpectSpecError("self-extend:reach=0", {"reach=0 is not in (0, 1]"});
  ExpectSpecError("self-extend:reach=1.5", {"reach=1.5 is not in (0, 1]"});
  ExpectSpecError("self-extend:reach=x", {"reach=x"});
  ExpectValidateError("self-extend:group=4,reach=0.75", RopeGeometry{128, 8, 1e4}, 1024,
                      {"group=4 and reach=0.75 both given"});
}

TEST(MethodResolve, MaskStringAndDcaDefaults) {
  const RopeGeometry geo{512, 8, 10000.0};
  EXPECT_EQ(ResolveMethod(ParseMethod("window"), geo, 4096).mask.window, 512);
  const Method lam = ResolveMethod(ParseMethod("lambda"), geo, 4096);
  EXPECT_EQ(lam.mask.window, 512);
  EXPECT_EQ(lam.mask.sinks, 4);
  EXPECT_TRUE(lam.rel.IsIdentity());
  // The streaming cache: sinks + window = L, so its positions stay below L.
  const Method stream = ResolveMethod(ParseMethod("streaming"), geo, 4096);
  EXPECT_EQ(stream.mask.sinks, 4);
  EXPECT_EQ(stream.mask.window, 508);
  EXPECT_EQ(ResolveMethod(ParseMethod("streaming:sinks=12"), geo, 4096).mask.window, 500);
  // STRING: S = int(0.33 L) = 168, W = min(128, S/2) = 84; at L = 4096: 1351 and 128.
  const Method st = ResolveMethod(ParseMethod("string"), geo, 512);
  EXPECT_EQ(st.rel.Param("shift"), 168);
  EXPECT_EQ(st.rel.window, 84);
  const Method st4k = ResolveMethod(ParseMethod("string"), RopeGeometry{4096, 64, 1e4}, 4096);
  EXPECT_EQ(st4k.rel.Param("shift"), 1351);
  EXPECT_EQ(st4k.rel.window, 128);
  const Method st_given = ResolveMethod(ParseMethod("string:shift=100"), geo, 512);
  EXPECT_EQ(st_given.rel.window, 50);
  // DCA: chunk = L * 3 // 4 = 384, local window = L // 16 = 32 (ChunkLlama).
  const Method dca = ResolveMethod(ParseMethod("dca"), geo, 4096);
  EXPECT_EQ(dca.rel.Param("chunk"), 384);
  EXPECT_EQ(dca.rel.window, 32);
}

TEST(MethodResolve, BlockwiseDefaultsAndErrors) {
  // Blockwise causal attention: block B = L (rounded down to even), half-blocks of B/2.
  EXPECT_EQ(ParseMethod("blockwise").mask.kind, MaskKind::kBlock);
  EXPECT_EQ(ResolveMethod(ParseMethod("blockwise"), RopeGeometry{512, 8, 1e4}, 4096).mask.window,
            512);
  EXPECT_EQ(ResolveMethod(ParseMethod("blockwise"), RopeGeometry{101, 8, 1e4}, 4096).mask.window,
            100);
  EXPECT_EQ(CanonicalSpec(ParseMethod("blockwise:window=64")), "blockwise:window=64");
  ExpectSpecError("blockwise:window=7", {"window=7", "even"});
  ExpectSpecError("blockwise:window=0", {"window=0"});
  ExpectValidateError("blockwise:window=8192", RopeGeometry{512, 8, 1e4}, 4096,
                      {"window=8192", "larger than the context"});
  // Which keys query i sees with B = 8 (half-blocks of 4): its own half-block and the previous.
  const AttentionPlan p =
      MakeAttentionPlan(ParseMethod("blockwise:window=8"), RopeGeometry{8, 8, 1e4}, 64);
  EXPECT_TRUE(p.Visible(3, 0));   // first half-block: causal
  EXPECT_TRUE(p.Visible(7, 0));   // half-block 1 sees half-block 0
  EXPECT_FALSE(p.Visible(8, 3));  // half-block 2 starts at key 4
  EXPECT_TRUE(p.Visible(8, 4));
  EXPECT_TRUE(p.Visible(11, 4));
  EXPECT_FALSE(p.Visible(12, 7));
  EXPECT_FALSE(p.Visible(5, 6));  // never a later key
}

// ---------------------------------------------------------------------------------------------
// llama.cpp flags

TEST(MethodLlamaCpp, Translations) {
  LlamaCppRopeFlags none;
  EXPECT_FALSE(none.Any());
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(none)), "direct");

  LlamaCppRopeFlags f;
  f.rope_scale = 4.0;
  EXPECT_TRUE(f.Any());
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "pi:factor=4");  // no --rope-scaling: linear

  f = {};
  f.rope_freq_scale = 0.25;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "pi:factor=4");
  f.rope_scale = 4.0;  // both, agreeing
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "pi:factor=4");

  f = {};
  f.rope_freq_scale = 0.0;  // 0: the model's, i.e. not given
  f.rope_freq_base = 0.0;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "direct");

  f = {};
  f.rope_scaling = "linear";
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "pi");

  f = {};
  f.rope_scaling = "none";
  f.rope_freq_base = 500000.0;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "direct:base=500000");

  f = {};
  f.rope_scaling = "yarn";
  f.rope_scale = 8.0;
  f.yarn_orig_ctx = 512;
  f.yarn_beta_fast = 16.0;
  f.yarn_beta_slow = 2.0;
  f.yarn_ext_factor = 1.0;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)),
            "yarn:factor=8,orig=512,beta_fast=16,beta_slow=2");

  // llama.cpp's "unset" values leave YaRN's defaults.
  f = {};
  f.rope_scaling = "yarn";
  f.yarn_ext_factor = -1.0;
  f.yarn_attn_factor = -1.0;
  f.yarn_beta_fast = -1.0;
  f.yarn_beta_slow = -1.0;
  f.yarn_orig_ctx = 0;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "yarn");

  // --yarn-attn-factor F multiplies YaRN's magnitude: F * (0.1 ln s + 1) = 2 * (0.1 ln 4 + 1).
  f = {};
  f.rope_scaling = "yarn";
  f.rope_scale = 4.0;
  f.yarn_attn_factor = 2.0;
  const Method y = MethodFromLlamaCpp(f);
  ExpectClose(y.rope.attention_factor, 2.277258872223978, "attn factor");
  ExpectClose(ComputeFrequencies(y.rope, Geo8(), 4.0).attention_factor, 2.277258872223978,
              "attn factor in the frequencies");

  f = {};
  f.grp_attn_n = 4;
  f.grp_attn_w = 128;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "self-extend:group=4,window=128");
  f.grp_attn_w.reset();  // llama.cpp's default width
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "self-extend:group=4,window=512");
  f.rope_freq_base = 20000.0;
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "self-extend:group=4,window=512,base=20000");
  f = {};
  f.grp_attn_n = 1;  // off
  EXPECT_EQ(CanonicalSpec(MethodFromLlamaCpp(f)), "direct");
}

TEST(MethodLlamaCpp, Errors) {
  auto expect = [](const LlamaCppRopeFlags& f, std::initializer_list<std::string_view> parts) {
    ExpectError([&] { MethodFromLlamaCpp(f); }, parts);
  };
  LlamaCppRopeFlags f;
  f.rope_scale = 4.0;
  f.rope_freq_scale = 0.5;
  expect(f, {"--rope-scale=4 and --rope-freq-scale=0.5 disagree"});
  f = {};
  f.rope_scale = 0.5;
  expect(f, {"--rope-scale=0.5 is below 1"});
  f = {};
  f.rope_freq_scale = 2.0;
  expect(f, {"--rope-freq-scale=2 is not in (0, 1]"});
  f = {};
  f.rope_freq_base = 1.0;
  expect(f, {"--rope-freq-base=1 is not above 1"});
  f = {};
  f.rope_scaling = "ntk";
  expect(f, {"--rope-scaling=ntk is not a scaling type", "none, linear, yarn"});
  f = {};
  f.rope_scaling = "none";
  f.rope_scale = 2.0;
  expect(f, {"--rope-scaling none with a scale of 2"});
  f = {};
  f.rope_scaling = "yarn";
  f.yarn_ext_factor = 0.5;
  expect(f, {"--yarn-ext-factor=0.5 is not supported"});
  f = {};
  f.rope_scale = 2.0;
  f.yarn_ext_factor = 1.0;
  expect(f, {"--yarn-ext-factor=1 with --rope-scaling linear"});
  f = {};
  f.rope_scale = 2.0;
  f.yarn_beta_fast = 16.0;
  expect(f, {"--yarn-beta-fast=16 needs --rope-scaling yarn", "found: linear"});
  f = {};
  f.yarn_orig_ctx = 4096;
  expect(f, {"--yarn-orig-ctx=4096 needs --rope-scaling yarn", "found: none"});
  f = {};
  f.rope_scaling = "yarn";
  f.yarn_beta_fast = 1.0;
  f.yarn_beta_slow = 2.0;
  expect(f, {"--yarn-beta-fast=1 is not above --yarn-beta-slow=2"});
  f = {};
  f.rope_scaling = "yarn";
  f.yarn_attn_factor = 2.0;
  expect(f, {"--yarn-attn-factor=2 needs --rope-scale or --rope-freq-scale"});
  f = {};
  f.grp_attn_n = 3;
  f.grp_attn_w = 100;
  expect(f, {"--grp-attn-w=100 is not a multiple of --grp-attn-n=3"});
  f = {};
  f.grp_attn_w = 256;
  expect(f, {"--grp-attn-w=256 has no effect without --grp-attn-n"});
  f = {};
  f.grp_attn_n = 0;
  expect(f, {"--grp-attn-n=0 is not positive"});
  f = {};
  f.grp_attn_n = 4;
  f.rope_scale = 2.0;
  expect(f, {"--grp-attn-n=4 (Self-Extend) with --rope-scaling linear"});
}

// ---------------------------------------------------------------------------------------------
// HF rope_scaling

TEST(MethodHf, Translations) {
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(
                R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1})")),
            "yarn:factor=4,orig=4096");
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(R"({"type": "linear", "factor": 2})")),
            "pi:factor=2");
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(
                R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})")),
            "llama3:factor=8,orig=8192");
  const Method lr = MethodFromHfRopeScaling(
      R"({"type": "longrope", "short_factor": [1, 1.5, 2, 4], "long_factor": [2, 3, 4, 8]})");
  EXPECT_EQ(lr.rope.scaling, RopeScaling::kLongRope);
  EXPECT_EQ(lr.rope.short_factor, (std::vector<double>{1.0, 1.5, 2.0, 4.0}));
  EXPECT_EQ(lr.rope.long_factor, (std::vector<double>{2.0, 3.0, 4.0, 8.0}));
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(R"({"rope_type": "dynamic", "factor": 1.0})")),
            "dynamic-ntk");
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(R"({"rope_type": "default"})")), "direct");
  const Method y = MethodFromHfRopeScaling(
      R"({"rope_type": "yarn", "type": "yarn", "factor": 40, "mscale": 0.707,
          "mscale_all_dim": 0.707, "truncate": false, "attention_factor": null,
          "rope_theta": 1000000})");
  EXPECT_EQ(CanonicalSpec(y),
            "yarn:factor=40,mscale=0.707,mscale_all_dim=0.707,truncate=false,base=1000000");
  // Same frequencies as the spec of the same settings.
  const RopeGeometry geo{4096, 8, 10000.0};
  EXPECT_EQ(ComputeFrequencies(y.rope, geo, 40.0).thetas,
            ComputeFrequencies(ParseMethod(CanonicalSpec(y)).rope, geo, 40.0).thetas);
}

TEST(MethodHf, Errors) {
  auto expect = [](std::string_view json, std::initializer_list<std::string_view> parts) {
    SCOPED_TRACE(std::string(json));
    ExpectError([&] { MethodFromHfRopeScaling(json); }, parts);
  };
  expect(R"({"rope_type": "yarn", "factor": 4,})", {"rope_scaling: not valid JSON"});
  expect(R"([1, 2])", {"is not a JSON object"});
  expect(R"({"factor": 4})", {"no rope_type"});
  expect(R"({"rope_type": "su"})", {"rope_type=\"su\" is not supported", "default, linear"});
  expect(R"({"rope_type": 3})", {"rope_type=3 is not a string"});
  expect(R"({"rope_type": "yarn", "type": "linear"})", {"disagree"});
  expect(R"({"rope_type": "yarn", "factor": 4, "foo": 1})",
         {"rope_scaling (rope_type \"yarn\")", "unknown key \"foo\"",
          "original_max_position_embeddings"});
  expect(R"({"rope_type": "llama3", "beta_fast": 32})", {"unknown key \"beta_fast\""});
  expect(R"({"rope_type": "default", "factor": 2})", {"unknown key \"factor\""});
  expect(R"({"rope_type": "dynamic", "factor": 2.0})",
         {"rope_scaling (rope_type \"dynamic\")", "factor=2.0 is not supported"});
  expect(R"({"rope_type": "yarn", "factor": "4"})", {"factor=\"4\" is not a number"});
  expect(R"({"rope_type": "yarn", "factor": 0.5})", {"factor=0.5 is below 1"});
  expect(R"({"rope_type": "yarn", "truncate": 1})", {"truncate=1 is not a boolean"});
  expect(R"({"rope_type": "yarn", "original_max_position_embeddings": 4096.5})",
         {"original_max_position_embeddings=4096.5 is not a positive integer"});
  expect(R"({"rope_type": "longrope", "short_factor": [1, "x"]})",
         {"short_factor=[1,\"x\"] has \"x\", which is not a number"});
  expect(R"({"rope_type": "longrope", "long_factor": []})", {"long_factor=[] is not a list"});
  expect(R"({"rope_type": "llama3", "low_freq_factor": 4, "high_freq_factor": 1})",
         {"high=1 is not above low=4"});
}

}  // namespace
}  // namespace stretch
