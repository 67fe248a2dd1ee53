#include "src/io/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
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

namespace {

// "--json-out x.json: " or "x.json: ", the start of every message about an output.
std::string Prefix(const NamedPath& out) {
  return out.name.empty() ? out.path + ": " : out.name + " " + out.path + ": ";
}

// What a file of mode `mode` is, in words.
std::string KindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file of an unknown kind";
}

// Whether `link` is an entry of a /proc/<pid>/fd folder (what /dev/stdout, /dev/fd/N and
// /proc/self/fd/N lead to): an open file of a process, whose "link target" may be no path at all
// ("pipe:[123]"). Sets *fd and *pid.
bool IsDescriptorLink(const fs::path& link, long* fd, long* pid) {
  std::error_code ec;
  const fs::path dir = fs::canonical(link.parent_path().empty() ? "." : link.parent_path(), ec);
  if (ec || dir.filename() != "fd") return false;
  const fs::path proc = dir.parent_path();
  if (proc.parent_path() != "/proc") return false;
  auto number = [](const std::string& s, long* v) {
    const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return err == std::errc() && end == s.data() + s.size();
  };
  return number(link.filename().string(), fd) && number(proc.filename().string(), pid);
}

// The refusal of a path whose end (after `via`, the links followed) is of kind `mode`.
[[noreturn]] void RefuseKind(const NamedPath& out, const std::string& via, mode_t mode) {
  const std::string expected = out.form == OutputForm::kDirectory
                                   ? "expected a directory (or a new path for one)"
                                   : "expected a file path";
  Fail("{}{}{}; {}", Prefix(out), via.empty() ? "is " : "is a symbolic link to " + via + ", ",
       KindName(mode), expected);
}

}  // namespace

OutputTarget ResolveOutput(const NamedPath& out) {
  if (out.path == "-") {
    if (out.form == OutputForm::kFileOrStdout) return {OutputKind::kStdout, out.path, "stdout"};
    Fail(
        "{}standard output (-) is not accepted for this output; expected a {} (./- names one "
        "called -)",
        Prefix(out), out.form == OutputForm::kDirectory ? "directory" : "file path");
  }
  if (out.path.empty()) {
    Fail("{}an empty path; expected a {}", Prefix(out),
         out.form == OutputForm::kDirectory ? "directory" : "file path");
  }
  // Follow the links one at a time: a regular file at the end is replaced where it is, and the
  // link stays a link. 40 is the kernel's own limit (ELOOP).
  fs::path at(out.path);
  std::string via;  // the links' last target, for messages
  for (int hops = 0;; ++hops) {
    struct stat st;
    if (::lstat(at.c_str(), &st) != 0) {
      if (errno != ENOENT) Fail("{}cannot look at it: {}", Prefix(out), std::strerror(errno));
      if (out.form == OutputForm::kDirectory) {
        return {OutputKind::kDirectory, out.path, "nothing yet"};
      }
      const std::string base = at.filename().string();
      if (base.empty() || base == "." || base == "..") {
        Fail("{}not a file name: expected a path such as dir/out.json", Prefix(out));
      }
      return {OutputKind::kReplace, at.string(), hops == 0 ? "nothing yet" : "a dangling link"};
    }
    if (S_ISLNK(st.st_mode)) {
      long fd = 0, pid = 0;
      if (IsDescriptorLink(at, &fd, &pid)) {
        // A descriptor's file is written where it is, never replaced (a `> out.txt` redirection
        // would lose what the command already printed): this process's standard output is the
        // stream itself, anything else is opened through the link.
        if (fd == 1 && pid == ::getpid() && out.form != OutputForm::kDirectory) {
          return {OutputKind::kStdout, out.path, "standard output"};
        }
        // /dev/stdin is where input comes from (`< model.bin` would get text appended).
        if (fd == 0 && pid == ::getpid()) {
          Fail("{}is standard input; expected a {}", Prefix(out),
               out.form == OutputForm::kDirectory ? "directory" : "file path");
        }
        struct stat end;
        if (::stat(at.c_str(), &end) != 0) {
          Fail("{}cannot open the file of descriptor {}: {}", Prefix(out), fd,
               std::strerror(errno));
        }
        if (out.form == OutputForm::kDirectory || S_ISDIR(end.st_mode) || S_ISSOCK(end.st_mode) ||
            S_ISBLK(end.st_mode)) {
          RefuseKind(out, at.string(), end.st_mode);
        }
        return {OutputKind::kStream, out.path, KindName(end.st_mode)};
      }
      if (hops >= 40) Fail("{}too many levels of symbolic links (a loop?)", Prefix(out));
      std::error_code ec;
      const fs::path next = fs::read_symlink(at, ec);
      if (ec) {
        Fail("{}cannot read the symbolic link {}: {}", Prefix(out), at.string(), ec.message());
      }
      at = next.is_absolute() ? next : at.parent_path() / next;
      via = at.string();
      continue;
    }
    if (out.form == OutputForm::kDirectory) {
      if (!S_ISDIR(st.st_mode)) RefuseKind(out, via, st.st_mode);
      return {OutputKind::kDirectory, out.path, "a directory"};
    }
    if (S_ISREG(st.st_mode)) return {OutputKind::kReplace, at.string(), "a regular file"};
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
      return {OutputKind::kStream, out.path, KindName(st.st_mode)};
    }
    RefuseKind(out, via, st.st_mode);
  }
}

