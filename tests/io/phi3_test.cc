// Phi-3 (src/model/families/phi3.cc) in both formats: fused projections (qkv_proj / attn_qkv,
// gate_up_proj / ffn_up) split into and joined from stretch's separate weights; a random model
// written as an HF folder and as GGUF reads back bit for bit as phi3; the fused rows are read as
// transformers' Phi3Attention and Phi3MLP read them (q, then k, then v; gate, then up), which the
// scores and the feed-forward computed from the files' tensors check; LongRoPE goes to both
// formats as Phi-3's own tools write it; Phi-3's sliding_window is read as Mistral's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "reference/method_llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/safetensors.h"
#include "src/model/family.h"
#include "src/position/method.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/method_specs.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::Dot;
using testing::ExpectSameWeights;
using testing::Head;
using testing::ReadText;
using testing::RotateHalf;
using testing::RotateInterleaved;

class Phi3FilesTest : public testing::TempDirTest {
 protected:
  Phi3FilesTest() : TempDirTest("stretch_phi3_") {}
  static ModelConfig Config() {
    ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads of 8, 2 kv heads, hidden 56
    c.family = "phi3";
    return c;
  }
  // LongRoPE with lists of its own, from the trained length to 4 times it.
  static Method LongRope(const ModelConfig& c) {
    Method m = ParseMethod("longrope");
    m.rope.factor = 4.0;
    m.rope.original_length = c.seq_len;
    for (int t = 0; t < c.head_dim() / 2; ++t) {
      m.rope.short_factor.push_back(1.0 + 0.25 * t);
      m.rope.long_factor.push_back(2.0 + 0.5 * t);
    }
    return m;
  }
};

std::vector<float> RowsOf(const std::vector<float>& w, int64_t first, int64_t count, int64_t cols) {
  return std::vector<float>(w.begin() + first * cols, w.begin() + (first + count) * cols);
}

