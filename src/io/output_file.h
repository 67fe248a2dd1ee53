// Files that stretch writes, and the two rules that keep a user's files safe:
//
//  1. No output replaces an input, or another output of the same command. CheckOutputPaths
//     compares what the paths point at, not how they are spelled: "./a", "d/../a", a symbolic link
//     to a and a hard link to a all name a. The error names both sides.
//  2. An output appears whole or not at all. AtomicFile writes a hidden temporary file beside the
//     target, ".<name>.partial-<pid>-<n>" (never ending in the target's extension, so no glob for
//     the target picks it up), flushes and fsyncs it, renames it over the target and syncs the
//     directory. On any failure, and when it is destroyed without Commit, the temporary file is
//     removed and whatever was at the target is untouched.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

// A path and how the caller names it in messages (a flag such as "--per-token", or "the token
// cache").
struct NamedPath {
  std::string name;
  std::string path;
};

// True when a and b name the same file system object: both exist and are equivalent (links
// included), or, when one does not exist yet, their absolute paths with every existing part's
// links resolved are equal.
bool SamePath(const std::string& a, const std::string& b);

// True when `path` is `dir` or lies below it (after resolving links as SamePath does).
bool PathWithin(const std::string& path, const std::string& dir);

// Throws stretch::Error when an output is the same file as an input or as another output, e.g.
//   "--per-token stories.bin is the same file as --model stories.bin: refusing to write over it".
// Outputs with an empty path are not written and are skipped.
void CheckOutputPaths(std::span<const NamedPath> inputs, std::span<const NamedPath> outputs);

// Throws stretch::Error when an input lies inside `dir`, an output directory whose contents the
// command writes and replaces.
void CheckInputsOutside(std::span<const NamedPath> inputs, const NamedPath& dir);

// The hidden temporary name AtomicFile writes `path` under (the <n> keeps two writers of one
// process apart). IsPartialFileName says whether a file name has that shape, for any target.
std::string PartialFileName(const std::string& path);
bool IsPartialFileName(std::string_view file_name);
// Removes the partial files in `dir` (not below it) whose writing process is gone: what a write
// killed mid-way (SIGKILL, a power cut) left behind. Files of a live process are left alone.
// Returns the paths removed.
std::vector<std::string> RemoveStalePartialFiles(const std::string& dir);

class AtomicFile {
 public:
  // Creates the temporary file; throws stretch::Error when it cannot (the message names the
  // target and the temporary file).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // `what` names the part being written, for the error message.
  void Write(const void* data, size_t n, std::string_view what);
  void Write(std::string_view text) { Write(text.data(), text.size(), "text"); }
  // Flush, fsync, close, rename over the target, sync the directory. Throws on failure (the
  // target is then untouched); afterwards nothing more may be written.
  void Commit();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace stretch
