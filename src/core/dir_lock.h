// One process at a time in a folder that a command writes and resumes (a training run's --out, a
// lab's --out, each rank's records file of a lab shared by MPI ranks).
//
// Why: two `stretch train` runs started together into one folder both passed the "holds another
// run" check, then wrote over each other's checkpoints and log; two labs into one folder tore each
// other's lines of results.jsonl. A check of what the folder holds cannot see a run that has not
// written anything yet; a lock taken before anything is written can.
//
// How: flock(2) on a lock file in the folder (kept there, never deleted: deleting it would let a
// third process lock a new file while the second still holds the old one). The kernel releases
// the lock when the holder exits, however it exits (a crash, SIGKILL), so a lock never outlives
// its process and no stale lock can block a folder. The holder writes its pid, the time it took the lock and
// command line into the file, so that a refused process can say who holds the folder; the file is
// emptied when the holder lets go cleanly, so a lock file that still names a process when it is
// taken was left by a holder that was killed, and the new holder says so (a note).
//
// Exclusive and shared: a lab run by several MPI ranks takes the folder's lock shared (every rank
// of the one lab may hold it) and its own rank's lock exclusively; a lab of one process takes the
// folder's lock exclusively. So a second lab (of any number of ranks) into a folder in use is
// refused, and two ranks never write the same records file.
#pragma once

#include <optional>
#include <string>

namespace stretch {

// The lock file's name in a folder (hidden; ScanRunDir and the lab's readers ignore it).
inline constexpr const char* kDirLockName = ".stretch.lock";

// Who holds (or last held) a lock file, as its holder wrote it.
struct LockHolder {
  long long pid = 0;
  std::string since;             // when it took the lock, local time: "2026-11-28 14:33:46"
  std::string command;           // the holder's command line, arguments joined by spaces
  std::string Describe() const;  // "pid 1234 (since 2026-11-28 14:33:46): stretch train ..."
};

class DirLock {
 public:
  enum class Mode { kExclusive, kShared };

  // Locks `lock_path` (created when missing; its folder must exist) without waiting. Throws
  // stretch::Error when another process holds it, naming `what` (the folder as the user gave it,
  // say "--out runs/a") and the holder when it is known:
  //   "--out runs/a is in use by another stretch process, pid 1234 (since 2026-11-28 14:33:46):
  //    stretch train ...: wait for it to end, or choose another --out"
  // `takeover_note` is set when the file named a holder that is gone (killed): the caller tells
  // the user. Shared locks neither write nor read the holder (several hold them at once).
  DirLock(const std::string& lock_path, const std::string& what, Mode mode = Mode::kExclusive);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // The lock of folder `dir` (dir/kDirLockName).
  static std::string PathIn(const std::string& dir);

  const std::optional<std::string>& takeover_note() const { return takeover_note_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool exclusive_ = true;
  std::optional<std::string> takeover_note_;
};

// The holder written in a lock file, if it names one (nullopt for an empty or unreadable file).
std::optional<LockHolder> ReadLockHolder(const std::string& lock_path);

}  // namespace stretch
