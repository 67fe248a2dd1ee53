// Model families as data (src/model/family.h): the registry finds a family by its names, and a
// family's tensor table covers every weight of its block exactly once, with the shapes the
// weights have and the names each format gives them.
#include "src/model/family.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/model/config.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

TEST(ModelFamily, IsFoundByItsGgufAndHfNamesAndNotByOthers) {
  ASSERT_NE(FindFamilyByGguf("llama"), nullptr);
  EXPECT_EQ(FindFamilyByGguf("llama"), &LlamaFamily());
  EXPECT_EQ(FindFamilyByHf("LlamaForCausalLM"), &LlamaFamily());
  EXPECT_EQ(FindFamilyByHf("MistralForCausalLM"), &LlamaFamily());
  ASSERT_NE(FindFamilyByGguf("qwen2"), nullptr);
  EXPECT_EQ(FindFamilyByHf("Qwen2ForCausalLM"), FindFamilyByGguf("qwen2"));
  EXPECT_NE(FindFamilyByGguf("qwen2"), &LlamaFamily());
  ASSERT_NE(FindFamilyByGguf("qwen3"), nullptr);
  EXPECT_EQ(FindFamilyByHf("Qwen3ForCausalLM"), FindFamilyByGguf("qwen3"));
  EXPECT_EQ(FindFamilyByGguf("qwen3moe"), nullptr);
  EXPECT_EQ(FindFamilyByHf("Qwen3MoeForCausalLM"), nullptr);
  EXPECT_EQ(FindFamilyByGguf(""), nullptr);
  EXPECT_EQ(KnownGgufArchitectures().find("\"qwen2\"") != std::string::npos, true);
  std::set<std::string> names;
  for (const ModelFamily* f : ModelFamilies()) {
    EXPECT_TRUE(names.insert(f->name).second) << "two families named " << f->name;
  }
  EXPECT_TRUE(names.contains("llama"));
  ASSERT_NE(FindFamilyByGguf("phi3"), nullptr);
  EXPECT_EQ(FindFamilyByHf("Phi3ForCausalLM"), FindFamilyByGguf("phi3"));
}

// Families with one block are told apart by the family a model was read as; stretch's own models,
// and a name that no longer fits the block, are LLaMA's.
TEST(ModelFamily, FamilyOfKeepsTheFamilyReadWhereTheBlockFits) {
  ModelConfig c = testing::TinyConfig();
  EXPECT_EQ(&FamilyOf(c), &LlamaFamily());
  c.family = "phi3";
  EXPECT_EQ(&FamilyOf(c), FindFamilyByGguf("phi3"));
  c.qk_norm = true;  // no longer Phi-3's block
  EXPECT_EQ(&FamilyOf(c), FindFamilyByGguf("qwen3"));
  c.qk_norm = false;
  c.family = "no-such-family";
  EXPECT_EQ(&FamilyOf(c), &LlamaFamily());
}

// A family's windowed architecture (Mistral's) is one of its own, with a default window; the
// layouts its files hold are the plain one and one window on every layer, nothing else.
TEST(ModelFamily, WindowedArchitecturesAreTheFamilysOwnAndHoldOnlyAUniformWindow) {
  for (const ModelFamily* f : ModelFamilies()) {
    SCOPED_TRACE(f->name);
    EXPECT_LT(f->hf_window_architecture, static_cast<int>(f->hf_architectures.size()));
    if (f->hf_window_architecture < 0) {
      EXPECT_EQ(f->hf_default_window, 0);
    }
  }
  EXPECT_EQ(
      std::string(LlamaFamily()
                      .hf_architectures[static_cast<size_t>(LlamaFamily().hf_window_architecture)]),
      "MistralForCausalLM");
  ModelConfig c = testing::TinyConfig();
  EXPECT_TRUE(FamilyHoldsLayout(LlamaFamily(), c));
  c.attention.layers.assign(2, LayerLayout{.window = 8});
  EXPECT_EQ(c.attention.UniformWindow(), 8);
  EXPECT_TRUE(FamilyHoldsLayout(LlamaFamily(), c));
  EXPECT_FALSE(FamilyHoldsLayout(*FindFamilyByGguf("qwen2"), c));
  c.attention.layers[1].window = 4;  // two windows: not Mistral's
  EXPECT_EQ(c.attention.UniformWindow(), 0);
  EXPECT_FALSE(FamilyHoldsLayout(LlamaFamily(), c));
  c.attention.layers[1] = LayerLayout{.window = 8, .rope_base = 1e6};  // a base of its own
  EXPECT_EQ(c.attention.UniformWindow(), 0);
  c.attention.layers[1] = LayerLayout{.window = 8};
  c.attention.key_norm = true;  // another variant beside the window
  EXPECT_EQ(c.attention.UniformWindow(), 0);
  c.attention.key_norm = false;
  c.attention.layers.assign(2, LayerLayout{.chunk = 8});  // chunks are not a sliding window
  EXPECT_EQ(c.attention.UniformWindow(), 0);
}

