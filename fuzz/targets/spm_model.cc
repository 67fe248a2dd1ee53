// SentencePiece models (tokenizer.model, src/io/tokenizer/spm_model.h): stretch's own reader of the
// ModelProto (ParseSentencePieceModel) and the llama2.c vocabulary made from it, used; then the
// file as the commands load it (LoadSentencePieceModel, through libsentencepiece).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/tokenizer/spm_model.h"

namespace stretch::fuzz {

int FuzzSpmModel(const uint8_t* data, size_t size) {
  ExpectErrorOrSuccess([&] {
    const SentencePieceVocabulary v = ParseSentencePieceModel(AsText(data, size), "fuzz.model");
    UseTokenizer(*MakeLlama2cTextTokenizer(Llama2cTokenizerFromSentencePiece(v)));
  });
  const std::string path = WriteScratch("tokenizer.model", data, size);
  ExpectErrorOrSuccess([&] {
    if (LooksLikeSentencePieceModel(path)) UseTokenizer(*LoadSentencePieceModel(path));
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzSpmModel)
