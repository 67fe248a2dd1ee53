// llama2.c tokenizer files (tokenizer.bin, tok512.bin: src/io/tokenizer/tokenizer.h), read and then used.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/tokenizer/tokenizer.h"

namespace stretch::fuzz {

int FuzzLlama2cTokenizer(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("llama2c_tokenizer.bin", data, size);
  ExpectErrorOrSuccess(
      [&] { UseTokenizer(*MakeLlama2cTextTokenizer(Tokenizer::LoadLlama2c(path))); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzLlama2cTokenizer)
