// A model read from a Hugging Face folder runs as transformers runs that folder, and as the model
// it was written from: transformers' LlamaForCausalLM forward is written here in double from its
// definition (modeling_llama.py: RMSNorm, rotate_half RoPE, repeat_kv, SiLU-gated MLP) and run on
// the folder's own tensors by their HF names, so that the name mapping (gate/up/down, the two
// norms) and the RoPE permutation are checked against HF's semantics, not against stretch's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference/llama.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::Logits;

using json = nlohmann::json;

// transformers' LlamaForCausalLM on the folder `dir` (model.safetensors, F32), in double: logits
// (T, V) for tokens at positions 0 .. T-1.
std::vector<double> HfForward(const std::string& dir, const std::vector<int>& tokens) {
  const json cfg = json::parse(testing::ReadBytes(dir + "/config.json"));
  const int C = cfg["hidden_size"], F = cfg["intermediate_size"], L = cfg["num_hidden_layers"],
            H = cfg["num_attention_heads"], G = cfg["num_key_value_heads"], V = cfg["vocab_size"];
  const int D = C / H;
  const double eps = cfg["rms_norm_eps"], theta = cfg["rope_theta"];
  const bool tied = cfg["tie_word_embeddings"];
  const SafetensorsFile file(dir + "/model.safetensors");
  auto weight = [&](const std::string& name) {
    const std::vector<float> w = file.Read<float>(name);
    return std::vector<double>(w.begin(), w.end());
  };
  // y = x W^T for nn.Linear's weight W (out, in).
  auto linear = [](const std::vector<double>& w, const std::vector<double>& x, int out) {
    const size_t in = x.size();
    std::vector<double> y(static_cast<size_t>(out), 0.0);
    for (size_t o = 0; o < y.size(); ++o) {
      for (size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
    }
    return y;
  };
  // LlamaRMSNorm: weight * x / sqrt(mean(x^2) + eps).
  auto rms_norm = [eps](const std::vector<double>& x, const std::vector<double>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * (x[i] * inv);
    return y;
  };
  // apply_rotary_pos_emb on head `h` of x: x * cos + rotate_half(x) * sin, cos/sin =
  // cat(freqs, freqs), freqs_i = pos / theta^(2i/D), rotate_half(x) = cat(-x[D/2:], x[:D/2]).
  auto rotate = [&](std::vector<double>& x, int h, double pos) {
    double* v = x.data() + static_cast<size_t>(h) * D;
    const std::vector<double> in(v, v + D);
    for (int i = 0; i < D; ++i) {
      const double a = pos / std::pow(theta, 2.0 * (i % (D / 2)) / D);
      const double rotated =
          i < D / 2 ? -in[static_cast<size_t>(i + D / 2)] : in[static_cast<size_t>(i - D / 2)];
      v[i] = in[static_cast<size_t>(i)] * std::cos(a) + rotated * std::sin(a);
    }
  };
  const size_t T = tokens.size();
  const std::vector<double> embed = weight("model.embed_tokens.weight");
  std::vector<std::vector<double>> x(T);
  for (size_t t = 0; t < T; ++t) {
    x[t].assign(embed.begin() + static_cast<ptrdiff_t>(tokens[t]) * C,
                embed.begin() + static_cast<ptrdiff_t>(tokens[t] + 1) * C);
  }
  for (int l = 0; l < L; ++l) {
    const std::string b = "model.layers." + std::to_string(l) + ".";
    const std::vector<double> in_norm = weight(b + "input_layernorm.weight"),
                              wq = weight(b + "self_attn.q_proj.weight"),
                              wk = weight(b + "self_attn.k_proj.weight"),
                              wv = weight(b + "self_attn.v_proj.weight"),
                              wo = weight(b + "self_attn.o_proj.weight"),
                              post_norm = weight(b + "post_attention_layernorm.weight"),
                              gate = weight(b + "mlp.gate_proj.weight"),
                              up = weight(b + "mlp.up_proj.weight"),
                              down = weight(b + "mlp.down_proj.weight");
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      const std::vector<double> h = rms_norm(x[t], in_norm);
      q[t] = linear(wq, h, H * D);
      k[t] = linear(wk, h, G * D);
      v[t] = linear(wv, h, G * D);
      for (int hh = 0; hh < H; ++hh) rotate(q[t], hh, static_cast<double>(t));
      for (int g = 0; g < G; ++g) rotate(k[t], g, static_cast<double>(t));
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<size_t>(H * D), 0.0);
      for (int hh = 0; hh < H; ++hh) {
        const int g = hh / (H / G);  // repeat_kv: query head hh reads key/value head hh / n_rep
        std::vector<double> s(t + 1);
        double max = -INFINITY;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += q[t][static_cast<size_t>(hh * D + d)] * k[j][static_cast<size_t>(g * D + d)];
          }
          s[j] = dot / std::sqrt(static_cast<double>(D));
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - max));
        for (size_t j = 0; j <= t; ++j) {
          for (int d = 0; d < D; ++d) {
            att[static_cast<size_t>(hh * D + d)] +=
                s[j] / sum * v[j][static_cast<size_t>(g * D + d)];
          }
        }
      }
      const std::vector<double> o = linear(wo, att, C);
      for (int i = 0; i < C; ++i) x[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
      const std::vector<double> h = rms_norm(x[t], post_norm);
      std::vector<double> a = linear(gate, h, F);
      const std::vector<double> u = linear(up, h, F);
      for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] / (1.0 + std::exp(-a[i])) * u[i];  // SiLU
      const std::vector<double> m = linear(down, a, C);
      for (int i = 0; i < C; ++i) x[t][static_cast<size_t>(i)] += m[static_cast<size_t>(i)];
    }
  }
  const std::vector<double> norm = weight("model.norm.weight");
  const std::vector<double> head = tied ? embed : weight("lm_head.weight");
  std::vector<double> logits;
  for (size_t t = 0; t < T; ++t) {
    const std::vector<double> y = linear(head, rms_norm(x[t], norm), V);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

template <typename A, typename B>
double MaxAbsDiff(const std::vector<A>& a, const std::vector<B>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

double MaxAbs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

class HfLogitsTest : public testing::TempDirTest {
 protected:
  HfLogitsTest() : TempDirTest("stretch_hf_logits_") {}

  // transformers' forward of the folder against stretch's forwards of the loaded model.
  void ExpectHfSemantics(const std::string& dir, const std::vector<int>& tokens) {
    const Model m = LoadHfModel(dir);
    const std::vector<double> hf = HfForward(dir, tokens);
    const std::vector<double> ours = ref::LlamaForwardRef<double>(m, tokens);
    ASSERT_EQ(hf.size(), ours.size());
    // Both in double from the same float weights: the sums only run in other orders (q . k over a
    // permuted head), a relative error of ~1e-14; a wrong name or layout errs by O(1).
    EXPECT_LE(MaxAbsDiff(ours, hf), 1e-10 * MaxAbs(hf));
    // The engine (float32) within the bound transformer_test.cc sets it against a float64
    // reference: 8x a plain float32 run's error.
    const std::vector<float> engine = Logits(m, "direct", tokens);
    const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens);
    EXPECT_LE(MaxAbsDiff(engine, hf), 8 * MaxAbsDiff(plain, hf) + 1e-6);
  }
};

TEST_F(HfLogitsTest, LoadedModelComputesWhatTransformersComputes) {
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "tied" : "untied");
    ModelConfig c = testing::TinyConfig();  // 4 query heads, 2 key/value heads of 8
    c.shared_classifier = shared;
    c.rope_base = 500.0f;  // fast rotations, so that a layout mistake shows within 40 tokens
    const std::string dir = Path(shared ? "tied" : "untied");
    SaveHfModel(testing::RandomModel(c, shared ? 31 : 32), dir, SafetensorsDtype::kF32);
    ExpectHfSemantics(dir, testing::RandomTokens(40, c.vocab_size, 33));
  }
}

TEST_F(HfLogitsTest, Stories260KComputesWhatTransformersComputes) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const std::string dir = Path("s260");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  ExpectHfSemantics(dir, testing::RandomTokens(48, m.config.vocab_size, 34));
}

TEST_F(HfLogitsTest, Stories260KFromTheFolderEqualsTheLlama2cFileUnderMethods) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const std::string dir = Path("s260");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const Model h = LoadHfModel(dir);
  // 600 tokens: past the trained 512, where the methods differ from each other.
  const std::vector<int> tokens = testing::RandomTokens(600, m.config.vocab_size, 35);
  for (const char* spec : {"direct", "yarn", "self-extend:group=4,window=128"}) {
    const std::vector<float> a = Logits(m, spec, tokens), b = Logits(h, spec, tokens);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << spec;
  }
}

}  // namespace
}  // namespace stretch
