// Mistral: the LLaMA family with a sliding window on every layer (src/model/families/llama.cc,
// ModelFamily::hf_window_architecture). A random model whose layers all attend to the last W keys
// is written as a MistralForCausalLM folder (config.json's sliding_window) and as GGUF
// (llama.attention.sliding_window) and read back bit for bit with its window; the window counts
// the query itself, as transformers' sliding_window_overlay does (kv_idx > q_idx - W): the engine's
// logits for the model read from the folder equal the double reference's with keys i - W + 1 .. i,
// and are far from the references with one key more or one less.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "reference/layout_llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/model/family.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/method_specs.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::ExpectSameWeights;
using testing::MaxAbsDiff;
using testing::ReadText;

constexpr int64_t kWindow = 6;

class MistralFilesTest : public testing::TempDirTest {
 protected:
  MistralFilesTest() : TempDirTest("stretch_mistral_") {}
  static ModelConfig Config(int64_t window = kWindow) {
    ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads, 2 kv heads, 2 layers
    c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{.window = window});
    return c;
  }
};

TEST_F(MistralFilesTest, HfFolderRoundTripsAsMistralForCausalLMWithItsWindow) {
  const Model m = testing::RandomModel(Config(), 3);
  ASSERT_EQ(m.config.attention.UniformWindow(), kWindow);
  EXPECT_EQ(&FamilyOf(m.config), &LlamaFamily());
  const std::string dir = Path("mistral");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  EXPECT_NE(config.find("\"MistralForCausalLM\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"model_type\": \"mistral\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"sliding_window\": 6"), std::string::npos) << config;
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  ExpectSameWeights(back, m);
  // The same model without a window stays a LlamaForCausalLM with no sliding_window key.
  Model plain = m;
  plain.config.attention.layers.clear();
  SaveHfModel(plain, Path("llama"), SafetensorsDtype::kF32);
  const std::string plain_config = ReadText(Path("llama") + "/config.json");
  EXPECT_NE(plain_config.find("\"LlamaForCausalLM\""), std::string::npos) << plain_config;
  EXPECT_EQ(plain_config.find("sliding_window"), std::string::npos) << plain_config;
}

