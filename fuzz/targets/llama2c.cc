// llama2.c checkpoints (src/io/llama2c.h): the legacy header and the version 1 export.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/model_use.h"
#include "src/io/llama2c.h"

namespace stretch::fuzz {

int FuzzLlama2c(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("llama2c.bin", data, size);
  ExpectErrorOrSuccess([&] { ReadLlama2cHeader(path); });
  ExpectErrorOrSuccess([&] { UseModel(LoadLlama2c(path)); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzLlama2c)
