// Checkpoints: a run stopped, saved and resumed continues bit for bit like the uninterrupted run
// (losses and final weights), and bad files are refused with the reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/train/arch_spec.h"
#include "src/train/checkpoint.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

void RandomBatch(Rng& rng, int64_t B, std::vector<int>& tokens) {
  tokens.resize(static_cast<size_t>(B * 17));
  for (int& t : tokens) t = static_cast<int>(rng.NextU64() % 24);
}

TrainArch SmallArch(LayerPosition pos) {
  TrainArch a;
  a.model.dim = 32;
  a.model.hidden_dim = 48;
  a.model.n_layers = 2;
  a.model.n_heads = 4;
  a.model.n_kv_heads = 2;
  a.model.vocab_size = 24;
  a.model.seq_len = 16;
  a.model.attention.position = pos;
  if (pos == LayerPosition::kSandwich) {
    a.model.attention.sandwich_dim = kSandwichDefaultDim;
    a.model.attention.sandwich_lambda = kSandwichDefaultLambda;
  }
  a.model.attention.layers = {LayerLayout{true, 8}, LayerLayout{false, 0}};
  return a;
}

// The GAU block: one head, key width 16, expansion 64 (4 kernel copies of the head).
TrainArch SmallGauArch(LayerPosition pos) {
  TrainArch a = SmallArch(pos);
  a.model.hidden_dim = 64;
  a.model.SetGau(16);
  return a;
}

TrainerOptions SmallOptions() {
  TrainerOptions o;
  o.batch = 3;
  o.accumulate = 2;
  o.schedule = LrSchedule{3e-3, 1e-4, 3, 12};
  o.seed = 99;
  return o;
}

