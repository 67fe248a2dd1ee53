// stretch checkpoints read to resume training (src/train/checkpoint.h), as `stretch train
// --resume` does: the architecture and the trainer's options from the metadata, a trainer built
// with them, then the parameters, AdamW's state and the batch stream's RNG restored into it,
// then one training step.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "src/train/checkpoint.h"
#include "src/train/trainer.h"

namespace stretch::fuzz {

int FuzzTrainCheckpoint(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("train.safetensors", data, size);
  ExpectErrorOrSuccess([&] {
    const SafetensorsFile file(path);
    const CheckpointInfo info = ReadCheckpointInfo(file);
    // A file whose architecture has more parameters than its bytes could hold is refused by the
    // tensor checks of LoadCheckpointInto, but only after the trainer (parameters, gradients,
    // two moments) is allocated; bounding that allocation is the resume path's job
    // (src/train/train_run.cc), so the target stays within memory for what it can reach here.
    if (info.arch.model.ParameterCount() > file.file_bytes() / 4) return;
    Trainer trainer(info.arch, info.options);
    LoadCheckpointInto(trainer, file);
    // Then one step, as the resumed run takes (its schedule, AdamW's state and the batch stream
    // as restored), when the batch is small enough to be quick.
    const TrainerOptions& o = trainer.options();
    const int64_t T = info.arch.model.seq_len;
    if (o.batch < 1 || o.accumulate < 1 || T < 1 || o.batch * o.accumulate * T > 4096) return;
    const int vocab = info.arch.model.vocab_size;
    trainer.Step([T, vocab](Rng& rng, int64_t B, std::vector<int>& tokens) {
      tokens.resize(static_cast<size_t>(B * (T + 1)));
      for (int& t : tokens) t = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab));
    });
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzTrainCheckpoint)
