// Hugging Face tokenizer.json files of both kinds: LLaMA's SentencePiece BPE
// (src/io/tokenizer/hf_tokenizer_json.h) and byte-level BPE (src/io/tokenizer/bpe_tokenizer.h), read and used.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"

namespace stretch::fuzz {

int FuzzHfTokenizerJson(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("tokenizer.json", data, size);
  ExpectErrorOrSuccess([&] { (void)LooksLikeSentencePieceTokenizerJson(path); });
  ExpectErrorOrSuccess([&] {
    const HfSentencePieceJson t = ReadHfSentencePieceJson(path);
    (void)EncodeAsHuggingFace(t, std::string(kProbeText));
  });
  ExpectErrorOrSuccess(
      [&] { UseTokenizer(*MakeLlama2cTextTokenizer(ReadSentencePieceTokenizerJson(path))); });
  ExpectErrorOrSuccess(
      [&] { UseTokenizer(*MakeBpeTextTokenizer(BpeTokenizer::FromTokenizerJson(path))); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzHfTokenizerJson)
