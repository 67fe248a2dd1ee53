// Tests of Hugging Face model folders (src/io/hf_model.h). Folders are built here by hand from
// transformers' naming (config.json keys, model.layers.N.* tensors, the index's weight_map) with
// the safetensors writer, then read; or written by SaveHfModel and read back. The RoPE layout is
// checked against transformers' rotate_half formula computed here in double.
#include "src/io/hf_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/position/method.h"
#include "tests/testing/config_checks.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::ExpectSameConfig;

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::WriteBytes;

// Whether `text` contains every part (the messages must name the file and the key or tensor).
::testing::AssertionResult Names(const std::string& text,
                                 std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) {
    if (text.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "\"" << text << "\" does not name \"" << p << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every tensor of two models, by stretch's names, compared bit for bit.
void ExpectSameWeights(const Model& a, const Model& b) {
  Model x = a, y = b;
  std::vector<std::pair<std::string, std::vector<float>*>> ys;
  y.weights.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
    ys.push_back({name, &v});
  });
  size_t k = 0;
  x.weights.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
    ASSERT_LT(k, ys.size());
    EXPECT_EQ(name, ys[k].first);
    EXPECT_TRUE(SameBits(v, *ys[k].second)) << name;
    ++k;
  });
  EXPECT_EQ(k, ys.size());
}

// ---- hand-built folders ------------------------------------------------------------------------

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
};

// The sizes of a hand-built model: H heads of D = C / H, G key/value heads.
struct Sizes {
  int C = 32, F = 48, L = 2, H = 4, G = 2, V = 20;
  bool tied = false;
};

json Config(const Sizes& s) {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", s.C},
              {"intermediate_size", s.F},
              {"num_hidden_layers", s.L},
              {"num_attention_heads", s.H},
              {"num_key_value_heads", s.G},
              {"head_dim", s.C / s.H},
              {"vocab_size", s.V},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 10000.0},
              {"rope_scaling", nullptr},
              {"tie_word_embeddings", s.tied},
              {"hidden_act", "silu"},
              {"attention_bias", false},
              {"mlp_bias", false},
              {"torch_dtype", "float32"}};
}

