// `stretch train --block`, `--position` and `--attention` specs (src/train/arch_spec.h), applied
// as the trainer applies them to a small model, finalized and validated (src/model/model_arch.h),
// then printed back and stored as a checkpoint's JSON and read again. The input is the three
// specs on three lines (block, position, attention); a missing line keeps the default. A fourth
// line is a `--perturb` spec (src/train/positions.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_target.h"
#include "src/model/model_arch.h"
#include "src/train/arch_spec.h"
#include "src/train/positions.h"

namespace stretch::fuzz {

int FuzzArchSpec(const uint8_t* data, size_t size) {
  const std::array<std::string, 4> lines = FirstLines<4>(data, size);
  ExpectErrorOrSuccess([&] {
    TrainArch arch;
    arch.model.dim = 32;
    arch.model.hidden_dim = 64;
    arch.model.n_layers = 4;
    arch.model.n_heads = 4;
    arch.model.n_kv_heads = 4;
    arch.model.vocab_size = 40;
    arch.model.seq_len = 64;
    if (!lines[0].empty()) ApplyBlockSpec(lines[0], arch);
    if (!lines[1].empty()) ApplyPositionSpec(lines[1], arch);
    if (!lines[2].empty()) ApplyAttentionSpec(lines[2], arch);
    if (!lines[3].empty()) (void)ParsePerturbation(lines[3], "--perturb").Spec();
    FinalizeArch(arch);
    ValidateArch(arch);
    (void)BlockSpecOf(arch);
    (void)PositionSpecOf(arch);
    (void)LayoutText(arch);
    const TrainArch again = ArchFromJson(ArchToJson(arch), "fuzz arch");
    if (ArchToJson(again) != ArchToJson(arch)) Finding("an arch's JSON does not read back");
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzArchSpec)