void CheckOutputPaths(std::span<const NamedPath> inputs, std::span<const NamedPath> outputs) {
  // Written directly, nothing is replaced: no file of the user's can be lost that way.
  auto replaced = [](const NamedPath& out) {
    const OutputKind kind = ResolveOutput(out).kind;
    return kind == OutputKind::kReplace || kind == OutputKind::kDirectory;
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty() || !replaced(out)) continue;
    for (const NamedPath& in : inputs) {
      if (!in.path.empty() && SamePath(out.path, in.path)) {
        Fail("{} {} is the same file as {} {}: refusing to write over an input", out.name, out.path,
             in.name, in.path);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() && replaced(outputs[j]) && SamePath(out.path, outputs[j].path)) {
        Fail("{} {} and {} {} are the same file: give each output its own path", outputs[j].name,
             outputs[j].path, out.name, out.path);
      }
    }
  }
  // Two outputs on standard output would interleave two formats (a CSV and a JSON object) that
  // neither reader can parse.
  const NamedPath* on_stdout = nullptr;
  for (const NamedPath& out : outputs) {
    if (out.path.empty() || ResolveOutput(out).kind != OutputKind::kStdout) continue;
    if (on_stdout != nullptr) {
      Fail("{} {} and {} {} both write to standard output: give one of them a file path",
           on_stdout->name, on_stdout->path, out.name, out.path);
    }
    on_stdout = &out;
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

// The partial files in `dir` whose process is gone; with a non-empty `target`, only those of the
// file of that name (".<target>.partial-<pid>-<n>").
std::vector<fs::path> StalePartialFiles(const fs::path& dir, const std::string& target) {
  std::vector<fs::path> stale;
  const std::string prefix = "." + target + ".partial-";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsPartialFileName(name) || !e.is_regular_file(ec)) continue;
    // IsPartialFileName reads the tail after the last ".partial-": a target named "x.partial-1-2"
    // has partial files ".x.partial-1-2.partial-<pid>-<n>", which the prefix tells from x's.
    if (!target.empty() &&
        (!name.starts_with(prefix) || name.find(".partial-", prefix.size()) != std::string::npos)) {
      continue;
    }
    // ".<name>.partial-<pid>-<n>": the pid between the last ".partial-" and the dash after it.
    const std::string_view tail = std::string_view(name).substr(name.rfind(".partial-") + 9);
    const std::string_view digits = tail.substr(0, tail.find('-'));
    long long pid = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || pid <= 0 || pid > std::numeric_limits<pid_t>::max()) continue;
    if (ProcessAlive(static_cast<pid_t>(pid))) continue;
    stale.push_back(e.path());
  }
  return stale;
}

std::vector<std::string> RemoveAll(const std::vector<fs::path>& paths) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::path& p : paths) {
    if (fs::remove(p, ec)) removed.push_back(p.string());
  }
  return removed;
}

std::vector<std::string> Strings(const std::vector<fs::path>& paths) {
  return {paths.begin(), paths.end()};
}

}  // namespace

std::vector<std::string> RemoveStalePartialFiles(const std::string& dir) {
  return RemoveAll(StalePartialFiles(dir, ""));
}

std::vector<std::string> StalePartialFilesOf(const std::string& target) {
  const fs::path t(target);
  if (t.filename().empty()) return {};
  return Strings(StalePartialFiles(t.parent_path(), t.filename().string()));
}

std::vector<std::string> RemoveStalePartialFilesOf(const std::string& target) {
  const fs::path t(target);
  if (t.filename().empty()) return {};
  return RemoveAll(StalePartialFiles(t.parent_path(), t.filename().string()));
}