// Every weight of a model of each family (ModelWeights::ForEach, the list training and
// checkpoints walk) is one entry of the family's table, once, with the size the table's shape
// gives; a tied classifier is left out, an untied one is listed; FamilyOf gives the family back.
TEST(ModelFamily, EveryTableCoversEveryWeightOnceWithItsShape) {
  for (const ModelFamily* family : ModelFamilies())
    for (const bool tied : {true, false}) {
      SCOPED_TRACE(family->name);
      ModelConfig c = testing::TinyConfig();
      c.n_kv_heads = c.n_heads / 2;  // grouped-query: k and v narrower than q
      c.shared_classifier = tied;
      SetFamilyBlock(*family, c);  // q/k/v biases, q/k norms, Gemma's block
      if (family->qk_norm) c.explicit_head_dim = 2 * c.head_dim();  // as Qwen 3's
      c.family = family->name;  // as read from its files (Phi-3's block is LLaMA's)
      EXPECT_EQ(&FamilyOf(c), family);
      ModelWeights w = ZeroWeights<float>(c);
      std::map<const std::vector<float>*, std::string> all;
      w.ForEach([&](const std::string& name, std::vector<float>& v, bool) { all[&v] = name; });
      for (const WeightFormat format : {WeightFormat::kGguf, WeightFormat::kHf}) {
        const std::vector<FamilyTensorAt> tensors = FamilyTensors(*family, c, format);
        std::set<const std::vector<float>*> seen;
        std::set<std::string> file_names;
        for (const FamilyTensorAt& t : tensors) {
          EXPECT_TRUE(file_names.insert(t.name).second) << "two tensors named " << t.name;
          int64_t n = 1;
          for (const int64_t d : t.shape) n *= d;
          size_t held = 0;  // a fused tensor's parts together, rows after rows
          int64_t rows = 0;
          const std::vector<std::vector<float>*> members = FamilyTensorMembers(w, t);
          for (size_t i = 0; i < members.size(); ++i) {
            std::vector<float>* data = members[i];
            ASSERT_TRUE(all.contains(data)) << t.name << " is not a weight of the model";
            EXPECT_TRUE(seen.insert(data).second) << t.name << " maps onto a weight twice";
            held += data->size();
            const std::vector<int64_t> shape = WeightShape(c, all[data]);
            rows += shape[0];
            if (t.parts.empty()) {
              EXPECT_EQ(t.shape, shape) << t.name;
            } else {
              EXPECT_EQ(t.parts[i].rows, shape[0]) << t.name << " part " << i;
              EXPECT_EQ(t.shape[1], shape[1]) << t.name << " part " << i;
            }
          }
          EXPECT_EQ(static_cast<size_t>(n), held) << t.name;
          EXPECT_EQ(t.shape[0], rows) << t.name;
        }
        EXPECT_EQ(seen.size(), all.size()) << "tied " << tied;
      }
    }
}

TEST(ModelFamily, LlamaNamesAreLlamaCppsAndTransformers) {
  ModelConfig c = testing::TinyConfig();
  c.n_kv_heads = c.n_heads / 2;
  c.shared_classifier = false;
  const auto by_name = [&](WeightFormat f) {
    std::map<std::string, FamilyTensorAt> m;
    for (FamilyTensorAt& t : FamilyTensors(LlamaFamily(), c, f)) m[t.name] = t;
    return m;
  };
  const auto gguf = by_name(WeightFormat::kGguf), hf = by_name(WeightFormat::kHf);
  ASSERT_TRUE(gguf.contains("blk.1.attn_k.weight"));
  const FamilyTensorAt& k = gguf.at("blk.1.attn_k.weight");
  EXPECT_EQ(k.layer, 1);
  EXPECT_EQ(k.shape, (std::vector<int64_t>{c.kv_dim(), c.dim}));
  EXPECT_EQ(k.rope_heads, c.n_kv_heads);  // HF's rotate_half layout, permuted per kv head
  ASSERT_TRUE(hf.contains("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(hf.at("model.layers.1.self_attn.q_proj.weight").rope_heads, c.n_heads);
  EXPECT_EQ(hf.at("model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{c.dim, c.hidden_dim}));
  EXPECT_EQ(hf.at("model.layers.0.self_attn.v_proj.weight").rope_heads, 0);
  for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight"}) {
    EXPECT_TRUE(gguf.contains(name)) << name;
  }
  for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_TRUE(hf.contains(name)) << name;
  }
  // The files' order: the embedding first, then the layers in order, then the final norm.
  const std::vector<FamilyTensorAt> list = FamilyTensors(LlamaFamily(), c, WeightFormat::kGguf);
  EXPECT_EQ(list.front().name, "token_embd.weight");
  EXPECT_EQ(list[1].name, "blk.0.attn_norm.weight");
  EXPECT_EQ(list[list.size() - 2].name, "output_norm.weight");
}

}  // namespace
}  // namespace stretch