std::vector<Tensor> Tensors(const Sizes& s, uint64_t seed) {
  Rng rng(seed);
  std::vector<Tensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng.Normal());
    ts.push_back({std::move(name), std::move(shape), std::move(v)});
  };
  const int64_t C = s.C, F = s.F, KV = int64_t{s.C} / s.H * s.G;
  add("model.embed_tokens.weight", {s.V, C});
  for (int l = 0; l < s.L; ++l) {
    const std::string b = "model.layers." + std::to_string(l) + ".";
    add(b + "input_layernorm.weight", {C});
    add(b + "self_attn.q_proj.weight", {C, C});
    add(b + "self_attn.k_proj.weight", {KV, C});
    add(b + "self_attn.v_proj.weight", {KV, C});
    add(b + "self_attn.o_proj.weight", {C, C});
    add(b + "post_attention_layernorm.weight", {C});
    add(b + "mlp.gate_proj.weight", {F, C});
    add(b + "mlp.up_proj.weight", {F, C});
    add(b + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  if (!s.tied) add("lm_head.weight", {s.V, C});
  return ts;
}

Tensor* Find(std::vector<Tensor>& ts, const std::string& name) {
  for (Tensor& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}
const Tensor& Get(const std::vector<Tensor>& ts, const std::string& name) {
  for (const Tensor& t : ts) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

// One safetensors file holding `ts` in their dtypes (F16/BF16 rounded by the library's encoder;
// I32 and F64 for the dtype refusals).
void WriteShard(const std::string& path, const std::vector<const Tensor*>& ts) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  std::deque<std::vector<uint8_t>> keep;
  for (const Tensor* t : ts) {
    switch (t->dtype) {
      case SafetensorsDtype::kF32:
        w.Add<float>(t->name, t->shape, std::span<const float>(t->values));
        break;
      case SafetensorsDtype::kF16:
      case SafetensorsDtype::kBF16:
        keep.push_back(EncodeTensor(
            t->values, t->dtype == SafetensorsDtype::kF16 ? GgmlType::kF16 : GgmlType::kBF16));
        w.AddRaw(t->name, t->dtype, t->shape, std::as_bytes(std::span<const uint8_t>(keep.back())));
        break;
      case SafetensorsDtype::kI32:
        w.AddOwned<int32_t>(t->name, t->shape,
                            std::vector<int32_t>(t->values.begin(), t->values.end()));
        break;
      case SafetensorsDtype::kF64:
        w.AddOwned<double>(t->name, t->shape,
                           std::vector<double>(t->values.begin(), t->values.end()));
        break;
      default: ADD_FAILURE() << "no writer for " << SafetensorsDtypeName(t->dtype);
    }
  }
  w.Write(path);
}

void WriteText(const std::string& path, const std::string& text) { WriteBytes(path, text); }

// dir/config.json and dir/model.safetensors.
void WriteFolder(const std::string& dir, const json& config, const std::vector<Tensor>& ts) {
  fs::create_directories(dir);
  WriteText(dir + "/config.json", config.dump(2));
  std::vector<const Tensor*> all;
  for (const Tensor& t : ts) all.push_back(&t);
  WriteShard(dir + "/model.safetensors", all);
}

constexpr const char* kShardA = "model-00001-of-00002.safetensors";
constexpr const char* kShardB = "model-00002-of-00002.safetensors";

// dir/config.json and two shards: the embedding and layer 0 in A, the rest in B. Returns the
// index (not written: the caller damages it or writes it with WriteIndex).
json WriteTwoShards(const std::string& dir, const json& config, const std::vector<Tensor>& ts) {
  fs::create_directories(dir);
  WriteText(dir + "/config.json", config.dump(2));
  std::vector<const Tensor*> a, b;
  json map = json::object();
  for (const Tensor& t : ts) {
    const bool first =
        t.name == "model.embed_tokens.weight" || t.name.starts_with("model.layers.0.");
    (first ? a : b).push_back(&t);
    map[t.name] = first ? kShardA : kShardB;
  }
  WriteShard(dir + "/" + kShardA, a);
  WriteShard(dir + "/" + kShardB, b);
  return json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
}

void WriteIndex(const std::string& dir, const json& index) {
  WriteText(dir + "/model.safetensors.index.json", index.dump(2));
}

class HfModelTest : public testing::TempDirTest {
 protected:
  HfModelTest() : TempDirTest("stretch_hf_") {}
  std::vector<std::string> Entries(const std::string& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// ---- detection ---------------------------------------------------------------------------------

TEST_F(HfModelTest, LooksLikeHfFolderWantsADirectoryWithConfigJson) {
  EXPECT_FALSE(LooksLikeHfFolder(Path("absent")));
  EXPECT_FALSE(LooksLikeHfFolder(dir_.string()));  // empty, as a fresh training run's directory
  File("config.json", "{}");
  EXPECT_TRUE(LooksLikeHfFolder(dir_.string()));
  EXPECT_FALSE(LooksLikeHfFolder(Path("config.json")));  // a file, not a folder
  fs::create_directories(Path("d/config.json"));
  EXPECT_FALSE(LooksLikeHfFolder(Path("d")));  // config.json must be a file
}

// ---- round trips -------------------------------------------------------------------------------

const std::string kStoriesRel = "models/stories260K/stories260K.bin";

TEST_F(HfModelTest, Stories260KRoundTripIsBitIdentical) {
  const std::string bin = testing::SharedPath(kStoriesRel);
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const std::string dir = Path("s260");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"config.json", "generation_config.json",
                                                    "model.safetensors"}));
  const HfModelHeader h = ReadHfModelHeader(dir);
  EXPECT_EQ(h.format, "Hugging Face folder (LlamaForCausalLM, F32)");
  EXPECT_EQ(h.architecture, "LlamaForCausalLM");
  EXPECT_EQ(h.rope_scaling_json, "");
  EXPECT_EQ(h.weight_files, std::vector<std::string>{"model.safetensors"});
  const Model g = LoadHfModel(dir);
  EXPECT_EQ(g.source, dir + " (Hugging Face folder (LlamaForCausalLM, F32))");
  ExpectSameConfig(m.config, g.config);
  ExpectSameWeights(m, g);
  // What transformers reads: the keys, and the metadata its loader insists on.
  const json c = json::parse(ReadBytes(dir + "/config.json"));
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["hidden_size"], m.config.dim);
  EXPECT_EQ(c["num_key_value_heads"], m.config.n_kv_heads);
  EXPECT_EQ(c["max_position_embeddings"], m.config.seq_len);
  EXPECT_EQ(c["tie_word_embeddings"], m.config.shared_classifier);
  EXPECT_EQ(c["rms_norm_eps"].dump(), "1e-05");  // the float's shortest decimal
  EXPECT_EQ(c["rope_theta"].dump(), "10000.0");
  EXPECT_TRUE(c["rope_scaling"].is_null());
  EXPECT_EQ(c["torch_dtype"], "float32");
  // No vocabulary written beside it: its special tokens are not known (null, as transformers
  // writes an unknown one); with one, that vocabulary's ids.
  EXPECT_TRUE(c["bos_token_id"].is_null());
  EXPECT_TRUE(c["eos_token_id"].is_null());
  const std::string with_ids = Path("s260-ids");
  SaveHfModel(m, with_ids, SafetensorsDtype::kF32, {}, nullptr, {128000, 128009});
  for (const char* file : {"/config.json", "/generation_config.json"}) {
    const json j = json::parse(ReadBytes(with_ids + file));
    EXPECT_EQ(j["bos_token_id"], 128000) << file;
    EXPECT_EQ(j["eos_token_id"], 128009) << file;
  }
  const SafetensorsFile f(dir + "/model.safetensors");
  EXPECT_EQ(f.GetMetadata("format"), "pt");
  EXPECT_EQ(f.Find("lm_head.weight") != nullptr, !m.config.shared_classifier);
  // The stored q is HF's layout: row i of a head is stretch's row 2i, row D/2 + i its row 2i + 1.
  const int64_t D = m.config.head_dim(), C = m.config.dim;
  const std::vector<float> q = f.Read<float>("model.layers.0.self_attn.q_proj.weight");
  const std::vector<float>& wq = m.weights.layers[0].wq;
  for (int64_t i = 0; i < D / 2; ++i) {
    EXPECT_EQ(q[static_cast<size_t>(i * C)], wq[static_cast<size_t>(2 * i * C)]) << i;
    EXPECT_EQ(q[static_cast<size_t>((D / 2 + i) * C)], wq[static_cast<size_t>((2 * i + 1) * C)]);
  }
}

// BF16 round to nearest even, written here from the format (the high half of a float32).
float RoundBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7FFF + ((u >> 16) & 1);
  return std::bit_cast<float>(u & 0xFFFF0000u);
}

