// Any model file given to a command (src/io/model_file.h): told apart by content (a llama2.c
// checkpoint, a stretch checkpoint, a GGUF file), its header read and the model loaded as
// `stretch score` / `generate` / `convert` do. The seeds are every format's, so the fuzzer also
// crosses one format's bytes into another's reader.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/model_use.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/model_file.h"

namespace stretch::fuzz {

int FuzzModelFile(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("model_file.bin", data, size);
  ExpectErrorOrSuccess([&] { ReadModelFileHeader(path); });
  ExpectErrorOrSuccess([&] {
    const LoadedModel m = LoadModelFile(path, {});
    UseModel(m.model);
    if (m.tokenizer) UseTokenizer(*m.tokenizer);
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzModelFile)
