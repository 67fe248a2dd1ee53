// Any model written as a stretch checkpoint (src/io/model_checkpoint.h) reads back through the
// checkpoint reader (src/io/stretch_checkpoint.h) as the same model: config, attention layout and
// every weight bit for bit, step 0, and a tokenizer that encodes as the one given.
#include "src/io/model_checkpoint.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/model_arch.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ErrorOf;

// Every tensor of a model as the bits of its floats, by name.
std::map<std::string, std::vector<uint32_t>> TensorBits(Model m) {
  std::map<std::string, std::vector<uint32_t>> bits;
  m.weights.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
    std::vector<uint32_t>& b = bits[name];
    for (const float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  });
  return bits;
}

// The same config, layout and weights (bit for bit). A layout without per-layer entries equals
// one with {position, full attention} for every layer: the file lists every layer.
void ExpectSameModel(const Model& want, const Model& got) {
  const ModelConfig &a = want.config, &b = got.config;
  EXPECT_EQ(a.block, b.block);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  if (a.Gau()) {
    EXPECT_EQ(a.key_dim, b.key_dim);
  }
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.shared_classifier, b.shared_classifier);
  EXPECT_EQ(std::bit_cast<uint32_t>(a.rope_base), std::bit_cast<uint32_t>(b.rope_base));
  EXPECT_EQ(std::bit_cast<uint32_t>(a.rope_interpolation),
            std::bit_cast<uint32_t>(b.rope_interpolation));
  EXPECT_EQ(std::bit_cast<uint32_t>(a.norm_eps), std::bit_cast<uint32_t>(b.norm_eps));
  const AttentionLayout &la = a.attention, &lb = b.attention;
  EXPECT_EQ(la.position, lb.position);
  for (int l = 0; l < a.n_layers; ++l) {
    EXPECT_EQ(la.Layer(l).position, lb.Layer(l).position) << "layer " << l;
    EXPECT_EQ(la.Layer(l).window, lb.Layer(l).window) << "layer " << l;
  }
  EXPECT_EQ(la.query_norm, lb.query_norm);
  EXPECT_EQ(la.key_norm, lb.key_norm);
  EXPECT_EQ(la.logit_scale, lb.logit_scale);
  EXPECT_EQ(la.rope_fraction, lb.rope_fraction);
  EXPECT_EQ(la.xpos_scale_base, lb.xpos_scale_base);
  if (la.position == LayerPosition::kSandwich) {
    EXPECT_EQ(la.sandwich_dim, lb.sandwich_dim);
    EXPECT_EQ(la.sandwich_lambda, lb.sandwich_lambda);
  }
  EXPECT_EQ(la.position_log_scale, lb.position_log_scale);
  EXPECT_EQ(la.ssmax, lb.ssmax);
  EXPECT_EQ(la.log_length_scale, lb.log_length_scale);
  EXPECT_EQ(la.rope_map, lb.rope_map);

  const auto wa = TensorBits(want), wb = TensorBits(got);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, bits] : wa) {
    const auto it = wb.find(name);
    ASSERT_NE(it, wb.end()) << name;
    EXPECT_TRUE(bits == it->second) << name << " differs";
  }
}

class ModelCheckpointTest : public testing::TempDirTest {
 protected:
  ModelCheckpointTest() : TempDirTest("stretch_model_checkpoint_") {}