TEST_F(HfModelTest, HalfAndBfloatWritesReadBackAsTheRoundedValues) {
  for (bool shared : {false, true}) {
    ModelConfig c = testing::TinyConfig();
    c.shared_classifier = shared;
    const Model m = testing::RandomModel(c, shared ? 3 : 4);
    for (SafetensorsDtype d : {SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
      const std::string name(SafetensorsDtypeName(d));
      SCOPED_TRACE(name + (shared ? " shared" : " untied"));
      const std::string dir = Path(name + (shared ? "_s" : "_u"));
      SaveHfModel(m, dir, d);
      EXPECT_EQ(ReadHfModelHeader(dir).format,
                "Hugging Face folder (LlamaForCausalLM, " + name + ")");
      EXPECT_EQ(json::parse(ReadBytes(dir + "/config.json"))["torch_dtype"],
                d == SafetensorsDtype::kF16 ? "float16" : "bfloat16");
      const SafetensorsFile file(dir + "/model.safetensors");
      for (const SafetensorsTensor& t : file.tensors()) {
        EXPECT_EQ(t.dtype, d) << t.name;  // every tensor, norms included, as torch_dtype says
      }
      const Model g = LoadHfModel(dir);
      ExpectSameConfig(m.config, g.config);
      Model rounded = m;
      rounded.weights.ForEach([&](const std::string&, std::vector<float>& v, bool) {
        for (float& x : v) {
          x = d == SafetensorsDtype::kF16 ? HalfToFloat(FloatToHalf(x)) : RoundBf16(x);
        }
      });
      ExpectSameWeights(rounded, g);
    }
  }
}

TEST_F(HfModelTest, ShardedFolderLoadsEqualToTheSingleFile) {
  const Model m = testing::RandomModel(testing::TinyConfig(), 7);
  const std::string one = Path("one"), two = Path("two");
  SaveHfModel(m, one, SafetensorsDtype::kF32);
  // Split the written file into two shards and an index, by hand.
  std::vector<Tensor> ts;
  const SafetensorsFile f(one + "/model.safetensors");
  for (const SafetensorsTensor& t : f.tensors()) {
    ts.push_back({t.name, t.shape, f.Read<float>(t.name)});
  }
  WriteIndex(two, WriteTwoShards(two, json::parse(ReadBytes(one + "/config.json")), ts));
  const HfModelHeader h = ReadHfModelHeader(two);
  EXPECT_EQ(h.format, "Hugging Face folder (LlamaForCausalLM, F32, 2 shards)");
  EXPECT_EQ(h.weight_files, (std::vector<std::string>{kShardA, kShardB}));
  const Model a = LoadHfModel(one), b = LoadHfModel(two);
  ExpectSameConfig(a.config, b.config);
  ExpectSameWeights(a, b);
  ExpectSameWeights(m, b);
}

TEST_F(HfModelTest, LinearInterpolationIsWrittenAsLinearRopeScaling) {
  ModelConfig c = testing::TinyConfig();
  c.rope_interpolation = 2.5f;
  const std::string dir = Path("pi");
  SaveHfModel(testing::RandomModel(c, 5), dir, SafetensorsDtype::kF32);
  const json j = json::parse(ReadBytes(dir + "/config.json"));
  EXPECT_EQ(j["rope_scaling"], (json{{"factor", 2.5}, {"type", "linear"}}));
  const HfModelHeader h = ReadHfModelHeader(dir);
  EXPECT_EQ(h.rope_type, "linear");
  EXPECT_EQ(h.rope_linear_factor, 2.5);
  EXPECT_EQ(h.config.rope_interpolation, 1.0f);  // the caller's decision
  EXPECT_EQ(h.config.seq_len, c.seq_len);
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(h.rope_scaling_json)), "pi:factor=2.5");
}

// ---- RoPE layout -------------------------------------------------------------------------------

// transformers' Llama rotation of one head at position pos (LlamaRotaryEmbedding,
// apply_rotary_pos_emb): x * cos + rotate_half(x) * sin, cos/sin = cat(freqs, freqs), freqs_i =
// pos * base^(-2i/D), rotate_half(x) = cat(-x[D/2:], x[:D/2]).
std::vector<double> RotateHalfHf(const std::vector<double>& x, double pos, double base) {
  const size_t D = x.size(), half = D / 2;
  std::vector<double> out(D);
  for (size_t i = 0; i < D; ++i) {
    const double a = pos * std::pow(base, -2.0 * static_cast<double>(i % half) / D);
    const double rotated = i < half ? -x[i + half] : x[i - half];
    out[i] = x[i] * std::cos(a) + rotated * std::sin(a);
  }
  return out;
}

// stretch's rotation (src/kernels/ops.h RopeInterleaved): pairs (x[2t], x[2t+1]) by
// pos * base^(-2t/D).
std::vector<double> RotateInterleaved(const std::vector<double>& x, double pos, double base) {
  const size_t D = x.size();
  std::vector<double> out(D);
  for (size_t t = 0; t < D / 2; ++t) {
    const double a = pos * std::pow(base, -2.0 * static_cast<double>(t) / D);
    out[2 * t] = x[2 * t] * std::cos(a) - x[2 * t + 1] * std::sin(a);
    out[2 * t + 1] = x[2 * t] * std::sin(a) + x[2 * t + 1] * std::cos(a);
  }
  return out;
}