TEST_F(Phi3FilesTest, HfFolderRoundTripsBitForBitWithFusedProjections) {
  const Model m = testing::RandomModel(Config(), 3);
  EXPECT_EQ(FamilyOf(m.config).name, std::string("phi3"));
  const std::string dir = Path("phi3");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  EXPECT_NE(config.find("\"Phi3ForCausalLM\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"model_type\": \"phi3\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"sliding_window\": null"), std::string::npos) << config;
  const ModelConfig& c = m.config;
  const SafetensorsFile f(dir + "/model.safetensors");
  ASSERT_NE(f.Find("model.layers.1.self_attn.qkv_proj.weight"), nullptr);
  EXPECT_EQ(f.Find("model.layers.1.self_attn.qkv_proj.weight")->shape,
            (std::vector<int64_t>{int64_t{c.n_heads} * c.head_dim() + 2 * c.kv_dim(), c.dim}));
  EXPECT_EQ(f.Find("model.layers.1.mlp.gate_up_proj.weight")->shape,
            (std::vector<int64_t>{2 * c.hidden_dim, c.dim}));
  EXPECT_EQ(f.Find("model.layers.1.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(f.Find("model.layers.1.mlp.gate_proj.weight"), nullptr);
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.family, "phi3");
  ExpectSameWeights(back, m);
}

TEST_F(Phi3FilesTest, GgufRoundTripsBitForBitAndHoldsHfsFusedRows) {
  const Model m = testing::RandomModel(Config(), 4);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  const std::string path = Path("phi3.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "phi3");
  EXPECT_EQ(g.FindTensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(g.FindTensor("blk.0.ffn_gate.weight"), nullptr);
  // llama.cpp's converter copies the fused tensors as they are (phi3 runs NEOX RoPE).
  const SafetensorsFile hf(Path("hf") + "/model.safetensors");
  const auto raw = [&](const std::string& name) {
    const GgufTensorInfo* t = g.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return std::vector<float>{};
    std::vector<float> v(static_cast<size_t>(t->elements));
    g.ReadFloats(*t, v);
    return v;
  };
  EXPECT_EQ(raw("blk.1.attn_qkv.weight"),
            hf.Read<float>("model.layers.1.self_attn.qkv_proj.weight"));
  EXPECT_EQ(raw("blk.1.ffn_up.weight"), hf.Read<float>("model.layers.1.mlp.gate_up_proj.weight"));
  const Model back = LoadGgufModel(path);
  EXPECT_EQ(back.config.family, "phi3");
  ExpectSameWeights(back, m);
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// What Phi3Attention and Phi3MLP compute from the folder's fused tensors equals what the engine's
// separate weights compute; the parts taken in another order (k before q, up before gate) do not.
TEST_F(Phi3FilesTest, FusedRowsAreReadAsPhi3AttentionAndPhi3MlpReadThem) {
  const Model m = testing::RandomModel(Config(), 5);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  const SafetensorsFile f(Path("hf") + "/model.safetensors");
  const Model loaded = LoadHfModel(Path("hf"));
  const ModelConfig& c = loaded.config;
  const int D = c.head_dim(), H = c.n_heads, G = c.n_kv_heads, C = c.dim, F = c.hidden_dim;
  const std::vector<float> qkv = f.Read<float>("model.layers.0.self_attn.qkv_proj.weight");
  const std::vector<float> gate_up = f.Read<float>("model.layers.0.mlp.gate_up_proj.weight");
  // Phi3Attention: query_pos = H D; k the next G D rows, v the last G D.
  const std::vector<float> wq = RowsOf(qkv, 0, H * D, C), wk = RowsOf(qkv, H * D, G * D, C),
                           wv = RowsOf(qkv, H * D + G * D, G * D, C);
  const LayerWeights& L = loaded.weights.layers[0];
  EXPECT_EQ(wv, L.wv);
  Rng rng(6);
  std::vector<double> xi(static_cast<size_t>(C)), xj(xi.size());
  for (double& v : xi) v = rng.Normal();
  for (double& v : xj) v = rng.Normal();
  double swapped = 0;
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / G);
    const double hf = Dot(RotateHalf(Head(wq, {}, xi, h, D), 9, c.rope_base),
                          RotateHalf(Head(wk, {}, xj, g, D), 2, c.rope_base));
    const double ours = Dot(RotateInterleaved(Head(L.wq, {}, xi, h, D), 9, c.rope_base),
                            RotateInterleaved(Head(L.wk, {}, xj, g, D), 2, c.rope_base));
    EXPECT_NEAR(ours, hf, 1e-10 * (1.0 + std::fabs(hf))) << "head " << h;
    // k's rows read where q's are: other scores.
    const double other =
        Dot(RotateHalf(Head(RowsOf(qkv, H * D, G * D, C), {}, xi, g, D), 9, c.rope_base),
            RotateHalf(Head(wk, {}, xj, g, D), 2, c.rope_base));
    swapped = std::max(swapped, std::fabs(other - hf));
  }
  EXPECT_GT(swapped, 1e-3) << "the test cannot tell q's rows from k's";
  // Phi3MLP: gate, up = chunk(2); up * silu(gate). The engine: w3 x * silu(w1 x).
  double worst = 0, order = 0;
  for (int r = 0; r < F; ++r) {
    const std::vector<double> gate = Head(gate_up, {}, xi, r, 1),
                              up = Head(gate_up, {}, xi, F + r, 1);
    const double hf = up[0] * Silu(gate[0]);
    const double ours = Head(L.w3, {}, xi, r, 1)[0] * Silu(Head(L.w1, {}, xi, r, 1)[0]);
    worst = std::max(worst, std::fabs(ours - hf));
    order = std::max(order, std::fabs(gate[0] * Silu(up[0]) - hf));
  }
  EXPECT_LE(worst, 1e-10);
  EXPECT_GT(order, 1e-3) << "the test cannot tell the gate's half from the up half";
}

// The model read from a Phi-3 folder (fused qkv_proj and gate_up_proj) against the double
// reference of the weights it was written from, under every training-free method: within 8 times
// the float reference's own distance (as tests/model/method_model_test.cc). The reference with the
// gate and up halves swapped, as a reader that split gate_up_proj the other way would run, is far
// off.
TEST_F(Phi3FilesTest, TheFusedFileEqualsTheReferenceUnderEveryMethodAndFailsASwappedSplit) {
  const Model m = testing::RandomModel(Config(), 31);
  SaveHfModel(m, Path("fwd"), SafetensorsDtype::kF32);
  const Model loaded = LoadHfModel(Path("fwd"));
  const ModelConfig& c = m.config;
  const std::vector<int> tokens = testing::RandomTokens(150, c.vocab_size, 32);
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  Model swapped = m;
  for (LayerWeights& l : swapped.weights.layers) std::swap(l.w1, l.w3);
  for (const std::string& spec : testing::EveryMethodSpec(c.head_dim(), c.seq_len)) {
    SCOPED_TRACE(spec);
    const AttentionPlan plan = MakeAttentionPlan(ParseMethod(spec), geo, 150);
    const ref::PositionRef pos = ref::MethodPositionRef(plan);
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
    const double tol =
        8 * testing::MaxAbsDiff(ref::LlamaForwardRef<float>(m, tokens, pos), exact) + 1e-6;
    const std::vector<float> got = testing::Logits(loaded, spec, tokens);
    EXPECT_LE(testing::MaxAbsDiff(got, exact), tol);
    EXPECT_GT(testing::MaxAbsDiff(got, ref::LlamaForwardRef<double>(swapped, tokens, pos)),
              100 * tol);
  }
}

TEST_F(Phi3FilesTest, LongRopeGoesToBothFormatsAsPhi3sToolsWriteIt) {
  const Model m = testing::RandomModel(Config(), 7);
  const Method longrope = LongRope(m.config);
  SaveGgufModel(m, Path("lr.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr, &longrope);
  const GgufFile g = GgufFile::Open(Path("lr.gguf"));
  EXPECT_EQ(g.Find("phi3.rope.scaling.type"), nullptr);  // as conversion/phi.py: the lists say it
  EXPECT_EQ(g.Int("phi3.rope.scaling.original_context_length"), m.config.seq_len);
  EXPECT_EQ(g.Int("phi3.context_length"), 4 * m.config.seq_len);
  EXPECT_NEAR(g.Float("phi3.rope.scaling.attn_factor"),
              std::sqrt(1.0 + std::log(4.0) / std::log(static_cast<double>(m.config.seq_len))),
              1e-6);
  ASSERT_NE(g.FindTensor("rope_factors_long.weight"), nullptr);
  ASSERT_NE(g.FindTensor("rope_factors_short.weight"), nullptr);
  const GgufModelHeader h = ReadGgufModelHeader(Path("lr.gguf"));
  EXPECT_EQ(h.config.seq_len, m.config.seq_len);
  const Method back = ParseMethod(h.method_spec);
  EXPECT_EQ(back.rope.short_factor, longrope.rope.short_factor);
  EXPECT_EQ(back.rope.long_factor, longrope.rope.long_factor);
  ExpectSameWeights(LoadGgufModel(Path("lr.gguf")), m);

  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32, {}, &longrope);
  const std::string config = ReadText(Path("hf") + "/config.json");
  EXPECT_NE(config.find("\"rope_type\": \"longrope\""), std::string::npos) << config;
  const HfModelHeader hh = ReadHfModelHeader(Path("hf"));
  EXPECT_EQ(hh.max_position_embeddings, 4 * m.config.seq_len);
  EXPECT_EQ(hh.config.seq_len, m.config.seq_len);
  const Method from_hf = MethodFromHfRopeScaling(hh.rope_scaling_json);
  EXPECT_EQ(from_hf.rope.short_factor, longrope.rope.short_factor);
  EXPECT_EQ(from_hf.rope.long_factor, longrope.rope.long_factor);

  // llama.cpp reads the factor tensors for phi3, not for llama: a LLaMA file refuses LongRoPE.
  Model llama = m;
  llama.config.family.clear();
  try {
    SaveGgufModel(llama, Path("llama.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr,
                  &longrope);
    ADD_FAILURE() << "a llama GGUF with LongRoPE was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longrope"), std::string::npos) << e.what();
  }
}

TEST_F(Phi3FilesTest, SlidingWindowIsReadAsMistralsAndZeroOrTheContextIsNone) {
  ModelConfig c = Config();
  c.seq_len = 64;
  c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{.window = 16});
  const Model m = testing::RandomModel(c, 8);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  EXPECT_NE(ReadText(Path("hf") + "/config.json").find("\"sliding_window\": 16"),
            std::string::npos);
  EXPECT_EQ(ReadHfModelHeader(Path("hf")).config.attention.UniformWindow(), 16);
  SaveGgufModel(m, Path("w.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr);
  EXPECT_EQ(ReadGgufModelHeader(Path("w.gguf")).config.attention.UniformWindow(), 16);
  // The converter writes 0 for a model without a window (Phi-4); a window as long as the context
  // changes nothing.
  for (const int64_t window : {int64_t{0}, int64_t{64}}) {
    Model plain = m;
    plain.config.attention.layers.clear();
    SaveGgufModel(plain, Path("p.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr);
    const GgufFile in = GgufFile::Open(Path("p.gguf"));
    std::vector<std::pair<std::string, GgufValue>> kv(in.metadata().begin(), in.metadata().end());
    kv.emplace_back("phi3.attention.sliding_window", GgufU32(static_cast<uint32_t>(window)));
    std::vector<GgufTensorOut> tensors;
    for (const GgufTensorInfo& t : in.tensors()) {
      const auto bytes = in.TensorData(t);
      tensors.push_back({t.name, t.ne, t.type, std::vector<uint8_t>(bytes.begin(), bytes.end())});
    }
    WriteGguf(Path("p2.gguf"), kv, tensors);
    EXPECT_EQ(ReadGgufModelHeader(Path("p2.gguf")).config.attention.UniformWindow(), 0) << window;
  }
}

}  // namespace
}  // namespace stretch