  // A checkpoint laid out as src/train/checkpoint.h writes it (every parameter, KERPLE's on every
  // layer, AdamW's state, the batch stream's RNG, the step, stretch.train, the bytes tokenizer),
  // written with the io layer (these tests do not link the trainer), weights drawn at random.
  void WriteTrainerLikeCheckpoint(const std::string& path, const TrainArch& arch,
                                  uint64_t seed) const {
    ModelWeights w = ZeroWeights<float>(arch.model);
    Rng rng(seed);
    w.ForEach([&](const std::string&, std::vector<float>& v, bool) {
      for (float& x : v) x = static_cast<float>(0.1 * rng.Normal());
    });
    SafetensorsWriter out;
    w.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
      const std::vector<int64_t> shape = WeightShape(arch.model, name);
      out.Add<float>(name, shape, std::span<const float>(v));
      out.AddOwned<float>("optim.adamw.m." + name, shape, std::vector<float>(v.size(), 0.5f));
      out.AddOwned<float>("optim.adamw.v." + name, shape, std::vector<float>(v.size(), 0.25f));
    });
    out.AddOwned<uint64_t>("optim.adamw.step", {}, std::vector<uint64_t>{40});
    out.AddOwned<uint64_t>("rng.data", {4}, std::vector<uint64_t>{1, 2, 3, 4});
    out.AddOwned<uint64_t>(std::string(kCheckpointStepTensor), {}, std::vector<uint64_t>{40});
    out.SetMetadata("stretch.format", std::string(kCheckpointFormat));
    out.SetMetadata("stretch.version", std::to_string(kCheckpointVersion));
    out.SetMetadata("stretch.config", ArchToJson(arch).dump());
    out.SetMetadata("stretch.train", R"({"accumulate":1,"batch":4,"beta1":0.9,"beta2":0.95,)"
                                     R"("clip":1.0,"eps":1e-08,"lr":0.002,"min_lr":0.0002,)"
                                     R"("seed":1,"steps":40,"warmup_steps":4,"weight_decay":0.1})");
    out.SetMetadata("stretch.tokenizer", R"({"bos":256,"kind":"bytes","vocab_size":258})");
    out.Write(path);
  }

  // A checkpoint read, written again with its own tokenizer, read again: the same model and
  // tokenizer, step 0, no training state.
  void CheckCheckpointRoundTrips(const std::string& in) const {
    const CheckpointModel a = LoadCheckpointModel(in);
    const std::string out = Path("again.safetensors");
    ASSERT_TRUE(a.tokenizer.has_value());
    SaveModelAsCheckpoint(a.model, out, *a.tokenizer);
    const CheckpointModel b = LoadCheckpointModel(out);
    ExpectSameModel(a.model, b.model);
    EXPECT_EQ(b.header.step, 0);
    EXPECT_EQ(b.header.tokenizer_kind, a.header.tokenizer_kind);
    ASSERT_TRUE(b.tokenizer.has_value());
    EXPECT_EQ(b.tokenizer->kind(), a.tokenizer->kind());
    EXPECT_EQ(b.tokenizer->model(), a.tokenizer->model());
    EXPECT_EQ(b.tokenizer->bos_id(), a.tokenizer->bos_id());
    const SafetensorsFile f(out);
    EXPECT_EQ(f.FindMetadata("stretch.train"), std::nullopt);
    EXPECT_EQ(f.Find("rng.data"), nullptr);
    EXPECT_EQ(f.GetMetadata("stretch.converted_from"), a.model.source);
    for (const SafetensorsTensor& t : f.tensors())
      EXPECT_FALSE(t.name.starts_with("optim.")) << t.name;
    // The same tokenizer metadata as the trainer writes.
    const SafetensorsFile src(in);
    EXPECT_EQ(json::parse(f.GetMetadata("stretch.tokenizer")),
              json::parse(src.GetMetadata("stretch.tokenizer")));
  }
};

TEST_F(ModelCheckpointTest, Stories260KRoundTripsWithItsTokenizer) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string tok512 = testing::SharedPath("models/stories260K/tok512.bin");
  const std::string stories =
      testing::SharedPath("data/tinystories/TinyStories-validation-HF-first.txt");
  STRETCH_SKIP_IF_MISSING(bin);
  STRETCH_SKIP_IF_MISSING(tok512);
  STRETCH_SKIP_IF_MISSING(stories);
  const Model m = LoadLlama2c(bin);
  const Tokenizer tok = Tokenizer::LoadLlama2c(tok512);
  const std::string path = Path("stories260K.safetensors");
  SaveModelAsCheckpoint(m, path, &tok);

  const CheckpointHeader h = ReadCheckpointHeader(path);
  EXPECT_EQ(h.step, 0);
  EXPECT_EQ(h.tokenizer_kind, "sentencepiece");
  EXPECT_EQ(h.config.dim, 64);
  const CheckpointModel c = LoadCheckpointModel(path);
  ExpectSameModel(m, c.model);

  // The tokenizer: stored as the trainer stores SentencePiece, and encoding as llama2.c's does.
  const SafetensorsFile f(path);
  EXPECT_EQ(json::parse(f.GetMetadata("stretch.tokenizer")),
            (json{{"kind", "sentencepiece"}, {"vocab_size", 512}, {"bos", 1}}));
  const std::vector<uint8_t> model_bytes = f.Read<uint8_t>(std::string(kCheckpointTokenizerTensor));
  EXPECT_EQ(std::string(model_bytes.begin(), model_bytes.end()), SerializeSentencePieceModel(tok));
  EXPECT_EQ(f.FindMetadata("stretch.train"), std::nullopt);  // not trained here
  ASSERT_TRUE(c.tokenizer.has_value());
  EXPECT_EQ(c.tokenizer->vocab_size(), 512);
  EXPECT_EQ(c.tokenizer->bos_id(), Tokenizer::kBos);
  EXPECT_EQ(c.tokenizer->eos_id(), Tokenizer::kEos);
  // About 8 KB of stories, cut at a line's end, and a few short texts.
  std::string text = testing::ReadBytes(stories).substr(0, 8192);
  text.resize(text.rfind('\n') + 1);
  ASSERT_GT(text.size(), 4000u);
  for (const std::string& t :
       {text, std::string("Once upon a time"), std::string(" two  spaces\n\nand lines "),
        std::string("caf\xC3\xA9 \xE2\x98\x83"), std::string()}) {
    const std::vector<int32_t> got = c.tokenizer->Encode(t);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), tok.Encode(t, false, false))
        << "\"" << t.substr(0, 40) << "\"";
  }
}

