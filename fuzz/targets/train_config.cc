// JSON configs of training: `stretch train --config FILE` (the object's keys are the long flags
// of `stretch train`, read by tools/cli/train.cc into src/train's TrainRunOptions, whose
// architecture RunArchitecture builds and validates), and the JSON a checkpoint stores of the
// architecture (stretch.config: ArchFromJson) and of the trainer's options (stretch.train:
// TrainerOptionsFromJson). One input goes through all three.
//
// The CLI's own mapping of keys onto flags (ApplyJson, in tools/cli/train.cc's anonymous
// namespace) is not a library function; the fields that shape the architecture are mapped here
// the same way (a string for a spec, an integer for a size), so that every value a config file
// can give reaches the library's checks.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "fuzz/fuzz_target.h"
#include "src/model/model_arch.h"
#include "src/train/checkpoint.h"
#include "src/train/train_run.h"

namespace stretch::fuzz {
namespace {

std::optional<int64_t> IntField(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX}) return std::nullopt;
  return it->get<int64_t>();
}
std::optional<int> SmallIntField(const nlohmann::json& j, const char* key) {
  const std::optional<int64_t> v = IntField(j, key);
  if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    return std::nullopt;  // CLI11 refuses what does not fit the flag's int
  }
  return static_cast<int>(*v);
}
std::optional<std::string> StringField(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

int FuzzTrainConfig(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(AsText(data, size), nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;  // the CLI refuses it with a message (and so does parse)
  ExpectErrorOrSuccess([&] {
    TrainRunOptions o;
    if (auto v = StringField(j, "tokenizer")) o.tokenizer = ParseTokenizerKind(*v);
    o.vocab_size = SmallIntField(j, "vocab_size");
    o.block = StringField(j, "block");
    o.position = StringField(j, "position");
    o.attention = StringField(j, "attention");
    o.dim = SmallIntField(j, "dim");
    o.layers = SmallIntField(j, "layers");
    o.heads = SmallIntField(j, "heads");
    o.kv_heads = SmallIntField(j, "kv_heads");
    o.hidden_dim = SmallIntField(j, "hidden_dim");
    o.seq_len = IntField(j, "seq_len");
    const int vocab = o.vocab_size.value_or(TrainRunDefaults::vocab_size);
    const TrainArch arch = RunArchitecture(o, vocab);
    (void)arch.model.ParameterCount();
    (void)StoredRunOptions(o).dump();
  });
  ExpectErrorOrSuccess([&] { ValidateArch(ArchFromJson(j, "fuzz stretch.config")); });
  ExpectErrorOrSuccess([&] {
    const TrainerOptions o = TrainerOptionsFromJson(j, "fuzz stretch.train");
    (void)TrainerOptionsToJson(o).dump();
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzTrainConfig)
