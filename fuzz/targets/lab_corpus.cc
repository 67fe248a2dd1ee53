// The lab's corpus (src/lab/corpus.h `stretch lab --corpus`): a single file split by position
// (its last tenth, cut at a line break, tests), and a folder of year-named *.txt files split by
// the cut-off year. The input is the single file; it is also cut at the part markers
// (fuzz/fuzz_target.h SplitParts) into the folder's four documents, 1998_a.txt .. 2001_d.txt.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_target.h"
#include "src/lab/corpus.h"

namespace stretch::fuzz {

int FuzzLabCorpus(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string work = ScratchDir() + "/lab_corpus_work";
  std::error_code ec;
  LabCorpusOptions options;
  options.path = WriteScratch("lab_corpus.txt", data, size);
  ExpectErrorOrSuccess([&] { (void)PrepareLabCorpus(options, work); });
  fs::remove_all(work, ec);

  const auto parts = SplitParts<4>(AsText(data, size));
  const std::string dir = ScratchDir() + "/lab_corpus_dir";
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const char* names[4] = {"1998_a.txt", "1999_b.txt", "2000_c.txt", "2001_d.txt"};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].empty()) WriteScratch("lab_corpus_dir/" + std::string(names[i]), parts[i]);
  }
  options.path = dir;
  ExpectErrorOrSuccess([&] { (void)PrepareLabCorpus(options, work); });
  fs::remove_all(work, ec);
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzLabCorpus)
