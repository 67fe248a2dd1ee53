// Test helpers for files and errors: a fresh temporary directory per test, whole-file reads and
// writes, and the message of the stretch::Error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

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