std::string TempPath(const std::string& name) {
  const fs::path dir = testing::ProgramTempDir("stretch_ckpt_");
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<float> AllParams(Trainer& t) {
  std::vector<float> out;
  for (const Param& p : t.registry().params()) out.insert(out.end(), p.value, p.value + p.numel());
  return out;
}

void ExpectErrorContaining(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, ResumedRunIsBitForBitTheUninterruptedOne) {
  for (const TrainArch& arch :
       {SmallArch(LayerPosition::kRope), SmallArch(LayerPosition::kKerpleLog),
        SmallGauArch(LayerPosition::kRope), SmallGauArch(LayerPosition::kKerpleLog)}) {
    Trainer full(arch, SmallOptions());
    std::vector<double> losses;
    for (int s = 0; s < 12; ++s) losses.push_back(full.Step(RandomBatch).loss);

    const std::string path = TempPath("run.safetensors");
    {
      Trainer first(arch, SmallOptions());
      for (int s = 0; s < 5; ++s) ASSERT_EQ(first.Step(RandomBatch).loss, losses[s]);
      SaveCheckpoint(first, path);
    }
    const SafetensorsFile file(path);
    const CheckpointInfo info = ReadCheckpointInfo(file);
    EXPECT_EQ(info.step, 5);
    EXPECT_EQ(info.arch.model.block, arch.model.block);
    Trainer resumed(info.arch, info.options);
    LoadCheckpointInto(resumed, file);
    for (int s = 5; s < 12; ++s) EXPECT_EQ(resumed.Step(RandomBatch).loss, losses[s]) << s;
    const std::vector<float> a = AllParams(full), b = AllParams(resumed);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

// PoSE positions are a function of (seed, micro-batch): a resumed run draws the same ones, and
// its options (with the perturbation) come back from the file.
TEST(Checkpoint, ResumedPerturbedRunIsBitForBitTheUninterruptedOne) {
  const TrainArch arch = SmallArch(LayerPosition::kRope);
  TrainerOptions opt = SmallOptions();
  opt.perturb = ParsePerturbation("pose:max=" + std::to_string(4 * arch.model.seq_len), "test");
  Trainer full(arch, opt), plain(arch, SmallOptions());
  std::vector<double> losses;
  for (int s = 0; s < 8; ++s) losses.push_back(full.Step(RandomBatch).loss);
  EXPECT_NE(plain.Step(RandomBatch).loss, losses[0]);  // the positions reach the loss
  const std::string path = TempPath("pose.safetensors");
  {
    Trainer first(arch, opt);
    for (int s = 0; s < 3; ++s) ASSERT_EQ(first.Step(RandomBatch).loss, losses[s]);
    SaveCheckpoint(first, path);
  }
  const SafetensorsFile file(path);
  const CheckpointInfo info = ReadCheckpointInfo(file);
  EXPECT_EQ(info.options.perturb.Spec(), opt.perturb.Spec());
  Trainer resumed(info.arch, info.options);
  LoadCheckpointInto(resumed, file);
  for (int s = 3; s < 8; ++s) EXPECT_EQ(resumed.Step(RandomBatch).loss, losses[s]) << s;
  const std::vector<float> a = AllParams(full), b = AllParams(resumed);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(Checkpoint, ArchitectureAndOptionsRoundTrip) {
  TrainArch a = SmallArch(LayerPosition::kKerplePower);
  a.model.attention.key_norm = true;
  a.model.attention.logit_scale = 2.5;
  const TrainArch b = ArchFromJson(ArchToJson(a), "test");
  EXPECT_EQ(ArchToJson(a), ArchToJson(b));
  const TrainerOptions o = SmallOptions();
  EXPECT_EQ(TrainerOptionsToJson(o),
            TrainerOptionsToJson(TrainerOptionsFromJson(TrainerOptionsToJson(o), "t")));
}

TEST(Checkpoint, LaterVariantsRoundTrip) {
  TrainArch x = SmallArch(LayerPosition::kRope);
  x.model.attention.xpos_scale_base = 64;  // XPOS
  x.model.attention.rope_fraction = 0.75;
  x.model.attention.ssmax = x.model.attention.log_length_scale = true;
  TrainArch s = SmallArch(LayerPosition::kSandwich);
  s.model.attention.sandwich_dim = 32;
  s.model.attention.sandwich_lambda = 0.5;
  s.model.attention.query_norm = s.model.attention.key_norm = s.model.attention.position_log_scale =
      true;
  s.model.attention.logit_scale = 4;
  for (const TrainArch& a : {x, s}) {
    const TrainArch b = ArchFromJson(ArchToJson(a), "test");
    EXPECT_EQ(ArchToJson(a), ArchToJson(b));
    EXPECT_EQ(b.model.attention.position, a.model.attention.position);
    EXPECT_EQ(b.model.attention.xpos_scale_base, a.model.attention.xpos_scale_base);
    EXPECT_EQ(b.model.attention.rope_fraction, a.model.attention.rope_fraction);
    EXPECT_EQ(b.model.attention.sandwich_dim, a.model.attention.sandwich_dim);
    EXPECT_EQ(b.model.attention.sandwich_lambda, a.model.attention.sandwich_lambda);
    EXPECT_EQ(b.model.attention.ssmax, a.model.attention.ssmax);
    EXPECT_EQ(b.model.attention.log_length_scale, a.model.attention.log_length_scale);
    EXPECT_EQ(b.model.attention.position_log_scale, a.model.attention.position_log_scale);
  }
  // Defaults are not written, so earlier runs' configs keep comparing equal on --resume.
  const nlohmann::json plain = ArchToJson(SmallArch(LayerPosition::kRope));
  EXPECT_FALSE(plain.contains("rope_fraction"));
  EXPECT_FALSE(plain.at("logits").contains("ssmax"));
  EXPECT_FALSE(plain.at("logits").contains("log_length"));
  // An earlier version's "logn" (max(1, ln(i + 1) / ln L): no effect in training) is refused,
  // not read under the new meaning; "logn": false was never written and is accepted.
  nlohmann::json old = plain;
  old["logits"]["logn"] = true;
  ExpectErrorContaining([&] { ArchFromJson(old, "old run"); }, "old run logits: \"logn\": true");
  old["logits"]["logn"] = false;
  EXPECT_EQ(ArchToJson(ArchFromJson(old, "old run")), plain);
  // Trained log-n, SSMax or the per-position lambda beside a window or chunk layer: their n counts
  // the keys the layer lets a query see, marked "log_n_keys"; a config without the mark was
  // written when n was i + 1 there, and is refused. Without a local layer nothing is marked and
  // an earlier config reads as it was.
  for (const auto& set : std::vector<std::function<void(AttentionLayout&)>>{
           [](AttentionLayout& l) { l.log_length_scale = true; },
           [](AttentionLayout& l) { l.ssmax = true; },
           [](AttentionLayout& l) { l.position_log_scale = l.query_norm = l.key_norm = true; }}) {
    TrainArch full = SmallArch(LayerPosition::kRope);
    full.model.attention.layers = {LayerLayout{}, LayerLayout{.position = false}};
    set(full.model.attention);
    EXPECT_FALSE(ArchToJson(full).at("logits").contains("log_n_keys"));
    TrainArch local = full;
    local.model.attention.layers[0].window = 4;
    ValidateArch(local);
    nlohmann::json j = ArchToJson(local);
    EXPECT_EQ(j.at("logits").at("log_n_keys"), "seen");
    EXPECT_EQ(ArchToJson(ArchFromJson(j, "new run")), j);
    j["logits"].erase("log_n_keys");
    ExpectErrorContaining([&] { ArchFromJson(j, "old run"); },
                          "old run logits: a model with window or chunk layers");
    local.model.attention.layers[0] = LayerLayout{.chunk = 4};
    j = ArchToJson(local);
    j["logits"].erase("log_n_keys");
    ExpectErrorContaining([&] { ArchFromJson(j, "old run"); }, "Train the model again");
  }
}

// Per-layer RoPE, chunks and the temperature tuning come back; a config without them (earlier
// runs) writes none of their fields; a bad entry is refused with its layer.
TEST(Checkpoint, PerLayerRopeRoundTrips) {
  TrainArch a = SmallArch(LayerPosition::kRope);
  a.model.attention.layers[0] = LayerLayout{.chunk = 8, .rope_base = 500.0, .rope_pi = 2.0};
  a.model.attention.layers[1] = LayerLayout{.position = false, .temperature = true};
  a.model.attention.temperature_floor = 16;
  a.model.attention.temperature_scale = 0.1;
  ValidateArch(a);
  const TrainArch b = ArchFromJson(ArchToJson(a), "test");
  EXPECT_EQ(ArchToJson(a), ArchToJson(b));
  EXPECT_EQ(b.model.attention.layers, a.model.attention.layers);
  EXPECT_EQ(b.model.attention.temperature_floor, 16.0);
  EXPECT_EQ(b.model.attention.temperature_scale, 0.1);
  const nlohmann::json plain = ArchToJson(SmallArch(LayerPosition::kRope));
  EXPECT_FALSE(plain.at("layout").at(0).contains("chunk"));
  EXPECT_FALSE(plain.at("layout").at(0).contains("rope_base"));
  EXPECT_FALSE(plain.at("logits").contains("temperature"));
  nlohmann::json bad = ArchToJson(a);
  bad["layout"][0]["window"] = 4;  // with chunk 8
  ExpectErrorContaining([&] { ArchFromJson(bad, "f"); }, "layer 0: window=4 and chunk=8");
  bad = ArchToJson(a);
  bad["layout"][1]["rope_base"] = 300;  // a NoPE layer
  ExpectErrorContaining([&] { ArchFromJson(bad, "f"); }, "layer 1: a RoPE base or pi");
  bad = ArchToJson(a);
  bad["logits"].erase("temperature");
  ExpectErrorContaining([&] { ArchFromJson(bad, "f"); },
                        "layer 1: temperature tuning without its floor scale");
}

// PI and NTK: the interpolation, the NTK factor and the base it scales come back, with the
// resolved base; a resumed PI / NTK run is the uninterrupted one; a config whose base does not
// follow from its NTK factor is refused.
TEST(Checkpoint, InterpolationAndNtkRoundTripAndResume) {
  TrainArch pi = SmallArch(LayerPosition::kRope);
  pi.model.rope_interpolation = 4.0f;
  TrainArch ntk = SmallGauArch(LayerPosition::kRope);
  ntk.rope_ntk = 8.0;
  ntk.rope_ntk_base = 500.0f;
  FinalizeArch(ntk);
  for (const TrainArch& a : {pi, ntk}) {
    const nlohmann::json j = ArchToJson(a);
    const TrainArch b = ArchFromJson(j, "test");
    EXPECT_EQ(ArchToJson(b), j);
    EXPECT_EQ(b.model.rope_interpolation, a.model.rope_interpolation);
    EXPECT_EQ(b.model.rope_base, a.model.rope_base);
    EXPECT_EQ(b.rope_ntk, a.rope_ntk);
    EXPECT_EQ(b.rope_ntk_base, a.rope_ntk_base);
    EXPECT_EQ(PositionSpecOf(b), PositionSpecOf(a));

    Trainer full(a, SmallOptions());
    std::vector<double> losses;
    for (int s = 0; s < 6; ++s) losses.push_back(full.Step(RandomBatch).loss);
    const std::string path = TempPath("pi_ntk.safetensors");
    {
      Trainer first(a, SmallOptions());
      for (int s = 0; s < 3; ++s) ASSERT_EQ(first.Step(RandomBatch).loss, losses[s]);
      SaveCheckpoint(first, path);
    }
    const SafetensorsFile file(path);
    const CheckpointInfo info = ReadCheckpointInfo(file);
    Trainer resumed(info.arch, info.options);
    LoadCheckpointInto(resumed, file);
    for (int s = 3; s < 6; ++s) EXPECT_EQ(resumed.Step(RandomBatch).loss, losses[s]) << s;
  }
  EXPECT_EQ(ArchToJson(pi).at("rope_interpolation"), 4.0);
  EXPECT_EQ(ArchToJson(ntk).at("rope_ntk_base"), 500.0);
  // Defaults are not written (earlier runs' configs compare equal on --resume).
  const nlohmann::json plain = ArchToJson(SmallArch(LayerPosition::kRope));
  EXPECT_FALSE(plain.contains("rope_interpolation"));
  EXPECT_FALSE(plain.contains("rope_ntk"));
  nlohmann::json j = ArchToJson(ntk);
  j["rope_base"] = 10000.0;
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "expected the NTK base");
  j = ArchToJson(pi);
  j["rope_interpolation"] = 0.25;
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "rope interpolation (pi)=0.25");
}

// The tokenizer a checkpoint carries comes back (what --init tokenizes its data with), checked
// against the model's vocabulary.
TEST(Checkpoint, TokenizerComesBack) {
  TrainArch a = SmallArch(LayerPosition::kRope);
  a.model.vocab_size = TrainingTokenizer::kByteVocab;
  Trainer t(a, SmallOptions());
  const std::string path = TempPath("tok.safetensors");
  SaveCheckpoint(t, path);
  EXPECT_FALSE(ReadCheckpointTokenizer(SafetensorsFile(path), a.model.vocab_size).has_value());
  CheckpointExtras extras;
  extras.metadata["stretch.tokenizer"] = R"({"kind": "bytes", "vocab_size": 258, "bos": 256})";
  SaveCheckpoint(t, path, extras);
  const std::optional<TrainingTokenizer> tok =
      ReadCheckpointTokenizer(SafetensorsFile(path), a.model.vocab_size);
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->kind(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 258);
  ExpectErrorContaining([&] { ReadCheckpointTokenizer(SafetensorsFile(path), 300); },
                        "has 258 tokens, the model's vocab_size is 300");
  extras.metadata["stretch.tokenizer"] = R"({"kind": "wordpiece"})";
  SaveCheckpoint(t, path, extras);
  ExpectErrorContaining([&] { ReadCheckpointTokenizer(SafetensorsFile(path), 258); }, "wordpiece");
}

TEST(Checkpoint, GauArchitectureRoundTrips) {
  TrainArch a = SmallGauArch(LayerPosition::kKerplePower);
  a.model.attention.query_norm = true;
  const nlohmann::json j = ArchToJson(a);
  EXPECT_EQ(j.at("block"), "gau");
  EXPECT_EQ(j.at("gau_key_dim"), 16);
  const TrainArch b = ArchFromJson(j, "test");
  EXPECT_EQ(b.model.block, ModelBlock::kGau);
  EXPECT_EQ(b.model.key_dim, 16);
  EXPECT_EQ(ArchToJson(b), j);
  // A LLaMA config carries "block": "llama" and no GAU size.
  const nlohmann::json l = ArchToJson(SmallArch(LayerPosition::kRope));
  EXPECT_EQ(l.at("block"), "llama");
  EXPECT_FALSE(l.contains("gau_key_dim"));
}

// Configs written before the GAU block have no "block": they are LLaMA ones.
TEST(Checkpoint, ConfigWithoutBlockIsLlama) {
  nlohmann::json j = ArchToJson(SmallArch(LayerPosition::kAlibi));
  j.erase("block");
  const TrainArch a = ArchFromJson(j, "old.json");
  EXPECT_EQ(a.model.block, ModelBlock::kLlama);
  EXPECT_EQ(ArchToJson(a), ArchToJson(SmallArch(LayerPosition::kAlibi)));
}

// A GAU checkpoint holds GAU tensors: it restores a GAU run's parameters exactly, and a LLaMA run
// refuses it.
TEST(Checkpoint, GauCheckpointLoadsIntoGauRunsOnly) {
  const std::string path = TempPath("gau.safetensors");
  Trainer t(SmallGauArch(LayerPosition::kRope), SmallOptions());
  t.Step(RandomBatch);
  SaveCheckpoint(t, path);
  const SafetensorsFile f(path);
  EXPECT_NE(f.Find("layers.1.gau_o"), nullptr);
  EXPECT_NE(f.Find("layers.0.gamma_q"), nullptr);
  EXPECT_EQ(f.Find("layers.0.wq"), nullptr);
  TrainerOptions other_seed = SmallOptions();
  other_seed.seed = 5;
  Trainer u(SmallGauArch(LayerPosition::kRope), other_seed);
  LoadParamsInto(u, f);
  const std::vector<float> a = AllParams(t), b = AllParams(u);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  Trainer llama(SmallArch(LayerPosition::kRope), SmallOptions());
  try {
    LoadCheckpointInto(llama, f);
    ADD_FAILURE() << "a GAU checkpoint loaded into a LLaMA run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from the run's"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, RefusesOtherFilesAndOtherArchitectures) {
  const std::string path = TempPath("a.safetensors");
  Trainer t(SmallArch(LayerPosition::kRope), SmallOptions());
  SaveCheckpoint(t, path);
  // Another architecture.
  Trainer other(SmallArch(LayerPosition::kAlibi), SmallOptions());
  ExpectErrorContaining([&] { LoadCheckpointInto(other, SafetensorsFile(path)); },
                        "differs from the run's");
  // A safetensors file that is not a checkpoint.
  const std::string plain = TempPath("plain.safetensors");
  SafetensorsWriter w;
  w.AddOwned<float>("x", {2}, std::vector<float>{1, 2});
  w.Write(plain);
  ExpectErrorContaining([&] { ReadCheckpointInfo(SafetensorsFile(plain)); },
                        "not a stretch checkpoint");
  // A bad field in the config.
  nlohmann::json j = ArchToJson(SmallArch(LayerPosition::kRope));
  j["position"] = "sinusoidal";
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "position \"sinusoidal\"");
  j = ArchToJson(SmallArch(LayerPosition::kRope));
  j["heads"] = 5;
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "heads=5");
  j.erase("dim");
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "missing field \"dim\"");
  j = ArchToJson(SmallArch(LayerPosition::kRope));
  j["block"] = "mamba";
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "block \"mamba\"");
  j = ArchToJson(SmallGauArch(LayerPosition::kRope));
  j.erase("gau_key_dim");
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "missing field \"gau_key_dim\"");
  j = ArchToJson(SmallGauArch(LayerPosition::kRope));
  j["gau_key_dim"] = 24;  // does not divide hidden_dim = 64
  ExpectErrorContaining([&] { ArchFromJson(j, "cfg.json"); }, "multiple of gau_key_dim=24");
}

