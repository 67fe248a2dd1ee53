#include "src/core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "src/core/error.h"

namespace stretch {

namespace {

// The file's whole content (a lock file is a few hundred bytes).
std::string ReadAll(int fd) {
  std::string text;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
    if (text.size() > (1 << 16)) break;  // not a lock file of ours: enough to tell
  }
  return text;
}

// "pid\tsince\tcommand\n", as WriteHolder writes it.
std::optional<LockHolder> ParseHolder(const std::string& text) {
  std::istringstream in(text);
  std::string pid, since, command;
  if (!std::getline(in, pid, '\t') || !std::getline(in, since, '\t') ||
      !std::getline(in, command)) {
    return std::nullopt;
  }
  LockHolder h;
  try {
    h.pid = std::stoll(pid);
  } catch (...) {
    return std::nullopt;
  }
  if (h.pid <= 0) return std::nullopt;
  h.since = since;
  h.command = command;
  return h;
}

std::string OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0' || c == '\n' || c == '\t') c = ' ';
  }
  return raw.empty() ? std::string("(unknown command)") : raw;
}

std::string Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

std::string LockHolder::Describe() const {
  return fmt::format("pid {} (since {}): {}", pid, since, command);
}

std::string DirLock::PathIn(const std::string& dir) {
  return (std::filesystem::path(dir) / kDirLockName).string();
}

DirLock::DirLock(const std::string& lock_path, const std::string& what, Mode mode)
    : path_(lock_path), exclusive_(mode == Mode::kExclusive) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) {
    Fail("{}: cannot open its lock file {}: {}", what, path_, std::strerror(errno));
  }
  int rc;
  do {
    rc = ::flock(fd_, (exclusive_ ? LOCK_EX : LOCK_SH) | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    // The holder writes its line just after it takes the lock: a file still empty is read again
    // for up to half a second, so that the refusal names the holder's pid.
    std::optional<LockHolder> holder = ParseHolder(ReadAll(fd_));
    for (int i = 0; !holder && err == EWOULDBLOCK && i < 50; ++i) {
      ::usleep(10000);
      holder = ParseHolder(ReadAll(fd_));
    }
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      Fail("{}: cannot lock {}: {}", what, path_, std::strerror(err));
    }
    if (holder) {
      Fail(
          "{} is in use by another stretch process, {}: wait for it to end, or choose another "
          "folder",
          what, holder->Describe());
    }
    Fail(
        "{} is in use by another stretch process (it holds {}{}): wait for it to end, or "
        "choose another folder",
        what, path_,
        exclusive_ ? "; for a lab of several processes, their rank locks name them" : "");
  }
  if (!exclusive_) return;
  // A holder written in the file and not cleared: the process that wrote it was killed (a holder
  // that lets go cleanly empties the file, and a live holder would still hold the lock).
  if (const std::optional<LockHolder> old = ParseHolder(ReadAll(fd_))) {
    takeover_note_ =
        fmt::format("{}: took over the lock of {}, which ended without letting go of it (killed?)",
                    what, old->Describe());
  }
  const std::string line =
      fmt::format("{}\t{}\t{}\n", static_cast<long long>(::getpid()), Now(), OwnCommandLine());
  // Best effort: the lock itself is the flock; the content only names the holder in messages.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd_, line.data(), line.size(), 0);
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  if (exclusive_) [[maybe_unused]]
    const int rc = ::ftruncate(fd_, 0);  // a clean release
  ::close(fd_);                          // releases the flock
}

std::optional<LockHolder> ReadLockHolder(const std::string& lock_path) {
  const int fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const std::string text = ReadAll(fd);
  ::close(fd);
  return ParseHolder(text);
}

}  // namespace stretch