TEST_F(MistralFilesTest, GgufRoundTripsWithTheSlidingWindowKey) {
  const Model m = testing::RandomModel(Config(), 4);
  const std::string path = Path("mistral.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "llama");
  EXPECT_EQ(g.Int("llama.attention.sliding_window"), kWindow);
  const GgufModelHeader h = ReadGgufModelHeader(path);
  EXPECT_EQ(h.config.attention.UniformWindow(), kWindow);
  bool said = false;
  for (const std::string& line : h.provenance) {
    said = said || line.find("llama.attention.sliding_window") != std::string::npos;
  }
  EXPECT_TRUE(said) << "the provenance does not name the window's key";
  const Model back = LoadGgufModel(path);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  ExpectSameWeights(back, m);
}

TEST_F(MistralFilesTest, TheWindowCountsTheQueryItselfAsTransformersDoes) {
  const Model m = testing::RandomModel(Config(), 5);
  SaveHfModel(m, Path("mistral"), SafetensorsDtype::kF32);
  const Model loaded = LoadHfModel(Path("mistral"));
  const ModelConfig& c = loaded.config;
  Rng rng(6);
  std::vector<int> tokens(40);  // several windows long
  for (int& t : tokens)
    t = static_cast<int>(UniformBelow(rng, static_cast<uint64_t>(c.vocab_size)));
  Transformer model(loaded);
  model.SetMethod(ParseMethod("direct"), static_cast<int64_t>(tokens.size()));
  KvCache cache(c, static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden;
  model.Forward(tokens, cache, hidden, Transformer::Rows::kAll);
  std::vector<float> got(tokens.size() * static_cast<size_t>(c.vocab_size));
  model.Logits(hidden.data(), static_cast<int64_t>(tokens.size()), got.data());
  const std::vector<double> exact =
      ref::LayoutForwardRef<double>(c, loaded.weights, "direct", tokens);
  // Float against double over two layers of a tiny model: the float reference's own distance,
  // times 8, bounds the engine's rounding (as tests/model/method_model_test.cc).
  const double tol =
      8 * MaxAbsDiff(ref::LayoutForwardRef<float>(c, loaded.weights, "direct", tokens), exact) +
      1e-6;
  EXPECT_LE(MaxAbsDiff(got, exact), tol);
  for (const int64_t other : {kWindow - 1, kWindow + 1}) {
    ModelConfig changed = c;
    for (LayerLayout& l : changed.attention.layers) l.window = other;
    EXPECT_GT(
        MaxAbsDiff(got, ref::LayoutForwardRef<double>(changed, loaded.weights, "direct", tokens)),
        10 * tol)
        << "a window of " << other << " keys is not told apart";
  }
}

// Every training-free method on a model whose every layer is windowed: each layer keeps its own
// window and plain RoPE, so no method but `direct` has a layer to apply to, and each is refused
// by name, saying that only `direct` is allowed (the streaming cache's refusal once offered
// masks that this model refuses too); whatever runs equals the double reference and `direct`.
TEST_F(MistralFilesTest, EveryMethodIsRefusedByNameOrRunsAsTheReferenceOnAWindowedModel) {
  const Model m = testing::RandomModel(Config(), 9);
  const ModelConfig& c = m.config;
  Rng rng(10);
  std::vector<int> tokens(3 * c.seq_len);  // past L, so that the methods that bend would bend
  for (int& t : tokens)
    t = static_cast<int>(UniformBelow(rng, static_cast<uint64_t>(c.vocab_size)));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const auto logits_of = [&](const std::string& spec) {
    Transformer model(m);
    model.SetMethod(ParseMethod(spec), n);
    KvCache cache(c, n);
    std::vector<float> hidden;
    model.Forward(tokens, cache, hidden, Transformer::Rows::kAll);
    std::vector<float> got(tokens.size() * static_cast<size_t>(c.vocab_size));
    model.Logits(hidden.data(), n, got.data());
    return got;
  };
  const std::vector<float> direct = logits_of("direct");
  const std::vector<double> exact = ref::LayoutForwardRef<double>(c, m.weights, "direct", tokens);
  // As above: the float reference's distance from the double one, times 8.
  const double tol =
      8 * MaxAbsDiff(ref::LayoutForwardRef<float>(c, m.weights, "direct", tokens), exact) + 1e-6;
  ASSERT_LE(MaxAbsDiff(direct, exact), tol);
  int refused = 0, run = 0;
  for (const std::string& spec : testing::EveryMethodSpec(c.head_dim(), c.seq_len)) {
    SCOPED_TRACE(spec);
    std::vector<float> got;
    try {
      got = logits_of(spec);
    } catch (const Error& e) {
      ++refused;
      const std::string what = e.what();
      EXPECT_NE(what.find("applies to no layer of this model"), std::string::npos) << what;
      EXPECT_NE(what.find("allowed on this model: direct"), std::string::npos) << what;
      continue;
    }
    ++run;
    EXPECT_LE(MaxAbsDiff(got, ref::LayoutForwardRef<double>(c, m.weights, spec, tokens)), tol);
    EXPECT_LE(MaxAbsDiff(got, direct), tol) << "a windowed layer changed by the method";
  }
  EXPECT_GT(refused, 0) << "no method that changes RoPE was refused";
  EXPECT_GT(run, 0) << "every method was refused, the masks too";
}

TEST_F(MistralFilesTest, RopeScalingOnAWindowedModelIsRefusedAndNothingWritten) {
  const Model m = testing::RandomModel(Config(), 7);
  const Method yarn = ParseMethod("yarn:factor=4");
  for (const auto& [path, hf] :
       std::vector<std::pair<std::string, bool>>{{Path("hf"), true}, {Path("m.gguf"), false}}) {
    try {
      if (hf) {
        SaveHfModel(m, path, SafetensorsDtype::kF32, {}, &yarn);
      } else {
        SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr, &yarn);
      }
      ADD_FAILURE() << path << " was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sliding window"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(hf ? path + "/config.json" : path)) << path;
  }
  // Windows that differ between layers (Gemma's, HWFA's) are not Mistral's: refused by name.
  Model mixed = m;
  mixed.config.attention.layers[1].window = 0;
  try {
    SaveHfModel(mixed, Path("mixed"), SafetensorsDtype::kF32);
    ADD_FAILURE() << "a folder was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trained attention layout"), std::string::npos)
        << e.what();
  }
}

// llama2.c files have no place for the window: refused by name, nothing written (stretch's own
// checkpoints keep any layout).
TEST_F(MistralFilesTest, Llama2cRefusesTheWindowAndWritesNothing) {
  const std::string bin = Path("m.bin");
  try {
    SaveLlama2cVersion1(testing::RandomModel(Config(), 8), bin);
    ADD_FAILURE() << bin << " was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layout"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(bin));
}

}  // namespace
}  // namespace stretch
