#include "src/train/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/core/error.h"
#include "src/io/output_file.h"
#include "src/io/safetensors.h"
#include "src/train/checkpoint.h"

namespace stretch {

namespace fs = std::filesystem;

std::string StepFileName(int64_t step) { return fmt::format("step-{:08d}.safetensors", step); }

namespace {

// The step of "step-NNNNNNNN.safetensors" (eight digits, as StepFileName writes); -1 otherwise.
int64_t StepOf(std::string_view name) {
  constexpr std::string_view kPrefix = "step-", kSuffix = ".safetensors";
  if (name.size() != kPrefix.size() + 8 + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return -1;
  }
  int64_t step = 0;
  for (const char c : name.substr(kPrefix.size(), 8)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> StepFiles(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int64_t step = StepOf(e.path().filename().string());
    if (step >= 0) found.emplace_back(step, e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

std::string NewestCheckpointIn(const std::string& dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail("{}: not a directory", dir);
  const std::vector<std::pair<int64_t, std::string>> found = StepFiles(dir);
  for (const auto& [step, path] : found) {
    try {
      // Complete: the whole header validates against the file's size, and it is ours.
      const SafetensorsFile f(path);
      const std::optional<std::string> format = f.FindMetadata("stretch.format");
      if (format != kCheckpointFormat) {
        Fail("{}: not a stretch checkpoint (metadata stretch.format = \"{}\", expected \"{}\")",
             path, format.value_or(""), kCheckpointFormat);
      }
      return path;
    } catch (const Error& e) {
      if (skipped != nullptr) skipped->push_back(fmt::format("skipping {}: {}", path, e.what()));
    }
  }
  Fail("{}: no complete checkpoint (step-NNNNNNNN.safetensors) in this directory{}", dir,
       found.empty() ? std::string()
                     : fmt::format(" ({} file(s) named like one failed to read)", found.size()));
}

std::string RunDirContents::Describe() const {
  std::vector<std::string> parts;
  if (!checkpoints.empty()) {
    parts.push_back(fmt::format("{} checkpoint{} (newest {})", checkpoints.size(),
                                checkpoints.size() == 1 ? "" : "s",
                                fs::path(checkpoints.front()).filename().string()));
  }
  if (log) parts.push_back(kTrainLogName);
  if (cache) parts.push_back(kTokenCacheName);
  if (!partial.empty()) parts.push_back(fmt::format("{} partial file(s)", partial.size()));
  return parts.empty() ? std::string("nothing of a run")
                       : fmt::format("{}", fmt::join(parts, ", "));
}

RunDirContents ScanRunDir(const std::string& dir) {
  RunDirContents c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return c;
  for (const auto& [step, path] : StepFiles(dir)) c.checkpoints.push_back(path);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (IsPartialFileName(name)) c.partial.push_back(e.path().string());
    if (name == kTrainLogName) c.log = true;
    if (name == kTokenCacheName) c.cache = true;
  }
  std::sort(c.partial.begin(), c.partial.end());
  return c;
}

int64_t ClearRunDir(const std::string& dir) {
  const RunDirContents c = ScanRunDir(dir);
  std::vector<std::string> files = c.checkpoints;
  files.insert(files.end(), c.partial.begin(), c.partial.end());
  if (c.log) files.push_back((fs::path(dir) / kTrainLogName).string());
  if (c.cache) files.push_back((fs::path(dir) / kTokenCacheName).string());
  for (const std::string& f : files) {
    std::error_code ec;
    fs::remove(f, ec);
    if (ec) Fail("{}: cannot remove it: {}", f, ec.message());
  }
  return static_cast<int64_t>(files.size());
}

}  // namespace stretch