// Head `h` of W x: rows h*D .. h*D + D - 1 of W (rows, C).
std::vector<double> HeadOf(const std::vector<float>& w, const std::vector<double>& x, int h,
                           int D) {
  const size_t C = x.size();
  std::vector<double> out(static_cast<size_t>(D), 0.0);
  for (int d = 0; d < D; ++d) {
    for (size_t c = 0; c < C; ++c) {
      out[static_cast<size_t>(d)] +=
          static_cast<double>(w[(static_cast<size_t>(h) * D + d) * C + c]) * x[c];
    }
  }
  return out;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The attention scores q_i . k_j of every head, from HF's weights with HF's rotation and from the
// loaded (permuted) weights with stretch's, are the same numbers.
TEST_F(HfModelTest, PermutedQueryAndKeyGiveHfsAttentionScores) {
  for (const int D : {8, 64}) {
    SCOPED_TRACE("head dim " + std::to_string(D));
    Sizes s;
    s.H = D == 8 ? 4 : 2;
    s.G = D == 8 ? 2 : 1;
    s.C = s.H * D;
    s.L = 1;
    const std::vector<Tensor> ts = Tensors(s, 100 + static_cast<uint64_t>(D));
    const std::string dir = Path("rope" + std::to_string(D));
    WriteFolder(dir, Config(s), ts);
    const Model m = LoadHfModel(dir);
    const std::vector<float>& hf_q = Get(ts, "model.layers.0.self_attn.q_proj.weight").values;
    const std::vector<float>& hf_k = Get(ts, "model.layers.0.self_attn.k_proj.weight").values;
    const LayerWeights& L = m.weights.layers[0];
    Rng rng(9);
    const double base = 10000.0;
    double max_wrong_layout = 0;
    const std::vector<std::pair<int, int>> positions = {
        {0, 0}, {5, 2}, {37, 11}, {1000, 3}, {63, 63}};
    for (const auto& [i, j] : positions) {
      std::vector<double> xi(static_cast<size_t>(s.C)), xj(xi.size());
      for (double& v : xi) v = rng.Normal();
      for (double& v : xj) v = rng.Normal();
      for (int h = 0; h < s.H; ++h) {
        const int g = h / (s.H / s.G);
        const double hf = Dot(RotateHalfHf(HeadOf(hf_q, xi, h, D), i, base),
                              RotateHalfHf(HeadOf(hf_k, xj, g, D), j, base));
        const double ours = Dot(RotateInterleaved(HeadOf(L.wq, xi, h, D), i, base),
                                RotateInterleaved(HeadOf(L.wk, xj, g, D), j, base));
        // Both in double from the same float weights: only the order of the D products in the
        // sums differs, an error below D * 2^-53 * sum |q_d k_d| (~1e-14 here); a wrong layout
        // errs by the scores' own size (~D).
        EXPECT_NEAR(ours, hf, 1e-10 * (1.0 + std::fabs(hf)))
            << "head " << h << " (" << i << ", " << j << ")";
        // Without the permutation, stretch's rotation of HF's rows is another function.
        const double unpermuted = Dot(RotateInterleaved(HeadOf(hf_q, xi, h, D), i, base),
                                      RotateInterleaved(HeadOf(hf_k, xj, g, D), j, base));
        max_wrong_layout = std::max(max_wrong_layout, std::fabs(unpermuted - hf));
      }
    }
    EXPECT_GT(max_wrong_layout, 1.0) << "the test cannot tell the layouts apart";
  }
}

// ---- config.json, key by key -------------------------------------------------------------------

class HfConfigTest : public HfModelTest {
 protected:
  void SetUp() override {
    HfModelTest::SetUp();
    folder_ = Path("m");
    WriteFolder(folder_, Config(Sizes()), Tensors(Sizes(), 1));
  }
  // Writes `config` and reads the folder's header: "" when it loads, else the error.
  std::string Read(const json& config) {
    WriteText(folder_ + "/config.json", config.dump());
    try {
      ReadHfModelHeader(folder_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // The base config with `key` set to the JSON `value` ("" removes it).
  static json With(const std::string& key, const std::string& value) {
    json c = Config(Sizes());
    if (value.empty()) {
      c.erase(key);
    } else {
      c[key] = json::parse(value);
    }
    return c;
  }
  std::string folder_;
};

TEST_F(HfConfigTest, TheBaseConfigLoads) {
  EXPECT_EQ(Read(Config(Sizes())), "");
  const Model m = LoadHfModel(folder_);
  EXPECT_EQ(m.config.dim, 32);
  EXPECT_EQ(m.config.n_kv_heads, 2);
  EXPECT_EQ(m.config.seq_len, 64);
  EXPECT_EQ(m.config.norm_eps, 1e-5f);
  EXPECT_FALSE(m.config.shared_classifier);
}

TEST_F(HfConfigTest, EveryBadValueIsRefusedNamingItsKey) {
  const std::string config = folder_ + "/config.json";
  auto expect_error = [&](const std::string& key, const std::string& value) {
    SCOPED_TRACE(key + " = " + (value.empty() ? "<missing>" : value));
    EXPECT_TRUE(Names(Read(With(key, value)), {config, key}));
  };
  auto expect_loads = [&](const std::string& key, const std::string& value) {
    SCOPED_TRACE(key + " = " + (value.empty() ? "<missing>" : value));
    EXPECT_EQ(Read(With(key, value)), "");
  };
  // Counts: a JSON integer in bounds. A string, a negative, zero, a fraction (even 32.0), huge
  // values (within and beyond 64 bits), a boolean, containers.
  const std::vector<std::string> bad_counts = {R"("32")",
                                               "-1",
                                               "0",
                                               "4.5",
                                               "32.0",
                                               "1e15",
                                               "1099511627776",
                                               "18446744073709551615",
                                               "123456789012345678901234567890",
                                               "true",
                                               "[]",
                                               "{}",
                                               "[32]"};
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "vocab_size", "max_position_embeddings"}) {
    for (const std::string& v : bad_counts) expect_error(key, v);
    expect_error(key, "null");
    expect_error(key, "");  // missing
  }
  for (const char* key : {"num_key_value_heads", "head_dim"}) {
    for (const std::string& v : bad_counts) expect_error(key, v);
  }
  expect_error("num_key_value_heads", "3");  // does not divide 4 heads
  expect_error("num_attention_heads", "3");  // 2 kv heads do not divide it
  expect_error("head_dim", "7");             // odd: RoPE rotates pairs
  {
    json c = With("head_dim", "");
    c["num_attention_heads"] = 32;  // head dim 1 (32 / 32): odd
    EXPECT_TRUE(Names(Read(c), {config, "head dimension 1"}));
  }
  // A head_dim apart from hidden_size / num_attention_heads (Qwen 3, Mistral Nemo) is read; these
  // files' q_proj is then the wrong shape, and the error names it and the config.
  EXPECT_TRUE(Names(Read(With("head_dim", "16")), {"q_proj.weight", "[64, 32]", "config.json"}));
  // Numbers.
  for (const char* v : {R"("1e-5")", "-1e-5", "0", "2", "1e300", "true", "null", "[]", ""}) {
    expect_error("rms_norm_eps", v);
  }
  for (const char* v : {R"("10000")", "-1", "0", "1", "1e300", "true", "null", "[]"}) {
    expect_error("rope_theta", v);
  }
  expect_error("partial_rotary_factor", "0.5");
  expect_error("partial_rotary_factor", R"("1")");
  // Booleans.
  for (const char* key : {"tie_word_embeddings", "attention_bias", "mlp_bias"}) {
    for (const char* v : {R"("false")", "0", "1", "null", "[]"}) expect_error(key, v);
  }
  expect_error("attention_bias", "true");
  expect_error("mlp_bias", "true");
  // Strings.
  for (const char* v : {"5", "null", R"("gelu")", R"("relu")", "[]"}) {
    expect_error("hidden_act", v);
  }
  for (const char* v : {"5", "[]", R"("qwen2")", R"("mistral")"}) {
    expect_error("model_type", v);
  }
  for (const char* v : {R"("LlamaForCausalLM")", "[]", R"(["LlamaForCausalLM", "X"])", "[5]", "7",
                        R"(["Qwen2ForCausalLM"])", R"(["LlamaForSequenceClassification"])"}) {
    expect_error("architectures", v);
  }
  // rope_scaling and transformers 5's rope_parameters.
  for (const char* v :
       {"5", R"("linear")", "[]", R"({"factor": 2})", R"({"rope_type": 5})",
        R"({"rope_type": "linear"})", R"({"rope_type": "linear", "factor": "2"})",
        R"({"rope_type": "linear", "factor": 0.5})",
        R"({"rope_type": "linear", "type": "yarn", "factor": 2})",
        R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": -1})",
        R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1.5})",
        R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4})",
        R"({"rope_type": "yarn", "factor": 4, "deep": [[[[[1]]]]]})"}) {
    expect_error("rope_scaling", v);
  }
  for (const char* v : {"5", R"({"rope_theta": "1e4"})", R"({"rope_theta": 0})",
                        R"({"rope_type": 1})", R"({"partial_rotary_factor": 0.25})"}) {
    expect_error("rope_parameters", v);
  }
  // Optional keys: absent (and null where transformers derives the value) is fine.
  for (const char* key : {"head_dim", "rope_theta", "attention_bias", "mlp_bias", "hidden_act",
                          "rope_scaling", "model_type", "architectures", "torch_dtype"}) {
    expect_loads(key, "");
  }
  // num_key_value_heads absent or null is num_attention_heads (4 here): the file's k_proj, made
  // for 2, then has the wrong shape.
  for (const char* v : {"", "null"}) {
    EXPECT_TRUE(Names(Read(With("num_key_value_heads", v)),
                      {"model.layers.0.self_attn.k_proj.weight", "expected [32, 32]"}));
  }
  expect_loads("head_dim", "null");
  expect_loads("rope_scaling", "null");
  expect_loads("hidden_act", R"("swish")");
  expect_loads("partial_rotary_factor", "1.0");
  expect_loads("rope_theta", "500000");  // an integer is a number
  // Absent tie_word_embeddings is false (LlamaConfig's default): lm_head.weight is expected, and
  // with true it is one tensor too many.
  expect_loads("tie_word_embeddings", "");
  EXPECT_TRUE(
      Names(Read(With("tie_word_embeddings", "true")), {"lm_head.weight", "tie_word_embeddings"}));
}