// Stored trainer options out of their ranges are refused with the file's name, by the reader and
// by the Trainer itself, never by an internal check (fuzz train_checkpoint found "eps": 0
// aborting in AdamW's constructor: fuzz/regressions/train_checkpoint/).
TEST(Checkpoint, TrainerOptionsOutOfRangeAreRefusedByName) {
  const nlohmann::json good = TrainerOptionsToJson(SmallOptions());
  const auto refused = [&](const char* key, const nlohmann::json& value, const char* message) {
    nlohmann::json j = good;
    j[key] = value;
    ExpectErrorContaining([&] { TrainerOptionsFromJson(j, "ck.safetensors stretch.train"); },
                          std::string("ck.safetensors stretch.train: ") + message);
  };
  refused("eps", 0.0, "adamw eps=0: expected a positive number");
  refused("beta1", 1.0, "adamw beta1=1: expected 0 <= beta1 < 1");
  refused("beta2", -0.5, "adamw beta2=-0.5: expected 0 <= beta2 < 1");
  refused("weight_decay", -1.0, "adamw weight_decay=-1");
  refused("batch", 0, "batch=0 (allowed: >= 1)");
  refused("accumulate", -2, "accumulate=-2 (allowed: >= 1)");
  refused("clip", -1.0, "clip=-1");
  refused("lr", 0.0, "lr=0: expected a positive number");
  refused("warmup_steps", 1000000, "warmup_steps=1000000: expected 0 <= warmup_steps");
  TrainerOptions o = SmallOptions();
  o.adamw.eps = 0;
  ExpectErrorContaining([&] { Trainer t(SmallArch(LayerPosition::kRope), o); }, "adamw eps=0");
  o = SmallOptions();
  o.skip_nonfinite = -1;
  ExpectErrorContaining([&] { Trainer t(SmallArch(LayerPosition::kRope), o); },
                        "skip_nonfinite=-1");
}

}  // namespace
}  // namespace stretch
