#include "src/train/checkpoint.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace {

using nlohmann::json;

constexpr std::string_view kRngTensor = "rng.data";

}  // namespace

json TrainerOptionsToJson(const TrainerOptions& o) {
  json j = {{"batch", o.batch},
            {"accumulate", o.accumulate},
            {"lr", o.schedule.lr},
            {"min_lr", o.schedule.min_lr},
            {"warmup_steps", o.schedule.warmup_steps},
            {"steps", o.schedule.total_steps},
            {"beta1", o.adamw.beta1},
            {"beta2", o.adamw.beta2},
            {"eps", o.adamw.eps},
            {"weight_decay", o.adamw.weight_decay},
            {"clip", o.clip},
            {"seed", o.seed}};
  if (o.perturb.Active()) j["perturb"] = o.perturb.Spec();  // absent: none (earlier runs too)
  return j;
}

TrainerOptions TrainerOptionsFromJson(const json& j, const std::string& what) {
  TrainerOptions o;
  o.batch = JsonField<int64_t>(j, "batch", what);
  o.accumulate = JsonField<int>(j, "accumulate", what);
  o.schedule.lr = JsonField<double>(j, "lr", what);
  o.schedule.min_lr = JsonField<double>(j, "min_lr", what);
  o.schedule.warmup_steps = JsonField<int64_t>(j, "warmup_steps", what);
  o.schedule.total_steps = JsonField<int64_t>(j, "steps", what);
  o.adamw.beta1 = JsonField<double>(j, "beta1", what);
  o.adamw.beta2 = JsonField<double>(j, "beta2", what);
  o.adamw.eps = JsonField<double>(j, "eps", what);
  o.adamw.weight_decay = JsonField<double>(j, "weight_decay", what);
  o.clip = JsonField<double>(j, "clip", what);
  o.seed = JsonField<uint64_t>(j, "seed", what);
  if (j.contains("perturb")) {
    o.perturb = ParsePerturbation(JsonField<std::string>(j, "perturb", what), what + " perturb");
  }
  // A Trainer built from out-of-range options would be refused by its constructor; checked here
  // too so that the error names the file (fuzz train_checkpoint: "eps": 0 reached AdamW's
  // internal check, fuzz/regressions/train_checkpoint/).
  try {
    ValidateTrainerOptions(o);
  } catch (const Error& e) {
    Fail("{}: {}", what, e.what());
  }
  return o;
}

void SaveCheckpoint(Trainer& trainer, const std::string& path, const CheckpointExtras& extras) {
  SafetensorsWriter w;
  for (const Param& p : trainer.registry().params()) {
    w.Add<float>(p.name, p.shape, std::span<const float>(p.value, static_cast<size_t>(p.numel())));
  }
  trainer.optimizer().AddStateTo(w);
  const std::array<uint64_t, 4> rng = trainer.data_rng().State();
  w.AddOwned<uint64_t>(std::string(kRngTensor), {4}, std::vector<uint64_t>(rng.begin(), rng.end()));
  w.AddOwned<uint64_t>(std::string(kCheckpointStepTensor), {},
                       std::vector<uint64_t>{static_cast<uint64_t>(trainer.step())});
  std::vector<uint8_t> tok(extras.tokenizer_model.begin(), extras.tokenizer_model.end());
  if (!tok.empty()) {
    w.AddOwned<uint8_t>(std::string(kCheckpointTokenizerTensor), {static_cast<int64_t>(tok.size())},
                        tok);
  }
  w.SetMetadata("stretch.format", std::string(kCheckpointFormat));
  w.SetMetadata("stretch.version", std::to_string(kCheckpointVersion));
  w.SetMetadata("stretch.config", ArchToJson(trainer.arch()).dump());
  w.SetMetadata("stretch.train", TrainerOptionsToJson(trainer.options()).dump());
  for (const auto& [k, v] : extras.metadata) w.SetMetadata(k, v);
  SealCheckpoint(w);
  w.Write(path);
}

CheckpointInfo ReadCheckpointInfo(const SafetensorsFile& f) {
  const CheckpointHeader header = ReadCheckpointHeader(f);  // format, version, architecture
  const std::string& path = f.path();
  json train;
  try {
    train = json::parse(f.GetMetadata("stretch.train"));
  } catch (const json::exception& e) {
    Fail("{}: metadata stretch.train is not JSON ({})", path, e.what());
  }
  CheckpointInfo info;
  info.arch = header.arch;
  info.options = TrainerOptionsFromJson(train, path + " stretch.train");
  info.step = header.step;
  return info;
}

void LoadParamsInto(Trainer& trainer, const SafetensorsFile& f) {
  for (const Param& p : trainer.registry().params()) {
    // KERPLE's a, b and SSMax's s that the file lacks (--init adding the variant) keep their
    // initialization (SSMax's 1/ln L is a no-op at the training length).
    if (f.Find(p.name) == nullptr &&
        (p.name.find(".bias_") != std::string::npos || p.name.ends_with(".ssmax"))) {
      continue;
    }
    const std::span<float> value(p.value, static_cast<size_t>(p.numel()));
    f.ReadInto<float>(p.name, p.shape, value);
    const auto bad =
        std::find_if(value.begin(), value.end(), [](float x) { return !std::isfinite(x); });
    if (bad != value.end()) {
      Fail(
          "{}: tensor '{}' holds {} at element {}: expected finite parameters (a damaged file, "
          "or one written by another program)",
          f.path(), p.name, *bad, bad - value.begin());
    }
  }
}

void LoadCheckpointInto(Trainer& trainer, const SafetensorsFile& f) {
  VerifyCheckpoint(f);
  const CheckpointInfo info = ReadCheckpointInfo(f);
  if (ArchToJson(info.arch) != ArchToJson(trainer.arch())) {
    Fail("{}: the checkpoint's architecture {} differs from the run's {}", f.path(),
         ArchToJson(info.arch).dump(), ArchToJson(trainer.arch()).dump());
  }
  LoadParamsInto(trainer, f);
  trainer.optimizer().LoadStateFrom(f);
  const std::vector<uint64_t> rng = f.Read<uint64_t>(kRngTensor, {4});
  // xoshiro256's all-zero state is a fixed point: it would give 0 for ever, and the normal
  // sampler's rejection loop would never end. No seeded generator reaches it.
  if (rng[0] == 0 && rng[1] == 0 && rng[2] == 0 && rng[3] == 0) {
    Fail(
        "{}: tensor '{}' is all zero: not a state of the batch stream's generator (a damaged "
        "checkpoint?)",
        f.path(), kRngTensor);
  }
  trainer.data_rng().SetState({rng[0], rng[1], rng[2], rng[3]});
  if (trainer.step() != info.step) {
    Fail(
        "{}: tensor '{}' is {} but '{}' is {}: expected the same step (a damaged or edited "
        "checkpoint?)",
        f.path(), kCheckpointStepTensor, info.step, kAdamWStepTensor, trainer.step());
  }
}

}  // namespace stretch
