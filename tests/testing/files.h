// Test helpers for files and errors: a fresh temporary directory per test, whole-file reads and
// writes, and the message of the stretch::Error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "src/core/error.h"

namespace stretch::testing {

// A fixture whose test gets its own empty directory (the prefix, the process id and the test's
// name keep concurrent runs apart), removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (prefix_ + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to the file `name` in the test's directory and returns its path.
  std::string File(const std::string& name, const std::string& bytes) const;

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

// The directory `prefix` + the process id under the test temporary directory, created (empty the
// first time) on the first call and removed with what is in it when the test program exits. For
// files that several tests of one program share or that a helper writes outside a TempDirTest:
// ctest runs each test in a process of its own, so a directory that is never removed is left
// behind once per test. A forked child that exits leaves it alone (the parent still uses it).
inline std::filesystem::path ProgramTempDir(const std::string& prefix) {
  struct Registry {
    pid_t owner = getpid();
    std::vector<std::filesystem::path> dirs;
    std::mutex mu;
    ~Registry() {
      if (getpid() != owner) return;
      for (const std::filesystem::path& d : dirs) {
        std::error_code ec;  // nothing to report at exit: a directory already gone is fine
        std::filesystem::remove_all(d, ec);
      }
    }
  };
  static Registry registry;
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / (prefix + std::to_string(getpid()));
  std::lock_guard<std::mutex> lock(registry.mu);
  if (std::find(registry.dirs.begin(), registry.dirs.end(), dir) == registry.dirs.end()) {
    registry.dirs.push_back(dir);
    std::filesystem::remove_all(dir);  // a former process with the same id left it
  }
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string TempDirTest::File(const std::string& name, const std::string& bytes) const {
  const std::string path = Path(name);
  WriteBytes(path, bytes);
  return path;
}

// Runs f, which must throw stretch::Error, and returns its message (a test failure and "" when
// nothing is thrown).
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected stretch::Error";
  return {};
}

}  // namespace stretch::testing
