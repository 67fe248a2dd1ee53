// GGUF files (src/io/gguf.h, src/io/gguf_model.h): the metadata and tensor table, the llama
// model's header and weights (every tensor type it dequantizes, and kept packed), and its
// vocabulary, used.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "fuzz/model_use.h"
#include "fuzz/tokenizer_use.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/tokenizer/bpe_tokenizer.h"

namespace stretch::fuzz {

int FuzzGguf(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("fuzz.gguf", data, size);
  std::optional<GgufFile> file;
  ExpectErrorOrSuccess([&] { file.emplace(GgufFile::Open(path)); });
  if (!file) return 0;
  for (const auto& [key, value] : file->metadata()) (void)value.Describe();
  ExpectErrorOrSuccess([&] {
    for (const GgufTensorInfo& t : file->tensors()) {
      if (!GgmlTypeReadable(t.type)) continue;
      // Read only what the file holds: a tensor's element count is bounded by the file's bytes
      // (a type stores at least a byte per 32 elements).
      if (t.elements > file->file_size() * 32) continue;
      std::vector<float> out(static_cast<size_t>(t.elements));
      file->ReadFloats(t, out);
    }
  });
  ExpectErrorOrSuccess([&] { ReadGgufModelHeader(*file); });
  ExpectErrorOrSuccess([&] { UseModel(LoadGgufModel(*file)); });
  // Its matrices kept in the file's type (F16, BF16, Q8_0, Q4_K, Q6_K), as the run commands load
  // them: a corrupt block is refused by name, never computed.
  ExpectErrorOrSuccess([&] { UseModel(LoadGgufModel(*file, WeightStorage::kAsStored)); });
  ExpectErrorOrSuccess([&] {
    if (GgufHasVocabulary(*file)) {
      UseTokenizer(*MakeLlama2cTextTokenizer(ReadGgufTokenizer(*file)));
    }
  });
  ExpectErrorOrSuccess([&] { UseTokenizer(*MakeBpeTextTokenizer(BpeTokenizer::FromGguf(*file))); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzGguf)