TEST_F(HfConfigTest, TruncatedAndGarbageJsonAreErrorsNamingTheFile) {
  const std::string config = folder_ + "/config.json";
  const std::string text = Config(Sizes()).dump();
  // Every proper prefix (the full text ends with its closing brace).
  for (size_t n = 0; n < text.size(); ++n) {
    WriteText(config, text.substr(0, n));
    const std::string e = ErrorOf([&] { ReadHfModelHeader(folder_); });
    EXPECT_TRUE(Names(e, {config})) << n;
  }
  for (const std::string& g :
       {std::string("null"), std::string("[]"), std::string("42"), std::string("\"x\""),
        std::string("{"), std::string("}"), std::string("{\"hidden_size\":}"),
        std::string("\xff\xfe{}"), std::string("{\"a\": \"\xc3\x28\"}"), std::string("{} {}"),
        std::string(1000, '['), std::string("{\"hidden_size\": 1e400}")}) {
    WriteText(config, g);
    EXPECT_TRUE(Names(ErrorOf([&] { ReadHfModelHeader(folder_); }), {config})) << g;
  }
  // Random bytes, and random damage to the valid text: an error or (damage that happens to keep
  // the config valid) a load, never anything else.
  Rng rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    std::string t = text;
    if (trial < 100) {
      t.assign(static_cast<size_t>(rng.NextU64() % 64), '\0');
      for (char& ch : t) ch = static_cast<char>(rng.NextU64());
    } else {
      for (int k = 0; k < 1 + trial % 4; ++k) {
        t[rng.NextU64() % t.size()] = static_cast<char>(rng.NextU64());
      }
    }
    WriteText(config, t);
    try {
      ReadHfModelHeader(folder_);
    } catch (const Error& e) {
      EXPECT_TRUE(Names(e.what(), {folder_})) << trial;
    } catch (const std::exception& e) {
      ADD_FAILURE() << trial << ": not a stretch::Error: " << e.what();
    }
  }
}

