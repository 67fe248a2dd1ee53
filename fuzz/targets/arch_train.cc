// `--block`, `--position` and `--attention` specs (as fuzz/targets/arch_spec.cc: three lines) on
// a small model that is then trained for one step and run for inference: an architecture the
// specs and ValidateArch accept must train and run, or be refused by name, never trip a check in
// the trainer or the engine.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "fuzz/model_use.h"
#include "src/core/rng.h"
#include "src/io/stretch_checkpoint.h"
#include "src/model/model_arch.h"
#include "src/train/arch_spec.h"
#include "src/train/trainer.h"

namespace stretch::fuzz {

int FuzzArchTrain(const uint8_t* data, size_t size) {
  const std::array<std::string, 3> lines = FirstLines<3>(data, size);
  ExpectErrorOrSuccess([&] {
    TrainArch arch;
    arch.model.dim = 16;
    arch.model.hidden_dim = 32;
    arch.model.n_layers = 2;
    arch.model.n_heads = 2;
    arch.model.n_kv_heads = 2;
    arch.model.vocab_size = 16;
    arch.model.seq_len = 12;
    if (!lines[0].empty()) ApplyBlockSpec(lines[0], arch);
    if (!lines[1].empty()) ApplyPositionSpec(lines[1], arch);
    if (!lines[2].empty()) ApplyAttentionSpec(lines[2], arch);
    FinalizeArch(arch);
    ValidateArch(arch);
    if (arch.model.ParameterCount() > kMaxRunParameters) return;
    TrainerOptions options;
    options.batch = 1;
    options.schedule = LrSchedule{1e-3, 1e-4, 0, 2};
    Trainer trainer(arch, options);
    const int64_t T = arch.model.seq_len;
    trainer.Step([T](Rng& rng, int64_t B, std::vector<int>& tokens) {
      tokens.resize(static_cast<size_t>(B * (T + 1)));
      for (int& t : tokens) t = static_cast<int>(rng.NextU64() % 16);
    });
    const Model m = InferenceModel(arch, trainer.params(), "fuzz arch");
    UseModel(m);
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzArchTrain)