AtomicFile::AtomicFile(const NamedPath& out) : name_(out.name), path_(out.path) {
  if (out.form == OutputForm::kDirectory) Fail("{}: AtomicFile writes files, not folders", Label());
  const OutputTarget target = ResolveOutput(out);
  kind_ = target.kind;
  target_ = target.path;
  if (kind_ == OutputKind::kStdout) {
    file_ = stdout;
    return;
  }
  if (kind_ == OutputKind::kStream) {
    // No O_CREAT, no O_TRUNC: the node is written as it is. O_APPEND keeps a descriptor's regular
    // file (/dev/fd/3 after `3>>log`) from being written over from its start.
    const int fd = ::open(target_.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) Fail("{}: cannot open it for writing: {}", Label(), std::strerror(errno));
    // The kind was read before the open: a path that has become a regular file since is not
    // written over (only a descriptor's file, /dev/fd/N, is a regular file written here).
    struct stat st;
    if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
                                   (S_ISREG(st.st_mode) && target.found == "a regular file"))) {
      ::close(fd);
      Fail("{}: changed while it was being opened (found {}); nothing written", Label(),
           KindName(st.st_mode));
    }
    file_ = ::fdopen(fd, "wb");
    if (file_ == nullptr) {
      ::close(fd);
      Fail("{}: cannot open it for writing: {}", Label(), std::strerror(errno));
    }
    return;
  }
  temp_ = PartialFileName(target_);
  file_ = std::fopen(temp_.c_str(), "wbx");  // x: fails rather than reuse an existing file
  if (file_ == nullptr) {
    const int error = errno;
    // The usual cause of "No such file or directory" here: the folder to write into is missing.
    const fs::path folder = fs::path(target_).parent_path();
    std::error_code ec;
    const bool missing = error == ENOENT && !folder.empty() && !fs::exists(folder, ec) && !ec;
    Fail("{}: cannot create the temporary file {}: {}{}", Label(), temp_, std::strerror(error),
         missing ? fmt::format(" (the folder {} does not exist; expected an existing one)",
                               folder.string())
                 : std::string());
  }
}

AtomicFile::~AtomicFile() {
  if (kind_ == OutputKind::kStdout) return;  // not ours to close
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_ && kind_ == OutputKind::kReplace) ::unlink(temp_.c_str());
}

std::string AtomicFile::Label() const { return name_.empty() ? path_ : name_ + " " + path_; }

void AtomicFile::Write(const void* data, size_t n, std::string_view what) {
  if (file_ == nullptr || committed_) Fail("{}: written after it was committed", Label());
  if (n != 0 && std::fwrite(data, 1, n, file_) != n) {
    if (kind_ != OutputKind::kReplace) {
      Fail("{}: writing {} failed: {}", Label(), what, std::strerror(errno));
    }
    Fail("{}: writing {} to the temporary file {} failed: {}", Label(), what, temp_,
         std::strerror(errno));
  }
}

void AtomicFile::Commit() {
  if (file_ == nullptr || committed_) Fail("{}: committed twice", Label());
  if (kind_ != OutputKind::kReplace) {
    // A FIFO, a terminal or /dev/null cannot be synced (EINVAL) and need not be: what counts is
    // that every byte was accepted (/dev/full answers ENOSPC here).
    const bool flushed = std::fflush(file_) == 0;
    const int err = errno;
    committed_ = true;
    if (kind_ == OutputKind::kStdout) {
      if (!flushed) Fail("{}: writing to standard output failed: {}", Label(), std::strerror(err));
      return;
    }
    const bool closed = std::fclose(std::exchange(file_, nullptr)) == 0;
    if (!flushed || !closed) {
      Fail("{}: writing failed: {}", Label(), std::strerror(flushed ? errno : err));
    }
    return;
  }
  if (std::fflush(file_) != 0) {
    Fail("{}: flushing the temporary file {} failed: {}", Label(), temp_, std::strerror(errno));
  }
  if (::fsync(::fileno(file_)) != 0) {
    Fail("{}: fsync of the temporary file {} failed: {}", Label(), temp_, std::strerror(errno));
  }
  if (std::fclose(std::exchange(file_, nullptr)) != 0) {
    Fail("{}: closing the temporary file {} failed: {}", Label(), temp_, std::strerror(errno));
  }
  // The target was a regular file or nothing when it was resolved; if it has become something
  // else since (a FIFO, a link), the rename would replace it: refuse instead.
  struct stat st;
  if (::lstat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    Fail("{}: {} became {} while it was being written; left as it is", Label(), target_,
         KindName(st.st_mode));
  }
  if (std::rename(temp_.c_str(), target_.c_str()) != 0) {
    Fail("{}: renaming the temporary file {} over {} failed: {}", Label(), temp_, target_,
         std::strerror(errno));
  }
  committed_ = true;
  removed_partials_ = RemoveStalePartialFilesOf(target_);

  // The rename is durable only once the directory entry is on disk. Some file systems cannot
  // fsync a directory (EINVAL): nothing more can be done there, and the file itself is complete.
  const fs::path parent = fs::path(target_).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    Fail("{}: written, but its directory {} cannot be opened to sync it: {}", Label(), dir,
         std::strerror(errno));
  }
  const int rc = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  if (rc != 0 && err != EINVAL) {
    Fail("{}: written, but syncing its directory {} failed: {}", Label(), dir, std::strerror(err));
  }
}

}  // namespace stretch