TEST_F(ModelCheckpointTest, RandomGqaModelWithSeparateClassifierAndInterpolationRoundTrips) {
  ModelConfig c = testing::TinyConfig();  // 4 heads, 2 kv heads, its own classifier
  c.rope_interpolation = 2.0f;
  c.rope_base = 5000.0f;
  c.norm_eps = 1e-6f;
  ASSERT_FALSE(c.shared_classifier);
  ASSERT_NE(c.n_heads, c.n_kv_heads);
  const Model m = testing::RandomModel(c, 11);
  const std::string path = Path("random.safetensors");
  SaveModelAsCheckpoint(m, path, nullptr);

  const CheckpointModel back = LoadCheckpointModel(path);
  ExpectSameModel(m, back.model);
  EXPECT_EQ(back.header.step, 0);
  EXPECT_EQ(back.header.tokenizer_kind, "");
  EXPECT_FALSE(back.tokenizer.has_value());
  const SafetensorsFile f(path);
  EXPECT_EQ(f.Find(std::string(kCheckpointTokenizerTensor)), nullptr);
  EXPECT_EQ(f.GetMetadata("stretch.converted_from"), "random test model");
  EXPECT_EQ(json::parse(f.GetMetadata("stretch.config")).at("rope_interpolation"), 2.0);
  // Written atomically: no temporary file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

// Trained layouts, as the trainer writes them, read, written again and read again: KERPLE with a
// layer without position (whose unused a, b the trainer keeps), windows, SSMax, query and key
// norms, a logit scale, the GAU block, XPOS, Sandwich, p-RoPE and a training-time map.
TEST_F(ModelCheckpointTest, TrainedLayoutsRoundTrip) {
  const json base = {{"dim", 32},
                     {"hidden_dim", 48},
                     {"layers", 3},
                     {"heads", 4},
                     {"kv_heads", 2},
                     {"vocab_size", 258},
                     {"seq_len", 64},
                     {"shared_classifier", false},
                     {"rope_base", 10000.0},
                     {"norm_eps", 1e-5},
                     {"position", "rope"},
                     {"logits", {{"query_norm", false}, {"key_norm", false}, {"scale", 0.0}}},
                     {"layout", json::array({{{"position", true}, {"window", 0}},
                                             {{"position", true}, {"window", 0}},
                                             {{"position", true}, {"window", 0}}})}};
  std::vector<std::pair<std::string, json>> cases;
  {
    json j = base;
    j["position"] = "kerple-log";
    j["layout"][0]["window"] = 8;
    j["layout"][2]["position"] = false;
    // SSMax beside a window layer: its n counts the window's keys, which the config says
    // ("log_n_keys"; a config without it is of an earlier version, refused: checkpoint_test).
    j["logits"] = {{"query_norm", true},
                   {"key_norm", true},
                   {"scale", 6.5},
                   {"ssmax", true},
                   {"log_n_keys", "seen"}};
    cases.emplace_back("kerple-log, windows, no position on layer 2, cosine, SSMax", j);
  }
  {
    json j = base;
    j["block"] = "gau";
    j["gau_key_dim"] = 8;
    j["heads"] = 1;
    j["kv_heads"] = 1;
    j["position"] = "kerple-power";
    j["layout"][1]["position"] = false;
    j["shared_classifier"] = true;
    cases.emplace_back("GAU, kerple-power", j);
  }
  {
    json j = base;
    j["position"] = "xpos";
    j["xpos_gamma"] = 256.0;
    j["rope_fraction"] = 0.5;
    cases.emplace_back("xpos, p-RoPE", j);
  }
  {
    json j = base;
    j["position"] = "sandwich";
    j["sandwich_dim"] = 16;
    j["sandwich_lambda"] = 0.5;
    j["logits"]["log_length"] = true;
    cases.emplace_back("sandwich, log-length", j);
  }
  {
    json j = base;
    j["rope_ntk"] = 4.0;
    j["rope_ntk_base"] = 10000.0;
    j["rope_base"] = NtkRopeBase(10000.0, 4.0, 8);
    cases.emplace_back("NTK base", j);
  }
  for (const auto& [what, j] : cases) {
    SCOPED_TRACE(what);
    const TrainArch arch = ArchFromJson(j, what);
    const std::string in = Path("trained.safetensors");
    WriteTrainerLikeCheckpoint(in, arch, 3);
    CheckCheckpointRoundTrips(in);
  }
}

// A checkpoint the real trainer wrote: tests/cli/format_roundtrip_cli_test.cc trains one and
// converts it (the io tests do not link the trainer).

TEST_F(ModelCheckpointTest, RefusesWhatACheckpointCannotHold) {
  const std::string out = Path("out.safetensors");
  const Tokenizer* none = nullptr;
  auto refused = [&](const Model& m) {
    return ErrorOf([&] { SaveModelAsCheckpoint(m, out, none); });
  };
  auto expect_in = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  const Model good = testing::RandomModel(testing::TinyConfig(), 5);
  {
    Model m = good;  // the reader refuses a PI below 1
    m.config.rope_interpolation = 0.5f;
    const std::string e = refused(m);
    expect_in(e, out);
    expect_in(e, "rope interpolation (pi)=0.5");
  }
  {
    Model m = good;  // XPOS's decay rides on RoPE
    m.config.attention.position = LayerPosition::kAlibi;
    m.config.attention.xpos_scale_base = 512.0;
    expect_in(refused(m), "XPOS (gamma=512) on a model without RoPE");
  }
  {
    Model m = good;  // the shared classifier is the embedding: a classifier of its own is lost
    m.config.shared_classifier = true;
    expect_in(refused(m), "tensor 'classifier'");
  }
  {
    Model m = good;
    m.weights.layers[1].w2.pop_back();
    expect_in(refused(m), "tensor 'layers.1.w2' has 1791 values, expected 1792");
  }
  {
    Model m = good;
    m.config.attention.position = LayerPosition::kKerpleLog;  // without its a_h, b_h
    expect_in(refused(m), "KERPLE parameters");
  }
  {  // a tokenizer of another vocabulary
    const std::string e =
        ErrorOf([&] { SaveModelAsCheckpoint(good, out, TrainingTokenizer::Bytes()); });
    expect_in(e, "has 258 tokens");
    expect_in(e, "vocab_size 40");
  }
  {  // a vocabulary SentencePiece would encode otherwise (no byte pieces)
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
    for (size_t i = 0; i + 1 < sizeof(testing::kChars); ++i)
      pieces.emplace_back(1, testing::kChars[i]);
    const Tokenizer tok =
        Tokenizer::FromVocabulary("chars", pieces, std::vector<float>(pieces.size(), 0.0f));
    const std::string e = ErrorOf([&] { SaveModelAsCheckpoint(good, out, &tok); });
    expect_in(e, "cannot be stored as a SentencePiece model");
    expect_in(e, "byte pieces");
  }
  EXPECT_FALSE(fs::exists(out));

  // Never over an input: the model's file, or the tokenizer's.
  const std::string bin = Path("tiny.bin"), tok_path = Path("tok.bin");
  SaveLlama2cVersion1(good, bin);
  testing::WriteTokenizer(tok_path);
  const std::string before = testing::ReadBytes(bin);
  const Model loaded = LoadLlama2c(bin);
  expect_in(ErrorOf([&] { SaveModelAsCheckpoint(loaded, bin, none); }),
            "refusing to write over an input");
  const Tokenizer tok = Tokenizer::LoadLlama2c(tok_path);
  expect_in(ErrorOf([&] { SaveModelAsCheckpoint(loaded, tok_path, &tok); }),
            "is the tokenizer's file");
  EXPECT_EQ(testing::ReadBytes(bin), before);
  // A format holding " (" itself, and a Hugging Face folder, whose files are the inputs.
  {
    Model m = good;
    m.source = bin + " (GGUF version 3 (llama, F32))";
    expect_in(ErrorOf([&] { SaveModelAsCheckpoint(m, bin, none); }), "the file the model was");
    fs::create_directories(Path("hf"));
    m.source = Path("hf") + " (Hugging Face LlamaForCausalLM)";
    expect_in(ErrorOf([&] { SaveModelAsCheckpoint(m, Path("hf/model.safetensors"), none); }),
              "inside the folder the model was read from");
  }
  // A checkpoint read is an input too.
  SaveModelAsCheckpoint(loaded, out, none);
  const CheckpointModel c = LoadCheckpointModel(out);
  expect_in(ErrorOf([&] { SaveModelAsCheckpoint(c.model, out, none); }),
            "refusing to write over an input");
}

}  // namespace
}  // namespace stretch