TEST_F(HfConfigTest, RopeScalingComesBackWithTheTrainedLength) {
  auto with_scaling = [](const std::string& scaling) {
    json c = Config(Sizes());
    c["max_position_embeddings"] = 32768;
    c["rope_scaling"] = json::parse(scaling);
    return c;
  };
  struct Case {
    std::string scaling;
    std::string type;
    int seq_len;
  };
  for (const Case& k : std::vector<Case>{
           {R"({"rope_type": "linear", "factor": 4.0})", "linear", 32768},
           {R"({"type": "dynamic", "factor": 2.0})", "dynamic", 32768},
           {R"({"rope_type": "yarn", "factor": 4.0})", "yarn", 32768},
           {R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192})",
            "yarn", 8192},
           {R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 4096})",
            "llama3", 4096},
           {R"({"rope_type": "longrope", "short_factor": [1, 1, 1, 1],
                "long_factor": [2, 2, 2, 2], "original_max_position_embeddings": 2048})",
            "longrope", 2048},
           {R"({"rope_type": "default"})", "", 32768}}) {
    SCOPED_TRACE(k.scaling);
    EXPECT_EQ(Read(with_scaling(k.scaling)), "");
    const HfModelHeader h = ReadHfModelHeader(folder_);
    EXPECT_EQ(h.rope_type, k.type);
    EXPECT_EQ(h.config.seq_len, k.seq_len);
    EXPECT_EQ(h.max_position_embeddings, 32768);
    EXPECT_EQ(h.config.rope_interpolation, 1.0f);
    if (k.type.empty()) {
      EXPECT_EQ(h.rope_scaling_json, "");
    } else {
      EXPECT_EQ(json::parse(h.rope_scaling_json), json::parse(k.scaling));  // unchanged
    }
  }
  // Phi-3's longrope keeps the pre-extension length at the top level.
  json phi = with_scaling(R"({"type": "longrope", "short_factor": [1], "long_factor": [2]})");
  phi["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(Read(phi), "");
  EXPECT_EQ(ReadHfModelHeader(folder_).config.seq_len, 4096);
  // The scaling maps onto a method (the caller's step).
  EXPECT_EQ(Read(with_scaling(R"({"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": 8192})")),
            "");
  EXPECT_EQ(CanonicalSpec(MethodFromHfRopeScaling(ReadHfModelHeader(folder_).rope_scaling_json)),
            "yarn:factor=4,orig=8192");

  // transformers 5: rope_parameters, with the base inside.
  json v5 = Config(Sizes());
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = json{{"rope_theta", 500000.0}, {"rope_type", "default"}};
  EXPECT_EQ(Read(v5), "");
  HfModelHeader h = ReadHfModelHeader(folder_);
  EXPECT_EQ(h.config.rope_base, 500000.0f);
  EXPECT_EQ(h.rope_scaling_json, "");
  v5["rope_parameters"] = json{{"rope_theta", 500000.0},
                               {"rope_type", "yarn"},
                               {"factor", 2.0},
                               {"original_max_position_embeddings", 32}};
  EXPECT_EQ(Read(v5), "");
  h = ReadHfModelHeader(folder_);
  EXPECT_EQ(h.rope_type, "yarn");
  EXPECT_EQ(h.config.seq_len, 32);
  EXPECT_EQ(
      json::parse(h.rope_scaling_json),
      (json{{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 32}}));
  // A base given twice must agree; so must the two scaling objects.
  v5["rope_theta"] = 10000.0;
  EXPECT_TRUE(Names(Read(v5), {"rope_theta", "rope_parameters.rope_theta"}));
  v5.erase("rope_theta");
  v5["rope_scaling"] = json{{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_TRUE(Names(Read(v5), {"rope_scaling", "rope_parameters"}));
}

TEST_F(HfConfigTest, ArchitecturesAreReadOrRefusedByName) {
  json c = Config(Sizes());
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  // MistralConfig's default window, 4096, when the key is absent: every layer windowed.
  c["max_position_embeddings"] = 32768;
  const auto window_of = [&](const json& config) {
    EXPECT_EQ(Read(config), "");
    return ReadHfModelHeader(folder_).config.attention.UniformWindow();
  };
  EXPECT_EQ(window_of(c), 4096);
  c["sliding_window"] = 1000;
  EXPECT_EQ(window_of(c), 1000);
  EXPECT_EQ(ReadHfModelHeader(folder_).config.attention.layers.size(), 2u);
  c["sliding_window"] = nullptr;  // Mistral 7B v0.2 and later
  EXPECT_EQ(window_of(c), 0);
  EXPECT_TRUE(ReadHfModelHeader(folder_).config.attention.IsDefault());
  EXPECT_EQ(ReadHfModelHeader(folder_).format, "Hugging Face folder (MistralForCausalLM, F32)");
  c["sliding_window"] = 32768;  // no key within the trained length is out of it: none
  EXPECT_EQ(window_of(c), 0);
  c["sliding_window"] = 0;
  EXPECT_TRUE(Names(Read(c), {"sliding_window"}));
  c["sliding_window"] = "4096";
  EXPECT_TRUE(Names(Read(c), {"sliding_window"}));
  // A window and RoPE scaling together: the windowed layers would keep plain RoPE.
  c["sliding_window"] = 4096;
  c["rope_scaling"] = json{{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_TRUE(Names(Read(c), {"sliding_window 4096", "yarn", "plain RoPE"}));
  c["sliding_window"] = nullptr;
  EXPECT_EQ(Read(c), "");
  // LlamaConfig has no window: the key is not read there.
  c = Config(Sizes());
  c["sliding_window"] = 16;
  EXPECT_EQ(window_of(c), 0);
  // Relatives of LLaMA, each with what stretch would get wrong.
  c = Config(Sizes());
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["model_type"] = "qwen3_moe";
  EXPECT_TRUE(Names(Read(c), {"Qwen3MoeForCausalLM", "mixture of experts", "Qwen3ForCausalLM"}));
  c["architectures"] = {"GemmaForCausalLM"};
  EXPECT_TRUE(Names(Read(c), {"GemmaForCausalLM", "Gemma 1 is not read", "Gemma2ForCausalLM"}));
  c["architectures"] = {"Llama4ForCausalLM"};
  EXPECT_TRUE(Names(Read(c), {"Llama4ForCausalLM", "mixture of experts", "llama4=C/K"}));
  c.erase("architectures");
  EXPECT_TRUE(Names(Read(c), {"model_type \"qwen3_moe\"", "\"qwen2\""}));
  // Qwen 3 itself is read, and its per-head norms are looked for (these files have none).
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  EXPECT_TRUE(Names(Read(c), {"self_attn.q_norm.weight is missing"}));
  // Qwen 2 itself is read, and its q/k/v biases are looked for (these files have none).
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["model_type"] = "qwen2";
  EXPECT_TRUE(Names(Read(c), {"self_attn.q_proj.bias is missing"}));
  c["use_sliding_window"] = true;
  EXPECT_TRUE(Names(Read(c), {"use_sliding_window is true", "qwen2 family's windowed layers"}));
  c["architectures"] = {"Qwen3ForCausalLM"};  // the same switch, in qwen3's descriptor
  c["model_type"] = "qwen3";
  EXPECT_TRUE(Names(Read(c), {"use_sliding_window is true", "qwen3 family's windowed layers"}));
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["model_type"] = "qwen2";
  c.erase("architectures");
  c.erase("model_type");
  EXPECT_TRUE(Names(Read(c), {"architectures and model_type are missing"}));
}

// ---- weight files ------------------------------------------------------------------------------

TEST_F(HfModelTest, WeightFilesAreRefusedNamingTheTensorOrShard) {
  const Sizes s;
  const json config = Config(s);
  const std::vector<Tensor> good = Tensors(s, 2);
  int n = 0;
  // A fresh folder per case; returns its path.
  auto folder = [&](const std::vector<Tensor>& ts, const json& c) {
    const std::string dir = Path("w" + std::to_string(n++));
    WriteFolder(dir, c, ts);
    return dir;
  };
  auto error = [](const std::string& dir) { return ErrorOf([&] { LoadHfModel(dir); }); };

  std::vector<Tensor> ts = good;
  ts.erase(ts.begin() + 5);
  EXPECT_TRUE(Names(error(folder(ts, config)), {good[5].name, "missing"}));
  ts = good;
  Find(ts, "model.layers.1.self_attn.q_proj.weight")->shape = {32, 16};
  Find(ts, "model.layers.1.self_attn.q_proj.weight")->values.resize(32 * 16);
  EXPECT_TRUE(Names(
      error(folder(ts, config)),
      {"model.safetensors", "model.layers.1.self_attn.q_proj.weight", "[32, 16]", "[32, 32]"}));
  for (SafetensorsDtype d : {SafetensorsDtype::kI32, SafetensorsDtype::kF64}) {
    ts = good;
    Find(ts, "model.layers.0.self_attn.o_proj.weight")->dtype = d;
    EXPECT_TRUE(Names(error(folder(ts, config)), {"model.layers.0.self_attn.o_proj.weight",
                                                  std::string(SafetensorsDtypeName(d))}));
  }
  ts = good;
  ts.push_back({"model.layers.0.self_attn.q_proj.bias", {32}, std::vector<float>(32)});
  EXPECT_TRUE(Names(error(folder(ts, config)), {"model.layers.0.self_attn.q_proj.bias", "bias"}));
  ts = good;
  ts.push_back({"model.layers.2.mlp.up_proj.weight", {48, 32}, std::vector<float>(48 * 32)});
  EXPECT_TRUE(Names(error(folder(ts, config)), {"model.layers.2.mlp.up_proj.weight"}));
  json tied = config;
  tied["tie_word_embeddings"] = true;
  EXPECT_TRUE(Names(error(folder(good, tied)), {"lm_head.weight", "tie_word_embeddings"}));
  ts = good;
  ts.pop_back();  // lm_head.weight
  EXPECT_TRUE(Names(error(folder(ts, config)), {"lm_head.weight", "missing"}));
  EXPECT_NO_THROW(LoadHfModel(folder(ts, tied)));
  // Older checkpoints' RoPE buffers are skipped.
  ts = good;
  ts.push_back({"model.layers.1.self_attn.rotary_emb.inv_freq", {4}, {1, 0.1f, 0.01f, 0.001f}});
  EXPECT_NO_THROW(LoadHfModel(folder(ts, config)));
  // A truncated file.
  std::string dir = folder(good, config);
  const std::string bytes = ReadBytes(dir + "/model.safetensors");
  WriteBytes(dir + "/model.safetensors", bytes.substr(0, bytes.size() - 7));
  EXPECT_TRUE(Names(error(dir), {"model.safetensors"}));
  // No weights, or two kinds at once.
  dir = Path("none");
  fs::create_directories(dir);
  WriteText(dir + "/config.json", config.dump());
  EXPECT_TRUE(Names(error(dir), {"model.safetensors", "model.safetensors.index.json"}));
  WriteText(dir + "/pytorch_model.bin", "pickle");
  EXPECT_TRUE(Names(error(dir), {"pytorch_model.bin", "pickle"}));
  dir = folder(good, config);
  WriteIndex(dir, json{{"weight_map", {{"model.norm.weight", "model.safetensors"}}}});
  EXPECT_TRUE(Names(error(dir), {"both", "model.safetensors.index.json"}));
}

TEST_F(HfModelTest, ShardsAndTheirIndexAreRefusedNamingTheTensorOrShard) {
  const Sizes s;
  const json config = Config(s);
  const std::vector<Tensor> good = Tensors(s, 3);
  int n = 0;
  std::string dir;
  // A fresh two-shard folder; returns its index for damage.
  auto shards = [&](const std::vector<Tensor>& ts) {
    dir = Path("s" + std::to_string(n++));
    return WriteTwoShards(dir, config, ts);
  };
  auto error = [&](const json& index) {
    WriteIndex(dir, index);
    return ErrorOf([&] { LoadHfModel(dir); });
  };
  const std::string kIndex = "model.safetensors.index.json";
  const std::string q = "model.layers.1.self_attn.q_proj.weight";  // in shard B

  json index = shards(good);
  WriteIndex(dir, index);
  EXPECT_NO_THROW(LoadHfModel(dir));
  fs::remove(dir + "/" + kShardB);
  EXPECT_TRUE(Names(error(index), {kIndex, kShardB, "not in the folder"}));
  for (const std::string& escape :
       {std::string("../") + kShardB, std::string("/tmp/") + kShardB, std::string("sub/") + kShardB,
        std::string(".."), std::string("."), std::string(""), std::string("a\\b")}) {
    index = shards(good);
    index["weight_map"][q] = escape;
    EXPECT_TRUE(Names(error(index), {kIndex, q, "\"" + escape + "\"", "plain file name"}))
        << escape;
  }
  index = shards(good);
  index["weight_map"]["model.layers.0.mlp.extra.weight"] = kShardA;
  EXPECT_TRUE(
      Names(error(index), {kIndex, "model.layers.0.mlp.extra.weight", kShardA, "no such tensor"}));
  index = shards(good);
  index["weight_map"].erase(q);
  EXPECT_TRUE(Names(error(index), {kIndex, q, kShardB, "does not list"}));
  index = shards(good);
  index["weight_map"][q] = kShardA;
  EXPECT_TRUE(Names(error(index), {kIndex, q, kShardA, kShardB}));
  // The same tensor in both shards.
  index = shards(good);
  {
    std::vector<const Tensor*> b;
    for (const Tensor& t : good) {
      if (t.name == "model.embed_tokens.weight" || !t.name.starts_with("model.layers.0.")) {
        b.push_back(&t);
      }
    }
    WriteShard(dir + "/" + kShardB, b);
  }
  EXPECT_TRUE(Names(error(index), {"model.embed_tokens.weight", "both", kShardA, kShardB}));
  // A shard's tensor of the wrong shape.
  std::vector<Tensor> ts = good;
  Find(ts, q)->shape = {16, 64};
  index = shards(ts);
  EXPECT_TRUE(Names(error(index), {kShardB, q, "[16, 64]"}));
  // The index itself.
  index = shards(good);
  for (const json& bad : {json(5), json::array(), json{{"metadata", {}}}, json{{"weight_map", 5}},
                          json{{"weight_map", json::object()}}, json{{"weight_map", {{q, 5}}}}}) {
    EXPECT_TRUE(Names(error(bad), {kIndex})) << bad.dump();
  }
  WriteText(dir + "/" + kIndex, "{\"weight_map\": {");
  EXPECT_TRUE(Names(ErrorOf([&] { LoadHfModel(dir); }), {kIndex, "JSON"}));
}

// ---- writing -----------------------------------------------------------------------------------

TEST_F(HfModelTest, SaveRefusesWhatTheFormatCannotHoldByName) {
  Model m = testing::RandomModel(testing::TinyConfig(), 8);
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, Path("x"), SafetensorsDtype::kI32); }),
                    {"I32", "F32, F16 or BF16"}));
  Model layout = m;
  layout.config.attention.query_norm = true;
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(layout, Path("x"), SafetensorsDtype::kF32); }),
                    {"trained attention layout"}));
  Model gau = m;
  gau.config.block = ModelBlock::kGau;
  EXPECT_TRUE(
      Names(ErrorOf([&] { SaveHfModel(gau, Path("x"), SafetensorsDtype::kF32); }), {"GAU"}));
  EXPECT_FALSE(fs::exists(Path("x")));  // refused before anything was made
  // A weight beyond F16's range: refused naming the tensor; BF16 holds it.
  Model big = m;
  big.weights.layers[1].w2[7] = 1e5f;
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(big, Path("f16"), SafetensorsDtype::kF16); }),
                    {"model.layers.1.mlp.down_proj.weight", "65504"}));
  EXPECT_FALSE(fs::exists(Path("f16/model.safetensors")));
  SaveHfModel(big, Path("bf16"), SafetensorsDtype::kBF16);
  EXPECT_EQ(LoadHfModel(Path("bf16")).weights.layers[1].w2[7], 99840.0f);  // 1e5 in BF16
}

