// Hugging Face folders (src/io/hf_model.h): config.json, and model.safetensors or an index and
// two shards. The input holds the five files in that order, split at a marker line
// (fuzz/fuzz_target.h SplitParts); a part left empty is a file the folder lacks. Read as the
// commands read a model (src/io/model_file.h: header, rope_scaling as a method), loaded and run
// (fuzz/model_use.h).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>

#include "fuzz/fuzz_target.h"
#include "fuzz/hf_folder.h"
#include "fuzz/model_use.h"
#include "src/io/hf_model.h"
#include "src/io/model_file.h"

namespace stretch::fuzz {

int FuzzHfModel(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  // config.json, model.safetensors, model.safetensors.index.json, the two shards.
  const auto parts = SplitParts<std::size(kHfFolderParts)>(AsText(data, size));
  const std::string dir = ScratchDir() + "/hf_model";
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0 && parts[i].empty()) {
      fs::remove(dir + "/" + kHfFolderParts[i], ec);
    } else {
      WriteScratch("hf_model/" + std::string(kHfFolderParts[i]), parts[i]);
    }
  }
  ExpectErrorOrSuccess([&] { ReadHfModelHeader(dir); });
  ExpectErrorOrSuccess([&] { ReadModelFileHeader(dir); });
  ExpectErrorOrSuccess([&] { UseModel(LoadHfModel(dir)); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzHfModel)
