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
#include "src/io/stretch_checkpoint.h"
#include "src/train/checkpoint.h"

namespace stretch {

namespace fs = std::filesystem;

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
