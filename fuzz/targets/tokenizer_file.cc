// Any tokenizer file given with --tokenizer (src/io/model_file.h LoadTokenizerFile): told apart
// by content (a SentencePiece model, a tokenizer.json of either kind, a llama2.c tokenizer), so
// this target reaches every tokenizer reader through the one dispatcher the commands use. The
// vocabulary size it must match is taken from the input's first byte, so that both the refusal
// and the tokenizer's use are reached.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/model_file.h"

namespace stretch::fuzz {

int FuzzTokenizerFile(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("tokenizer_file", data, size);
  // The seeds' vocabularies are 40 (llama2.c, SentencePiece) to a few hundred (byte-level BPE).
  const int model_vocab = size > 0 && data[0] % 2 == 0 ? 40 : 259;
  ExpectErrorOrSuccess([&] { UseTokenizer(*LoadTokenizerFile(path, "model.bin", model_vocab)); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzTokenizerFile)
