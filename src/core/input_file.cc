#include "src/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "src/core/error.h"

namespace stretch {
namespace {

std::string KindOfMode(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string Named(const std::string& path, std::string_view flag) {
  return flag.empty() ? path : fmt::format("{} {}", flag, path);
}

// stat() follows symlinks: a symlink to a regular file is that file.
[[noreturn]] void FailMissing(const std::string& path, std::string_view expected,
                              std::string_view flag, int err, bool or_directory = false) {
  if (err == ENOENT || err == ENOTDIR) {
    Fail("{}: no such file{}: expected {}", Named(path, flag), or_directory ? " or directory" : "",
         expected);
  }
  Fail("{}: cannot read: {}: expected {}", Named(path, flag), std::strerror(err), expected);
}

[[noreturn]] void FailKind(const std::string& path, std::string_view expected,
                           std::string_view flag, mode_t mode) {
  Fail("{}: {}, not a regular file: expected {}", Named(path, flag), KindOfMode(mode), expected);
}

}  // namespace

std::string InputKindOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return KindOfMode(st.st_mode);
}

void CheckRegularInput(const std::string& path, std::string_view expected, std::string_view flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) FailMissing(path, expected, flag, errno);
  if (!S_ISREG(st.st_mode)) FailKind(path, expected, flag, st.st_mode);
}

bool CheckRegularInputOrDirectory(const std::string& path, std::string_view expected,
                                  std::string_view flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) FailMissing(path, expected, flag, errno, true);
  if (S_ISDIR(st.st_mode)) return true;
  if (!S_ISREG(st.st_mode)) FailKind(path, expected, flag, st.st_mode);
  return false;
}

InputFile::InputFile(const std::string& path, std::string_view expected) {
  // O_NONBLOCK: opening a FIFO without a writer would wait for one; the descriptor is checked
  // before any read, and the flag is cleared for a regular file (where it changes nothing anyway).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    struct stat st {};
    // A directory cannot be opened for reading on some systems: say what it is.
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      FailKind(path, expected, {}, st.st_mode);
    }
    Fail("{}: cannot open for reading: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    Fail("{}: cannot read the file's size: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    FailKind(path, expected, {}, st.st_mode);
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<int64_t>(st.st_size);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::Release() { return std::exchange(fd_, -1); }

std::FILE* InputFile::ReleaseAsStream() {
  std::FILE* f = ::fdopen(fd_, "rb");
  if (f == nullptr) Fail("cannot open a stream on descriptor {}: {}", fd_, std::strerror(errno));
  fd_ = -1;
  return f;
}

std::string ReadInputFile(const std::string& path, std::string_view expected, int64_t max_bytes) {
  InputFile in(path, expected);
  if (in.size() > max_bytes) {
    Fail("{}: {} bytes: expected {} of at most {} bytes", path, in.size(), expected, max_bytes);
  }
  // Read to the end rather than exactly size() bytes: a file that grows while it is read (a log
  // being appended to) is read as far as it goes, still bounded by max_bytes.
  std::string out(static_cast<size_t>(in.size()), '\0');
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (static_cast<int64_t>(out.size()) >= max_bytes) {
        char probe = 0;
        const ssize_t extra = ::read(in.fd(), &probe, 1);
        if (extra > 0) {
          Fail("{}: grew past {} bytes while it was read: expected {} of at most {} bytes", path,
               max_bytes, expected, max_bytes);
        }
        break;
      }
      out.resize(std::min<size_t>(static_cast<size_t>(max_bytes), out.size() + (1 << 16)));
    }
    const ssize_t got = ::read(in.fd(), out.data() + have, out.size() - have);
    if (got < 0) {
      if (errno == EINTR) continue;
      Fail("{}: read error: {}", path, std::strerror(errno));
    }
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  out.resize(have);
  return out;
}

std::string ReadInputHead(const std::string& path, int64_t n) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  try {
    InputFile in(path, "a file");
    std::string out(static_cast<size_t>(std::min(n, in.size())), '\0');
    size_t have = 0;
    while (have < out.size()) {
      const ssize_t got = ::read(in.fd(), out.data() + have, out.size() - have);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      have += static_cast<size_t>(got);
    }
    out.resize(have);
    return out;
  } catch (const Error&) {
    return "";
  }
}

}  // namespace stretch
