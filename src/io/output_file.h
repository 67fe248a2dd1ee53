// Files that stretch writes, and the two rules that keep a user's files safe:
//
//  1. No output replaces an input, or another output of the same command. CheckOutputPaths
//     compares what the paths point at, not how they are spelled: "./a", "d/../a", a symbolic link
//     to a and a hard link to a all name a. The error names both sides.
//  2. An output appears whole or not at all. AtomicFile writes a hidden temporary file beside the
//     target, ".<name>.partial-<pid>-<n>" (never ending in the target's extension, so no glob for
//     the target picks it up), flushes and fsyncs it, renames it over the target and syncs the
//     directory. On any failure, and when it is destroyed without Commit, the temporary file is
//     removed and whatever was at the target is untouched. A successful write also removes the
//     partial files that earlier writes to the same target left when they were killed.
//  3. Only a file is ever replaced. ResolveOutput decides, once for every output of every command,
//     what a path names: a regular file or a new path is replaced as in 2 (through a symbolic
//     link: the file at the end of the links, never the link); "-" is standard output where the
//     output allows it; an existing FIFO or character device (a terminal, /dev/null) is opened
//     and written as it is, the way a shell's `>` does; a directory, socket or block device is
//     refused by name and left alone.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stretch {

// What an output path may name (inputs ignore it).
enum class OutputForm {
  kFile,  // a file: replaced atomically, or written as it is when a FIFO or character device
  kFileOrStdout,  // the same, and "-" for standard output (text outputs: JSON, CSV)
  kDirectory,     // a folder the command fills, created when missing
};

// A path and how the caller names it in messages (a flag such as "--per-token", or "the token
// cache").
struct NamedPath {
  std::string name;
  std::string path;
  OutputForm form = OutputForm::kFile;
};

// How an output is written; see ResolveOutput.
enum class OutputKind {
  kReplace,    // a regular file or a new path: a temporary file renamed over `path`
  kStdout,     // "-" (or this process's /dev/stdout): the standard output stream, written directly
  kStream,     // an existing FIFO or character device, or a descriptor's file under /proc/<pid>/fd:
               // opened without creating or truncating it, written directly, never replaced
  kDirectory,  // an existing folder, or a new path for one (OutputForm::kDirectory only)
};

struct OutputTarget {
  OutputKind kind = OutputKind::kReplace;
  // kReplace: the file to replace, at the end of any symbolic links (a link that points nowhere
  // yet gives the path it points to, which the write creates, as a shell's `>` does). Otherwise
  // the path as given.
  std::string path;
  std::string found;  // what the path named, for messages: "a FIFO", "nothing yet", ...
};

// The one decision for an output path (`out.form` says what it may be). Throws stretch::Error,
// naming the flag, what was found and what was expected, for "-" where standard output is not
// accepted, a directory where a file is expected (and a file where a folder is), a socket, a
// block device, a loop of links and a path that cannot be looked at, e.g.
//   "--json-out runs: is a directory; expected a file path".
// Nothing is created or changed.
OutputTarget ResolveOutput(const NamedPath& out);

// True when a and b name the same file system object: both exist and are equivalent (links
// included), or, when one does not exist yet, their absolute paths with every existing part's
// links resolved are equal.
bool SamePath(const std::string& a, const std::string& b);

// True when `path` is `dir` or lies below it (after resolving links as SamePath does).
bool PathWithin(const std::string& path, const std::string& dir);

// Throws stretch::Error when an output cannot be written (ResolveOutput: called here so that a
// command refuses before its long work) or, when it would be replaced, is the same file as an
// input or as another output, e.g.
//   "--per-token stories.bin is the same file as --model stories.bin: refusing to write over it".
// Outputs written directly (standard output, a FIFO, /dev/null) replace nothing and are not
// compared, but two outputs on standard output ("-", /dev/stdout) are refused: their formats would
// interleave. Outputs with an empty path are not written and are skipped.
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
// The same for the partial files of one target file only (".<name>.partial-<pid>-<n>" beside
// it): another target's are left, even in the same folder. StalePartialFilesOf lists them
// without removing anything.
std::vector<std::string> StalePartialFilesOf(const std::string& target);
std::vector<std::string> RemoveStalePartialFilesOf(const std::string& target);

// An output file, written as ResolveOutput decides. For a file to replace (kReplace) the text
// goes to the temporary file and reaches the target on Commit only. For standard output or a
// stream (kStream) it is written as it comes: a reader sees it before Commit, and a failure
// midway leaves what was written there (the command's exit status tells).
class AtomicFile {
 public:
  // Resolves the path (ResolveOutput: refusals throw before anything is created) and creates the
  // temporary file or opens the stream; throws stretch::Error when it cannot (the message names
  // the target and the temporary file). Opening a FIFO waits for its reader, as a shell's `>`
  // does. A bare path is an OutputForm::kFile output named by its path alone.
  explicit AtomicFile(const NamedPath& out);
  explicit AtomicFile(std::string path) : AtomicFile(NamedPath{"", std::move(path)}) {}
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // `what` names the part being written, for the error message.
  void Write(const void* data, size_t n, std::string_view what);
  void Write(std::string_view text) { Write(text.data(), text.size(), "text"); }
  // kReplace: flush, fsync, close, rename over the target, sync the directory, remove the stale
  // partial files of the target (StalePartialFilesOf). Throws on failure (the target is then
  // untouched). A stream is flushed (an error such as ENOSPC from /dev/full throws) and closed.
  // Afterwards nothing more may be written.
  void Commit();

  const std::string& path() const { return path_; }
  OutputKind kind() const { return kind_; }
  // The stale partial files of the target that Commit removed, for a note.
  const std::vector<std::string>& removed_partials() const { return removed_partials_; }

 private:
  std::string Label() const;  // "--json-out x.json" or "x.json", for messages

  std::string name_;
  std::string path_;
  std::string target_;  // the file renamed over (kReplace), else the path opened
  OutputKind kind_ = OutputKind::kReplace;
  std::string temp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  std::vector<std::string> removed_partials_;
};

}  // namespace stretch
