// stretch checkpoints read for inference and conversion (src/io/stretch_checkpoint.h): a
// safetensors file whose metadata holds the architecture (stretch.config), the step and the
// tokenizer, and whose tensors are the weights; the tokenizer it carries is then used.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/model_use.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/stretch_checkpoint.h"

namespace stretch::fuzz {

int FuzzStretchCheckpoint(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("checkpoint.safetensors", data, size);
  ExpectErrorOrSuccess([&] { ReadCheckpointHeader(path); });
  ExpectErrorOrSuccess([&] {
    CheckpointModel c = LoadCheckpointModel(path);
    UseModel(c.model);
    if (c.tokenizer) UseTokenizer(*MakeCheckpointTextTokenizer(std::move(*c.tokenizer)));
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzStretchCheckpoint)
