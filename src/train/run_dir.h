// A training run's directory (`stretch train --out DIR`) and what it holds:
//   step-NNNNNNNN.safetensors   checkpoints, eight-digit step (src/train/checkpoint.h)
//   .<name>.partial-<pid>-<n>   a checkpoint or cache being written (AtomicFile), or left by a
//                               killed writer
//   tokens.cache                the tokenized corpus (src/io/token_cache.h)
//   train_log.jsonl             one JSON line per optimizer step
// One directory holds one run: a new run into a directory that holds another is refused unless
// the caller resumes it or clears it first (ClearRunDir).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/io/stretch_checkpoint.h"  // StepFileName, StepFiles, NewestCheckpointIn

namespace stretch {

inline constexpr const char* kTrainLogName = "train_log.jsonl";
inline constexpr const char* kTokenCacheName = "tokens.cache";

// What of a run `dir` holds.
struct RunDirContents {
  std::vector<std::string> checkpoints;  // step files, newest first
  std::vector<std::string> partial;      // temporary files of interrupted writes
  bool log = false;                      // train_log.jsonl
  bool cache = false;                    // tokens.cache
  // A run is there when a checkpoint or the log is: the cache alone is rebuilt when it does not
  // fit, and a partial file alone is a killed first write.
  bool HoldsRun() const { return !checkpoints.empty() || log; }
  // "3 checkpoints (newest step-00000060.safetensors), train_log.jsonl"
  std::string Describe() const;
};
RunDirContents ScanRunDir(const std::string& dir);

// Removes the files of a run from `dir` (the ones ScanRunDir lists; nothing else in the
// directory) and returns how many. Throws stretch::Error naming the file that cannot be removed.
int64_t ClearRunDir(const std::string& dir);

}  // namespace stretch
