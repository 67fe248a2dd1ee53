#include "src/lab/corpus.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/output_file.h"
#include "src/train/data.h"

namespace stretch {
namespace fs = std::filesystem;
namespace {

std::string ReadBytes(const std::string& path) {
  return ReadInputFile(path, "a text file or a directory of *.txt files");
}

// Writes `bytes` to `path` unless the file already holds exactly them (its modification time,
// part of the token cache's key, then stays as it was).
void WriteIfChanged(const fs::path& path, const std::string& bytes) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) &&
      fs::file_size(path, ec) == static_cast<uintmax_t>(bytes.size()) &&
      ReadBytes(path.string()) == bytes) {
    return;
  }
  AtomicFile out(path.string());
  out.Write(bytes.data(), bytes.size(), "training text");
  out.Commit();
}

// The year a file name starts with ("1790_george_washington_n.txt"), or -1.
int LeadingYear(const std::string& name) {
  if (name.size() < 5 || name[4] != '_') return -1;
  for (int i = 0; i < 4; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[static_cast<size_t>(i)]))) return -1;
  }
  return std::stoi(name.substr(0, 4));
}

void SplitDirectory(const LabCorpusOptions& o, const std::string& dir, const fs::path& train_dir,
                    LabCorpus& c) {
  const std::vector<CorpusFile> files = ListCorpusFiles(dir);
  bool years = true;
  for (const CorpusFile& f : files) years = years && LeadingYear(fs::path(f.path).filename()) >= 0;
  std::vector<bool> test(files.size(), false);
  if (years) {
    for (size_t i = 0; i < files.size(); ++i) {
      test[i] = LeadingYear(fs::path(files[i].path).filename()) >= o.cutoff_year;
    }
    c.split_rule =
        fmt::format("files dated before {} train, {} and later test", o.cutoff_year, o.cutoff_year);
  } else {
    const size_t n_test = std::clamp<size_t>(
        static_cast<size_t>(o.test_share * static_cast<double>(files.size())), 1, files.size());
    for (size_t i = files.size() - n_test; i < files.size(); ++i) test[i] = true;
    c.split_rule = fmt::format("the last {} of {} files (name order) test, the others train",
                               n_test, files.size());
  }
  fs::create_directories(train_dir);
  for (size_t i = 0; i < files.size(); ++i) {
    std::string text = ReadBytes(files[i].path);
    if (text.empty()) continue;
    if (test[i]) {
      c.test_bytes += static_cast<int64_t>(text.size());
      c.test_documents.push_back(std::move(text));
    } else {
      c.train_documents++;
      c.train_bytes += static_cast<int64_t>(text.size());
      WriteIfChanged(train_dir / fs::path(files[i].path).filename(), text);
    }
  }
  c.train_path = train_dir.string();
}

void SplitFile(const LabCorpusOptions& o, const std::string& file, const fs::path& work,
               LabCorpus& c) {
  const std::string text = ReadBytes(file);
  size_t cut = static_cast<size_t>((1.0 - o.test_share) * static_cast<double>(text.size()));
  const size_t nl = text.rfind('\n', cut);
  if (nl != std::string::npos && nl > cut / 2) cut = nl + 1;  // at a line break when there is one
  if (cut == 0 || cut >= text.size()) {
    Fail("{}: {} bytes are too few to split into a training and a test part", file, text.size());
  }
  c.split_rule =
      fmt::format("one file, split by position: the first {} bytes train, the last {} bytes test",
                  cut, text.size() - cut);
  fs::create_directories(work);
  const fs::path train = work / "train.txt";
  WriteIfChanged(train, text.substr(0, cut));
  c.train_path = train.string();
  c.train_documents = 1;
  c.train_bytes = static_cast<int64_t>(cut);
  c.test_bytes = static_cast<int64_t>(text.size() - cut);
  c.test_documents.push_back(text.substr(cut));
}

}  // namespace

std::vector<std::string> DefaultCorpusCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("STRETCH_DATA"); env != nullptr && *env != '\0') {
    out.push_back((fs::path(env) / "sotu").string());
  }
  out.push_back("data/sotu");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / ".." / ".." / "data" / "sotu").lexically_normal());
  return out;
}

std::string FindDefaultCorpus() {
  const std::vector<std::string> candidates = DefaultCorpusCandidates();
  std::error_code ec;
  for (const std::string& c : candidates) {
    if (fs::is_directory(c, ec)) return c;
  }
  std::string list;
  for (const std::string& c : candidates) list += (list.empty() ? "" : ", ") + c;
  Fail(
      "the default corpus (State of the Union addresses) is not installed: looked in {}; "
      "`bash scripts/setup.sh` installs it into data/sotu, or give --data FILE|DIR",
      list);
}

LabCorpus PrepareLabCorpus(const LabCorpusOptions& options, const std::string& work_dir) {
  if (!(options.test_share > 0 && options.test_share < 1)) {
    Fail("test share {}: expected a number between 0 and 1", options.test_share);
  }
  LabCorpus c;
  c.source = options.path.empty() ? FindDefaultCorpus() : options.path;
  // A FIFO would block until a writer comes, /dev/zero would be read without end: refused.
  const bool directory =
      CheckRegularInputOrDirectory(c.source, "a text file or a directory of *.txt files", "corpus");
  const fs::path work = fs::path(work_dir) / "corpus";
  if (directory) {
    SplitDirectory(options, c.source, work / "train", c);
  } else {
    SplitFile(options, c.source, work, c);
  }
  const std::string name = fs::path(c.source).lexically_normal().filename().string();
  c.label = options.path.empty() ? "sotu" : (name.empty() ? "corpus" : name);
  if (c.train_documents == 0 || c.train_bytes == 0) {
    Fail("corpus {}: the split ({}) leaves nothing to train on", c.source, c.split_rule);
  }
  if (c.test_documents.empty()) {
    Fail("corpus {}: the split ({}) leaves nothing to test on", c.source, c.split_rule);
  }
  return c;
}

}  // namespace stretch