TEST_F(HfModelTest, SaveNeverTouchesOtherFiles) {
  const Model m = testing::RandomModel(testing::TinyConfig(), 9);
  // A folder with a user's file: refused, the file as it was, nothing written.
  const std::string dir = Path("mine");
  fs::create_directories(dir);
  WriteText(dir + "/notes.txt", "keep me");
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, dir, SafetensorsDtype::kF32); }),
                    {dir, "notes.txt", "other files"}));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(ReadBytes(dir + "/notes.txt"), "keep me");
  // A subdirectory too, and shards of another save.
  const std::string sub = Path("sub");
  fs::create_directories(sub + "/x");
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, sub, SafetensorsDtype::kF32); }), {"x"}));
  const std::string sharded = Path("sharded");
  fs::create_directories(sharded);
  WriteText(sharded + "/model.safetensors.index.json", "{}");
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, sharded, SafetensorsDtype::kF32); }),
                    {"model.safetensors.index.json"}));
  // A path that is a file.
  const std::string file = File("plain", "data");
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, file, SafetensorsDtype::kF32); }),
                    {file, "not a directory"}));
  EXPECT_EQ(ReadBytes(file), "data");
  // Our own files are replaced; the caller's tokenizer files and an interrupted write's partial
  // file are let be.
  const std::string ours = Path("ours");
  SaveHfModel(m, ours, SafetensorsDtype::kF32);
  WriteText(ours + "/tokenizer.model", "spm");
  WriteText(ours + "/.model.safetensors.partial-1-0", "");
  SaveHfModel(m, ours, SafetensorsDtype::kBF16, {"tokenizer.model", "tokenizer_config.json"});
  EXPECT_EQ(ReadHfModelHeader(ours).format, "Hugging Face folder (LlamaForCausalLM, BF16)");
  EXPECT_EQ(ReadBytes(ours + "/tokenizer.model"), "spm");
  EXPECT_TRUE(Names(ErrorOf([&] { SaveHfModel(m, ours, SafetensorsDtype::kF32); }),
                    {"tokenizer.model"}));  // not listed this time
  // A missing folder is created, parents included.
  SaveHfModel(m, Path("a/b/c"), SafetensorsDtype::kF32);
  EXPECT_TRUE(LooksLikeHfFolder(Path("a/b/c")));
}

}  // namespace
}  // namespace stretch
