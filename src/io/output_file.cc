#include "src/io/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "src/core/error.h"

namespace stretch {

namespace fs = std::filesystem;

namespace {

// The absolute path with every existing part's symbolic links resolved and "." / ".." removed.
fs::path Resolved(const std::string& p) {
  std::error_code ec;
  const fs::path abs = fs::absolute(p, ec);
  if (ec) return fs::path(p).lexically_normal();
  const fs::path r = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : r;
}

}  // namespace

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  return Resolved(a) == Resolved(b);
}

bool PathWithin(const std::string& path, const std::string& dir) {
  const fs::path p = Resolved(path), d = Resolved(dir);
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the empty last part of "a/b/"
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

void CheckOutputPaths(std::span<const NamedPath> inputs, std::span<const NamedPath> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const NamedPath& in : inputs) {
      if (!in.path.empty() && SamePath(out.path, in.path)) {
        Fail("{} {} is the same file as {} {}: refusing to write over an input", out.name, out.path,
             in.name, in.path);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() && SamePath(out.path, outputs[j].path)) {
        Fail("{} {} and {} {} are the same file: give each output its own path", outputs[j].name,
             outputs[j].path, out.name, out.path);
      }
    }
  }
}

void CheckInputsOutside(std::span<const NamedPath> inputs, const NamedPath& dir) {
  for (const NamedPath& in : inputs) {
    if (!in.path.empty() && PathWithin(in.path, dir.path)) {
      Fail("{} {} lies inside {} {}, whose files this command writes: keep inputs outside it",
           in.name, in.path, dir.name, dir.path);
    }
  }
}

std::string PartialFileName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const fs::path target(path);
  return (target.parent_path() / fmt::format(".{}.partial-{}-{}", target.filename().string(),
                                             ::getpid(), counter.fetch_add(1)))
      .string();
}

bool IsPartialFileName(std::string_view name) {
  // ".<name>.partial-<pid>-<n>": digits, a dash, digits at the end.
  const size_t at = name.rfind(".partial-");
  if (name.size() < 2 || name[0] != '.' || at == std::string_view::npos || at == 0) return false;
  const std::string_view tail = name.substr(at + 9);
  const size_t dash = tail.find('-');
  auto digits = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  return dash != std::string_view::npos && digits(tail.substr(0, dash)) &&
         digits(tail.substr(dash + 1));
}

namespace {

// Whether process `pid` still runs. A killed process whose parent died too stays a zombie until
// init reaps it: it answers kill(pid, 0) but will never write again.
bool ProcessAlive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t paren = line.rfind(')');        // "pid (comm) S ...": comm may hold spaces and ')'
  return !(paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z');
}

}  // namespace

std::vector<std::string> RemoveStalePartialFiles(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsPartialFileName(name) || !e.is_regular_file(ec)) continue;
    // ".<name>.partial-<pid>-<n>": the pid between the last ".partial-" and the dash after it.
    const std::string_view tail = std::string_view(name).substr(name.rfind(".partial-") + 9);
    const std::string_view digits = tail.substr(0, tail.find('-'));
    long long pid = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || pid <= 0 || pid > std::numeric_limits<pid_t>::max()) continue;
    if (ProcessAlive(static_cast<pid_t>(pid))) continue;
    if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::string base = fs::path(path_).filename().string();
  if (base.empty() || base == "." || base == "..") {
    Fail("{}: not a file name: expected a path such as dir/out.json", path_);
  }
  temp_ = PartialFileName(path_);
  file_ = std::fopen(temp_.c_str(), "wbx");  // x: fails rather than reuse an existing file
  if (file_ == nullptr) {
    Fail("{}: cannot create the temporary file {}: {}", path_, temp_, std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::Write(const void* data, size_t n, std::string_view what) {
  if (file_ == nullptr) Fail("{}: written after it was committed", path_);
  if (n != 0 && std::fwrite(data, 1, n, file_) != n) {
    Fail("{}: writing {} to the temporary file {} failed: {}", path_, what, temp_,
         std::strerror(errno));
  }
}

void AtomicFile::Commit() {
  if (file_ == nullptr) Fail("{}: committed twice", path_);
  if (std::fflush(file_) != 0) {
    Fail("{}: flushing the temporary file {} failed: {}", path_, temp_, std::strerror(errno));
  }
  if (::fsync(::fileno(file_)) != 0) {
    Fail("{}: fsync of the temporary file {} failed: {}", path_, temp_, std::strerror(errno));
  }
  if (std::fclose(std::exchange(file_, nullptr)) != 0) {
    Fail("{}: closing the temporary file {} failed: {}", path_, temp_, std::strerror(errno));
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    Fail("{}: renaming the temporary file {} over it failed: {}", path_, temp_,
         std::strerror(errno));
  }
  committed_ = true;

  // The rename is durable only once the directory entry is on disk. Some file systems cannot
  // fsync a directory (EINVAL): nothing more can be done there, and the file itself is complete.
  const fs::path parent = fs::path(path_).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    Fail("{}: written, but its directory {} cannot be opened to sync it: {}", path_, dir,
         std::strerror(errno));
  }
  const int rc = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  if (rc != 0 && err != EINVAL) {
    Fail("{}: written, but syncing its directory {} failed: {}", path_, dir, std::strerror(err));
  }
}

}  // namespace stretch
