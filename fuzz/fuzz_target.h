// What every fuzz target shares: the rule for what counts as a finding, and a scratch file for
// the parsers that take a path.
//
// A target is a plain function `int FuzzXxx(const uint8_t* data, size_t size)` in its own file of
// fuzz/targets/, so that it links both into a libFuzzer program (fuzz/CMakeLists.txt, where
// STRETCH_FUZZ_LIBFUZZER is defined and STRETCH_FUZZ_TARGET defines libFuzzer's entry point) and
// into the replay test of the ordinary builds (tests/cli/fuzz_replay_test.cc, which includes the
// targets' files and calls the functions).
//
// The rule: a parser given any bytes either succeeds or throws stretch::Error (a message for the
// user). Anything else is a finding: a crash, a sanitizer report, a failed STRETCH_CHECK (an
// internal invariant broken by outside bytes), another exception escaping (std::bad_alloc from a
// count that was not bounded, std::out_of_range, nlohmann::json's type errors: each a message the
// user would not understand), or a hang (libFuzzer's -timeout).
#pragma once

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "src/core/error.h"

namespace stretch::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The first N lines of the input (missing ones empty), for targets that read a few specs.
template <size_t N>
std::array<std::string, N> FirstLines(const uint8_t* data, size_t size) {
  std::string_view text = AsText(data, size);
  std::array<std::string, N> lines;
  for (std::string& line : lines) {
    const size_t end = text.find('\n');
    line = std::string(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return lines;
}

// Runs `parse`; a stretch::Error is a fine outcome (the input was refused with a message), any
// other exception propagates and so ends the program: libFuzzer reports it as a crash, the replay
// test as a failure.
template <typename Parse>
void ExpectErrorOrSuccess(Parse&& parse) {
  try {
    parse();
  } catch (const stretch::Error&) {
  }
}

// A property that must hold of what a parser accepted (a canonical spec parses back to the same
// value) does not: a finding, reported as libFuzzer reports a crash.
[[noreturn]] inline void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// A folder of this process's own for scratch files: under $TMPDIR, else /dev/shm (memory: the
// parsers that take a path re-read their file on every input), else /tmp. Made once per process
// and reused (libFuzzer runs millions of inputs, each rewriting the same files), removed when the
// process exits normally.
inline const std::string& ScratchDir() {
  struct Folder {
    std::string path;
    Folder() {
      namespace fs = std::filesystem;
      std::error_code ec;
      const char* tmp = std::getenv("TMPDIR");
      fs::path base = tmp != nullptr && *tmp != '\0' ? fs::path(tmp) : fs::path("/dev/shm");
      if (!fs::is_directory(base, ec)) base = "/tmp";
      path = (base / ("stretch-fuzz-" + std::to_string(::getpid()))).string();
      fs::create_directories(path);
    }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  return folder.path;
}

// Writes `bytes` to the scratch file `name` (replacing what it held) and returns its path.
inline std::string WriteScratch(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("fuzz: cannot write " + path);  // not a finding
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  if (written != bytes.size()) throw std::runtime_error("fuzz: short write to " + path);
  return path;
}
inline std::string WriteScratch(const std::string& name, const uint8_t* data, size_t size) {
  return WriteScratch(name, AsText(data, size));
}

// Splits an input into parts at a marker line, for targets that read several files (a Hugging
// Face folder's config.json and weights): part i is the bytes between the i-th and (i+1)-th
// marker. Missing parts are empty. The marker is text, so a seed stays readable.
inline constexpr std::string_view kPartMarker = "\n--stretch-fuzz-part--\n";
template <size_t N>
std::array<std::string_view, N> SplitParts(std::string_view input) {
  std::array<std::string_view, N> parts{};
  for (size_t i = 0; i < N; ++i) {
    const size_t at = i + 1 < N ? input.find(kPartMarker) : std::string_view::npos;
    parts[i] = input.substr(0, at);
    if (at == std::string_view::npos) break;
    input.remove_prefix(at + kPartMarker.size());
  }
  return parts;
}

}  // namespace stretch::fuzz

// Defines libFuzzer's entry point as `fn` in the libFuzzer programs; nothing in the replay test.
#ifdef STRETCH_FUZZ_LIBFUZZER
#define STRETCH_FUZZ_TARGET(fn) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fn(data, size); }
#else
#define STRETCH_FUZZ_TARGET(fn)
#endif
